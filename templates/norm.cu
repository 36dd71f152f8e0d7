{{ header }}
//
// {{ op }} over the last dimension of a rows x cols {{ dtype }} tensor, fp32 arithmetic{% if affine %}, with weight{% if op == "layernorm" %} and bias{% endif %}{% endif %}.
{%- if op == "layernorm" %}
// out = (x - mean) / sqrt(var + eps){% if affine %} * weight + bias{% endif %}; the variance is taken around the
// mean from registers (two passes over registers, one over memory), so it never goes negative.
{%- else %}
// out = x / sqrt(mean(x^2) + eps){% if affine %} * weight{% endif %}.
{%- endif %}
// The row lives in registers: {{ block }} threads x {{ items }} vectors x {{ vec }} elements = at most
// {{ block * items * vec }} columns. Launch: {{ block }} threads, one block per row (grid-stride).
// Vector path when cols % {{ vec }} == 0 (pointers 16-byte aligned), else a scalar path.

{% include "prelude.cuh" %}

#define TG_THREADS {{ block }}
#define TG_ITEMS {{ items }}
#define TG_VEC {{ vec }}
typedef {{ T }} T;

// One 16-byte vector of a row starting at column c; `fill` where out of range.
__device__ __forceinline__ void tg_load_vec(const T* __restrict__ row, int c, int cols, bool vec_ok,
                                            float fill, float (&v)[TG_VEC]) {
    if (vec_ok) {
        if (c < cols) {
            tg_load16(row + c, v);
        } else {
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) v[e] = fill;
        }
    } else {
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) v[e] = (c + e < cols) ? tg_to_float(row[c + e]) : fill;
    }
}

// This thread's columns of a row: vector j covers columns (j * THREADS + tid) * VEC onwards.
__device__ __forceinline__ int tg_col(int j) { return (j * TG_THREADS + (int)threadIdx.x) * TG_VEC; }

extern "C" __global__ void __launch_bounds__(TG_THREADS, 1) {{ kernel }}({{ params }}) {
    __shared__ float scratch[32];
    // Column arithmetic in 32 bits (the launchers require cols < 2^31): fewer registers.
    const int ncols = (int)cols;
    const bool vec_ok = (ncols % TG_VEC) == 0;
    const float inv_cols = 1.0f / (float)cols;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* __restrict__ xr = x + r * cols;
        T* __restrict__ yr = out + r * cols;
        float v[TG_ITEMS][TG_VEC];
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) tg_load_vec(xr, tg_col(j), ncols, vec_ok, 0.0f, v[j]);
{%- if op == "layernorm" %}
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) s += v[j][e];
        const float mean = tg_block_sum<TG_THREADS>(s, scratch) * inv_cols;
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const int c = tg_col(j);
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) {
                const float d = (c + e < ncols) ? v[j][e] - mean : 0.0f;
                q = fmaf(d, d, q);
            }
        }
        const float rstd = rsqrtf(tg_block_sum<TG_THREADS>(q, scratch) * inv_cols + eps);
        // Weight and bias are shared by every row, so their re-reads hit the cache.
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
{%- if affine %}
            float wj[TG_VEC], bj[TG_VEC];
            tg_load_vec(weight, tg_col(j), ncols, vec_ok, 0.0f, wj);
            tg_load_vec(bias, tg_col(j), ncols, vec_ok, 0.0f, bj);
{%- endif %}
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) {
                float y = (v[j][e] - mean) * rstd;
{%- if affine %}
                y = fmaf(y, wj[e], bj[e]);
{%- endif %}
                v[j][e] = y;
            }
        }
{%- else %}
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) q = fmaf(v[j][e], v[j][e], q);
        const float rstd = rsqrtf(tg_block_sum<TG_THREADS>(q, scratch) * inv_cols + eps);
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
{%- if affine %}
            float wj[TG_VEC];
            tg_load_vec(weight, tg_col(j), ncols, vec_ok, 0.0f, wj);
{%- endif %}
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) {
                float y = v[j][e] * rstd;
{%- if affine %}
                y *= wj[e];
{%- endif %}
                v[j][e] = y;
            }
        }
{%- endif %}
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const int c = tg_col(j);
            if (vec_ok) {
                if (c < ncols) tg_store16(yr + c, v[j]);
            } else {
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e)
                    if (c + e < ncols) yr[c + e] = tg_from_float<T>(v[j][e]);
            }
        }
    }
}
