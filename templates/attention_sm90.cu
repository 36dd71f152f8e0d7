#if 0
// Tera and the C preprocessor both read this file, as templates/attention.cu: rendered by
// tilegen, the #else branch holds the instance's parameters; compiled as is
// (bench/flash-attn/run.py: -DTG_STANDALONE, prelude.cuh and wgmma.cuh given as headers), the
// defaults and -D overrides apply. The kernel logic is plain CUDA C++ on the constants below.
{% raw %}
#endif
#ifdef TG_STANDALONE
#include "prelude.cuh"
#ifndef TG_HEAD_DIM
#define TG_HEAD_DIM 128
#endif
#ifndef TG_BN
#define TG_BN 128
#endif
#ifndef TG_CONSUMERS
#define TG_CONSUMERS 2
#endif
#ifndef TG_STAGES
#define TG_STAGES 2
#endif
#ifndef TG_CAUSAL
#define TG_CAUSAL 0
#endif
#ifndef TG_BF16
#define TG_BF16 1
#endif
#ifndef TG_PRODUCER_REGS
#define TG_PRODUCER_REGS 40
#endif
#ifndef TG_CONSUMER_REGS
#define TG_CONSUMER_REGS 232
#endif
#ifndef TG_PINGPONG
#define TG_PINGPONG 1
#endif
#ifndef TG_Q_REGS
#define TG_Q_REGS 1
#endif
#ifndef TG_TMA
#define TG_TMA 1
#endif
#ifndef TG_Q_BUFS
#define TG_Q_BUFS 1
#endif
#ifndef TG_PAIRS
#define TG_PAIRS TG_CAUSAL
#endif
#ifndef TG_O_STAGED
#define TG_O_STAGED 0
#endif
#ifndef TG_KERNEL
#define TG_KERNEL attention_fwd
#endif
#if TG_TMA
#define TG_MAP_PARAMS const __grid_constant__ TgTensorMap k_map, const __grid_constant__ TgTensorMap v_map,
#endif
#define TG_SHARED_BYTES SMEM_BYTES
#if TG_BF16
#define TG_WGMMA_AB "bf16"
#else
#define TG_WGMMA_AB "f16"
#endif
#include "wgmma.cuh"
#if 0
{% endraw %}
#endif
#else
{{ header }}
//
// attention (forward), Hopper (sm_90a): O = softmax(scale * Q K^T + mask) V per (batch, head),
// {{ dtype }} in and out, f32 scores, softmax and accumulation; head_dim {{ head_dim }}{% if causal %}, causal (bottom-right aligned){% endif %}.
// Persistent blocks loop over work units ({% if pairs %}pairs of {% endif %}{{ tile_q }}-row query tiles of a (batch, head)). Warpgroup 0
// schedules the units, copies Q tiles (cp.async, {{ q_bufs }} in flight) and loads {{ tile_kv }}-key K/V tiles (TMA;
// cp.async for packed varlen batches) into a {{ stages }}-stage ring of 128-byte-swizzled shared memory
// guarded by mbarriers; {{ consumers }} consumer warpgroups own 64 query rows each and run S = Q K^T and
// O += P V on wgmma (P from registers), the softmax of one tile beside the P V of the previous
// (SOFTMAX_BESIDE_PV: all but head_dim 64 without a mask, where it runs after it).
//
// Runtime requirements (the launcher checks them; sizes and strides in elements):
{%- for r in requirements %}
//   - {{ r }}
{%- endfor %}
// Tensor maps (cuTensorMapEncodeTiled; dims innermost first, strides in elements; 128-byte
// swizzle, no interleave, 256-byte L2 promotion, zero fill):
{%- for m in tensor_maps %}
//   - {{ m }}
{%- endfor %}
{% include "prelude.cuh" %}
#define TG_HEAD_DIM {{ head_dim }}
#define TG_BN {{ tile_kv }}
#define TG_CONSUMERS {{ consumers }}
#define TG_STAGES {{ stages }}
#define TG_CAUSAL {% if causal %}1{% else %}0{% endif %}
#define TG_BF16 {% if dtype == "bf16" %}1{% else %}0{% endif %}
#define TG_PRODUCER_REGS {{ producer_regs }}
#define TG_CONSUMER_REGS {{ consumer_regs }}
#define TG_PINGPONG 1
#define TG_Q_REGS {{ q_regs }}
#define TG_TMA 1
#define TG_Q_BUFS {{ q_bufs }}
#define TG_PAIRS {% if pairs %}1{% else %}0{% endif %}
#define TG_O_STAGED {% if o_staged %}1{% else %}0{% endif %}
#define TG_KERNEL {{ kernel }}
#define TG_PARAMS {{ params }}
#define TG_SHARED_BYTES {{ shared_bytes }}
#define TG_WGMMA_AB "{{ dtype }}"
{% include "wgmma.cuh" %}
#endif
#if 0
{% raw %}
#endif

// ---- instance parameters ----
#if TG_BF16
typedef tg_bf16 T;
#else
typedef tg_f16 T;
#endif
constexpr int D = TG_HEAD_DIM;          // head_dim
constexpr int CONSUMERS = TG_CONSUMERS;  // consumer warpgroups, 64 query rows each
constexpr int BM = 64 * CONSUMERS;       // query rows per block
constexpr int BN = TG_BN;                // keys per K/V tile
constexpr int STAGES = TG_STAGES;        // K/V tiles in the ring
constexpr bool CAUSAL = TG_CAUSAL != 0;
constexpr bool BF16 = TG_BF16 != 0;
// The consumers take turns to issue their wgmma (named barriers 1..CONSUMERS), so one's softmax
// runs while another's GEMMs hold the tensor cores.
constexpr bool PINGPONG = TG_PINGPONG != 0 && CONSUMERS > 1;
// Q's fragments stay in registers (S = Q K^T reads only K from shared memory, whose bandwidth
// the two wgmma and the copies otherwise share).
constexpr bool Q_REGS = TG_Q_REGS != 0;
// K and V tiles come by TMA (k_map, v_map: [head_dim, seq_kv, heads_kv, batch], 64 x BN boxes,
// 128-byte swizzle, rows past seq_kv zero-filled), one thread issuing them. Packed varlen
// batches (cu_seqlens_kv) keep the producer's cp.async copies: a map bounds the tensor, not
// each packed sequence, so a box would run into the next sequence's rows, whose values (Inf
// or NaN ones too) would reach P V.
constexpr bool TMA = TG_TMA != 0;
constexpr bool PAIRS = CAUSAL && TG_PAIRS != 0;  // causal units of two query tiles (see the scheduler)
constexpr int THREADS = 128 * (1 + CONSUMERS);

// Shared memory: every tile [rows][D] is stored as D/64 panels of [rows][64] (128-byte rows,
// 16-byte chunks XOR-swizzled by row % 8: wgmma's 128-byte swizzle), panels rows * 128 bytes
// apart, each 1024-byte aligned.
constexpr int Q_BUFS = TG_Q_BUFS;  // Q tiles in shared memory: 2 let the next item's Q land early
constexpr int Q_BYTES = BM * D * 2;
constexpr int KV_BYTES = BN * D * 2;  // one K or V tile
constexpr int ITEMS = 4;  // work items the scheduler may publish ahead of the consumers
// Q full and empty per buffer; K and V full and empty per stage; item full and empty per slot
constexpr int BARRIERS = 2 * Q_BUFS + 4 * STAGES + 2 * ITEMS;
constexpr int ITEM_BYTES = 128;  // sizeof(tg_attn_item)
// + alignment slack; one slot more than ITEMS holds the scheduler's launch constants; with
// TG_O_STAGED, O's rows (see the epilogue)
constexpr int SMEM_BYTES = 1024 + Q_BUFS * Q_BYTES + 2 * STAGES * KV_BYTES + 8 * BARRIERS + (ITEMS + 1) * ITEM_BYTES +
                           (TG_O_STAGED ? BM * (2 * D + 16) : 0);
static_assert(SMEM_BYTES == TG_SHARED_BYTES, "shared memory layout disagrees with the launch");
constexpr int S_REGS = BN / 2;  // f32 scores per consumer thread (m64 x BN)
constexpr int O_REGS = D / 2;   // f32 output accumulators per consumer thread (m64 x D)
constexpr int CPR = D / 8;      // 16-byte chunks per row
constexpr int RPP = 32 / CPR;   // rows one pass of a copying warp covers
static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "K/V tile of 64, 128, 192 or 256 keys (a wgmma N)");
static_assert(BN % RPP == 0 && BM % RPP == 0 && STAGES >= 2 && (Q_BUFS == 1 || Q_BUFS == 2), "copies split evenly over a warp");
static_assert(BM % (64 / CPR) == 0, "Q copies split evenly over two warps");

#if 0
{% endraw %}
#endif
#ifdef TG_STANDALONE
#include "sm90.cuh"
#include "attention.cuh"
#else
{% include "sm90.cuh" %}
{% include "attention.cuh" %}
#endif
#if 0
{% raw %}
#endif
// ---- PTX helpers (sm_90) ----
// Arrives on `bar` once this thread's earlier cp.async copies have landed (the arrival is
// counted in the barrier's expected count: no increment).
__device__ __forceinline__ void tg_cp_async_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// `count` arrivals on `bar` at once (a consumer releasing a stage for those that skip the tile).
__device__ __forceinline__ void tg_mbar_arrive_count(unsigned bar, unsigned count) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// A 4-D TMA box load (coordinates innermost first) into shared memory; completes `bar`'s
// transaction bytes. Elements past the tensor's dims arrive as zeros (and still count).
__device__ __forceinline__ void tg_tma_load_4d(unsigned dst, const TgTensorMap* map, unsigned bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
// Four 8x8 16-bit matrices from mma fragments into shared memory: register j of lane t holds
// row t / 4, columns 2 (t % 4) and + 1 of matrix j; lanes 8j .. 8j + 7 give its rows' addresses.
__device__ __forceinline__ void tg_stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
// Bulk copy of `bytes` (a multiple of 16, both ends 16-byte aligned) from shared to global memory.
__device__ __forceinline__ void tg_bulk_store(void* dst, unsigned src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    tg_bulk_commit();
}

template <int N> __device__ __forceinline__ void tg_reg_fence(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// Byte offset of 16-byte chunk `c` of row `r` in a [ROWS][D] tile (see the layout above).
template <int ROWS> __device__ __forceinline__ unsigned tg_chunk(int r, int c) {
    return (unsigned)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// A copying thread's share of a [ROWS][D] tile: chunk column `cc`, rows r0, r0 + PASS, ...; rows
// at or past `valid` are zero-filled (their source is never read). `src` is row r0's chunk.
// A rolled loop with a running pointer: the producer runs on few registers.
template <int ROWS, int PASS>
__device__ __forceinline__ void tg_copy_tile(unsigned dst, const T* src, long long ld, int r0, int cc, int valid, const T* fallback) {
    const long long step = (long long)PASS * ld;
#pragma unroll 1
    for (int r = r0; r < ROWS; r += PASS, src += step) {
        const bool in = r < valid;
        tg_cp_async16(dst + tg_chunk<ROWS>(r, cc), in ? (const void*)src : (const void*)fallback, in ? 16 : 0);
    }
}

template <int N> struct tg_int { static constexpr int value = N; };

// One work item as the scheduler publishes it in shared memory (ITEM_BYTES).
// Pointers are the item's first element of each tensor (the copiers and the epilogue add their
// own row and column), so that no reader does the item's index arithmetic.
struct tg_attn_item {
    const T* q_tile;           // row m0 of the item's sequence and head
    const T* k_head;           // key 0 of its sequence and K/V head
    const T* v_head;
    T* o_tile;                 // row m0, as q_tile
    float* lse_tile;           // row m0 of the LSE (null when there is none)
    int b, hk;                 // batch entry and K/V head (TMA coordinates)
    int m0, q_rows, skv, off;  // as in tg_attn_block
    int n_tiles, n_full;
    int flags;                 // ITEM_NONE: no item is left
    int pad[13];
};
static_assert(sizeof(tg_attn_item) == ITEM_BYTES, "item slot size");
// What the scheduler computes once per launch, in the slot after the items.
struct tg_sched_consts {
    long long cap_q, cap_kv;  // rows of the packed q and k/v tensors (varlen clamps)
    int n_qt, per_head, n_units, heads_q, group, seq_q, seq_kv;
};
static_assert(sizeof(tg_sched_consts) <= ITEM_BYTES, "scheduler constants fit a slot");
constexpr int ITEM_NONE = 1;

// Persistent: gridDim.x blocks (any count computes the same result; one per SM balances it) loop
// over the work units u = blockIdx.x, blockIdx.x + gridDim.x, ... (see the scheduler); THREADS
// threads and SMEM_BYTES of dynamic shared memory per block. Warp 1 of the producer decodes the
// units into work items (a query tile of one (batch, head), skipping those of a varlen batch
// whose tile lies past its sequence) and publishes them in a ring of ITEMS slots; the copiers
// and the consumers read them from there, so that none of them carries the decoding's
// registers.
extern "C" __global__ void __launch_bounds__(THREADS, 1) TG_KERNEL(TG_PARAMS) {
    extern __shared__ __align__(1024) unsigned char tg_smem[];
    const unsigned raw = tg_smem_u32(tg_smem);
    const unsigned base = (raw + 1023u) & ~1023u;
    const unsigned q_s0 = base;
    const unsigned k_s = q_s0 + Q_BUFS * Q_BYTES;
    const unsigned v_s = k_s + STAGES * KV_BYTES;
    const unsigned bars = v_s + STAGES * KV_BYTES;
    tg_attn_item* const items = reinterpret_cast<tg_attn_item*>(tg_smem + (bars - raw) + 8 * BARRIERS);
    // O leaves through shared memory where the launch says so: each consumer warp writes its 16
    // rows with stmatrix and one bulk copy per row takes them to global memory, where 4-byte
    // stores from registers held the warp on the store queue. Rows are padded by 16 bytes, so
    // that the 8 rows of one stmatrix fall on different banks. (Local constants: NVRTC puts
    // namespace-scope ones into the PTX.)
    constexpr bool O_STAGED = TG_O_STAGED != 0;
    constexpr int O_PITCH = 2 * D + 16;
    static_assert((8 * BARRIERS + (ITEMS + 1) * ITEM_BYTES) % 16 == 0 && O_PITCH % 16 == 0,
                  "staged rows 16-byte aligned (stmatrix rows, bulk copy sources)");
    const unsigned o_stage = bars + 8u * BARRIERS + (ITEMS + 1) * ITEM_BYTES;
    auto q_buf = [=](int i) { return q_s0 + (unsigned)((i % Q_BUFS) * Q_BYTES); };
    auto q_full = [=](int i) { return bars + 8u * (unsigned)(i % Q_BUFS); };
    auto q_empty = [=](int i) { return bars + 8u * (unsigned)(Q_BUFS + i % Q_BUFS); };
    auto k_full = [=](int s) { return bars + 8u * (unsigned)(2 * Q_BUFS + s); };
    auto v_full = [=](int s) { return bars + 8u * (unsigned)(2 * Q_BUFS + STAGES + s); };
    auto k_empty = [=](int s) { return bars + 8u * (unsigned)(2 * Q_BUFS + 2 * STAGES + s); };
    auto v_empty = [=](int s) { return bars + 8u * (unsigned)(2 * Q_BUFS + 3 * STAGES + s); };
    auto item_full = [=](int i) { return bars + 8u * (unsigned)(2 * Q_BUFS + 4 * STAGES + i % ITEMS); };
    auto item_empty = [=](int i) { return bars + 8u * (unsigned)(2 * Q_BUFS + 4 * STAGES + ITEMS + i % ITEMS); };
    // Phase parity of the n-th wait for data in a ring of `slots` (full), and of the n-th wait
    // for a free slot (empty: a fresh barrier passes parity 1).
    auto full_parity = [](int n, int slots) { return (unsigned)(n / slots) & 1u; };
    auto empty_parity = [](int n, int slots) { return ((unsigned)(n / slots) & 1u) ^ 1u; };

    const int wg = (int)threadIdx.x / 128, tid = (int)threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    // Block-uniform: TMA for K and V unless the batch is packed (see TMA above).
    const bool tma = TMA && cu_seqlens_kv == nullptr;
    if (threadIdx.x == 0) {
        for (int i = 0; i < Q_BUFS; ++i) {
            tg_mbar_init(q_full(i), tma ? 64u : 32u);  // every Q copier's copies
            tg_mbar_init(q_empty(i), 128 * CONSUMERS);  // every consumer thread, done with Q
        }
        const unsigned kv_arrivals = tma ? 1u : 32u;  // the TMA issuer's expect_tx, or every lane of the copying warp
        for (int s = 0; s < STAGES; ++s) {
            tg_mbar_init(k_full(s), kv_arrivals);
            tg_mbar_init(v_full(s), kv_arrivals);
            tg_mbar_init(k_empty(s), CONSUMERS);  // one arrival per consumer warpgroup
            tg_mbar_init(v_empty(s), CONSUMERS);
        }
        for (int i = 0; i < ITEMS; ++i) {
            tg_mbar_init(item_full(i), 1);                   // the scheduler
            // every thread that reads the slot (each arrives after its own reads)
            tg_mbar_init(item_empty(i), (tma ? 1u + 64u : 64u + 32u) + 128u * CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer: warp 1 schedules; lane 0 of warp 0 loads K and V by TMA and
        // warps 2-3 copy Q tiles, or for packed varlen batches warps 0, 2 and 3 copy K, V and
        // Q; each runs ahead into the next items ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(TG_PRODUCER_REGS));
        if (warp == 1) {
            if (lane != 0) return;
            // Launch constants live in shared memory and are read again for each item: kept in
            // registers across the loop, they would not fit the producer's few.
            tg_sched_consts& c = *reinterpret_cast<tg_sched_consts*>(items + ITEMS);
            c.n_qt = (int)((seq_q + BM - 1) / BM);
            c.per_head = PAIRS ? (c.n_qt + 1) / 2 : c.n_qt;
            // The launcher keeps the unit count below 2^31: 32-bit division is inline, 64-bit a call.
            c.n_units = c.per_head * (int)heads_q * (int)batch;
            c.heads_q = (int)heads_q;
            c.group = (int)heads_q / (int)heads_kv;
            c.seq_q = (int)seq_q;
            c.seq_kv = (int)seq_kv;
            c.cap_q = (long long)batch * seq_q;
            c.cap_kv = (long long)batch * seq_kv;
            // Units of work: causal, a pair of query tiles of one (batch, head) whose key counts add
            // up to about the same for every pair (the i-th longest with the i-th shortest; the
            // middle tile of an odd count alone), so that blocks striding over units get equal
            // work; otherwise one query tile. Units run with the query tile fastest (the blocks
            // running together read few K/V heads, which stay in L2).
            const int* const cu_q = static_cast<const int*>((const void*)cu_seqlens_q);
            const int* const cu_kv = static_cast<const int*>((const void*)cu_seqlens_kv);
            // Publishes the first item at or after item `sub` of unit u that has rows (varlen) in
            // slot `e` and moves (u, sub) past it; false when none is left. Written as decoded:
            // the scheduler has few registers.
            auto publish = [&](int& u, int& sub, tg_attn_item& e) -> bool {
                const int n_qt = c.n_qt, per_head = c.per_head, n_units = c.n_units;
                while (u < n_units) {
                    const int i = (int)((unsigned)u % (unsigned)per_head);
                    const unsigned hb = (unsigned)u / (unsigned)per_head;
                    const int mt = !CAUSAL ? i : !PAIRS || sub == 0 ? n_qt - 1 - i : i;
                    // past this item: the unit's second item if it has one, else the next unit
                    if (PAIRS && sub == 0 && 2 * i + 1 < n_qt) {
                        sub = 1;
                    } else {
                        u += (int)gridDim.x;
                        sub = 0;
                    }
                    const int h = (int)(hb % (unsigned)c.heads_q), b = (int)(hb / (unsigned)c.heads_q);
                    long long q_start = 0, kv_start = 0;
                    int sq = c.seq_q, skv = c.seq_kv;
                    if (cu_q != nullptr) tg_clamp_rows(cu_q, b, c.cap_q, sq, q_start, sq);
                    if (cu_kv != nullptr) tg_clamp_rows(cu_kv, b, c.cap_kv, skv, kv_start, skv);
                    const int m0 = mt * BM;
                    if (m0 >= sq) continue;
                    const int off = skv - sq, q_rows = min(BM, sq - m0);
                    const int kv_end = CAUSAL ? min(skv, m0 + q_rows + off) : skv;
                    e.m0 = m0;
                    e.q_rows = q_rows;
                    e.skv = skv;
                    e.off = off;
                    e.n_tiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
                    e.n_full = CAUSAL ? min(skv / BN, max(0, m0 + off + 1) / BN) : skv / BN;
                    e.b = b;
                    e.hk = h / c.group;
                    // The pointers in a second pass over what was stored: short live ranges.
                    const long long q_row = q_start + m0;
                    asm volatile("" ::: "memory");
                    e.q_tile = q + b * q_bs + q_row * q_ss + h * q_hs;
                    e.o_tile = o + b * o_bs + q_row * o_ss + h * o_hs;
                    e.lse_tile = lse != nullptr ? lse + b * lse_bs + h * lse_hs + q_row : nullptr;
                    asm volatile("" ::: "memory");
                    e.k_head = k + b * k_bs + kv_start * k_ss + e.hk * k_hs;
                    e.v_head = v + b * v_bs + kv_start * v_ss + e.hk * v_hs;
                    e.flags = 0;
                    return true;
                }
                e.flags = ITEM_NONE;
                return false;
            };
            int u = blockIdx.x, sub = 0;
            for (int n = 0;; ++n) {
                tg_mbar_wait(item_empty(n), empty_parity(n, ITEMS));
                const bool have = publish(u, sub, items[n % ITEMS]);
                tg_mbar_arrive(item_full(n));  // releases the slot's writes to the readers
                if (!have) return;
            }
        }
        // Q: warps 2-3 (64 copiers) when TMA brings K and V, else warp 3 alone (warp 2 copies V).
        // PASS: rows one pass of the copiers covers.
        auto copy_q = [&](auto pass_tag, int ct) {
            constexpr int PASS = decltype(pass_tag)::value;
            const int r0 = ct / CPR, cc = ct % CPR;
            const long long mine = r0 * q_ss + cc * 8;  // this copier's first chunk in a tile
            for (int n = 0;; ++n) {
                tg_mbar_wait(item_full(n), full_parity(n, ITEMS));
                const tg_attn_item& e = items[n % ITEMS];
                const int flags = e.flags, q_rows = e.q_rows;
                const T* qg = e.q_tile + mine;
                tg_mbar_arrive(item_empty(n));  // done with the slot
                if (flags & ITEM_NONE) break;
                tg_mbar_wait(q_empty(n), empty_parity(n, Q_BUFS));
                tg_copy_tile<BM, PASS>(q_buf(n), qg, q_ss, r0, cc, q_rows, q);
                tg_cp_async_arrive(q_full(n));
            }
            asm volatile("cp.async.wait_all;" ::: "memory");
        };
        if (tma && warp >= 2) {
            copy_q(tg_int<64 / CPR>{}, tid - 64);
            return;
        }
        if (warp == 3) {
            copy_q(tg_int<32 / CPR>{}, lane);
            return;
        }
#if TG_TMA
        if (tma) {
            // warp 0, one lane: K and V by TMA
            if (warp != 0 || lane != 0) return;
            tg_prefetch_map(&k_map);
            tg_prefetch_map(&v_map);
            int n_kv = 0;  // K/V tiles loaded so far: the ring position
            for (int n = 0;; ++n) {
                tg_mbar_wait(item_full(n), full_parity(n, ITEMS));
                const tg_attn_item& e = items[n % ITEMS];
                const int flags = e.flags, n_tiles = e.n_tiles, hk = e.hk, b = e.b;
                tg_mbar_arrive(item_empty(n));  // done with the slot
                if (flags & ITEM_NONE) return;
                // One box per 64 head dims: a [BN][64] panel of the tile's layout.
#pragma unroll 1
                for (int j = 0; j < n_tiles; ++j, ++n_kv) {
                    const int s = n_kv % STAGES;
                    const int n0 = j * BN;
                    tg_mbar_wait(k_empty(s), empty_parity(n_kv, STAGES));
                    tg_mbar_expect_tx(k_full(s), KV_BYTES);
#pragma unroll
                    for (int p = 0; p < D / 64; ++p)
                        tg_tma_load_4d(k_s + s * KV_BYTES + p * BN * 128, &k_map, k_full(s), 64 * p, n0, hk, b);
                    tg_mbar_wait(v_empty(s), empty_parity(n_kv, STAGES));
                    tg_mbar_expect_tx(v_full(s), KV_BYTES);
#pragma unroll
                    for (int p = 0; p < D / 64; ++p)
                        tg_tma_load_4d(v_s + s * KV_BYTES + p * BN * 128, &v_map, v_full(s), 64 * p, n0, hk, b);
                }
            }
        }
#endif
        // Packed varlen batches: warp 0 copies the K tiles, warp 2 the V tiles (one tensor per
        // warp: the producer's registers hold one pointer and one stride).
        const bool is_v = warp == 2;
        const long long ld = is_v ? v_ss : k_ss;
        const unsigned ring_s = is_v ? v_s : k_s;
        const int r0 = lane / CPR, cc = lane % CPR;
        int n_kv = 0;
        for (int n = 0;; ++n) {
            tg_mbar_wait(item_full(n), full_parity(n, ITEMS));
            const tg_attn_item& e = items[n % ITEMS];
            const int flags = e.flags, n_tiles = e.n_tiles, skv = e.skv;
            const T* src = (is_v ? e.v_head : e.k_head) + r0 * ld + cc * 8;
            tg_mbar_arrive(item_empty(n));  // done with the slot
            if (flags & ITEM_NONE) break;
#pragma unroll 1
            for (int j = 0; j < n_tiles; ++j, ++n_kv) {
                const int s = n_kv % STAGES;
                const int n0 = j * BN;
                tg_mbar_wait(is_v ? v_empty(s) : k_empty(s), empty_parity(n_kv, STAGES));
                tg_copy_tile<BN, 32 / CPR>(ring_s + s * KV_BYTES, src + n0 * ld, ld, r0, cc, skv - n0, is_v ? v : k);
                tg_cp_async_arrive(is_v ? v_full(s) : k_full(s));
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        return;
    }

    // ---------------- consumers: 64 query rows each of every item ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(TG_CONSUMER_REGS));
    // Causal with more query rows than keys per tile: on a diagonal block a consumer's rows
    // may see fewer key tiles than the block's last rows, and it skips the rest (below).
    // Elsewhere the bookkeeping only costs time (3 % at head_dim 128 without a mask,
    // bench/flash-attn/NOTES.md). Local: a namespace-scope constant becomes a symbol in the PTX.
    constexpr bool SKIP = CAUSAL && BM > BN;
    // A consumer that skips key tiles takes no part in their stages' waits, so only the turns
    // (ping-pong) keep it from running a ring ahead onto a stage's stale phase.
    static_assert(!SKIP || PINGPONG, "skipping key tiles needs the consumers' turns");
    // Whether the softmax of key tile j runs beside tile j-1's P V (see the loop). Not at head_dim
    // 64 without a mask, where the kernel measured 1-2 % faster with the softmax after P V
    // (bench/flash-attn/NOTES.md).
    constexpr bool SOFTMAX_BESIDE_PV = !(D == 64 && !CAUSAL);
    // Whether the epilogue computes every row's 1/l and LSE before it stores O (see there). Not at
    // head_dim 64 with the mask, where that order measured 1-3 % slower, staged or not
    // (bench/flash-attn/NOTES.md).
    constexpr bool STORES_LAST = !(D == 64 && CAUSAL);
    static_assert(STORES_LAST || !O_STAGED, "staged O comes with the stores last");
    // Broadcast from lane 0, so that the compiler knows the index is the same across the warp
    // and the tile counts derived from it keep the wgmma out of what it would take for
    // divergent paths (ptxas serializes those, C7518).
    const int cw = __shfl_sync(0xffffffffu, wg - 1, 0);
    const int t4 = lane & 3;
    // Accumulator layout of m64nN: element 4i + 2hh + e is row warp*16 + lane/4 + 8hh, column
    // 8i + 2(lane%4) + e.
    const int row_in_block = cw * 64 + warp * 16 + (lane >> 2);  // hh = 0; hh = 1 is 8 more
    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units

    float o_acc[O_REGS];
    float row_max[2], row_sum[2];
    float s_acc[S_REGS];
    unsigned p_frag[BN / 16][4];  // P of the previous tile as the A operand of O += P V
    unsigned q_frag[Q_REGS ? D / 16 : 1][4];  // Q as the A operand of S = Q K^T (Q_REGS)

    // Turns: consumer cw waits on barrier 1 + cw before issuing and then lets the next one go.
    // Every consumer takes n_tiles + 1 turns per item, in one chain across the items: the last
    // consumer starts it, and its final hand-over (in the block's last item) is left out, so
    // that every barrier ends complete.
    const unsigned my_turn = 1u + (unsigned)cw, next_turn = 1u + (unsigned)((cw + 1) % CONSUMERS);
    auto turn_begin = [&]() {
        if constexpr (PINGPONG) tg_named_barrier(my_turn, 256);
    };
    auto turn_end = [&](bool last) {
        if constexpr (PINGPONG) {
            if (!(last && cw == CONSUMERS - 1)) tg_bar_arrive(next_turn, 256);
        }
    };
    // Each consumer thread tells the Q copiers it is done with item n's Q (after its own reads).
    auto release_q = [&](int n) { tg_mbar_arrive(q_empty(n)); };

    int ring = 0;  // ring position of the item's first K/V tile
    for (int n = 0;; ++n) {
        tg_mbar_wait(item_full(n), full_parity(n, ITEMS));
        const tg_attn_item& e = items[n % ITEMS];
        const int flags = e.flags;
        if (flags & ITEM_NONE) {
            tg_mbar_arrive(item_empty(n));
            break;
        }
        if (PINGPONG && n == 0 && cw == CONSUMERS - 1) tg_bar_arrive(1u, 256);  // the first consumer starts
        const int m0 = e.m0, q_rows = e.q_rows, skv = e.skv, off = e.off, n_tiles = e.n_tiles;
        // The block's last item when the next slot says no item is left (the scheduler publishes
        // ITEMS ahead, so the slot is there or about to be).
        tg_mbar_wait(item_full(n + 1), full_parity(n + 1, ITEMS));
        const bool last_item = (items[(n + 1) % ITEMS].flags & ITEM_NONE) != 0;

        // The key tiles a consumer's 64 rows see. With SKIP, the consumers of a diagonal block's
        // first rows see fewer than the block (whole key tiles are masked for all their rows),
        // and one past the tile's last row sees none. A consumer skips the wgmma of the tiles it
        // does not see but keeps taking its turns.
        auto tiles_of = [&](int c) {
            if constexpr (!SKIP) return n_tiles;
            const int first = c * 64;
            if (first >= q_rows) return 0;
            const int kv_end = min(skv, m0 + min(q_rows, first + 64) + off);
            return kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
        };
        const int my_tiles = tiles_of(cw);
        const int my_full = SKIP ? min(skv / BN, max(0, m0 + cw * 64 + off + 1) / BN) : e.n_full;  // unmasked
        // The consumer with the tile's last row sees every tile the item loads; it releases each
        // stage for itself and for the consumers that skip that tile, so every phase of an empty
        // barrier still counts CONSUMERS arrivals.
        const int anchor = (q_rows - 1) / 64;
        auto release = [&](unsigned bar, int j) {
            if (tid != 0) return;
            if constexpr (SKIP) {
                unsigned cnt = 1;
                if (cw == anchor) {
#pragma unroll
                    for (int c = 0; c < CONSUMERS; ++c) cnt += (c != anchor && tiles_of(c) <= j) ? 1u : 0u;
                }
                tg_mbar_arrive_count(bar, cnt);
            } else {
                tg_mbar_arrive(bar);
            }
        };
        auto release_k = [&](int j) { release(k_empty((ring + j) % STAGES), j); };
        auto release_v = [&](int j) { release(v_empty((ring + j) % STAGES), j); };
        const unsigned q_s = q_buf(n);

#pragma unroll
        for (int i = 0; i < O_REGS; ++i) o_acc[i] = 0.0f;
        row_max[0] = row_max[1] = TG_NEG_INF;
        row_sum[0] = row_sum[1] = 0.0f;

        // S = Q K^T for tile j: A = this warpgroup's 64 Q rows, B = the K tile (both K-major: k16
        // steps are 32 bytes along a 128-byte row, panels of 64 head dims apart).
        auto issue_qk = [&](int j) {
            const int s = (ring + j) % STAGES;
            tg_mbar_wait(k_full(s), full_parity(ring + j, STAGES));
            tg_fence_async_smem();
            tg_reg_fence(s_acc);
            tg_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const unsigned pb = k_s + (unsigned)(s * KV_BYTES + (kk / 4) * BN * 128 + (kk % 4) * 32);
                if constexpr (Q_REGS) {
                    tg_wgmma_rs<0>(s_acc, q_frag[kk], tg_desc(pb, 16, 1024), kk != 0);
                } else {
                    const unsigned pa = q_s + (unsigned)((kk / 4) * BM * 128 + cw * 64 * 128 + (kk % 4) * 32);
                    tg_wgmma_ss<0>(s_acc, tg_desc(pa, 16, 1024), tg_desc(pb, 16, 1024), kk != 0);
                }
            }
            tg_wgmma_commit();
        };
        // O += P V for tile j: B = the V tile [keys][D], MN-major (head dims contiguous): k16
        // steps are 16 rows (2048 bytes), 64-wide panels BN * 128 bytes apart.
        auto issue_pv = [&](int j) {
            const int s = (ring + j) % STAGES;
            tg_mbar_wait(v_full(s), full_parity(ring + j, STAGES));
            tg_fence_async_smem();
            tg_reg_fence(o_acc);
            tg_reg_fence(p_frag);
            tg_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const unsigned pb = v_s + (unsigned)(s * KV_BYTES + kk * 2048);
                tg_wgmma_rs<1>(o_acc, p_frag[kk], tg_desc(pb, BN * 128, 1024), 1);
            }
            tg_wgmma_commit();
        };
        // Masks, then turns the scores of tile j into probabilities (in s_acc) against the running
        // max; returns each row half's rescale factor for O and the sum so far in row_sum.
        auto softmax = [&](int j, float (&alpha)[2]) {
            if (j >= my_full) {
                const int n0 = j * BN;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int row = m0 + row_in_block + 8 * hh;
                    const int lim = (CAUSAL ? min(row + off, skv - 1) : skv - 1) - n0;  // last visible key
#pragma unroll
                    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                        for (int e2 = 0; e2 < 2; ++e2)
                            if (8 * i + 2 * t4 + e2 > lim) s_acc[4 * i + 2 * hh + e2] = TG_NEG_INF;
                }
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                float mx = row_max[hh];
#pragma unroll
                for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(s_acc[4 * i + 2 * hh], s_acc[4 * i + 2 * hh + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // A row that has seen no key yet keeps max -inf: subtract 0 instead (no -inf - -inf).
                const float ms = mx == TG_NEG_INF ? 0.0f : mx * sl2;
                alpha[hh] = tg_exp2(row_max[hh] * sl2 - ms);
                row_max[hh] = mx;
                float sum = 0.0f;
#pragma unroll
                for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                    for (int e2 = 0; e2 < 2; ++e2) {
                        const float p = tg_exp2(fmaf(s_acc[4 * i + 2 * hh + e2], sl2, -ms));
                        s_acc[4 * i + 2 * hh + e2] = p;
                        sum += p;
                    }
                row_sum[hh] = row_sum[hh] * alpha[hh] + sum;
            }
        };
        // P (in s_acc) to the A fragments of the P V wgmma: k16 step kk covers keys 16kk..16kk+15,
        // i.e. accumulator columns of n8 blocks 2kk and 2kk + 1.
        auto pack_p = [&]() {
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                p_frag[kk][0] = tg_pack2(s_acc[8 * kk + 0], s_acc[8 * kk + 1]);
                p_frag[kk][1] = tg_pack2(s_acc[8 * kk + 2], s_acc[8 * kk + 3]);
                p_frag[kk][2] = tg_pack2(s_acc[8 * kk + 4], s_acc[8 * kk + 5]);
                p_frag[kk][3] = tg_pack2(s_acc[8 * kk + 6], s_acc[8 * kk + 7]);
            }
        };
        auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
            for (int i = 0; i < O_REGS / 4; ++i) {
                o_acc[4 * i + 0] *= alpha[0];
                o_acc[4 * i + 1] *= alpha[0];
                o_acc[4 * i + 2] *= alpha[1];
                o_acc[4 * i + 3] *= alpha[1];
            }
        };

        tg_mbar_wait(q_full(n), full_parity(n, Q_BUFS));
        if constexpr (Q_REGS) {
            // ldmatrix.x4 gives the m64k16 A fragment: lanes 0-15 address rows 0-15 of the warp's
            // slice at chunk 2kk, lanes 16-31 the same rows at chunk 2kk + 1.
            const int r = cw * 64 + warp * 16 + (lane & 15);
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) tg_ldsm_x4(q_frag[kk], q_s + tg_chunk<BM>(r, 2 * kk + (lane >> 4)));
            release_q(n);
        }
        if (my_tiles > 0) {
            float alpha[2];
            turn_begin();
            issue_qk(0);
            turn_end(false);
            tg_wgmma_wait<0>();
            tg_reg_fence(s_acc);
            release_k(0);
            softmax(0, alpha);
            pack_p();
            // Tile j's S = Q K^T and tile j-1's O += P V are in flight together; the softmax of
            // tile j runs while the tensor cores finish P V.
#pragma unroll 1
            for (int j = 1; j < my_tiles; ++j) {
                turn_begin();
                issue_qk(j);
                issue_pv(j - 1);
                turn_end(false);
                tg_wgmma_wait<1>();  // S of tile j
                tg_reg_fence(s_acc);
                release_k(j);
                softmax(j, alpha);
                // P V of tile j-1; the wait stays after the row sums, which the softmax computes last.
                if constexpr (SOFTMAX_BESIDE_PV) tg_wgmma_wait_after<0>(row_sum[0], row_sum[1]);
                else tg_wgmma_wait<0>();
                tg_reg_fence(o_acc);
                tg_reg_fence(p_frag);
                release_v(j - 1);
                rescale_o(alpha);
                pack_p();
            }
            if constexpr (!Q_REGS) release_q(n);  // the item's last S = Q K^T has completed
            turn_begin();
            issue_pv(my_tiles - 1);
            turn_end(last_item && my_tiles == n_tiles);
            tg_wgmma_wait<0>();
            tg_reg_fence(o_acc);
            release_v(my_tiles - 1);
        } else if constexpr (!Q_REGS) {
            release_q(n);
        }
        // Turns for the tiles this consumer skips, and the item's one turn when it has no key
        // tile (no wgmma on these paths: ptxas would serialize every wgmma of the kernel for one
        // in a branch it cannot prove uniform).
#pragma unroll 1
        for (int t = my_tiles > 0 ? my_tiles + 1 : 0; t <= n_tiles; ++t) {
            turn_begin();
            turn_end(last_item && t == n_tiles);
        }

        // ---- epilogue: O / l, LSE = ln(sum exp(scale * s)); rows that saw no key give 0 and -inf ----
        T* const og = const_cast<T*>(e.o_tile);
        float* const lse_tile = e.lse_tile;
        tg_mbar_arrive(item_empty(n));  // done with the slot
        // Per row half: the row's sum over its quad, and its LSE = ln(sum exp(scale * s)).
        auto row_total = [&](int hh) {
            float l = row_sum[hh];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            return l;
        };
        auto lse_of = [&](int hh, float l) { return l > 0.0f ? (row_max[hh] * sl2 + __log2f(l)) * 0.6931471805599453f : TG_NEG_INF; };
        // With STORES_LAST, every row's 1/l and LSE come first and O's stores last: nothing after
        // a store then overwrites a register the store still reads (that held the warp on the
        // store queue).
        if constexpr (STORES_LAST) {
            float inv[2];
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const float l = row_total(hh);
                inv[hh] = l > 0.0f ? 1.0f / l : 0.0f;
                const int row = row_in_block + 8 * hh;
                if (lse_tile != nullptr && t4 == 0 && row < q_rows) lse_tile[row] = lse_of(hh, l);
            }
            // O's 8-column block i of row half hh, scaled by 1/l and packed.
            auto piece = [&](int hh, int i) { return tg_pack2(o_acc[4 * i + 2 * hh] * inv[hh], o_acc[4 * i + 2 * hh + 1] * inv[hh]); };
            if constexpr (O_STAGED) {
                // This warp's 16 rows. Lanes 8j .. 8j + 7 address matrix j of each stmatrix:
                // rows 8 (j % 2) .. + 7 of 8-column block i + j / 2.
                const unsigned stage = o_stage + (unsigned)((cw * 64 + warp * 16) * O_PITCH);
                if (lane < 16) tg_bulk_wait_read();  // the previous item's copies out of these rows
                __syncwarp();
                const unsigned lane_row = stage + (unsigned)((((lane >> 3) & 1) * 8 + (lane & 7)) * O_PITCH + (lane >> 4) * 16);
#pragma unroll
                for (int i = 0; i < D / 8; i += 2)
                    tg_stmatrix_x4(lane_row + i * 16, piece(0, i), piece(1, i), piece(0, i + 1), piece(1, i + 1));
                tg_fence_async_smem();  // for the bulk copies
                __syncwarp();
                const int row = cw * 64 + warp * 16 + lane;
                if (lane < 16 && row < q_rows) tg_bulk_store(og + row * o_ss, stage + lane * O_PITCH, D * 2);
            } else {
                // The stores name the global space (the pointer came through shared memory) and
                // are evict-first.
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int row = row_in_block + 8 * hh;
                    if (row >= q_rows) continue;
                    T* orow = og + row * o_ss;
#pragma unroll
                    for (int i = 0; i < D / 8; ++i) __stcs(reinterpret_cast<unsigned*>(orow + i * 8 + 2 * t4), piece(hh, i));
                }
            }
        } else {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const float l = row_total(hh);
                const float inv = l > 0.0f ? 1.0f / l : 0.0f;
                const int row = row_in_block + 8 * hh;
                if (row >= q_rows) continue;
                T* orow = og + row * o_ss;
#pragma unroll
                for (int i = 0; i < D / 8; ++i)
                    *reinterpret_cast<unsigned*>(orow + i * 8 + 2 * t4) = tg_pack2(o_acc[4 * i + 2 * hh] * inv, o_acc[4 * i + 2 * hh + 1] * inv);
                if (lse_tile != nullptr && t4 == 0) lse_tile[row] = lse_of(hh, l);
            }
        }
        ring += n_tiles;
    }
    // Shared memory stays until the last bulk copies have read it. (Their writes complete by the
    // grid's end; code that read O in this kernel, or let a dependent grid start early, would
    // need them complete: cp.async.bulk.wait_group 0.)
    if constexpr (O_STAGED) {
        if (lane < 16) tg_bulk_wait_read();
    }
}
#if 0
{% endraw %}
#endif
