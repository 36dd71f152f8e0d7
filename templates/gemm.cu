{% include "gemm.cuh" %}

// ---- this instance's choices (ops/gemm/mod.rs) ----
#define TG_A_ROW_MAJOR {{ a_row_major }}
#define TG_B_ROW_MAJOR {{ b_row_major }}
// f32 inputs on tensor cores: rounded to tf32 in registers, m16n8k8.
#define TG_TF32 {{ tf32 }}
#define TG_MMA_IN "{{ dtype }}"
// The bias row of the tile in shared memory (at this byte offset), loaded before the main loop.
#define TG_STAGED_BIAS {{ staged_bias }}
#define TG_BIAS_OFFSET {{ bias_offset }}
#define TG_HAS_RESIDUAL {{ has_residual }}
#define TG_HAS_SCALE {{ has_scale }}
// Outputs staged through shared memory (rows of TG_EPI_LD elements), then stored in 16-byte chunks.
#define TG_SMEM_EPILOGUE {{ smem_epilogue }}
#define TG_EPI_LD {{ epi_ld }}
#define TG_PIPELINE_BYTES {{ pipeline_bytes }}

__device__ __forceinline__ void tg_mma(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    if constexpr (TG_TF32) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %10, %11, %12, %13 };\n"
                     : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TG_MMA_IN "." TG_MMA_IN ".f32 "
                     "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %10, %11, %12, %13 };\n"
                     : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    }
}

constexpr int ES = (int)sizeof(T);  // bytes per input element
constexpr int VEC = 16 / ES;        // elements per 16-byte chunk
constexpr int MMA_K = TG_TF32 ? 8 : 16;
constexpr int MI = TG_WM / 16;      // m16 tiles per warp
constexpr int NI = TG_WN / 8;       // n8 tiles per warp
constexpr int KK = TG_BK / MMA_K;   // mma k steps per k tile (even)
constexpr int A_STAGE = TG_A_ROWS * TG_A_LD * ES;
constexpr int B_STAGE = TG_B_ROWS * TG_B_LD * ES;
constexpr int STAGE = A_STAGE + B_STAGE;
static_assert(TG_STAGES * STAGE == TG_PIPELINE_BYTES, "shared memory layout disagrees with the launch");
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

// The whole kernel: one output tile per block. `bias` and `c` (with `ldc`) are null (0) when
// the epilogue has no such step, `alpha` 1 without `scale`.
__device__ __forceinline__ void tg_gemm(const T* __restrict__ a, const T* __restrict__ b, const OT* __restrict__ bias,
                                        const OT* __restrict__ c, OT* __restrict__ d, long long m, long long n,
                                        long long k, long long lda, long long ldb, long long ldc, long long ldd,
                                        float alpha) {
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
    // Staged bias: the tile's bias columns as f32, zero past N: loaded now, parked in shared
    // memory once the prologue's copies are on their way (the pipeline below), read by the
    // epilogue. A load left for the epilogue stalls every warp at once: nothing else runs on
    // the SM.
    constexpr int BIAS_PER_THREAD = (TG_BN + TG_THREADS - 1) / TG_THREADS;
    float* const bias_s = reinterpret_cast<float*>(tg_smem + TG_BIAS_OFFSET);
    float bias_pre[BIAS_PER_THREAD];
    if constexpr (TG_STAGED_BIAS) {
#pragma unroll
        for (int i = 0; i < BIAS_PER_THREAD; ++i) {
            const int c = tid + i * TG_THREADS;
            bias_pre[i] = c < n_rem ? tg_to_float(bias[n0 + c]) : 0.0f;
        }
    }

    // ---- global -> shared copies: this thread's first chunk (row r0, chunk column cc) ----
    const int a_r0 = tid / TG_A_CPR, a_cc = tid % TG_A_CPR;
    const int b_r0 = tid / TG_B_CPR, b_cc = tid % TG_B_CPR;
    // A tile [m][k] (row-major) or [k][m]; B tile [k][n] (row-major) or [n][k].
    const T* a_src = TG_A_ROW_MAJOR ? a + (m0 + a_r0) * lda + a_cc * VEC : a + (long long)a_r0 * lda + m0 + a_cc * VEC;
    const long long a_adv = TG_A_ROW_MAJOR ? (long long)TG_BK : (long long)TG_BK * lda;
    const T* b_src = TG_B_ROW_MAJOR ? b + (long long)b_r0 * ldb + n0 + b_cc * VEC : b + (n0 + b_r0) * ldb + b_cc * VEC;
    const long long b_adv = TG_B_ROW_MAJOR ? (long long)TG_BK * ldb : (long long)TG_BK;
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
        // Rows and row lengths inside the matrices: (m, k) for A [m][k], (k, m) for A [k][m], ...
        tg_copy_operand<TG_A_LD, TG_A_ITERS, TG_A_RPP, true>(sa, a_src, a_step, a, a_r0, a_cc, TG_A_ROW_MAJOR ? m_rem : k_left,
                                                             TG_A_ROW_MAJOR ? k_left : m_rem);
        tg_copy_operand<TG_B_LD, TG_B_ITERS, TG_B_RPP, true>(sb, b_src, b_step, b, b_r0, b_cc, TG_B_ROW_MAJOR ? k_left : n_rem,
                                                             TG_B_ROW_MAJOR ? n_rem : k_left);
        a_src += a_adv;
        b_src += b_adv;
    };

    // ---- shared -> register fragments: byte offsets of this lane's first address ----
    const int g = lane >> 2, t4 = lane & 3;  // mma groupID, thread in group
    // A [m][k], ldmatrix.x4 per m16 tile: lanes 0-15 rows 0-15 at k 0, lanes 16-31 at k +16 bytes.
    // A [k][m] fp32 (tf32): a0 (m g, k t), a1 (m g+8), a2 (k t+4), a3 (both), one 32-bit load each.
    // A [k][m], ldmatrix.x4.trans per m16 tile: matrix j covers k 8(j/2).., m 8(j%2)..
    const unsigned a_frag =
        TG_A_ROW_MAJOR ? (unsigned)((warp_m * TG_WM + (lane & 15)) * TG_A_LD * ES + (lane >> 4) * 16)
        : TG_TF32      ? (unsigned)((t4 * TG_A_LD + warp_m * TG_WM + g) * ES)
                       : (unsigned)((((lane >> 4) << 3) + (lane & 7)) * TG_A_LD * ES + (warp_m * TG_WM + ((lane >> 3) & 1) * 8) * ES);
    constexpr int A_MI = TG_A_ROW_MAJOR ? 16 * TG_A_LD * ES : 16 * ES;
    constexpr int A_KS = TG_A_ROW_MAJOR ? MMA_K * ES : MMA_K * TG_A_LD * ES;
    // B [n][k], ldmatrix.x4 per pair of n8 tiles: matrix j covers n 8(j/2).., k 8(j%2)..
    // B [k][n] fp32 (tf32): b0 (k t, n g), b1 (k t+4), one 32-bit load each.
    // B [k][n], ldmatrix.x4.trans per pair of n8 tiles: lanes 0-15 k rows 0-15 at n 0, lanes 16-31 at n 8.
    const unsigned b_frag =
        !TG_B_ROW_MAJOR ? (unsigned)((warp_n * TG_WN + ((lane >> 4) << 3) + (lane & 7)) * TG_B_LD * ES + ((lane >> 3) & 1) * 16)
        : TG_TF32       ? (unsigned)((t4 * TG_B_LD + warp_n * TG_WN + g) * ES)
                        : (unsigned)((lane & 15) * TG_B_LD * ES + (warp_n * TG_WN + (lane >> 4) * 8) * ES);
    constexpr int B_NJ = TG_B_ROW_MAJOR ? 16 * ES : 16 * TG_B_LD * ES;  // per pair of n8 tiles
    constexpr int B_NI = 8 * ES;                                       // per n8 tile (tf32, [k][n])
    constexpr int B_KS = TG_B_ROW_MAJOR ? MMA_K * TG_B_LD * ES : MMA_K * ES;

    // Fragments, double-buffered across k steps: af[buf][mi], bf[buf][ni].
    unsigned af[2][MI][4], bf[2][NI][2];
    auto load_frags = [&](int buf, unsigned stage, int ks) {
        const unsigned sa = smem + stage + a_frag + ks * A_KS;
        const unsigned sb = smem + stage + A_STAGE + b_frag + ks * B_KS;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            if constexpr (TG_A_ROW_MAJOR) {
                tg_ldsm_x4(af[buf][mi], sa + mi * A_MI);
            } else if constexpr (TG_TF32) {
                af[buf][mi][0] = tg_lds32(sa + mi * A_MI);
                af[buf][mi][1] = tg_lds32(sa + mi * A_MI + 8 * ES);
                af[buf][mi][2] = tg_lds32(sa + mi * A_MI + 4 * TG_A_LD * ES);
                af[buf][mi][3] = tg_lds32(sa + mi * A_MI + 4 * TG_A_LD * ES + 8 * ES);
            } else {
                tg_ldsm_x4_trans(af[buf][mi], sa + mi * A_MI);
            }
            if constexpr (TG_TF32) {
#pragma unroll
                for (int q = 0; q < 4; ++q) af[buf][mi][q] = tg_tf32(af[buf][mi][q]);
            }
        }
        if constexpr (TG_B_ROW_MAJOR && TG_TF32) {
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                bf[buf][ni][0] = tg_tf32(tg_lds32(sb + ni * B_NI));
                bf[buf][ni][1] = tg_tf32(tg_lds32(sb + ni * B_NI + 4 * TG_B_LD * ES));
            }
        } else {
#pragma unroll
            for (int nj = 0; nj < NI / 2; ++nj) {
                unsigned r[4];
                if constexpr (TG_B_ROW_MAJOR) tg_ldsm_x4_trans(r, sb + nj * B_NJ);
                else tg_ldsm_x4(r, sb + nj * B_NJ);
                if constexpr (TG_TF32) {
                    bf[buf][2 * nj][0] = tg_tf32(r[0]);
                    bf[buf][2 * nj][1] = tg_tf32(r[1]);
                    bf[buf][2 * nj + 1][0] = tg_tf32(r[2]);
                    bf[buf][2 * nj + 1][1] = tg_tf32(r[3]);
                } else {
                    bf[buf][2 * nj][0] = r[0];
                    bf[buf][2 * nj][1] = r[1];
                    bf[buf][2 * nj + 1][0] = r[2];
                    bf[buf][2 * nj + 1][1] = r[3];
                }
            }
        }
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
        if constexpr (TG_STAGED_BIAS) {
#pragma unroll
            for (int i = 0; i < BIAS_PER_THREAD; ++i) {
                const int c = tid + i * TG_THREADS;
                if (c < TG_BN) bias_s[c] = bias_pre[i];
            }
        }
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
    const OT* c_tile = c + m0 * ldc + n0;  // residual only
    float bias_v[NI][2];
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
        const int col = col0 + ni * 8;
        if constexpr (TG_STAGED_BIAS) {
            bias_v[ni][0] = bias_s[col];  // (0 past N)
            bias_v[ni][1] = bias_s[col + 1];
        } else {
            bias_v[ni][0] = bias_v[ni][1] = 0.0f;
        }
    }
    const float alpha_v = TG_HAS_SCALE ? alpha : 1.0f;
    if constexpr (TG_SMEM_EPILOGUE) {
    // Staged output: the epilogue's results go, as output elements, into a
    // [TG_BM][TG_EPI_LD] tile of shared memory (the pipeline's stages are free once every warp
    // is past its last fragment load), then out in 16-byte row chunks.
    constexpr int EPI_LD = TG_EPI_LD;  // elements: tile n + 8, so the pair writes of a (half-)warp hit distinct banks
    constexpr int OVEC = 16 / (int)sizeof(OT);          // output elements per 16-byte chunk
    constexpr int EPI_CPR = TG_BN / OVEC;              // chunks per tile row
    static_assert(!TG_SMEM_EPILOGUE || TG_BM * EPI_LD * (int)sizeof(OT) <= TG_BIAS_OFFSET,
                  "staged output tile overlaps the bias or exceeds shared memory");
    static_assert(!TG_SMEM_EPILOGUE || (TG_BM * EPI_CPR) % TG_THREADS == 0, "output chunks split evenly over the threads");
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
    } else {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + mi * 16 + h * 8;
            if (row >= m_rem) continue;
            OT* d_row = d_tile + row * ldd;
            const OT* c_row = c_tile + row * ldc;
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int col = col0 + ni * 8;
                float r0 = 0.0f, r1 = 0.0f;
                if constexpr (TG_HAS_RESIDUAL) {
                    if (col + 1 < n_rem) tg_load_pair(c_row + col, r0, r1);
                    else if (col < n_rem) r0 = tg_to_float(c_row[col]);
                }
                const float v0 = tg_epilogue(acc[mi][ni][2 * h], bias_v[ni][0], r0, alpha_v);
                const float v1 = tg_epilogue(acc[mi][ni][2 * h + 1], bias_v[ni][1], r1, alpha_v);
                if (col + 1 < n_rem) tg_store_pair(d_row + col, v0, v1);
                else if (col < n_rem) d_row[col] = tg_from_float<OT>(v0);
            }
        }
    }
    }
}

extern "C" __global__ void __launch_bounds__(TG_THREADS, TG_MIN_BLOCKS) {{ kernel }}({{ params }}) {
    tg_gemm({{ gemm_args }});
}
