{{ header }}
//
// {{ op }}, {{ dtype }}: out[i] = combine(inputs[i]) for i < n, in fp32 (the combine of each op is below).
// Memory-bound: each thread moves {{ items }} 16-byte vectors per operand per trip, all loads
// issued before any use; grid-stride over the tensor; scalar tail for n % {{ vec }}.
// Launch: {{ block }} threads; grid = ceil(n / {{ block * items * vec }}) (capped; the loop strides).
// Pointers must be 16-byte aligned.

{% include "prelude.cuh" %}

// ---- this instance (ops/elementwise/mod.rs) ----
#define TG_THREADS {{ block }}
#define TG_ITEMS {{ items }}
#define TG_VEC {{ vec }}
typedef {{ T }} T;
enum tg_elementwise_op { TG_VECTOR_ADD, TG_SILU_MUL, TG_FMA };
#define TG_OP TG_{{ op | upper }}
// fma: a bias row of `cols` elements broadcast over the rows of the output.
#define TG_BIAS {{ has_bias }}

// The two-input ops: vector_add (a + b) and silu_mul (SwiGLU's gating, silu(gate) * up).
__device__ __forceinline__ float tg_combine(float a, float b) {
    if constexpr (TG_OP == TG_SILU_MUL) return tg_silu(a) * b;
    else return a + b;
}
// fma: x * w + b, then the epilogue chain (src/ops/epilogue.rs), in spec order.
__device__ __forceinline__ float tg_combine(float x, float w, float b, float bias) {
    float v = fmaf(x, w, b);
{%- include "epilogue_steps.cuh" %}
    return v;
}

// out = combine(a, b) over n elements.
__device__ __forceinline__ void tg_map2(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n) {
    const long long nvec = n / TG_VEC;
    const long long stride = (long long)gridDim.x * TG_THREADS * TG_ITEMS;
    for (long long base = (long long)blockIdx.x * TG_THREADS * TG_ITEMS + threadIdx.x; base < nvec; base += stride) {
        // Every 16-byte load is issued before any is unpacked, so all of them are in flight.
        uint4 ra[TG_ITEMS], rb[TG_ITEMS];
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const long long v = base + (long long)j * TG_THREADS;
            if (v < nvec) {
                ra[j] = tg_load_raw16_stream(a + v * TG_VEC);
                rb[j] = tg_load_raw16_stream(b + v * TG_VEC);
            }
        }
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j) {
            const long long v = base + (long long)j * TG_THREADS;
            if (v < nvec) {
                float va[TG_VEC], vb[TG_VEC];
                tg_unpack16(a, ra[j], va);
                tg_unpack16(b, rb[j], vb);
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) va[e] = tg_combine(va[e], vb[e]);
                tg_store16(out + v * TG_VEC, va);
            }
        }
    }
    // Scalar tail: the last n % VEC elements, one per thread of the first block.
    const long long first = nvec * TG_VEC;
    if (blockIdx.x == 0 && first + threadIdx.x < n) {
        const long long i = first + threadIdx.x;
        out[i] = tg_from_float<T>(tg_combine(tg_to_float(a[i]), tg_to_float(b[i])));
    }
}

// out = combine(x, w, b, bias[col]) over n elements (bias: a row of `cols`, when TG_BIAS).
__device__ __forceinline__ void tg_map_fma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                           const T* __restrict__ bias, T* __restrict__ out, long long n, long long cols) {
    const long long nvec = n / TG_VEC;
    const long long stride = (long long)gridDim.x * TG_THREADS * TG_ITEMS;
    for (long long base = (long long)blockIdx.x * TG_THREADS * TG_ITEMS + threadIdx.x; base < nvec; base += stride) {
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
                // Column of the vector's first element; the bias row repeats every `cols`.
                long long col = TG_BIAS ? (v * TG_VEC) % cols : 0;
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) {
                    float bv = 0.0f;
                    if constexpr (TG_BIAS) {
                        bv = tg_to_float(bias[col]);
                        if (++col == cols) col = 0;
                    }
                    vx[e] = tg_combine(vx[e], vw[e], vb[e], bv);
                }
                tg_store16(out + v * TG_VEC, vx);
            }
        }
    }
    // Scalar tail: the last n % VEC elements, one per thread of the first block.
    const long long first = nvec * TG_VEC;
    if (blockIdx.x == 0 && first + threadIdx.x < n) {
        const long long i = first + threadIdx.x;
        const float bv = TG_BIAS ? tg_to_float(bias[i % cols]) : 0.0f;
        out[i] = tg_from_float<T>(tg_combine(tg_to_float(x[i]), tg_to_float(w[i]), tg_to_float(b[i]), bv));
    }
}

extern "C" __global__ void __launch_bounds__(TG_THREADS) {{ kernel }}({{ params }}) {
    {{ map_call }};
}
