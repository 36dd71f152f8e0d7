//! Problem shapes per op family: how long each buffer is, what the scalar arguments are, the
//! launch geometry, which shapes `verify` tries (ragged ones included) and which `bench` times.

use crate::launch::GridRule;
use crate::launch_rules::{self, LaunchDims};
use crate::manifest::InstanceEntry;
pub use crate::ops::verification::{Case, Numerics, Problem, GEMM_ALPHA, LAYERNORM_EPS};
use crate::ops::{self, gemm};
use crate::spec::model::Layout;

use super::ArgValue;

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

/// Leading dimensions of a GEMM whose matrices have their rows rounded up to a multiple of
/// `align` elements (`bench --ld-align`), as a caller with padded tensors passes them.
/// `(lda, ldb, ldd)`; `ldc` is `ldd`.
pub fn gemm_ld_aligned(
    inst: &InstanceEntry,
    m: u64,
    n: u64,
    k: u64,
    align: u64,
) -> (u64, u64, u64) {
    let (lda, ldb, ldd) = gemm_ld(inst, m, n, k);
    let up = |ld: u64| ld.next_multiple_of(align.max(1));
    (up(lda), up(ldb), up(ldd))
}

/// Puts leading dimensions into a GEMM call's argument list, over the dense ones
/// ([`scalar`]) that it was built with.
pub fn set_gemm_ld(inst: &InstanceEntry, args: &mut [ArgValue], (lda, ldb, ldd): (u64, u64, u64)) {
    for (a, v) in inst.args.iter().zip(args.iter_mut()) {
        let ld = match a.name.as_str() {
            "lda" => lda,
            "ldb" => ldb,
            "ldc" | "ldd" => ldd,
            _ => continue,
        };
        *v = ArgValue::I64(ld as i64);
    }
}

/// How GEMM matrix `arg` (of element type `ty`) is stored with leading dimensions `(lda, ldb,
/// ldd)`: `[rows, bytes of a row, bytes between rows]`; None for an argument that is not one of
/// the matrices (a bias keeps its dense length). Its buffer holds rows × the last.
pub fn gemm_matrix_layout(
    inst: &InstanceEntry,
    arg: &str,
    ty: &str,
    (m, n, k): (u64, u64, u64),
    (lda, ldb, ldd): (u64, u64, u64),
) -> Option<[usize; 3]> {
    let ld = match arg {
        "a" => lda,
        "b" => ldb,
        "c" | "d" => ldd,
        _ => return None,
    };
    let (rows, cols) = gemm_stored(inst, arg, m, n, k);
    let es = super::data::dtype_of(ty).size() as u64;
    Some([rows as usize, (cols * es) as usize, (ld * es) as usize])
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::{Arch, DType, Engine, Instance, Op, Params};

    /// A wgmma bias GEMM entry as `generate` writes it, in `layout`.
    fn gemm(layout: Layout) -> InstanceEntry {
        let params = Params {
            tile: Some([128, 256, 64]),
            stages: Some(3),
            engine: Some(Engine::Wgmma),
            layout: Some(layout),
            ..Default::default()
        };
        let mut inst = Instance::for_test(Op::Gemm, DType::Bf16, params);
        inst.archs = vec![Arch::Sm90a];
        inst.epilogue = vec![crate::spec::model::Epilogue::Bias];
        crate::ops::apply_defaults(Op::Gemm, &mut inst.params);
        InstanceEntry::for_test(&inst)
    }

    #[test]
    fn aligned_leading_dimensions_pad_each_stored_row_and_size_the_buffers_by_them() {
        let (m, n, k) = (903, 3048, 6120);
        // nn: A is M×K, B is K×N; nt: B is stored N×K; tn: A is stored K×M.
        let nn = gemm(Layout::Nn);
        assert_eq!(gemm_ld(&nn, m, n, k), (6120, 3048, 3048));
        let ld = gemm_ld_aligned(&nn, m, n, k, 64);
        assert_eq!(ld, (6144, 3072, 3072));
        assert_eq!(
            gemm_ld_aligned(&gemm(Layout::Nt), m, n, k, 64),
            (6144, 6144, 3072)
        );
        assert_eq!(
            gemm_ld_aligned(&gemm(Layout::Tn), m, n, k, 64),
            (960, 3072, 3072)
        );
        // Rows already whole multiples stay as they are.
        assert_eq!(
            gemm_ld_aligned(&nn, 4096, 4096, 4096, 64),
            (4096, 4096, 4096)
        );
        // Matrices hold their stored rows at the padded pitch; the bias stays dense.
        let layout = |arg: &str| gemm_matrix_layout(&nn, arg, "bf16", (m, n, k), ld);
        assert_eq!(layout("a"), Some([903, 6120 * 2, 6144 * 2]));
        assert_eq!(layout("b"), Some([6120, 3048 * 2, 3072 * 2]));
        assert_eq!(layout("d"), Some([903, 3048 * 2, 3072 * 2]));
        assert_eq!(layout("bias"), None);
        // The call's scalars take them, and nothing else changes (pointers stand in as -1).
        let mut args: Vec<ArgValue> = nn
            .args
            .iter()
            .map(|a| match a.kind {
                crate::launch::ArgKind::Scalar => {
                    ArgValue::I64(scalar(&nn, &a.name, Problem::Gemm { m, n, k }) as i64)
                }
                _ => ArgValue::I64(-1),
            })
            .collect();
        let names: Vec<&str> = nn.args.iter().map(|a| a.name.as_str()).collect();
        assert!(
            ["lda", "ldb", "ldd"].iter().all(|x| names.contains(x)),
            "{names:?}"
        );
        let ints = |args: &[ArgValue]| -> Vec<i64> {
            args.iter()
                .map(|v| match v {
                    ArgValue::I64(x) => *x,
                    _ => panic!("GEMM scalars are integers"),
                })
                .collect()
        };
        let dense = ints(&args);
        set_gemm_ld(&nn, &mut args, ld);
        let padded = ints(&args);
        for ((name, was), now) in names.iter().zip(dense).zip(padded) {
            let want = match *name {
                "lda" => 6144,
                "ldb" | "ldd" | "ldc" => 3072,
                _ => was,
            };
            assert_eq!(now, want, "{name}");
        }
    }
}
