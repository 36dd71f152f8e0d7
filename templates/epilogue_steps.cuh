{#- The steps of an epilogue chain on `v`, in spec order (included in a function body): the
    statements come from src/ops/epilogue.rs's table, the device functions from prelude.cuh. -#}
{%- for line in epilogue_code %}
    {{ line }}
{%- endfor -%}
