//! The GEMM's `wgmma` engine for sm_90a (H100/H200): TMA loads with 128-byte swizzle into a
//! ring of shared-memory stages guarded by mbarriers, one producer warpgroup and one consumer
//! warpgroup per 64 rows of wgmma's tile (`setmaxnreg` moves registers to the consumers),
//! `wgmma.mma_async` from shared-memory descriptors, a persistent grid walking the output tiles
//! in a grouped order, and the epilogue through swizzled shared memory and TMA stores. Tiles
//! shorter than 64 rows are computed transposed (swap-AB): see [`SWAP_TILE_MS`]. With
//! `pingpong` the two consumers take whole tiles in turn instead (see `Plan::pingpong`).
//!
//! Same op, arguments and epilogue chain as the mma.sync path (`gemm.rs`); the kernel also
//! takes the tensor maps listed here, which the host encodes per call.

use crate::launch::{GridRule, L2Promotion, Launch, Swizzle, TensorMap, MAX_CLUSTER};
use crate::ops::Field;
use crate::spec::model::{Arch, DType, Epilogue, Instance, Layout, Params};

/// Rows of the block tile by default: two consumer warpgroups of one m64 wgmma row each.
pub const TILE_M: u32 = 128;
/// Tile heights: one consumer warpgroup (64 rows, for skinny GEMMs: half the A per stage, so
/// a deeper ring and twice the tiles over M), two, or two of 128 rows each (256: two m64
/// slices a consumer, so n 128 at most).
pub const TILE_MS: &[u32] = &[64, 128, 256];
/// Tile heights below wgmma's 64 rows: swap-AB for decode-shaped GEMMs. wgmma computes the
/// tile's transpose, B's columns (the weights) on its m and A's few rows (the tokens) on its n,
/// so a stage holds a tile of weights beside a sliver of activations.
pub const SWAP_TILE_MS: &[u32] = &[16, 32];
/// Tile widths of swap-AB tiles: one or two consumer warpgroups of 64 weight rows.
pub const SWAP_TILE_NS: &[u32] = &[64, 128];
/// k per stage: one 128-byte swizzle row of 16-bit elements.
pub const TILE_K: u32 = 64;
/// Swap-AB tiles: the TMA bytes in flight over the whole grid that the ring depth aims at
/// (see `Plan::inflight_budget`), and the depth it never goes below (6 of 16×128's 18 KiB
/// stages: 4 ran 10 % slower than 6-12 with 132 blocks at 16×22016×4096).
const INFLIGHT_BUDGET_BYTES: u32 = 11 << 20;
const MIN_RING_DEPTH: u32 = 6;
/// Tile widths (the wgmma n): multiples of the 64-column TMA box, at most 256, and the narrow
/// ones, multiples of 32 columns that are not of 64 (96, 160, 224).
pub const TILE_NS: &[u32] = &[64, 96, 128, 160, 192, 224, 256];
/// Columns of a narrow tile's N-major B boxes (with a tail, of its last box only) and of its D
/// box (32-column boxes, 64-byte swizzle for 16-bit elements); narrow tile widths are
/// multiples of it but not of 64, and a narrow tile's K-major B comes in one box of all its
/// rows. 96 reads B once per tile where
/// 64×192 tiles read it twice at M around 128, and each block fills 1.75 MB of shared memory
/// per 4096 of K against 2 MB (cuBLAS's kernel for 128×11008×4096 on the H200 has this tile,
/// bench/hopper-gemm/NOTES.md). 160 and 224 fill the SMs where 128-row tiles of 192 or 256
/// columns leave a partial round (768×3072: 120 tiles of 128×160 for 132 SMs against 96 of
/// 128×192).
const NARROW_BOX_COLS: u32 = 32;
/// Narrow widths whose N-major B comes in 64-column boxes and one 32-column tail box (see
/// `Plan::b_tail`): 128x160 s5 took 0.78-0.79x the time it took with every box 32 columns wide,
/// 128x224 s3 1.13-1.18x (H100, bench/results/2026-12-06-h100-gemm-nn-tail.txt); 96 was not
/// timed that way.
const B_TAIL_WIDTHS: &[u32] = &[160];
const CONSUMER_ROWS: u32 = 64;
/// The deepest ring a spec may ask for (shared memory bounds it before this does).
const MAX_STAGES: u32 = 16;
/// Tile rows walked together in the persistent order (16 measured best, NOTES.md).
const GROUP_M: u32 = 16;
/// Registers after `setmaxnreg`: 40 × 128 + 2 × 232 × 128 ≤ 64 Ki.
const PRODUCER_REGS: u32 = 40;
const CONSUMER_REGS: u32 = 232;
/// Shared memory each consumer stages its output in per round (bf16 128×256 in one round,
/// f32 in two): 2 × 32 KiB beside 3 stages of 48 KiB fits sm_90's 227 KiB.
const STAGING_BYTES: u32 = 32 * 1024;
/// The swizzle span: TMA boxes are 128 bytes wide.
const SPAN: u32 = 128;
/// The most f32 accumulators a consumer thread may hold beside `gelu_erf`'s erfcf. Measured
/// by compiling every tile, schedule, split, dtype and chain the checks accept (NVRTC 13.0,
/// 2026-12-04): at 32 none spills; from 48 (a 128×96 tile's) some do, and which ones does not
/// follow the count (64×96 compiles clean, 128×96 without a bias spills).
const MAX_ACC_GELU_ERF: u32 = 32;
/// The most columns of 64-row wgmma slices one consumer holds (slices × n; ping-pong and
/// 256-row tiles): 128 f32 accumulators a thread, as a cooperative 128×256 tile's consumers
/// hold.
const MAX_CONSUMER_ACC_COLS: u32 = 256;
/// Slack to align the dynamic shared memory to 1024 bytes (128-byte swizzle atoms).
const ALIGN_SLACK: u32 = 1024;
/// Rows of A's TMA box (K-major A) in split-K instances, which serve skinny GEMMs: 32 measured
/// as fast as 16 at M = 16 and faster at M = 64 and 128 (bench/hopper-gemm/NOTES.md).
const SKINNY_A_BOX_ROWS: u32 = 32;

pub fn defaults(p: &mut Params) {
    p.tile.get_or_insert([TILE_M, 256, TILE_K]);
    p.layout.get_or_insert(Layout::Nn);
    p.tf32.get_or_insert(false);
}

/// Pipeline depth: the spec's, or 3 for tiles wider than 128 columns and 4 for the rest.
pub fn stages(p: &Params) -> u32 {
    let [_, tile_n, _] = p.tile.unwrap_or([TILE_M, 256, TILE_K]);
    p.stages.unwrap_or(if tile_n.max(64) > 128 { 3 } else { 4 })
}

/// Everything derived from an instance's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    /// Swap-AB: `tile_m`, `tile_n` and the operand fields below are wgmma's (its rows are D's
    /// columns); `d_tile()` is D's.
    swap: bool,
    /// wgmma's tile: rows (64 per consumer warpgroup) and columns (its n).
    tile_m: u32,
    tile_n: u32,
    stages: u32,
    /// wgmma's A operand k contiguous ("K-major"); else M-major (transposed). Without a swap
    /// that is A row-major (nn, nt); with one, B stored N×K (nt).
    a_k_major: bool,
    /// wgmma's B operand K-major: B stored N×K (nt, tt), or with a swap A row-major (always).
    b_k_major: bool,
    in_elem: u32,
    out_elem: u32,
    /// Outer size of a TMA box of wgmma's A: its rows when K-major, 64 k when M-major.
    a_box_outer: u32,
    /// Output columns per TMA store box, columns staged per round, rounds per tile.
    d_box_cols: u32,
    epi_cols: u32,
    epi_rounds: u32,
    has_bias: bool,
    /// Blocks per cluster, each summing a share of K (1: no split).
    split_k: u32,
    /// Blocks of a cluster on tiles side by side along N that share A's rows (TMA multicast), 1
    /// for none.
    multicast: u32,
    /// Split-K: the partial tiles live where the staging buffers are. Ranks other than 0
    /// never run the epilogue and rank 0 never writes a partial tile, so one region serves
    /// both. Used where separate buffers would not fit (wide tiles: 128×192 keeps 3 stages);
    /// where they fit, the separate layout the split instances were verified with on the
    /// H200 (2026-12-01) stays.
    partial_in_staging: bool,
    /// Ping-pong: the two consumer warpgroups take alternate tiles, each all of its tile's
    /// rows, so one's epilogue runs while the other's wgmmas keep the tensor cores busy
    /// (cooperative, the default: both take 64 rows of every tile and finish together).
    pingpong: bool,
}

/// A narrow tile: wgmma's n a multiple of [`NARROW_BOX_COLS`] columns and not of 64, no swap.
fn is_narrow(swap: bool, tile_n: u32) -> bool {
    !swap && tile_n.is_multiple_of(NARROW_BOX_COLS) && !tile_n.is_multiple_of(64)
}

/// The tile heights a narrow width was verified with on the GPU.
fn narrow_heights(tile_n: u32) -> &'static [u32] {
    if tile_n == 96 {
        &[64, 128]
    } else {
        &[128]
    }
}

/// Consumer warpgroups of a tile of `tile_m` wgmma rows: one per 64 rows, at most two, or
/// with ping-pong two, each on tiles of its own. (At least one: `check` asks this of tiles it
/// is about to refuse, and divides by it.)
fn consumers(tile_m: u32, pingpong: bool) -> u32 {
    if pingpong {
        2
    } else {
        (tile_m / CONSUMER_ROWS).clamp(1, 2)
    }
}

/// The 64-row wgmma slices a consumer computes of each of its tiles (each with its own
/// accumulators, staged one after the other): one, two of a 256-row tile, or with ping-pong
/// all of the tile's.
fn consumer_slices(tile_m: u32, pingpong: bool) -> u32 {
    if pingpong {
        tile_m / CONSUMER_ROWS
    } else {
        (tile_m / CONSUMER_ROWS / consumers(tile_m, pingpong)).max(1)
    }
}

impl Plan {
    fn new(inst: &Instance) -> Plan {
        let p = &inst.params;
        let [d_tile_m, d_tile_n, _] = p.tile.unwrap_or([TILE_M, 256, TILE_K]);
        let swap = SWAP_TILE_MS.contains(&d_tile_m);
        // `check` refuses other tiles before anything is planned.
        let (tile_m, tile_n) = if swap {
            let rows = if SWAP_TILE_NS.contains(&d_tile_n) {
                d_tile_n
            } else {
                64
            };
            (rows, d_tile_m)
        } else if TILE_MS.contains(&d_tile_m) {
            (d_tile_m, d_tile_n.max(64))
        } else {
            (TILE_M, d_tile_n.max(64))
        };
        let layout = p.layout.unwrap_or(Layout::Nn);
        let split_k = p.split_k.unwrap_or(1);
        let multicast = p.multicast.unwrap_or(1);
        let out_elem = inst.out_dtype.size();
        let (a_k_major, b_k_major) = if swap {
            (layout.b_transposed(), true)
        } else {
            (!layout.a_transposed(), layout.b_transposed())
        };
        // K-major A: one box of all the tile's rows, or with split-K (skinny GEMMs) boxes of
        // 32 rows, only those that reach into M (a box mostly past M costs more than its rows;
        // with a swap the rows are weights, all of them needed); M-major A: one box of 64 k
        // rows per consumer.
        let a_box_outer = match (a_k_major, split_k > 1 && !swap) {
            (true, false) => tile_m,
            (true, true) => SKINNY_A_BOX_ROWS,
            (false, _) => TILE_K,
        };
        let d_box_cols = if is_narrow(swap, tile_n) {
            NARROW_BOX_COLS
        } else {
            SPAN / out_elem
        };
        // Fewest rounds whose staging fits the budget and whose columns are whole boxes; with
        // a swap one round of each consumer's 64 columns of D over the tile's few rows.
        let mut epi_rounds = 1;
        while !swap
            && (CONSUMER_ROWS * (tile_n / epi_rounds) * out_elem > STAGING_BYTES
                || !(tile_n / epi_rounds).is_multiple_of(d_box_cols)
                || !tile_n.is_multiple_of(epi_rounds))
        {
            if epi_rounds >= tile_n / d_box_cols {
                break;
            }
            epi_rounds += 1;
        }
        let mut plan = Plan {
            swap,
            tile_m,
            tile_n,
            stages: stages(p),
            a_k_major,
            b_k_major,
            in_elem: inst.dtype.size(),
            out_elem,
            a_box_outer,
            d_box_cols,
            epi_cols: if swap {
                CONSUMER_ROWS
            } else {
                tile_n / epi_rounds
            },
            epi_rounds,
            has_bias: inst.has_epilogue(Epilogue::Bias),
            split_k,
            multicast,
            partial_in_staging: false,
            pingpong: p.pingpong == Some(true),
        };
        plan.partial_in_staging =
            split_k > 1 && plan.shared_bytes() > Arch::Sm90a.max_shared_per_block();
        plan
    }

    /// TMA boxes per stage of wgmma's A: K-major, of `a_box_outer` rows; M-major, one per
    /// 64 rows.
    fn a_loads(&self) -> u32 {
        if self.a_k_major {
            self.tile_m / self.a_box_outer
        } else {
            self.tile_m / 64
        }
    }
    fn narrow(&self) -> bool {
        is_narrow(self.swap, self.tile_n)
    }
    /// Rows of a box of wgmma's B through `b_map` (the tile's columns, at most 64 a box; a
    /// narrow tile's K-major B in one box, its N-major B in boxes of 32 columns, or of 64 with a
    /// tail) and such boxes per stage. Every box holds `b_box_rows` × 128 bytes.
    fn b_box_rows(&self) -> u32 {
        match (self.narrow(), self.b_k_major) {
            (true, true) => self.tile_n,
            (true, false) if self.b_narrow_boxes() => NARROW_BOX_COLS,
            _ => self.tile_n.min(64),
        }
    }
    /// The swizzle of B's map and of wgmma's B descriptor: rows of 64 bytes (32 columns) for a
    /// narrow tile's N-major B in boxes of 32 columns, else 128.
    fn b_swizzle(&self) -> Swizzle {
        if self.b_narrow_boxes() {
            Swizzle::B64
        } else {
            Swizzle::B128
        }
    }
    /// A narrow tile's N-major B of one of [`B_TAIL_WIDTHS`]: its last 32 columns come through
    /// `b_tail_map` in one box of 64-byte rows (64-byte swizzle), read by a wgmma of n 32 beside
    /// the one of n `tile_n - 32` over the 64-column boxes before it, in 128-byte swizzle as
    /// every other tile's.
    fn b_tail(&self) -> bool {
        self.narrow() && !self.b_k_major && B_TAIL_WIDTHS.contains(&self.tile_n)
    }
    /// A narrow tile's N-major B without a tail: all of it in boxes of 32 columns.
    fn b_narrow_boxes(&self) -> bool {
        self.narrow() && !self.b_k_major && !self.b_tail()
    }
    /// Bytes of a row of D's (and C's) box in the staging buffer, and the maps' swizzle: 64
    /// for a narrow tile's 16-bit output, else 128.
    fn d_span(&self) -> u32 {
        self.d_box_cols * self.out_elem
    }
    fn d_swizzle(&self) -> Swizzle {
        if self.d_span() == 64 {
            Swizzle::B64
        } else {
            Swizzle::B128
        }
    }
    /// Boxes per stage through `b_map` (the tail box comes besides).
    fn b_loads(&self) -> u32 {
        self.tile_n / self.b_box_rows()
    }
    /// D's tile (rows, columns): wgmma's, transposed with a swap.
    fn d_tile(&self) -> [u32; 2] {
        if self.swap {
            [self.tile_n, self.tile_m]
        } else {
            [self.tile_m, self.tile_n]
        }
    }
    fn consumers(&self) -> u32 {
        consumers(self.tile_m, self.pingpong)
    }
    /// Whether a consumer issues its residual C tile's load halfway through the tile's k loop
    /// rather than at its start. At the start the load first waits for the last tile's stores
    /// to read the staging buffer it lands in, which delays the first wgmma; halfway those
    /// reads are long done. Two-consumer tiles of 128 rows measured 1-4 % faster that way on the H200;
    /// the swap-AB and 64-row tiles, whose k loops are short enough that C's DRAM latency then
    /// shows after the last wgmma, measured up to 6 % slower and keep the load at the start
    /// (bench/hopper-gemm/NOTES.md, 2026-12-04).
    fn c_mid_loop(&self) -> bool {
        !self.swap && self.consumers() == 2 && self.split_k == 1 && !self.pingpong
    }
    /// L2 promotion of the A and B maps. Skinny tiles (swap-AB, and one consumer's 64 rows)
    /// stream their weights from DRAM in boxes of 128-byte rows: promoting each L2 miss to 256
    /// bytes measured up to 4 % slower than 128 on the H200 at decode and M = 64 shapes, and
    /// clearly faster nowhere; the two-consumer tiles read alike with either and keep 256
    /// (bench/hopper-gemm/NOTES.md, 2026-12-03).
    fn operand_l2_promotion(&self) -> L2Promotion {
        if self.swap || self.consumers() == 1 {
            L2Promotion::B128
        } else {
            L2Promotion::B256
        }
    }
    /// The operands' promotion where their rows are not whole 128-byte lines apart (most box
    /// rows then span two lines): every two-consumer tile ran 1.08-1.18x as fast with 128
    /// bytes there at 903x3048x6120, within the noise at skinny straddling shapes, and the
    /// same at whole-line pitches (H100, bench/hopper-gemm/NOTES.md, 2026-12-05). Tiles
    /// already at 128 keep it.
    fn operand_l2_promotion_straddling(&self) -> Option<L2Promotion> {
        (self.operand_l2_promotion() == L2Promotion::B256).then_some(L2Promotion::B128)
    }
    /// Bytes of TMA loads that the whole grid keeps in flight, for tiles that cap it (0: every
    /// block fills its ring). Swap-AB tiles stream weights that nothing else reads from DRAM,
    /// and past about this much in flight over the grid the H200's DRAM delivered less: 16×128
    /// tiles at 16×11008×4096 (86 blocks) ran 25.7 µs with 7 of their 12 stages in use and 28.1
    /// with all 12, while 43 blocks (N = 5504) ran fastest with all 12
    /// (bench/hopper-gemm/NOTES.md, 2026-12-03). So the ring's depth in use follows the grid.
    fn inflight_budget(&self) -> u32 {
        if self.swap {
            INFLIGHT_BUDGET_BYTES
        } else {
            0
        }
    }
    /// The C++ name of the ring positions in use: the kernel's `depth` where the budget caps it.
    fn ring_end(&self) -> &'static str {
        if self.inflight_budget() > 0 {
            "depth"
        } else {
            "STAGES"
        }
    }
    fn units(&self) -> u32 {
        consumer_slices(self.tile_m, self.pingpong)
    }
    /// The stage's 64-row slices of A that a consumer's first and second accumulators take
    /// (C++ expressions of `cw`): its own, its own pair, or with ping-pong the tile's first two.
    fn a_slices(&self) -> (&'static str, &'static str) {
        match (self.pingpong, self.units()) {
            (true, _) => ("0", "1"),
            (false, 1) => ("cw", "cw"),
            (false, _) => ("(2 * cw)", "(2 * cw + 1)"),
        }
    }
    /// One producer warpgroup and the consumers.
    fn threads(&self) -> u32 {
        128 * (1 + self.consumers())
    }
    fn a_stage_bytes(&self) -> u32 {
        self.tile_m * TILE_K * self.in_elem
    }
    fn b_stage_bytes(&self) -> u32 {
        self.tile_n * TILE_K * self.in_elem
    }
    /// Rows of D a consumer stages: its 64, or with a swap the tile's few.
    fn staging_rows(&self) -> u32 {
        if self.swap {
            self.tile_n
        } else {
            CONSUMER_ROWS
        }
    }
    /// One consumer's output staging buffer (64 rows; a ping-pong consumer stages its
    /// slices one after the other).
    fn staging_bytes(&self) -> u32 {
        self.staging_rows() * self.epi_cols * self.out_elem
    }
    /// Two slots of a tile's bias columns (D's: wgmma's rows with a swap) as f32 (bias
    /// instances only).
    fn bias_slot_bytes(&self) -> u32 {
        if self.has_bias {
            self.d_tile()[1] * 4
        } else {
            0
        }
    }
    fn staging_offset(&self) -> u32 {
        self.stages * (self.a_stage_bytes() + self.b_stage_bytes())
    }
    /// The staging buffers, or with `partial_in_staging` the region they share with the
    /// partial tiles.
    fn staging_region_bytes(&self) -> u32 {
        let per_consumer = if self.partial_in_staging {
            self.staging_bytes().max(self.partial_bytes())
        } else {
            self.staging_bytes()
        };
        self.consumers() * per_consumer
    }
    fn bias_offset(&self) -> u32 {
        self.staging_offset() + self.staging_region_bytes()
    }
    /// Split-K: one consumer's partial tile, 64 rows × tile_n f32 (none without a split).
    fn partial_bytes(&self) -> u32 {
        if self.split_k > 1 {
            CONSUMER_ROWS * self.tile_n * 4
        } else {
            0
        }
    }
    fn bias_end(&self) -> u32 {
        self.bias_offset() + 2 * self.bias_slot_bytes()
    }
    fn partial_offset(&self) -> u32 {
        if self.partial_in_staging {
            self.staging_offset()
        } else {
            self.bias_end()
        }
    }
    fn barrier_offset(&self) -> u32 {
        if self.partial_in_staging {
            self.bias_end()
        } else {
            self.bias_end() + self.consumers() * self.partial_bytes()
        }
    }
    /// Blocks per cluster: a split's or a multicast's (1: no clusters).
    fn cluster(&self) -> u32 {
        self.split_k.max(self.multicast)
    }
    fn barriers(&self) -> u32 {
        2 * self.stages + 6 + if self.split_k > 1 { 4 } else { 0 }
    }
    /// Dynamic shared memory: alignment slack, the stages (A then B), a staging buffer per
    /// consumer, two bias slots, a partial tile per consumer (split-K; or in the staging
    /// region, see `partial_in_staging`), then mbarriers (as many for one consumer as for two): a full and an empty one
    /// per stage, one per consumer (its staged C), a full and an empty one per bias slot, and
    /// with split-K a full and an empty one per consumer's partial tile.
    fn shared_bytes(&self) -> u32 {
        ALIGN_SLACK + self.barrier_offset() + 8 * self.barriers()
    }
}

pub fn check(inst: &Instance) -> Vec<(Field, String)> {
    let mut out = Vec::new();
    let p = &inst.params;
    if inst.dtype == DType::F32 {
        out.push((
            Field::Engine,
            "engine wgmma takes f16 or bf16 inputs, not f32 (f32 GEMMs run on the mma_sync engine)"
                .to_string(),
        ));
    }
    if p.tf32 == Some(true) {
        out.push((
            Field::Tf32,
            "tf32 applies to f32 inputs on the mma_sync engine, not to engine wgmma".to_string(),
        ));
    }
    if let Some([m, n]) = p.warp {
        out.push((
            Field::Warp,
            format!(
                "`warp` does not apply to engine wgmma (consumer warpgroups of {CONSUMER_ROWS} rows \
                 split the tile), found {m}x{n}: leave it out"
            ),
        ));
    }
    let [tm, tn, tk] = p.tile.unwrap_or([TILE_M, 256, TILE_K]);
    let swap = SWAP_TILE_MS.contains(&tm);
    let tile_ok = tk == TILE_K
        && if swap {
            SWAP_TILE_NS.contains(&tn)
        } else {
            TILE_MS.contains(&tm) && TILE_NS.contains(&tn)
        };
    if !tile_ok {
        let list = |v: &[u32]| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push((
            Field::Tile,
            format!(
                "engine wgmma takes tile [m, n, {TILE_K}] with m one of {} and n one of {}, or m {} \
                 (swap-AB: the tile's rows on wgmma's n) with n {}; not [{tm}, {tn}, {tk}]",
                list(TILE_MS),
                list(TILE_NS),
                list(SWAP_TILE_MS).replace(", ", " or "),
                list(SWAP_TILE_NS).replace(", ", " or ")
            ),
        ));
    }
    // Narrow tiles take the plain cooperative schedule and the heights verified with their
    // boxes.
    let narrow_extras = p.pingpong == Some(true)
        || p.split_k.is_some_and(|k| k != 1)
        || p.multicast.is_some_and(|c| c != 1);
    let heights = narrow_heights(tn);
    if tile_ok && is_narrow(swap, tn) && (!heights.contains(&tm) || narrow_extras) {
        let heights = heights
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>()
            .join(" or ");
        out.push((
            Field::Tile,
            format!(
                "tile n {tn} (not a multiple of 64) takes tile m {heights} and no pingpong, \
                 split_k or multicast; not [{tm}, {tn}, {tk}] with those"
            ),
        ));
    }
    let layout = p.layout.unwrap_or(Layout::Nn);
    if swap && layout.a_transposed() {
        out.push((
            Field::Layout,
            format!(
                "tile m {tm} puts A's rows on wgmma's n (swap-AB), which reads A row-major: layout \
                 nn or nt, not {layout}"
            ),
        ));
    }
    if swap && p.split_k.is_some_and(|k| k != 1) {
        out.push((
            Field::SplitK,
            format!(
                "tile m {tm} puts A's rows on wgmma's n (swap-AB), whose path takes no split_k: \
                 split_k 1, or tile m 64 or more"
            ),
        ));
    }
    let pingpong = p.pingpong == Some(true);
    // The 64-row slices a consumer holds, 64 accumulators per thread each at n 128 (a swap
    // holds one: its tile's few rows are wgmma's n).
    let slices = if swap {
        1
    } else {
        consumer_slices(tm, pingpong)
    };
    // A consumer thread holds a 64-row slice's tn / 2 accumulators per slice, or a swap-AB
    // tile's tm × tn / 128.
    let accumulators = if swap { tm * tn / 128 } else { slices * tn / 2 };
    if tile_ok && inst.has_epilogue(Epilogue::GeluErf) && accumulators > MAX_ACC_GELU_ERF {
        out.push((
            Field::Epilogue,
            format!(
                "gelu_erf on engine wgmma takes at most {MAX_ACC_GELU_ERF} accumulators per consumer \
                 thread (erfc beside more can spill): tile [64, 64, {TILE_K}] or [128, 64, {TILE_K}] \
                 (no pingpong), or a swap-AB tile (m 16 or 32); [{tm}, {tn}, {tk}] holds \
                 {accumulators}. Or use gelu (the tanh form)"
            ),
        ));
    }
    if pingpong {
        if swap || p.split_k.is_some_and(|k| k != 1) || p.multicast.is_some_and(|c| c != 1) {
            out.push((
                Field::Pingpong,
                "pingpong gives each consumer warpgroup whole tiles of its own: not with a swap-AB \
                 tile (m 16 or 32), split_k or multicast"
                    .into(),
            ));
        } else if tile_ok && slices * tn > MAX_CONSUMER_ACC_COLS {
            out.push((
                Field::Tile,
                format!(
                    "with pingpong one consumer warpgroup holds the whole tile's accumulators: \
                     tile m × n at most 64 × 256 or 128 × 128 ({} f32 a thread), not {tm} × {tn}",
                    MAX_CONSUMER_ACC_COLS / 2
                ),
            ));
        }
    }
    if !pingpong && !swap && slices > 1 {
        if tile_ok && slices * tn > MAX_CONSUMER_ACC_COLS {
            out.push((
                Field::Tile,
                format!(
                    "tile m {tm} gives each consumer warpgroup {slices} slices of 64 rows: tile n {} \
                     at most ({} f32 a thread), not {tn}",
                    MAX_CONSUMER_ACC_COLS / slices,
                    MAX_CONSUMER_ACC_COLS / 2
                ),
            ));
        }
        if p.split_k.is_some_and(|k| k != 1) || p.multicast.is_some_and(|c| c != 1) {
            out.push((
                Field::Tile,
                format!("tile m {tm} takes no split_k or multicast (their paths hold one slice)"),
            ));
        }
    }
    if let Some(s) = p.stages {
        if !(2..=MAX_STAGES).contains(&s) {
            out.push((
                Field::Stages,
                format!("stages must be from 2 to {MAX_STAGES}, not {s}"),
            ));
        }
    }
    if let Some(k) = p.split_k {
        if !(1..=MAX_CLUSTER).contains(&k) {
            out.push((
                Field::SplitK,
                format!(
                    "split_k must be from 1 to {MAX_CLUSTER} (blocks in a portable cluster), not {k}"
                ),
            ));
        }
    }
    if let Some(c) = p.multicast.filter(|&c| c != 1) {
        if !(2..=MAX_CLUSTER).contains(&c) {
            out.push((
                Field::Multicast,
                format!(
                    "multicast must be from 1 to {MAX_CLUSTER} (blocks in a portable cluster), not {c}"
                ),
            ));
        } else if p.split_k.is_some_and(|k| k != 1) {
            out.push((
                Field::Multicast,
                "multicast and split_k both need the cluster: give one of them".into(),
            ));
        }
    }
    out
}

pub fn arch_problem(arch: Arch) -> Option<String> {
    (arch != Arch::Sm90a).then(|| {
        format!(
            "engine wgmma uses wgmma.mma_async and setmaxnreg, which only sm_90a has (and sm_90a \
             code runs on no other GPU): give `archs: [sm_90a]`, not {arch}"
        )
    })
}

/// The maps the kernel takes before its arguments: A, B, D (see `TensorMap` for the terms).
pub fn tensor_maps(inst: &Instance) -> Vec<TensorMap> {
    let plan = Plan::new(inst);
    // A and B: the input dtype, with the L2 promotion the plan picks for its operands.
    let operand = |name: &str, tensor: &str, dims: [&str; 2], ld: &str, box_dims| TensorMap {
        l2_promotion: plan.operand_l2_promotion(),
        l2_promotion_straddling: plan.operand_l2_promotion_straddling(),
        ..TensorMap::tiled_2d(name, tensor, inst.dtype, dims, ld, box_dims, Swizzle::B128)
    };
    // K-major operands come in boxes of the rows a stage needs, MN-major ones in boxes of 64 k
    // rows by 64 of m (or n; 32 for a narrow tile's B, in 64-byte swizzle, or with a tail only
    // its last 32 columns, through their own map). With a swap, B's columns are wgmma's m and
    // A's rows its n.
    let k_major_b = |rows| operand("b_map", "b", ["k", "n"], "ldb", [TILE_K, rows]);
    let n_major_b = TensorMap {
        swizzle: plan.b_swizzle(),
        ..operand(
            "b_map",
            "b",
            ["n", "k"],
            "ldb",
            [
                if plan.b_narrow_boxes() {
                    NARROW_BOX_COLS
                } else {
                    64
                },
                TILE_K,
            ],
        )
    };
    let (a, b) = if plan.swap {
        let b = if plan.a_k_major {
            k_major_b(plan.a_box_outer)
        } else {
            n_major_b
        };
        (
            operand("a_map", "a", ["k", "m"], "lda", [TILE_K, plan.tile_n]),
            b,
        )
    } else {
        let a = if plan.a_k_major {
            operand("a_map", "a", ["k", "m"], "lda", [TILE_K, plan.a_box_outer])
        } else {
            operand("a_map", "a", ["m", "k"], "lda", [64, TILE_K])
        };
        (
            a,
            if plan.b_k_major {
                k_major_b(plan.b_box_rows())
            } else {
                n_major_b
            },
        )
    };
    // C and D: the output dtype, tiled_2d's 256-byte promotion.
    let out_map = |name: &str, tensor: &str, ld: &str| {
        TensorMap::tiled_2d(
            name,
            tensor,
            inst.out_dtype,
            ["n", "m"],
            ld,
            [plan.d_box_cols, plan.staging_rows()],
            plan.d_swizzle(),
        )
    };
    let mut maps = vec![a, b];
    if plan.b_tail() {
        maps.push(TensorMap {
            swizzle: Swizzle::B64,
            ..operand(
                "b_tail_map",
                "b",
                ["n", "k"],
                "ldb",
                [NARROW_BOX_COLS, TILE_K],
            )
        });
    }
    // The residual C is read through the staging buffer, in D's layout.
    if inst.has_epilogue(Epilogue::Residual) {
        maps.push(out_map("c_map", "c", "ldc"));
    }
    maps.push(out_map("d_map", "d", "ldd"));
    maps
}

pub fn launch(inst: &Instance) -> Launch {
    let plan = Plan::new(inst);
    Launch {
        threads: plan.threads(),
        grid: GridRule::Persistent {
            tile_m: plan.d_tile()[0],
            tile_n: plan.d_tile()[1],
            ctas_per_sm: 1,
            cluster: plan.cluster(),
        },
        shared_bytes: plan.shared_bytes(),
    }
}

/// What a launcher must check and do before calling a wgmma GEMM instance, in words (the same
/// list heads the rendered kernel). Sizes in elements.
pub fn runtime_requirements(inst: &Instance) -> Vec<String> {
    let plan = Plan::new(inst);
    let layout = inst.params.layout.unwrap_or(Layout::Nn);
    let needs = super::call_needs(inst.dtype, inst.out_dtype, true);
    let (in_vec, out_vec) = (needs.ld_in_multiple, needs.ld_out_multiple);
    let has_bias = inst.has_epilogue(Epilogue::Bias);
    let has_c = inst.has_epilogue(Epilogue::Residual);
    let (a_desc, a_ld) = if !layout.a_transposed() {
        ("A (M x K) is row-major", "lda >= K")
    } else {
        ("A (M x K) is column-major, stored K x M", "lda >= M")
    };
    let (b_desc, b_ld) = if layout.b_transposed() {
        ("B (K x N) is column-major, stored N x K", "ldb >= K")
    } else {
        ("B (K x N) is row-major", "ldb >= N")
    };
    let [tile_rows, tile_cols] = plan.d_tile();
    let s = plan.cluster();
    let grid = if s > 1 {
        let walk = if plan.split_k > 1 {
            format!("loops over tiles; its {s} blocks split K and rank 0 sums their partial tiles")
        } else {
            format!(
                "loops over groups of {s} tiles along N that share A, which rank 0 loads once for \
                 the {s} blocks by TMA multicast"
            )
        };
        format!(
            "grid = (min(ceil(M / {tile_rows}) * ceil(N / {tile_cols}), max(floor(SMs / {s}), 1), C) \
             * {s}, 1, 1) in clusters of ({s}, 1, 1), compiled into the kernel, C = the clusters the \
             device runs at once (cuOccupancyMaxActiveClusters) (persistent: each cluster {walk})"
        )
    } else {
        format!(
            "grid = (min(ceil(M / {tile_rows}) * ceil(N / {tile_cols}), SMs), 1, 1) (persistent: each \
             block loops over tiles)"
        )
    };
    let mut r = vec![
        "runs only on compute capability 9.0 devices (sm_90a code: H100, H200)".to_string(),
        format!(
            "launch: {grid}, block = ({}, 1, 1), {} bytes of dynamic shared memory (over 48 KiB: \
             raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first)",
            plan.threads(),
            plan.shared_bytes()
        ),
        format!(
            "parameters: the tensor maps {} (128-byte CUtensorMap values from cuTensorMapEncodeTiled, as \
             the manifest's tensor_maps give them), then the arguments",
            tensor_maps(inst)
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "M, N, K >= 1 (a tensor map has no empty dimension) and <= 2^31 - 1".to_string(),
        format!(
            "N a multiple of {} (16 bytes of {}): TMA stores write whole 16-byte chunks at the \
             right edge, so a ragged N would change the bytes after column N - 1 when ldd > N",
            needs.n_multiple, inst.out_dtype
        ),
        format!(
            "{} {}-byte aligned{}",
            if has_c { "a, b, c and d" } else { "a, b and d" },
            needs.align,
            if has_bias { "; bias aligned to its element size" } else { "" }
        ),
        format!(
            "lda and ldb multiples of {in_vec} (16 bytes of {}), below 2^40 bytes",
            inst.dtype
        ),
        format!(
            "{} {out_vec} (16 bytes of {}), below 2^40 bytes",
            if has_c { "ldc and ldd multiples of" } else { "ldd a multiple of" },
            inst.out_dtype
        ),
        format!("layout {layout}: {a_desc}, {a_ld}; {b_desc}, {b_ld}"),
    ];
    r.extend(super::output_requirements(has_bias, has_c));
    r
}

/// The wgmma `.atype` of the inputs.
fn wgmma_type(t: DType) -> &'static str {
    match t {
        DType::F16 => "f16",
        _ => "bf16",
    }
}

pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    let plan = Plan::new(inst);
    let maps: Vec<String> = tensor_maps(inst)
        .iter()
        .map(crate::ops::map_summary)
        .collect();
    // tg_gemm_sm90's arguments (gemm_sm90.cu) are wgmma's operands and sizes: with a swap,
    // B's map and N first. d's map stands in for a C map the kernel lacks (never read without a
    // residual).
    let (op_a, op_b, op_m, op_n) = if plan.swap {
        ("b_map", "a_map", "n", "m")
    } else {
        ("a_map", "b_map", "m", "n")
    };
    // B's tail has a map of its own, passed after B's (only there, so that the other
    // kernels' source stays as it was).
    let mut args = vec![(op_a, op_a), (op_b, op_b)];
    // The template issues the tail's wgmma for a consumer's one 64-row slice only (narrow
    // tiles take at most 128 rows, `narrow_heights`).
    debug_assert!(!plan.b_tail() || plan.units() == 1);
    if plan.b_tail() {
        args.push(("b_tail_map", "b_tail_map"));
    }
    args.extend([
        ("c_map", "d_map"),
        ("d_map", "d_map"),
        ("bias", "nullptr"),
        (op_m, op_m),
        (op_n, op_n),
        ("k", "k"),
        ("alpha", "1.0f"),
    ]);
    vec![
        ("sm90_args", crate::ops::forward_args(inst, &args).into()),
        ("swap", plan.swap.into()),
        ("b_box_rows", plan.b_box_rows().into()),
        ("b_sw64", (plan.b_swizzle() == Swizzle::B64).into()),
        ("b_tail", plan.b_tail().into()),
        ("d_sw64", (plan.d_swizzle() == Swizzle::B64).into()),
        ("out_f32", (inst.out_dtype == DType::F32).into()),
        ("tile_m", plan.tile_m.into()),
        ("consumers", plan.consumers().into()),
        ("pingpong", plan.pingpong.into()),
        ("units", plan.units().into()),
        ("a_slice", plan.a_slices().0.into()),
        ("a_slice1", plan.a_slices().1.into()),
        ("tile_n", plan.tile_n.into()),
        ("tile_k", TILE_K.into()),
        ("stages", plan.stages.into()),
        ("inflight_budget", plan.inflight_budget().into()),
        ("min_depth", MIN_RING_DEPTH.into()),
        ("ring_end", plan.ring_end().into()),
        ("group_m", GROUP_M.into()),
        (
            "layout",
            inst.params.layout.unwrap_or(Layout::Nn).as_str().into(),
        ),
        ("a_k_major", plan.a_k_major.into()),
        ("b_k_major", plan.b_k_major.into()),
        ("a_box_outer", plan.a_box_outer.into()),
        ("a_loads", plan.a_loads().into()),
        ("b_loads", plan.b_loads().into()),
        ("a_stage_bytes", plan.a_stage_bytes().into()),
        ("b_stage_bytes", plan.b_stage_bytes().into()),
        ("d_box_cols", plan.d_box_cols.into()),
        ("epi_cols", plan.epi_cols.into()),
        ("epi_rounds", plan.epi_rounds.into()),
        ("staging_bytes", plan.staging_bytes().into()),
        ("bias_offset", plan.bias_offset().into()),
        ("bias_slot_bytes", plan.bias_slot_bytes().into()),
        ("bias_half", super::halves_bias(inst).into()),
        ("split_k", plan.split_k.into()),
        ("multicast", plan.multicast.into()),
        ("partial_offset", plan.partial_offset().into()),
        ("partial_bytes", plan.partial_bytes().into()),
        ("barrier_offset", plan.barrier_offset().into()),
        ("shared_bytes", plan.shared_bytes().into()),
        ("producer_regs", PRODUCER_REGS.into()),
        ("consumer_regs", CONSUMER_REGS.into()),
        ("wgmma_type", wgmma_type(inst.dtype).into()),
        ("acc_regs", (plan.tile_n / 2).into()),
        ("a_trans", u32::from(!plan.a_k_major).into()),
        ("b_trans", u32::from(!plan.b_k_major).into()),
        ("has_bias", inst.has_epilogue(Epilogue::Bias).into()),
        ("has_residual", inst.has_epilogue(Epilogue::Residual).into()),
        (
            "c_mid_loop",
            (inst.has_epilogue(Epilogue::Residual) && plan.c_mid_loop()).into(),
        ),
        ("has_scale", inst.has_epilogue(Epilogue::Scale).into()),
        ("requirements", runtime_requirements(inst).into()),
        ("tensor_maps", maps.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::{Engine, Op};

    fn inst(dtype: DType, out: DType, tile_n: u32, layout: Layout) -> Instance {
        let mut params = Params {
            tile: Some([TILE_M, tile_n, TILE_K]),
            layout: Some(layout),
            engine: Some(Engine::Wgmma),
            ..Default::default()
        };
        defaults(&mut params);
        let mut i = Instance::for_test(Op::Gemm, dtype, params);
        i.out_dtype = out;
        i.archs = vec![Arch::Sm90a];
        i
    }

    #[test]
    fn pingpong_plan() {
        // Two consumers on whole 128x128 tiles: the stages of the cooperative 128x128 tile, one
        // 64x128 staging buffer per consumer (each stages its two slices in turn), 18 barriers.
        let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
        i.params.pingpong = Some(true);
        i.params.stages = Some(6);
        assert!(crate::ops::check(&i).is_empty());
        let l = launch(&i);
        assert_eq!(l.threads, 384);
        assert_eq!(l.shared_bytes, 1024 + 6 * 32768 + 2 * 16384 + 8 * 18);
        let v: std::collections::HashMap<_, _> = template_values(&i).into_iter().collect();
        assert_eq!(v["units"], 2);
        assert_eq!(v["acc_regs"], 64);
        assert_eq!(v["a_slice"], "0");
        assert!(crate::ops::name_suffix(&i).ends_with("_nn_wgmma_pp"));
        // 64 rows: one slice of 128 accumulators, as a cooperative 128x256 consumer holds.
        let mut w = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        w.params.tile = Some([64, 256, TILE_K]);
        w.params.pingpong = Some(true);
        let v: std::collections::HashMap<_, _> = template_values(&w).into_iter().collect();
        assert_eq!(
            (v["units"].clone(), v["consumers"].clone()),
            (1.into(), 2.into())
        );
    }

    #[test]
    fn residual_c_load_halfway_only_for_two_consumer_tiles() {
        let c_mid_loop = |tile: [u32; 3], split_k: Option<u32>, pingpong: Option<bool>| {
            let mut i = inst(DType::Bf16, DType::Bf16, tile[1], Layout::Nn);
            i.params.tile = Some(tile);
            i.params.split_k = split_k;
            i.params.pingpong = pingpong;
            i.epilogue = vec![Epilogue::Scale, Epilogue::Bias, Epilogue::Residual];
            assert!(crate::ops::check(&i).is_empty(), "{tile:?}");
            let v: std::collections::HashMap<_, _> = template_values(&i).into_iter().collect();
            v["c_mid_loop"] == serde_json::Value::Bool(true)
        };
        assert!(c_mid_loop([128, 256, TILE_K], None, None));
        assert!(c_mid_loop([128, 96, TILE_K], None, None));
        assert!(!c_mid_loop([64, 192, TILE_K], None, None));
        assert!(!c_mid_loop([16, 64, TILE_K], None, None));
        assert!(!c_mid_loop([128, 64, TILE_K], Some(2), None));
        assert!(!c_mid_loop([128, 128, TILE_K], None, Some(true)));
        // Without a residual there is no C to load.
        let plain = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        let v: std::collections::HashMap<_, _> = template_values(&plain).into_iter().collect();
        assert_eq!(v["c_mid_loop"], serde_json::Value::Bool(false));
    }

    #[test]
    fn tile_256_rows() {
        // Two consumers of two slices each; a stage holds 32 KiB of A beside 16 of B.
        let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
        i.params.tile = Some([256, 128, TILE_K]);
        i.params.stages = Some(4);
        assert!(crate::ops::check(&i).is_empty());
        assert_eq!(
            launch(&i).shared_bytes,
            1024 + 4 * 49152 + 2 * 16384 + 8 * 14
        );
        let v: std::collections::HashMap<_, _> = template_values(&i).into_iter().collect();
        assert_eq!(
            (v["consumers"].clone(), v["units"].clone()),
            (2.into(), 2.into())
        );
        assert_eq!(
            (v["a_slice"].clone(), v["a_slice1"].clone()),
            ("(2 * cw)".into(), "(2 * cw + 1)".into())
        );
        assert_eq!(v["a_loads"], 1); // K-major A: one 256-row box
    }

    #[test]
    fn plan_and_shared_memory() {
        // bf16 128x256, 3 stages of 16 + 32 KiB, two 64x256 bf16 staging buffers, 12 barriers.
        let i = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        let l = launch(&i);
        assert_eq!(l.threads, 384);
        assert_eq!(l.shared_bytes, 1024 + 3 * 49152 + 2 * 32768 + 8 * 12);
        // A bias adds two slots of 256 f32 columns.
        let mut b = i.clone();
        b.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
        assert_eq!(launch(&b).shared_bytes, l.shared_bytes + 2 * 1024);
        assert!(crate::ops::check(&b).is_empty());
        assert_eq!(
            l.grid,
            GridRule::Persistent {
                tile_m: 128,
                tile_n: 256,
                ctas_per_sm: 1,
                cluster: 1
            }
        );
        assert!(check(&i).is_empty());
        assert_eq!(crate::ops::check(&i), vec![]);
        // f32 output stages half the tile per round: the same 64 KiB.
        let f = inst(DType::Bf16, DType::F32, 256, Layout::Nn);
        let pf = Plan::new(&f);
        assert_eq!((pf.epi_rounds, pf.epi_cols, pf.d_box_cols), (2, 128, 32));
        assert_eq!(launch(&f).shared_bytes, launch(&i).shared_bytes);
        assert!(crate::ops::check(&f).is_empty());
        // 128-wide tiles get 4 stages by default; f32 out then fits in one round.
        let n = inst(DType::F16, DType::F32, 128, Layout::Nt);
        let pn = Plan::new(&n);
        assert_eq!((pn.stages, pn.epi_rounds), (4, 1));
        assert!(crate::ops::check(&n).is_empty());
        // 192 wide with f32 out: 64x192x4 = 48 KiB, two rounds of 96 columns (3 boxes).
        let w = inst(DType::Bf16, DType::F32, 192, Layout::Nn);
        let pw = Plan::new(&w);
        assert_eq!((pw.epi_rounds, pw.epi_cols), (2, 96));
        // Too deep a ring for sm_90's 227 KiB is refused at `stages`.
        let mut deep = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        deep.params.stages = Some(4);
        let p = crate::ops::check(&deep);
        assert!(
            p.iter()
                .any(|(f, m)| *f == Field::Stages && m.contains("shared memory")),
            "{p:?}"
        );
    }

    #[test]
    fn wide_split_tiles_keep_partials_in_the_staging_region() {
        // 128x192 split 2, 3 stages: separate 2 x 48 KiB partial tiles beside the ring and
        // the staging buffers would need 273 KB; in the staging region they fit.
        let mut w = inst(DType::Bf16, DType::Bf16, 192, Layout::Nn);
        w.params.stages = Some(3);
        w.params.split_k = Some(2);
        w.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
        let p = Plan::new(&w);
        assert!(p.partial_in_staging);
        assert_eq!(p.partial_offset(), p.staging_offset());
        assert_eq!(p.staging_region_bytes(), 2 * 64 * 192 * 4);
        assert!(p.staging_region_bytes() >= 2 * p.staging_bytes());
        // The bias slots follow the shared region, the barriers the bias slots.
        assert_eq!(p.bias_offset(), p.staging_offset() + 2 * 64 * 192 * 4);
        assert_eq!(p.barrier_offset(), p.bias_offset() + 2 * 192 * 4);
        assert_eq!(
            launch(&w).shared_bytes,
            1024 + 3 * (16384 + 24576) + 2 * 49152 + 2 * 768 + 8 * 16
        );
        assert_eq!(crate::ops::check(&w), vec![]);
        // A split whose separate buffers fit keeps them (the verified layout).
        let mut narrow = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
        narrow.params.stages = Some(7);
        narrow.params.split_k = Some(2);
        let pn = Plan::new(&narrow);
        assert!(!pn.partial_in_staging);
        assert_eq!(pn.partial_offset(), pn.bias_offset());
        // No split, no sharing.
        assert!(!Plan::new(&inst(DType::Bf16, DType::Bf16, 192, Layout::Nn)).partial_in_staging);
    }

    #[test]
    fn split_k_clusters() {
        let mut i = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
        i.params.stages = Some(7);
        i.params.split_k = Some(2);
        assert_eq!(crate::ops::check(&i), vec![]);
        // 7 stages of 16 + 8 KiB, two 64x64 bf16 staging buffers, two 64x64 f32 partial
        // tiles, 7 * 2 + 6 + 4 barriers.
        let l = launch(&i);
        assert_eq!(
            l.shared_bytes,
            1024 + 7 * 24576 + 2 * 8192 + 2 * 16384 + 8 * 24
        );
        assert_eq!(
            l.grid,
            GridRule::Persistent {
                tile_m: 128,
                tile_n: 64,
                ctas_per_sm: 1,
                cluster: 2
            }
        );
        // K-major A comes in 32-row boxes (only those that reach into M); M-major A as before.
        assert_eq!(tensor_maps(&i)[0].box_dims, vec![64, 32]);
        let mut t = i.clone();
        t.params.layout = Some(Layout::Tn);
        assert_eq!(tensor_maps(&t)[0].box_dims, vec![64, 64]);
        assert!(crate::ops::name_suffix(&i).ends_with("_s7_nn_wgmma_split2"));
        // The manifest spells the cluster only when there is one.
        let json = |g: &GridRule| serde_json::to_string(g).unwrap();
        assert!(json(&l.grid).contains("\"cluster\":2"));
        let unsplit = launch(&inst(DType::Bf16, DType::Bf16, 64, Layout::Nn)).grid;
        assert!(!json(&unsplit).contains("cluster"));
        assert_eq!(
            serde_json::from_str::<GridRule>(&json(&unsplit)).unwrap(),
            unsplit
        );
        // split_k 1 is no split: same instance as leaving it out.
        let mut one = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
        one.params.split_k = Some(1);
        assert_eq!(
            crate::ops::canonical(&one),
            inst(DType::Bf16, DType::Bf16, 64, Layout::Nn).params
        );
        // Out of range; and the mma_sync engine has no clusters.
        let has = |i: &Instance, needle: &str| has_problem(i, Field::SplitK, needle);
        for bad in [0, 9] {
            let mut b = i.clone();
            b.params.split_k = Some(bad);
            has(&b, "from 1 to 8");
        }
        has(
            &mma_sync(Params {
                split_k: Some(2),
                ..Default::default()
            }),
            "needs engine wgmma",
        );
    }

    /// `check` reports a problem with `field` whose message contains `needle`.
    fn has_problem(i: &Instance, field: Field, needle: &str) {
        let p = crate::ops::check(i);
        assert!(
            p.iter().any(|(f, m)| *f == field && m.contains(needle)),
            "{needle:?} not in {p:?}"
        );
    }

    /// A GEMM instance with `params` on the default (mma_sync) engine.
    fn mma_sync(params: Params) -> Instance {
        let mut m = Instance::for_test(crate::spec::model::Op::Gemm, DType::Bf16, params);
        crate::ops::apply_defaults(crate::spec::model::Op::Gemm, &mut m.params);
        m
    }

    #[test]
    fn multicast_clusters() {
        // Swap-AB 16x128 tiles in clusters of 2 sharing the activations' stages: the cluster
        // in the grid rule and the name, shared memory as without it.
        let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
        i.params.tile = Some([16, 128, TILE_K]);
        i.params.stages = Some(12);
        let plain = launch(&i);
        i.params.multicast = Some(2);
        assert_eq!(crate::ops::check(&i), vec![]);
        let l = launch(&i);
        assert_eq!(l.shared_bytes, plain.shared_bytes);
        assert_eq!(
            l.grid,
            GridRule::Persistent {
                tile_m: 16,
                tile_n: 128,
                ctas_per_sm: 1,
                cluster: 2
            }
        );
        assert!(crate::ops::name_suffix(&i).ends_with("_s12_nn_wgmma_mc2"));
        assert!(runtime_requirements(&i)
            .iter()
            .any(|r| r.contains("cuOccupancyMaxActiveClusters") && r.contains("multicast")));
        // multicast 1 is none: the same instance as leaving it out.
        let mut one = i.clone();
        one.params.multicast = Some(1);
        let mut none = i.clone();
        none.params.multicast = None;
        assert_eq!(crate::ops::canonical(&one), crate::ops::canonical(&none));
        let has = |i: &Instance, needle: &str| has_problem(i, Field::Multicast, needle);
        for bad in [0, 9] {
            let mut b = i.clone();
            b.params.multicast = Some(bad);
            has(&b, "from 1 to 8");
        }
        // Any tile may share A's rows; a cluster either splits K or multicasts.
        let mut wide = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        wide.params.multicast = Some(2);
        assert_eq!(crate::ops::check(&wide), vec![]);
        assert_eq!(launch(&wide).grid.cluster(), 2);
        let mut both = i.clone();
        both.params.split_k = Some(2);
        has(&both, "give one of them");
        has(
            &mma_sync(Params {
                multicast: Some(2),
                ..Default::default()
            }),
            "needs engine wgmma",
        );
    }

    #[test]
    fn one_consumer_tiles() {
        // 64x64 split 2, 12 stages of 8 + 8 KiB: one consumer's staging buffer (64x64 bf16)
        // and partial tile (64x64 f32), the barriers of two; 256 threads.
        let mut i = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
        i.params.tile = Some([64, 64, TILE_K]);
        i.params.stages = Some(12);
        i.params.split_k = Some(2);
        assert_eq!(crate::ops::check(&i), vec![]);
        let l = launch(&i);
        assert_eq!(l.threads, 256);
        assert_eq!(
            l.shared_bytes,
            1024 + 12 * 16384 + 8192 + 16384 + 8 * (2 * 12 + 10)
        );
        assert_eq!(
            l.grid,
            GridRule::Persistent {
                tile_m: 64,
                tile_n: 64,
                ctas_per_sm: 1,
                cluster: 2
            }
        );
        // K-major A: two 32-row boxes per stage when split, one 64-row box when not; M-major
        // A one 64-row box.
        let p = Plan::new(&i);
        assert_eq!((p.a_box_outer, p.a_loads(), p.consumers()), (32, 2, 1));
        i.params.split_k = None;
        let p = Plan::new(&i);
        assert_eq!((p.a_box_outer, p.a_loads()), (64, 1));
        assert_eq!(tensor_maps(&i)[0].box_dims, vec![64, 64]);
        i.params.layout = Some(Layout::Tt);
        assert_eq!(Plan::new(&i).a_loads(), 1);
        assert!(runtime_requirements(&i)
            .iter()
            .any(|r| r.contains("ceil(M / 64)") && r.contains("block = (256, 1, 1)")));
        // 13 stages fit only with the partial tile in the staging region; 14 not at all.
        i.params.split_k = Some(2);
        i.params.layout = Some(Layout::Nn);
        i.params.stages = Some(13);
        assert!(Plan::new(&i).partial_in_staging);
        assert_eq!(crate::ops::check(&i), vec![]);
        i.params.stages = Some(14);
        assert!(crate::ops::check(&i)
            .iter()
            .any(|(f, m)| *f == Field::Stages && m.contains("shared memory")));
    }

    #[test]
    fn swap_ab_tiles() {
        // 16x128: wgmma's tile is 128 weight rows (two consumers) by 16 tokens; 12 stages of
        // 16 KiB of B beside 2 KiB of A, two staging buffers of 16 rows x 64 bf16 columns.
        let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
        i.params.tile = Some([16, 128, TILE_K]);
        i.params.stages = Some(12);
        assert_eq!(crate::ops::check(&i), vec![]);
        let p = Plan::new(&i);
        assert!(p.swap);
        assert_eq!((p.tile_m, p.tile_n, p.consumers()), (128, 16, 2));
        // nn: B (K x N, row-major) is wgmma's M-major A, A's rows its K-major B.
        assert_eq!((p.a_k_major, p.b_k_major), (false, true));
        assert_eq!((p.b_box_rows(), p.b_loads(), p.a_loads()), (16, 1, 2));
        let l = launch(&i);
        assert_eq!(l.threads, 384);
        assert_eq!(
            l.shared_bytes,
            1024 + 12 * (16384 + 2048) + 2 * 2048 + 8 * 30
        );
        // The grid rule speaks of D: 16-row, 128-column tiles.
        assert_eq!(
            l.grid,
            GridRule::Persistent {
                tile_m: 16,
                tile_n: 128,
                ctas_per_sm: 1,
                cluster: 1
            }
        );
        let dims = |m: &TensorMap| (m.name.clone(), m.dims.join(","), m.box_dims.clone());
        let maps: Vec<_> = tensor_maps(&i).iter().map(dims).collect();
        assert_eq!(
            maps,
            [
                ("a_map".into(), "k,m".into(), vec![64, 16]),
                ("b_map".into(), "n,k".into(), vec![64, 64]),
                ("d_map".into(), "n,m".into(), vec![64, 16]),
            ]
        );
        let promotion: Vec<_> = tensor_maps(&i).iter().map(|m| m.l2_promotion).collect();
        assert_eq!(
            promotion,
            [L2Promotion::B128, L2Promotion::B128, L2Promotion::B256]
        );
        // The ring's depth in use follows the grid (the bytes in flight it aims at); the
        // two-consumer tiles of 64 rows and more fill their whole ring.
        let budget = |i: &Instance| {
            let v: std::collections::HashMap<_, _> = template_values(i).into_iter().collect();
            (v["inflight_budget"].clone(), v["min_depth"].clone())
        };
        let wide = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        assert_eq!(budget(&i), (INFLIGHT_BUDGET_BYTES.into(), 6.into()));
        assert_eq!(budget(&wide).0, 0);
        assert_eq!(
            (p.ring_end(), Plan::new(&wide).ring_end()),
            ("depth", "STAGES")
        );
        // The kernel hands wgmma B's map and N first.
        let args = template_values(&i)
            .into_iter()
            .find(|(k, _)| *k == "sm90_args")
            .unwrap()
            .1;
        assert!(
            args.as_str()
                .unwrap()
                .starts_with("b_map, a_map, d_map, d_map, nullptr, n, m, k"),
            "{args}"
        );
        // nt: B stored N x K is wgmma's K-major A, one box of the tile's 128 rows; f32 output
        // stages 32-column boxes; a bias slot holds the tile's 128 columns of D.
        let mut t = i.clone();
        t.params.layout = Some(Layout::Nt);
        t.out_dtype = DType::F32;
        t.epilogue = vec![Epilogue::Bias, Epilogue::Relu];
        assert_eq!(crate::ops::check(&t), vec![]);
        let pt = Plan::new(&t);
        assert_eq!((pt.a_k_major, pt.a_box_outer, pt.a_loads()), (true, 128, 1));
        assert_eq!(pt.bias_slot_bytes(), 128 * 4);
        let maps: Vec<_> = tensor_maps(&t).iter().map(dims).collect();
        assert_eq!(maps[1], ("b_map".into(), "k,n".into(), vec![64, 128]));
        assert_eq!(maps[2], ("d_map".into(), "n,m".into(), vec![32, 16]));
        // No split: the template's K-less path selects outputs rather than zeroing the
        // accumulators that partial tiles would add up (it refuses SPLIT_K > 1 at compile time,
        // so the checks refuse it first, at the spec).
        let mut s = i.clone();
        s.params.tile = Some([16, 64, TILE_K]);
        s.params.layout = Some(Layout::Nt);
        s.params.split_k = Some(2);
        s.params.stages = Some(16);
        assert!(
            crate::ops::check(&s)
                .iter()
                .any(|(f, m)| *f == Field::SplitK && m.contains("swap-AB")),
            "{:?}",
            crate::ops::check(&s)
        );
        // A stored K x M cannot sit on wgmma's n; widths other than 64 and 128 are refused.
        let has = |i: &Instance, field: Field, needle: &str| {
            let p = crate::ops::check(i);
            assert!(
                p.iter().any(|(f, m)| *f == field && m.contains(needle)),
                "{needle:?} at {field:?} not in {p:?}"
            );
        };
        let mut tn = i.clone();
        tn.params.layout = Some(Layout::Tn);
        has(&tn, Field::Layout, "swap-AB");
        let mut wide = i.clone();
        wide.params.tile = Some([16, 256, TILE_K]);
        has(&wide, Field::Tile, "m 16 or 32");
    }

    #[test]
    fn tensor_maps_per_layout() {
        let dims = |m: &TensorMap| (m.dims.join(","), m.strides.join(","), m.box_dims.clone());
        for (layout, a, b) in [
            (
                Layout::Nn,
                ("k,m", "lda", vec![64, 128]),
                ("n,k", "ldb", vec![64, 64]),
            ),
            (
                Layout::Nt,
                ("k,m", "lda", vec![64, 128]),
                ("k,n", "ldb", vec![64, 64]),
            ),
            (
                Layout::Tn,
                ("m,k", "lda", vec![64, 64]),
                ("n,k", "ldb", vec![64, 64]),
            ),
            (
                Layout::Tt,
                ("m,k", "lda", vec![64, 64]),
                ("k,n", "ldb", vec![64, 64]),
            ),
        ] {
            let i = inst(DType::F16, DType::F32, 256, layout);
            let maps = tensor_maps(&i);
            let names: Vec<&str> = maps.iter().map(|m| m.name.as_str()).collect();
            assert_eq!(names, ["a_map", "b_map", "d_map"]);
            assert_eq!(
                dims(&maps[0]),
                (a.0.to_string(), a.1.to_string(), a.2),
                "{layout} A"
            );
            assert_eq!(
                dims(&maps[1]),
                (b.0.to_string(), b.1.to_string(), b.2),
                "{layout} B"
            );
            // D: f32 boxes are 32 columns (128 bytes) by one consumer's 64 rows.
            assert_eq!(
                dims(&maps[2]),
                ("n,m".to_string(), "ldd".to_string(), vec![32, 64])
            );
            assert_eq!(
                (maps[0].dtype, maps[1].dtype, maps[2].dtype),
                (DType::F16, DType::F16, DType::F32)
            );
            // Every box is one 128-byte swizzle span wide and at most 256 per dim.
            for m in &maps {
                assert_eq!(m.box_dims[0] * m.dtype.size(), 128, "{}", m.name);
                assert!(m.box_dims.iter().all(|&b| b <= 256));
                assert_eq!(m.swizzle, Swizzle::B128);
                assert_eq!(m.l2_promotion, L2Promotion::B256, "{}", m.name);
            }
        }
        // A bf16 output box is 64 columns.
        let i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
        assert_eq!(tensor_maps(&i)[2].box_dims, vec![64, 64]);
        // One consumer's 64 rows: the operands' L2 promotion is 128 bytes, D's stays 256.
        let mut skinny = i.clone();
        skinny.params.tile = Some([64, 192, TILE_K]);
        skinny.params.stages = Some(6);
        assert_eq!(crate::ops::check(&skinny), vec![]);
        let promotion: Vec<_> = tensor_maps(&skinny)
            .iter()
            .map(|m| m.l2_promotion)
            .collect();
        assert_eq!(
            promotion,
            [L2Promotion::B128, L2Promotion::B128, L2Promotion::B256]
        );
        // Rows off whole 128-byte lines: every two-consumer tile's operands drop to 128 bytes,
        // D keeps its own; tiles already at 128 (one consumer) keep theirs.
        let straddling = |i: &Instance| -> Vec<_> {
            tensor_maps(i)
                .iter()
                .map(|m| m.l2_promotion_straddling)
                .collect()
        };
        for tile_n in [128, 192, 256] {
            assert_eq!(
                straddling(&inst(DType::Bf16, DType::Bf16, tile_n, Layout::Nt)),
                [Some(L2Promotion::B128), Some(L2Promotion::B128), None],
                "128x{tile_n}"
            );
        }
        assert_eq!(straddling(&skinny), [None, None, None]);
    }

    #[test]
    fn rejects_what_the_engine_lacks() {
        let has = |i: &Instance, field: Field, needle: &str| {
            let p = crate::ops::check(i);
            assert!(
                p.iter().any(|(f, m)| *f == field && m.contains(needle)),
                "{needle:?} at {field:?} not in {p:?}"
            );
        };
        let mut f32_in = inst(DType::F32, DType::F32, 256, Layout::Nn);
        has(&f32_in, Field::Engine, "f16 or bf16 inputs");
        f32_in.params.tf32 = Some(true);
        has(&f32_in, Field::Tf32, "not to engine wgmma");
        let mut t = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        t.params.tile = Some([128, 256, 32]);
        has(&t, Field::Tile, "tile [m, n, 64] with m one of 64, 128");
        t.params.tile = Some([128, 176, 64]);
        has(&t, Field::Tile, "not [128, 176, 64]");
        t.params.tile = Some([192, 256, 64]);
        has(&t, Field::Tile, "not [192, 256, 64]");
        let mut w = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        w.params.warp = Some([64, 64]);
        has(&w, Field::Warp, "does not apply");
        let mut s = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
        s.params.stages = Some(1);
        has(&s, Field::Stages, "from 2 to 16");
        // Only sm_90a.
        let mut a = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
        a.archs = vec![Arch::Sm80, Arch::Sm90, Arch::Sm90a];
        let archs: Vec<Arch> = crate::ops::arch_problems(&a)
            .into_iter()
            .map(|(a, _)| a)
            .collect();
        assert_eq!(archs, [Arch::Sm80, Arch::Sm90]);
    }

    #[test]
    fn same_arguments_as_the_mma_sync_engine() {
        for epi in [
            vec![],
            vec![Epilogue::Bias, Epilogue::Gelu],
            vec![Epilogue::Scale, Epilogue::Bias, Epilogue::Residual],
        ] {
            let mut w = inst(DType::Bf16, DType::Bf16, 256, Layout::Nt);
            w.epilogue = epi.clone();
            let mut m = w.clone();
            m.params = Params {
                layout: Some(Layout::Nt),
                ..Default::default()
            };
            crate::ops::apply_defaults(Op::Gemm, &mut m.params);
            assert_eq!(crate::ops::signature(&w), crate::ops::signature(&m));
        }
    }

    #[test]
    fn narrow_tile_boxes_and_maps() {
        let map =
            |i: &Instance, name: &str| tensor_maps(i).into_iter().find(|m| m.name == name).unwrap();
        // K-major B (nt): one box of the tile's 96 rows in 128-byte swizzle; 16-bit D in boxes
        // of 32 columns (64-byte rows, 64-byte swizzle), one round through the staging buffer.
        let nt = inst(DType::Bf16, DType::Bf16, 96, Layout::Nt);
        let p = Plan::new(&nt);
        assert!(p.narrow());
        assert_eq!(
            (p.b_box_rows(), p.b_loads(), p.b_stage_bytes()),
            (96, 1, 12288)
        );
        assert_eq!(
            (p.d_box_cols, p.epi_rounds, p.epi_cols, p.d_span()),
            (32, 1, 96, 64)
        );
        let b = map(&nt, "b_map");
        assert_eq!(
            (b.box_dims.to_vec(), b.swizzle),
            (vec![64, 96], Swizzle::B128)
        );
        let d = map(&nt, "d_map");
        assert_eq!(
            (d.box_dims.to_vec(), d.swizzle),
            (vec![32, 64], Swizzle::B64)
        );
        // N-major B (nn): three boxes of 32 columns by 64 k rows, 64-byte swizzle.
        let nn = inst(DType::F16, DType::F16, 96, Layout::Nn);
        let p = Plan::new(&nn);
        assert!(!p.b_tail());
        assert_eq!(
            (p.b_box_rows(), p.b_loads(), p.b_swizzle()),
            (32, 3, Swizzle::B64)
        );
        let b = map(&nn, "b_map");
        assert_eq!(
            (b.box_dims.to_vec(), b.swizzle),
            (vec![32, 64], Swizzle::B64)
        );
        assert_eq!(tensor_maps(&nn).len(), 3);
        // f32 D: 32 columns are 128 bytes, so the usual swizzle.
        let f32_out = inst(DType::Bf16, DType::F32, 96, Layout::Nt);
        let d = map(&f32_out, "d_map");
        assert_eq!(
            (d.box_dims.to_vec(), d.swizzle),
            (vec![32, 64], Swizzle::B128)
        );
        // The other tiles keep their boxes (their binaries must not change).
        let wide = inst(DType::Bf16, DType::Bf16, 192, Layout::Nn);
        let p = Plan::new(&wide);
        assert!(!p.narrow() && !p.b_tail());
        assert_eq!(
            (p.b_box_rows(), p.b_swizzle(), p.d_swizzle()),
            (64, Swizzle::B128, Swizzle::B128)
        );
        assert_eq!(map(&wide, "b_map").box_dims.to_vec(), vec![64, 64]);
        assert_eq!(tensor_maps(&wide).len(), 3);
        // 128x96 with 6 stages fits beside its staging and bias slots.
        let mut s6 = inst(DType::Bf16, DType::Bf16, 96, Layout::Nt);
        s6.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
        s6.params.stages = Some(6);
        assert!(check(&s6).is_empty());
        assert!(Plan::new(&s6).shared_bytes() <= Arch::Sm90a.max_shared_per_block());
    }

    #[test]
    fn narrow_tile_refuses_other_schedules() {
        for (tile_m, pingpong, split_k, multicast) in [
            (256, None, None, None),
            (128, Some(true), None, None),
            (128, None, Some(2), None),
            (64, None, None, Some(2)),
        ] {
            let mut i = inst(DType::Bf16, DType::Bf16, 96, Layout::Nt);
            i.params.tile = Some([tile_m, 96, TILE_K]);
            i.params.pingpong = pingpong;
            i.params.split_k = split_k;
            i.params.multicast = multicast;
            let problems = check(&i);
            assert!(
                problems.iter().any(|(f, m)| *f == Field::Tile
                    && m.contains("tile n 96 (not a multiple of 64) takes tile m 64 or 128")),
                "{problems:?}"
            );
        }
        let mut ok = inst(DType::Bf16, DType::Bf16, 96, Layout::Nn);
        ok.params.tile = Some([64, 96, TILE_K]);
        assert!(check(&ok).is_empty());
        let mut wide_pingpong = inst(DType::Bf16, DType::Bf16, 224, Layout::Nn);
        wide_pingpong.params.pingpong = Some(true);
        assert!(check(&wide_pingpong)
            .iter()
            .any(|(f, m)| *f == Field::Tile && m.contains("tile n 224 (not a multiple of 64)")));
        // 160 and 224 were verified with 128 rows only.
        let mut short = inst(DType::Bf16, DType::Bf16, 160, Layout::Nt);
        short.params.tile = Some([64, 160, TILE_K]);
        assert!(check(&short).iter().any(|(f, m)| *f == Field::Tile
            && m.contains("tile n 160 (not a multiple of 64) takes tile m 128 ")));
    }

    #[test]
    fn wider_narrow_tiles_take_a_tail_or_32_column_boxes() {
        let map =
            |i: &Instance, name: &str| tensor_maps(i).into_iter().find(|m| m.name == name).unwrap();
        for (tile_n, stages) in [(160, 5), (224, 3)] {
            let mut nn = inst(DType::Bf16, DType::Bf16, tile_n, Layout::Nn);
            nn.params.stages = Some(stages);
            nn.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
            let p = Plan::new(&nn);
            assert!(p.narrow());
            let names: Vec<String> = tensor_maps(&nn).into_iter().map(|m| m.name).collect();
            if tile_n == 160 {
                // N-major B: two boxes of 64 columns in 128-byte swizzle, then the last 32
                // columns through the tail map (64-byte swizzle), passed after B's.
                assert!(p.b_tail());
                assert_eq!(
                    (
                        p.b_box_rows(),
                        p.b_loads(),
                        p.b_swizzle(),
                        p.b_stage_bytes()
                    ),
                    (64, 2, Swizzle::B128, 160 * 128)
                );
                assert_eq!(map(&nn, "b_map").box_dims.to_vec(), vec![64, 64]);
                let tail = map(&nn, "b_tail_map");
                assert_eq!(
                    (tail.box_dims.to_vec(), tail.swizzle, tail.tensor.as_str()),
                    (vec![32, 64], Swizzle::B64, "b")
                );
                assert_eq!(names, ["a_map", "b_map", "b_tail_map", "d_map"]);
            } else {
                // N-major B: tile_n / 32 boxes of 32 columns by 64 k rows, 64-byte swizzle.
                assert!(!p.b_tail());
                assert_eq!(
                    (p.b_box_rows(), p.b_loads(), p.b_swizzle()),
                    (32, tile_n / 32, Swizzle::B64)
                );
                assert_eq!(map(&nn, "b_map").box_dims.to_vec(), vec![32, 64]);
                assert_eq!(names, ["a_map", "b_map", "d_map"]);
            }
            // 16-bit D: one round of tile_n / 32 boxes of 32 columns.
            assert_eq!(
                (p.d_box_cols, p.epi_rounds, p.epi_cols, p.d_swizzle()),
                (32, 1, tile_n, Swizzle::B64)
            );
            // K-major B: one box of all the tile's rows.
            let nt = inst(DType::Bf16, DType::Bf16, tile_n, Layout::Nt);
            let p = Plan::new(&nt);
            assert_eq!((p.b_box_rows(), p.b_loads()), (tile_n, 1));
            assert_eq!(map(&nt, "b_map").box_dims.to_vec(), vec![64, tile_n]);
            // The deepest ring that fits.
            assert!(check(&nn).is_empty(), "{:?}", check(&nn));
            assert!(Plan::new(&nn).shared_bytes() <= Arch::Sm90a.max_shared_per_block());
            nn.params.stages = Some(stages + 1);
            assert!(Plan::new(&nn).shared_bytes() > Arch::Sm90a.max_shared_per_block());
        }
        // Widths that are not multiples of 32 stay refused.
        let odd = inst(DType::Bf16, DType::Bf16, 144, Layout::Nt);
        assert!(check(&odd).iter().any(|(f, _)| *f == Field::Tile));
    }
}
