{{ header }}
// gemm: placeholder until the GEMM family lands (no default spec uses it yet).
{% include "prelude.cuh" %}
extern "C" __global__ void {{ kernel }}({{ params }}) {}
