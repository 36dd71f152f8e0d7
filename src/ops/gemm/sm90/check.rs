//! What a wgmma GEMM spec may ask for: the checks that refuse, naming the field, each
//! configuration this kernel does not implement.

use crate::launch::MAX_CLUSTER;
use crate::ops::Field;
use crate::spec::model::{DType, Epilogue, Instance, Layout};

use super::plan::{consumer_slices, is_narrow, narrow_heights};
use super::{
    CONSUMER_ROWS, MAX_ACC_GELU_ERF, MAX_CONSUMER_ACC_COLS, MAX_STAGES, SWAP_TILE_MS, SWAP_TILE_NS,
    TILE_K, TILE_M, TILE_MS, TILE_NS,
};

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
