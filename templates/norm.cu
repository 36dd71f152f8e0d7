{{ header }}
//
// {{ op }} over the last dimension of a rows x cols {{ dtype }} tensor, fp32 arithmetic{% if affine %}, with weight{% if op == "layernorm" %} and bias{% endif %}{% endif %}.
// layernorm: out = (x - mean) / sqrt(var + eps) [* weight + bias], one pass over memory.
// rmsnorm: out = x / sqrt(mean(x^2) + eps) [* weight].
// add_rmsnorm: h = x + r, rounded to the dtype and written; y = h / sqrt(mean(h^2) + eps)
// [* weight], from the rounded h (as the next layer reads it back).
// This instance: {% if variant %}{{ variant }}{% else %}onepass{% endif %}, {{ block }} threads x {{ items }} vectors x {{ vec }} elements = at most
// {{ block * items * vec }} columns{% if variant == "staged" and stages > 1 %}, each block walking {{ rows_per_block }} rows through a ring of {{ stages }} row buffers{% endif %}.
// Vector path when cols % {{ vec }} == 0 (pointers 16-byte aligned), else a scalar path.

{% include "prelude.cuh" %}
{% include "rows.cuh" %}

// ---- this norm (ops/rows/mod.rs) ----
enum tg_norm_op { TG_LAYERNORM, TG_RMSNORM, TG_ADD_RMSNORM };
#define TG_OP TG_{{ op | upper }}
// How a thread has its weight (and bias) (ops/rows/mod.rs): loaded with its row (preload), held as
// loaded across a ring's rows (hoist), TG_PREFETCH vectors ahead of their use every row
// (prefetch), loaded where used every row (reread), or none (no weights).
enum tg_weights { TG_W_NONE, TG_W_PRELOAD, TG_W_HOIST, TG_W_PREFETCH, TG_W_REREAD };
#define TG_WEIGHTS {{ weights_id }}
#define TG_PREFETCH {{ prefetch_vectors }}
// add_rmsnorm: vectors of r in flight per thread (the first asked for with x's row, then each
// one used asks for the one this many further on); 0 for the other norms.
#define TG_R_AHEAD {{ residual_ahead }}
// layernorm rings: a path for rows exactly as long as the block's capacity (no bounds checks).
#define TG_LEAN {{ lean }}

// This thread's columns of a row: vector j covers columns (j * THREADS + tid) * VEC onwards.
__device__ __forceinline__ int tg_col(int j) { return tg_row_col<TG_THREADS, T>(j); }

// ---- the residual add (add_rmsnorm): h = x + r in f32, rounded to T as it is written ----
// Vector j of this thread's columns of r as floats, from the vectors in flight (`ahead`); then
// vector j + R_AHEAD is asked for in its place.
template <int R_AHEAD>
__device__ __forceinline__ void tg_residual_vec(const T* __restrict__ rr, int j, int cols, bool vec_ok,
                                                uint4 (&ahead)[R_AHEAD], float (&rv)[TG_VEC]) {
    tg_vec_from_raw(rr, tg_col(j), cols, vec_ok, 0.0f, ahead[j % R_AHEAD], rv);
    if (j + R_AHEAD < TG_ITEMS) ahead[j % R_AHEAD] = tg_load_raw16(rr, tg_col(j + R_AHEAD), cols, vec_ok);
}
__device__ __forceinline__ uint4 tg_pack16(const float*, const float (&v)[4]) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
}
__device__ __forceinline__ uint4 tg_pack16(const tg_f16*, const float (&v)[8]) { return tg_pack_half<tg_f16>(v); }
__device__ __forceinline__ uint4 tg_pack16(const tg_bf16*, const float (&v)[8]) { return tg_pack_half<tg_bf16>(v); }
// Vector j of this thread's columns: v (x's values) plus rv (r's), rounded to T and written to
// the row of h and, when staged, over x's copy in shared memory (this thread's own columns, so
// the second pass reads h there without a barrier); v then holds the rounded h. Columns past
// the row stay as they are (0).
__device__ __forceinline__ void tg_add_residual(int j, int cols, bool vec_ok, float (&v)[TG_VEC], const float (&rv)[TG_VEC],
                                                T* __restrict__ hrow, T* srow) {
    const int c = tg_col(j);
    if (vec_ok) {
        if (c >= cols) return;
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) v[e] += rv[e];
        const uint4 p = tg_pack16(hrow, v);
        __stcs(reinterpret_cast<uint4*>(hrow + c), p);
        if (srow) *reinterpret_cast<uint4*>(srow + c) = p;
        tg_unpack16(hrow, p, v);
    } else {
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) {
            if (c + e >= cols) continue;
            const T hv = tg_from_float<T>(v[e] + rv[e]);
            hrow[c + e] = hv;
            if (srow) srow[c + e] = hv;
            v[e] = tg_to_float(hv);
        }
    }
}
// This thread's share of the row h = x + r, in registers (see tg_add_residual): every 16-byte
// load of x, and the first R_AHEAD of r, issued before any is used, as tg_load_row does.
template <int R_AHEAD>
__device__ __forceinline__ void tg_load_row_residual(const T* __restrict__ xr, const T* __restrict__ rr,
                                                     T* __restrict__ hrow, int cols, bool vec_ok,
                                                     float (&v)[TG_ITEMS][TG_VEC]) {
    uint4 xa[TG_ITEMS], ra[R_AHEAD];
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) {
        xa[j] = tg_load_raw16(xr, tg_col(j), cols, vec_ok);
        if (j < R_AHEAD) ra[j] = tg_load_raw16(rr, tg_col(j), cols, vec_ok);
    }
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) {
        float rv[TG_VEC];
        tg_vec_from_raw(xr, tg_col(j), cols, vec_ok, 0.0f, xa[j], v[j]);
        tg_residual_vec(rr, j, cols, vec_ok, ra, rv);
        tg_add_residual(j, cols, vec_ok, v[j], rv, hrow, nullptr);
    }
}

// Two block-wide sums, as tg_block_sum2, for blocks of at most 8 warps: every thread reads the
// warps' partial sums and adds them pairwise (log2 of the warps deep, as the shuffle tree),
// instead of a second round of shuffles.
template <int THREADS> __device__ __forceinline__ void tg_block_sum2_few(float& a, float& b, float* scratch) {
    constexpr int W = THREADS / 32;
    if constexpr (W > 8) {
        tg_block_sum2<THREADS>(a, b, scratch);
    } else {
        a = tg_warp_sum(a);
        b = tg_warp_sum(b);
        if constexpr (W > 1) {
            tg_publish_per_warp(scratch, a, b);
            float pa[W], pb[W];
#pragma unroll
            for (int w = 0; w < W; ++w) {
                pa[w] = scratch[w];
                pb[w] = scratch[32 + w];
            }
#pragma unroll
            for (int s = 1; s < W; s *= 2)
#pragma unroll
                for (int i = 0; i + s < W; i += 2 * s) {
                    pa[i] += pa[i + s];
                    pb[i] += pb[i + s];
                }
            a = pa[0];
            b = pb[0];
        }
    }
}

// The staged variant's ring of rows in shared memory (copied in by cp.async, so their loads are
// in flight without holding registers); nothing for rows read straight from device memory.
template <bool STAGED, int STAGES> struct tg_norm_ring {
    __device__ __forceinline__ tg_norm_ring(const T* __restrict__, long long, long long, bool) {}
};
template <int STAGES> struct tg_norm_ring<true, STAGES> {
    tg_row_ring<TG_THREADS, TG_ITEMS, STAGES, T> ring;
    __device__ __forceinline__ static T* smem() {
        extern __shared__ uint4 tg_row_smem[];
        return reinterpret_cast<T*>(tg_row_smem);
    }
    __device__ __forceinline__ tg_norm_ring(const T* __restrict__ x, long long rows, long long cols, bool vec_ok)
        : ring(smem(), x, rows, cols, vec_ok) {}
};

// Every row, one block per row (a ring: per rows_per_block rows), grid-stride. The pointers the
// op lacks are null (`r` and `h` but for add_rmsnorm, `weight` without weights, `bias` but for
// an affine layernorm); `out` is add_rmsnorm's y.
template <int OP, int VARIANT, int STAGES, int WEIGHTS, int PREFETCH, int R_AHEAD, bool LEAN>
__device__ __forceinline__ void tg_norm_rows(const T* __restrict__ x, const T* __restrict__ res,
                                             const T* __restrict__ weight, const T* __restrict__ bias,
                                             T* __restrict__ h, T* __restrict__ out, long long rows,
                                             long long cols, float eps, float* scratch) {
    constexpr bool ln = OP == TG_LAYERNORM;
    constexpr bool residual = OP == TG_ADD_RMSNORM;
    constexpr bool staged = VARIANT == TG_STAGED;
    constexpr bool preload = WEIGHTS == TG_W_PRELOAD;
    constexpr bool hoist = WEIGHTS == TG_W_HOIST;
    constexpr bool prefetch = WEIGHTS == TG_W_PREFETCH;
    // Weights per vector where they are used: from the hoisted or prefetched copies, or loaded.
    constexpr bool per_vector = hoist || prefetch || WEIGHTS == TG_W_REREAD;
    constexpr bool affine = WEIGHTS != TG_W_NONE;
    // Column arithmetic in 32 bits (the launchers require cols < 2^31): fewer registers.
    const int ncols = (int)cols;
    const bool vec_ok = (ncols % TG_VEC) == 0;
    const float inv_cols = 1.0f / (float)cols;
    // Vector j of this thread's columns of weight (and bias), as loaded.
    auto load_weights = [&](int j, uint4& w, uint4& b) {
        w = tg_load_raw16(weight, tg_col(j), ncols, vec_ok);
        if constexpr (ln) b = tg_load_raw16(bias, tg_col(j), ncols, vec_ok);
    };
    tg_norm_ring<staged, STAGES> src(x, rows, cols, vec_ok);
    // Hoisted: every row of this block uses the same columns of weight (and bias): loaded once.
    uint4 w_raw[hoist ? TG_ITEMS : 1], b_raw[hoist ? TG_ITEMS : 1];
    if constexpr (hoist) {
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) load_weights(j, w_raw[j], b_raw[j]);
    }
    const int ahead = tg_l2_ahead_rows(cols * (long long)sizeof(T), TG_L2_AHEAD_BYTES);
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        T* __restrict__ yr = out + r * cols;
        T* __restrict__ hr = h + r * cols;
        const T* __restrict__ rr = res + r * cols;
        if constexpr (TG_L2_AHEAD_BYTES > 0) {
            tg_prefetch_row_l2<TG_THREADS>(x, r + ahead, rows, cols);
            if constexpr (residual) tg_prefetch_row_l2<TG_THREADS>(res, r + ahead, rows, cols);
        }
        const T* __restrict__ xr = x + r * cols;
        // Prefetched: the row's first weight (and bias) vectors, loaded before its statistics so
        // their latency hides behind the reduction instead of stalling every warp.
        uint4 w_next[prefetch ? PREFETCH : 1], b_next[prefetch ? PREFETCH : 1];
        if constexpr (prefetch) {
#pragma unroll
            for (int d = 0; d < PREFETCH; ++d) load_weights(d, w_next[d], b_next[d]);
        }
        // Vector j of this thread's weight (and bias) as floats: unpacked from the vectors held
        // across rows or loaded ahead (then vector j + PREFETCH is asked for), else loaded now;
        // rows that are not vectorizable load their own.
        auto weights_of = [&](int j, float (&wj)[TG_VEC], float (&bj)[TG_VEC]) {
            if constexpr (hoist || prefetch) {
                if (vec_ok) {
                    if constexpr (hoist) {
                        tg_unpack16(weight, tg_opaque(w_raw[j]), wj);
                        if constexpr (ln) tg_unpack16(bias, tg_opaque(b_raw[j]), bj);
                    } else {
                        tg_unpack16(weight, w_next[j % PREFETCH], wj);
                        if constexpr (ln) tg_unpack16(bias, b_next[j % PREFETCH], bj);
                    }
                } else {
                    tg_load_vec(weight, tg_col(j), ncols, vec_ok, 0.0f, wj);
                    if constexpr (ln) tg_load_vec(bias, tg_col(j), ncols, vec_ok, 0.0f, bj);
                }
            } else {
                tg_load_vec(weight, tg_col(j), ncols, vec_ok, 0.0f, wj);
                if constexpr (ln) tg_load_vec(bias, tg_col(j), ncols, vec_ok, 0.0f, bj);
            }
            if constexpr (prefetch) {
                if (j + PREFETCH < TG_ITEMS) load_weights(j + PREFETCH, w_next[j % PREFETCH], b_next[j % PREFETCH]);
            }
        };
        if constexpr (staged) {
            float shift = 0.0f;
            bool full = false;
            // add_rmsnorm: this thread's first vectors of r, asked for before waiting on x's
            // staged row, so both are in flight.
            uint4 r_ahead[residual ? R_AHEAD : 1];
            T* srow;
            if constexpr (ln && STAGES > 1) {
                srow = src.ring.take(r);
                // The shift (see the one-pass variant) is column 0, which thread 0 copied:
                // visible to all after a barrier.
                __syncthreads();
                shift = tg_to_float(srow[0]);
                // A row exactly as long as the block's capacity has every vector whole: its path
                // checks no bounds and fills nothing per vector, work that short rows pay per
                // element.
                if constexpr (LEAN) full = vec_ok && ncols == TG_THREADS * TG_ITEMS * TG_VEC;
            } else if constexpr (ln) {
                // The shift: loaded before the wait for the row, so it arrives with it (reading
                // thread 0's copy of column 0 from shared memory needs a barrier, which cost
                // registers this kernel does not have).
                shift = tg_to_float(x[r * cols]);
                srow = src.ring.take(r);
            } else {
                if constexpr (residual) {
#pragma unroll
                    for (int d = 0; d < R_AHEAD; ++d) r_ahead[d] = tg_load_raw16(rr, tg_col(d), ncols, vec_ok);
                }
                srow = src.ring.take(r);
            }
            float mean, rstd;
            if constexpr (ln) {
                float s1 = 0.0f, s2 = 0.0f;
                if (LEAN && full) {
#pragma unroll
                    for (int j = 0; j < TG_ITEMS; ++j) {
                        float t[TG_VEC];
                        tg_load16_shared(srow + tg_col(j), t);
#pragma unroll
                        for (int e = 0; e < TG_VEC; ++e) {
                            const float d = t[e] - shift;
                            s1 += d;
                            s2 = fmaf(d, d, s2);
                        }
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < TG_ITEMS; ++j) {
                        float t[TG_VEC];
                        tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, shift, t);
#pragma unroll
                        for (int e = 0; e < TG_VEC; ++e) {
                            const float d = t[e] - shift;
                            s1 += d;
                            s2 = fmaf(d, d, s2);
                        }
                    }
                }
                if constexpr (LEAN) tg_block_sum2_few<TG_THREADS>(s1, s2, scratch);
                else tg_block_sum2<TG_THREADS>(s1, s2, scratch);
                const float dmean = s1 * inv_cols;
                mean = shift + dmean;
                rstd = rsqrtf(fmaxf(s2 * inv_cols - dmean * dmean, 0.0f) + eps);
            } else {
                float q = 0.0f;
#pragma unroll
                for (int j = 0; j < TG_ITEMS; ++j) {
                    float t[TG_VEC];
                    tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, 0.0f, t);
                    if constexpr (residual) {
                        float rv[TG_VEC];
                        tg_residual_vec(rr, j, ncols, vec_ok, r_ahead, rv);
                        tg_add_residual(j, ncols, vec_ok, t, rv, hr, srow);
                    }
#pragma unroll
                    for (int e = 0; e < TG_VEC; ++e) q = fmaf(t[e], t[e], q);
                }
                rstd = rsqrtf(tg_block_sum<TG_THREADS>(q, scratch) * inv_cols + eps);
                mean = 0.0f;
            }
            if (LEAN && full) {
#pragma unroll
                for (int j = 0; j < TG_ITEMS; ++j) {
                    float t[TG_VEC];
                    tg_load16_shared(srow + tg_col(j), t);
                    float wj[TG_VEC], bj[TG_VEC];
                    if constexpr (affine) weights_of(j, wj, bj);
#pragma unroll
                    for (int e = 0; e < TG_VEC; ++e) {
                        float y = (t[e] - mean) * rstd;
                        if constexpr (affine) y = fmaf(y, wj[e], bj[e]);
                        t[e] = y;
                    }
                    tg_store16(yr + tg_col(j), t);
                }
                continue;
            }
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j) {
                float t[TG_VEC];
                tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, 0.0f, t);
                float wj[TG_VEC], bj[TG_VEC];
                if constexpr (affine) weights_of(j, wj, bj);
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) {
                    float y = (t[e] - mean) * rstd;
                    if constexpr (affine && ln) y = fmaf(y, wj[e], bj[e]);
                    else if constexpr (affine) y *= wj[e];
                    t[e] = y;
                }
                tg_store_row_vec<TG_THREADS>(yr, j, ncols, vec_ok, t);
            }
        } else if constexpr (ln) {
            // Statistics of the row shifted by its first element, in one pass over registers:
            // padding takes the shift's value and so adds nothing, no per-element masks are
            // needed, and the shift keeps E[d^2] - E[d]^2 free of cancellation for real data.
            const float shift = tg_to_float(xr[0]);
            float v[TG_ITEMS][TG_VEC];
            tg_load_row<TG_THREADS, TG_ITEMS>(xr, 0, ncols, vec_ok, shift, v);
            // Small rows: weight and bias are fetched with the row, so their latency hides
            // behind the reductions.
            float wv[preload ? TG_ITEMS : 1][TG_VEC], bv[preload ? TG_ITEMS : 1][TG_VEC];
            if constexpr (preload) {
                tg_load_row<TG_THREADS, TG_ITEMS>(weight, 0, ncols, vec_ok, 0.0f, wv);
                tg_load_row<TG_THREADS, TG_ITEMS>(bias, 0, ncols, vec_ok, 0.0f, bv);
            }
            float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) {
                    const float d = v[j][e] - shift;
                    s1 += d;
                    s2 = fmaf(d, d, s2);
                }
            tg_block_sum2<TG_THREADS>(s1, s2, scratch);
            const float dmean = s1 * inv_cols;
            const float mean = shift + dmean;
            const float var = fmaxf(s2 * inv_cols - dmean * dmean, 0.0f);
            const float rstd = rsqrtf(var + eps);
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j) {
                // Large rows: weight and bias re-read every row (from cache: every row shares them).
                float wj[TG_VEC], bj[TG_VEC];
                if constexpr (per_vector) weights_of(j, wj, bj);
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) {
                    float y = (v[j][e] - mean) * rstd;
                    if constexpr (preload) y = fmaf(y, wv[j][e], bv[j][e]);
                    else if constexpr (per_vector) y = fmaf(y, wj[e], bj[e]);
                    v[j][e] = y;
                }
            }
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j) tg_store_row_vec<TG_THREADS>(yr, j, ncols, vec_ok, v[j]);
        } else {
            float v[TG_ITEMS][TG_VEC];
            if constexpr (residual) tg_load_row_residual<R_AHEAD>(xr, rr, hr, ncols, vec_ok, v);
            else tg_load_row<TG_THREADS, TG_ITEMS>(xr, 0, ncols, vec_ok, 0.0f, v);
            // Small rows: the weight is fetched with the row (as for layernorm).
            float wv[preload ? TG_ITEMS : 1][TG_VEC];
            if constexpr (preload) tg_load_row<TG_THREADS, TG_ITEMS>(weight, 0, ncols, vec_ok, 0.0f, wv);
            float q = 0.0f;
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) q = fmaf(v[j][e], v[j][e], q);
            const float rstd = rsqrtf(tg_block_sum<TG_THREADS>(q, scratch) * inv_cols + eps);
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j) {
                float wj[TG_VEC], bj[TG_VEC];
                if constexpr (per_vector) weights_of(j, wj, bj);
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) {
                    float y = v[j][e] * rstd;
                    if constexpr (preload) y *= wv[j][e];
                    else if constexpr (per_vector) y *= wj[e];
                    v[j][e] = y;
                }
            }
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j) tg_store_row_vec<TG_THREADS>(yr, j, ncols, vec_ok, v[j]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(TG_THREADS, TG_MIN_BLOCKS) {{ kernel }}({{ params }}) {
    __shared__ float scratch[64];
    tg_norm_rows<TG_OP, TG_VARIANT, TG_STAGES, TG_WEIGHTS, TG_PREFETCH, TG_R_AHEAD, TG_LEAN>(
        {{ norm_pointers }}, rows, cols, eps, scratch);
}
