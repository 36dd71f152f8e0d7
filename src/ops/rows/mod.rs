//! Row ops over a rows×cols tensor: softmax, layernorm, rmsnorm, and add_rmsnorm (a residual
//! add written out, then rmsnorm of it). One block per row; the one-pass form keeps the whole
//! row in registers (`block`×`items` 16-byte vectors, so it reads and writes each element
//! once), the online softmax streams rows of any length.

use super::{pow2_problem, Field, OpFamily, OpInfo};
use crate::launch::{Arg, GridRule, Launch};
use crate::spec::model::{Arch, DType, Instance, KernelConfig, Op, Params, RowVariant};

pub mod calls;
#[cfg(feature = "gpu")]
mod cases;

const ALL_DTYPES: &[DType] = &[DType::F32, DType::F16, DType::Bf16];

pub static SOFTMAX: OpInfo = OpInfo {
    template: "softmax.cu",
    dtypes: ALL_DTYPES,
    fields: &[
        Field::Block,
        Field::Items,
        Field::Variant,
        Field::Stages,
        Field::RowsPerBlock,
    ],
    epilogues: &[],
    what: |_| {
        "Softmax of each row of the row-major `rows`×`cols` tensor `x`, into `out` (f32 arithmetic, max-subtracted).".into()
    },
    #[cfg(feature = "gpu")]
    verification: Some(reference::SOFTMAX),
};

/// Layernorm's fields: the norms' shared ones, then the trimmed ring path (`lean`).
const LAYERNORM_FIELDS: &[Field] = &[
    Field::Block,
    Field::Items,
    Field::Variant,
    Field::Stages,
    Field::Affine,
    Field::RowsPerBlock,
    Field::Lean,
];

/// Layernorm and rmsnorm share a template and these fields (all of layernorm's but `lean`).
const NORM_FIELDS: &[Field] = LAYERNORM_FIELDS.split_at(LAYERNORM_FIELDS.len() - 1).0;

pub static LAYERNORM: OpInfo = OpInfo {
    template: "norm.cu",
    dtypes: ALL_DTYPES,
    fields: LAYERNORM_FIELDS,
    epilogues: &[],
    what: |k| {
        let text = if affine(k) {
            "Layer norm of each row of the row-major `rows`×`cols` tensor `x`: `out = (x - mean) / sqrt(var + eps) * weight + bias`, with `weight` and `bias` of `cols` elements (f32 arithmetic)."
        } else {
            "Layer norm of each row of the row-major `rows`×`cols` tensor `x`: `out = (x - mean) / sqrt(var + eps)` (f32 arithmetic)."
        };
        text.into()
    },
    #[cfg(feature = "gpu")]
    verification: Some(reference::LAYERNORM),
};

pub static RMSNORM: OpInfo = OpInfo {
    template: "norm.cu",
    dtypes: ALL_DTYPES,
    fields: NORM_FIELDS,
    epilogues: &[],
    what: |k| {
        let text = if affine(k) {
            "RMS norm of each row of the row-major `rows`×`cols` tensor `x`: `out = x / sqrt(mean(x²) + eps) * weight`, with `weight` of `cols` elements (f32 arithmetic)."
        } else {
            "RMS norm of each row of the row-major `rows`×`cols` tensor `x`: `out = x / sqrt(mean(x²) + eps)` (f32 arithmetic)."
        };
        text.into()
    },
    #[cfg(feature = "gpu")]
    verification: Some(reference::RMSNORM),
};

/// `h = x + r` (written, rounded to the dtype), then `y = rmsnorm(h) · weight` from that
/// rounded `h`, as the next layer reads it back.
pub static ADD_RMSNORM: OpInfo = OpInfo {
    template: "norm.cu",
    dtypes: ALL_DTYPES,
    fields: NORM_FIELDS,
    epilogues: &[],
    what: |k| {
        let affine = affine(k);
        format!(
            "Residual add and RMS norm of each row of the row-major `rows`×`cols` tensors `x` and `r`: `h = x + r`, rounded to {} and written, then `y = h / sqrt(mean(h²) + eps){}` from that rounded `h`{} (f32 arithmetic).",
            k.dtype,
            if affine { " * weight" } else { "" },
            if affine { ", with `weight` of `cols` elements" } else { "" }
        )
    },
    #[cfg(feature = "gpu")]
    verification: Some(reference::ADD_RMSNORM),
};

/// Whether a norm scales by a weight (and layernorm adds a bias): the default.
fn affine(k: &KernelConfig) -> bool {
    k.params.affine != Some(false)
}

/// The variant when a spec gives none: softmax stores it; a norm leaves it unset, which its
/// template reads as this one (the row in registers).
const DEFAULT_VARIANT: RowVariant = RowVariant::OnePass;
/// Depth of a staged row ring when a spec gives none: one row, copied then computed.
const DEFAULT_ROW_STAGES: u32 = 1;

/// The family's table (`ops::family`).
pub static FAMILY: OpFamily = OpFamily {
    info: |op| match op {
        Op::Softmax => &SOFTMAX,
        Op::LayerNorm => &LAYERNORM,
        Op::RmsNorm => &RMSNORM,
        Op::AddRmsNorm => &ADD_RMSNORM,
        op => unreachable!("{op:?} is not a row op (Op::family)"),
    },
    defaults,
    check,
    resolved,
    signature,
    launch,
    template: super::op_template,
    tensor_maps: super::no_tensor_maps,
    template_values,
    arch_problem,
    shared_memory_field: Field::Block,
    #[cfg(feature = "gpu")]
    cases: &cases::CASES,
    calls: &calls::CALLS,
    name_head: super::no_name_head,
};

pub fn defaults(op: Op, p: &mut Params) {
    p.block.get_or_insert(256);
    p.items.get_or_insert(2);
    match op {
        Op::Softmax => {
            p.variant.get_or_insert(DEFAULT_VARIANT);
        }
        _ => {
            p.affine.get_or_insert(true);
        }
    }
    // The default rows per block of a ring is never stored, so writing it out changes no
    // name or hash.
    let ring = p.variant == Some(RowVariant::Staged) && p.stages.unwrap_or(1) > 1;
    if ring && p.rows_per_block == Some(RING_ROWS_PER_BLOCK) {
        p.rows_per_block = None;
    }
    if p.lean == Some(false) {
        p.lean = None;
    }
}

/// Registers one thread may spend on the row before the kernel spills: 64 f32 values.
const MAX_VALUES_PER_THREAD: u32 = 64;

/// Deepest ring of staged rows a spec may ask for.
const MAX_ROW_STAGES: u32 = 4;

/// Rows in a staged block's shared-memory ring (1: copy, then compute, one row per block).
pub fn stages(inst: &Instance) -> u32 {
    inst.params.stages.unwrap_or(DEFAULT_ROW_STAGES)
}

/// Every parameter the kernel uses, defaults filled in (see `ops::resolved`): the variant
/// always, `stages` for the staged variant only.
pub fn resolved(inst: &Instance) -> Params {
    let mut p = inst.params.clone();
    defaults(inst.op, &mut p);
    let variant = *p.variant.get_or_insert(DEFAULT_VARIANT);
    p.stages = (variant == RowVariant::Staged).then(|| stages(inst));
    p
}

/// Rows each block of a staged ring owns (every gridDim.x-th from its first), so that the
/// ring has rows to prefetch and held weights pay off. A fixed count rather than a grid of
/// exactly the resident blocks: on the H200 that was faster (0.87 against 0.85 of the
/// copy for layernorm bf16 at 4096 columns) and needs no occupancy figure at launch.
/// A spec may ask for another count (`rows_per_block`): fewer rows shorten the blocks still
/// running when the grid runs out, more load weights once for more rows.
const RING_ROWS_PER_BLOCK: u32 = 8;

/// Most rows a spec may give each block of a ring.
const MAX_RING_ROWS_PER_BLOCK: u32 = 64;

/// A staged ring of 2+ rows: each block owns several rows.
fn ring(inst: &Instance) -> bool {
    inst.params.variant == Some(RowVariant::Staged) && stages(inst) > 1
}

fn rows_per_block(inst: &Instance) -> u32 {
    if ring(inst) {
        inst.params.rows_per_block.unwrap_or(RING_ROWS_PER_BLOCK)
    } else {
        1
    }
}

/// Registers a norm block with a ring of rows spends holding its columns of weight (and
/// bias) as loaded, 4 per 16-byte vector; 0 when it reads them every row instead (no ring,
/// no weight, or too many to hold: see `weights`).
fn hoisted_registers(inst: &Instance) -> u32 {
    if !ring(inst) || inst.params.affine != Some(true) {
        return 0;
    }
    let per_item = match inst.op {
        Op::LayerNorm => 8,
        Op::RmsNorm | Op::AddRmsNorm => 4,
        _ => return 0,
    };
    let regs = per_item * inst.params.items.unwrap_or(1);
    // More than 32 held registers left too few for the row's own work (layernorm with 8
    // vectors per thread spilled); those kernels re-read weight per row instead.
    if regs <= 32 {
        regs
    } else {
        0
    }
}

/// Registers a thread may spend on weight (and bias) vectors loaded ahead of their use
/// (4 per vector): what the register cap leaves beyond the kernel's own work. A staged row
/// waits in shared memory and needs ~48 (at a 64 cap: 16; more spilled, and layernorm bf16
/// with 4 vectors ahead fell from 0.87 to 0.64 of the copy on the H200); a row held in
/// registers needs its values as f32 plus ~32 (long register rows: none left).
fn prefetch_budget(inst: &Instance) -> u32 {
    let own = if inst.params.variant == Some(RowVariant::Staged) {
        // add_rmsnorm holds its row of r as loaded (4 per vector) while x's row is staged.
        48 + residual_registers(inst)
    } else {
        values_per_thread(inst) + 32
    };
    register_cap(inst).saturating_sub(own)
}

/// Registers a staged add_rmsnorm thread holds its vectors of r in (see `residual_ahead`).
fn residual_registers(inst: &Instance) -> u32 {
    4 * residual_ahead(inst)
}

/// How many 16-byte vectors of r an add_rmsnorm thread has in flight (0 for other ops): the
/// first ones are asked for with x's row (before waiting on a staged row), and each one used
/// asks for the next. As many as the register cap leaves beside the row's own work (a staged
/// row ~48 registers, a row in registers its values plus ~16), at least one: holding all of
/// r as well spilled (f32 1024×8 in registers: 170 bytes, 0.62 of the copy on the H200; staged
/// f32 1024×8 with all 8 ahead: 44 bytes, 0.73 against 0.745 with 4).
fn residual_ahead(inst: &Instance) -> u32 {
    if inst.op != Op::AddRmsNorm {
        return 0;
    }
    let own = if inst.params.variant == Some(RowVariant::Staged) {
        48
    } else {
        values_per_thread(inst) + 16
    };
    let items = inst.params.items.unwrap_or(1);
    (register_cap(inst).saturating_sub(own) / 4).clamp(1, items)
}

/// Registers per thread that `min_blocks` blocks per SM leave (allocated 8 at a time).
fn register_cap(inst: &Instance) -> u32 {
    let threads = min_blocks(inst) * inst.params.block.unwrap_or(256).max(1);
    ((65536 / threads) & !7).min(255)
}

fn values_per_thread(inst: &Instance) -> u32 {
    inst.params.items.unwrap_or(1) * inst.dtype.per_16_bytes()
}

/// How a norm reads its weight (and bias): see `norm.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weights {
    None,
    /// Small rows in registers: all of it, loaded with the row.
    Preload,
    /// A ring of rows: held, as loaded, across the block's rows.
    Hoist,
    /// Re-read every row, this many 16-byte vectors ahead of their use (the first ones before
    /// the row's statistics, whose reduction then hides their latency).
    Prefetch(u32),
    /// Re-read every row where used: no registers left to load ahead.
    Reread,
}

fn weights(inst: &Instance) -> Weights {
    if inst.op == Op::Softmax || inst.params.affine != Some(true) {
        return Weights::None;
    }
    if hoisted_registers(inst) > 0 {
        return Weights::Hoist;
    }
    if inst.params.variant != Some(RowVariant::Staged) && values_per_thread(inst) <= 8 {
        return Weights::Preload;
    }
    let per_vector = if inst.op == Op::LayerNorm { 8 } else { 4 };
    let items = inst.params.items.unwrap_or(1);
    match (prefetch_budget(inst) / per_vector).min(items) {
        0 => Weights::Reread,
        ahead => Weights::Prefetch(ahead),
    }
}

pub fn check(inst: &Instance) -> Vec<(Field, String)> {
    let mut out = Vec::new();
    let p = &inst.params;
    if inst.op != Op::Softmax && p.variant == Some(RowVariant::Online) {
        out.push((
            Field::Variant,
            format!("{} has no online variant (onepass or staged)", inst.op),
        ));
    }
    if let Some(st) = p.stages {
        if p.variant != Some(RowVariant::Staged) {
            out.push((
                Field::Stages,
                "stages is the depth of the staged variant's row ring; set `variant: staged` or leave stages out".into(),
            ));
        } else if !(1..=MAX_ROW_STAGES).contains(&st) {
            out.push((
                Field::Stages,
                format!("stages must be from 1 to {MAX_ROW_STAGES}, not {st}"),
            ));
        }
    }
    if let Some(rpb) = p.rows_per_block {
        if p.variant != Some(RowVariant::Staged) || p.stages.unwrap_or(1) < 2 {
            out.push((
                Field::RowsPerBlock,
                "rows_per_block is how many rows each block of a staged ring owns; set `variant: staged` and `stages` 2 or more, or leave rows_per_block out".into(),
            ));
        } else if !(1..=MAX_RING_ROWS_PER_BLOCK).contains(&rpb) {
            out.push((
                Field::RowsPerBlock,
                format!("rows_per_block must be from 1 to {MAX_RING_ROWS_PER_BLOCK}, not {rpb}"),
            ));
        }
    }
    if p.lean == Some(true) && (p.variant != Some(RowVariant::Staged) || p.stages.unwrap_or(1) < 2)
    {
        out.push((
            Field::Lean,
            "lean trims the per-row work of a staged ring; set `variant: staged` and `stages` 2 or more, or leave lean out".into(),
        ));
    }
    out.extend(
        p.block
            .and_then(|b| pow2_problem(Field::Block, b, 32, 1024)),
    );
    if let Some(i) = p.items {
        if let Some(problem) = pow2_problem(Field::Items, i, 1, 32) {
            out.push(problem);
        } else if i * inst.dtype.per_16_bytes() > MAX_VALUES_PER_THREAD {
            out.push((
                Field::Items,
                format!(
                    "items {i} holds {} {} values per thread in registers, over the limit of {MAX_VALUES_PER_THREAD}",
                    i * inst.dtype.per_16_bytes(),
                    inst.dtype
                ),
            ));
        }
    }
    out
}

pub fn signature(inst: &Instance) -> Vec<Arg> {
    let t = inst.dtype;
    let mut args = vec![Arg::input("x", t)];
    if inst.op == Op::AddRmsNorm {
        args.push(Arg::input("r", t));
    }
    let affine = inst.params.affine == Some(true);
    match inst.op {
        Op::LayerNorm if affine => {
            args.push(Arg::input("weight", t));
            args.push(Arg::input("bias", t));
        }
        Op::RmsNorm | Op::AddRmsNorm if affine => args.push(Arg::input("weight", t)),
        _ => {}
    }
    if inst.op == Op::AddRmsNorm {
        args.push(Arg::output("h", t));
        args.push(Arg::output("y", t));
    } else {
        args.push(Arg::output("out", t));
    }
    args.push(Arg::scalar("rows", "i64"));
    args.push(Arg::scalar("cols", "i64"));
    if inst.op != Op::Softmax {
        args.push(Arg::scalar("eps", "f32"));
    }
    args
}

/// Longest row the kernel handles, or None when it streams rows of any length.
pub fn max_cols(inst: &Instance) -> Option<u32> {
    if inst.params.variant == Some(RowVariant::Online) {
        return None;
    }
    let block = inst.params.block.unwrap_or(256);
    let items = inst.params.items.unwrap_or(1);
    Some(block * items * inst.dtype.per_16_bytes())
}

/// Dynamic shared memory: the staged variant keeps `stages` whole rows.
fn shared_bytes(inst: &Instance) -> u32 {
    match inst.params.variant {
        Some(RowVariant::Staged) => {
            (max_cols(inst).unwrap_or(0) * inst.dtype.size()).saturating_mul(stages(inst))
        }
        _ => 0,
    }
}

pub fn launch(inst: &Instance) -> Launch {
    let shared_bytes = shared_bytes(inst);
    Launch {
        threads: inst.params.block.unwrap_or(256),
        grid: GridRule::Rows {
            rows_per_block: rows_per_block(inst),
            max_cols: max_cols(inst),
        },
        shared_bytes,
    }
}

/// Blocks per SM the kernel asks the compiler to fit (`__launch_bounds__`'s minimum), which
/// caps its registers. Bandwidth needs ~64 KiB of loads in flight per SM: small register rows
/// ask for a full SM of threads as far as their registers allow without spilling; staged rows
/// as many blocks as their shared memory allows; large register rows need their registers.
pub fn min_blocks(inst: &Instance) -> u32 {
    let block = inst.params.block.unwrap_or(256).max(1);
    let values = values_per_thread(inst);
    let threads_per_sm = match (inst.params.variant, inst.op) {
        (Some(RowVariant::Staged), _) => {
            let per_block = shared_bytes(inst) + 1024; // + the runtime's reserve
            let blocks = (Arch::Sm90.max_shared_per_block() + 1024) / per_block;
            // Long rows leave each thread many vectors to walk: a norm gets 64 registers
            // (1024 threads). Short rows need little beyond one vector, and softmax (no weights
            // to load) fits 40 registers even at 64 values per thread: 1536 threads (42
            // registers), i.e. three 512-thread blocks of 64 KiB rows. Weight held across rows
            // comes on top.
            // add_rmsnorm also holds its row of r: 64 registers at any length.
            let threads = if (values > 16 && inst.op != Op::Softmax) || inst.op == Op::AddRmsNorm {
                1024
            } else {
                1536
            };
            let by_registers = match hoisted_registers(inst) {
                0 => threads,
                // Registers are allocated 8 at a time: round up, or the cap lands under need.
                held => 65536 / (65536 / threads + held).next_multiple_of(8),
            };
            (blocks * block).min(by_registers)
        }
        _ if values > 16 => block,
        (_, Op::Softmax) => 2048,
        (_, Op::RmsNorm) if values <= 8 => 2048,
        (_, Op::RmsNorm) => 1536,
        (_, _) if values <= 8 => 1536,
        _ => 1024,
    };
    (threads_per_sm / block).max(1)
}

/// How far ahead of its own row a block warms L2 (prelude.cuh, `tg_prefetch_row_l2`), in
/// bytes of rows. On the H200 (bench/notes-memory.md), 1, 2 and 4 MiB ahead lifted the row
/// ops from 0.76–0.96 of the copy to 0.80–0.99, 2 MiB the best on the whole; 8 MiB and more
/// evicted rows before their blocks came (0.72–0.93); a ring of staged rows lost (0.89 → 0.86).
const L2_AHEAD_BYTES: u32 = 2 << 20;

/// Bytes of rows to warm in L2 ahead: none for rings of staged rows whose blocks own several
/// rows (far apart, prefetched into shared memory) and for the online softmax (it reads each
/// row twice, the second time from L2). A ring of one row per block hands rows out in order,
/// as one-row blocks do, so it warms them too.
fn l2_ahead_bytes(inst: &Instance) -> u32 {
    if (ring(inst) && rows_per_block(inst) > 1) || inst.params.variant == Some(RowVariant::Online) {
        0
    } else if inst.op == Op::AddRmsNorm {
        L2_AHEAD_BYTES / 2 // each of x and r: as many bytes ahead in all
    } else {
        L2_AHEAD_BYTES
    }
}

pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    let weights = weights(inst);
    vec![
        ("min_blocks", min_blocks(inst).into()),
        ("l2_ahead_bytes", l2_ahead_bytes(inst).into()),
        ("stages", stages(inst).into()),
        ("rows_per_block", rows_per_block(inst).into()),
        // The variant the kernel runs (a norm's default is not stored: `variant` is empty).
        (
            "row_variant",
            resolved(inst)
                .variant
                .unwrap_or(DEFAULT_VARIANT)
                .as_str()
                .into(),
        ),
        ("residual_ahead", residual_ahead(inst).into()),
        ("lean", (inst.params.lean == Some(true)).into()),
        (
            "weights_id",
            match weights {
                Weights::None => "TG_W_NONE",
                Weights::Preload => "TG_W_PRELOAD",
                Weights::Hoist => "TG_W_HOIST",
                Weights::Prefetch(_) => "TG_W_PREFETCH",
                Weights::Reread => "TG_W_REREAD",
            }
            .into(),
        ),
        // tg_norm_rows's pointers (norm.cu); add_rmsnorm's output is `y`.
        (
            "norm_pointers",
            super::forward_args(
                inst,
                &[
                    ("x", "x"),
                    ("r", "nullptr"),
                    ("weight", "nullptr"),
                    ("bias", "nullptr"),
                    ("h", "nullptr"),
                    ("out", "y"),
                ],
            )
            .into(),
        ),
        (
            "prefetch_vectors",
            match weights {
                Weights::Prefetch(n) => n,
                _ => 0,
            }
            .into(),
        ),
    ]
}

/// The staged variant copies with cp.async, which sm_80 introduced.
pub fn arch_problem(inst: &Instance, arch: Arch) -> Option<String> {
    (inst.params.variant == Some(RowVariant::Staged) && arch.sm() < 80)
        .then(|| format!("the staged variant uses cp.async, which needs sm_80+; {arch} lacks it"))
}

/// The CPU references (`ops::verification`).
#[cfg(feature = "gpu")]
mod reference {
    use rayon::prelude::*;

    use crate::ops::verification::{
        Call, Expected, Problem, Verification, EX2_APPROX, LAYERNORM_EPS, U32,
    };
    use crate::spec::model::KernelConfig;

    pub const SOFTMAX: Verification = Verification {
        reference: softmax,
        typical_range: |_| (-8.0, 8.0),
        stressed: &["x"],
        outlier: Some(48.0),
        infinities: true,
    };
    pub const LAYERNORM: Verification = Verification {
        reference: layernorm,
        typical_range: norm_range,
        stressed: &["x"],
        outlier: None,
        infinities: false,
    };
    pub const RMSNORM: Verification = Verification {
        reference: rmsnorm,
        ..LAYERNORM
    };
    pub const ADD_RMSNORM: Verification = Verification {
        reference: add_rmsnorm,
        stressed: &["x", "r"],
        ..LAYERNORM
    };

    /// Rows of mean 1 and weights near 1: normalized outputs of order 1.
    fn norm_range(arg: &str) -> (f32, f32) {
        match arg {
            "x" => (-1.0, 3.0),
            "weight" => (0.5, 1.5),
            _ => (-2.0, 2.0),
        }
    }

    /// Additions on the longest path of a row reduction over `threads` threads: each thread's
    /// share in turn, then a tree across the block.
    fn row_sum_depth(cols: usize, threads: u32) -> f64 {
        let t = threads.max(1) as usize;
        cols.div_ceil(t) as f64 + (t as f64).log2().ceil() + 2.0
    }

    /// The rows of `x` each through `f(row, out, err, depth)`, the reduction depth of the
    /// kernel's block.
    fn each_row(
        call: &Call,
        f: impl Fn(&[f64], &mut [f64], &mut [f64], f64) + Sync,
    ) -> Result<Expected, String> {
        let Problem::Rows { rows, cols } = call.problem else {
            return Err(call.wrong_problem());
        };
        let x = call.input("x")?;
        let c = (cols as usize).max(1);
        let depth = row_sum_depth(c, call.threads);
        let mut ex = Expected::with_len((rows * cols) as usize);
        ex.values
            .par_chunks_mut(c)
            .zip(ex.err.par_chunks_mut(c))
            .zip(x.par_chunks(c))
            .for_each(|((o, e), row)| f(row, o, e, depth));
        Ok(ex)
    }

    fn softmax(call: &Call) -> Result<Expected, String> {
        each_row(call, |row, o, e, depth| softmax_row(row, o, e, depth, call))
    }

    fn layernorm(call: &Call) -> Result<Expected, String> {
        let (weight, bias) = (call.optional("weight"), call.optional("bias"));
        each_row(call, |row, o, e, depth| {
            layernorm_row(row, weight, bias, o, e, depth)
        })
    }

    fn rmsnorm(call: &Call) -> Result<Expected, String> {
        let weight = call.optional("weight");
        each_row(call, |row, o, e, depth| {
            rmsnorm_row(row, weight, o, e, depth)
        })
    }

    /// h as the kernel writes it: x + r in f32, rounded to the dtype; y is the norm of that
    /// rounded h. Expected: h exactly, then y (the kernel's outputs in order).
    fn add_rmsnorm(call: &Call) -> Result<Expected, String> {
        let Problem::Rows { rows, cols } = call.problem else {
            return Err(call.wrong_problem());
        };
        let (x, r) = (call.input("x")?, call.input("r")?);
        let (c, len) = (cols as usize, (rows * cols) as usize);
        let sums: Vec<f32> = x.iter().zip(r).map(|(a, b)| (a + b) as f32).collect();
        let h = crate::gpu::data::from_values(call.kernel.dtype, &sums).values;
        let mut ex = Expected::with_len(2 * len);
        let (hv, yv) = ex.values.split_at_mut(len);
        let (he, ye) = ex.err.split_at_mut(len);
        for (((hv, he), a), b) in hv.iter_mut().zip(he.iter_mut()).zip(x).zip(r) {
            *hv = a + b;
            *he = U32 * hv.abs();
        }
        let depth = row_sum_depth(c, call.threads);
        let weight = call.optional("weight");
        yv.par_chunks_mut(c.max(1))
            .zip(ye.par_chunks_mut(c.max(1)))
            .zip(h.par_chunks(c.max(1)))
            .for_each(|((o, e), row)| rmsnorm_row(row, weight, o, e, depth));
        Ok(ex)
    }

    /// Softmax of one row and its error bound. A row whose every entry is -inf has no
    /// maximum: its outputs are NaN (0/0), as in PyTorch; -inf entries of other rows give
    /// exactly 0.
    fn softmax_row(row: &[f64], o: &mut [f64], e: &mut [f64], depth: f64, call: &Call) {
        let kernel: &KernelConfig = call.kernel;
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for (o, v) in o.iter_mut().zip(row) {
            *o = (v - m).exp() / s;
        }
        if !m.is_finite() {
            return; // NaN everywhere: the comparison wants NaN
        }
        // exp((x - m)·log2e) on ex2.approx: two roundings of the argument (2U|x - m|
        // relative) plus the instruction's own error; the sum of the row's terms adds its
        // depth, the online variant's rescaling one ex2 per chunk.
        let chunks = row.len() as f64
            / (call.threads.max(1) as f64 * kernel.dtype.per_16_bytes() as f64)
            + 2.0;
        let term = |x: f64| 2.0 * U32 * (x - m).abs() + EX2_APPROX;
        let sum_rel: f64 = row
            .iter()
            .zip(o.iter())
            .filter(|(x, _)| x.is_finite())
            .map(|(&x, &y)| y * term(x))
            .sum::<f64>()
            + depth * U32
            + chunks * EX2_APPROX;
        for ((e, &x), &y) in e.iter_mut().zip(row).zip(o.iter()) {
            *e = if x.is_finite() {
                2.0 * y * (term(x) + sum_rel + 3.0 * U32)
            } else {
                0.0
            };
        }
    }

    /// Layer normalization of one row and its error bound, for kernels that sum x − x₀ and
    /// (x − x₀)² in one pass (x₀ the row's first element, so large offsets do not cancel).
    fn layernorm_row(
        row: &[f64],
        weight: &[f64],
        bias: &[f64],
        o: &mut [f64],
        e: &mut [f64],
        depth: f64,
    ) {
        let n = row.len() as f64;
        let mean = row.iter().sum::<f64>() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let rstd = 1.0 / (var + LAYERNORM_EPS as f64).sqrt();
        let shift = row[0];
        let s1 = row.iter().map(|v| (v - shift).abs()).sum::<f64>() / n;
        let s2 = row.iter().map(|v| (v - shift) * (v - shift)).sum::<f64>() / n;
        let k = depth + 4.0;
        let e_mean = k * U32 * s1 + U32 * mean.abs();
        let e_var = k * U32 * s2 + 2.0 * (mean - shift).abs() * e_mean;
        let rel_rstd = 0.5 * e_var / (var + LAYERNORM_EPS as f64) + 4.0 * U32;
        for (j, (o, v)) in o.iter_mut().zip(row).enumerate() {
            let y = (v - mean) * rstd;
            let e_y = rstd * (e_mean + U32 * (v - mean).abs()) + y.abs() * (rel_rstd + 2.0 * U32);
            if weight.is_empty() {
                *o = y;
                e[j] = 2.0 * e_y;
            } else {
                *o = y * weight[j] + bias[j];
                e[j] =
                    2.0 * (weight[j].abs() * e_y + U32 * ((y * weight[j]).abs() + bias[j].abs()));
            }
        }
    }

    /// RMS normalization of one row and its error bound.
    fn rmsnorm_row(row: &[f64], weight: &[f64], o: &mut [f64], e: &mut [f64], depth: f64) {
        let n = row.len() as f64;
        let ms = row.iter().map(|v| v * v).sum::<f64>() / n;
        let rstd = 1.0 / (ms + LAYERNORM_EPS as f64).sqrt();
        let rel_rstd = 0.5 * (depth + 4.0) * U32 * ms / (ms + LAYERNORM_EPS as f64) + 4.0 * U32;
        for (j, (o, v)) in o.iter_mut().zip(row).enumerate() {
            let w = if weight.is_empty() { 1.0 } else { weight[j] };
            *o = v * rstd * w;
            e[j] = 2.0 * o.abs() * (rel_rstd + 3.0 * U32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(op: Op, dtype: DType, block: u32, items: u32, stages: Option<u32>) -> Instance {
        let mut params = Params {
            block: Some(block),
            items: Some(items),
            variant: Some(RowVariant::Staged),
            stages,
            ..Default::default()
        };
        defaults(op, &mut params);
        Instance::for_test(op, dtype, params)
    }

    #[test]
    fn ring_geometry() {
        // One row per block, 8 KiB of shared memory, 6 blocks of 256 threads per SM.
        let one = staged(Op::LayerNorm, DType::Bf16, 256, 2, None);
        assert_eq!(launch(&one).shared_bytes, 8192);
        assert!(matches!(
            launch(&one).grid,
            GridRule::Rows {
                rows_per_block: 1,
                ..
            }
        ));
        assert_eq!(min_blocks(&one), 6);
        // A ring of 3: three rows of shared memory, blocks of 8 rows, 16 registers of held
        // weight and bias, so 4 blocks (64 registers) instead of 6.
        let ring3 = staged(Op::LayerNorm, DType::Bf16, 256, 2, Some(3));
        assert_eq!(launch(&ring3).shared_bytes, 3 * 8192);
        assert!(matches!(
            launch(&ring3).grid,
            GridRule::Rows {
                rows_per_block: 8,
                ..
            }
        ));
        assert_eq!(hoisted_registers(&ring3), 16);
        assert_eq!(min_blocks(&ring3), 4);
        // Too many held registers (layernorm, 8 vectors): weights are re-read instead.
        assert_eq!(
            hoisted_registers(&staged(Op::LayerNorm, DType::Bf16, 512, 8, Some(2))),
            0
        );
        // Long staged rows: softmax fits three blocks per SM, a norm two.
        assert_eq!(
            min_blocks(&staged(Op::Softmax, DType::Bf16, 512, 8, None)),
            3
        );
        assert_eq!(
            min_blocks(&staged(Op::RmsNorm, DType::Bf16, 512, 8, None)),
            2
        );
    }

    #[test]
    fn weight_loading_fits_the_register_cap() {
        // Long staged rows (64-register cap, the row in shared memory): 16 registers of
        // vectors ahead, 2 for layernorm (weight and bias), 4 for rmsnorm.
        assert_eq!(
            weights(&staged(Op::LayerNorm, DType::Bf16, 512, 8, None)),
            Weights::Prefetch(2)
        );
        assert_eq!(
            weights(&staged(Op::RmsNorm, DType::Bf16, 512, 8, None)),
            Weights::Prefetch(4)
        );
        assert_eq!(
            weights(&staged(Op::LayerNorm, DType::F32, 1024, 8, None)),
            Weights::Prefetch(2)
        );
        // Short staged rows run at 40 registers: nothing to spare.
        assert_eq!(
            weights(&staged(Op::LayerNorm, DType::Bf16, 256, 2, None)),
            Weights::Reread
        );
        // A ring holds them; long register rows have no room; small ones load all at once.
        assert_eq!(
            weights(&staged(Op::LayerNorm, DType::Bf16, 256, 2, Some(3))),
            Weights::Hoist
        );
        let mut onepass = staged(Op::LayerNorm, DType::F32, 1024, 8, None);
        onepass.params.variant = Some(RowVariant::OnePass);
        assert_eq!(weights(&onepass), Weights::Reread);
        onepass.params.items = Some(2);
        assert_eq!(weights(&onepass), Weights::Preload);
        onepass.params.affine = Some(false);
        assert_eq!(weights(&onepass), Weights::None);
    }

    #[test]
    fn rows_warmed_in_l2_ahead() {
        // One-row blocks warm L2 ahead; rings (rows far apart, prefetched into shared memory)
        // and the online softmax (it re-reads rows from L2) do not.
        assert_eq!(
            l2_ahead_bytes(&staged(Op::Softmax, DType::Bf16, 512, 8, None)),
            L2_AHEAD_BYTES
        );
        assert_eq!(
            l2_ahead_bytes(&staged(Op::LayerNorm, DType::Bf16, 256, 2, Some(3))),
            0
        );
        let mut online = staged(Op::Softmax, DType::F32, 512, 2, None);
        online.params.variant = Some(RowVariant::Online);
        assert_eq!(l2_ahead_bytes(&online), 0);
        online.params.variant = Some(RowVariant::OnePass);
        assert_eq!(l2_ahead_bytes(&online), L2_AHEAD_BYTES);
    }

    #[test]
    fn add_rmsnorm_keeps_r_in_flight_and_writes_h_and_y() {
        // As many vectors of r as the register cap leaves: a staged row (64 registers, ~48
        // its own) 4; a row in registers (f32 1024×8: 32 values + 16) 4.
        assert_eq!(
            residual_ahead(&staged(Op::AddRmsNorm, DType::F32, 1024, 8, None)),
            4
        );
        let mut onepass = staged(Op::AddRmsNorm, DType::F32, 1024, 8, None);
        onepass.params.variant = Some(RowVariant::OnePass);
        assert_eq!(residual_ahead(&onepass), 4);
        assert_eq!(
            residual_ahead(&staged(Op::RmsNorm, DType::F32, 1024, 8, None)),
            0
        );
        let names: Vec<String> = signature(&onepass).into_iter().map(|a| a.name).collect();
        assert_eq!(names, ["x", "r", "weight", "h", "y", "rows", "cols", "eps"]);
    }

    #[test]
    fn stages_need_the_staged_variant() {
        let mut i = staged(Op::Softmax, DType::Bf16, 256, 2, Some(3));
        assert!(check(&i).is_empty(), "{:?}", check(&i));
        i.params.stages = Some(5);
        assert_eq!(check(&i)[0].0, Field::Stages);
        i.params.stages = Some(2);
        i.params.variant = Some(RowVariant::OnePass);
        assert_eq!(check(&i)[0].0, Field::Stages);
    }
}
