{%- set residual = op == "add_rmsnorm" -%}
{{ header }}
//
// {{ op }} over the last dimension of a rows x cols {{ dtype }} tensor, fp32 arithmetic{% if affine %}, with weight{% if op == "layernorm" %} and bias{% endif %}{% endif %}.
{%- if op == "layernorm" %}
// out = (x - mean) / sqrt(var + eps){% if affine %} * weight + bias{% endif %}; one pass over memory.
{%- elif residual %}
// h = x + r, rounded to {{ dtype }} and written; y = h / sqrt(mean(h^2) + eps){% if affine %} * weight{% endif %}, from the
// rounded h (as the next layer reads it back).
{%- else %}
// out = x / sqrt(mean(x^2) + eps){% if affine %} * weight{% endif %}.
{%- endif %}
// The row lives in {% if variant == "staged" %}shared memory{% else %}registers{% endif %}: {{ block }} threads x {{ items }} vectors x {{ vec }} elements = at most
// {{ block * items * vec }} columns. Launch: {{ block }} threads, {% if variant == "staged" and stages > 1 %}one block per {% if rows_per_block == 1 %}row{% else %}{{ rows_per_block }} rows{% endif %}, walked
// through a shared-memory ring of {{ stages }} row buffers{% else %}one block per row{% endif %} (grid-stride).
// Vector path when cols % {{ vec }} == 0 (pointers 16-byte aligned), else a scalar path.

{% include "prelude.cuh" %}
{% include "rows.cuh" %}

// This thread's columns of a row: vector j covers columns (j * THREADS + tid) * VEC onwards.
__device__ __forceinline__ int tg_col(int j) { return tg_row_col<TG_THREADS, T>(j); }
{%- if residual %}

// ---- the residual add: h = x + r in f32, rounded to T as it is written ----
// Vectors of r in flight per thread (ops/rows.rs): the first asked for with x's row, then each
// one used asks for the one this many further on.
#define TG_R_AHEAD {{ residual_ahead }}
// Vector j of this thread's columns of r as floats, from the vectors in flight (`ahead`); then
// vector j + TG_R_AHEAD is asked for in its place.
__device__ __forceinline__ void tg_residual_vec(const T* __restrict__ rr, int j, int cols, bool vec_ok,
                                                uint4 (&ahead)[TG_R_AHEAD], float (&rv)[TG_VEC]) {
    tg_vec_from_raw(rr, tg_col(j), cols, vec_ok, 0.0f, ahead[j % TG_R_AHEAD], rv);
    if (j + TG_R_AHEAD < TG_ITEMS) ahead[j % TG_R_AHEAD] = tg_load_raw16(rr, tg_col(j + TG_R_AHEAD), cols, vec_ok);
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
{%- if variant != "staged" %}
// This thread's share of the row h = x + r, in registers (see tg_add_residual): every 16-byte
// load of x, and the first TG_R_AHEAD of r, issued before any is used, as tg_load_row does.
__device__ __forceinline__ void tg_load_row_residual(const T* __restrict__ xr, const T* __restrict__ rr,
                                                     T* __restrict__ hrow, int cols, bool vec_ok,
                                                     float (&v)[TG_ITEMS][TG_VEC]) {
    uint4 xa[TG_ITEMS], ra[TG_R_AHEAD];
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) {
        xa[j] = tg_load_raw16(xr, tg_col(j), cols, vec_ok);
        if (j < TG_R_AHEAD) ra[j] = tg_load_raw16(rr, tg_col(j), cols, vec_ok);
    }
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) {
        float rv[TG_VEC];
        tg_vec_from_raw(xr, tg_col(j), cols, vec_ok, 0.0f, xa[j], v[j]);
        tg_residual_vec(rr, j, cols, vec_ok, ra, rv);
        tg_add_residual(j, cols, vec_ok, v[j], rv, hrow, nullptr);
    }
}
{%- endif %}
{%- endif %}

{#- weights (ops/rows.rs): "preload" loads all of a thread's weight (and bias) with its row;
    "hoist" holds them, as loaded, across a ring's rows; "prefetch" loads TG_PREFETCH vectors
    ahead of their use, every row; "reread" loads each where it is used, every row; "none"
    without weights. #}
{%- set preload = weights == "preload" %}
{%- set hoist = weights == "hoist" %}
{%- set prefetch = weights == "prefetch" %}
{%- set reread = weights == "reread" %}
{%- if prefetch %}
// Weight{% if op == "layernorm" %} and bias{% endif %} vectors in flight ahead of their use: a row's first ones load before its
// statistics, so their latency hides behind the reduction instead of stalling every warp.
#define TG_PREFETCH {{ prefetch_vectors }}
{%- endif %}
{%- if lean %}
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
{%- endif %}
extern "C" __global__ void __launch_bounds__(TG_THREADS, TG_MIN_BLOCKS) {{ kernel }}({{ params }}) {
    __shared__ float scratch[64];
    // Column arithmetic in 32 bits (the launchers require cols < 2^31): fewer registers.
    const int ncols = (int)cols;
    const bool vec_ok = (ncols % TG_VEC) == 0;
    const float inv_cols = 1.0f / (float)cols;
{%- if residual %}
    const T* __restrict__ res = r; // the residual (`r` names the row below)
{%- endif %}
{%- set ln = op == "layernorm" %}
{%- if hoist or prefetch %}
    // Vector j of this thread's columns of weight{% if ln %} and bias{% endif %}, as loaded.
    auto load_weights = [&](int j, uint4& w{% if ln %}, uint4& b{% endif %}) {
        w = tg_load_raw16(weight, tg_col(j), ncols, vec_ok);
{%- if ln %}
        b = tg_load_raw16(bias, tg_col(j), ncols, vec_ok);
{%- endif %}
    };
{%- endif %}
{%- if variant == "staged" %}
    // Rows copied in by cp.async: their loads are in flight without holding registers.
    extern __shared__ uint4 tg_row_smem[];
    tg_row_ring<TG_THREADS, TG_ITEMS, TG_STAGES, T> ring(reinterpret_cast<T*>(tg_row_smem), x, rows, cols, vec_ok);
{%- if hoist %}
    // Every row of this block uses the same columns of weight{% if op == "layernorm" %} and bias{% endif %}: load them once.
    uint4 w_raw[TG_ITEMS];
{%- if op == "layernorm" %}
    uint4 b_raw[TG_ITEMS];
{%- endif %}
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) load_weights(j, w_raw[j]{% if ln %}, b_raw[j]{% endif %});
{%- endif %}
{%- endif %}
{%- if l2_ahead_bytes > 0 %}
    const int ahead = tg_l2_ahead_rows(cols * (long long)sizeof(T), TG_L2_AHEAD_BYTES);
{%- endif %}
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        T* __restrict__ yr = {% if residual %}y{% else %}out{% endif %} + r * cols;
{%- if residual %}
        T* __restrict__ hr = h + r * cols;
        const T* __restrict__ rr = res + r * cols;
{%- endif %}
{%- if l2_ahead_bytes > 0 %}
        tg_prefetch_row_l2<TG_THREADS>(x, r + ahead, rows, cols);
{%- if residual %}
        tg_prefetch_row_l2<TG_THREADS>(res, r + ahead, rows, cols);
{%- endif %}
{%- endif %}
{%- if variant != "staged" %}
        const T* __restrict__ xr = x + r * cols;
{%- endif %}
{%- if prefetch %}
        uint4 w_next[TG_PREFETCH];
{%- if op == "layernorm" %}
        uint4 b_next[TG_PREFETCH];
{%- endif %}
#pragma unroll
        for (int d = 0; d < TG_PREFETCH; ++d) load_weights(d, w_next[d]{% if ln %}, b_next[d]{% endif %});
{%- endif %}
{%- set per_vector = hoist or prefetch or reread %}
{%- if per_vector %}
        // Vector j of this thread's weight{% if ln %} and bias{% endif %} as floats, {% if hoist %}unpacked from the vectors held
        // across rows{% elif prefetch %}unpacked from the vectors loaded ahead;
        // then vector j + TG_PREFETCH is asked for{% else %}loaded now{% endif %} (rows that are not vectorizable load their own).
        auto weights_of = [&](int j, float (&wj)[TG_VEC]{% if ln %}, float (&bj)[TG_VEC]{% endif %}) {
{%- if hoist or prefetch %}
{%- if hoist %}{% set wsrc = "tg_opaque(w_raw[j])" %}{% set bsrc = "tg_opaque(b_raw[j])" %}
{%- else %}{% set wsrc = "w_next[j % TG_PREFETCH]" %}{% set bsrc = "b_next[j % TG_PREFETCH]" %}{% endif %}
            if (vec_ok) {
                tg_unpack16(weight, {{ wsrc }}, wj);
{%- if ln %}
                tg_unpack16(bias, {{ bsrc }}, bj);
{%- endif %}
            } else
{%- endif %}
            {
                tg_load_vec(weight, tg_col(j), ncols, vec_ok, 0.0f, wj);
{%- if ln %}
                tg_load_vec(bias, tg_col(j), ncols, vec_ok, 0.0f, bj);
{%- endif %}
            }
{%- if prefetch %}
            if (j + TG_PREFETCH < TG_ITEMS)
                load_weights(j + TG_PREFETCH, w_next[j % TG_PREFETCH]{% if ln %}, b_next[j % TG_PREFETCH]{% endif %});
{%- endif %}
        };
{%- endif %}
{%- if variant == "staged" %}
{%- if op == "layernorm" and stages > 1 %}
        const T* srow = ring.take(r);
        // The shift (see the one-pass variant) is column 0, which thread 0 copied: visible
        // to all after a barrier.
        __syncthreads();
        const float shift = tg_to_float(srow[0]);
{%- if lean %}
        // A row exactly as long as the block's capacity has every vector whole: its path
        // checks no bounds and fills nothing per vector, work that short rows pay per element.
        const bool full = vec_ok && ncols == TG_THREADS * TG_ITEMS * TG_VEC;
{%- endif %}
{%- elif op == "layernorm" %}
        // The shift (see the one-pass variant): loaded before the wait for the row, so it
        // arrives with it (reading thread 0's copy of column 0 from shared memory needs a
        // barrier, which cost registers this kernel does not have).
        const float shift = tg_to_float(x[r * cols]);
        const T* srow = ring.take(r);
{%- else %}
{%- if residual %}
        // This thread's first vectors of r, asked for before waiting on x's staged row: both in flight.
        uint4 r_ahead[TG_R_AHEAD];
#pragma unroll
        for (int d = 0; d < TG_R_AHEAD; ++d) r_ahead[d] = tg_load_raw16(rr, tg_col(d), ncols, vec_ok);
{%- endif %}
        {% if not residual %}const {% endif %}T* srow = ring.take(r);
{%- endif %}
{%- if op == "layernorm" %}
        float s1 = 0.0f, s2 = 0.0f;
{%- if lean %}
        if (full) {
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
{%- endif %}
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
{%- if lean %}
        }
        tg_block_sum2_few<TG_THREADS>(s1, s2, scratch);
{%- else %}
        tg_block_sum2<TG_THREADS>(s1, s2, scratch);
{%- endif %}
        const float dmean = s1 * inv_cols;
        const float mean = shift + dmean;
        const float rstd = rsqrtf(fmaxf(s2 * inv_cols - dmean * dmean, 0.0f) + eps);
{%- else %}
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            float t[TG_VEC];
            tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, 0.0f, t);
{%- if residual %}
            float rv[TG_VEC];
            tg_residual_vec(rr, j, ncols, vec_ok, r_ahead, rv);
            tg_add_residual(j, ncols, vec_ok, t, rv, hr, srow);
{%- endif %}
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) q = fmaf(t[e], t[e], q);
        }
        const float rstd = rsqrtf(tg_block_sum<TG_THREADS>(q, scratch) * inv_cols + eps);
        const float mean = 0.0f;
{%- endif %}
{%- if lean %}
        if (full) {
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j) {
                float t[TG_VEC];
                tg_load16_shared(srow + tg_col(j), t);
{%- if affine %}
                float wj[TG_VEC], bj[TG_VEC];
                weights_of(j, wj, bj);
{%- endif %}
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) {
                    float y = (t[e] - mean) * rstd;
{%- if affine %}
                    y = fmaf(y, wj[e], bj[e]);
{%- endif %}
                    t[e] = y;
                }
                tg_store16(yr + tg_col(j), t);
            }
            continue;
        }
{%- endif %}
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            float t[TG_VEC];
            tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, 0.0f, t);
{%- if affine %}
            float wj[TG_VEC]{% if ln %}, bj[TG_VEC]{% endif %};
            weights_of(j, wj{% if ln %}, bj{% endif %});
{%- endif %}
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) {
                float y = (t[e] - mean) * rstd;
{%- if affine and op == "layernorm" %}
                y = fmaf(y, wj[e], bj[e]);
{%- elif affine %}
                y *= wj[e];
{%- endif %}
                t[e] = y;
            }
            tg_store_row_vec<TG_THREADS>(yr, j, ncols, vec_ok, t);
        }
{%- elif op == "layernorm" %}
        // Statistics of the row shifted by its first element, in one pass over registers:
        // padding takes the shift's value and so adds nothing, no per-element masks are
        // needed, and the shift keeps E[d^2] - E[d]^2 free of cancellation for real data.
        const float shift = tg_to_float(xr[0]);
        float v[TG_ITEMS][TG_VEC];
        tg_load_row<TG_THREADS, TG_ITEMS>(xr, 0, ncols, vec_ok, shift, v);
{%- if preload %}
        // Small rows: weight and bias are fetched with the row, so their latency hides behind
        // the reductions.
        float wv[TG_ITEMS][TG_VEC], bv[TG_ITEMS][TG_VEC];
        tg_load_row<TG_THREADS, TG_ITEMS>(weight, 0, ncols, vec_ok, 0.0f, wv);
        tg_load_row<TG_THREADS, TG_ITEMS>(bias, 0, ncols, vec_ok, 0.0f, bv);
{%- endif %}
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
{%- if per_vector %}
            // Large rows: weight and bias re-read every row (from cache: every row shares them).
            float wj[TG_VEC], bj[TG_VEC];
            weights_of(j, wj, bj);
{%- elif preload %}
            const float (&wj)[TG_VEC] = wv[j];
            const float (&bj)[TG_VEC] = bv[j];
{%- endif %}
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) {
                float y = (v[j][e] - mean) * rstd;
{%- if preload or per_vector %}
                y = fmaf(y, wj[e], bj[e]);
{%- endif %}
                v[j][e] = y;
            }
        }
{%- else %}
        float v[TG_ITEMS][TG_VEC];
{%- if residual %}
        tg_load_row_residual(xr, rr, hr, ncols, vec_ok, v);
{%- else %}
        tg_load_row<TG_THREADS, TG_ITEMS>(xr, 0, ncols, vec_ok, 0.0f, v);
{%- endif %}
{%- if preload %}
        // Small rows: the weight is fetched with the row (as for layernorm).
        float wv[TG_ITEMS][TG_VEC];
        tg_load_row<TG_THREADS, TG_ITEMS>(weight, 0, ncols, vec_ok, 0.0f, wv);
{%- endif %}
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) q = fmaf(v[j][e], v[j][e], q);
        const float rstd = rsqrtf(tg_block_sum<TG_THREADS>(q, scratch) * inv_cols + eps);
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
{%- if per_vector %}
            float wj[TG_VEC];
            weights_of(j, wj);
{%- elif preload %}
            const float (&wj)[TG_VEC] = wv[j];
{%- endif %}
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) {
                float y = v[j][e] * rstd;
{%- if preload or per_vector %}
                y *= wj[e];
{%- endif %}
                v[j][e] = y;
            }
        }
{%- endif %}
{%- if variant != "staged" %}
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) tg_store_row_vec<TG_THREADS>(yr, j, ncols, vec_ok, v[j]);
{%- endif %}
    }
}
