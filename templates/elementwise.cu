{{ header }}
//
// {{ op }}: {% if op == "vector_add" %}out = a + b{% elif op == "silu_mul" %}out = silu(gate) * up{% else %}out = epilogue(x * w + b), epilogue = [{{ epilogue | join(sep=", ") }}]{% endif %}, {{ dtype }}.
// Memory-bound: each thread moves {{ items }} 16-byte vectors per operand per trip, all loads
// issued before any use; grid-stride over the tensor; scalar tail for n % {{ vec }}.
// Launch: {{ block }} threads; grid = ceil(n / {{ block * items * vec }}) (capped; the loop strides).
// Pointers must be 16-byte aligned.

{% include "prelude.cuh" %}

#define TG_THREADS {{ block }}
#define TG_ITEMS {{ items }}
#define TG_VEC {{ vec }}
typedef {{ T }} T;
{% set has_bias = "bias" in epilogue %}
{#- The two-input ops (everything but fma) name their inputs a and b here. #}
{%- set a = "a" %}{% set b = "b" %}
{%- if op == "silu_mul" %}{% set a = "gate" %}{% set b = "up" %}{% endif %}
{% if op == "vector_add" %}
__device__ __forceinline__ float tg_combine(float a, float b) { return a + b; }
{% elif op == "silu_mul" %}
// SwiGLU's gating: silu(gate) * up, in fp32.
__device__ __forceinline__ float tg_combine(float gate, float up) { return tg_silu(gate) * up; }
{% else %}
// x * w + b, then the epilogue chain, in fp32.
__device__ __forceinline__ float tg_combine(float x, float w, float b, float bias) {
    float v = fmaf(x, w, b);
{%- include "epilogue_steps.cuh" %}
    return v;
}
{% endif %}
extern "C" __global__ void __launch_bounds__(TG_THREADS) {{ kernel }}({{ params }}) {
    const long long nvec = n / TG_VEC;
    const long long stride = (long long)gridDim.x * TG_THREADS * TG_ITEMS;
    for (long long base = (long long)blockIdx.x * TG_THREADS * TG_ITEMS + threadIdx.x; base < nvec; base += stride) {
{%- if op != "fma" %}
        // Every 16-byte load is issued before any is unpacked, so all of them are in flight.
        uint4 ra[TG_ITEMS], rb[TG_ITEMS];
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const long long v = base + (long long)j * TG_THREADS;
            if (v < nvec) {
                ra[j] = tg_load_raw16_stream({{ a }} + v * TG_VEC);
                rb[j] = tg_load_raw16_stream({{ b }} + v * TG_VEC);
            }
        }
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const long long v = base + (long long)j * TG_THREADS;
            if (v < nvec) {
                float va[TG_VEC], vb[TG_VEC];
                tg_unpack16({{ a }}, ra[j], va);
                tg_unpack16({{ b }}, rb[j], vb);
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) va[e] = tg_combine(va[e], vb[e]);
                tg_store16(out + v * TG_VEC, va);
            }
        }
{%- else %}
        // Every 16-byte load is issued before any is unpacked, so all of them are in flight.
        uint4 rx[TG_ITEMS], rw[TG_ITEMS], rb[TG_ITEMS];
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const long long v = base + (long long)j * TG_THREADS;
            if (v < nvec) {
                rx[j] = tg_load_raw16_stream(x + v * TG_VEC);
                rw[j] = tg_load_raw16_stream(w + v * TG_VEC);
                rb[j] = tg_load_raw16_stream(b + v * TG_VEC);
            }
        }
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const long long v = base + (long long)j * TG_THREADS;
            if (v < nvec) {
                float vx[TG_VEC], vw[TG_VEC], vb[TG_VEC];
                tg_unpack16(x, rx[j], vx);
                tg_unpack16(w, rw[j], vw);
                tg_unpack16(b, rb[j], vb);
{%- if has_bias %}
                // Column of the vector's first element; the bias row repeats every `cols`.
                long long col = (v * TG_VEC) % cols;
{%- endif %}
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) {
{%- if has_bias %}
                    const float bv = tg_to_float(bias[col]);
                    if (++col == cols) col = 0;
{%- else %}
                    const float bv = 0.0f;
{%- endif %}
                    vx[e] = tg_combine(vx[e], vw[e], vb[e], bv);
                }
                tg_store16(out + v * TG_VEC, vx);
            }
        }
{%- endif %}
    }
    // Scalar tail: the last n % VEC elements, one per thread of the first block.
    const long long first = nvec * TG_VEC;
    if (blockIdx.x == 0 && first + threadIdx.x < n) {
        const long long i = first + threadIdx.x;
{%- if op != "fma" %}
        out[i] = tg_from_float<T>(tg_combine(tg_to_float({{ a }}[i]), tg_to_float({{ b }}[i])));
{%- else %}
{%- if has_bias %}
        const float bv = tg_to_float(bias[i % cols]);
{%- else %}
        const float bv = 0.0f;
{%- endif %}
        out[i] = tg_from_float<T>(tg_combine(tg_to_float(x[i]), tg_to_float(w[i]), tg_to_float(b[i]), bv));
{%- endif %}
    }
}
