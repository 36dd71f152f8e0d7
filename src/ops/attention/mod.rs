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
//! `engine: wgmma` (sm_90a only) renders `attention_sm90.cu` instead: a producer warpgroup
//! copies Q and K/V tiles (cp.async, 128-byte swizzle) into an mbarrier-guarded ring and
//! `tile_q / 64` consumer warpgroups run S = Q·Kᵀ and O += P·V on wgmma, taking turns so that
//! one's softmax overlaps another's matrix products.
//!
//! Shapes and numbers measured on the H200: bench/flash-attn/NOTES.md.

use super::{Field, OpFamily, OpInfo};
use crate::launch::{
    Arg, ArgKind, GridRule, Interleave, L2Promotion, Launch, OobFill, Swizzle, TensorMap,
};
use crate::spec::model::{Arch, DType, Engine, Instance, Params};

pub mod calls;

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
        Field::Engine,
    ],
    epilogues: &[],
    what: |k| {
        format!(
        "Attention forward, `o = softmax(scale · q·kᵀ + mask) · v` per batch entry and query head, \
         head_dim {}, {} in and out, f32 scores, softmax and accumulation; the row log-sum-exp \
         (natural log, `-inf` for a row that sees no key) into `lse` when given.",
        Plan::new(&k.params).head_dim,
        k.dtype
    )
    },
    // Strides, sequence lists, its own cases and reference: gpu::attention.
    #[cfg(feature = "gpu")]
    verification: None,
};

pub const HEAD_DIMS: &[u32] = &[64, 128];
/// The Hopper path also takes head_dim 256 (O alone is 128 registers per consumer thread).
pub const HEAD_DIMS_WGMMA: &[u32] = &[64, 128, 256];
const DEFAULT_THREADS: u32 = 128;
const DEFAULT_STAGES: u32 = 2;
/// Accumulator, score and Q-fragment registers per thread above which ptxas spills (measured:
/// 160 builds clean with two slices per warp; head_dim 128 with tile_kv 128 spills). Over it,
/// the template keeps the row sums in shared memory, and only [`Plan::lean_measured`] builds
/// clean that way.
const MAX_FRAGMENT_REGS: u32 = 160;
/// The largest dynamic shared memory a block may ask for on sm_90 (227 KiB).
const MAX_SHARED_SM90: u32 = 232_448;
/// Fragment registers per consumer thread that build without spills on the Hopper path, with
/// two and with three consumers (measured: 192 and 128 do, 208 and 144 spill).
const WGMMA_FRAGMENT_REGS: [u32; 2] = [192, 128];
/// Hopper path: work items its scheduler publishes ahead in shared memory, and the bytes of
/// one (the template's ITEMS and ITEM_BYTES; one slot more holds launch constants).
const SCHED_ITEMS: u32 = 4;
const SCHED_ITEM_BYTES: u32 = 128;

/// The family's table (`ops::family`).
pub static FAMILY: OpFamily = OpFamily {
    info: |_| &ATTENTION,
    defaults: |_, p| defaults(p),
    check,
    resolved,
    signature,
    launch,
    template,
    tensor_maps,
    template_values,
    arch_problem,
    shared_memory_field: Field::TileKv,
    // Attention's cases and shapes have strides and sequence lists of their own: `gpu::attention`.
    #[cfg(feature = "gpu")]
    cases: &super::verification::FamilyCases {
        verify: |_| Vec::new(),
        bench: |_| Vec::new(),
        problem_of: |_, _| None,
        tune_sizes: &[],
    },
    calls: &calls::CALLS,
    name_head: name_suffix,
};

/// Every parameter the kernel uses (see `ops::resolved`), from its plan.
pub fn resolved(inst: &Instance) -> Params {
    let plan = Plan::new(&inst.params);
    Params {
        head_dim: Some(plan.head_dim),
        causal: Some(plan.causal),
        tile_q: Some(plan.tile_q),
        tile_kv: Some(plan.tile_kv),
        block: Some(plan.threads),
        stages: Some(plan.stages),
        engine: plan.wgmma.then_some(Engine::Wgmma),
        ..Params::default()
    }
}

/// Whether the instance runs on the Hopper path.
pub fn wgmma(p: &Params) -> bool {
    p.engine == Some(Engine::Wgmma)
}

/// The template that renders the instance.
pub fn template(inst: &Instance) -> &'static str {
    if wgmma(&inst.params) {
        "attention_sm90.cu"
    } else {
        ATTENTION.template
    }
}

/// Tiles of the fastest instances on the H200 (mma.sync), per head_dim and mask.
pub fn default_tiles(head_dim: u32, causal: bool) -> (u32, u32) {
    match (head_dim, causal) {
        (128, false) => (128, 32),
        (128, true) => (64, 64),
        _ => (128, 64),
    }
}

/// Tiles of the fastest Hopper instances on the H200, per head_dim: 2 consumer warpgroups and
/// 128-key tiles at head_dim 128, 3 consumers at 64, 64-key tiles at 256.
pub fn default_tiles_wgmma(head_dim: u32) -> (u32, u32) {
    match head_dim {
        64 => (192, 128),
        128 => (128, 128),
        _ => (128, 64),
    }
}

/// head_dim has no default (it is the problem's, not a tuning choice); the rest do.
pub fn defaults(p: &mut Params) {
    // The default engine is never stored (as for gemm): names and config hashes stay put.
    if p.engine == Some(Engine::MmaSync) {
        p.engine = None;
    }
    let causal = *p.causal.get_or_insert(false);
    let hopper = wgmma(p);
    if let Some(d) = p.head_dim {
        let (tq, tkv) = if hopper {
            default_tiles_wgmma(d)
        } else {
            default_tiles(d, causal)
        };
        p.tile_q.get_or_insert(tq);
        p.tile_kv.get_or_insert(tkv);
    }
    let threads = match (hopper, p.tile_q) {
        (true, Some(tq)) => 128 * (1 + tq / 64),
        _ => DEFAULT_THREADS,
    };
    p.block.get_or_insert(threads);
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
    /// The Hopper path: a producer warpgroup and `tile_q / 64` consumer warpgroups.
    pub wgmma: bool,
}

impl Plan {
    pub fn new(p: &Params) -> Plan {
        let mut p = p.clone();
        if p.head_dim.is_none() {
            p.head_dim = Some(128);
        }
        defaults(&mut p);
        let threads = p.block.unwrap_or(DEFAULT_THREADS);
        Plan {
            head_dim: p.head_dim.unwrap_or(128),
            causal: p.causal.unwrap_or(false),
            tile_q: p.tile_q.unwrap_or(128),
            tile_kv: p.tile_kv.unwrap_or(64),
            threads,
            warps: threads / 32,
            stages: p.stages.unwrap_or(DEFAULT_STAGES),
            wgmma: wgmma(&p),
        }
    }
    /// Consumer warpgroups of the Hopper path (64 query rows each).
    pub fn consumers(&self) -> u32 {
        self.tile_q / 64
    }
    /// setmaxnreg budgets of the Hopper path, (producer, consumers): the registers the launch
    /// gives every thread (65536 / threads, rounded down to 8), moved from the producer's
    /// 128 threads to the consumers'. Derived from what the producer keeps, so the consumers
    /// never ask for more than it freed (such an increase never returns: the kernel hangs).
    pub fn register_split(&self) -> (u32, u32) {
        // The producer's scheduler fits 40 registers beside two consumers; beside three, 32
        // (the most that leaves the consumers a multiple of 8).
        let producer = if self.consumers() <= 2 { 40 } else { 32 };
        let consumer_threads = 128 * self.consumers().max(1);
        let launched = 65536 / (128 + consumer_threads) / 8 * 8;
        let consumer = launched + (launched - producer) * 128 / consumer_threads / 8 * 8;
        (producer, consumer)
    }
    /// Hopper path: Q's fragments stay in registers when two consumers leave room for them.
    pub fn q_in_registers(&self) -> bool {
        self.consumers() <= 2
            && self.other_fragment_regs() + self.head_dim / 4 <= WGMMA_FRAGMENT_REGS[0]
    }
    /// Hopper path: O, S and P per consumer thread (f32 O and S, P as 16-bit pairs).
    fn other_fragment_regs(&self) -> u32 {
        self.head_dim / 2 + self.tile_kv / 2 + self.tile_kv / 4
    }
    /// 16-row query slices per warp.
    pub fn slices(&self) -> u32 {
        self.tile_q / (16 * self.warps.max(1))
    }
    /// Bytes of one shared-memory row (head_dim 16-bit elements).
    fn row_bytes(&self) -> u32 {
        self.head_dim * 2
    }
    /// Q tile plus `stages` K and V tiles; the Hopper path holds `q_bufs` Q tiles and adds
    /// 1024 bytes to align the tiles for the 128-byte swizzle, its mbarriers (Q full and empty
    /// per Q tile, K/V full and empty per stage, item full and empty per scheduler slot), the
    /// scheduler's slots and, where O is staged, its rows.
    pub fn shared_bytes(&self) -> u32 {
        if self.wgmma {
            let staging = if self.o_staged() {
                self.o_staging_bytes()
            } else {
                0
            };
            return self.wgmma_shared_bytes(self.q_bufs()) + staging;
        }
        (self.tile_q + self.stages * 2 * self.tile_kv) * self.row_bytes()
    }
    fn wgmma_shared_bytes(&self, q_bufs: u32) -> u32 {
        let tiles = (q_bufs * self.tile_q + self.stages * 2 * self.tile_kv) * self.row_bytes();
        let barriers = 2 * q_bufs + 4 * self.stages + 2 * SCHED_ITEMS;
        1024 + tiles + 8 * barriers + (SCHED_ITEMS + 1) * SCHED_ITEM_BYTES
    }
    /// Hopper path: Q tiles in shared memory. A block's next work item's Q lands while its
    /// current one runs; with Q in shared memory through the whole item (not kept in
    /// registers) that takes a second tile, where it fits.
    pub fn q_bufs(&self) -> u32 {
        if self.wgmma && !self.q_in_registers() && self.wgmma_shared_bytes(2) <= MAX_SHARED_SM90 {
            2
        } else {
            1
        }
    }
    /// Hopper path: the consumers write O through shared memory (each warp its 16 rows, then
    /// one bulk copy per row), where those rows fit beside the tiles; elsewhere straight from
    /// registers, four bytes a store. Not at head_dim 64 with the mask, which measured up to 3 %
    /// slower staged (bench/flash-attn/NOTES.md).
    pub fn o_staged(&self) -> bool {
        self.wgmma
            && !(self.head_dim == 64 && self.causal)
            && self.wgmma_shared_bytes(self.q_bufs()) + self.o_staging_bytes() <= MAX_SHARED_SM90
    }
    /// The staged O rows: 16 bytes of padding per row put the 8 rows one `stmatrix` writes on
    /// different banks.
    fn o_staging_bytes(&self) -> u32 {
        self.tile_q * (self.row_bytes() + 16)
    }
    /// Hopper path, causal: work units of two query tiles whose key counts add up to about
    /// the same (see the grid rule).
    pub fn pairs(&self) -> bool {
        self.wgmma && self.causal
    }
    /// O accumulators + S scores + Q fragments (kept in registers with one slice per warp);
    /// on the Hopper path per consumer thread: O, S, P as 16-bit pairs, and Q when kept.
    pub fn fragment_regs(&self) -> u32 {
        if self.wgmma {
            let q = if self.q_in_registers() {
                self.head_dim / 4
            } else {
                0
            };
            return self.other_fragment_regs() + q;
        }
        let s = self.slices();
        let q = if s == 1 { self.head_dim / 4 } else { 0 };
        s * self.head_dim / 2 + s * self.tile_kv / 2 + q
    }
    /// The portable tile over [`MAX_FRAGMENT_REGS`] that is known to build without spills, with
    /// its row sums in shared memory: head_dim 128, 128×64, 128 threads, 2 stages, on sm_90 (on
    /// sm_80 ptxas spills 4 bytes; with 3 stages, or 64 threads, it spills on sm_90 too;
    /// measured 2026-12-03, `bench/flash-attn/NOTES.md`).
    fn lean_measured(&self) -> bool {
        !self.wgmma
            && self.head_dim == 128
            && self.tile_q == 128
            && self.tile_kv == 64
            && self.threads == 128
            && self.stages == 2
    }
    /// Both paths ring 2 to 4 K/V tiles.
    fn stages_problem(&self) -> Option<(Field, String)> {
        (!(2..=4).contains(&self.stages)).then(|| {
            (
                Field::Stages,
                format!("stages must be from 2 to 4, not {}", self.stages),
            )
        })
    }
    /// The Hopper path's limits (measured: no spills up to 192 fragment registers with two
    /// consumers, 128 with three).
    fn wgmma_problems(&self) -> Vec<(Field, String)> {
        let mut out = Vec::new();
        if self.tile_q != 128 && self.tile_q != 192 {
            out.push((
                Field::TileQ,
                format!(
                    "tile_q must be 128 or 192 with engine wgmma (2 or 3 consumer warpgroups of 64 rows), not {}",
                    self.tile_q
                ),
            ));
            return out;
        }
        let threads = 128 * (1 + self.consumers());
        if self.threads != threads {
            out.push((
                Field::Block,
                format!(
                    "block must be {threads} with engine wgmma and tile_q {} (a producer warpgroup and {} consumers), not {}",
                    self.tile_q,
                    self.consumers(),
                    self.threads
                ),
            ));
        }
        if ![64, 128, 192, 256].contains(&self.tile_kv) {
            out.push((
                Field::TileKv,
                format!(
                    "tile_kv must be 64, 128, 192 or 256 with engine wgmma (a wgmma N), not {}",
                    self.tile_kv
                ),
            ));
        }
        out.extend(self.stages_problem());
        if !out.is_empty() {
            return out;
        }
        let (limit, consumers) = if self.consumers() <= 2 {
            (WGMMA_FRAGMENT_REGS[0], 2)
        } else {
            (WGMMA_FRAGMENT_REGS[1], 3)
        };
        let regs = self.fragment_regs();
        if regs > limit {
            out.push((
                Field::TileKv,
                format!(
                    "tile_kv {} with head_dim {} needs about {regs} fragment registers per consumer thread, over the {limit} that {consumers} consumers leave without spilling; use a smaller tile_kv",
                    self.tile_kv, self.head_dim
                ),
            ));
        }
        let smem = self.shared_bytes();
        if smem > MAX_SHARED_SM90 {
            out.push((
                Field::Stages,
                format!(
                    "{} stages of {}-key tiles need {smem} bytes of shared memory, over the {MAX_SHARED_SM90} a block may have; use fewer stages or a smaller tile_kv",
                    self.stages, self.tile_kv
                ),
            ));
        }
        out
    }
    pub fn problems(&self) -> Vec<(Field, String)> {
        let mut out = Vec::new();
        let allowed = if self.wgmma {
            HEAD_DIMS_WGMMA
        } else {
            HEAD_DIMS
        };
        if !allowed.contains(&self.head_dim) {
            out.push((
                Field::HeadDim,
                format!(
                    "head_dim must be 64 or 128 (256 with engine wgmma), not {}",
                    self.head_dim
                ),
            ));
            return out;
        }
        if self.wgmma {
            return self.wgmma_problems();
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
        out.extend(self.stages_problem());
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
        if (regs > MAX_FRAGMENT_REGS && !self.lean_measured())
            || (self.head_dim == 128 && self.tile_kv > 64)
        {
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
    if wgmma(&inst.params) {
        return (arch != Arch::Sm90a).then(|| {
            format!(
                "attention with engine wgmma uses wgmma.mma_async and setmaxnreg, which only sm_90a has \
                 (and sm_90a code runs on no other GPU): give `archs: [sm_90a]`, not {arch}"
            )
        });
    }
    if arch.sm() < 80 {
        return Some(format!(
            "attention uses cp.async, ldmatrix and mma.sync m16n8k16, which need sm_80+; {arch} lacks them"
        ));
    }
    let plan = Plan::new(&inst.params);
    (plan.fragment_regs() > MAX_FRAGMENT_REGS && arch.sm() < 90).then(|| {
        format!(
            "tile {}x{} with head_dim {} builds without spills on sm_90 only (on {arch} ptxas spills): \
             give `archs: [sm_90]`, or tile_kv 32 for {arch}",
            plan.tile_q, plan.tile_kv, plan.head_dim
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
    for s in ["batch", "heads_q", "heads_kv", "seq_q", "seq_kv"] {
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
    let maps: Vec<String> = tensor_maps(inst).iter().map(|m| m.name.clone()).collect();
    let parameters = (!maps.is_empty()).then(|| {
        format!(
            "parameters: the tensor maps {} (128-byte CUtensorMap values from cuTensorMapEncodeTiled, as \
             the manifest's tensor_maps give them), then the arguments; seq_kv >= 1 and every k/v stride \
             below 2^40 bytes (TMA's limits), even a batch or head stride whose dim is 1",
            maps.join(", ")
        )
    });
    let raise = if smem > 48 * 1024 {
        " (over 48 KiB: raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first)"
    } else {
        ""
    };
    let grid = if plan.wgmma {
        format!(
            "launch: persistent, grid = (x, 1, 1) with x = min(units, SMs){}, block = ({}, 1, 1), \
             {smem} bytes of dynamic shared memory{raise}; units = {} x heads_q x batch < 2^31 with \
             tiles = ceil(seq_q / {}), seq_q the longest query sequence; any x >= 1 gives the same result",
            if plan.pairs() {
                " lowered to the largest count coprime to ceil(tiles / 2)"
            } else {
                ""
            },
            plan.threads,
            if plan.pairs() { "ceil(tiles / 2)" } else { "tiles" },
            plan.tile_q,
        )
    } else {
        format!(
            "launch: grid = (ceil(seq_q / {}), heads_q, batch) with seq_q the longest query sequence, \
             block = ({}, 1, 1), {smem} bytes of dynamic shared memory{raise}",
            plan.tile_q, plan.threads,
        )
    };
    let mut lines = vec![
        grid,
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
    ];
    lines.extend(parameters);
    lines
}

/// The tensor maps of a Hopper instance, before its arguments: K and V as
/// [head_dim, seq_kv, heads_kv, batch] with the call's strides, one 64 × tile_kv box per 64 head
/// dims (a 128-byte-swizzled panel of the tile), rows past seq_kv read as zeros. The portable
/// kernel takes none. A packed varlen call does not read them (its batch strides are 0, which
/// the driver encodes).
pub fn tensor_maps(inst: &Instance) -> Vec<TensorMap> {
    let plan = Plan::new(&inst.params);
    if !plan.wgmma {
        return Vec::new();
    }
    ["k", "v"]
        .iter()
        .map(|t| TensorMap {
            name: format!("{t}_map"),
            tensor: t.to_string(),
            dtype: inst.dtype,
            dims: vec![
                plan.head_dim.to_string(),
                "seq_kv".into(),
                "heads_kv".into(),
                "batch".into(),
            ],
            strides: vec![format!("{t}_ss"), format!("{t}_hs"), format!("{t}_bs")],
            box_dims: vec![64, plan.tile_kv, 1, 1],
            swizzle: Swizzle::B128,
            interleave: Interleave::None,
            // K and V tiles are read by every query tile of their head, mostly from L2: no
            // promotion measured 1-3 % faster than 256 bytes at seq_kv 8192, head_dim 128
            // (the same within 1 % at 4096 and at head_dims 64 and 256;
            // bench/flash-attn/NOTES.md, 2026-12-03).
            l2_promotion: L2Promotion::None,
            l2_promotion_straddling: None,
            oob_fill: OobFill::Zero,
        })
        .collect()
}

pub fn launch(inst: &Instance) -> Launch {
    let plan = Plan::new(&inst.params);
    let grid = if plan.wgmma {
        // One block per SM (its shared memory), each looping over the work units.
        GridRule::PersistentQueryTiles {
            tile_q: plan.tile_q,
            pairs: plan.pairs(),
            ctas_per_sm: 1,
        }
    } else {
        GridRule::QueryTiles {
            tile_q: plan.tile_q,
        }
    };
    Launch {
        threads: plan.threads,
        grid,
        shared_bytes: plan.shared_bytes(),
    }
}

/// The runtime's grid of an attention instance's launch rule (query tiles for any other).
pub fn runtime_grid(grid: &GridRule) -> tilegen_runtime::attention::AttnGrid {
    use tilegen_runtime::attention::AttnGrid;
    match *grid {
        GridRule::PersistentQueryTiles {
            pairs, ctas_per_sm, ..
        } => AttnGrid::Persistent { pairs, ctas_per_sm },
        _ => AttnGrid::QueryTiles,
    }
}

pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    let plan = Plan::new(&inst.params);
    if plan.wgmma {
        let (producer, consumer) = plan.register_split();
        return vec![
            ("head_dim", plan.head_dim.into()),
            ("causal", plan.causal.into()),
            ("tile_q", plan.tile_q.into()),
            ("tile_kv", plan.tile_kv.into()),
            ("consumers", plan.consumers().into()),
            ("stages", plan.stages.into()),
            ("producer_regs", producer.into()),
            ("consumer_regs", consumer.into()),
            ("q_regs", u32::from(plan.q_in_registers()).into()),
            ("q_bufs", plan.q_bufs().into()),
            ("o_staged", plan.o_staged().into()),
            ("pairs", plan.pairs().into()),
            ("shared_bytes", plan.shared_bytes().into()),
            ("requirements", runtime_requirements(inst).into()),
            (
                "tensor_maps",
                tensor_maps(inst)
                    .iter()
                    .map(super::map_summary)
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ];
    }
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
            (params(128, false, 128, 64, 128, 3), Field::TileKv), // spills (measured)
            (params(64, false, 128, 128, 128, 2), Field::TileKv), // spills (measured)
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

    #[test]
    fn the_lean_tile_builds_for_sm_90_only() {
        // head_dim 128 on 128x64: row sums in shared memory, clean on sm_90, 4 bytes spilled on
        // sm_80 (measured); the causal variant alike.
        for causal in [false, true] {
            let p = params(128, causal, 128, 64, 128, 2);
            assert!(Plan::new(&p).problems().is_empty(), "{p:?}");
            let inst = Instance::for_test(Op::Attention, DType::Bf16, p);
            assert_eq!(arch_problem(&inst, Arch::Sm90), None);
            let on_80 = arch_problem(&inst, Arch::Sm80).expect("refused on sm_80");
            assert!(on_80.contains("archs: [sm_90]"), "{on_80}");
        }
        // The template's LEAN switch (`MI * (ND + NS) * 4 > 160`) is this limit: on for the
        // lean tile, off for the default library's other portable tiles.
        assert!(
            Plan::new(&params(128, false, 128, 64, 128, 2)).fragment_regs() > MAX_FRAGMENT_REGS
        );
        for (d, c, tq, tkv) in [
            (128, false, 128, 32),
            (128, true, 64, 64),
            (64, false, 128, 64),
        ] {
            let regs = Plan::new(&params(d, c, tq, tkv, 128, 2)).fragment_regs();
            assert!(regs <= MAX_FRAGMENT_REGS, "{d} {tq}x{tkv}: {regs}");
        }
        // Tiles under the limit build for every arch.
        let inst = Instance::for_test(
            Op::Attention,
            DType::Bf16,
            params(128, false, 128, 32, 128, 2),
        );
        assert_eq!(arch_problem(&inst, Arch::Sm80), None);
    }

    fn hopper(d: u32, tq: u32, tkv: u32, stages: u32) -> Params {
        let mut p = Params {
            head_dim: Some(d),
            tile_q: Some(tq),
            tile_kv: Some(tkv),
            stages: Some(stages),
            engine: Some(Engine::Wgmma),
            ..Params::default()
        };
        defaults(&mut p);
        p
    }

    #[test]
    fn hopper_plans_match_the_harness() {
        // (d, tile_q, tile_kv, stages) -> threads, Q tiles, shared bytes as run.py's
        // smem_bytes (sm90), plus tile_q rows of 2 d + 16 bytes where O is staged
        for (d, tq, tkv, st, threads, q_bufs, smem, staged) in [
            (128, 128, 128, 2, 384, 1, 165_648 + 128 * 272, true),
            (128, 128, 128, 3, 384, 1, 231_216, false),
            (64, 192, 128, 3, 512, 2, 149_312 + 192 * 144, true),
            (128, 192, 64, 3, 512, 2, 198_464, false),
            (256, 128, 64, 2, 384, 1, 198_416, false),
        ] {
            let plan = Plan::new(&hopper(d, tq, tkv, st));
            assert_eq!(
                (
                    plan.threads,
                    plan.q_bufs(),
                    plan.shared_bytes(),
                    plan.o_staged()
                ),
                (threads, q_bufs, smem, staged),
                "{plan:?}"
            );
            assert!(
                plan.problems().is_empty(),
                "{plan:?}: {:?}",
                plan.problems()
            );
        }
        // head_dim 64 with the mask writes O from registers (measured faster there).
        let mut causal64 = hopper(64, 192, 128, 3);
        causal64.causal = Some(true);
        assert!(!Plan::new(&causal64).o_staged());
        // Q stays in registers with two consumers only (three have no room for it).
        assert!(Plan::new(&hopper(128, 128, 128, 2)).q_in_registers());
        // Balanced: what the producer frees is what the consumers take.
        for (d, tq, tkv) in [(128, 128, 128), (64, 192, 128)] {
            let plan = Plan::new(&hopper(d, tq, tkv, 2));
            let (producer, consumer) = plan.register_split();
            let launched = 65536 / plan.threads / 8 * 8;
            assert_eq!(
                (launched - producer) * 128,
                (consumer - launched) * (plan.threads - 128)
            );
        }
        assert!(!Plan::new(&hopper(64, 192, 128, 3)).q_in_registers());
        assert_eq!(
            Plan::new(&hopper(64, 192, 128, 3)).register_split(),
            (32, 160)
        );
        // head_dim 256: O alone is 128 registers, so Q stays in shared memory.
        assert!(!Plan::new(&hopper(256, 128, 64, 2)).q_in_registers());
        let mut d256 = Params {
            head_dim: Some(256),
            engine: Some(Engine::Wgmma),
            ..Params::default()
        };
        defaults(&mut d256);
        assert_eq!(
            (d256.tile_q, d256.tile_kv, d256.block),
            (Some(128), Some(64), Some(384))
        );
    }

    #[test]
    fn hopper_limits_are_refused_with_their_field() {
        let mut wrong_block = hopper(128, 128, 128, 2);
        wrong_block.block = Some(256);
        for (p, field) in [
            (hopper(128, 64, 128, 2), Field::TileQ),
            (hopper(128, 128, 96, 2), Field::TileKv),
            (hopper(128, 128, 192, 2), Field::TileKv), // spills (measured)
            (hopper(64, 192, 192, 2), Field::TileKv),  // three consumers: 128 registers
            (hopper(128, 128, 128, 4), Field::Stages), // over 227 KiB of shared memory
            (hopper(128, 128, 128, 1), Field::Stages),
            (hopper(256, 128, 128, 2), Field::TileKv), // 224 registers
            (hopper(96, 128, 128, 2), Field::HeadDim),
            (wrong_block, Field::Block),
        ] {
            let probs = Plan::new(&p).problems();
            assert!(probs.iter().any(|(f, _)| *f == field), "{p:?}: {probs:?}");
        }
        let inst = Instance::for_test(Op::Attention, DType::Bf16, hopper(128, 128, 128, 2));
        assert!(arch_problem(&inst, Arch::Sm90).is_some());
        assert!(arch_problem(&inst, Arch::Sm90a).is_none());
        assert_eq!(template(&inst), "attention_sm90.cu");
        let portable = Instance::for_test(
            Op::Attention,
            DType::Bf16,
            params(128, false, 128, 32, 128, 2),
        );
        assert_eq!(template(&portable), "attention.cu");
    }

    /// A manifest entry for `inst` as `generate` writes it (no targets).
    fn entry(inst: &Instance) -> crate::manifest::InstanceEntry {
        crate::manifest::InstanceEntry::for_test(inst)
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
    fn hopper_instances_take_k_and_v_maps_the_manifest_accepts() {
        let inst = Instance::for_test(Op::Attention, DType::F16, hopper(128, 128, 128, 3));
        let maps = tensor_maps(&inst);
        assert_eq!(maps.len(), 2);
        for (m, t) in maps.iter().zip(["k", "v"]) {
            assert_eq!(m.name, format!("{t}_map"));
            assert_eq!(m.tensor, t);
            assert_eq!(m.dtype, DType::F16);
            assert_eq!(m.dims, ["128", "seq_kv", "heads_kv", "batch"]);
            assert_eq!(
                m.strides,
                [format!("{t}_ss"), format!("{t}_hs"), format!("{t}_bs")]
            );
            assert_eq!(m.box_dims, [64, 128, 1, 1]);
            assert_eq!(m.swizzle, Swizzle::B128);
            assert_eq!(m.l2_promotion, L2Promotion::None);
        }
        // The maps come first in the rendered signature, and the manifest's checks take them.
        let manifest = crate::manifest::Manifest {
            format: crate::manifest::FORMAT,
            tilegen_version: "0.1.0".into(),
            nvrtc_version: "13.0".into(),
            instances: vec![entry(&inst)],
            files: vec![],
            tuning: vec![],
        };
        assert_eq!(
            crate::bundle::manifest::tensor_map_problems(&manifest),
            Vec::<String>::new()
        );
        assert!(runtime_requirements(&inst)
            .last()
            .is_some_and(|r| r.starts_with("parameters: the tensor maps k_map, v_map")));
        // The portable kernel takes none.
        let portable = Instance::for_test(
            Op::Attention,
            DType::F16,
            params(128, false, 128, 32, 128, 2),
        );
        assert!(tensor_maps(&portable).is_empty());
    }

    #[test]
    fn signature_matches_the_template_parameter_list() {
        let inst = Instance::for_test(
            Op::Attention,
            DType::Bf16,
            params(128, false, 128, 32, 128, 2),
        );
        let decls: Vec<String> = signature(&inst).iter().map(|a| a.c_decl()).collect();
        assert_eq!(decls.len(), 7 + 5 + 14 + 1);
        assert_eq!(decls[0], "const tg_bf16* __restrict__ q");
        assert_eq!(decls[4], "float* __restrict__ lse");
        assert_eq!(decls[5], "const void* __restrict__ cu_seqlens_q");
        assert_eq!(decls[7], "long long batch");
        assert_eq!(decls[26], "float scale");
        let launch = launch(&inst);
        assert_eq!(launch.threads, 128);
        assert_eq!(launch.shared_bytes, 65_536);
        assert_eq!(launch.grid, GridRule::QueryTiles { tile_q: 128 });
        // The Hopper instances are persistent; causal ones pair their query tiles.
        for causal in [false, true] {
            let mut p = hopper(64, 192, 128, 3);
            p.causal = Some(causal);
            let hop = Instance::for_test(Op::Attention, DType::Bf16, p);
            assert_eq!(
                super::launch(&hop).grid,
                GridRule::PersistentQueryTiles {
                    tile_q: 192,
                    pairs: causal,
                    ctas_per_sm: 1
                }
            );
        }
    }
}
