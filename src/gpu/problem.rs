//! Problem shapes per op: how long each buffer is, what the scalar arguments are, the launch
//! geometry, which shapes `verify` tries (ragged ones included) and which `bench` times.

use crate::launch_rules::{self, LaunchDims};
use crate::manifest::InstanceEntry;
use crate::ops::GridRule;
use crate::spec::model::{Epilogue, Layout, Op};

/// One problem size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// `n` elements; rows of `cols` for a broadcast bias.
    Elements {
        n: u64,
        cols: u64,
    },
    Rows {
        rows: u64,
        cols: u64,
    },
    Gemm {
        m: u64,
        n: u64,
        k: u64,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Elements { n, cols } => write!(f, "n={n} cols={cols}"),
            Problem::Rows { rows, cols } => write!(f, "{rows}x{cols}"),
            Problem::Gemm { m, n, k } => write!(f, "{m}x{n}x{k}"),
        }
    }
}

pub const LAYERNORM_EPS: f32 = 1e-5;
pub const GEMM_ALPHA: f32 = 0.5;

/// Elements of argument `arg` for the problem.
pub fn buffer_len(inst: &InstanceEntry, arg: &str, p: Problem) -> u64 {
    match p {
        Problem::Elements { n, cols } => match (inst.op, arg) {
            (Op::Fma, "bias") => cols,
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
    let layout = inst.params.layout.unwrap_or(Layout::Nn);
    let lda = if layout.a_transposed() { m } else { k };
    let ldb = if layout.b_transposed() { k } else { n };
    (lda, ldb, n)
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

/// Launch geometry for the problem, with the instance's dynamic shared memory.
pub fn dims(inst: &InstanceEntry, p: Problem) -> Result<LaunchDims, launch_rules::ArgError> {
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
        (GridRule::Tiles { .. }, Problem::Gemm { k, n, m }) => {
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

/// Shapes `verify` runs: 1, vector and tile edges ±1, primes, and one large size.
pub fn verify_cases(inst: &InstanceEntry) -> Vec<Problem> {
    let vec = inst.dtype.per_16_bytes() as u64;
    let mut out = Vec::new();
    match &inst.launch.grid {
        GridRule::Elements { elems_per_block } => {
            let epb = *elems_per_block as u64;
            let with_bias = inst.epilogue.contains(&Epilogue::Bias);
            for n in [1, vec - 1, vec + 1, epb - 1, epb + 1, 10_007, (1 << 22) + 3] {
                // The bias is a row of `cols`; pick a prime width that tiles n unevenly.
                let cols = if with_bias { 97.min(n).max(1) } else { 1 };
                let n = if with_bias {
                    n.div_ceil(cols) * cols
                } else {
                    n
                };
                out.push(Problem::Elements { n, cols });
            }
        }
        GridRule::Rows {
            max_cols,
            rows_per_block,
        } => {
            let limit = max_cols.map(|m| m as u64).unwrap_or(3 * 4096 * vec + 5);
            let chunk = inst.launch.threads as u64 * vec * inst.params.items.unwrap_or(1) as u64;
            let mut cols = vec![
                1,
                vec - 1,
                vec,
                vec + 1,
                97,
                chunk - 1,
                chunk,
                chunk + 1,
                limit - 1,
                limit,
            ];
            if max_cols.is_none() {
                cols.extend([2 * chunk + 7, 5 * chunk]);
            }
            cols.retain(|&c| c >= 1 && c <= limit);
            cols.sort();
            cols.dedup();
            for (i, c) in cols.into_iter().enumerate() {
                let rows = [1, 3, 37, 130][i % 4];
                out.push(Problem::Rows { rows, cols: c });
            }
            if *rows_per_block > 1 {
                // Blocks that own several rows (a ring of staged rows): enough rows that
                // every block walks several and the grid passes its first wave, a prime
                // count so the last trip is ragged, on both the scalar and the vector path.
                for cols in [97, limit.min(2048 + vec)] {
                    out.push(Problem::Rows { rows: 12007, cols });
                }
            }
        }
        GridRule::Tiles { tile_m, tile_n } => {
            let (tm, tn) = (*tile_m as u64, *tile_n as u64);
            let v = vec.max(inst.out_dtype.per_16_bytes() as u64);
            for (m, n, k) in [
                (1, v, v),
                (tm - 1, tn + v, 2 * v),
                (tm + 1, tn - v, 64 + v),
                (97, 5 * v, 131u64.div_ceil(v) * v),
                (2 * tm + 3, 3 * tn, 256),
                (509, 512 + v, 520),
                (1024, 1024, 1024),
                (2053, 3072 + v, 2048), // against cuBLAS
            ] {
                out.push(Problem::Gemm { m, n, k });
            }
        }
    }
    out.retain(|p| fits(inst, *p));
    out
}

/// Shapes `bench` times (the sizes named in the project's goals).
pub fn bench_cases(inst: &InstanceEntry) -> Vec<Problem> {
    let out: Vec<Problem> = match inst.op {
        Op::VectorAdd | Op::Fma => {
            let cols = if inst.epilogue.contains(&Epilogue::Bias) {
                4096
            } else {
                1
            };
            vec![Problem::Elements { n: 1 << 28, cols }]
        }
        Op::Softmax | Op::LayerNorm | Op::RmsNorm => vec![
            Problem::Rows {
                rows: 32768,
                cols: 4096,
            },
            Problem::Rows {
                rows: 8192,
                cols: 32768,
            },
            Problem::Rows {
                rows: 65536,
                cols: 1024,
            },
        ],
        Op::Gemm => vec![
            Problem::Gemm {
                m: 4096,
                n: 4096,
                k: 4096,
            },
            Problem::Gemm {
                m: 8192,
                n: 8192,
                k: 8192,
            },
            Problem::Gemm {
                m: 8192,
                n: 11008,
                k: 4096,
            },
            Problem::Gemm {
                m: 16384,
                n: 4096,
                k: 4096,
            },
            Problem::Gemm {
                m: 16,
                n: 4096,
                k: 4096,
            },
            Problem::Gemm {
                m: 128,
                n: 4096,
                k: 4096,
            },
        ],
    };
    out.into_iter().filter(|p| fits(inst, *p)).collect()
}
