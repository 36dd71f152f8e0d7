{{ header }}
//
// gemm: D = epilogue(A . B) with A M x K and B K x N ({{ dtype }} in, {{ out_dtype }} out, f32 accumulation),
// layout {{ layout }} (A {% if a_row_major %}row-major{% else %}column-major{% endif %}, B {% if b_row_major %}row-major{% else %}column-major{% endif %}), epilogue = [{{ epilogue | join(sep=", ") }}].
{%- if tensor_cores %}
// Tensor cores: mma.sync.m16n8k{% if tf32 %}8 tf32 (inputs rounded to tf32 in registers){% else %}16 {{ dtype }}{% endif %}, {{ stages }}-stage cp.async pipeline.
{%- else %}
// SIMT: fp32 FFMA, 8x8 outputs per thread, shared memory double-buffered through registers.
{%- endif %}
// Block tile {{ tile_m }}x{{ tile_n }}x{{ tile_k }}, {{ warps_m }}x{{ warps_n }} warps of {{ warp_m }}x{{ warp_n }}, {{ threads }} threads,
// {{ shared_bytes }} bytes of dynamic shared memory; one block per output tile, in groups of {{ group_m }} tile rows.
//
// Runtime requirements (the launcher checks them; sizes in elements):
{%- for r in requirements %}
//   - {{ r }}
{%- endfor %}
// Edges need no padding: rows, columns and k beyond M, N, K are zero-filled on the way into
// shared memory and masked on the way out.

{% include "prelude.cuh" %}

typedef {{ T }} T;    // A and B
typedef {{ OT }} OT;  // D, C and bias

#define TG_BM {{ tile_m }}
#define TG_BN {{ tile_n }}
#define TG_BK {{ tile_k }}
#define TG_WM {{ warp_m }}
#define TG_WN {{ warp_n }}
#define TG_WARPS_N {{ warps_n }}
#define TG_THREADS {{ threads }}
#define TG_STAGES {{ stages }}
#define TG_GROUP_M {{ group_m }}
#define TG_MIN_BLOCKS {{ min_blocks }}  // __launch_bounds__ minimum blocks per SM
// Shared-memory tiles (elements): A is [{{ a_rows }}][{{ a_ld }}], B is [{{ b_rows }}][{{ b_ld }}] (row pitch padded);
// each thread copies {{ a_iters }} + {{ b_iters }} 16-byte chunks per k tile.
#define TG_A_LD {{ a_ld }}
#define TG_A_ROWS {{ a_rows }}
#define TG_A_CPR {{ a_cpr }}
#define TG_A_ITERS {{ a_iters }}
#define TG_A_RPP {{ a_rows_per_pass }}
#define TG_B_LD {{ b_ld }}
#define TG_B_ROWS {{ b_rows }}
#define TG_B_CPR {{ b_cpr }}
#define TG_B_ITERS {{ b_iters }}
#define TG_B_RPP {{ b_rows_per_pass }}

{% raw -%}
// ---- GEMM helpers: inline PTX, sm_80+ ----

__device__ __forceinline__ unsigned tg_smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16-byte global -> shared copy that bypasses L1; bytes past `src_bytes` (0..16) are zero-filled
// and not read.
__device__ __forceinline__ void tg_cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void tg_cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void tg_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void tg_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8j..8j+7 give the row addresses of matrix j, register j gets
// matrix j (lane l holds row l/4, columns 2(l%4), 2(l%4)+1; with .trans, column l/4, rows
// 2(l%4), 2(l%4)+1).
__device__ __forceinline__ void tg_ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void tg_ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ unsigned tg_lds32(unsigned addr) {
    unsigned r;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(r) : "r"(addr));
    return r;
}
// fp32 bits -> tf32 (cvt.rna: round to nearest, ties away from zero), still in a 32-bit register.
__device__ __forceinline__ unsigned tg_tf32(unsigned x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
    return r;
}

// Two adjacent output elements (the pair an accumulator fragment holds in one row).
__device__ __forceinline__ void tg_store_pair(float* p, float x, float y) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void tg_store_pair(tg_f16* p, float x, float y) {
    unsigned u;  // cvt packs its first source into the upper half
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(u) : "f"(y), "f"(x));
    *reinterpret_cast<unsigned*>(p) = u;
}
__device__ __forceinline__ void tg_store_pair(tg_bf16* p, float x, float y) {
    unsigned u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(u) : "f"(y), "f"(x));
    *reinterpret_cast<unsigned*>(p) = u;
}
__device__ __forceinline__ void tg_load_pair(const float* p, float& x, float& y) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    x = v.x;
    y = v.y;
}
template <typename H> __device__ __forceinline__ void tg_load_pair(const H* p, float& x, float& y) {
    const unsigned u = *reinterpret_cast<const unsigned*>(p);
    H lo, hi;
    lo.bits = (unsigned short)(u & 0xffffu);
    hi.bits = (unsigned short)(u >> 16);
    x = tg_to_float(lo);
    y = tg_to_float(hi);
}

// %ctaid.x and %tid.x read afresh: values recomputed from them after the main loop are not
// merged with the ones before it, so they hold no register through the loop.
__device__ __forceinline__ int tg_ctaid_x() {
    int r;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r));
    return r;
}
__device__ __forceinline__ int tg_tid_x() {
    int r;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(r));
    return r;
}
{%- endraw %}
{%- if tensor_cores %}

__device__ __forceinline__ void tg_mma(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
{%- if tf32 %}
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
{%- else %}
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{{ dtype }}.{{ dtype }}.f32 "
{%- endif %}
                 "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %10, %11, %12, %13 };\n"
                 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
{%- endif %}
// ---- end of PTX helpers ----

// For 16-bit outputs the epilogue uses tg_gelu_fast (one MUFU op, the hardware tanh) and
// tg_silu_fast; f32 outputs use tg_gelu_sigmoid (accurate to ~1e-6).

// Output tile of this block: blockIdx.x walks groups of TG_GROUP_M tile rows column by column,
// so the blocks in flight share A row panels and B column panels in L2.
__device__ __forceinline__ void tg_tile_coords(int pid, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
    const int per_group = TG_GROUP_M * tiles_n;
    const int group = pid / per_group;
    const int first_m = group * TG_GROUP_M;
    const int rows = min(tiles_m - first_m, TG_GROUP_M);
    const int in_group = pid - group * per_group;
    tile_m = first_m + in_group % rows;
    tile_n = in_group / rows;
}


{% include "epilogue.cuh" %}
{% if tensor_cores %}
// ================================ tensor-core path ================================

constexpr int ES = (int)sizeof(T);  // bytes per input element
constexpr int VEC = 16 / ES;        // elements per 16-byte chunk
constexpr int MMA_K = {% if tf32 %}8{% else %}16{% endif %};
constexpr int MI = TG_WM / 16;      // m16 tiles per warp
constexpr int NI = TG_WN / 8;       // n8 tiles per warp
constexpr int KK = TG_BK / MMA_K;   // mma k steps per k tile (even)
constexpr int A_STAGE = TG_A_ROWS * TG_A_LD * ES;
constexpr int B_STAGE = TG_B_ROWS * TG_B_LD * ES;
constexpr int STAGE = A_STAGE + B_STAGE;
static_assert(TG_STAGES * STAGE == {{ pipeline_bytes }}, "shared memory layout disagrees with the launch");
static_assert(KK % 2 == 0 && NI % 2 == 0, "k steps and n8 tiles come in pairs");

// Copies one operand's k tile into a stage: chunk i of this thread is row r0 + i*RPP, chunk
// column cc of the global tile (`outer` rows of contiguous `inner` elements). MASKED: only
// `outer_lim` rows and `inner_lim` elements per row lie inside the matrix; the rest is
// zero-filled (its source address then is `fallback`, which is never read).
template <int LD, int ITERS, int RPP, bool MASKED>
__device__ __forceinline__ void tg_copy_operand(unsigned dst, const T* src, long long step, const T* fallback,
                                                int r0, int cc, int outer_lim, int inner_lim) {
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const unsigned s = dst + (unsigned)(((r0 + i * RPP) * LD + cc * VEC) * ES);
        const T* g = src + i * step;
        if (MASKED) {
            const int bytes = (r0 + i * RPP < outer_lim) ? max(0, min(inner_lim - cc * VEC, VEC)) * ES : 0;
            tg_cp_async16(s, bytes > 0 ? g : fallback, bytes);
        } else {
            tg_cp_async16(s, g);
        }
    }
}

extern "C" __global__ void __launch_bounds__(TG_THREADS, TG_MIN_BLOCKS) {{ kernel }}({{ params }}) {
    extern __shared__ __align__(128) unsigned char tg_smem[];
    const int tid = (int)threadIdx.x, lane = tid & 31, warp_id = tid >> 5;
    const int warp_m = warp_id / TG_WARPS_N, warp_n = warp_id % TG_WARPS_N;

    const int tiles_m = (int)((m + TG_BM - 1) / TG_BM), tiles_n = (int)((n + TG_BN - 1) / TG_BN);
    int tile_m, tile_n;
    tg_tile_coords((int)blockIdx.x, tiles_m, tiles_n, tile_m, tile_n);
    if (tile_m >= tiles_m || tile_n >= tiles_n) return;  // whole block: a grid larger than the tiles
    const long long m0 = (long long)tile_m * TG_BM, n0 = (long long)tile_n * TG_BN;
    const int m_rem = (int)min(m - m0, (long long)TG_BM);  // rows of this tile inside D
    const int n_rem = (int)min(n - n0, (long long)TG_BN);  // columns of this tile inside D
    const int kdim = (int)k;
    const int ktiles = (int)((k + TG_BK - 1) / TG_BK);  // 64-bit: K may be 2^31 - 1
    const bool mn_full = m_rem == TG_BM && n_rem == TG_BN;
{%- if staged_bias %}
    // The tile's bias columns as f32, zero past N: loaded now, parked in shared memory once
    // the prologue's copies are on their way (the pipeline below), read by the epilogue. A
    // load left for the epilogue stalls every warp at once: nothing else runs on the SM.
    constexpr int BIAS_PER_THREAD = (TG_BN + TG_THREADS - 1) / TG_THREADS;
    float* const bias_s = reinterpret_cast<float*>(tg_smem + {{ bias_offset }});
    float bias_pre[BIAS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < BIAS_PER_THREAD; ++i) {
        const int c = tid + i * TG_THREADS;
        bias_pre[i] = c < n_rem ? tg_to_float(bias[n0 + c]) : 0.0f;
    }
{%- endif %}

    // ---- global -> shared copies: this thread's first chunk (row r0, chunk column cc) ----
    const int a_r0 = tid / TG_A_CPR, a_cc = tid % TG_A_CPR;
    const int b_r0 = tid / TG_B_CPR, b_cc = tid % TG_B_CPR;
{%- if a_row_major %}
    const T* a_src = a + (m0 + a_r0) * lda + a_cc * VEC;  // A tile [m][k]
    const long long a_adv = TG_BK;
{%- else %}
    const T* a_src = a + (long long)a_r0 * lda + m0 + a_cc * VEC;  // A tile [k][m]
    const long long a_adv = (long long)TG_BK * lda;
{%- endif %}
{%- if b_row_major %}
    const T* b_src = b + (long long)b_r0 * ldb + n0 + b_cc * VEC;  // B tile [k][n]
    const long long b_adv = (long long)TG_BK * ldb;
{%- else %}
    const T* b_src = b + (n0 + b_r0) * ldb + b_cc * VEC;  // B tile [n][k]
    const long long b_adv = TG_BK;
{%- endif %}
    const long long a_step = (long long)TG_A_RPP * lda, b_step = (long long)TG_B_RPP * ldb;
    const unsigned smem = tg_smem_u32(tg_smem);

    // Issues the copies of a k tile that lies wholly inside the matrices, starting at k0, into
    // the stage at byte offset `stage`: no masks.
    auto load_whole_tile = [&](unsigned stage, int) {
        const unsigned sa = smem + stage, sb = sa + A_STAGE;
        tg_copy_operand<TG_A_LD, TG_A_ITERS, TG_A_RPP, false>(sa, a_src, a_step, a, a_r0, a_cc, 0, 0);
        tg_copy_operand<TG_B_LD, TG_B_ITERS, TG_B_RPP, false>(sb, b_src, b_step, b, b_r0, b_cc, 0, 0);
        a_src += a_adv;
        b_src += b_adv;
    };
    // Any k tile: whole ones as above, the others with each chunk masked to the matrices.
    // Blocks whose every k tile is whole run a main loop that calls only load_whole_tile:
    // with both paths in one loop the compiler predicates the masked one instead of branching
    // around it, and whole tiles paid for its instructions (ncu: 20 of 32 threads per warp
    // active on average).
    auto load_tile = [&](unsigned stage, int k0) {
        const int k_left = kdim - k0;
        if (mn_full && k_left >= TG_BK) {
            load_whole_tile(stage, k0);
            return;
        }
        const unsigned sa = smem + stage, sb = sa + A_STAGE;
{%- if a_row_major %}
        tg_copy_operand<TG_A_LD, TG_A_ITERS, TG_A_RPP, true>(sa, a_src, a_step, a, a_r0, a_cc, m_rem, k_left);
{%- else %}
        tg_copy_operand<TG_A_LD, TG_A_ITERS, TG_A_RPP, true>(sa, a_src, a_step, a, a_r0, a_cc, k_left, m_rem);
{%- endif %}
{%- if b_row_major %}
        tg_copy_operand<TG_B_LD, TG_B_ITERS, TG_B_RPP, true>(sb, b_src, b_step, b, b_r0, b_cc, k_left, n_rem);
{%- else %}
        tg_copy_operand<TG_B_LD, TG_B_ITERS, TG_B_RPP, true>(sb, b_src, b_step, b, b_r0, b_cc, n_rem, k_left);
{%- endif %}
        a_src += a_adv;
        b_src += b_adv;
    };

    // ---- shared -> register fragments: byte offsets of this lane's first address ----
    const int g = lane >> 2, t4 = lane & 3;  // mma groupID, thread in group
{%- if a_row_major %}
    // A [m][k], ldmatrix.x4 per m16 tile: lanes 0-15 rows 0-15 at k 0, lanes 16-31 at k +16 bytes.
    const unsigned a_frag = (unsigned)((warp_m * TG_WM + (lane & 15)) * TG_A_LD * ES + (lane >> 4) * 16);
    constexpr int A_MI = 16 * TG_A_LD * ES, A_KS = MMA_K * ES;
{%- elif tf32 %}
    // A [k][m] fp32: a0 (m g, k t), a1 (m g+8), a2 (k t+4), a3 (both), one 32-bit load each.
    const unsigned a_frag = (unsigned)((t4 * TG_A_LD + warp_m * TG_WM + g) * ES);
    constexpr int A_MI = 16 * ES, A_KS = MMA_K * TG_A_LD * ES;
{%- else %}
    // A [k][m], ldmatrix.x4.trans per m16 tile: matrix j covers k 8(j/2).., m 8(j%2)..
    const unsigned a_frag = (unsigned)((((lane >> 4) << 3) + (lane & 7)) * TG_A_LD * ES + (warp_m * TG_WM + ((lane >> 3) & 1) * 8) * ES);
    constexpr int A_MI = 16 * ES, A_KS = MMA_K * TG_A_LD * ES;
{%- endif %}
{%- if not b_row_major %}
    // B [n][k], ldmatrix.x4 per pair of n8 tiles: matrix j covers n 8(j/2).., k 8(j%2)..
    const unsigned b_frag = (unsigned)((warp_n * TG_WN + ((lane >> 4) << 3) + (lane & 7)) * TG_B_LD * ES + ((lane >> 3) & 1) * 16);
    constexpr int B_NJ = 16 * TG_B_LD * ES, B_KS = MMA_K * ES;
{%- elif tf32 %}
    // B [k][n] fp32: b0 (k t, n g), b1 (k t+4), one 32-bit load each.
    const unsigned b_frag = (unsigned)((t4 * TG_B_LD + warp_n * TG_WN + g) * ES);
    constexpr int B_NI = 8 * ES, B_KS = MMA_K * TG_B_LD * ES;
{%- else %}
    // B [k][n], ldmatrix.x4.trans per pair of n8 tiles: lanes 0-15 k rows 0-15 at n 0, lanes 16-31 at n 8.
    const unsigned b_frag = (unsigned)((lane & 15) * TG_B_LD * ES + (warp_n * TG_WN + (lane >> 4) * 8) * ES);
    constexpr int B_NJ = 16 * ES, B_KS = MMA_K * TG_B_LD * ES;
{%- endif %}

    // Fragments, double-buffered across k steps: af[buf][mi], bf[buf][ni].
    unsigned af[2][MI][4], bf[2][NI][2];
    auto load_frags = [&](int buf, unsigned stage, int ks) {
        const unsigned sa = smem + stage + a_frag + ks * A_KS;
        const unsigned sb = smem + stage + A_STAGE + b_frag + ks * B_KS;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
{%- if a_row_major %}
            tg_ldsm_x4(af[buf][mi], sa + mi * A_MI);
{%- elif tf32 %}
            af[buf][mi][0] = tg_lds32(sa + mi * A_MI);
            af[buf][mi][1] = tg_lds32(sa + mi * A_MI + 8 * ES);
            af[buf][mi][2] = tg_lds32(sa + mi * A_MI + 4 * TG_A_LD * ES);
            af[buf][mi][3] = tg_lds32(sa + mi * A_MI + 4 * TG_A_LD * ES + 8 * ES);
{%- else %}
            tg_ldsm_x4_trans(af[buf][mi], sa + mi * A_MI);
{%- endif %}
{%- if tf32 %}
#pragma unroll
            for (int q = 0; q < 4; ++q) af[buf][mi][q] = tg_tf32(af[buf][mi][q]);
{%- endif %}
        }
{%- if b_row_major and tf32 %}
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
            bf[buf][ni][0] = tg_tf32(tg_lds32(sb + ni * B_NI));
            bf[buf][ni][1] = tg_tf32(tg_lds32(sb + ni * B_NI + 4 * TG_B_LD * ES));
        }
{%- else %}
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
            unsigned r[4];
{%- if b_row_major %}
            tg_ldsm_x4_trans(r, sb + nj * B_NJ);
{%- else %}
            tg_ldsm_x4(r, sb + nj * B_NJ);
{%- endif %}
{%- if tf32 %}
            bf[buf][2 * nj][0] = tg_tf32(r[0]);
            bf[buf][2 * nj][1] = tg_tf32(r[1]);
            bf[buf][2 * nj + 1][0] = tg_tf32(r[2]);
            bf[buf][2 * nj + 1][1] = tg_tf32(r[3]);
{%- else %}
            bf[buf][2 * nj][0] = r[0];
            bf[buf][2 * nj][1] = r[1];
            bf[buf][2 * nj + 1][0] = r[2];
            bf[buf][2 * nj + 1][1] = r[3];
{%- endif %}
        }
{%- endif %}
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;

    // ---- pipeline: instantiated twice, for blocks of whole tiles and for the rest ----
    auto pipeline = [&](auto&& load) {
        // Commit groups are counted, not tiles: the prologue commits STAGES-1 groups and every
        // k tile one more (empty past the last tile), so group g always holds k tile g and
        // "wait until at most STAGES-2 groups are in flight" always means "tile kt+1 has landed".
        unsigned wr = 0;  // byte offset of the stage the next copy writes
#pragma unroll 1
        for (int s = 0; s < TG_STAGES - 1; ++s) {
            if (s < ktiles) load(wr, s * TG_BK);
            tg_cp_async_commit();
            wr += STAGE;
        }
{%- if staged_bias %}
#pragma unroll
        for (int i = 0; i < BIAS_PER_THREAD; ++i) {
            const int c = tid + i * TG_THREADS;
            if (c < TG_BN) bias_s[c] = bias_pre[i];
        }
{%- endif %}
        long long k_next = (TG_STAGES - 1) * TG_BK;  // k of the next tile to copy (steps past K at the end)
        unsigned rd = 0;                        // byte offset of the stage the mma steps read
        tg_cp_async_wait<TG_STAGES - 2>();
        __syncthreads();
        load_frags(0, rd, 0);

#pragma unroll 1
        for (int kt = 0; kt < ktiles; ++kt) {
#pragma unroll
            for (int ks = 0; ks < KK; ++ks) {
                if (ks == KK - 1) {
                    // Tile kt+1 landed (this thread's copies), then the barrier makes every thread's
                    // copies visible and ends all reads of the stage the next copy overwrites.
                    tg_cp_async_wait<TG_STAGES - 2>();
                    __syncthreads();
                    rd = (rd + STAGE == TG_STAGES * STAGE) ? 0u : rd + STAGE;
                }
                // Fragments for the next k step (the first one of tile kt+1 after the barrier).
                load_frags((ks + 1) & 1, rd, (ks + 1) % KK);
                if (ks == 0) {
                    // The stage tile kt-1 was read from: all its reads precede the barrier above
                    // (in the previous trip).
                    if (kt + TG_STAGES - 1 < ktiles) load(wr, (int)k_next);  // k_next < K here
                    tg_cp_async_commit();
                    k_next += TG_BK;
                    wr = (wr + STAGE == TG_STAGES * STAGE) ? 0u : wr + STAGE;
                }
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int nn = 0; nn < NI; ++nn) {
                        const int ni = (mi & 1) ? NI - 1 - nn : nn;  // serpentine: reuse B across m16 tiles
                        tg_mma(acc[mi][ni], af[ks & 1][mi], bf[ks & 1][ni]);
                    }
            }
        }
    };
    if (mn_full && kdim % TG_BK == 0) {
        pipeline(load_whole_tile);
    } else {
        pipeline(load_tile);
    }
    tg_cp_async_wait<0>();

    // ---- epilogue, from registers: acc[mi][ni] holds rows g and g+8 of m16 tile mi, columns
    // 2t4 and 2t4+1 of n8 tile ni ----
    const int row0 = warp_m * TG_WM + g, col0 = warp_n * TG_WN + 2 * t4;
    OT* d_tile = d + m0 * ldd + n0;
{%- if has_residual %}
    const OT* c_tile = c + m0 * ldc + n0;
{%- endif %}
    float bias_v[NI][2];
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
        const int col = col0 + ni * 8;
{%- if staged_bias %}
        bias_v[ni][0] = bias_s[col];  // (0 past N)
        bias_v[ni][1] = bias_s[col + 1];
{%- else %}
        bias_v[ni][0] = bias_v[ni][1] = 0.0f;
{%- endif %}
    }
    const float alpha_v = {% if has_scale %}alpha{% else %}1.0f{% endif %};
{%- if smem_epilogue %}
    // Staged output: the epilogue's results go, as output elements, into a
    // [TG_BM][{{ epi_ld }}] tile of shared memory (the pipeline's stages are free once every warp
    // is past its last fragment load), then out in 16-byte row chunks.
    constexpr int EPI_LD = {{ epi_ld }};  // elements: tile n + 8, so the pair writes of a (half-)warp hit distinct banks
    constexpr int OVEC = 16 / (int)sizeof(OT);          // output elements per 16-byte chunk
    constexpr int EPI_CPR = TG_BN / OVEC;              // chunks per tile row
    static_assert(TG_BM * EPI_LD * (int)sizeof(OT) <= {{ bias_offset }}, "staged output tile overlaps the bias or exceeds shared memory");
    static_assert((TG_BM * EPI_CPR) % TG_THREADS == 0, "output chunks split evenly over the threads");
    OT* const epi = reinterpret_cast<OT*>(tg_smem);
    __syncthreads();  // every warp's last fragment loads are done
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + mi * 16 + h * 8;
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const float v0 = tg_epilogue(acc[mi][ni][2 * h], bias_v[ni][0], 0.0f, alpha_v);
                const float v1 = tg_epilogue(acc[mi][ni][2 * h + 1], bias_v[ni][1], 0.0f, alpha_v);
                tg_store_pair(epi + row * EPI_LD + col0 + ni * 8, v0, v1);
            }
        }
    }
    __syncthreads();
    if (mn_full) {
#pragma unroll
        for (int i = 0; i < TG_BM * EPI_CPR / TG_THREADS; ++i) {
            const int chunk = tid + i * TG_THREADS;
            const int row = chunk / EPI_CPR, col = (chunk % EPI_CPR) * OVEC;
            *reinterpret_cast<uint4*>(d_tile + row * ldd + col) = *reinterpret_cast<const uint4*>(epi + row * EPI_LD + col);
        }
    } else {
#pragma unroll 1
        for (int chunk = tid; chunk < TG_BM * EPI_CPR; chunk += TG_THREADS) {
            const int row = chunk / EPI_CPR, col = (chunk % EPI_CPR) * OVEC;
            if (row >= m_rem || col >= n_rem) continue;
            OT* const dst = d_tile + row * ldd + col;
            const OT* const src = epi + row * EPI_LD + col;
            if (col + OVEC <= n_rem) {
                *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
            } else {
                for (int e = 0; e < n_rem - col; ++e) dst[e] = src[e];
            }
        }
    }
{%- else %}
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + mi * 16 + h * 8;
            if (row >= m_rem) continue;
            OT* d_row = d_tile + row * ldd;
{%- if has_residual %}
            const OT* c_row = c_tile + row * ldc;
{%- endif %}
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int col = col0 + ni * 8;
                float r0 = 0.0f, r1 = 0.0f;
{%- if has_residual %}
                if (col + 1 < n_rem) tg_load_pair(c_row + col, r0, r1);
                else if (col < n_rem) r0 = tg_to_float(c_row[col]);
{%- endif %}
                const float v0 = tg_epilogue(acc[mi][ni][2 * h], bias_v[ni][0], r0, alpha_v);
                const float v1 = tg_epilogue(acc[mi][ni][2 * h + 1], bias_v[ni][1], r1, alpha_v);
                if (col + 1 < n_rem) tg_store_pair(d_row + col, v0, v1);
                else if (col < n_rem) d_row[col] = tg_from_float<OT>(v0);
            }
        }
    }{%- endif %}
}
{% else %}
// ================================ SIMT path (f32) ================================
// Each warp covers TG_WM x TG_WN as (TG_WM/8) x (TG_WN/8) threads; a thread owns rows
// ty*4 + {0..3} and TG_WM/2 + ty*4 + {0..3}, columns tx*4 + {0..3} and TG_WN/2 + tx*4 + {0..3}
// of the warp tile, so its shared-memory reads are four 16-byte vectors per k.

constexpr int VEC = 4;
constexpr int TC = TG_WN / 8;  // threads across a warp tile's columns
constexpr int A_BUF = TG_BK * TG_A_LD, B_BUF = TG_BK * TG_B_LD;  // floats per buffer
static_assert(2 * (A_BUF + B_BUF) * 4 == {{ shared_bytes }}, "shared memory layout disagrees with the launch");
static_assert((TG_WM / 8) * TC == 32, "8x8 outputs per thread");

// Reads one operand's k tile (`outer` rows of contiguous `inner` floats) into registers, 16
// bytes per chunk; zeros outside `outer_lim` rows and `inner_lim` floats per row.
template <int ITERS, bool MASKED>
__device__ __forceinline__ void tg_read_operand(float4 (&v)[ITERS], const float* src, long long step, int r0, int rpp,
                                                int cc, int outer_lim, int inner_lim) {
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const float* p = src + i * step;
        if (!MASKED) {
            v[i] = __ldg(reinterpret_cast<const float4*>(p));
        } else {
            const bool row_ok = r0 + i * rpp < outer_lim;
            const int left = inner_lim - cc * VEC;
            if (row_ok && left >= VEC) {
                v[i] = __ldg(reinterpret_cast<const float4*>(p));
            } else {
                v[i].x = row_ok && left > 0 ? __ldg(p) : 0.0f;
                v[i].y = row_ok && left > 1 ? __ldg(p + 1) : 0.0f;
                v[i].z = row_ok && left > 2 ? __ldg(p + 2) : 0.0f;
                v[i].w = 0.0f;
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(TG_THREADS, TG_MIN_BLOCKS) {{ kernel }}({{ params }}) {
    extern __shared__ __align__(128) unsigned char tg_smem[];
    float* const As = reinterpret_cast<float*>(tg_smem);  // [2][TG_BK][TG_A_LD]: A^T, m contiguous
    float* const Bs = As + 2 * A_BUF;                    // [2][TG_BK][TG_B_LD]: B, n contiguous
    const int tid = (int)threadIdx.x, lane = tid & 31, warp_id = tid >> 5;
    const int wm0 = (warp_id / TG_WARPS_N) * TG_WM, wn0 = (warp_id % TG_WARPS_N) * TG_WN;
    const int ty = lane / TC, tx = lane % TC;

    const int tiles_m = (int)((m + TG_BM - 1) / TG_BM), tiles_n = (int)((n + TG_BN - 1) / TG_BN);
    int tile_m, tile_n;
    tg_tile_coords((int)blockIdx.x, tiles_m, tiles_n, tile_m, tile_n);
    if (tile_m >= tiles_m || tile_n >= tiles_n) return;
    const long long m0 = (long long)tile_m * TG_BM, n0 = (long long)tile_n * TG_BN;
    const int m_rem = (int)min(m - m0, (long long)TG_BM);
    const int n_rem = (int)min(n - n0, (long long)TG_BN);
    const int kdim = (int)k;
    const int ktiles = (int)((k + TG_BK - 1) / TG_BK);  // 64-bit: K may be 2^31 - 1
    const bool mn_full = m_rem == TG_BM && n_rem == TG_BN;

    const int a_r0 = tid / TG_A_CPR, a_cc = tid % TG_A_CPR;
    const int b_r0 = tid / TG_B_CPR, b_cc = tid % TG_B_CPR;
{%- if a_row_major %}
    const float* a_src = a + (m0 + a_r0) * lda + a_cc * VEC;  // rows m, k contiguous
    const long long a_adv = TG_BK;
{%- else %}
    const float* a_src = a + (long long)a_r0 * lda + m0 + a_cc * VEC;  // rows k, m contiguous
    const long long a_adv = (long long)TG_BK * lda;
{%- endif %}
{%- if b_row_major %}
    const float* b_src = b + (long long)b_r0 * ldb + n0 + b_cc * VEC;  // rows k, n contiguous
    const long long b_adv = (long long)TG_BK * ldb;
{%- else %}
    const float* b_src = b + (n0 + b_r0) * ldb + b_cc * VEC;  // rows n, k contiguous
    const long long b_adv = TG_BK;
{%- endif %}
    const long long a_step = (long long)TG_A_RPP * lda, b_step = (long long)TG_B_RPP * ldb;

    float4 ra[TG_A_ITERS], rb[TG_B_ITERS];
    auto read_tile = [&](int k0) {
        const int k_left = kdim - k0;
        if (mn_full && k_left >= TG_BK) {
            tg_read_operand<TG_A_ITERS, false>(ra, a_src, a_step, a_r0, TG_A_RPP, a_cc, 0, 0);
            tg_read_operand<TG_B_ITERS, false>(rb, b_src, b_step, b_r0, TG_B_RPP, b_cc, 0, 0);
        } else {
{%- if a_row_major %}
            tg_read_operand<TG_A_ITERS, true>(ra, a_src, a_step, a_r0, TG_A_RPP, a_cc, m_rem, k_left);
{%- else %}
            tg_read_operand<TG_A_ITERS, true>(ra, a_src, a_step, a_r0, TG_A_RPP, a_cc, k_left, m_rem);
{%- endif %}
{%- if b_row_major %}
            tg_read_operand<TG_B_ITERS, true>(rb, b_src, b_step, b_r0, TG_B_RPP, b_cc, k_left, n_rem);
{%- else %}
            tg_read_operand<TG_B_ITERS, true>(rb, b_src, b_step, b_r0, TG_B_RPP, b_cc, n_rem, k_left);
{%- endif %}
        }
        a_src += a_adv;
        b_src += b_adv;
    };
    // Registers -> shared buffer `buf`, k-major; k-contiguous operands are transposed here.
    auto write_tile = [&](int buf) {
        float* as = As + buf * A_BUF;
        float* bs = Bs + buf * B_BUF;
#pragma unroll
        for (int i = 0; i < TG_A_ITERS; ++i) {
            const int r = a_r0 + i * TG_A_RPP;
{%- if a_row_major %}
            as[(a_cc * VEC + 0) * TG_A_LD + r] = ra[i].x;
            as[(a_cc * VEC + 1) * TG_A_LD + r] = ra[i].y;
            as[(a_cc * VEC + 2) * TG_A_LD + r] = ra[i].z;
            as[(a_cc * VEC + 3) * TG_A_LD + r] = ra[i].w;
{%- else %}
            *reinterpret_cast<float4*>(as + r * TG_A_LD + a_cc * VEC) = ra[i];
{%- endif %}
        }
#pragma unroll
        for (int i = 0; i < TG_B_ITERS; ++i) {
            const int r = b_r0 + i * TG_B_RPP;
{%- if b_row_major %}
            *reinterpret_cast<float4*>(bs + r * TG_B_LD + b_cc * VEC) = rb[i];
{%- else %}
            bs[(b_cc * VEC + 0) * TG_B_LD + r] = rb[i].x;
            bs[(b_cc * VEC + 1) * TG_B_LD + r] = rb[i].y;
            bs[(b_cc * VEC + 2) * TG_B_LD + r] = rb[i].z;
            bs[(b_cc * VEC + 3) * TG_B_LD + r] = rb[i].w;
{%- endif %}
        }
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    if (ktiles > 0) {
        read_tile(0);
        write_tile(0);
    }
    __syncthreads();
#pragma unroll 1
    for (int kt = 0; kt < ktiles; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < ktiles;
        if (more) read_tile((kt + 1) * TG_BK);  // global loads in flight during the FFMAs
        const float* as = As + cur * A_BUF + wm0 + ty * 4;
        const float* bs = Bs + cur * B_BUF + wn0 + tx * 4;
#pragma unroll
        for (int kk = 0; kk < TG_BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(as + kk * TG_A_LD);
            const float4 a1 = *reinterpret_cast<const float4*>(as + kk * TG_A_LD + TG_WM / 2);
            const float4 b0 = *reinterpret_cast<const float4*>(bs + kk * TG_B_LD);
            const float4 b1 = *reinterpret_cast<const float4*>(bs + kk * TG_B_LD + TG_WN / 2);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        // The other buffer was last read in the previous trip, before its closing barrier.
        if (more) write_tile(cur ^ 1);
        __syncthreads();
    }

    // ---- epilogue: rows wm0 + (i/4)(TG_WM/2) + ty*4 + i%4, columns wn0 + jj(TG_WN/2) + tx*4 + 0..3 ----
    {
        // Tile geometry again, from scratch (see tg_ctaid_x): fewer registers live in the loop.
        int tm2, tn2;
        tg_tile_coords(tg_ctaid_x(), tiles_m, tiles_n, tm2, tn2);
        const int lane2 = tg_tid_x() & 31, warp2 = tg_tid_x() >> 5;
        const int wm0 = (warp2 / TG_WARPS_N) * TG_WM, wn0 = (warp2 % TG_WARPS_N) * TG_WN;
        const int ty = lane2 / TC, tx = lane2 % TC;
        const long long m0 = (long long)tm2 * TG_BM, n0 = (long long)tn2 * TG_BN;
        const int m_rem = (int)min(m - m0, (long long)TG_BM);
        const int n_rem = (int)min(n - n0, (long long)TG_BN);
    OT* d_tile = d + m0 * ldd + n0;
{%- if has_residual %}
    const OT* c_tile = c + m0 * ldc + n0;
{%- endif %}
    float bias_v[2][4];
#pragma unroll
    for (int jj = 0; jj < 2; ++jj)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
{%- if has_bias %}
            const int col = wn0 + jj * (TG_WN / 2) + tx * 4 + e;
            bias_v[jj][e] = col < n_rem ? bias[n0 + col] : 0.0f;
{%- else %}
            bias_v[jj][e] = 0.0f;
{%- endif %}
        }
    const float alpha_v = {% if has_scale %}alpha{% else %}1.0f{% endif %};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = wm0 + (i >> 2) * (TG_WM / 2) + ty * 4 + (i & 3);
        if (row >= m_rem) continue;
        OT* d_row = d_tile + row * ldd;
{%- if has_residual %}
        const OT* c_row = c_tile + row * ldc;
{%- endif %}
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
            const int col = wn0 + jj * (TG_WN / 2) + tx * 4;
            const bool full = col + 4 <= n_rem;
            float res[4] = {0.0f, 0.0f, 0.0f, 0.0f};
{%- if has_residual %}
            if (full) {
                const float4 cv = *reinterpret_cast<const float4*>(c_row + col);
                res[0] = cv.x; res[1] = cv.y; res[2] = cv.z; res[3] = cv.w;
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (col + e < n_rem) res[e] = c_row[col + e];
            }
{%- endif %}
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = tg_epilogue(acc[i][jj * 4 + e], bias_v[jj][e], res[e], alpha_v);
            if (full) {
                *reinterpret_cast<float4*>(d_row + col) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (col + e < n_rem) d_row[col + e] = v[e];
            }
        }
    }
    }
}
{% endif %}
