{{ header }}
//
// gemm, engine wgmma (sm_90a only): D = epilogue(A . B) with A M x K and B K x N ({{ dtype }} in,
// {{ out_dtype }} out, f32 accumulation), layout {{ layout }}, epilogue = [{{ epilogue | join(sep=", ") }}].
// Block tile {{ tile_m }}x{{ tile_n }}x{{ tile_k }}: warpgroup 0 issues TMA loads into a {{ stages }}-stage ring of shared
// memory (128-byte swizzle, full/empty mbarriers); {% if pingpong %}warpgroups 1 and 2 each own whole tiles, {{ tile_m }} rows x {{ tile_n }} columns,
{%- elif consumers == 1 %}warpgroup 1 owns the 64 rows x {{ tile_n }} columns{% else %}warpgroups 1 and 2 each own 64 rows x {{ tile_n }} columns{% endif %}
// and run wgmma.mma_async m64n{{ tile_n }}k16 from shared-memory descriptors. Persistent: each block
// loops over output tiles in groups of {{ group_m }} tile rows. Epilogue: registers -> swizzled shared
// memory -> TMA store ({{ epi_rounds }} round(s) of {{ epi_cols }} columns per consumer), while the producer
// already loads the next tile.{% if has_bias %} Producer warp 1 stages each tile's bias in shared memory.{% endif %}
{%- if pingpong %}
// Ping-pong: the two consumer warpgroups take the block's tiles in turn, so that one's epilogue
// runs while the other's wgmmas keep the tensor cores busy; the ring holds the tiles' stages in
// order and each consumer steps over the other's.
{%- endif %}
{%- if swap %}
// Swap-AB (skinny GEMMs): D's tile is {{ tile_n }} rows x {{ tile_m }} columns and wgmma computes its transpose, B's
// columns (the weights) on wgmma's m and A's {{ tile_n }} rows (the tokens) on its n, so a stage holds {{ tile_m }}
// rows of B beside {{ tile_n }} of A; the epilogue stages D transposed. Inside, M and N, tiles and maps are
// the wgmma's: M counts D's columns, N its rows.
{%- endif %}
{%- if multicast > 1 %}
// Multicast: clusters of {{ multicast }} blocks take {{ multicast }} tiles of D side by side along N, which share
// A's rows ({% if swap %}wgmma's B: the tiles are adjacent along its m{% else %}wgmma's A: the tiles are adjacent along its n{% endif %}); rank 0 loads each stage of those once for
// all of them (TMA multicast), so they cross L2 once per cluster, and it refills a stage only
// after every block's consumers released it.
{%- endif %}
{%- if split_k > 1 %}
// Split-K: clusters of {{ split_k }} blocks walk the tiles; each block sums its share of the k blocks (A in
// {{ a_box_outer }}-row boxes, only those that reach into M), ranks 1..{{ split_k - 1 }} leave their f32 partial tiles in
// their shared memory, and rank 0 adds them (ld.shared::cluster) before the epilogue.
{%- endif %}
//
// Runtime requirements (the launcher checks them; sizes in elements):
{%- for r in requirements %}
//   - {{ r }}
{%- endfor %}
// Tensor maps (cuTensorMapEncodeTiled; dims innermost first, strides in elements; 128-byte
// swizzle{% if b_sw64 or b_tail or d_sw64 %} (64-byte for the boxes of 32 16-bit columns){% endif %}, no interleave, 256-byte L2 promotion, zero fill):
{%- for m in tensor_maps %}
//   - {{ m }}
{%- endfor %}
// Edges need no padding: TMA zero-fills what lies past M, N and K on the way in and clips the
// stores on the way out.

{% include "prelude.cuh" %}

typedef {{ T }} T;    // A and B
typedef {{ OT }} OT;  // D, C and bias
// The epilogue's operands beside the accumulator (ops/gemm/sm90.rs).
#define TG_HAS_BIAS {{ has_bias }}
#define TG_HAS_RESIDUAL {{ has_residual }}
#define TG_HAS_SCALE {{ has_scale }}
#define TG_OUT_F32 {{ out_f32 }}
#define TG_CVT_OUT "cvt.rn.{{ out_dtype }}x2.f32 %0, %1, %2;"

namespace cfg {
constexpr int BM = {{ tile_m }}, BN = {{ tile_n }}, BK = {{ tile_k }};
constexpr int STAGES = {{ stages }};
constexpr int GROUP_M = {{ group_m }};
constexpr int ACC = {{ acc_regs }};  // f32 accumulators per consumer thread (m64 x BN / 128)
// Operand order in shared memory: K-major = k contiguous (128-byte rows of 64 k);
// MN-major = m (or n) contiguous, read by wgmma with its transpose bit.
constexpr bool A_K_MAJOR = {{ a_k_major }};
constexpr bool B_K_MAJOR = {{ b_k_major }};
constexpr int A_LOADS = {{ a_loads }};  // TMA boxes per stage
constexpr int B_LOADS = {{ b_loads }};
constexpr unsigned BOX_BYTES = 64 * 128;  // one 64-row box of 128-byte rows
constexpr unsigned A_STAGE_BYTES = {{ a_stage_bytes }};
constexpr unsigned B_STAGE_BYTES = {{ b_stage_bytes }};
constexpr unsigned STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;
constexpr int D_BOX_COLS = {{ d_box_cols }};  // output columns per 128-byte store box
constexpr int EPI_COLS = {{ epi_cols }};      // columns staged per round
constexpr int EPI_ROUNDS = {{ epi_rounds }};
constexpr unsigned STAGING_BYTES = {{ staging_bytes }};  // per consumer
constexpr unsigned BIAS_OFFSET = {{ bias_offset }};  // two slots of a tile's bias as f32 (bias only)
constexpr unsigned BIAS_SLOT_BYTES = {{ bias_slot_bytes }};
constexpr unsigned BARRIER_OFFSET = {{ barrier_offset }};
{%- if b_sw64 %}
constexpr unsigned B_BOX_BYTES = {{ b_box_rows }}u * 128u;  // N-major B: a box of {{ b_box_rows }} columns by 64 k rows (64-byte rows)
{%- endif %}
{%- if b_tail %}
// N-major B: B_LOADS boxes of 64 columns, then the tile's last 32 columns in a box of 64 k rows
// of 64-byte rows (b_tail_map), read by a second wgmma of n 32.
constexpr int B_MAIN_COLS = {{ tile_n - 32 }};
constexpr unsigned B_TAIL_OFFSET = B_LOADS * BOX_BYTES;
constexpr unsigned B_TAIL_BYTES = 32u * 128u;
{%- endif %}
{%- if d_sw64 %}
constexpr unsigned D_BOX_BYTES = 64u * D_BOX_COLS * sizeof(OT);  // a D (C) box of 64 rows of 64-byte rows
{%- endif %}
static_assert(A_STAGE_BYTES == (unsigned)A_LOADS * {{ a_box_outer }}u * 128u, "A boxes fill the stage");
static_assert(B_STAGE_BYTES == (unsigned)B_LOADS * {{ b_box_rows }}u * 128u{% if b_tail %} + B_TAIL_BYTES{% endif %}, "B boxes fill the stage");
{%- if swap %}
static_assert(STAGING_BYTES == (unsigned)BN * 64u * sizeof(OT), "staging holds D's tile rows x a consumer's 64 columns");
static_assert(EPI_COLS == 64 && EPI_ROUNDS == 1 && 64 % D_BOX_COLS == 0, "one round of whole boxes");
{%- else %}
static_assert(STAGING_BYTES == 64u * EPI_COLS * sizeof(OT), "staging holds 64 rows of a round");
static_assert(EPI_COLS % D_BOX_COLS == 0 && EPI_COLS * EPI_ROUNDS == BN, "rounds cover the tile in whole boxes");
{%- endif %}
}  // namespace cfg

{% include "sm90.cuh" %}
{% raw -%}
// ---- TMA helpers ----
// 2-D TMA box load into shared memory; completes `bar`'s transaction bytes. Out-of-bounds
// elements arrive as zeros (and still count).
__device__ __forceinline__ void tg_tma_load(unsigned dst, const TgTensorMap* map, unsigned bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
// tg_tma_load into the same offsets of every block of the cluster in `mask` (bit r: rank r),
// completing each one's `bar` at the same offset.
__device__ __forceinline__ void tg_tma_load_multicast(unsigned dst, const TgTensorMap* map, unsigned bar, int c0, int c1,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask) : "memory");
}
// 2-D TMA box store from shared memory; parts past the tensor's edges are not written.
__device__ __forceinline__ void tg_tma_store(const TgTensorMap* map, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map),
                 "r"(src), "r"(c0), "r"(c1) : "memory");
}
{%- endraw %}
{%- if b_tail %}

// tg_wgmma: acc[0, {{ acc_regs - 16 }}) (+)= A(64 x 16, descriptor da) . B(16 x {{ tile_n - 32 }}, descriptor db), the
// tile's columns before the tail; tg_wgmma_tail: acc[{{ acc_regs - 16 }}, {{ acc_regs }}) (+)= A . B(16 x 32), its last
// 32 columns (b_tail_map; wgmma's accumulators go 8 columns to 4 registers, so these follow).
// scale_d = 0 overwrites. Transpose bits: A {{ a_trans }}, B {{ b_trans }} (1 = MN-major operand).
{%- else %}

// acc (+)= A(64 x 16, descriptor da) . B(16 x {{ tile_n }}, descriptor db); scale_d = 0 overwrites.
// Transpose bits: A {{ a_trans }}, B {{ b_trans }} (1 = MN-major operand).
{%- endif %}
{%- for part in wgmma_parts %}
__device__ __forceinline__ void {{ part.name }}(float (&d)[cfg::ACC], unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %{{ part.regs + 2 }}, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n{{ part.n }}k16.f32.{{ wgmma_type }}.{{ wgmma_type }} "
        "{ {% for i in range(end=part.regs) %}%{{ i }}{% if not loop.last %}, {% endif %}{% endfor %} }, "
        "%{{ part.regs }}, %{{ part.regs + 1 }}, p, 1, 1, {{ a_trans }}, {{ b_trans }};\n}\n"
        : {% for i in range(end=part.regs) %}"+f"(d[{{ part.first + i }}]){% if not loop.last %}, {% endif %}{% endfor %}
        : "l"(da), "l"(db), "r"(scale_d));
}
{%- endfor %}

// Two adjacent output-typed values from shared memory (the residual C, staged by TMA).
template <typename O> __device__ __forceinline__ void tg_ld_shared_pair(unsigned addr, float& x, float& y) {
    if constexpr (TG_OUT_F32) {
        asm volatile("ld.shared.v2.f32 { %0, %1 }, [%2];" : "=f"(x), "=f"(y) : "r"(addr) : "memory");
    } else {
        unsigned u;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(u) : "r"(addr) : "memory");
        O lo, hi;
        lo.bits = (unsigned short)(u & 0xffffu);
        hi.bits = (unsigned short)(u >> 16);
        x = tg_to_float(lo);
        y = tg_to_float(hi);
    }
}

// Two adjacent output values into shared memory (one 4- or 8-byte store).
__device__ __forceinline__ void tg_st_shared_pair(unsigned addr, float x, float y) {
    if constexpr (TG_OUT_F32) {
        asm volatile("st.shared.v2.f32 [%0], { %1, %2 };" ::"r"(addr), "f"(x), "f"(y) : "memory");
    } else {
        unsigned u;  // cvt packs its first source into the upper half
        asm(TG_CVT_OUT : "=r"(u) : "f"(y), "f"(x));
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(u) : "memory");
    }
}

{%- if swap %}

// One output-typed value from / into shared memory (a thread's two adjacent accumulators are
// one column of D's transpose: two rows of D).
template <typename O> __device__ __forceinline__ float tg_ld_shared_one(unsigned addr) {
    if constexpr (TG_OUT_F32) {
        float x;
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(x) : "r"(addr) : "memory");
        return x;
    } else {
        unsigned short u;
        asm volatile("ld.shared.b16 %0, [%1];" : "=h"(u) : "r"(addr) : "memory");
        O v;
        v.bits = u;
        return tg_to_float(v);
    }
}
__device__ __forceinline__ void tg_st_shared_one(unsigned addr, float x) {
    if constexpr (TG_OUT_F32) {
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(x) : "memory");
    } else {
        unsigned short u;
        asm("cvt.rn.{{ out_dtype }}.f32 %0, %1;" : "=h"(u) : "f"(x));
        asm volatile("st.shared.b16 [%0], %1;" ::"r"(addr), "h"(u) : "memory");
    }
}
{%- endif %}

{% include "epilogue.cuh" %}
{% raw %}
// Grouped tile order: GROUP_M consecutive tile rows sweep the tile columns together, so the
// blocks in flight share A and B panels in L2.
__device__ __forceinline__ void tg_tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int per_group = cfg::GROUP_M * tiles_n;
    const int group = t / per_group;
    const int first = group * cfg::GROUP_M;
    const int rows = min(tiles_m - first, cfg::GROUP_M);
    const int r = t - group * per_group;
    tm = first + r % rows;
    tn = r / rows;
}

// Byte address of output (row, col) in a consumer's staging buffer: boxes of ROW-byte rows
// (128, or 64 for a narrow tile's 16-bit D), box_bytes / ROW rows each (64, or with a swap the
// tile's few), 16-byte chunks XOR-swizzled as the TMA's ROW-byte swizzle expects: by row % 8
// for 128, by (row / 2) % 4 for 64, the pattern repeating every 1024 / 512 bytes (the pair
// stores of a warp then hit distinct banks).
template <unsigned ROW = 128>
__device__ __forceinline__ unsigned tg_staging_addr(unsigned base, int row, int col, unsigned box_bytes) {
    const unsigned byte = (unsigned)col * (unsigned)sizeof(OT);
    const unsigned box = byte / ROW, within = byte % ROW;
    const unsigned chunk = (within / 16u) ^ (((unsigned)row / (128u / ROW)) % (ROW / 16u));
    return base + box * box_bytes + (unsigned)row * ROW + chunk * 16u + within % 16u;
}
{% endraw %}

// The whole kernel. Without a residual `c_map` is any map (never read), without a bias `bias`
// is null, without `scale` `alpha` is 1.
__device__ __forceinline__ void tg_gemm_sm90(const TgTensorMap& a_map, const TgTensorMap& b_map,{% if b_tail %} const TgTensorMap& b_tail_map,{% endif %} const TgTensorMap& c_map,
                                             const TgTensorMap& d_map, const OT* __restrict__ bias, long long m,
                                             long long n, long long k, float alpha) {
    using namespace cfg;
    // Split-K: the SPLIT_K blocks of a cluster take the same tiles, each a share of the k
    // blocks; rank 0 adds the others' partial tiles (64 x BN f32 per consumer, read from their
    // shared memory) to its own and runs the epilogue. (Kernel constants: NVRTC emits a global
    // for each namespace-scope one.)
    constexpr int SPLIT_K = {{ split_k }};
    // Multicast: blocks per cluster sharing each B stage (1: none).
    constexpr int MULTICAST = {{ multicast }};
    // Which of wgmma's operands holds D's rows, shared by a multicast cluster: A, or with a
    // swap B.
    constexpr bool SHARE_A = {% if swap %}false{% else %}true{% endif %};
    constexpr bool CLUSTERED = SPLIT_K > 1 || MULTICAST > 1;
    static_assert(SPLIT_K == 1 || MULTICAST == 1, "a cluster either splits K or shares B");
    constexpr int CONSUMERS = {{ consumers }};  // warpgroups 1.., 64 rows each
    constexpr unsigned PARTIAL_OFFSET = {{ partial_offset }};
    constexpr unsigned PARTIAL_BYTES = {{ partial_bytes }};  // per consumer (0 without a split)
    static_assert(SPLIT_K == 1 || PARTIAL_BYTES == 64u * BN * 4u, "a partial tile holds a consumer's accumulators");
    constexpr int A_BOX_ROWS = {{ a_box_outer }};  // K-major A: rows per TMA box
    constexpr unsigned A_BOX_BYTES = A_BOX_ROWS * 128u;
    extern __shared__ __align__(1024) unsigned char tg_smem_raw[];
    const unsigned base = (tg_smem_u32(tg_smem_raw) + 1023u) & ~1023u;  // 128-byte swizzle atoms
    const unsigned sA = base;
    const unsigned sB = sA + STAGES * A_STAGE_BYTES;
    const unsigned sC = sB + STAGES * B_STAGE_BYTES;
    const unsigned sBar = base + BARRIER_OFFSET;
    auto full = [=](int s) { return sBar + 8u * (unsigned)s; };
    auto empty = [=](int s) { return sBar + 8u * (unsigned)(STAGES + s); };
    // One more per consumer: its staged residual tile has arrived.
    [[maybe_unused]] auto c_full = [=](int cw) { return sBar + 8u * (unsigned)(2 * STAGES + cw); };
    // A bias slot is filled (producer warp 1) / read by the consumers.
    [[maybe_unused]] auto bias_full = [=](int slot) { return sBar + 8u * (unsigned)(2 * STAGES + 2 + slot); };
    [[maybe_unused]] auto bias_empty = [=](int slot) { return sBar + 8u * (unsigned)(2 * STAGES + 4 + slot); };
    [[maybe_unused]] const unsigned sBias = base + BIAS_OFFSET;
    // Split-K: a consumer's partial tile is written (count: its warpgroup in every other
    // block, on rank 0's barrier) / has been read by rank 0 (count: rank 0's warpgroup).
    [[maybe_unused]] auto partial_full = [=](int cw) { return sBar + 8u * (unsigned)(2 * STAGES + 6 + cw); };
    [[maybe_unused]] auto partial_empty = [=](int cw) { return sBar + 8u * (unsigned)(2 * STAGES + 8 + cw); };

    const int wg = threadIdx.x / 128;
    const int tid = threadIdx.x % 128;
    [[maybe_unused]] const unsigned mc_rank = MULTICAST > 1 ? tg_cluster_rank() : 0u;
    [[maybe_unused]] constexpr unsigned short mc_mask = (unsigned short)((1u << MULTICAST) - 1u);  // every block
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            tg_mbar_init(full(s), 1);   // the producer's expect_tx arrive
            // One arrive per consumer warpgroup; with multicast rank 0's count those of every
            // block, whose B stages it fills.
{%- if pingpong %}
            tg_mbar_init(empty(s), 1);  // ping-pong: the consumer whose tile the stage holds
{%- else %}
            tg_mbar_init(empty(s), CONSUMERS * (MULTICAST > 1 && mc_rank == 0 ? MULTICAST : 1));
{%- endif %}
        }
        tg_mbar_init(c_full(0), 1);
        tg_mbar_init(c_full(1), 1);
        if constexpr (TG_HAS_BIAS) {
            for (int slot = 0; slot < 2; ++slot) {
                tg_mbar_init(bias_full(slot), 32);                // every lane of producer warp 1
                tg_mbar_init(bias_empty(slot), 128 * {% if pingpong %}1{% else %}CONSUMERS{% endif %});  // every consumer thread{% if pingpong %} of the slot's tile{% endif %}
            }
        }
        if constexpr (SPLIT_K > 1) {
            for (int cw = 0; cw < 2; ++cw) {
                tg_mbar_init(partial_full(cw), 128u * (SPLIT_K - 1));
                tg_mbar_init(partial_empty(cw), 128u);
            }
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        tg_prefetch_map(&a_map);
        tg_prefetch_map(&b_map);
{%- if b_tail %}
        tg_prefetch_map(&b_tail_map);
{%- endif %}
        if constexpr (TG_HAS_RESIDUAL) tg_prefetch_map(&c_map);
        tg_prefetch_map(&d_map);
    }
    // In a cluster, the other blocks' barriers must be initialised before anyone arrives on
    // them (or multicasts into their stages).
    if constexpr (CLUSTERED) {
        tg_cluster_sync();
    } else {
        __syncthreads();
    }

    const int M = (int)m, N = (int)n, K = (int)k;
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    // Multicast: the tile order walks groups of MULTICAST tiles along the unshared operand's
    // side, one group per cluster, each block taking the tile of its rank (tiles past the
    // edge load zeros and store nothing).
    const int tiles_mc = SHARE_A ? tiles_m : (tiles_m + MULTICAST - 1) / MULTICAST;
    const int tiles_nc = SHARE_A ? (tiles_n + MULTICAST - 1) / MULTICAST : tiles_n;
    const int total = tiles_mc * tiles_nc;
    const int nk = (K + BK - 1) / BK;  // the last k block's tail is zero-filled
    // The tiles this block walks, and its k blocks of each: with split-K, a cluster walks the
    // tiles and its ranks take consecutive shares of k.
    auto first_tile = [] { return CLUSTERED ? (int)tg_cluster_id() : (int)blockIdx.x; };
    auto tile_step = [] { return CLUSTERED ? (int)tg_cluster_count() : (int)gridDim.x; };
    auto coords = [=](int t, int& tm, int& tn) {
        tg_tile_coords(t, tiles_mc, tiles_nc, tm, tn);
        if (SHARE_A) {
            tn = tn * MULTICAST + (int)mc_rank;
        } else {
            tm = tm * MULTICAST + (int)mc_rank;
        }
    };
    int kb_begin = 0, kb_end = nk;
    [[maybe_unused]] unsigned rank = mc_rank;
    if constexpr (SPLIT_K > 1) {
        rank = tg_cluster_rank();
        const int share = (nk + SPLIT_K - 1) / SPLIT_K;
        kb_begin = min(nk, (int)rank * share);
        kb_end = min(nk, kb_begin + share);
    }
{% if inflight_budget > 0 %}
    // The ring positions in use: enough for the grid to keep {{ inflight_budget }} bytes of loads in
    // flight, at least {{ min_depth }}. More than that over many blocks made the DRAM slower. Any
    // depth from 1 to STAGES is correct (all threads compute the same); it only sets the speed.
    const int depth = min(STAGES, max({{ min_depth }}, (int)({{ inflight_budget }}u / (gridDim.x * STAGE_BYTES))));
{% endif %}
    if (wg == 0) {
        // ---------------- producer: one thread issues every TMA load ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 {{ producer_regs }};");
        if (tid == 0) {
            int s = 0;
            unsigned phase = 0;
            for (int t = first_tile(); t < total; t += tile_step()) {
                int tm, tn;
                coords(t, tm, tn);
                // Split-K (skinny GEMMs), K-major A: only the boxes of A_BOX_ROWS that reach into M.
                // The stale rows past them feed accumulator rows that are never stored.
                [[maybe_unused]] const int a_boxes = min(A_LOADS, (M - tm * BM + A_BOX_ROWS - 1) / A_BOX_ROWS);
                const unsigned stage_bytes =
                    SPLIT_K > 1 && A_K_MAJOR ? a_boxes * A_BOX_BYTES + B_STAGE_BYTES : STAGE_BYTES;
                for (int kb = kb_begin; kb < kb_end; ++kb) {
                    tg_mbar_wait(empty(s), phase ^ 1u);  // a fresh barrier passes parity 1
                    tg_mbar_expect_tx(full(s), stage_bytes);
                    const unsigned a_dst = sA + s * A_STAGE_BYTES, b_dst = sB + s * B_STAGE_BYTES;
#pragma unroll
                    for (int box = 0; box < A_LOADS; ++box) {
                        if (A_K_MAJOR) {
                            if constexpr (SPLIT_K > 1) {
                                if (box < a_boxes)
                                    tg_tma_load(a_dst + box * A_BOX_BYTES, &a_map, full(s), kb * BK, tm * BM + box * A_BOX_ROWS);
                            } else if (MULTICAST > 1 && SHARE_A) {
                                if (rank == 0)
                                    tg_tma_load_multicast(a_dst, &a_map, full(s), kb * BK, tm * BM, mc_mask);
                            } else {
                                tg_tma_load(a_dst, &a_map, full(s), kb * BK, tm * BM);  // {64 k, BM rows}
                            }
                        } else if (MULTICAST > 1 && SHARE_A) {
                            if (rank == 0)
                                tg_tma_load_multicast(a_dst + box * BOX_BYTES, &a_map, full(s), tm * BM + 64 * box, kb * BK,
                                                      mc_mask);
                        } else {
                            tg_tma_load(a_dst + box * BOX_BYTES, &a_map, full(s), tm * BM + 64 * box, kb * BK);
                        }
                    }
#pragma unroll
                    for (int box = 0; box < B_LOADS; ++box) {
                        if (MULTICAST > 1 && !SHARE_A) {
                            // Swap-AB tiles' B (D's rows) is K-major: rank 0 loads it for all.
                            if (rank == 0)
                                tg_tma_load_multicast(b_dst + box * BOX_BYTES, &b_map, full(s), kb * BK, tn * BN + 64 * box,
                                                      mc_mask);
                        } else if (B_K_MAJOR) {
                            tg_tma_load(b_dst + box * BOX_BYTES, &b_map, full(s), kb * BK, tn * BN + 64 * box);
                        } else {
                            tg_tma_load(b_dst + box * {% if b_sw64 %}B_BOX_BYTES{% else %}BOX_BYTES{% endif %}, &b_map, full(s), tn * BN + {% if b_sw64 %}{{ b_box_rows }}{% else %}64{% endif %} * box, kb * BK);
                        }
                    }
{%- if b_tail %}
                    tg_tma_load(b_dst + B_TAIL_OFFSET, &b_tail_map, full(s), tn * BN + B_MAIN_COLS, kb * BK);
{%- endif %}
                    if (++s == {{ ring_end }}) {
                        s = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
        else if (TG_HAS_BIAS && tid / 32 == 1 && (SPLIT_K == 1 || rank == 0)) {
            {#- bias_half: the chain adds the bias and applies GELU in one step from half of both (src/ops/epilogue.rs, halvable_bias) #}
            // Warp 1: each tile's bias columns, as f32 (0 past N), into a two-slot ring, up to
            // two tiles ahead, so that the epilogue reads them from shared memory instead of
            // waiting on global loads while the tensor cores idle. (Split-K: only rank 0 runs
            // the epilogue.)
            const int lane = tid % 32;
            int slot = 0;
            unsigned bphase = 0;
            for (int t = first_tile(); t < total; t += tile_step()) {
                int tm, tn;
                coords(t, tm, tn);
                tg_mbar_wait(bias_empty(slot), bphase ^ 1u);
                const unsigned dst = sBias + slot * BIAS_SLOT_BYTES;
#pragma unroll
{%- if swap %}
                for (int i = lane; i < BM; i += 32) {  // D's columns are the tile's rows
                    const int col = tm * BM + i;
                    const float v = {% if bias_half %}0.5f * ({% endif %}col < M ? tg_to_float(bias[col]) : 0.0f{% if bias_half %}){% endif %};
{%- else %}
                for (int i = lane; i < BN; i += 32) {
                    const int col = tn * BN + i;
                    const float v = {% if bias_half %}0.5f * ({% endif %}col < N ? tg_to_float(bias[col]) : 0.0f{% if bias_half %}){% endif %};
{%- endif %}
                    asm volatile("st.shared.f32 [%0], %1;" ::"r"(dst + 4u * i), "f"(v) : "memory");
                }
                tg_mbar_arrive(bias_full(slot));  // releases this lane's stores
                if (++slot == 2) {
                    slot = 0;
                    bphase ^= 1u;
                }
            }
        }
    } else {
        // ---------------- consumers: 64 rows x BN columns each ----------------
        asm volatile("setmaxnreg.inc.sync.aligned.u32 {{ consumer_regs }};");
        const int cw = wg - 1;
        const int warp = tid / 32, lane = tid % 32;
        const unsigned staging = sC + cw * STAGING_BYTES;
        const float alpha_v = TG_HAS_SCALE ? alpha : 1.0f;
        float acc[ACC];
{%- if units > 1 %}
        float acc1[ACC];  // the consumer's second 64 rows
{%- endif %}
        int s = 0;
        unsigned phase = 0;
        [[maybe_unused]] unsigned c_phase = 0;
{%- if pingpong %}
        // Tile i of the block fills bias slot i % 2: consumer cw's tiles use slot cw.
        [[maybe_unused]] int bias_slot = cw;
{%- else %}
        [[maybe_unused]] int bias_slot = 0;
{%- endif %}
        [[maybe_unused]] unsigned bias_phase = 0;
        [[maybe_unused]] unsigned partial_phase = 0;
        // A stage is read: tell this block's producer and, with multicast, rank 0's, which
        // refills the B part of every block's stage.
        auto release = [=](int stage) {
            tg_mbar_arrive(empty(stage));
            if (MULTICAST > 1 && rank != 0) tg_mbar_arrive_remote(tg_cluster_addr(empty(stage), 0));
        };
{%- if pingpong %}
        // Ping-pong: step the ring over the stages of one tile of the other consumer.
        auto skip_tile = [&] {
            const int next = s + (kb_end - kb_begin);
            s = next % STAGES;
            phase ^= (unsigned)(next / STAGES) & 1u;
        };
        if (cw == 1) skip_tile();  // the block's first tile is consumer 0's
        // The consumers' main loops take turns (named barrier 3 + cw: consumer cw's turn), each
        // starting once the other has waited for every stage of its tile. Beyond ordering the
        // tensor cores' work, the turn keeps a consumer from waiting on a stage's barrier more
        // than one phase ahead, which a parity wait could not tell from the phase before.
        bool first_turn = cw == 0;
        for (int t = first_tile() + cw * tile_step(); t < total; t += 2 * tile_step()) {
{%- else %}
        for (int t = first_tile(); t < total; t += tile_step()) {
{%- endif %}
            int tm, tn;
            coords(t, tm, tn);
{%- if pingpong %}
            if (!first_turn) tg_named_barrier(3 + cw, 256);
            first_turn = false;
{%- endif %}
            // Split-K serves skinny GEMMs: a consumer whose 64 rows all lie past M only
            // releases the stages (in every block of the cluster alike: same tile).
            const bool idle = SPLIT_K > 1 && tm * BM + cw * 64 >= M;
{%- if has_residual %}
            // The residual C of the tile's first 64 rows comes in by TMA while the main loop
            // runs, once the last tile's stores have read the staging buffer: loaded in the
            // epilogue, its DRAM latency stood between the last wgmma and the stores.
            const bool load_c = !idle && (SPLIT_K == 1 || rank == 0) && tid == 0;
            auto issue_c = [&]() {
                tg_bulk_wait_read();
                tg_mbar_expect_tx(c_full(cw), STAGING_BYTES);
{%- if swap %}
#pragma unroll
                for (int box = 0; box < 64 / D_BOX_COLS; ++box)
                    tg_tma_load(staging + box * (BN * 128u), &c_map, c_full(cw), tm * BM + cw * 64 + box * D_BOX_COLS, tn * BN);
{%- else %}
#pragma unroll
                for (int box = 0; box < EPI_COLS / D_BOX_COLS; ++box)
                    tg_tma_load(staging + box * {% if d_sw64 %}D_BOX_BYTES{% else %}BOX_BYTES{% endif %}, &c_map, c_full(cw), tn * BN + box * D_BOX_COLS, tm * BM + {{ a_slice }} * 64);
{%- endif %}
            };
{%- if c_mid_loop %}
            // Issued halfway through the k loop, when those reads are long done (at the
            // loop's start, waiting for them delayed the first wgmma); before it without k.
            const int c_kb = kb_begin + (kb_end - kb_begin) / 2;
            if (load_c && kb_end == kb_begin) issue_c();
{%- else %}
            if (load_c) issue_c();
{%- endif %}
{%- endif %}
            int prev = 0;
            if (!idle) {
                for (int kb = kb_begin; kb < kb_end; ++kb) {
                    tg_mbar_wait(full(s), phase);
                    tg_reg_fence(acc);
{%- if units > 1 %}
                    tg_reg_fence(acc1);
{%- endif %}
                    tg_wgmma_fence();
                    const unsigned a_s = sA + s * A_STAGE_BYTES, b_s = sB + s * B_STAGE_BYTES;
#pragma unroll
                    for (int kk = 0; kk < BK / 16; ++kk) {
                        // K-major: rows of 128 bytes, k16 = +32 bytes, 8-row atoms 1024 apart.
                        // MN-major: k16 = 16 rows of 128 bytes, 64-wide chunks BOX_BYTES apart.
                        const unsigned long long da = A_K_MAJOR
                            ? tg_desc(a_s + {{ a_slice }} * 64 * 128 + kk * 32, 16, 1024)
                            : tg_desc(a_s + {{ a_slice }} * BOX_BYTES + kk * 2048, BOX_BYTES, 1024);
                        const unsigned long long db = B_K_MAJOR
                            ? tg_desc(b_s + kk * 32, 16, 1024)
                            : {% if b_sw64 %}tg_desc<2>(b_s + kk * 1024, B_BOX_BYTES, 512){% else %}tg_desc(b_s + kk * 2048, BOX_BYTES, 1024){% endif %};
                        tg_wgmma(acc, da, db, ((kb - kb_begin) | kk) != 0);
{%- if b_tail %}
                        // The tail box: one 64-byte swizzle panel of 32 columns, k16 = 16 rows of 64 bytes.
                        const unsigned long long db_tail = tg_desc<2>(b_s + B_TAIL_OFFSET + kk * 1024, B_TAIL_BYTES, 512);
                        tg_wgmma_tail(acc, da, db_tail, ((kb - kb_begin) | kk) != 0);
{%- endif %}
{%- if units > 1 %}
                        // The consumer's second 64 rows of A, against the same B.
                        const unsigned long long da1 = A_K_MAJOR
                            ? tg_desc(a_s + {{ a_slice1 }} * 64 * 128 + kk * 32, 16, 1024)
                            : tg_desc(a_s + {{ a_slice1 }} * BOX_BYTES + kk * 2048, BOX_BYTES, 1024);
                        tg_wgmma(acc1, da1, db, ((kb - kb_begin) | kk) != 0);
{%- endif %}
                    }
                    tg_wgmma_commit();
                    tg_reg_fence(acc);
{%- if units > 1 %}
                    tg_reg_fence(acc1);
{%- endif %}
                    // Keep one k block of wgmma in flight; release the stage the previous one read.
                    if (kb > kb_begin) {
                        tg_wgmma_wait<1>();
                        tg_reg_fence(acc);
{%- if units > 1 %}
                        tg_reg_fence(acc1);
{%- endif %}
                        if (tid == 0) release(prev);
                    }
{%- if c_mid_loop %}
                    if (load_c && kb == c_kb) issue_c();
{%- endif %}
                    prev = s;
                    if (++s == {{ ring_end }}) {
                        s = 0;
                        phase ^= 1u;
                    }
                }
            } else {
                for (int kb = kb_begin; kb < kb_end; ++kb) {
                    tg_mbar_wait(full(s), phase);
                    // Only thread 0 releases the stage, so nothing else holds the four warps
                    // together (no wgmma here): without this barrier a warp that fell a whole
                    // ring behind would wait on a parity that its stage has already passed
                    // twice, for ever.
                    tg_named_barrier(1 + cw, 128);
                    if (tid == 0) tg_mbar_arrive(empty(s));
                    if (++s == {{ ring_end }}) {
                        s = 0;
                        phase ^= 1u;
                    }
                }
            }
{%- if pingpong %}
            if (t + tile_step() < total) tg_bar_arrive(4 - cw, 256);  // the other's next tile: its turn
{%- endif %}
            // Unconditional, so that ptxas sees no wgmma in flight past this point on any path
            // (it would inject a wait of its own, C7517).
            tg_wgmma_wait<0>();
            tg_reg_fence(acc);
{%- if units > 1 %}
            tg_reg_fence(acc1);
{%- endif %}
            if (!idle && kb_end > kb_begin && tid == 0) release(prev);
{%- if pingpong %}
            skip_tile();  // the other consumer's next tile
{%- endif %}
            // K = 0 (or this block's share of it empty): D = epilogue(0).
            const bool has_k = kb_end > kb_begin;
{%- if swap %}
            // Selected per output in the epilogue: zeroing the accumulators, as the other tiles
            // do, measured mixed here (plain faster, bias+GELU slower; bench/hopper-gemm/NOTES.md).
            // Split-K's partial tiles would need them zeroed.
            static_assert(SPLIT_K == 1, "swap-AB tiles take no split-K");
{%- else %}
            // The accumulators are zeroed on that path rather than selected per output in the
            // epilogue, where a select costs one instruction per output on every path (as many
            // as a plain 16-bit epilogue's conversions and stores together).
            if (!has_k) {
                tg_reg_zero(acc);
{%- if units > 1 %}
                tg_reg_zero(acc1);
{%- endif %}
            }
{%- endif %}
            if constexpr (SPLIT_K > 1) {
                // Thread tid's accumulators i..i+3 sit at float4 slot (i / 4) * 128 + tid of
                // the partial tile, so each thread of rank 0 reads what its twin wrote.
                const unsigned part = base + PARTIAL_OFFSET + cw * PARTIAL_BYTES + 16u * tid;
                if (!idle && rank != 0) {
                    tg_mbar_wait<true>(partial_empty(cw), partial_phase ^ 1u);  // rank 0 read the last one
#pragma unroll
                    for (int i = 0; i < ACC; i += 4) {
                        asm volatile("st.shared.v4.f32 [%0], { %1, %2, %3, %4 };" ::"r"(part + 2048u * (i / 4)),
                                     "f"(acc[i]), "f"(acc[i + 1]), "f"(acc[i + 2]), "f"(acc[i + 3])
                                     : "memory");
                    }
                    tg_mbar_arrive_cluster(tg_cluster_addr(partial_full(cw), 0));
                    partial_phase ^= 1u;
                } else if (!idle) {
                    tg_mbar_wait<true>(partial_full(cw), partial_phase);
                    partial_phase ^= 1u;
#pragma unroll 1
                    for (unsigned r = 1; r < (unsigned)SPLIT_K; ++r) {
                        const unsigned src = tg_cluster_addr(part, r);
#pragma unroll
                        for (int i = 0; i < ACC; i += 4) {
                            float x0, x1, x2, x3;
                            asm volatile("ld.shared::cluster.v4.f32 { %0, %1, %2, %3 }, [%4];"
                                         : "=f"(x0), "=f"(x1), "=f"(x2), "=f"(x3) : "r"(src + 2048u * (i / 4)) : "memory");
                            acc[i] += x0;
                            acc[i + 1] += x1;
                            acc[i + 2] += x2;
                            acc[i + 3] += x3;
                        }
                        tg_mbar_arrive_cluster(tg_cluster_addr(partial_empty(cw), r));
                    }
                }
                if (rank != 0) continue;  // rank 0 writes the tile
            }

{%- if swap %}
            // ---------------- epilogue: D transposed ----------------
            // acc[4g + 2h + e] is D's column tm*BM + cw*64 + warp*16 + lane/4 + 8h (a row of the
            // wgmma tile) and D's row tn*BN + 8g + 2(lane%4) + e.
            const int dcol0 = tm * BM + cw * 64;  // D's columns of this consumer
            const int drow0 = tn * BN;            // D's rows of the tile
            const int c_local = warp * 16 + lane / 4;
            if constexpr (TG_HAS_BIAS) tg_mbar_wait(bias_full(bias_slot), bias_phase);
            [[maybe_unused]] const unsigned bias_s = sBias + bias_slot * BIAS_SLOT_BYTES;
            if (!idle) {
                if (tid == 0) tg_bulk_wait_read();  // the last stores have read the staging buffer
                tg_named_barrier(1 + cw, 128);
                if constexpr (TG_HAS_RESIDUAL) {
                    tg_mbar_wait(c_full(cw), c_phase);  // loaded before the main loop
                    c_phase ^= 1u;
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int cs = c_local + 8 * h;  // column in the staging buffer
                    float b = 0.0f;
                    if constexpr (TG_HAS_BIAS) {
                        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(b) : "r"(bias_s + 4u * (cw * 64 + cs)) : "memory");
                    }
#pragma unroll
                    for (int g = 0; g < BN / 8; ++g) {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int rs = 8 * g + 2 * (lane % 4) + e;  // row in the staging buffer
                            const unsigned at = tg_staging_addr(staging, rs, cs, BN * 128u);
                            float r = 0.0f;
                            if constexpr (TG_HAS_RESIDUAL) r = tg_ld_shared_one<OT>(at);  // zeros past M and N
                            tg_st_shared_one(at, tg_epilogue(has_k ? acc[4 * g + 2 * h + e] : 0.0f, b, r, alpha_v));
                        }
                    }
                }
                tg_fence_async_smem();
                tg_named_barrier(1 + cw, 128);
                if (tid == 0) {
#pragma unroll
                    for (int box = 0; box < 64 / D_BOX_COLS; ++box) {
                        const int col0 = dcol0 + box * D_BOX_COLS;
                        if (col0 < M) tg_tma_store(&d_map, staging + box * (BN * 128u), col0, drow0);
                    }
                    tg_bulk_commit();
                }
            }
{%- else %}
            // ---------------- epilogue ----------------
            // Thread layout of an m64nBN accumulator: acc[4g + 2h + e] is row warp*16 + lane/4 + 8h,
            // column 8g + 2(lane%4) + e.
            const int row0 = tm * BM + {{ a_slice }} * 64;
            const int r_local = warp * 16 + lane / 4;
            if constexpr (TG_HAS_BIAS) tg_mbar_wait(bias_full(bias_slot), bias_phase);
            [[maybe_unused]] const unsigned bias_s = sBias + bias_slot * BIAS_SLOT_BYTES;
{%- for unit in range(end=units) %}
{%- if unit == 0 %}{% set acc_u = "acc" %}{% set row_u = "row0" %}{% else %}{% set acc_u = "acc1" %}{% set row_u = "(row0 + 64)" %}
            // The consumer's second 64 rows, through the same staging buffer.
{%- endif %}
#pragma unroll
            for (int round = 0; round < EPI_ROUNDS; ++round) {
                if (idle) break;  // no rows of D here
                if (tid == 0) tg_bulk_wait_read();  // the last stores have read the staging buffer
                tg_named_barrier(1 + cw, 128);
                if constexpr (TG_HAS_RESIDUAL) {
                    // C's part of the round arrives by TMA in the layout D leaves in: each thread
                    // reads its pairs where it then writes D's. The first unit's first round was
                    // loaded before the main loop.
                    if (tid == 0{% if unit == 0 %} && round > 0{% endif %}) {
                        tg_mbar_expect_tx(c_full(cw), STAGING_BYTES);
#pragma unroll
                        for (int box = 0; box < EPI_COLS / D_BOX_COLS; ++box)
                            tg_tma_load(staging + box * {% if d_sw64 %}D_BOX_BYTES{% else %}BOX_BYTES{% endif %}, &c_map, c_full(cw), tn * BN + round * EPI_COLS + box * D_BOX_COLS, {{ row_u }});
                    }
                    tg_mbar_wait(c_full(cw), c_phase);
                    c_phase ^= 1u;
                }
                // Bias and C of JB column blocks are read before any of them is written back:
                // the shared-memory accesses are volatile asm, so read, write, read, ... would
                // wait out each read's latency in turn.
                constexpr int JB = (EPI_COLS / 8) % 8 == 0 ? 8 : 4;
                static_assert((EPI_COLS / 8) % JB == 0, "whole batches of column blocks");
#pragma unroll
                for (int j0 = 0; j0 < EPI_COLS / 8; j0 += JB) {
                    float bb[JB][2], rr[JB][2][2];
#pragma unroll
                    for (int jj = 0; jj < JB; ++jj) {
                        const int col_s = (j0 + jj) * 8 + 2 * (lane % 4);  // column in the staging buffer
                        bb[jj][0] = bb[jj][1] = 0.0f;
                        if constexpr (TG_HAS_BIAS) {
                            asm volatile("ld.shared.v2.f32 { %0, %1 }, [%2];"
                                         : "=f"(bb[jj][0]), "=f"(bb[jj][1]) : "r"(bias_s + 4u * (round * EPI_COLS + col_s)) : "memory");
                        }
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const unsigned at = {% if d_sw64 %}tg_staging_addr<64>(staging, r_local + 8 * h, col_s, D_BOX_BYTES){% else %}tg_staging_addr(staging, r_local + 8 * h, col_s, BOX_BYTES){% endif %};
                            rr[jj][h][0] = rr[jj][h][1] = 0.0f;
                            if constexpr (TG_HAS_RESIDUAL) tg_ld_shared_pair<OT>(at, rr[jj][h][0], rr[jj][h][1]);  // zeros past M and N
                        }
                    }
#pragma unroll
                    for (int jj = 0; jj < JB; ++jj) {
                        const int g = round * (EPI_COLS / 8) + j0 + jj;
                        const int col_s = (j0 + jj) * 8 + 2 * (lane % 4);
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const unsigned at = {% if d_sw64 %}tg_staging_addr<64>(staging, r_local + 8 * h, col_s, D_BOX_BYTES){% else %}tg_staging_addr(staging, r_local + 8 * h, col_s, BOX_BYTES){% endif %};
                            const float v0 = tg_epilogue({{ acc_u }}[4 * g + 2 * h], bb[jj][0], rr[jj][h][0], alpha_v);
                            const float v1 = tg_epilogue({{ acc_u }}[4 * g + 2 * h + 1], bb[jj][1], rr[jj][h][1], alpha_v);
                            tg_st_shared_pair(at, v0, v1);
                        }
                    }
                }
                tg_fence_async_smem();
                tg_named_barrier(1 + cw, 128);
                if (tid == 0 && {{ row_u }} < M) {
#pragma unroll
                    for (int box = 0; box < EPI_COLS / D_BOX_COLS; ++box) {
                        const int col0 = tn * BN + round * EPI_COLS + box * D_BOX_COLS;
                        if (col0 < N) tg_tma_store(&d_map, staging + box * {% if d_sw64 %}D_BOX_BYTES{% else %}BOX_BYTES{% endif %}, col0, {{ row_u }});
                    }
                    tg_bulk_commit();
                }
            }
{%- endfor %}
{%- endif %}
            if constexpr (TG_HAS_BIAS) {
                // Each thread releases the slot itself after its last read, so the hand-over
                // does not hang on the named barrier before it (released by one thread for the
                // warpgroup, racecheck reported the slot's next fill as a race).
                tg_mbar_arrive(bias_empty(bias_slot));
{%- if pingpong %}
                bias_phase ^= 1u;  // this consumer's next tile: the same slot
{%- else %}
                if (++bias_slot == 2) {
                    bias_slot = 0;
                    bias_phase ^= 1u;
                }
{%- endif %}
            }
        }
        if (tid == 0) tg_bulk_wait();
    }
    // In a cluster no block leaves while another may still read or write its shared memory or
    // arrive on its barriers (split-K: rank 0 reads the others' partial tiles and they arrive
    // on its barriers; multicast: the others release rank 0's stages).
    if constexpr (CLUSTERED) tg_cluster_sync();
}

// Bounded as for three warpgroups whatever the consumers: ptxas then allocates 168 registers a
// thread, which the setmaxnreg pair above redistributes.
extern "C" __global__ void __launch_bounds__(384, 1){% if split_k > 1 %} __cluster_dims__({{ split_k }}, 1, 1){% elif multicast > 1 %} __cluster_dims__({{ multicast }}, 1, 1){% endif %}
{{ kernel }}({{ params }}) {
    tg_gemm_sm90({{ sm90_args }});
}
