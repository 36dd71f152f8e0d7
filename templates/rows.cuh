// ---- row ops (softmax, norms): the launch shape ops/rows.rs chose ----
#define TG_THREADS {{ block }}
#define TG_ITEMS {{ items }}
// Blocks per SM to fit (caps registers so enough loads are in flight): see ops/rows.rs.
#define TG_MIN_BLOCKS {{ min_blocks }}
#define TG_VEC {{ vec }}
{%- if variant == "staged" %}
// Rows in the shared-memory ring: {{ stages - 1 }} in flight per block while one is computed.
#define TG_STAGES {{ stages }}
{%- endif %}
{%- if l2_ahead_bytes > 0 %}
// Rows are warmed in L2 about this many bytes ahead of the row a block works on (prelude).
#define TG_L2_AHEAD_BYTES {{ l2_ahead_bytes }}u
{%- endif %}
typedef {{ T }} T;
