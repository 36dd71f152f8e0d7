// ---- row ops (softmax, norms): the launch shape and plan ops/rows/mod.rs chose ----
#define TG_THREADS {{ block }}
#define TG_ITEMS {{ items }}
// Blocks per SM to fit (caps registers so enough loads are in flight): see ops/rows/mod.rs.
#define TG_MIN_BLOCKS {{ min_blocks }}
#define TG_VEC {{ vec }}
// How a block holds its row: in registers (one pass), staged through a shared-memory ring of
// TG_STAGES rows (TG_STAGES - 1 in flight while one is computed), or streamed (online).
enum tg_row_variant { TG_ONEPASS, TG_STAGED, TG_ONLINE };
#define TG_VARIANT TG_{{ row_variant | upper }}
#define TG_STAGES {{ stages }}
// Rows are warmed in L2 about this many bytes ahead of the row a block works on (prelude);
// 0: not at all.
#define TG_L2_AHEAD_BYTES {{ l2_ahead_bytes }}u
typedef {{ T }} T;
