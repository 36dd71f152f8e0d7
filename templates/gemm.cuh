{#- The GEMM templates' shared part (gemm.cu: tensor cores; gemm_simt.cu: f32 FFMA): the
    header comment, the instance's tile plan as #defines (ops/gemm/mod.rs), the PTX helpers,
    the block's tile order and the epilogue chain. -#}
{{ header }}
//
// gemm: D = epilogue(A . B) with A M x K and B K x N ({{ dtype }} in, {{ out_dtype }} out, f32 accumulation),
// layout {{ layout }} (A {% if a_row_major %}row-major{% else %}column-major{% endif %}, B {% if b_row_major %}row-major{% else %}column-major{% endif %}), epilogue = [{{ epilogue | join(sep=", ") }}].
// {% if tensor_cores %}Tensor cores: mma.sync.m16n8k{% if tf32 %}8 tf32 (inputs rounded to tf32 in registers){% else %}16 {{ dtype }}{% endif %}, {{ stages }}-stage cp.async pipeline.{% else %}SIMT: fp32 FFMA, 8x8 outputs per thread, shared memory double-buffered through registers.{% endif %}
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
