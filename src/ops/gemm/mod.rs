//! GEMM: D = epilogue(A·B), A M×K and B K×N, f32 accumulation. f16/bf16 run on the
//! tensor-core path (cp.async multistage pipeline, ldmatrix, mma.sync.m16n8k16); f32 runs on
//! a register-tiled SIMT path, or TF32 tensor cores (mma.sync.m16n8k8) when `tf32: true`.
//!
//! Every number the template needs about shared memory (row pitches, stage sizes, how the
//! threads split the tile copies) is derived here once, in `Plan`, so that the launch's
//! dynamic shared memory and the kernel's own layout cannot disagree.

use super::{epilogue, is_pow2_in, Field, OpFamily, OpInfo};
use crate::launch::{Arg, GridRule, Launch, TensorMap};
use crate::spec::model::{Arch, DType, Engine, Epilogue, Instance, Layout, Params};

pub mod calls;
#[cfg(feature = "gpu")]
mod cases;
pub mod sm90;

pub static GEMM: OpInfo = OpInfo {
    template: "gemm.cu",
    dtypes: &[DType::F32, DType::F16, DType::Bf16],
    fields: &[
        Field::Tile,
        Field::Warp,
        Field::Stages,
        Field::Layout,
        Field::Tf32,
        Field::OutDtype,
        Field::Epilogue,
        Field::Engine,
        Field::SplitK,
        Field::Multicast,
        Field::Pingpong,
    ],
    epilogues: &[
        Epilogue::Scale,
        Epilogue::Bias,
        Epilogue::Relu,
        Epilogue::Gelu,
        Epilogue::GeluErf,
        Epilogue::Silu,
        Epilogue::Residual,
    ],
    what: |k| {
        let layout = k.params.layout.unwrap_or(Layout::Nn);
        let major = |transposed: bool| {
            if transposed {
                "column-major"
            } else {
                "row-major"
            }
        };
        let chain: Vec<&str> = k.epilogue.iter().map(|e| e.as_str()).collect();
        format!(
            "`d = epilogue(a · b)`, `a` m×k {} (leading dimension `lda`), `b` k×n {} (`ldb`), `d` m×n row-major (`ldd`), f32 accumulation; epilogue: [{}].",
            major(layout.a_transposed()),
            major(layout.b_transposed()),
            chain.join(", ")
        )
    },
    #[cfg(feature = "gpu")]
    verification: Some(reference::GEMM),
};

/// Leading dimensions (in elements) of dense operands of an m×n×k product in `layout`:
/// `(lda, ldb, ldd)`, each its operand's row as stored.
pub fn dense_ld(layout: Layout, m: u64, n: u64, k: u64) -> (u64, u64, u64) {
    let lda = if layout.a_transposed() { m } else { k };
    let ldb = if layout.b_transposed() { k } else { n };
    (lda, ldb, n)
}

/// Output tiles of one group in the block order: GROUP_M tile rows are walked column by column
/// so that consecutive blocks share A and B panels in L2.
pub const GROUP_M: u32 = 8;
/// Pipeline depth when a spec gives none: 3 on tensor cores, 2 (double-buffered through
/// registers, the only depth it has) on the SIMT path.
const DEFAULT_TC_STAGES: u32 = 3;
const SIMT_STAGES: u32 = 2;
/// The SIMT path computes an 8×8 block of D per thread (as 2×2 blocks of 4×4).
const SIMT_THREAD_TILE: u32 = 8;
/// Accumulators plus double-buffered fragments per thread above which ptxas is expected to
/// spill (it has 255 registers; addresses, masks and the loop need the rest).
const MAX_FRAGMENT_REGS: u32 = 192;

/// Row padding, in output elements, of the staged output tile (conflict-free pair writes for
/// 16- and 32-bit outputs).
const EPI_PAD: u32 = 8;

/// The family's table (`ops::family`).
pub static FAMILY: OpFamily = OpFamily {
    info: |_| &GEMM,
    defaults: |_, p| defaults(p),
    check,
    resolved,
    signature,
    launch,
    template,
    tensor_maps,
    template_values,
    arch_problem,
    shared_memory_field: Field::Stages,
    #[cfg(feature = "gpu")]
    cases: &cases::CASES,
    calls: &calls::CALLS,
    name_head: super::no_name_head,
};

pub fn defaults(p: &mut Params) {
    // The default engine is never stored: instances that do not ask for one keep their
    // names and config hashes.
    if p.engine == Some(Engine::MmaSync) {
        p.engine = None;
    }
    if wgmma(p) {
        sm90::defaults(p);
        return;
    }
    p.tile.get_or_insert([128, 128, 32]);
    p.warp.get_or_insert([64, 64]);
    // `stages` is left unset when the spec gives none: its default depends on the path
    // (tensor cores or SIMT), which depends on the dtype, which is not known here.
    p.layout.get_or_insert(Layout::Nn);
    p.tf32.get_or_insert(false);
}

/// Every parameter the kernel uses, defaults filled in (see `ops::resolved`): `stages` as
/// the pipeline has it; no `warp` on the wgmma engine.
pub fn resolved(inst: &Instance) -> Params {
    let mut p = inst.params.clone();
    defaults(&mut p);
    if wgmma(&p) {
        p.warp = None;
        p.stages = Some(sm90::stages(&p));
        // One block per cluster is no split: never stored, so names and hashes stay.
        p.split_k = p.split_k.filter(|&k| k != 1);
        p.multicast = p.multicast.filter(|&c| c != 1);
        p.pingpong = p.pingpong.filter(|&on| on);
    } else {
        p.stages = Some(stages(inst));
    }
    p
}

/// Pipeline depth: the spec's, or the default of the path (tensor cores or SIMT).
fn stages(inst: &Instance) -> u32 {
    let tc = tensor_cores(inst);
    inst.params
        .stages
        .unwrap_or(if tc { DEFAULT_TC_STAGES } else { SIMT_STAGES })
}

/// True when the parameters ask for the sm_90a wgmma engine.
pub fn wgmma(p: &Params) -> bool {
    p.engine == Some(Engine::Wgmma)
}

/// True when the kernel stages its bias halved for the GELU after it
/// ([`epilogue::halvable_bias`]): the wgmma kernels, whose producer warp stages each tile's bias
/// and whose fused epilogue is bound by instruction issue. The mma.sync kernels keep the whole
/// bias and their binaries: their time is in the main loop, and the change was measured on
/// the wgmma kernels only.
pub fn halves_bias(inst: &Instance) -> bool {
    wgmma(&inst.params)
        && epilogue::halvable_bias(&inst.epilogue, epilogue::Chain::Gemm, inst.out_dtype)
}

/// The template that renders the instance.
pub fn template(inst: &Instance) -> &'static str {
    if wgmma(&inst.params) {
        "gemm_sm90.cu"
    } else if Plan::new(inst).tc {
        GEMM.template
    } else {
        "gemm_simt.cu"
    }
}

/// The instance's tensor-map parameters (wgmma engine only).
pub fn tensor_maps(inst: &Instance) -> Vec<TensorMap> {
    if wgmma(&inst.params) {
        sm90::tensor_maps(inst)
    } else {
        Vec::new()
    }
}

/// True when the instance runs on tensor cores.
pub fn tensor_cores(inst: &Instance) -> bool {
    inst.dtype != DType::F32 || inst.params.tf32 == Some(true)
}

/// How one operand tile (A or B) sits in shared memory and how the threads copy it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OperandPlan {
    /// k is the contiguous dimension in global memory (A row-major, B column-major). The
    /// tensor-core path keeps the global order in shared memory; the SIMT path always stores
    /// k-major ([k][m] / [k][n]) and transposes k-contiguous operands on the way in.
    k_contiguous: bool,
    /// Rows of the shared-memory tile (its columns are contiguous).
    rows: u32,
    /// Row pitch in elements: the tile's columns plus padding.
    ld: u32,
    /// Global-memory tile as the copy sees it: `outer` rows of `inner` contiguous elements.
    outer: u32,
    inner: u32,
    /// 16-byte chunks per global row, chunks per thread, rows one pass of all threads covers.
    chunks_per_row: u32,
    iters: u32,
    rows_per_pass: u32,
}

/// Everything derived from an instance's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    tc: bool,
    tile: [u32; 3],
    warp: [u32; 2],
    warps_m: u32,
    warps_n: u32,
    threads: u32,
    stages: u32,
    elem: u32,
    out_elem: u32,
    /// Tensor cores without a residual: the output tile goes through shared memory (after
    /// the epilogue, as output elements) and out in 16-byte coalesced stores; +4-7% on the
    /// H200 at 128x256 against pair stores from registers (bench/notes-gemm.md).
    staged_output: bool,
    /// Tensor cores with a bias: the tile's bias columns, as f32, wait in shared memory
    /// behind the other uses (loaded while the first k tiles are in flight, so the epilogue
    /// does not stall on global loads with nothing else running on the SM).
    staged_bias: bool,
    a: OperandPlan,
    b: OperandPlan,
}

impl Plan {
    fn new(inst: &Instance) -> Plan {
        let p = &inst.params;
        let tile = p.tile.unwrap_or([128, 128, 32]);
        let warp = p.warp.unwrap_or([64, 64]);
        let [tm, tn, tk] = tile;
        let (wm, wn) = (warp[0].max(1), warp[1].max(1));
        let (warps_m, warps_n) = ((tm / wm).max(1), (tn / wn).max(1));
        let threads = warps_m * warps_n * 32;
        let tc = tensor_cores(inst);
        let stages = stages(inst);
        let layout = p.layout.unwrap_or(Layout::Nn);
        let elem = inst.dtype.size();
        let vec = inst.dtype.per_16_bytes();
        // (A: m is its non-k dimension, k-contiguous when row-major; B: n, k-contiguous when
        // column-major.)
        let operand = |mn: u32, k_contiguous: bool| -> OperandPlan {
            let (outer, inner) = if k_contiguous { (mn, tk) } else { (tk, mn) };
            let (rows, cols, pad) = if tc {
                // Global order kept. Pads keep ldmatrix and the tf32 scalar fragment loads
                // conflict-free: 16 bytes (odd number of 16-byte units per row, as every
                // power-of-two tile edge ≥ 16 gives) except f32 [k][mn] tiles, read by 32-bit
                // loads at (k = lane%4, mn = lane/4), which need a pitch ≡ 8 (mod 32) words.
                let pad = if !k_contiguous && elem == 4 {
                    8
                } else {
                    16 / elem
                };
                (outer, inner, pad)
            } else {
                // SIMT: always [k][mn], 4 floats of padding (transposing stores then hit 32
                // distinct banks; reads are 16-byte vectors along mn).
                (tk, mn, 4)
            };
            let chunks_per_row = (inner / vec).max(1);
            let chunks = outer * inner / vec;
            OperandPlan {
                k_contiguous,
                rows,
                ld: cols + pad,
                outer,
                inner,
                chunks_per_row,
                iters: chunks / threads.max(1),
                rows_per_pass: threads / chunks_per_row,
            }
        };
        Plan {
            tc,
            tile,
            warp,
            warps_m,
            warps_n,
            threads,
            stages,
            elem,
            out_elem: inst.out_dtype.size(),
            staged_output: tc && !inst.has_epilogue(Epilogue::Residual),
            staged_bias: tc && inst.has_epilogue(Epilogue::Bias),
            a: operand(tm, !layout.a_transposed()),
            b: operand(tn, layout.b_transposed()),
        }
    }

    /// `__launch_bounds__` minimum blocks per SM. Tensor-core tiles get 1, so ptxas may use
    /// up to 255 registers (64x64 warp tiles need ~250). The SIMT path gets the minimum that
    /// caps it at 128 registers per thread (two blocks of 256 threads per SM, which hides the
    /// per-k-tile barrier) when its estimate fits: 64 accumulators, 32 for double-buffered
    /// operands, 4 per staged chunk and ~24 for addressing. Larger staging (tile k 32+)
    /// would spill under the cap, so it runs uncapped at one block per SM.
    fn min_blocks(&self) -> u32 {
        const SIMT_REG_CAP: u32 = 128;
        if self.tc {
            return 1;
        }
        // Tile k 16 estimates 136 but compiles to 128 without spilling when at most one
        // operand is transposed on its way into shared memory, and then ran 2-3% faster
        // capped than uncapped on the H200: allow that much over there.
        let estimate = 64 + 32 + 4 * (self.a.iters + self.b.iters) + 24;
        let slack = if self.a.k_contiguous && self.b.k_contiguous {
            0
        } else {
            8
        };
        if estimate <= SIMT_REG_CAP + slack {
            (65536 / (self.threads * SIMT_REG_CAP)).max(1)
        } else {
            1
        }
    }

    fn stage_bytes(&self, o: &OperandPlan) -> u32 {
        o.rows * o.ld * self.elem
    }

    /// Dynamic shared memory: `stages` copies of the A tile then the B tile (and at least
    /// the staged output tile, which reuses it), then the staged bias.
    fn shared_bytes(&self) -> u32 {
        self.bias_offset() + self.bias_bytes()
    }

    /// Byte offset of the staged bias: past everything the pipeline and the output reuse.
    fn bias_offset(&self) -> u32 {
        self.pipeline_bytes().max(self.epilogue_bytes())
    }

    fn bias_bytes(&self) -> u32 {
        if self.staged_bias {
            self.tile[1] * 4
        } else {
            0
        }
    }

    fn pipeline_bytes(&self) -> u32 {
        self.stages * (self.stage_bytes(&self.a) + self.stage_bytes(&self.b))
    }

    fn epilogue_bytes(&self) -> u32 {
        if self.staged_output {
            self.tile[0] * (self.tile[1] + EPI_PAD) * self.out_elem
        } else {
            0
        }
    }
}

pub fn check(inst: &Instance) -> Vec<(Field, String)> {
    if wgmma(&inst.params) {
        return sm90::check(inst);
    }
    let mut out = Vec::new();
    if let Some(k) = inst.params.split_k.filter(|&k| k != 1) {
        out.push((
            Field::SplitK,
            format!(
                "split_k {k} needs engine wgmma (its blocks sum partial tiles through a cluster)"
            ),
        ));
    }
    if let Some(c) = inst.params.multicast.filter(|&c| c != 1) {
        out.push((
            Field::Multicast,
            format!("multicast {c} needs engine wgmma (TMA multicast within a cluster)"),
        ));
    }
    if inst.params.pingpong == Some(true) {
        out.push((
            Field::Pingpong,
            "pingpong needs engine wgmma (consumer warpgroups on alternate tiles)".into(),
        ));
    }
    let [tm, tn, tk] = inst.params.tile.unwrap_or([128, 128, 32]);
    let [wm, wn] = inst.params.warp.unwrap_or([64, 64]);
    let tc = tensor_cores(inst);
    for (v, what) in [(tm, "tile m"), (tn, "tile n")] {
        if !is_pow2_in(v, 16, 256) {
            out.push((
                Field::Tile,
                format!("{what} must be a power of two from 16 to 256, not {v}"),
            ));
        }
    }
    if !is_pow2_in(tk, 8, 128) {
        out.push((
            Field::Tile,
            format!("tile k must be a power of two from 8 to 128, not {tk}"),
        ));
    }
    if inst.dtype == DType::F32 && inst.out_dtype != DType::F32 {
        out.push((Field::OutDtype, "an f32 GEMM writes f32".to_string()));
    }
    if inst.dtype != DType::F32 && inst.params.tf32 == Some(true) {
        out.push((
            Field::Tf32,
            format!("tf32 applies to f32 inputs, not {}", inst.dtype),
        ));
    }
    if let Some(s) = inst.params.stages {
        if !tc && s != SIMT_STAGES {
            out.push((
                Field::Stages,
                format!(
                    "the f32 SIMT path double-buffers shared memory through registers: stages must be \
                     {SIMT_STAGES} (or left out), not {s}; `tf32: true` gives a multistage pipeline"
                ),
            ));
        } else if tc && !(2..=8).contains(&s) {
            out.push((
                Field::Stages,
                format!("stages must be from 2 to 8, not {s}"),
            ));
        }
    }
    if !out.is_empty() {
        return out;
    }

    // Warp tiling.
    let min_w = 16;
    if !is_pow2_in(wm, min_w, 128) || !is_pow2_in(wn, min_w, 128) {
        out.push((
            Field::Warp,
            format!("warp tile must be powers of two from {min_w} to 128, not {wm}x{wn}"),
        ));
        return out;
    }
    if wm > tm || wn > tn {
        out.push((
            Field::Warp,
            format!("warp tile {wm}x{wn} does not fit in block tile {tm}x{tn}"),
        ));
        return out;
    }
    let warps = (tm / wm) * (tn / wn);
    if !(1..=16).contains(&warps) {
        out.push((
            Field::Warp,
            format!("{tm}x{tn} tile over {wm}x{wn} warp tiles makes {warps} warps; 1 to 16 work"),
        ));
        return out;
    }
    if tc {
        // mma.sync m16n8k16 (k8 for tf32); B fragments come two n8 tiles per ldmatrix.x4, so
        // both warp edges are multiples of 16 (the power-of-two rule above gives that).
        let mma_k = if inst.dtype == DType::F32 { 8 } else { 16 };
        if tk < 2 * mma_k {
            out.push((
                Field::Tile,
                format!(
                    "tile k must be at least {} on this path: each k tile is walked in an even number of \
                     k{mma_k} mma steps (fragments are double-buffered in registers), not {tk}",
                    2 * mma_k
                ),
            ));
        }
        let acc = wm * wn / 32;
        let frags = 2 * ((wm / 16) * 4 + (wn / 8) * 2);
        if acc + frags > MAX_FRAGMENT_REGS {
            out.push((
                Field::Warp,
                format!(
                    "warp tile {wm}x{wn} needs {acc} f32 accumulators and {frags} fragment registers per \
                     thread, over {MAX_FRAGMENT_REGS} (it would spill); 64x64 is the largest that fits"
                ),
            ));
        }
    } else {
        let per_thread = SIMT_THREAD_TILE * SIMT_THREAD_TILE;
        if wm * wn != 32 * per_thread {
            out.push((
                Field::Warp,
                format!(
                    "the f32 SIMT path computes {SIMT_THREAD_TILE}x{SIMT_THREAD_TILE} outputs per thread, so a \
                     warp tile covers {} elements (64x32, 32x64, 128x16 or 16x128), not {wm}x{wn}; \
                     e.g. `tile: [128, 128, 8]`, `warp: [64, 32]`",
                    32 * per_thread
                ),
            ));
        }
        if tk > 32 {
            out.push((
                Field::Tile,
                format!("the f32 SIMT path takes tile k from 8 to 32, not {tk}"),
            ));
        }
    }
    if !out.is_empty() {
        return out;
    }

    // Tile copies: each thread moves a whole number of 16-byte chunks, and one pass of all
    // threads covers whole rows (so a thread's chunks sit in one column of the tile).
    let plan = Plan::new(inst);
    for (o, name) in [(&plan.a, "A"), (&plan.b, "B")] {
        let chunks = o.outer * o.inner * inst.dtype.size() / 16;
        let ok = o.chunks_per_row <= plan.threads
            && plan.threads.is_multiple_of(o.chunks_per_row)
            && chunks.is_multiple_of(plan.threads)
            && chunks >= plan.threads;
        if !ok {
            out.push((
                Field::Tile,
                format!(
                    "the {name} tile ({} x {} {} elements, {chunks} 16-byte chunks of which {} per row) does not \
                     split evenly over {} threads ({} warps): each thread must copy the same whole number of \
                     chunks, and the threads whole rows",
                    o.outer,
                    o.inner,
                    inst.dtype,
                    o.chunks_per_row,
                    plan.threads,
                    warps
                ),
            ));
        }
    }
    out
}

pub fn arch_problem(inst: &Instance, arch: Arch) -> Option<String> {
    if wgmma(&inst.params) {
        return sm90::arch_problem(arch);
    }
    (arch.sm() < 80).then(|| {
        format!("gemm uses cp.async and mma.sync m16n8k16, which need sm_80+; {arch} lacks them")
    })
}

pub fn signature(inst: &Instance) -> Vec<Arg> {
    let (t, o) = (inst.dtype, inst.out_dtype);
    let mut args = vec![Arg::input("a", t), Arg::input("b", t)];
    if inst.has_epilogue(Epilogue::Bias) {
        args.push(Arg::input("bias", o));
    }
    if inst.has_epilogue(Epilogue::Residual) {
        args.push(Arg::input("c", o));
    }
    args.push(Arg::output("d", o));
    for s in ["m", "n", "k", "lda", "ldb"] {
        args.push(Arg::scalar(s, "i64"));
    }
    if inst.has_epilogue(Epilogue::Residual) {
        args.push(Arg::scalar("ldc", "i64"));
    }
    args.push(Arg::scalar("ldd", "i64"));
    if inst.has_epilogue(Epilogue::Scale) {
        args.push(Arg::scalar("alpha", "f32"));
    }
    args
}

/// What a launcher must check before calling a GEMM instance, in words (the same list heads
/// `templates/gemm.cu` and `gemm_simt.cu`). Sizes are in elements.
///
/// - Grid `(ceil(M/tile_m) * ceil(N/tile_n), 1, 1)` (the kernel orders the tiles itself),
///   block `(threads, 1, 1)`, `shared_bytes` of dynamic shared memory; above 48 KiB the
///   function's `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` must be raised first.
/// - `m, n ≥ 1`, `k ≥ 0` (k = 0 gives D = epilogue(0)); `m, n, k ≤ 2^31 - 1`.
/// - `a`, `b`, `d` (and `c` with `residual`) 16-byte aligned; `bias` element-aligned.
/// - `lda` and `ldb` multiples of 16 bytes' worth of input elements (8 for f16/bf16, 4 for
///   f32), `ldd` (and `ldc`) multiples of 16 bytes' worth of output elements.
/// - A is M×K: row-major (`lda ≥ K`) for layouts nn/nt, column-major (stored K×M,
///   `lda ≥ M`) for tn/tt. B is K×N: row-major (`ldb ≥ N`) for nn/tn, column-major (stored
///   N×K, `ldb ≥ K`) for nt/tt. D (and C) are M×N row-major, `ldd ≥ N` (`ldc ≥ N`).
/// - Buffers hold at least (rows - 1) * ld + row length elements; `bias` holds N.
/// - `d` overlaps no input (`a`, `b`, `bias`, `c`): every pointer is `__restrict__`.
pub fn runtime_requirements(inst: &Instance) -> Vec<String> {
    if wgmma(&inst.params) {
        return sm90::runtime_requirements(inst);
    }
    let plan = Plan::new(inst);
    let [tm, tn, _] = plan.tile;
    let needs = call_needs(inst.dtype, inst.out_dtype, false);
    let (in_vec, out_vec) = (needs.ld_in_multiple, needs.ld_out_multiple);
    let layout = inst.params.layout.unwrap_or(Layout::Nn);
    let (a_desc, a_ld) = if plan.a.k_contiguous {
        ("A (M x K) is row-major", "lda >= K")
    } else {
        ("A (M x K) is column-major, stored K x M", "lda >= M")
    };
    let (b_desc, b_ld) = if plan.b.k_contiguous {
        ("B (K x N) is column-major, stored N x K", "ldb >= K")
    } else {
        ("B (K x N) is row-major", "ldb >= N")
    };
    let has_bias = inst.has_epilogue(Epilogue::Bias);
    let has_c = inst.has_epilogue(Epilogue::Residual);
    let mut r = vec![
        format!(
            "launch: grid = (ceil(M / {tm}) * ceil(N / {tn}), 1, 1), block = ({}, 1, 1), {} bytes of dynamic \
             shared memory{}",
            plan.threads,
            plan.shared_bytes(),
            if plan.shared_bytes() > 48 * 1024 {
                " (over 48 KiB: raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first)"
            } else {
                ""
            }
        ),
        "M >= 1 and N >= 1; K >= 0 (K = 0 writes epilogue(0)); M, N, K <= 2^31 - 1".to_string(),
        format!(
            "{} {}-byte aligned{}",
            if has_c { "a, b, c and d" } else { "a, b and d" },
            needs.align,
            if has_bias { "; bias aligned to its element size" } else { "" }
        ),
        format!("lda and ldb multiples of {in_vec} (16 bytes of {})", inst.dtype),
        format!(
            "{} {out_vec} (16 bytes of {})",
            if has_c { "ldc and ldd multiples of" } else { "ldd a multiple of" },
            inst.out_dtype
        ),
        format!("layout {layout}: {a_desc}, {a_ld}; {b_desc}, {b_ld}"),
    ];
    r.extend(output_requirements(has_bias, has_c));
    r
}

/// What a GEMM instance needs of a call: the numbers its manifest requirements, its method's
/// docs and the checks emitted into the bindings all state. Matrices start 16-byte aligned;
/// `lda`/`ldb` are multiples of 16 bytes of input elements, `ldc`/`ldd` of output elements;
/// any m, n, k (mma.sync masks the edges). A tensor-map (wgmma) instance also needs `n` in
/// whole 16-byte vectors of output: its TMA stores write whole 16-byte chunks at the right
/// edge (measured on the H200: with `ldd` > `n` the bytes after column `n - 1` changed), so a
/// ragged `n` goes to an mma.sync instance.
pub struct CallNeeds {
    pub align: u64,
    pub ld_in_multiple: u64,
    pub ld_out_multiple: u64,
    pub n_multiple: u64,
}

pub fn call_needs(dtype: DType, out_dtype: DType, tensor_maps: bool) -> CallNeeds {
    let out_vec = out_dtype.per_16_bytes() as u64;
    CallNeeds {
        align: 16,
        ld_in_multiple: dtype.per_16_bytes() as u64,
        ld_out_multiple: out_vec,
        n_multiple: if tensor_maps { out_vec } else { 1 },
    }
}

/// The requirements on D (and C), the buffers' lengths and aliasing, the same for both GEMM
/// engines.
pub(super) fn output_requirements(has_bias: bool, has_c: bool) -> Vec<String> {
    let mut r = vec![
        format!(
            "D{} is M x N row-major, ldd >= N{}",
            if has_c { " (and C)" } else { "" },
            if has_c { ", ldc >= N" } else { "" }
        ),
        "each matrix buffer holds at least (rows - 1) * ld + (row length) elements".to_string(),
    ];
    if has_bias {
        r.push("bias holds at least N elements (one per output column)".to_string());
    }
    let inputs = ["a", "b"]
        .into_iter()
        .chain(has_bias.then_some("bias"))
        .chain(has_c.then_some("c"))
        .collect::<Vec<_>>()
        .join(", ");
    r.push(format!(
        "d overlaps no input ({inputs}): the kernel's pointers are __restrict__"
    ));
    r
}

pub fn launch(inst: &Instance) -> Launch {
    if wgmma(&inst.params) {
        return sm90::launch(inst);
    }
    let plan = Plan::new(inst);
    Launch {
        threads: plan.threads,
        grid: GridRule::Tiles {
            tile_m: plan.tile[0],
            tile_n: plan.tile[1],
        },
        shared_bytes: plan.shared_bytes(),
    }
}

pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    if wgmma(&inst.params) {
        return sm90::template_values(inst);
    }
    let plan = Plan::new(inst);
    let [tm, tn, tk] = plan.tile;
    let [wm, wn] = plan.warp;
    let mut v: Vec<(&'static str, serde_json::Value)> = vec![
        ("tile_m", tm.into()),
        ("tile_n", tn.into()),
        ("tile_k", tk.into()),
        ("warp_m", wm.into()),
        ("warp_n", wn.into()),
        ("warps_m", plan.warps_m.into()),
        ("warps_n", plan.warps_n.into()),
        ("stages", plan.stages.into()),
        ("group_m", GROUP_M.into()),
        (
            "layout",
            inst.params.layout.unwrap_or(Layout::Nn).as_str().into(),
        ),
        ("a_row_major", plan.a.k_contiguous.into()),
        ("b_row_major", (!plan.b.k_contiguous).into()),
        ("tensor_cores", plan.tc.into()),
        ("tf32", (plan.tc && inst.dtype == DType::F32).into()),
        ("shared_bytes", plan.shared_bytes().into()),
        ("pipeline_bytes", plan.pipeline_bytes().into()),
        ("smem_epilogue", (plan.epilogue_bytes() > 0).into()),
        ("staged_bias", plan.staged_bias.into()),
        ("bias_offset", plan.bias_offset().into()),
        ("epi_ld", (tn + EPI_PAD).into()),
        ("min_blocks", plan.min_blocks().into()),
        ("has_bias", inst.has_epilogue(Epilogue::Bias).into()),
        ("has_residual", inst.has_epilogue(Epilogue::Residual).into()),
        ("has_scale", inst.has_epilogue(Epilogue::Scale).into()),
        ("requirements", runtime_requirements(inst).into()),
        // tg_gemm's arguments (gemm.cu, gemm_simt.cu).
        (
            "gemm_args",
            super::forward_args(
                inst,
                &[
                    ("a", "a"),
                    ("b", "b"),
                    ("bias", "nullptr"),
                    ("c", "nullptr"),
                    ("d", "d"),
                    ("m", "m"),
                    ("n", "n"),
                    ("k", "k"),
                    ("lda", "lda"),
                    ("ldb", "ldb"),
                    ("ldc", "0"),
                    ("ldd", "ldd"),
                    ("alpha", "1.0f"),
                ],
            )
            .into(),
        ),
    ];
    for (o, keys) in [
        (
            &plan.a,
            ["a_ld", "a_rows", "a_cpr", "a_iters", "a_rows_per_pass"],
        ),
        (
            &plan.b,
            ["b_ld", "b_rows", "b_cpr", "b_iters", "b_rows_per_pass"],
        ),
    ] {
        for (key, value) in
            keys.into_iter()
                .zip([o.ld, o.rows, o.chunks_per_row, o.iters, o.rows_per_pass])
        {
            v.push((key, value.into()));
        }
    }
    v
}

/// The CPU reference (`ops::verification`), and the epilogue that verify also applies to
/// cuBLAS's products for GEMMs too large for the CPU.
#[cfg(feature = "gpu")]
pub mod reference {
    use rayon::prelude::*;

    use crate::ops::verification::{
        epilogue_with_error, Call, Expected, Inputs, Problem, Verification, U32,
    };
    use crate::spec::model::{KernelConfig, Layout};

    pub const GEMM: Verification = Verification {
        reference: gemm,
        typical_range: |_| (-1.0, 1.0),
        stressed: &["a"],
        outlier: Some(64.0),
        infinities: false,
    };

    fn gemm(call: &Call) -> Result<Expected, String> {
        let Problem::Gemm { m, n, k } = call.problem else {
            return Err(call.wrong_problem());
        };
        let (a, b) = (call.input("a")?, call.input("b")?);
        let layout = call.kernel.params.layout.unwrap_or(Layout::Nn);
        let (lda, ldb, _) = super::dense_ld(layout, m, n, k);
        let (lda, ldb) = (lda as usize, ldb as usize);
        // A is m×k and B is k×n in the math; `t` stores the operand transposed (column-major
        // for that operand), with its leading dimension between columns.
        let a_at = |i: usize, p: usize| match layout.a_transposed() {
            false => a[i * lda + p],
            true => a[p * lda + i],
        };
        let b_at = |p: usize, j: usize| match layout.b_transposed() {
            false => b[p * ldb + j],
            true => b[j * ldb + p],
        };
        let mut acc = vec![0.0; (m * n) as usize];
        let mut mag = vec![0.0; (m * n) as usize];
        acc.par_chunks_mut(n as usize)
            .zip(mag.par_chunks_mut(n as usize))
            .enumerate()
            .for_each(|(i, (row, mrow))| {
                for j in 0..n as usize {
                    let (mut s, mut sa) = (0.0, 0.0);
                    for p in 0..k as usize {
                        let t = a_at(i, p) * b_at(p, j);
                        s += t;
                        sa += t.abs();
                    }
                    row[j] = s;
                    mrow[j] = sa;
                }
            });
        epilogue(call.kernel, call.problem, &acc, &mag, 1.0, call.inputs)
    }

    /// Relative error per unit of Σ|a·b| of an f32-accumulated GEMM over `k`: `2k`
    /// roundings, and for TF32 both operands rounded to 10-bit mantissas first (2^-11 each).
    fn accumulation_error(kernel: &KernelConfig, k: u64) -> f64 {
        let tf32 = if kernel.params.tf32 == Some(true) {
            2.0 / 2048.0
        } else {
            0.0
        };
        2.0 * k as f64 * U32 + tf32
    }

    /// Applies a GEMM's epilogue (bias per column, residual C) to accumulated A·B, with `mag`
    /// = Σ|a·b| per element. `extra_acc` scales the accumulation error for a product that has
    /// its own (cuBLAS in f32 has as much as the kernel: 2.0).
    pub fn epilogue(
        kernel: &KernelConfig,
        p: Problem,
        acc: &[f64],
        mag: &[f64],
        extra_acc: f64,
        inp: &Inputs,
    ) -> Result<Expected, String> {
        let Problem::Gemm { n, k, m } = p else {
            return Err(format!("{}: a GEMM epilogue on {p}", kernel.name));
        };
        if acc.len() as u64 != m * n || mag.len() != acc.len() {
            return Err(format!(
                "{}: {} accumulated values for a {m}x{n} output",
                kernel.name,
                acc.len()
            ));
        }
        let empty = Vec::new();
        let bias = inp.get("bias").unwrap_or(&empty);
        let c = inp.get("c").unwrap_or(&empty);
        let n = n as usize;
        let rel = extra_acc * accumulation_error(kernel, k);
        let (values, err) = acc
            .par_iter()
            .zip(mag.par_iter())
            .enumerate()
            .map(|(idx, (&v, &mg))| {
                let bv = if bias.is_empty() { 0.0 } else { bias[idx % n] };
                let cv = if c.is_empty() { 0.0 } else { c[idx] };
                epilogue_with_error(kernel, v, rel * mg, bv, cv)
            })
            .unzip();
        Ok(Expected { values, err })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::Op;

    fn inst(
        dtype: DType,
        tile: [u32; 3],
        warp: [u32; 2],
        stages: Option<u32>,
        layout: Layout,
        tf32: bool,
    ) -> Instance {
        let params = Params {
            tile: Some(tile),
            warp: Some(warp),
            stages,
            layout: Some(layout),
            tf32: Some(tf32),
            ..Default::default()
        };
        Instance::for_test(Op::Gemm, dtype, params)
    }

    #[test]
    fn shared_memory_sizes() {
        // 16-bit, nn: A [128][32+8], B [32][128+8], 3 stages.
        let i = inst(
            DType::Bf16,
            [128, 128, 32],
            [64, 64],
            Some(3),
            Layout::Nn,
            false,
        );
        assert_eq!(launch(&i).shared_bytes, 3 * (128 * 40 + 32 * 136) * 2);
        assert_eq!(launch(&i).threads, 128);
        // nt: B [128][32+8].
        let i = inst(
            DType::F16,
            [128, 256, 32],
            [64, 64],
            Some(3),
            Layout::Nt,
            false,
        );
        assert_eq!(launch(&i).shared_bytes, 3 * (128 * 40 + 256 * 40) * 2);
        assert_eq!(launch(&i).threads, 256);
        // SIMT: [k][m+4] and [k][n+4], 2 buffers.
        let i = inst(DType::F32, [128, 128, 8], [64, 32], None, Layout::Nn, false);
        assert_eq!(launch(&i).shared_bytes, 2 * (8 * 132 + 8 * 132) * 4);
        assert!(check(&i).is_empty(), "{:?}", check(&i));
        // tf32 nn: A [128][32+4], B [32][128+8].
        let i = inst(
            DType::F32,
            [128, 128, 32],
            [64, 64],
            Some(3),
            Layout::Nn,
            true,
        );
        assert_eq!(launch(&i).shared_bytes, 3 * (128 * 36 + 32 * 136) * 4);
        assert!(check(&i).is_empty(), "{:?}", check(&i));
    }

    #[test]
    fn output_tile_staging_and_simt_cap() {
        // The staged output tile ([128][256 + 8] bf16) fits in the pipeline's shared memory,
        // which it reuses; shared memory is at least that large either way.
        let mut i = inst(
            DType::Bf16,
            [128, 256, 32],
            [64, 64],
            Some(3),
            Layout::Nn,
            false,
        );
        assert!(Plan::new(&i).staged_output);
        assert!(launch(&i).shared_bytes >= 128 * 264 * 2);
        i.params.stages = Some(2);
        assert_eq!(
            launch(&i).shared_bytes,
            Plan::new(&i).pipeline_bytes().max(128 * 264 * 2)
        );
        // A bias waits, as f32, behind everything else the block keeps in shared memory.
        i.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
        assert_eq!(
            launch(&i).shared_bytes,
            Plan::new(&i).pipeline_bytes().max(128 * 264 * 2) + 256 * 4
        );
        // A residual add keeps the register epilogue (it reads C in the same fragment order).
        i.epilogue = vec![Epilogue::Residual];
        assert!(!Plan::new(&i).staged_output);
        // SIMT: tile k 8 and 16 are capped at 128 registers (two blocks per SM), 32 is not;
        // with both operands transposed into shared memory (nt), only tile k 8.
        for (layout, k, blocks) in [
            (Layout::Nn, 8, 2),
            (Layout::Nn, 16, 2),
            (Layout::Nn, 32, 1),
            (Layout::Nt, 8, 2),
            (Layout::Nt, 16, 1),
        ] {
            let f = inst(DType::F32, [128, 128, k], [64, 32], None, layout, false);
            assert_eq!(Plan::new(&f).min_blocks(), blocks, "{layout} tile k {k}");
        }
    }

    #[test]
    fn states_runtime_requirements() {
        let mut i = inst(
            DType::Bf16,
            [128, 128, 32],
            [64, 64],
            Some(4),
            Layout::Nt,
            false,
        );
        i.out_dtype = DType::F32;
        i.epilogue = vec![Epilogue::Bias, Epilogue::Residual];
        let r = runtime_requirements(&i).join("\n");
        for needle in [
            // 4 stages of A [128][40] and B [128][40] bf16, then 128 bias columns as f32.
            "grid = (ceil(M / 128) * ceil(N / 128), 1, 1), block = (128, 1, 1), 82432 bytes",
            "a, b, c and d 16-byte aligned; bias aligned to its element size",
            "lda and ldb multiples of 8",
            "ldc and ldd multiples of 4 (16 bytes of f32)",
            "B (K x N) is column-major, stored N x K, ldb >= K",
            "bias holds at least N",
            "d overlaps no input (a, b, bias, c)",
        ] {
            assert!(r.contains(needle), "{needle:?} not in:\n{r}");
        }
    }

    #[test]
    fn rejects_unworkable_configs() {
        let bad = |i: Instance, needle: &str| {
            let p = check(&i);
            assert!(
                p.iter().any(|(_, m)| m.contains(needle)),
                "{needle:?} not in {p:?}"
            );
        };
        bad(
            inst(
                DType::Bf16,
                [128, 128, 16],
                [64, 64],
                Some(3),
                Layout::Nn,
                false,
            ),
            "at least 32",
        );
        bad(
            inst(
                DType::Bf16,
                [128, 128, 32],
                [128, 64],
                Some(3),
                Layout::Nn,
                false,
            ),
            "spill",
        );
        bad(
            inst(DType::F32, [128, 128, 8], [64, 64], None, Layout::Nn, false),
            "8x8 outputs per thread",
        );
        bad(
            inst(
                DType::F32,
                [128, 128, 8],
                [64, 32],
                Some(3),
                Layout::Nn,
                false,
            ),
            "stages must be 2",
        );
        // 16 warps of 16x16 on a 64x64x32 tile: 256 A chunks over 512 threads.
        bad(
            inst(
                DType::Bf16,
                [64, 64, 32],
                [16, 16],
                Some(3),
                Layout::Nn,
                false,
            ),
            "split evenly",
        );
        assert!(check(&inst(
            DType::Bf16,
            [64, 64, 32],
            [32, 32],
            Some(4),
            Layout::Nt,
            false
        ))
        .is_empty());
    }
}
