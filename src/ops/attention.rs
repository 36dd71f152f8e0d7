//! Attention, forward: O = softmax(scale·Q·Kᵀ + mask)·V per (batch, head), f16/bf16 in and out,
//! f32 scores, softmax and accumulation, with the row log-sum-exp as an optional f32 output.
//! FlashAttention-2 on mma.sync.m16n8k16 (sm_80+): a `tile_q`-row Q tile per block, split over
//! the warps in 16-row slices (one or two per warp), `tile_kv`-key K/V tiles through a
//! `stages`-deep cp.async ring, online softmax in exp2, P kept in registers for P·V.
//!
//! Q is [batch, seq_q, heads_q, head_dim], K and V [batch, seq_kv, heads_kv, head_dim], O like Q,
//! each with its own strides (batch, seq, head; the last dimension contiguous). Causal masks
//! are bottom-right aligned (row r sees keys 0..=r + seq_kv - seq_q). heads_q is a multiple of
//! heads_kv (GQA; MQA with heads_kv = 1). Variable-length batches pass `cu_seqlens_q/kv` (int32,
//! batch + 1 offsets into a packed [total, heads, head_dim] tensor, as flash-attn).
//!
//! Shapes and numbers measured on the H200: bench/flash-attn/NOTES.md.

use super::{Arg, ArgKind, Field, GridRule, Launch, OpInfo};
use crate::spec::model::{Arch, DType, Instance, Params};

pub static ATTENTION: OpInfo = OpInfo {
    template: "attention.cu",
    dtypes: &[DType::F16, DType::Bf16],
    fields: &[
        Field::HeadDim,
        Field::Causal,
        Field::TileQ,
        Field::TileKv,
        Field::Block,
        Field::Stages,
    ],
    epilogues: &[],
};

pub const HEAD_DIMS: &[u32] = &[64, 128];
const DEFAULT_THREADS: u32 = 128;
const DEFAULT_STAGES: u32 = 2;
/// Accumulator, score and Q-fragment registers per thread above which ptxas spills (measured:
/// 160 builds clean with two slices per warp; head_dim 128 with tile_kv 128 spills).
const MAX_FRAGMENT_REGS: u32 = 160;

/// Tiles of the fastest instances on the H200 (mma.sync), per head_dim and mask.
pub fn default_tiles(head_dim: u32, causal: bool) -> (u32, u32) {
    match (head_dim, causal) {
        (128, false) => (128, 32),
        (128, true) => (64, 64),
        _ => (128, 64),
    }
}

/// head_dim has no default (it is the problem's, not a tuning choice); the rest do.
pub fn defaults(p: &mut Params) {
    let causal = *p.causal.get_or_insert(false);
    if let Some(d) = p.head_dim {
        let (tq, tkv) = default_tiles(d, causal);
        p.tile_q.get_or_insert(tq);
        p.tile_kv.get_or_insert(tkv);
    }
    p.block.get_or_insert(DEFAULT_THREADS);
    p.stages.get_or_insert(DEFAULT_STAGES);
}

/// Everything the template and the launch derive from the parameters, in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub head_dim: u32,
    pub causal: bool,
    pub tile_q: u32,
    pub tile_kv: u32,
    pub threads: u32,
    pub warps: u32,
    pub stages: u32,
}

impl Plan {
    pub fn new(p: &Params) -> Plan {
        let head_dim = p.head_dim.unwrap_or(128);
        let causal = p.causal.unwrap_or(false);
        let (tq, tkv) = default_tiles(head_dim, causal);
        let threads = p.block.unwrap_or(DEFAULT_THREADS);
        Plan {
            head_dim,
            causal,
            tile_q: p.tile_q.unwrap_or(tq),
            tile_kv: p.tile_kv.unwrap_or(tkv),
            threads,
            warps: threads / 32,
            stages: p.stages.unwrap_or(DEFAULT_STAGES),
        }
    }
    /// 16-row query slices per warp.
    pub fn slices(&self) -> u32 {
        self.tile_q / (16 * self.warps.max(1))
    }
    /// Bytes of one shared-memory row (head_dim 16-bit elements).
    fn row_bytes(&self) -> u32 {
        self.head_dim * 2
    }
    /// Q tile plus `stages` K and V tiles.
    pub fn shared_bytes(&self) -> u32 {
        (self.tile_q + self.stages * 2 * self.tile_kv) * self.row_bytes()
    }
    /// O accumulators + S scores + Q fragments (kept in registers with one slice per warp).
    pub fn fragment_regs(&self) -> u32 {
        let s = self.slices();
        let q = if s == 1 { self.head_dim / 4 } else { 0 };
        s * self.head_dim / 2 + s * self.tile_kv / 2 + q
    }
    pub fn problems(&self) -> Vec<(Field, String)> {
        let mut out = Vec::new();
        if !HEAD_DIMS.contains(&self.head_dim) {
            out.push((
                Field::HeadDim,
                format!("head_dim must be 64 or 128, not {}", self.head_dim),
            ));
            return out;
        }
        if !super::is_pow2_in(self.threads, 64, 256) {
            out.push((
                Field::Block,
                format!(
                    "block (threads) must be 64, 128 or 256 for attention, not {}",
                    self.threads
                ),
            ));
        }
        if !(2..=4).contains(&self.stages) {
            out.push((
                Field::Stages,
                format!("stages must be from 2 to 4, not {}", self.stages),
            ));
        }
        if !super::is_pow2_in(self.tile_kv, 16, 128) {
            out.push((
                Field::TileKv,
                format!(
                    "tile_kv must be a power of two from 16 to 128, not {}",
                    self.tile_kv
                ),
            ));
        }
        if !out.is_empty() {
            return out;
        }
        // Warps split the Q tile into 16-row slices, one or two per warp.
        if !self.tile_q.is_multiple_of(16 * self.warps) || !(1..=2).contains(&self.slices()) {
            out.push((
                Field::TileQ,
                format!(
                    "tile_q must be 16 or 32 rows per warp ({} or {} with {} threads), not {}",
                    16 * self.warps,
                    32 * self.warps,
                    self.threads,
                    self.tile_q
                ),
            ));
            return out;
        }
        // Each pass of 16-byte copies covers threads / (head_dim / 8) whole rows.
        let rows_per_pass = self.threads / (self.head_dim / 8);
        if !self.tile_kv.is_multiple_of(rows_per_pass) {
            out.push((
                Field::TileKv,
                format!(
                    "tile_kv must be a multiple of {rows_per_pass} (rows one pass of {} threads copies), not {}",
                    self.threads, self.tile_kv
                ),
            ));
        }
        let regs = self.fragment_regs();
        if regs > MAX_FRAGMENT_REGS || (self.head_dim == 128 && self.tile_kv > 64) {
            out.push((
                Field::TileKv,
                format!(
                    "tile {}x{} with head_dim {} needs about {regs} fragment registers per thread and \
                     would spill; use a smaller tile_kv or one 16-row slice per warp",
                    self.tile_q, self.tile_kv, self.head_dim
                ),
            ));
        }
        out
    }
}

pub fn check(inst: &Instance) -> Vec<(Field, String)> {
    if inst.params.head_dim.is_none() {
        return vec![(
            Field::HeadDim,
            "attention needs `head_dim` (64 or 128)".to_string(),
        )];
    }
    Plan::new(&inst.params).problems()
}

pub fn arch_problem(inst: &Instance, arch: Arch) -> Option<String> {
    (inst.op == crate::spec::model::Op::Attention && arch.sm() < 80).then(|| {
        format!(
            "attention uses cp.async, ldmatrix and mma.sync m16n8k16, which need sm_80+; {arch} lacks them"
        )
    })
}

/// `_d128_causal_q64x64`: the parts of the instance name that the common suffix (stages,
/// block) does not give.
pub fn name_suffix(p: &Params) -> String {
    let plan = Plan::new(p);
    format!(
        "_d{}{}_q{}x{}",
        plan.head_dim,
        if plan.causal { "_causal" } else { "" },
        plan.tile_q,
        plan.tile_kv
    )
}

/// The 14 runtime strides, in kernel order: per tensor (batch, seq, head), elements.
pub const STRIDES: [&str; 14] = [
    "q_bs", "q_ss", "q_hs", "k_bs", "k_ss", "k_hs", "v_bs", "v_ss", "v_hs", "o_bs", "o_ss", "o_hs",
    "lse_bs", "lse_hs",
];

/// Kernel arguments, in order. `lse`, `cu_seqlens_q` and `cu_seqlens_kv` may be null; the
/// cu_seqlens are int32 (their C declaration is `const void*`, cast in the kernel).
pub fn signature(inst: &Instance) -> Vec<Arg> {
    let t = inst.dtype;
    let int32_in = |name: &str| Arg {
        name: name.into(),
        kind: ArgKind::In,
        ty: "i32".into(),
    };
    let mut args = vec![
        Arg::input("q", t),
        Arg::input("k", t),
        Arg::input("v", t),
        Arg::output("o", t),
        Arg::output("lse", DType::F32),
        int32_in("cu_seqlens_q"),
        int32_in("cu_seqlens_kv"),
    ];
    for s in ["heads_q", "heads_kv", "seq_q", "seq_kv"] {
        args.push(Arg::scalar(s, "i64"));
    }
    for s in STRIDES {
        args.push(Arg::scalar(s, "i64"));
    }
    args.push(Arg::scalar("scale", "f32"));
    args
}

/// What a launcher must check, in words (the same list heads the rendered kernel).
pub fn runtime_requirements(inst: &Instance) -> Vec<String> {
    let plan = Plan::new(&inst.params);
    let smem = plan.shared_bytes();
    vec![
        format!(
            "launch: grid = (ceil(seq_q / {}), heads_q, batch) with seq_q the longest query sequence, \
             block = ({}, 1, 1), {smem} bytes of dynamic shared memory{}",
            plan.tile_q,
            plan.threads,
            if smem > 48 * 1024 {
                " (over 48 KiB: raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first)"
            } else {
                ""
            }
        ),
        format!(
            "head_dim = {} (the last dimension of q, k, v, o, contiguous)",
            plan.head_dim
        ),
        "batch, heads_q <= 65535; heads_q >= 1, heads_kv >= 1, heads_q % heads_kv == 0; seq_q, seq_kv >= 0 and < 2^31"
            .to_string(),
        "q, k, v, o 16-byte aligned; every q/k/v/o stride a multiple of 8 elements".to_string(),
        "strides in elements, per tensor (batch, seq, head); lse at lse[b * lse_bs + h * lse_hs + row] \
         ([batch, heads_q, seq_q] when dense); lse may be null"
            .to_string(),
        "cu_seqlens_q / cu_seqlens_kv: null, or batch + 1 nondecreasing int32 offsets of each sequence in a \
         packed tensor (then batch strides are ignored: pass 0; lse rows are offset by cu_seqlens_q[b]); \
         seq_q / seq_kv are then the longest lengths"
            .to_string(),
        "scale > 0 and finite (the caller's default is 1 / sqrt(head_dim))".to_string(),
        "every element addressed by the strides lies inside its buffer; o and lse overlap no input"
            .to_string(),
    ]
}

pub fn launch(inst: &Instance) -> Launch {
    let plan = Plan::new(&inst.params);
    Launch {
        threads: plan.threads,
        grid: GridRule::QueryTiles {
            tile_q: plan.tile_q,
        },
        shared_bytes: plan.shared_bytes(),
    }
}

pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    let plan = Plan::new(&inst.params);
    vec![
        ("head_dim", plan.head_dim.into()),
        ("causal", plan.causal.into()),
        ("tile_q", plan.tile_q.into()),
        ("tile_kv", plan.tile_kv.into()),
        ("warps", plan.warps.into()),
        ("stages", plan.stages.into()),
        ("min_blocks", 1u32.into()),
        ("shared_bytes", plan.shared_bytes().into()),
        ("requirements", runtime_requirements(inst).into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::Op;

    fn params(d: u32, causal: bool, tq: u32, tkv: u32, block: u32, stages: u32) -> Params {
        Params {
            head_dim: Some(d),
            causal: Some(causal),
            tile_q: Some(tq),
            tile_kv: Some(tkv),
            block: Some(block),
            stages: Some(stages),
            ..Params::default()
        }
    }

    #[test]
    fn measured_shapes_plan_like_the_harness() {
        // (d, causal, tile_q, tile_kv, threads, stages) -> shared bytes, as run.py's smem_bytes
        for (d, c, tq, tkv, b, s, smem) in [
            (128, false, 128, 32, 128, 2, 65_536),
            (128, true, 64, 64, 128, 2, 81_920),
            (64, false, 128, 64, 128, 2, 49_152),
            (128, false, 128, 64, 256, 3, 131_072),
        ] {
            let p = params(d, c, tq, tkv, b, s);
            let plan = Plan::new(&p);
            assert_eq!(plan.shared_bytes(), smem, "{p:?}");
            assert!(plan.problems().is_empty(), "{p:?}: {:?}", plan.problems());
        }
    }

    #[test]
    fn defaults_are_the_measured_winners() {
        for (d, c, want) in [
            (128, false, (128, 32)),
            (128, true, (64, 64)),
            (64, false, (128, 64)),
        ] {
            let mut p = Params {
                head_dim: Some(d),
                causal: Some(c),
                ..Params::default()
            };
            defaults(&mut p);
            assert_eq!((p.tile_q.unwrap(), p.tile_kv.unwrap()), want);
            assert!(Plan::new(&p).problems().is_empty());
        }
    }

    #[test]
    fn bad_shapes_are_refused_with_their_field() {
        let cases = [
            (params(96, false, 64, 64, 128, 2), Field::HeadDim),
            (params(128, false, 48, 64, 128, 2), Field::TileQ),
            (params(128, false, 256, 32, 128, 2), Field::TileQ), // 4 slices per warp
            (params(128, false, 64, 48, 128, 2), Field::TileKv),
            (params(128, false, 128, 64, 128, 2), Field::TileKv), // spills (measured)
            (params(128, false, 64, 128, 128, 2), Field::TileKv), // spills (measured)
            (params(128, false, 64, 64, 96, 2), Field::Block),
            (params(128, false, 64, 64, 128, 1), Field::Stages),
            (params(64, false, 128, 16, 256, 2), Field::TileKv), // 16 keys < one copy pass of 32 rows
        ];
        for (p, field) in cases {
            let probs = Plan::new(&p).problems();
            assert!(probs.iter().any(|(f, _)| *f == field), "{p:?}: {probs:?}");
        }
        let inst = Instance::for_test(Op::Attention, DType::Bf16, Params::default());
        assert_eq!(check(&inst)[0].0, Field::HeadDim);
    }

    /// A manifest entry for `inst` as `generate` writes it (no targets).
    fn entry(inst: &Instance) -> crate::manifest::InstanceEntry {
        crate::manifest::InstanceEntry {
            name: inst.name.clone(),
            op: inst.op,
            dtype: inst.dtype,
            out_dtype: inst.out_dtype,
            params: inst.params.clone(),
            epilogue: vec![],
            origin: inst.origin.clone(),
            entry_point: inst.entry_point(),
            args: super::super::signature(inst),
            tensor_maps: vec![],
            launch: super::super::launch(inst),
            config_sha256: "0".repeat(64),
            source: crate::manifest::FileRef {
                path: "kernels/t.cu".into(),
                sha256: "0".repeat(64),
                bytes: 1,
            },
            targets: vec![],
        }
    }

    #[test]
    fn bundles_keep_query_tiles_to_attention() {
        let mut p = params(128, true, 64, 64, 128, 2);
        defaults(&mut p);
        let inst = Instance::for_test(Op::Attention, DType::Bf16, p);
        let manifest = |e: crate::manifest::InstanceEntry| crate::manifest::Manifest {
            format: crate::manifest::FORMAT,
            tilegen_version: "0.1.0".into(),
            nvrtc_version: "13.0".into(),
            instances: vec![e],
            files: vec![],
            tuning: vec![],
        };
        let problems = |e| crate::bundle::manifest::tensor_map_problems(&manifest(e));
        assert_eq!(problems(entry(&inst)), Vec::<String>::new());
        // The rule on another op, another rule on attention, a tile no kernel has.
        let mut other = entry(&inst);
        other.op = Op::Softmax;
        assert!(problems(other).iter().any(|p| p.contains("query_tiles")));
        let mut rows = entry(&inst);
        rows.launch.grid = GridRule::Rows {
            rows_per_block: 1,
            max_cols: None,
        };
        assert!(problems(rows).iter().any(|p| p.contains("query_tiles")));
        let mut odd = entry(&inst);
        odd.launch.grid = GridRule::QueryTiles { tile_q: 24 };
        assert!(problems(odd).iter().any(|p| p.contains("tile_q 24")));
    }

    #[test]
    fn signature_matches_the_template_parameter_list() {
        let inst = Instance::for_test(
            Op::Attention,
            DType::Bf16,
            params(128, false, 128, 32, 128, 2),
        );
        let decls: Vec<String> = signature(&inst).iter().map(|a| a.c_decl()).collect();
        assert_eq!(decls.len(), 7 + 4 + 14 + 1);
        assert_eq!(decls[0], "const tg_bf16* __restrict__ q");
        assert_eq!(decls[4], "float* __restrict__ lse");
        assert_eq!(decls[5], "const void* __restrict__ cu_seqlens_q");
        assert_eq!(decls[25], "float scale");
        let launch = launch(&inst);
        assert_eq!(launch.threads, 128);
        assert_eq!(launch.shared_bytes, 65_536);
        assert_eq!(launch.grid, GridRule::QueryTiles { tile_q: 128 });
    }
}
