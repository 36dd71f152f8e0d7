{% include "gemm.cuh" %}

// ---- this instance's choices (ops/gemm/mod.rs) ----
#define TG_A_ROW_MAJOR {{ a_row_major }}
#define TG_B_ROW_MAJOR {{ b_row_major }}
#define TG_HAS_BIAS {{ has_bias }}
#define TG_HAS_RESIDUAL {{ has_residual }}
#define TG_HAS_SCALE {{ has_scale }}
#define TG_SHARED_BYTES {{ shared_bytes }}
// Each warp covers TG_WM x TG_WN as (TG_WM/8) x (TG_WN/8) threads; a thread owns rows
// ty*4 + {0..3} and TG_WM/2 + ty*4 + {0..3}, columns tx*4 + {0..3} and TG_WN/2 + tx*4 + {0..3}
// of the warp tile, so its shared-memory reads are four 16-byte vectors per k.

constexpr int VEC = 4;
constexpr int TC = TG_WN / 8;  // threads across a warp tile's columns
constexpr int A_BUF = TG_BK * TG_A_LD, B_BUF = TG_BK * TG_B_LD;  // floats per buffer
static_assert(2 * (A_BUF + B_BUF) * 4 == TG_SHARED_BYTES, "shared memory layout disagrees with the launch");
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

// The whole kernel: one output tile per block. `bias` and `c` (with `ldc`) are null (0) when
// the epilogue has no such step, `alpha` 1 without `scale`.
__device__ __forceinline__ void tg_gemm(const T* __restrict__ a, const T* __restrict__ b, const OT* __restrict__ bias,
                                        const OT* __restrict__ c, OT* __restrict__ d, long long m, long long n,
                                        long long k, long long lda, long long ldb, long long ldc, long long ldd,
                                        float alpha) {
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
    // A: rows m, k contiguous (row-major) or rows k, m contiguous; B: rows k, n contiguous
    // (row-major) or rows n, k contiguous.
    const float* a_src = TG_A_ROW_MAJOR ? a + (m0 + a_r0) * lda + a_cc * VEC : a + (long long)a_r0 * lda + m0 + a_cc * VEC;
    const long long a_adv = TG_A_ROW_MAJOR ? (long long)TG_BK : (long long)TG_BK * lda;
    const float* b_src = TG_B_ROW_MAJOR ? b + (long long)b_r0 * ldb + n0 + b_cc * VEC : b + (n0 + b_r0) * ldb + b_cc * VEC;
    const long long b_adv = TG_B_ROW_MAJOR ? (long long)TG_BK * ldb : (long long)TG_BK;
    const long long a_step = (long long)TG_A_RPP * lda, b_step = (long long)TG_B_RPP * ldb;

    float4 ra[TG_A_ITERS], rb[TG_B_ITERS];
    auto read_tile = [&](int k0) {
        const int k_left = kdim - k0;
        if (mn_full && k_left >= TG_BK) {
            tg_read_operand<TG_A_ITERS, false>(ra, a_src, a_step, a_r0, TG_A_RPP, a_cc, 0, 0);
            tg_read_operand<TG_B_ITERS, false>(rb, b_src, b_step, b_r0, TG_B_RPP, b_cc, 0, 0);
        } else {
            tg_read_operand<TG_A_ITERS, true>(ra, a_src, a_step, a_r0, TG_A_RPP, a_cc, TG_A_ROW_MAJOR ? m_rem : k_left,
                                              TG_A_ROW_MAJOR ? k_left : m_rem);
            tg_read_operand<TG_B_ITERS, true>(rb, b_src, b_step, b_r0, TG_B_RPP, b_cc, TG_B_ROW_MAJOR ? k_left : n_rem,
                                              TG_B_ROW_MAJOR ? n_rem : k_left);
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
            if constexpr (TG_A_ROW_MAJOR) {
                as[(a_cc * VEC + 0) * TG_A_LD + r] = ra[i].x;
                as[(a_cc * VEC + 1) * TG_A_LD + r] = ra[i].y;
                as[(a_cc * VEC + 2) * TG_A_LD + r] = ra[i].z;
                as[(a_cc * VEC + 3) * TG_A_LD + r] = ra[i].w;
            } else {
                *reinterpret_cast<float4*>(as + r * TG_A_LD + a_cc * VEC) = ra[i];
            }
        }
#pragma unroll
        for (int i = 0; i < TG_B_ITERS; ++i) {
            const int r = b_r0 + i * TG_B_RPP;
            if constexpr (TG_B_ROW_MAJOR) {
                *reinterpret_cast<float4*>(bs + r * TG_B_LD + b_cc * VEC) = rb[i];
            } else {
                bs[(b_cc * VEC + 0) * TG_B_LD + r] = rb[i].x;
                bs[(b_cc * VEC + 1) * TG_B_LD + r] = rb[i].y;
                bs[(b_cc * VEC + 2) * TG_B_LD + r] = rb[i].z;
                bs[(b_cc * VEC + 3) * TG_B_LD + r] = rb[i].w;
            }
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
    const OT* c_tile = c + m0 * ldc + n0;  // residual only
    float bias_v[2][4];
#pragma unroll
    for (int jj = 0; jj < 2; ++jj)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if constexpr (TG_HAS_BIAS) {
                const int col = wn0 + jj * (TG_WN / 2) + tx * 4 + e;
                bias_v[jj][e] = col < n_rem ? bias[n0 + col] : 0.0f;
            } else {
                bias_v[jj][e] = 0.0f;
            }
        }
    const float alpha_v = TG_HAS_SCALE ? alpha : 1.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = wm0 + (i >> 2) * (TG_WM / 2) + ty * 4 + (i & 3);
        if (row >= m_rem) continue;
        OT* d_row = d_tile + row * ldd;
        const OT* c_row = c_tile + row * ldc;
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
            const int col = wn0 + jj * (TG_WN / 2) + tx * 4;
            const bool full = col + 4 <= n_rem;
            float res[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if constexpr (TG_HAS_RESIDUAL) {
                if (full) {
                    const float4 cv = *reinterpret_cast<const float4*>(c_row + col);
                    res[0] = cv.x; res[1] = cv.y; res[2] = cv.z; res[3] = cv.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (col + e < n_rem) res[e] = c_row[col + e];
                }
            }
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

extern "C" __global__ void __launch_bounds__(TG_THREADS, TG_MIN_BLOCKS) {{ kernel }}({{ params }}) {
    tg_gemm({{ gemm_args }});
}
