{#- The epilogue chain of the GEMM templates (included; what each step computes is
    src/ops/epilogue.rs's table). -#}
// The epilogue chain, in spec order, on one fp32 accumulator.
__device__ __forceinline__ float tg_epilogue(float v, float bias_v, float res_v, float alpha_v) {
{%- include "epilogue_steps.cuh" %}
    return v;
}