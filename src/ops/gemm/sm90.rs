//! The GEMM's `wgmma` engine for sm_90a (H100/H200): TMA loads with 128-byte swizzle into a
//! ring of shared-memory stages guarded by mbarriers, one producer warpgroup and one consumer
//! warpgroup per 64 rows of wgmma's tile (`setmaxnreg` moves registers to the consumers),
//! `wgmma.mma_async` from shared-memory descriptors, a persistent grid walking the output tiles
//! in a grouped order, and the epilogue through swizzled shared memory and TMA stores. Tiles
//! shorter than 64 rows are computed transposed (swap-AB): see [`SWAP_TILE_MS`]. With
//! `pingpong` the two consumers take whole tiles in turn instead (see `Plan::pingpong`).
//!
//! Same op, arguments and epilogue chain as the mma.sync path (`ops/gemm/mod.rs`); the kernel
//! also takes the tensor maps listed here, which the host encodes per call. What a spec may ask
//! of this engine is in `check`; the tile, boxes and shared-memory layout an instance derives
//! from its configuration in `plan`.

mod check;
mod plan;
#[cfg(test)]
mod tests;

pub use check::check;
use plan::Plan;

use crate::launch::{GridRule, Launch, Swizzle, TensorMap};
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
    // The wgmma wrappers (name, n, first accumulator): one of the tile's width, or with a tail
    // one of the columns before it and one of its 32, whose accumulators follow (wgmma's go 8
    // columns to 4 registers).
    let wgmma_part = |name: &str, n: u32, first: u32| {
        let regs = n / 2;
        serde_json::json!({ "name": name, "n": n, "regs": regs, "first": first })
    };
    let wgmma_parts = if plan.b_tail() {
        let main = plan.tile_n - NARROW_BOX_COLS;
        vec![
            wgmma_part("tg_wgmma", main, 0),
            wgmma_part("tg_wgmma_tail", NARROW_BOX_COLS, main / 2),
        ]
    } else {
        vec![wgmma_part("tg_wgmma", plan.tile_n, 0)]
    };
    vec![
        ("sm90_args", crate::ops::forward_args(inst, &args).into()),
        ("wgmma_parts", wgmma_parts.into()),
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
