//! Problem shapes per op family: how long each buffer is, what the scalar arguments are, the
//! launch geometry, which shapes `verify` tries (ragged ones included) and which `bench` times.

use crate::launch::GridRule;
use crate::launch_rules::{self, LaunchDims};
use crate::manifest::InstanceEntry;
pub use crate::ops::verification::{Case, Numerics, Problem, GEMM_ALPHA, LAYERNORM_EPS};
use crate::ops::{self, gemm};
use crate::spec::model::Layout;

/// Elements of argument `arg` for the problem.
pub fn buffer_len(arg: &str, p: Problem) -> u64 {
    match p {
        Problem::Elements { n, cols } => match arg {
            "bias" => cols,
            _ => n,
        },
        Problem::Rows { rows, cols } => match arg {
            "weight" | "bias" => cols,
            _ => rows * cols,
        },
        Problem::Gemm { m, n, k } => match arg {
            "a" => m * k,
            "b" => k * n,
            "bias" => n,
            _ => m * n,
        },
    }
}

/// Leading dimensions (in elements) of the dense operands for a GEMM layout.
pub fn gemm_ld(inst: &InstanceEntry, m: u64, n: u64, k: u64) -> (u64, u64, u64) {
    gemm::dense_ld(inst.params.layout.unwrap_or(Layout::Nn), m, n, k)
}

/// Value of scalar argument `arg`.
pub fn scalar(inst: &InstanceEntry, arg: &str, p: Problem) -> f64 {
    match (p, arg) {
        (Problem::Elements { n, .. }, "n") => n as f64,
        (Problem::Elements { cols, .. }, "cols") => cols as f64,
        (Problem::Rows { rows, .. }, "rows") => rows as f64,
        (Problem::Rows { cols, .. }, "cols") => cols as f64,
        (_, "eps") => LAYERNORM_EPS as f64,
        (_, "alpha") => GEMM_ALPHA as f64,
        (Problem::Gemm { m, n, k }, s) => {
            let (lda, ldb, ldd) = gemm_ld(inst, m, n, k);
            match s {
                "m" => m as f64,
                "n" => n as f64,
                "k" => k as f64,
                "lda" => lda as f64,
                "ldb" => ldb as f64,
                _ => ldd as f64, // ldc, ldd
            }
        }
        _ => 0.0,
    }
}

/// Leading dimensions of a GEMM case whose matrices are stored with padded rows: each row
/// rounded up to whole 16-byte vectors, plus `pad` elements (so any M, N, K is aligned, and
/// `ld` is larger than the row when `pad` > 0). `(lda, ldb, ldd)`; `ldc` is `ldd`.
pub fn gemm_ld_padded(inst: &InstanceEntry, m: u64, n: u64, k: u64, pad: u64) -> (u64, u64, u64) {
    let layout = inst.params.layout.unwrap_or(Layout::Nn);
    let (vi, vo) = (
        inst.dtype.per_16_bytes() as u64,
        inst.out_dtype.per_16_bytes() as u64,
    );
    let row_a = if layout.a_transposed() { m } else { k };
    let row_b = if layout.b_transposed() { k } else { n };
    (
        row_a.next_multiple_of(vi) + pad * vi,
        row_b.next_multiple_of(vi) + pad * vi,
        n.next_multiple_of(vo) + pad * vo,
    )
}

/// A GEMM operand's stored shape for a problem: (rows, row length) as laid out in memory
/// (a transposed operand's rows are its columns in the math).
pub fn gemm_stored(inst: &InstanceEntry, arg: &str, m: u64, n: u64, k: u64) -> (u64, u64) {
    let layout = inst.params.layout.unwrap_or(Layout::Nn);
    match arg {
        "a" if layout.a_transposed() => (k, m),
        "a" => (m, k),
        "b" if layout.b_transposed() => (n, k),
        "b" => (k, n),
        _ => (m, n),
    }
}

/// Launch geometry for the problem, with the instance's dynamic shared memory, on a device
/// of `sm_count` SMs (persistent grids are sized by it).
pub fn dims(
    inst: &InstanceEntry,
    p: Problem,
    sm_count: u32,
) -> Result<LaunchDims, launch_rules::ArgError> {
    let threads = inst.launch.threads;
    let dims = match (&inst.launch.grid, p) {
        (GridRule::Elements { elems_per_block }, Problem::Elements { n, .. }) => {
            Ok(launch_rules::elements_dims(n, *elems_per_block, threads))
        }
        (GridRule::Rows { rows_per_block, .. }, Problem::Rows { rows, .. }) => {
            Ok(launch_rules::rows_dims(rows, *rows_per_block, threads))
        }
        (GridRule::Tiles { tile_m, tile_n }, Problem::Gemm { m, n, .. }) => {
            launch_rules::tiles_dims(m, n, *tile_m, *tile_n, threads, inst.launch.shared_bytes)
        }
        (
            GridRule::Persistent {
                tile_m,
                tile_n,
                ctas_per_sm,
                cluster,
            },
            Problem::Gemm { m, n, .. },
        ) => launch_rules::persistent_dims(
            m,
            n,
            *tile_m,
            *tile_n,
            *ctas_per_sm,
            *cluster,
            sm_count,
            threads,
            inst.launch.shared_bytes,
        ),
        _ => Err(launch_rules::ArgError::NoInstance {
            op: "matching",
            reason: "for this problem kind",
        }),
    }?;
    Ok(LaunchDims {
        shared_bytes: inst.launch.shared_bytes,
        ..dims
    })
}

/// Whether the instance handles the problem at all.
pub fn fits(inst: &InstanceEntry, p: Problem) -> bool {
    match (&inst.launch.grid, p) {
        (GridRule::Rows { max_cols, .. }, Problem::Rows { cols, .. }) => {
            max_cols.is_none_or(|m| cols <= m as u64)
        }
        // Tensor maps have no empty dims: a TMA GEMM takes k ≥ 1; its stores write whole
        // 16-byte chunks at the right edge: n in whole vectors (dispatch runs another).
        (GridRule::Persistent { .. }, Problem::Gemm { k: 0, .. }) => false,
        (GridRule::Persistent { .. }, Problem::Gemm { n, .. })
            if !n.is_multiple_of(inst.out_dtype.per_16_bytes() as u64) =>
        {
            false
        }
        (GridRule::Tiles { .. } | GridRule::Persistent { .. }, Problem::Gemm { k, n, m }) => {
            // Vector loads need leading dimensions in whole 16-byte vectors.
            let v = inst.dtype.per_16_bytes() as u64;
            let (lda, ldb, ldd) = gemm_ld(inst, m, n, k);
            lda % v == 0 && ldb % v == 0 && ldd % inst.out_dtype.per_16_bytes() as u64 == 0
        }
        _ => true,
    }
}

/// GEMMs this large are checked against cuBLAS rather than the CPU.
pub fn too_big_for_cpu(p: Problem) -> bool {
    matches!(p, Problem::Gemm { m, n, k } if m * n * k > 1 << 31)
}

/// Output elements of a problem.
pub fn output_len(p: Problem) -> u64 {
    match p {
        Problem::Elements { n, .. } => n,
        Problem::Rows { rows, cols } => rows * cols,
        Problem::Gemm { m, n, .. } => m * n,
    }
}

/// Cases `verify` runs for an instance, from its family (`ops::*::cases`), less those it
/// cannot take. Attention's cases have strides and sequence lists of their own
/// (`gpu::attention`).
pub fn verify_cases(inst: &InstanceEntry) -> Vec<Case> {
    let mut out = (ops::family(inst.op).cases.verify)(inst);
    out.retain(|c| fits(inst, c.problem) || c.ld_pad.is_some() && fits_padded(inst, c.problem));
    out.dedup();
    out
}

/// Padded GEMM cases fit any TMA GEMM with k ≥ 1 and n in whole output vectors.
fn fits_padded(inst: &InstanceEntry, p: Problem) -> bool {
    matches!(p, Problem::Gemm { m, n, k } if m > 0 && k > 0
        && n > 0 && n.is_multiple_of(inst.out_dtype.per_16_bytes() as u64))
}

/// Shapes `bench` times (the sizes named in the project's goals), from the instance's family,
/// less those it cannot take.
pub fn bench_cases(inst: &InstanceEntry) -> Vec<Problem> {
    (ops::family(inst.op).cases.bench)(inst)
        .into_iter()
        .filter(|p| fits(inst, *p))
        .collect()
}
