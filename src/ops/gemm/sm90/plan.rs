//! The plan of one wgmma GEMM instance: its tile as wgmma sees it (swapped or not), the TMA
//! boxes of each operand, the epilogue's rounds and the shared-memory layout, all derived from
//! the instance's configuration.

use crate::launch::{L2Promotion, Swizzle};
use crate::spec::model::{Arch, Epilogue, Instance, Layout};

use super::{
    stages, ALIGN_SLACK, B_TAIL_WIDTHS, CONSUMER_ROWS, INFLIGHT_BUDGET_BYTES, NARROW_BOX_COLS,
    SKINNY_A_BOX_ROWS, SPAN, STAGING_BYTES, SWAP_TILE_MS, SWAP_TILE_NS, TILE_K, TILE_M, TILE_MS,
};

/// Everything derived from an instance's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// Swap-AB: `tile_m`, `tile_n` and the operand fields below are wgmma's (its rows are D's
    /// columns); `d_tile()` is D's.
    pub(super) swap: bool,
    /// wgmma's tile: rows (64 per consumer warpgroup) and columns (its n).
    pub(super) tile_m: u32,
    pub(super) tile_n: u32,
    pub(super) stages: u32,
    /// wgmma's A operand k contiguous ("K-major"); else M-major (transposed). Without a swap
    /// that is A row-major (nn, nt); with one, B stored N×K (nt).
    pub(super) a_k_major: bool,
    /// wgmma's B operand K-major: B stored N×K (nt, tt), or with a swap A row-major (always).
    pub(super) b_k_major: bool,
    pub(super) in_elem: u32,
    pub(super) out_elem: u32,
    /// Outer size of a TMA box of wgmma's A: its rows when K-major, 64 k when M-major.
    pub(super) a_box_outer: u32,
    /// Output columns per TMA store box, columns staged per round, rounds per tile.
    pub(super) d_box_cols: u32,
    pub(super) epi_cols: u32,
    pub(super) epi_rounds: u32,
    pub(super) has_bias: bool,
    /// Blocks per cluster, each summing a share of K (1: no split).
    pub(super) split_k: u32,
    /// Blocks of a cluster on tiles side by side along N that share A's rows (TMA multicast), 1
    /// for none.
    pub(super) multicast: u32,
    /// Split-K: the partial tiles live where the staging buffers are. Ranks other than 0
    /// never run the epilogue and rank 0 never writes a partial tile, so one region serves
    /// both. Used where separate buffers would not fit (wide tiles: 128×192 keeps 3 stages);
    /// where they fit, the separate layout the split instances were verified with on the
    /// H200 (2026-12-01) stays.
    pub(super) partial_in_staging: bool,
    /// Ping-pong: the two consumer warpgroups take alternate tiles, each all of its tile's
    /// rows, so one's epilogue runs while the other's wgmmas keep the tensor cores busy
    /// (cooperative, the default: both take 64 rows of every tile and finish together).
    pub(super) pingpong: bool,
}

/// A narrow tile: wgmma's n a multiple of [`NARROW_BOX_COLS`] columns and not of 64, no swap.
pub(super) fn is_narrow(swap: bool, tile_n: u32) -> bool {
    !swap && tile_n.is_multiple_of(NARROW_BOX_COLS) && !tile_n.is_multiple_of(64)
}

/// The tile heights a narrow width was verified with on the GPU.
pub(super) fn narrow_heights(tile_n: u32) -> &'static [u32] {
    if tile_n == 96 {
        &[64, 128]
    } else {
        &[128]
    }
}

/// Consumer warpgroups of a tile of `tile_m` wgmma rows: one per 64 rows, at most two, or
/// with ping-pong two, each on tiles of its own. (At least one: `check` asks this of tiles it
/// is about to refuse, and divides by it.)
pub(super) fn consumers(tile_m: u32, pingpong: bool) -> u32 {
    if pingpong {
        2
    } else {
        (tile_m / CONSUMER_ROWS).clamp(1, 2)
    }
}

/// The 64-row wgmma slices a consumer computes of each of its tiles (each with its own
/// accumulators, staged one after the other): one, two of a 256-row tile, or with ping-pong
/// all of the tile's.
pub(super) fn consumer_slices(tile_m: u32, pingpong: bool) -> u32 {
    if pingpong {
        tile_m / CONSUMER_ROWS
    } else {
        (tile_m / CONSUMER_ROWS / consumers(tile_m, pingpong)).max(1)
    }
}

impl Plan {
    pub(super) fn new(inst: &Instance) -> Plan {
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
    pub(super) fn a_loads(&self) -> u32 {
        if self.a_k_major {
            self.tile_m / self.a_box_outer
        } else {
            self.tile_m / 64
        }
    }
    pub(super) fn narrow(&self) -> bool {
        is_narrow(self.swap, self.tile_n)
    }
    /// Rows of a box of wgmma's B through `b_map` (the tile's columns, at most 64 a box; a
    /// narrow tile's K-major B in one box, its N-major B in boxes of 32 columns, or of 64 with a
    /// tail) and such boxes per stage. Every box holds `b_box_rows` × 128 bytes.
    pub(super) fn b_box_rows(&self) -> u32 {
        match (self.narrow(), self.b_k_major) {
            (true, true) => self.tile_n,
            (true, false) if self.b_narrow_boxes() => NARROW_BOX_COLS,
            _ => self.tile_n.min(64),
        }
    }
    /// The swizzle of B's map and of wgmma's B descriptor: rows of 64 bytes (32 columns) for a
    /// narrow tile's N-major B in boxes of 32 columns, else 128.
    pub(super) fn b_swizzle(&self) -> Swizzle {
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
    pub(super) fn b_tail(&self) -> bool {
        self.narrow() && !self.b_k_major && B_TAIL_WIDTHS.contains(&self.tile_n)
    }
    /// A narrow tile's N-major B without a tail: all of it in boxes of 32 columns.
    pub(super) fn b_narrow_boxes(&self) -> bool {
        self.narrow() && !self.b_k_major && !self.b_tail()
    }
    /// Bytes of a row of D's (and C's) box in the staging buffer, and the maps' swizzle: 64
    /// for a narrow tile's 16-bit output, else 128.
    pub(super) fn d_span(&self) -> u32 {
        self.d_box_cols * self.out_elem
    }
    pub(super) fn d_swizzle(&self) -> Swizzle {
        if self.d_span() == 64 {
            Swizzle::B64
        } else {
            Swizzle::B128
        }
    }
    /// Boxes per stage through `b_map` (the tail box comes besides).
    pub(super) fn b_loads(&self) -> u32 {
        self.tile_n / self.b_box_rows()
    }
    /// D's tile (rows, columns): wgmma's, transposed with a swap.
    pub(super) fn d_tile(&self) -> [u32; 2] {
        if self.swap {
            [self.tile_n, self.tile_m]
        } else {
            [self.tile_m, self.tile_n]
        }
    }
    pub(super) fn consumers(&self) -> u32 {
        consumers(self.tile_m, self.pingpong)
    }
    /// Whether a consumer issues its residual C tile's load halfway through the tile's k loop
    /// rather than at its start. At the start the load first waits for the last tile's stores
    /// to read the staging buffer it lands in, which delays the first wgmma; halfway those
    /// reads are long done. Two-consumer tiles of 128 rows measured 1-4 % faster that way on the H200;
    /// the swap-AB and 64-row tiles, whose k loops are short enough that C's DRAM latency then
    /// shows after the last wgmma, measured up to 6 % slower and keep the load at the start
    /// (bench/hopper-gemm/NOTES.md, 2026-12-04).
    pub(super) fn c_mid_loop(&self) -> bool {
        !self.swap && self.consumers() == 2 && self.split_k == 1 && !self.pingpong
    }
    /// L2 promotion of the A and B maps. Skinny tiles (swap-AB, and one consumer's 64 rows)
    /// stream their weights from DRAM in boxes of 128-byte rows: promoting each L2 miss to 256
    /// bytes measured up to 4 % slower than 128 on the H200 at decode and M = 64 shapes, and
    /// clearly faster nowhere; the two-consumer tiles read alike with either and keep 256
    /// (bench/hopper-gemm/NOTES.md, 2026-12-03).
    pub(super) fn operand_l2_promotion(&self) -> L2Promotion {
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
    pub(super) fn operand_l2_promotion_straddling(&self) -> Option<L2Promotion> {
        (self.operand_l2_promotion() == L2Promotion::B256).then_some(L2Promotion::B128)
    }
    /// Bytes of TMA loads that the whole grid keeps in flight, for tiles that cap it (0: every
    /// block fills its ring). Swap-AB tiles stream weights that nothing else reads from DRAM,
    /// and past about this much in flight over the grid the H200's DRAM delivered less: 16×128
    /// tiles at 16×11008×4096 (86 blocks) ran 25.7 µs with 7 of their 12 stages in use and 28.1
    /// with all 12, while 43 blocks (N = 5504) ran fastest with all 12
    /// (bench/hopper-gemm/NOTES.md, 2026-12-03). So the ring's depth in use follows the grid.
    pub(super) fn inflight_budget(&self) -> u32 {
        if self.swap {
            INFLIGHT_BUDGET_BYTES
        } else {
            0
        }
    }
    /// The C++ name of the ring positions in use: the kernel's `depth` where the budget caps it.
    pub(super) fn ring_end(&self) -> &'static str {
        if self.inflight_budget() > 0 {
            "depth"
        } else {
            "STAGES"
        }
    }
    pub(super) fn units(&self) -> u32 {
        consumer_slices(self.tile_m, self.pingpong)
    }
    /// The stage's 64-row slices of A that a consumer's first and second accumulators take
    /// (C++ expressions of `cw`): its own, its own pair, or with ping-pong the tile's first two.
    pub(super) fn a_slices(&self) -> (&'static str, &'static str) {
        match (self.pingpong, self.units()) {
            (true, _) => ("0", "1"),
            (false, 1) => ("cw", "cw"),
            (false, _) => ("(2 * cw)", "(2 * cw + 1)"),
        }
    }
    /// One producer warpgroup and the consumers.
    pub(super) fn threads(&self) -> u32 {
        128 * (1 + self.consumers())
    }
    pub(super) fn a_stage_bytes(&self) -> u32 {
        self.tile_m * TILE_K * self.in_elem
    }
    pub(super) fn b_stage_bytes(&self) -> u32 {
        self.tile_n * TILE_K * self.in_elem
    }
    /// Rows of D a consumer stages: its 64, or with a swap the tile's few.
    pub(super) fn staging_rows(&self) -> u32 {
        if self.swap {
            self.tile_n
        } else {
            CONSUMER_ROWS
        }
    }
    /// One consumer's output staging buffer (64 rows; a ping-pong consumer stages its
    /// slices one after the other).
    pub(super) fn staging_bytes(&self) -> u32 {
        self.staging_rows() * self.epi_cols * self.out_elem
    }
    /// Two slots of a tile's bias columns (D's: wgmma's rows with a swap) as f32 (bias
    /// instances only).
    pub(super) fn bias_slot_bytes(&self) -> u32 {
        if self.has_bias {
            self.d_tile()[1] * 4
        } else {
            0
        }
    }
    pub(super) fn staging_offset(&self) -> u32 {
        self.stages * (self.a_stage_bytes() + self.b_stage_bytes())
    }
    /// The staging buffers, or with `partial_in_staging` the region they share with the
    /// partial tiles.
    pub(super) fn staging_region_bytes(&self) -> u32 {
        let per_consumer = if self.partial_in_staging {
            self.staging_bytes().max(self.partial_bytes())
        } else {
            self.staging_bytes()
        };
        self.consumers() * per_consumer
    }
    pub(super) fn bias_offset(&self) -> u32 {
        self.staging_offset() + self.staging_region_bytes()
    }
    /// Split-K: one consumer's partial tile, 64 rows × tile_n f32 (none without a split).
    pub(super) fn partial_bytes(&self) -> u32 {
        if self.split_k > 1 {
            CONSUMER_ROWS * self.tile_n * 4
        } else {
            0
        }
    }
    pub(super) fn bias_end(&self) -> u32 {
        self.bias_offset() + 2 * self.bias_slot_bytes()
    }
    pub(super) fn partial_offset(&self) -> u32 {
        if self.partial_in_staging {
            self.staging_offset()
        } else {
            self.bias_end()
        }
    }
    pub(super) fn barrier_offset(&self) -> u32 {
        if self.partial_in_staging {
            self.bias_end()
        } else {
            self.bias_end() + self.consumers() * self.partial_bytes()
        }
    }
    /// Blocks per cluster: a split's or a multicast's (1: no clusters).
    pub(super) fn cluster(&self) -> u32 {
        self.split_k.max(self.multicast)
    }
    pub(super) fn barriers(&self) -> u32 {
        2 * self.stages + 6 + if self.split_k > 1 { 4 } else { 0 }
    }
    /// Dynamic shared memory: alignment slack, the stages (A then B), a staging buffer per
    /// consumer, two bias slots, a partial tile per consumer (split-K; or in the staging
    /// region, see `partial_in_staging`), then mbarriers (as many for one consumer as for two): a full and an empty one
    /// per stage, one per consumer (its staged C), a full and an empty one per bias slot, and
    /// with split-K a full and an empty one per consumer's partial tile.
    pub(super) fn shared_bytes(&self) -> u32 {
        ALIGN_SLACK + self.barrier_offset() + 8 * self.barriers()
    }
}
