{{ header }}
//
// softmax over the last dimension of a rows x cols {{ dtype }} tensor, fp32 arithmetic,
// numerically stable (the row maximum is subtracted before exponentiation), {{ variant }}
// variant. Launch: {{ block }} threads, {% if variant == "staged" and stages > 1 %}one block per {{ rows_per_block }} rows{% else %}one block per row{% endif %} (grid-stride over rows).
// Vector path when cols % {{ vec }} == 0 (pointers 16-byte aligned), else a scalar path.

{% include "prelude.cuh" %}
{% include "rows.cuh" %}
#define TG_CHUNK (TG_THREADS * TG_ITEMS * TG_VEC)

// Stores this thread's share of columns [c0, c0 + TG_CHUNK) of an output row.
__device__ __forceinline__ void tg_store_chunk(T* __restrict__ row, int c0, int cols, bool vec_ok,
                                               const float (&v)[TG_ITEMS][TG_VEC]) {
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) tg_store_vec(row, c0 + tg_row_col<TG_THREADS, T>(j), cols, vec_ok, v[j]);
}

// One pass: the row lives in registers (TG_THREADS x TG_ITEMS vectors, at most TG_CHUNK
// columns), read once and written once.
__device__ __forceinline__ void tg_softmax_onepass(const T* __restrict__ xr, T* __restrict__ yr, int ncols, bool vec_ok,
                                                   float* scratch) {
    float v[TG_ITEMS][TG_VEC];
    tg_load_row<TG_THREADS, TG_ITEMS>(xr, 0, ncols, vec_ok, TG_NEG_INF, v);
    float m = TG_NEG_INF;
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) m = fmaxf(m, v[j][e]);
    const float row_max = tg_block_max<TG_THREADS>(m, scratch);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) {
            v[j][e] = tg_exp_nonpos(v[j][e] - row_max);  // exp(-inf) = 0 for padding
            s += v[j][e];
        }
    const float inv = 1.0f / tg_block_sum<TG_THREADS>(s, scratch);
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) v[j][e] *= inv;
    tg_store_chunk(yr, 0, ncols, vec_ok, v);
}

// Online: rows of any length. Pass 1 keeps a running (max, sum) per thread, rescaling the sum
// when the max grows; pass 2 re-reads the row (mostly from L2) and writes.
__device__ __forceinline__ void tg_softmax_online(const T* __restrict__ xr, T* __restrict__ yr, int ncols, bool vec_ok,
                                                  float* scratch) {
    float v[TG_ITEMS][TG_VEC];
    float m = TG_NEG_INF, s = 0.0f;
    for (int c0 = 0; c0 < ncols; c0 += TG_CHUNK) {
        tg_load_row<TG_THREADS, TG_ITEMS>(xr, c0, ncols, vec_ok, TG_NEG_INF, v);
        float cm = TG_NEG_INF;
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) cm = fmaxf(cm, v[j][e]);
        if (cm > m) {
            s *= tg_exp_nonpos(m - cm);
            m = cm;
        }
        if (m != TG_NEG_INF) {
#pragma unroll
            for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
                for (int e = 0; e < TG_VEC; ++e) s += tg_exp_nonpos(v[j][e] - m);
        }
    }
    const float row_max = tg_block_max<TG_THREADS>(m, scratch);
    const float mine = (m == TG_NEG_INF) ? 0.0f : s * tg_exp_nonpos(m - row_max);
    const float inv = 1.0f / tg_block_sum<TG_THREADS>(mine, scratch);
    for (int c0 = 0; c0 < ncols; c0 += TG_CHUNK) {
        tg_load_row<TG_THREADS, TG_ITEMS>(xr, c0, ncols, vec_ok, TG_NEG_INF, v);
#pragma unroll
        for (int j = 0; j < TG_ITEMS; ++j)
#pragma unroll
            for (int e = 0; e < TG_VEC; ++e) v[j][e] = tg_exp_nonpos(v[j][e] - row_max) * inv;
        tg_store_chunk(yr, c0, ncols, vec_ok, v);
    }
}

// Staged: the row was copied into shared memory with cp.async (no registers held while the
// copy is in flight, so several blocks per SM each have a whole row in flight) and is read
// back from there for the max, the sum and the output: one read and one write of device
// memory per element.
__device__ __forceinline__ void tg_softmax_staged(const T* srow, T* __restrict__ yr, int ncols, bool vec_ok,
                                                  float* scratch) {
    float m = TG_NEG_INF;
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) {
        float t[TG_VEC];
        tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, TG_NEG_INF, t);
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) m = fmaxf(m, t[e]);
    }
    const float row_max = tg_block_max<TG_THREADS>(m, scratch);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) {
        float t[TG_VEC];
        tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, TG_NEG_INF, t);
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) s += tg_exp_nonpos(t[e] - row_max);
    }
    const float inv = 1.0f / tg_block_sum<TG_THREADS>(s, scratch);
#pragma unroll
    for (int j = 0; j < TG_ITEMS; ++j) {
        float t[TG_VEC];
        tg_staged_vec<TG_THREADS>(srow, j, ncols, vec_ok, TG_NEG_INF, t);
#pragma unroll
        for (int e = 0; e < TG_VEC; ++e) t[e] = tg_exp_nonpos(t[e] - row_max) * inv;
        tg_store_row_vec<TG_THREADS>(yr, j, ncols, vec_ok, t);
    }
}

// Every row of x, one block per row (a staged ring: per STAGES rows), grid-stride.
template <int VARIANT, int STAGES>
__device__ __forceinline__ void tg_softmax_rows(const T* __restrict__ x, T* __restrict__ out, long long rows, long long cols,
                                                float* scratch) {
    // Column arithmetic in 32 bits (the launchers require cols < 2^31): fewer registers.
    const int ncols = (int)cols;
    const bool vec_ok = (ncols % TG_VEC) == 0;
    if constexpr (VARIANT == TG_STAGED) {
        extern __shared__ uint4 tg_row_smem[];
        tg_row_ring<TG_THREADS, TG_ITEMS, STAGES, T> ring(reinterpret_cast<T*>(tg_row_smem), x, rows, cols, vec_ok);
        const int ahead = tg_l2_ahead_rows(cols * (long long)sizeof(T), TG_L2_AHEAD_BYTES);
        for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
            T* __restrict__ yr = out + r * cols;
            if constexpr (TG_L2_AHEAD_BYTES > 0) tg_prefetch_row_l2<TG_THREADS>(x, r + ahead, rows, cols);
            tg_softmax_staged(ring.take(r), yr, ncols, vec_ok, scratch);
        }
    } else {
        const int ahead = tg_l2_ahead_rows(cols * (long long)sizeof(T), TG_L2_AHEAD_BYTES);
        for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
            const T* __restrict__ xr = x + r * cols;
            T* __restrict__ yr = out + r * cols;
            if constexpr (TG_L2_AHEAD_BYTES > 0) tg_prefetch_row_l2<TG_THREADS>(x, r + ahead, rows, cols);
            if constexpr (VARIANT == TG_ONLINE) tg_softmax_online(xr, yr, ncols, vec_ok, scratch);
            else tg_softmax_onepass(xr, yr, ncols, vec_ok, scratch);
        }
    }
}

extern "C" __global__ void __launch_bounds__(TG_THREADS, TG_MIN_BLOCKS) {{ kernel }}({{ params }}) {
    __shared__ float scratch[32];
    tg_softmax_rows<TG_VARIANT, TG_STAGES>(x, out, rows, cols, scratch);
}
