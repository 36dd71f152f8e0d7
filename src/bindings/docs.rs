//! Doc comments of the generated methods: what each op computes, what a call must pass, and
//! how a typed method picks among its instances.

use crate::launch::GridRule;
use crate::manifest::InstanceEntry;
use crate::spec::model::Op;

use super::group::{Family, Group};

/// What the instance computes, as one sentence.
pub fn what(inst: &InstanceEntry) -> String {
    (crate::ops::info(inst.op).what)(&inst.kernel)
}

/// What a call must pass, beyond the types.
pub fn requirements(inst: &InstanceEntry) -> String {
    let pointers: Vec<String> = inst
        .args
        .iter()
        .filter(|a| a.kind != crate::launch::ArgKind::Scalar)
        .map(|a| format!("`{}`", a.name))
        .collect();
    match inst.op.family() {
        Family::Elements => {
            let full: Vec<&str> = pointers.iter().map(String::as_str).filter(|p| *p != "`bias`").collect();
            let mut s = format!(
                "{} must hold at least `n` elements and start 16-byte aligned (a view at an offset that is not a multiple of 16 bytes is refused).",
                full.join(", ")
            );
            if pointers.iter().any(|p| p == "`bias`") {
                s += " `cols` ≥ 1 must divide `n`, and `bias` hold at least `cols` elements.";
            }
            s
        }
        Family::Rows => {
            let per_col: Vec<&str> =
                pointers.iter().map(String::as_str).filter(|p| *p == "`weight`" || *p == "`bias`").collect();
            let full: Vec<&str> =
                pointers.iter().map(String::as_str).filter(|p| !per_col.contains(p)).collect();
            let full = match full.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => full.concat(),
            };
            let outputs: Vec<String> =
                inst.args.iter().filter(|a| a.kind == crate::launch::ArgKind::Out).map(|a| format!("`{}`", a.name)).collect();
            format!(
                "{full} must hold at least `rows * cols` elements{}; `cols` must be below 2^31 - 2^21. When `cols` is a multiple of {} (one 16-byte vector), every pointer must start 16-byte aligned.{}",
                if per_col.is_empty() { String::new() } else { format!(" and {} at least `cols`", per_col.join(" and ")) },
                inst.dtype.per_16_bytes(),
                if outputs.len() > 1 { format!(" {} must not overlap each other or any input.", outputs.join(" and ")) } else { String::new() }
            )
        }
        Family::Gemm if !inst.tensor_maps.is_empty() => format!(
            "Runs only on sm_90 (compute capability 9.0, H100/H200) with a driver for CUDA 12.0 or newer. `m` ≤ 2^31 - 1, `n` ≤ 2^31 - 1 a multiple of {out} (16 bytes of output: the TMA stores write whole 16-byte chunks), 1 ≤ `k` ≤ 2^31 - 1 (edges are zero-filled by the tensor maps; `k` = 0 or a ragged `n` is refused and the family's method runs another instance). Every matrix holds `(rows - 1) * ld + row length` elements for its leading dimension (≥ its row length) and starts 16-byte aligned; `lda`/`ldb` are multiples of {} and `ldc`/`ldd` of {} (16 bytes of elements){}.",
            inst.dtype.per_16_bytes(),
            inst.out_dtype.per_16_bytes(),
            if inst.args.iter().any(|a| a.name == "bias") { "; `bias` holds `n` elements" } else { "" },
            out = inst.out_dtype.per_16_bytes(),
        ),
        Family::Gemm => format!(
            "`m`, `n`, `k` ≤ 2^31 - 1 (any values: edges are masked; `k` = 0 writes `epilogue(0)`). Every matrix holds `(rows - 1) * ld + row length` elements for its leading dimension (≥ its row length) and starts 16-byte aligned; `lda`/`ldb` are multiples of {} and `ldc`/`ldd` of {} (16 bytes of elements){}.",
            inst.dtype.per_16_bytes(),
            inst.out_dtype.per_16_bytes(),
            if inst.args.iter().any(|a| a.name == "bias") { "; `bias` holds `n` elements" } else { "" }
        ),
        Family::Attention => super::attention::requirements(),
    }
}

/// One instance's niche, for dispatch lists.
pub fn niche(inst: &InstanceEntry) -> String {
    if inst.op == Op::Attention {
        return super::attention::niche(inst);
    }
    let p = &inst.params;
    let mut how = Vec::new();
    if let Some(v) = p.variant {
        how.push(v.as_str().to_string());
    }
    if let (Some(st), None) = (p.stages, p.tile) {
        how.push(format!("ring of {st} rows"));
    }
    if let Some([m, n, k]) = p.tile {
        how.push(format!("tile {m}x{n}x{k}"));
    }
    if let Some(b) = p.block {
        how.push(format!("block {b}"));
    }
    if let Some(i) = p.items {
        how.push(format!("items {i}"));
    }
    match &inst.launch.grid {
        GridRule::Rows {
            max_cols: Some(c), ..
        } => how.push(format!("cols ≤ {c}")),
        GridRule::Rows { max_cols: None, .. } => how.push("any cols".into()),
        GridRule::Elements { elems_per_block } => {
            how.push(format!("{elems_per_block} elements per block"))
        }
        GridRule::Tiles { .. } => {}
        GridRule::QueryTiles { tile_q } => how.push(format!("{tile_q} query rows per block")),
        GridRule::Persistent {
            ctas_per_sm,
            cluster,
            ..
        } => {
            how.push(format!(
                "wgmma fed by TMA, persistent grid of {ctas_per_sm} block{} per SM; runs only on sm_90",
                if *ctas_per_sm == 1 { "" } else { "s" }
            ));
            if *cluster > 1 {
                how.push(format!(
                    "clusters of {cluster} blocks that split K and sum their partial tiles"
                ));
            }
        }
    }
    how.join(", ")
}

/// How a group's method picks its instance.
pub fn dispatch(g: &Group, m: &crate::manifest::Manifest) -> Vec<String> {
    if g.members.len() == 1 {
        let inst = &m.instances[g.members[0]];
        return vec![format!("Runs [`Self::{}`] ({}).", inst.name, niche(inst))];
    }
    let rule = match g.family {
        Family::Elements => "Picks the instance with the most elements per block that still gives every SM two blocks, else the one with the fewest:",
        Family::Rows => "Picks the one-pass instance with the smallest row limit that fits `cols`, else one that takes any length:",
        Family::Gemm
            if g
                .members
                .iter()
                .any(|&i| !m.instances[i].tensor_maps.is_empty()) =>
        {
            "Tries only instances that run on the device: on sm_90 the tensor-map (wgmma) instances first (but a 16-row mma.sync tile before them for outputs of at most 16 rows), elsewhere only the others; within each, the largest tile that still gives every SM a tile first, then smaller ones; runs the first whose requirements the call meets:"
        }
        Family::Attention => "Picks an instance with the call's mask that runs on the device: the largest query tile that `seq_q` fills, else the smallest:",
        Family::Gemm => "Tries the largest tile that still gives every SM a tile first, then smaller ones, and runs the first whose requirements the call meets:",
    };
    let mut lines = vec![rule.to_string()];
    for &i in &g.members {
        let inst = &m.instances[i];
        lines.push(format!("- [`Self::{}`]: {}", inst.name, niche(inst)));
    }
    let members: Vec<&crate::manifest::InstanceEntry> =
        g.members.iter().map(|&i| &m.instances[i]).collect();
    let tuned = crate::tuning::dispatch_of(&m.tuning, &g.method, &members);
    if !tuned.is_empty() {
        let mut devices: Vec<&str> = tuned.iter().map(|d| d.device).collect();
        devices.dedup();
        lines.push(String::new());
        lines.push(format!(
            "Before these rules, a tuning table measured on {} picks the fastest instance at the nearest of {} measured shapes (by name, else by compute capability; see `tilegen_runtime::tuning`).",
            devices.join(", "),
            tuned.len()
        ));
    }
    lines
}
