#if 0
// Tera and the C preprocessor both read this file, as templates/attention.cu: rendered by
// tilegen, the #else branch holds the instance's parameters; compiled as is
// (bench/flash-attn/run.py: -DTG_STANDALONE, prelude.cuh and wgmma.cuh given as headers), the
// defaults and -D overrides apply. The kernel logic is plain CUDA C++ on the constants below.
{% raw %}
#endif
#ifdef TG_STANDALONE
#include "prelude.cuh"
#ifndef TG_HEAD_DIM
#define TG_HEAD_DIM 128
#endif
#ifndef TG_BN
#define TG_BN 128
#endif
#ifndef TG_CONSUMERS
#define TG_CONSUMERS 2
#endif
#ifndef TG_STAGES
#define TG_STAGES 2
#endif
#ifndef TG_CAUSAL
#define TG_CAUSAL 0
#endif
#ifndef TG_BF16
#define TG_BF16 1
#endif
#ifndef TG_PRODUCER_REGS
#define TG_PRODUCER_REGS 40
#endif
#ifndef TG_CONSUMER_REGS
#define TG_CONSUMER_REGS 232
#endif
#ifndef TG_PINGPONG
#define TG_PINGPONG 1
#endif
#ifndef TG_Q_REGS
#define TG_Q_REGS 1
#endif
#ifndef TG_TMA
#define TG_TMA 1
#endif
#ifndef TG_KERNEL
#define TG_KERNEL attention_fwd
#endif
#if TG_TMA
#define TG_MAP_PARAMS const __grid_constant__ TgTensorMap k_map, const __grid_constant__ TgTensorMap v_map,
#endif
#define TG_SHARED_BYTES SMEM_BYTES
#if TG_BF16
#define TG_WGMMA_AB "bf16"
#else
#define TG_WGMMA_AB "f16"
#endif
#include "wgmma.cuh"
#if 0
{% endraw %}
#endif
#else
{{ header }}
//
// attention (forward), Hopper (sm_90a): O = softmax(scale * Q K^T + mask) V per (batch, head),
// {{ dtype }} in and out, f32 scores, softmax and accumulation; head_dim {{ head_dim }}{% if causal %}, causal (bottom-right aligned){% endif %}.
// Warpgroup 0 copies Q (cp.async) and loads {{ tile_kv }}-key K/V tiles (TMA; cp.async for packed varlen
// batches) into a {{ stages }}-stage ring of 128-byte-swizzled shared memory guarded by mbarriers;
// {{ consumers }} consumer warpgroups own 64 query rows each and run S = Q K^T and O += P V on wgmma (P from
// registers), the softmax of one tile overlapping the P V of the previous.
//
// Runtime requirements (the launcher checks them; sizes and strides in elements):
{%- for r in requirements %}
//   - {{ r }}
{%- endfor %}
// Tensor maps (cuTensorMapEncodeTiled; dims innermost first, `batch` the grid's z, strides in
// elements; 128-byte swizzle, no interleave, 256-byte L2 promotion, zero fill):
{%- for m in tensor_maps %}
//   - {{ m }}
{%- endfor %}
{% include "prelude.cuh" %}
#define TG_HEAD_DIM {{ head_dim }}
#define TG_BN {{ tile_kv }}
#define TG_CONSUMERS {{ consumers }}
#define TG_STAGES {{ stages }}
#define TG_CAUSAL {% if causal %}1{% else %}0{% endif %}
#define TG_BF16 {% if dtype == "bf16" %}1{% else %}0{% endif %}
#define TG_PRODUCER_REGS {{ producer_regs }}
#define TG_CONSUMER_REGS {{ consumer_regs }}
#define TG_PINGPONG 1
#define TG_Q_REGS {{ q_regs }}
#define TG_TMA 1
#define TG_KERNEL {{ kernel }}
#define TG_PARAMS {{ params }}
#define TG_SHARED_BYTES {{ shared_bytes }}
#define TG_WGMMA_AB "{{ dtype }}"
{% include "wgmma.cuh" %}
#endif
#if 0
{% raw %}
#endif

// ---- instance parameters ----
#if TG_BF16
typedef tg_bf16 T;
#else
typedef tg_f16 T;
#endif
constexpr int D = TG_HEAD_DIM;          // head_dim
constexpr int CONSUMERS = TG_CONSUMERS;  // consumer warpgroups, 64 query rows each
constexpr int BM = 64 * CONSUMERS;       // query rows per block
constexpr int BN = TG_BN;                // keys per K/V tile
constexpr int STAGES = TG_STAGES;        // K/V tiles in the ring
constexpr bool CAUSAL = TG_CAUSAL != 0;
constexpr bool BF16 = TG_BF16 != 0;
// The consumers take turns to issue their wgmma (named barriers 1..CONSUMERS), so one's softmax
// runs while another's GEMMs hold the tensor cores.
constexpr bool PINGPONG = TG_PINGPONG != 0 && CONSUMERS > 1;
// Q's fragments stay in registers (S = Q K^T reads only K from shared memory, whose bandwidth
// the two wgmma and the copies otherwise share).
constexpr bool Q_REGS = TG_Q_REGS != 0;
// K and V tiles come by TMA (k_map, v_map: [head_dim, seq_kv, heads_kv, batch], 64 x BN boxes,
// 128-byte swizzle, rows past seq_kv zero-filled), one thread issuing them. Packed varlen
// batches (cu_seqlens_kv) keep the producer's cp.async copies: a map bounds the tensor, not
// each packed sequence, so a box would run into the next sequence's rows, whose values (Inf
// or NaN ones too) would reach P V.
constexpr bool TMA = TG_TMA != 0;
constexpr int THREADS = 128 * (1 + CONSUMERS);

// Shared memory: every tile [rows][D] is stored as D/64 panels of [rows][64] (128-byte rows,
// 16-byte chunks XOR-swizzled by row % 8: wgmma's 128-byte swizzle), panels rows * 128 bytes
// apart, each 1024-byte aligned.
constexpr int Q_BYTES = BM * D * 2;
constexpr int KV_BYTES = BN * D * 2;  // one K or V tile
constexpr int BARRIERS = 1 + 4 * STAGES;  // Q full; K and V full and empty per stage
constexpr int SMEM_BYTES = 1024 + Q_BYTES + 2 * STAGES * KV_BYTES + 8 * BARRIERS;  // + alignment slack
static_assert(SMEM_BYTES == TG_SHARED_BYTES, "shared memory layout disagrees with the launch");
constexpr int S_REGS = BN / 2;  // f32 scores per consumer thread (m64 x BN)
constexpr int O_REGS = D / 2;   // f32 output accumulators per consumer thread (m64 x D)
constexpr int CPR = D / 8;      // 16-byte chunks per row
constexpr int RPP = 128 / CPR;  // rows one pass of the producer's 128 threads covers
static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "K/V tile of 64, 128, 192 or 256 keys (a wgmma N)");
static_assert(BN % RPP == 0 && BM % RPP == 0 && STAGES >= 2, "copies split evenly over the producer");

#if 0
{% endraw %}
#endif
#ifdef TG_STANDALONE
#include "sm90.cuh"
#include "attention.cuh"
#else
{% include "sm90.cuh" %}
{% include "attention.cuh" %}
#endif
#if 0
{% raw %}
#endif
// ---- PTX helpers (sm_90) ----
// Arrives on `bar` once this thread's earlier cp.async copies have landed (the arrival is
// counted in the barrier's expected count: no increment).
__device__ __forceinline__ void tg_cp_async_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// `count` arrivals on `bar` at once (a consumer releasing a stage for those that skip the tile).
__device__ __forceinline__ void tg_mbar_arrive_count(unsigned bar, unsigned count) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void tg_bar_arrive(unsigned id, unsigned threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// A 4-D TMA box load (coordinates innermost first) into shared memory; completes `bar`'s
// transaction bytes. Elements past the tensor's dims arrive as zeros (and still count).
__device__ __forceinline__ void tg_tma_load_4d(unsigned dst, const TgTensorMap* map, unsigned bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
template <int N> __device__ __forceinline__ void tg_reg_fence(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// Byte offset of 16-byte chunk `c` of row `r` in a [ROWS][D] tile (see the layout above).
template <int ROWS> __device__ __forceinline__ unsigned tg_chunk(int r, int c) {
    return (unsigned)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// The producer's share of a [ROWS][D] tile: chunk column `cc`, rows r0, r0 + RPP, ...; rows at
// or past `valid` are zero-filled (their source is never read). `src` is row r0's chunk.
// A rolled loop with a running pointer: the producer runs on few registers.
template <int ROWS>
__device__ __forceinline__ void tg_copy_tile(unsigned dst, const T* src, long long ld, int r0, int cc, int valid, const T* fallback) {
    const long long step = (long long)RPP * ld;
#pragma unroll 1
    for (int r = r0; r < ROWS; r += RPP, src += step) {
        const bool in = r < valid;
        tg_cp_async16(dst + tg_chunk<ROWS>(r, cc), in ? (const void*)src : (const void*)fallback, in ? 16 : 0);
    }
}


// Grid: x = query tiles (of the longest sequence), y = heads_q, z = batch; THREADS threads and
// SMEM_BYTES of dynamic shared memory per block. Causal blocks run their query tiles in
// reverse order, so the longest rows start first.
extern "C" __global__ void __launch_bounds__(THREADS, 1) TG_KERNEL(TG_PARAMS) {
    extern __shared__ __align__(1024) unsigned char tg_smem[];
    tg_attn_block blk;  // the whole block leaves together when it has no rows: no barrier is waited on
    if (!tg_attn_block_of<BM, BN, CAUSAL>(cu_seqlens_q, cu_seqlens_kv, heads_q, heads_kv, seq_q, seq_kv, blk)) return;
    const int b = blk.b, h = blk.h, hk = blk.hk, skv = blk.skv, m0 = blk.m0, q_rows = blk.q_rows;
    const int off = blk.off, n_tiles = blk.n_tiles, n_full = blk.n_full;
    const long long q_start = blk.q_start, kv_start = blk.kv_start;

    const unsigned base = (tg_smem_u32(tg_smem) + 1023u) & ~1023u;
    const unsigned q_s = base;
    const unsigned k_s = q_s + Q_BYTES;
    const unsigned v_s = k_s + STAGES * KV_BYTES;
    const unsigned bars = v_s + STAGES * KV_BYTES;
    const unsigned q_full = bars;
    auto k_full = [=](int s) { return bars + 8u * (unsigned)(1 + s); };
    auto v_full = [=](int s) { return bars + 8u * (unsigned)(1 + STAGES + s); };
    auto k_empty = [=](int s) { return bars + 8u * (unsigned)(1 + 2 * STAGES + s); };
    auto v_empty = [=](int s) { return bars + 8u * (unsigned)(1 + 3 * STAGES + s); };

    const int wg = (int)threadIdx.x / 128, tid = (int)threadIdx.x % 128;
    // Block-uniform: TMA for K and V unless the batch is packed (see TMA above).
    const bool tma = TMA && cu_seqlens_kv == nullptr;
    if (threadIdx.x == 0) {
        tg_mbar_init(q_full, 128);  // every producer thread's copies
        const unsigned kv_arrivals = tma ? 1u : 128u;  // the TMA issuer's expect_tx, or every copier
        for (int s = 0; s < STAGES; ++s) {
            tg_mbar_init(k_full(s), kv_arrivals);
            tg_mbar_init(v_full(s), kv_arrivals);
            tg_mbar_init(k_empty(s), CONSUMERS);  // one arrival per consumer warpgroup
            tg_mbar_init(v_empty(s), CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer: 16-byte cp.async copies, one chunk column per thread ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(TG_PRODUCER_REGS));
        const int r0 = tid / CPR, cc = tid % CPR;
        const T* qg = q + b * q_bs + (q_start + m0) * q_ss + h * q_hs + r0 * q_ss + cc * 8;
        const T* kg = k + b * k_bs + kv_start * k_ss + hk * k_hs + r0 * k_ss + cc * 8;
        const T* vg = v + b * v_bs + kv_start * v_ss + hk * v_hs + r0 * v_ss + cc * 8;
        tg_copy_tile<BM>(q_s, qg, q_ss, r0, cc, q_rows, q);
        tg_cp_async_arrive(q_full);
#if TG_TMA
        if (tma) {
            if (tid == 0) {
                tg_prefetch_map(&k_map);
                tg_prefetch_map(&v_map);
                // One box per 64 head dims: a [BN][64] panel of the tile's layout.
#pragma unroll 1
                for (int j = 0; j < n_tiles; ++j) {
                    const int s = j % STAGES;
                    const unsigned parity = ((unsigned)(j / STAGES) & 1u) ^ 1u;
                    const int n0 = j * BN;
                    tg_mbar_wait(k_empty(s), parity);
                    tg_mbar_expect_tx(k_full(s), KV_BYTES);
#pragma unroll
                    for (int p = 0; p < D / 64; ++p)
                        tg_tma_load_4d(k_s + s * KV_BYTES + p * BN * 128, &k_map, k_full(s), 64 * p, n0, hk, b);
                    tg_mbar_wait(v_empty(s), parity);
                    tg_mbar_expect_tx(v_full(s), KV_BYTES);
#pragma unroll
                    for (int p = 0; p < D / 64; ++p)
                        tg_tma_load_4d(v_s + s * KV_BYTES + p * BN * 128, &v_map, v_full(s), 64 * p, n0, hk, b);
                }
            }
            asm volatile("cp.async.wait_all;" ::: "memory");
            return;
        }
#endif
        for (int j = 0; j < n_tiles; ++j) {
            const int s = j % STAGES;
            const unsigned parity = ((unsigned)(j / STAGES) & 1u) ^ 1u;  // a fresh barrier passes parity 1
            const int n0 = j * BN;
            tg_mbar_wait(k_empty(s), parity);
            tg_copy_tile<BN>(k_s + s * KV_BYTES, kg + n0 * k_ss, k_ss, r0, cc, skv - n0, k);
            tg_cp_async_arrive(k_full(s));
            tg_mbar_wait(v_empty(s), parity);
            tg_copy_tile<BN>(v_s + s * KV_BYTES, vg + n0 * v_ss, v_ss, r0, cc, skv - n0, v);
            tg_cp_async_arrive(v_full(s));
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        return;
    }

    // ---------------- consumers: 64 query rows each ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(TG_CONSUMER_REGS));
    // Causal with more query rows than keys per tile: on a diagonal block a consumer's rows
    // may see fewer key tiles than the block's last rows, and it skips the rest (below).
    // Elsewhere the bookkeeping only costs time (3 % at head_dim 128 without a mask,
    // bench/flash-attn/NOTES.md). Local: a namespace-scope constant becomes a symbol in the PTX.
    constexpr bool SKIP = CAUSAL && BM > BN;
    // SKIP: broadcast from lane 0, so that the compiler knows the index is the same
    // across the warp and the tile counts derived from it keep the wgmma out of what it would
    // take for divergent paths (ptxas serializes those, C7518).
    const int cw = SKIP ? __shfl_sync(0xffffffffu, wg - 1, 0) : wg - 1;
    const int warp = tid / 32, lane = tid % 32;
    const int t4 = lane & 3;
    // Accumulator layout of m64nN: element 4i + 2hh + e is row warp*16 + lane/4 + 8hh, column
    // 8i + 2(lane%4) + e.
    const int row_in_block = cw * 64 + warp * 16 + (lane >> 2);  // hh = 0; hh = 1 is 8 more
    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units

    // The key tiles a consumer's 64 rows see. With SKIP, the consumers of a diagonal block's
    // first rows see fewer than the block (whole key tiles are masked for all their rows), and
    // one past the tile's last row sees none. A consumer skips the wgmma of the tiles it does
    // not see but keeps taking its turns.
    auto tiles_of = [&](int c) {
        if constexpr (!SKIP) return n_tiles;
        const int first = c * 64;
        if (first >= q_rows) return 0;
        const int kv_end = min(skv, m0 + min(q_rows, first + 64) + off);
        return kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    };
    const int my_tiles = tiles_of(cw);
    const int my_full = SKIP ? min(skv / BN, max(0, m0 + cw * 64 + off + 1) / BN) : n_full;  // unmasked
    // The consumer with the tile's last row sees every tile the block loads; it releases each
    // stage for itself and for the consumers that skip that tile, so every phase of an empty
    // barrier still counts CONSUMERS arrivals.
    const int anchor = (q_rows - 1) / 64;
    auto release = [&](unsigned bar, int j) {
        if (tid != 0) return;
        if constexpr (SKIP) {
            unsigned n = 1;
            if (cw == anchor) {
#pragma unroll
                for (int c = 0; c < CONSUMERS; ++c) n += (c != anchor && tiles_of(c) <= j) ? 1u : 0u;
            }
            tg_mbar_arrive_count(bar, n);
        } else {
            tg_mbar_arrive(bar);
        }
    };
    auto release_k = [&](int j) { release(k_empty(j % STAGES), j); };
    auto release_v = [&](int j) { release(v_empty(j % STAGES), j); };

    float o_acc[O_REGS];
#pragma unroll
    for (int i = 0; i < O_REGS; ++i) o_acc[i] = 0.0f;
    float row_max[2] = {TG_NEG_INF, TG_NEG_INF}, row_sum[2] = {0.0f, 0.0f};
    float s_acc[S_REGS];
    unsigned p_frag[BN / 16][4];  // P of the previous tile as the A operand of O += P V
    unsigned q_frag[Q_REGS ? D / 16 : 1][4];  // Q as the A operand of S = Q K^T (Q_REGS)

    // S = Q K^T for tile j: A = this warpgroup's 64 Q rows, B = the K tile (both K-major: k16
    // steps are 32 bytes along a 128-byte row, panels of 64 head dims apart).
    auto issue_qk = [&](int j) {
        const int s = j % STAGES;
        tg_mbar_wait(k_full(s), (unsigned)(j / STAGES) & 1u);
        tg_fence_async_smem();
        tg_reg_fence(s_acc);
        tg_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const unsigned pb = k_s + (unsigned)(s * KV_BYTES + (kk / 4) * BN * 128 + (kk % 4) * 32);
            if constexpr (Q_REGS) {
                tg_wgmma_rs<0>(s_acc, q_frag[kk], tg_desc(pb, 16, 1024), kk != 0);
            } else {
                const unsigned pa = q_s + (unsigned)((kk / 4) * BM * 128 + cw * 64 * 128 + (kk % 4) * 32);
                tg_wgmma_ss<0>(s_acc, tg_desc(pa, 16, 1024), tg_desc(pb, 16, 1024), kk != 0);
            }
        }
        tg_wgmma_commit();
    };
    // O += P V for tile j: B = the V tile [keys][D], MN-major (head dims contiguous): k16 steps
    // are 16 rows (2048 bytes), 64-wide panels BN * 128 bytes apart.
    auto issue_pv = [&](int j) {
        const int s = j % STAGES;
        tg_mbar_wait(v_full(s), (unsigned)(j / STAGES) & 1u);
        tg_fence_async_smem();
        tg_reg_fence(o_acc);
        tg_reg_fence(p_frag);
        tg_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            const unsigned pb = v_s + (unsigned)(s * KV_BYTES + kk * 2048);
            tg_wgmma_rs<1>(o_acc, p_frag[kk], tg_desc(pb, BN * 128, 1024), 1);
        }
        tg_wgmma_commit();
    };
    // Masks, then turns the scores of tile j into probabilities (in s_acc) against the running
    // max; returns each row half's rescale factor for O and the sum so far in row_sum.
    auto softmax = [&](int j, float (&alpha)[2]) {
        if (j >= my_full) {
            const int n0 = j * BN;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int row = m0 + row_in_block + 8 * hh;
                const int lim = (CAUSAL ? min(row + off, skv - 1) : skv - 1) - n0;  // last visible key
#pragma unroll
                for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (8 * i + 2 * t4 + e > lim) s_acc[4 * i + 2 * hh + e] = TG_NEG_INF;
            }
        }
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float mx = row_max[hh];
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(s_acc[4 * i + 2 * hh], s_acc[4 * i + 2 * hh + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // A row that has seen no key yet keeps max -inf: subtract 0 instead (no -inf - -inf).
            const float ms = mx == TG_NEG_INF ? 0.0f : mx * sl2;
            alpha[hh] = tg_exp2(row_max[hh] * sl2 - ms);
            row_max[hh] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = tg_exp2(fmaf(s_acc[4 * i + 2 * hh + e], sl2, -ms));
                    s_acc[4 * i + 2 * hh + e] = p;
                    sum += p;
                }
            row_sum[hh] = row_sum[hh] * alpha[hh] + sum;
        }
    };
    // P (in s_acc) to the A fragments of the P V wgmma: k16 step kk covers keys 16kk..16kk+15,
    // i.e. accumulator columns of n8 blocks 2kk and 2kk + 1.
    auto pack_p = [&]() {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            p_frag[kk][0] = tg_pack2(s_acc[8 * kk + 0], s_acc[8 * kk + 1]);
            p_frag[kk][1] = tg_pack2(s_acc[8 * kk + 2], s_acc[8 * kk + 3]);
            p_frag[kk][2] = tg_pack2(s_acc[8 * kk + 4], s_acc[8 * kk + 5]);
            p_frag[kk][3] = tg_pack2(s_acc[8 * kk + 6], s_acc[8 * kk + 7]);
        }
    };
    auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
        for (int i = 0; i < O_REGS / 4; ++i) {
            o_acc[4 * i + 0] *= alpha[0];
            o_acc[4 * i + 1] *= alpha[0];
            o_acc[4 * i + 2] *= alpha[1];
            o_acc[4 * i + 3] *= alpha[1];
        }
    };

    // Turns: consumer cw waits on barrier 1 + cw before issuing and then lets the next one go;
    // every consumer takes n_tiles + 1 turns (issuing nothing in those for tiles it skips), the
    // first starts, and the last one's final hand-over is left out so that every barrier ends
    // complete.
    const unsigned my_turn = 1u + (unsigned)cw, next_turn = 1u + (unsigned)((cw + 1) % CONSUMERS);
    auto turn_begin = [&]() {
        if constexpr (PINGPONG) tg_named_barrier(my_turn, 256);
    };
    auto turn_end = [&](bool last) {
        if constexpr (PINGPONG) {
            if (!(last && cw == CONSUMERS - 1)) tg_bar_arrive(next_turn, 256);
        }
    };

    tg_mbar_wait(q_full, 0);
    if constexpr (Q_REGS) {
        // ldmatrix.x4 gives the m64k16 A fragment: lanes 0-15 address rows 0-15 of the warp's
        // slice at chunk 2kk, lanes 16-31 the same rows at chunk 2kk + 1.
        const int r = cw * 64 + warp * 16 + (lane & 15);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) tg_ldsm_x4(q_frag[kk], q_s + tg_chunk<BM>(r, 2 * kk + (lane >> 4)));
    }
    if (n_tiles > 0) {
        if (PINGPONG && cw == CONSUMERS - 1) tg_bar_arrive(1u, 256);  // the first consumer starts
        if (my_tiles > 0) {
            float alpha[2];
            turn_begin();
            issue_qk(0);
            turn_end(false);
            tg_wgmma_wait<0>();
            tg_reg_fence(s_acc);
            release_k(0);
            softmax(0, alpha);
            pack_p();
            // Tile j's S = Q K^T and tile j-1's O += P V are in flight together; the softmax of
            // tile j runs while the tensor cores finish P V.
#pragma unroll 1
            for (int j = 1; j < my_tiles; ++j) {
                turn_begin();
                issue_qk(j);
                issue_pv(j - 1);
                turn_end(false);
                tg_wgmma_wait<1>();  // S of tile j
                tg_reg_fence(s_acc);
                release_k(j);
                softmax(j, alpha);
                tg_wgmma_wait<0>();  // P V of tile j-1
                tg_reg_fence(o_acc);
                tg_reg_fence(p_frag);
                release_v(j - 1);
                rescale_o(alpha);
                pack_p();
            }
            turn_begin();
            issue_pv(my_tiles - 1);
            turn_end(my_tiles == n_tiles);
            tg_wgmma_wait<0>();
            tg_reg_fence(o_acc);
            release_v(my_tiles - 1);
        }
        // Turns for the tiles this consumer skips (no wgmma on these paths: ptxas would
        // serialize every wgmma of the kernel for one in a branch it cannot prove uniform).
#pragma unroll 1
        for (int t = my_tiles > 0 ? my_tiles + 1 : 0; t <= n_tiles; ++t) {
            turn_begin();
            turn_end(t == n_tiles);
        }
    }

    // ---- epilogue: O / l, LSE = ln(sum exp(scale * s)); rows that saw no key give 0 and -inf ----
    T* og = o + b * o_bs + (q_start + m0) * o_ss + h * o_hs;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float l = row_sum[hh];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int row = row_in_block + 8 * hh;
        if (row >= q_rows) continue;
        T* orow = og + row * o_ss;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            const unsigned u = tg_pack2(o_acc[4 * i + 2 * hh] * inv, o_acc[4 * i + 2 * hh + 1] * inv);
            *reinterpret_cast<unsigned*>(orow + i * 8 + 2 * t4) = u;
        }
        if (lse != nullptr && t4 == 0) {
            const float val = l > 0.0f ? (row_max[hh] * sl2 + __log2f(l)) * 0.6931471805599453f : TG_NEG_INF;
            lse[b * lse_bs + h * lse_hs + q_start + m0 + row] = val;
        }
    }
}
#if 0
{% endraw %}
#endif
