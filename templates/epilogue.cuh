{#- The epilogue chain of the GEMM templates (included; what each step computes is
    src/gpu/reference.rs's and the README's ops table). -#}
// The epilogue chain, in spec order, on one fp32 accumulator.
__device__ __forceinline__ float tg_epilogue(float v, float bias_v, float res_v, float alpha_v) {
{%- for step in epilogue %}
{%- if step == "scale" %}
    v *= alpha_v;
{%- elif step == "bias" %}
    v += bias_v;
{%- elif step == "relu" %}
    v = tg_relu(v);
{%- elif step == "gelu" %}
    v = {% if out_dtype == "f32" %}tg_gelu_sigmoid(v){% else %}tg_gelu_fast(v){% endif %};
{%- elif step == "gelu_erf" %}
    v = tg_gelu_erf(v);
{%- elif step == "silu" %}
    v = {% if out_dtype == "f32" %}tg_silu(v){% else %}tg_silu_fast(v){% endif %};
{%- elif step == "residual" %}
    v += res_v;
{%- endif %}
{%- endfor %}
    return v;
}