//! Problem shapes per op family: how long each buffer is, what the scalar arguments are, the
//! launch geometry, which shapes `verify` tries (ragged ones included) and which `bench` times.

use crate::launch::GridRule;
use crate::launch_rules::{self, LaunchDims};
use crate::manifest::InstanceEntry;
pub use crate::ops::verification::{Problem, GEMM_ALPHA, LAYERNORM_EPS};
use crate::ops::{self, gemm};
use crate::spec::model::{Epilogue, Family, Layout};

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

/// What a case's inputs look like. `Typical` is uniform in a well-conditioned range per op;
/// the rest are the inputs that break kernels which are right on typical data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Numerics {
    Typical,
    /// Every row offset by +1000: softmax must subtract the row maximum (exp(1000) overflows
    /// f32), layernorm must not take its variance as E\[x²\] − E\[x\]² unshifted.
    Offset,
    /// One large value per row (softmax: 40 above the rest, so it holds nearly all the
    /// mass; norms: ±1000; GEMM: 64 in each row of A).
    Outliers,
    /// Softmax: a tenth of the entries −inf (they give exactly 0), row 0 all −inf (no
    /// maximum: NaN, as PyTorch gives), row 1 all −inf but one (that one gives 1).
    Infinities,
    /// 16-bit inputs: x among the dtype's subnormals. f16 subnormals are normal f32 values and
    /// must come out exact to rounding; bf16 subnormals are f32 subnormals, which the kernels'
    /// `ftz` arithmetic may flush to zero (within the check's absolute slack).
    Subnormal,
    /// Elementwise: x in [−30, 30], the tails of GELU and SiLU (exp over- and underflow).
    Wide,
}

/// One verify case: a shape, its inputs, and optionally a grid smaller than the launch rule
/// gives, so that the kernel's grid-stride loop runs several trips at a size the CPU
/// reference handles (the rule only strides beyond 65536 blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Case {
    pub problem: Problem,
    pub numerics: Numerics,
    /// At most this many blocks (of a clustered grid: clusters) in the grid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid_cap: Option<u32>,
    /// GEMM: matrices stored with padded rows ([`gemm_ld_padded`]: rows rounded up to whole
    /// vectors plus this many vectors); the padding holds NaN, which must not reach the output,
    /// and the output's padding must stay unwritten.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ld_pad: Option<u64>,
    /// Bytes every buffer starts past a 256-byte boundary (16-byte aligned, not 128-byte).
    #[serde(skip_serializing_if = "is_zero")]
    pub offset: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Case {
    fn typical(problem: Problem) -> Case {
        Case {
            problem,
            numerics: Numerics::Typical,
            grid_cap: None,
            ld_pad: None,
            offset: 0,
        }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.problem)?;
        if self.numerics != Numerics::Typical {
            write!(f, " {:?}", self.numerics)?;
        }
        if let Some(g) = self.grid_cap {
            write!(f, " grid<={g}")?;
        }
        if let Some(p) = self.ld_pad {
            write!(f, " ld+{p}v")?;
        }
        if self.offset > 0 {
            write!(f, " @+{}", self.offset)?;
        }
        Ok(())
    }
}

/// Output elements of a problem.
pub fn output_len(p: Problem) -> u64 {
    match p {
        Problem::Elements { n, .. } => n,
        Problem::Rows { rows, cols } => rows * cols,
        Problem::Gemm { m, n, .. } => m * n,
    }
}

/// Cases `verify` runs for an instance: empty (elementwise and rows: nothing may be written),
/// 1, vector and tile edges ±1, primes, one large size;
/// every GEMM layout with M, N and K off the tile by a vector (so the transposed layouts,
/// whose leading dimension is M, are aligned); grid-stride trips; and the hostile inputs of
/// `Numerics` that apply to the op and dtype, on a ragged shape.
pub fn verify_cases(inst: &InstanceEntry) -> Vec<Case> {
    let vec = inst.dtype.per_16_bytes() as u64;
    let sixteen_bit = inst.dtype != crate::spec::model::DType::F32;
    let mut out = Vec::new();
    let hostile = |out: &mut Vec<Case>, p: Problem, kinds: &[Numerics]| {
        for &numerics in kinds {
            if numerics == Numerics::Subnormal && !sixteen_bit {
                continue;
            }
            out.push(Case {
                numerics,
                ..Case::typical(p)
            });
        }
    };
    match &inst.launch.grid {
        GridRule::Elements { elems_per_block } => {
            let epb = *elems_per_block as u64;
            let with_bias = inst.epilogue.contains(&Epilogue::Bias);
            let elements = |n: u64| {
                // The bias is a row of `cols`; pick a prime width that tiles n unevenly.
                let cols = if with_bias { 97.min(n).max(1) } else { 1 };
                let n = if with_bias {
                    n.div_ceil(cols) * cols
                } else {
                    n
                };
                Problem::Elements { n, cols }
            };
            for n in [
                0,
                1,
                vec - 1,
                vec + 1,
                epb - 1,
                epb + 1,
                10_007,
                (1 << 22) + 3,
            ] {
                out.push(Case::typical(elements(n)));
            }
            // Three blocks stride 7 blocks' worth plus a tail; five stride a large tensor.
            for (n, cap) in [(7 * epb + vec + 3, 3), ((1 << 22) + 3, 5)] {
                out.push(Case {
                    grid_cap: Some(cap),
                    ..Case::typical(elements(n))
                });
            }
            let kinds = [Numerics::Wide, Numerics::Subnormal];
            hostile(&mut out, elements(epb + 1), &kinds);
            hostile(&mut out, elements(10_007), &kinds);
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
            for (i, &c) in cols.iter().enumerate() {
                let rows = [1, 3, 37, 130][i % 4];
                out.push(Case::typical(Problem::Rows { rows, cols: c }));
            }
            // No rows at all: the kernel must write nothing (its guard zones stay whole).
            out.push(Case::typical(Problem::Rows {
                rows: 0,
                cols: 97.min(limit),
            }));
            if *rows_per_block > 1 {
                // Blocks that own several rows (a ring of staged rows): enough rows that
                // every block walks several and the grid passes its first wave, a prime
                // count so the last trip is ragged, on both the scalar and the vector path.
                for cols in [97, limit.min(2048 + vec)] {
                    out.push(Case::typical(Problem::Rows { rows: 12007, cols }));
                }
            }
            // Fewer blocks than rows: each block strides over several rows (or rings).
            let rows = if *rows_per_block > 1 { 12007 } else { 131 };
            out.push(Case {
                grid_cap: Some(5),
                ..Case::typical(Problem::Rows {
                    rows,
                    cols: 97.min(limit),
                })
            });
            let mut kinds = vec![Numerics::Offset, Numerics::Outliers, Numerics::Subnormal];
            if ops::info(inst.op)
                .verification
                .as_ref()
                .is_some_and(|v| v.infinities)
            {
                kinds.push(Numerics::Infinities);
            }
            for c in [97.min(limit), (chunk + 1).min(limit), limit] {
                hostile(&mut out, Problem::Rows { rows: 37, cols: c }, &kinds);
            }
        }
        GridRule::Tiles { tile_m, tile_n } => {
            let (tm, tn) = (*tile_m as u64, *tile_n as u64);
            let v = vec.max(inst.out_dtype.per_16_bytes() as u64);
            for (m, n, k) in [
                (1, v, v),
                (tm.saturating_sub(1), tn + v, 2 * v),
                (tm + 1, tn.saturating_sub(v), 64 + v),
                (97, 5 * v, 131u64.div_ceil(v) * v),
                (2 * tm + 3, 3 * tn, 256),
                (509, 512 + v, 520),
                // Off the tile by a vector in M, N and K: every layout is aligned.
                (v, v, v),
                (tm.saturating_sub(v), tn + v, 64 + v),
                (tm + v, tn.saturating_sub(v), 2 * v),
                (2 * tm + v, 3 * tn - v.min(tn), 256 + v),
                (1024, 1024, 1024),
                (2056, 3072 + v, 2048), // against cuBLAS
            ] {
                if m == 0 || n == 0 {
                    continue; // a manifest tile narrower than a vector
                }
                out.push(Case::typical(Problem::Gemm { m, n, k }));
            }
            hostile(
                &mut out,
                Problem::Gemm {
                    m: tm + v,
                    n: tn.saturating_sub(v).max(v),
                    k: 64 + v,
                },
                &[Numerics::Outliers, Numerics::Subnormal],
            );
        }
        GridRule::Persistent { tile_m, tile_n, .. } => {
            // Stored with padded rows, so any M, N and K is aligned: 1, tile edges ±1, K off
            // the 64-wide k block, primes; ld larger than the row (padding of NaN); pointers
            // 16-byte but not 128-byte aligned; grids capped so every block walks several
            // tiles; 1024³ against the CPU, 2056×3080×2048 against cuBLAS.
            let (tm, tn) = (*tile_m as u64, *tile_n as u64);
            // N in whole 16-byte vectors of output (the instance's requirement); M and K any.
            let vo = inst.out_dtype.per_16_bytes() as u64;
            let gemm = |m, n: u64, k| Problem::Gemm {
                m,
                n: n.next_multiple_of(vo),
                k,
            };
            let case = |p, ld_pad, offset, grid_cap| Case {
                ld_pad: Some(ld_pad),
                offset,
                grid_cap,
                ..Case::typical(p)
            };
            for (p, pad, offset, cap) in [
                (gemm(1, 1, 1), 0, 0, None),
                (gemm(1, 8, 8), 1, 16, None),
                (gemm(tm - 1, tn + 1, 63), 0, 16, None),
                (gemm(tm + 1, tn - 1, 65), 1, 48, None),
                (gemm(tm, tn, 64), 0, 0, None),
                (gemm(97, 131, 257), 1, 16, None),
                (gemm(2 * tm + 3, 3 * tn + 5, 199), 2, 80, None),
                (gemm(2 * tm + 3, 3 * tn + 5, 199), 0, 0, Some(2)),
                (gemm(509, 521, 1031), 1, 112, Some(3)),
                (gemm(300, 520, 4104), 1, 16, None),
                // Skinny (split-K's shapes): a consumer's rows all past M, K over many shares.
                (gemm(16, 4 * tn + 8, 2051), 1, 16, Some(2)),
                (gemm(64, 2 * tn, 777), 0, 0, None),
                (gemm(1024, 1024, 1024), 0, 0, None),
                (gemm(2056, 3080, 2048), 0, 16, None), // against cuBLAS
            ] {
                out.push(case(p, pad, offset, cap));
            }
            for numerics in [Numerics::Outliers, Numerics::Subnormal] {
                out.push(Case {
                    numerics,
                    ..case(gemm(tm + 7, tn - 3, 64 + 9), 1, 16, None)
                });
            }
        }
        // Attention's cases have strides and sequence lists of their own: gpu::attention.
        GridRule::QueryTiles { .. } => {}
    }
    out.retain(|c| fits(inst, c.problem) || c.ld_pad.is_some() && fits_padded(inst, c.problem));
    out.dedup();
    out
}

/// Padded GEMM cases fit any TMA GEMM with k ≥ 1 and n in whole output vectors.
fn fits_padded(inst: &InstanceEntry, p: Problem) -> bool {
    matches!(p, Problem::Gemm { m, n, k } if m > 0 && k > 0
        && n > 0 && n.is_multiple_of(inst.out_dtype.per_16_bytes() as u64))
}

/// Shapes `bench` times (the sizes named in the project's goals).
pub fn bench_cases(inst: &InstanceEntry) -> Vec<Problem> {
    let out: Vec<Problem> = match inst.op.family() {
        Family::Attention => Vec::new(), // gpu::attention::bench_shapes
        Family::Elements => {
            let cols = if inst.epilogue.contains(&Epilogue::Bias) {
                4096
            } else {
                1
            };
            vec![Problem::Elements { n: 1 << 28, cols }]
        }
        Family::Rows => vec![
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
        Family::Gemm => vec![
            Problem::Gemm {
                m: 1024,
                n: 1024,
                k: 1024,
            },
            Problem::Gemm {
                m: 2048,
                n: 2048,
                k: 2048,
            },
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
            Problem::Gemm {
                m: 16,
                n: 11008,
                k: 4096,
            },
            Problem::Gemm {
                m: 128,
                n: 11008,
                k: 4096,
            },
        ],
    };
    out.into_iter().filter(|p| fits(inst, *p)).collect()
}
