#if 0
// Tera and the C preprocessor both read this file. Rendered by tilegen, the TG_STANDALONE
// branch below is dead code and the #else branch holds the instance's parameters; compiled as
// is (bench/flash-attn/run.py: -DTG_STANDALONE, prelude.cuh given as a header), the defaults
// and -D overrides apply. The kernel logic is plain CUDA C++ on the constants below.
{% raw %}
#endif
#ifdef TG_STANDALONE
#include "prelude.cuh"
#ifndef TG_HEAD_DIM
#define TG_HEAD_DIM 128
#endif
#ifndef TG_BM
#define TG_BM 128
#endif
#ifndef TG_BN
#define TG_BN 32
#endif
#ifndef TG_WARPS
#define TG_WARPS 4
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
#ifndef TG_MIN_BLOCKS
#define TG_MIN_BLOCKS 1
#endif
#ifndef TG_KERNEL
#define TG_KERNEL attention_fwd
#endif
#define TG_SHARED_BYTES SMEM_BYTES  // the harness sizes the launch from the same formula
#if 0
{% endraw %}
#endif
#else
{{ header }}
//
// attention (forward): O = softmax(scale * Q K^T + mask) V per (batch, head), {{ dtype }} in and out,
// f32 scores, softmax and accumulation; head_dim {{ head_dim }}{% if causal %}, causal (bottom-right aligned){% endif %}.
// FlashAttention-2 on mma.sync.m16n8k16: a {{ tile_q }}-row Q tile per block ({{ warps }} warps, 16-row
// slices), {{ tile_kv }}-key K/V tiles through a {{ stages }}-stage cp.async ring, online softmax in exp2.
//
// Runtime requirements (the launcher checks them; sizes and strides in elements):
{%- for r in requirements %}
//   - {{ r }}
{%- endfor %}
{% include "prelude.cuh" %}
#define TG_HEAD_DIM {{ head_dim }}
#define TG_BM {{ tile_q }}
#define TG_BN {{ tile_kv }}
#define TG_WARPS {{ warps }}
#define TG_STAGES {{ stages }}
#define TG_CAUSAL {% if causal %}1{% else %}0{% endif %}
#define TG_BF16 {% if dtype == "bf16" %}1{% else %}0{% endif %}
#define TG_MIN_BLOCKS {{ min_blocks }}
#define TG_KERNEL {{ kernel }}
#define TG_PARAMS {{ params }}
#define TG_SHARED_BYTES {{ shared_bytes }}
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
constexpr int D = TG_HEAD_DIM;         // head_dim
constexpr int BM = TG_BM;              // query rows per block
constexpr int BN = TG_BN;              // keys per K/V tile
constexpr int WARPS = TG_WARPS;
constexpr int STAGES = TG_STAGES;      // K/V tiles in the cp.async ring
constexpr bool CAUSAL = TG_CAUSAL != 0;
constexpr bool BF16 = TG_BF16 != 0;

constexpr int THREADS = 32 * WARPS;
constexpr int MI = BM / (16 * WARPS);  // m16 row slices per warp
constexpr int ROWB = D * 2;            // bytes per tile row in shared memory
constexpr int CPR = D / 8;             // 16-byte chunks per row
constexpr int KD = D / 16;             // k steps of Q K^T
constexpr int NS = BN / 8;             // n8 tiles of S per row slice
constexpr int KN = BN / 16;            // k steps of P V
constexpr int ND = D / 8;              // n8 tiles of O per row slice
constexpr int Q_BYTES = BM * ROWB;
constexpr int KV_BYTES = BN * ROWB;    // one K or V tile
constexpr int STAGE_BYTES = 2 * KV_BYTES;
constexpr int SMEM_BYTES = Q_BYTES + STAGES * STAGE_BYTES;  // the launch's dynamic shared memory
static_assert(SMEM_BYTES == TG_SHARED_BYTES, "shared memory layout disagrees with the launch");
constexpr int RPP = THREADS / CPR;     // rows one pass of 16-byte copies covers
static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
static_assert(MI >= 1 && MI * 16 * WARPS == BM, "Q tile = warps x 16-row slices");
static_assert(BN % 16 == 0 && STAGES >= 2, "K/V tile of 16-key steps, at least 2 stages");
static_assert(THREADS % CPR == 0 && BM % RPP == 0 && BN % RPP == 0, "copies split evenly over the threads");

template <bool B> struct tg_bool { static constexpr bool value = B; };
// Row sums of the kernels that keep them in shared memory (LEAN in the kernel), a slot per
// thread; unreferenced, and so absent from the PTX, in the others.
static __shared__ float tg_row_sum[MI * 2][THREADS];

// ---- PTX helpers (sm_80+) ----
__device__ __forceinline__ unsigned tg_smem_u32(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
#if 0
{% endraw %}
#endif
#ifdef TG_STANDALONE
#include "attention.cuh"
#else
{% include "attention.cuh" %}
#endif
#if 0
{% raw %}
#endif
__device__ __forceinline__ void tg_cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void tg_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void tg_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void tg_ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void tg_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (BF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Shared-memory tiles are [rows][D] with the 16-byte chunks of row r XOR-swizzled by r % 8, so
// the 8 row addresses of every ldmatrix (8 consecutive rows, one chunk column) and the
// cp.async writes fall in distinct banks.
__device__ __forceinline__ unsigned tg_swz(int row, int chunk) {
    return (unsigned)(row * ROWB + ((chunk ^ (row & 7)) << 4));
}

// Copies `ROWS` rows of a [rows][D] tile into shared memory at `dst`: this thread's chunk
// column is `cc`, its rows r0, r0 + RPP, ...; `src` points at its first chunk and rows step by
// `ld` elements. Rows at or past `valid` are zero-filled (their source is never read).
template <int ROWS, bool MASKED>
__device__ __forceinline__ void tg_copy_tile(unsigned dst, const T* src, long long ld, int r0, int cc, int valid, const T* fallback) {
#pragma unroll
    for (int i = 0; i < ROWS / RPP; ++i) {
        const int r = r0 + i * RPP;
        const unsigned s = dst + tg_swz(r, cc);
        if (!MASKED || r < valid) tg_cp_async16(s, src + (long long)i * RPP * ld);
        else tg_cp_async16(s, fallback, 0);
    }
}


// Grid: x = query tiles (of the longest sequence), y = heads_q, z = batch; THREADS threads and
// SMEM_BYTES of dynamic shared memory per block. Causal blocks run their query tiles in
// reverse order, so the longest rows start first.
extern "C" __global__ void __launch_bounds__(THREADS, TG_MIN_BLOCKS) TG_KERNEL(TG_PARAMS) {
    extern __shared__ __align__(128) unsigned char tg_smem[];
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    tg_attn_block blk;
    if (!tg_attn_block_of<BM, BN, CAUSAL>(cu_seqlens_q, cu_seqlens_kv, batch, heads_q, heads_kv, seq_q, seq_kv, blk)) return;
    const int b = blk.b, h = blk.h, hk = blk.hk, skv = blk.skv, m0 = blk.m0, q_rows = blk.q_rows;
    const int off = blk.off, n_tiles = blk.n_tiles, n_full = blk.n_full;
    const long long q_start = blk.q_start, kv_start = blk.kv_start;

    const T* qg = q + b * q_bs + (q_start + m0) * q_ss + h * q_hs;
    const T* kg = k + b * k_bs + kv_start * k_ss + hk * k_hs;
    const T* vg = v + b * v_bs + kv_start * v_ss + hk * v_hs;

    const unsigned smem = tg_smem_u32(tg_smem);
    const unsigned q_s = smem, kv_s = smem + Q_BYTES;
    const int r0 = tid / CPR, cc = tid % CPR;  // this thread's copy chunk: rows r0 + i*RPP, chunk cc

    // ---- fragments: the lane's ldmatrix row and its chunk XOR key ----
    const int g = lane >> 2, t4 = lane & 3;
    // A (Q, row-major) and V (.trans): lanes 0-15 rows 0-15 at chunk 2s, lanes 16-31 at 2s+1.
    const int a_row = lane & 15, a_x = (lane >> 4) ^ (lane & 7);
    // K as B [n][k]: matrix j covers keys 8(j/2).., chunk 2s + j%2.
    const int k_row = ((lane >> 4) << 3) + (lane & 7), k_x = ((lane >> 3) & 1) ^ (lane & 7);
    const unsigned q_frag = q_s + (unsigned)((warp * 16 * MI + a_row) * ROWB);
    const unsigned k_frag = (unsigned)(k_row * ROWB);
    const unsigned v_frag = (unsigned)(a_row * ROWB);

    float acc[MI][ND][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int n = 0; n < ND; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][n][e] = 0.0f;
    // Two slices' scores and accumulators at head_dim 128 and 64 keys (192 registers a thread)
    // leave ptxas too few for the rest at 255 (it spilled): there the row sums live in shared
    // memory (this thread's own slots, read and written once per K/V tile, off the softmax's
    // critical path) and the copy coordinates are recomputed at each K/V load instead of kept
    // live across the loop. (A local constant: NVRTC emits namespace-scope ones into the PTX.
    // 160 is MAX_FRAGMENT_REGS of src/ops/attention, whose check admits one such tile.)
    constexpr bool LEAN = MI * (ND + NS) * 4 > 160;
    float row_max[MI][2], row_sum_r[MI][2];
    // This thread's running sum of row hh of slice mi.
    auto row_sum = [&](int mi, int hh) -> float& {
        if constexpr (LEAN) return tg_row_sum[mi * 2 + hh][tid];
        else return row_sum_r[mi][hh];
    };
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            row_max[mi][hh] = TG_NEG_INF;
            row_sum(mi, hh) = 0.0f;
        }
    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units

    if (n_tiles > 0) {
        // ---- prologue: Q in its own group, then K/V tiles 0 .. STAGES-2, one group each ----
        const long long kv_chunk_k = r0 * k_ss + cc * 8, kv_chunk_v = r0 * v_ss + cc * 8;
        if (q_rows == BM) tg_copy_tile<BM, false>(q_s, qg + r0 * q_ss + cc * 8, q_ss, r0, cc, BM, q);
        else tg_copy_tile<BM, true>(q_s, qg + r0 * q_ss + cc * 8, q_ss, r0, cc, q_rows, q);
        tg_cp_async_commit();
        auto load_kv = [&](int j) {
            int kr = r0, kc = cc;
            if constexpr (LEAN) {  // from an opaque read of %tid.x: nothing kept live for them
                unsigned tid_x;
                asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
                kr = (int)tid_x / CPR;
                kc = (int)tid_x % CPR;
            }
            const unsigned st = kv_s + (unsigned)((j % STAGES) * STAGE_BYTES);
            const int n0 = j * BN;
            const T* ks = kg + n0 * k_ss + kv_chunk_k;
            const T* vs = vg + n0 * v_ss + kv_chunk_v;
            if (n0 + BN <= skv) {
                tg_copy_tile<BN, false>(st, ks, k_ss, kr, kc, BN, k);
                tg_copy_tile<BN, false>(st + KV_BYTES, vs, v_ss, kr, kc, BN, v);
            } else {
                tg_copy_tile<BN, true>(st, ks, k_ss, kr, kc, skv - n0, k);
                tg_copy_tile<BN, true>(st + KV_BYTES, vs, v_ss, kr, kc, skv - n0, v);
            }
        };
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < n_tiles) load_kv(s);
            tg_cp_async_commit();
        }
        tg_cp_async_wait<STAGES - 1>();  // Q has landed
        __syncthreads();
        // Q fragments stay in registers for one 16-row slice per warp; with more, they are
        // read from shared memory at each k step.
        constexpr bool Q_REGS = MI == 1;
        unsigned qf[Q_REGS ? KD : 1][4];
        if constexpr (Q_REGS) {
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) tg_ldsm_x4(qf[kk], q_frag + (unsigned)(((2 * kk) ^ a_x) << 4));
        }

        // One K/V tile: wait for it, ask for the tile STAGES-1 ahead (into the slot every warp
        // finished reading in the previous trip), S = Q K^T, mask, online softmax, O += P V.
        auto tile = [&](int j, auto mask_tag) {
            constexpr bool MASK = decltype(mask_tag)::value;
            tg_cp_async_wait<STAGES - 2>();
            __syncthreads();
            if (j + STAGES - 1 < n_tiles) load_kv(j + STAGES - 1);
            tg_cp_async_commit();
            const unsigned st = kv_s + (unsigned)((j % STAGES) * STAGE_BYTES);

            float s[MI][NS][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int n = 0; n < NS; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mi][n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) {
                unsigned a[MI][4];
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    if constexpr (Q_REGS) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) a[mi][e] = qf[kk][e];
                    } else {
                        tg_ldsm_x4(a[mi], q_frag + (unsigned)(mi * 16 * ROWB) + (unsigned)(((2 * kk) ^ a_x) << 4));
                    }
                }
#pragma unroll
                for (int nj = 0; nj < NS / 2; ++nj) {
                    unsigned r[4];
                    tg_ldsm_x4(r, st + k_frag + (unsigned)(nj * 16 * ROWB) + (unsigned)(((2 * kk) ^ k_x) << 4));
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
                        tg_mma(s[mi][2 * nj], a[mi], r[0], r[1]);
                        tg_mma(s[mi][2 * nj + 1], a[mi], r[2], r[3]);
                    }
                }
            }
            if constexpr (MASK) {
                const int n0 = j * BN;
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int row = m0 + warp * 16 * MI + mi * 16 + g + 8 * hh;
                        // last visible key of this row, relative to the tile
                        const int lim = (CAUSAL ? min(row + off, skv - 1) : skv - 1) - n0;
#pragma unroll
                        for (int n = 0; n < NS; ++n)
#pragma unroll
                            for (int e = 0; e < 2; ++e)
                                if (n * 8 + 2 * t4 + e > lim) s[mi][n][2 * hh + e] = TG_NEG_INF;
                    }
            }
            // ---- online softmax: rows g (hh 0) and g + 8 (hh 1) of each slice; a row's 4
            // threads (a quad) hold its columns ----
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    float mx = row_max[mi][hh];
#pragma unroll
                    for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[mi][n][2 * hh], s[mi][n][2 * hh + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    // A row that has seen no key yet keeps max -inf: subtract 0 instead, so
                    // exp2(-inf - 0) = 0 and no -inf - -inf makes a NaN.
                    const float ms = mx == TG_NEG_INF ? 0.0f : mx * sl2;
                    const float alpha = tg_exp2(row_max[mi][hh] * sl2 - ms);
                    row_max[mi][hh] = mx;
                    float sum = 0.0f;
#pragma unroll
                    for (int n = 0; n < NS; ++n)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float p = tg_exp2(fmaf(s[mi][n][2 * hh + e], sl2, -ms));
                            s[mi][n][2 * hh + e] = p;
                            sum += p;
                        }
                    row_sum(mi, hh) = row_sum(mi, hh) * alpha + sum;
#pragma unroll
                    for (int n = 0; n < ND; ++n) {
                        acc[mi][n][2 * hh] *= alpha;
                        acc[mi][n][2 * hh + 1] *= alpha;
                    }
                }
            // ---- O += P V: P's accumulator layout is the A fragment of the next mma (rows g,
            // g + 8; keys 2t4.., 2t4+8.. of each 16-key step), so P never leaves registers ----
            const unsigned vt = st + KV_BYTES + v_frag;
#pragma unroll
            for (int kk = 0; kk < KN; ++kk) {
                unsigned a[MI][4];
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    a[mi][0] = tg_pack2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
                    a[mi][1] = tg_pack2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
                    a[mi][2] = tg_pack2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
                    a[mi][3] = tg_pack2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dj = 0; dj < D / 16; ++dj) {
                    unsigned r[4];
                    tg_ldsm_x4_trans(r, vt + (unsigned)(kk * 16 * ROWB) + (unsigned)(((2 * dj) ^ a_x) << 4));
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
                        tg_mma(acc[mi][2 * dj], a[mi], r[0], r[1]);
                        tg_mma(acc[mi][2 * dj + 1], a[mi], r[2], r[3]);
                    }
                }
            }
        };
        // Unmasked tiles first, then the masked ones (the causal diagonal and the ragged end):
        // two loops, so whole tiles carry no mask instructions.
        const int n_plain = min(n_full, n_tiles);
#pragma unroll 1
        for (int j = 0; j < n_plain; ++j) tile(j, tg_bool<false>{});
#pragma unroll 1
        for (int j = n_plain; j < n_tiles; ++j) tile(j, tg_bool<true>{});
        tg_cp_async_wait<0>();  // only empty groups can be left; nothing in flight at exit
    }

    // ---- epilogue: O / l, LSE = ln(sum exp(scale * s)); rows that saw no key give 0 and -inf ----
    T* og = o + b * o_bs + (q_start + m0) * o_ss + h * o_hs;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float l = row_sum(mi, hh);
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            const int row = warp * 16 * MI + mi * 16 + g + 8 * hh;  // in the tile
            if (row >= q_rows) continue;
            T* orow = og + row * o_ss;
#pragma unroll
            for (int n = 0; n < ND; ++n) {
                const unsigned u = tg_pack2(acc[mi][n][2 * hh] * inv, acc[mi][n][2 * hh + 1] * inv);
                *reinterpret_cast<unsigned*>(orow + n * 8 + 2 * t4) = u;
            }
            if (lse != nullptr && t4 == 0) {
                const float val = l > 0.0f ? (row_max[mi][hh] * sl2 + __log2f(l)) * 0.6931471805599453f : TG_NEG_INF;
                lse[b * lse_bs + h * lse_hs + q_start + m0 + row] = val;
            }
        }
}
#if 0
{% endraw %}
#endif
