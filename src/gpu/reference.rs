//! CPU references in f64 for every op, computed from the same (dtype-rounded) inputs the
//! kernel sees, each value with a bound on how far a correct f32 kernel can be from it.
//! Written for clarity, not speed; GEMMs above ~1024³ are checked against cuBLAS.
//!
//! The bounds follow the usual forward error analysis of each op in f32 (unit roundoff
//! `U = 2^-24`), with the summation bound `(n - 1)·U·Σ|terms|` for a sum of `n` terms in any
//! order. Row kernels sum each thread's share in turn and then across the block in a tree,
//! so a row of `n` columns over `t` threads counts `n/t + log2 t` additions; GEMMs count `2K`
//! (tensor cores may truncate where IEEE rounds). The hardware's approximate functions add
//! their documented error: `ex2.approx` 2^-22 relative, `tanh.approx` 2^-11 relative (GELU on
//! it is off by up to 2^-11·|x| absolute), the sigmoid forms ~2^-18·|x|. `data::check_elements`
//! adds the output dtype's own rounding on top.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::problem::{self, Problem, GEMM_ALPHA, LAYERNORM_EPS};
use crate::manifest::InstanceEntry;
use crate::ops::epilogue;
use crate::spec::model::{Epilogue, Layout, Op};

/// Inputs by argument name, as f64.
pub type Inputs = BTreeMap<String, Vec<f64>>;

/// Unit roundoff of f32 arithmetic.
pub const U32: f64 = 1.0 / 16_777_216.0; // 2^-24
/// Relative error of the hardware's `ex2.approx` (PTX ISA: 2^-22 over the full range).
const EX2_APPROX: f64 = 1.0 / 4_194_304.0; // 2^-22

/// The exact answer and, per element, how far an f32 kernel may be from it before the final
/// rounding to the output dtype.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    pub values: Vec<f64>,
    pub err: Vec<f64>,
}

impl Expected {
    fn with_len(len: usize) -> Expected {
        Expected {
            values: vec![0.0; len],
            err: vec![0.0; len],
        }
    }
}

/// Absolute error per unit of |x| of an activation's f32 form, as the instance's kernel runs it
/// (`ops::epilogue` picks the form).
fn activation_error(inst: &InstanceEntry, step: Epilogue) -> f64 {
    epilogue::Chain::of(inst.op)
        .and_then(|chain| epilogue::device_fn(step, chain, inst.out_dtype))
        .map_or(0.0, |f| f.err_per_v)
}

/// The operands of one value: its bias and residual elements, and the problems' alpha.
fn operands(bias: f64, residual: f64) -> epilogue::Operands {
    epilogue::Operands {
        bias,
        residual,
        alpha: GEMM_ALPHA as f64,
    }
}

/// Applies an epilogue chain to one value. `bias` and `residual` are the value's operands.
pub fn epilogue(chain: &[Epilogue], v: f64, bias: f64, residual: f64) -> f64 {
    epilogue::apply(chain, v, &operands(bias, residual))
}

/// The epilogue chain on a value `v` known to within `e`: the exact result and its error
/// bound. Each step adds its own f32 rounding and passes the incoming error through its
/// slope (at most 1.13 for GELU, 1.1 for SiLU, 1 for the rest).
fn epilogue_with_error(
    inst: &InstanceEntry,
    mut v: f64,
    mut e: f64,
    bias: f64,
    residual: f64,
) -> (f64, f64) {
    for &s in &inst.epilogue {
        let next = (epilogue::step(s).reference)(v, &operands(bias, residual));
        e = match s {
            Epilogue::Scale => GEMM_ALPHA as f64 * e + U32 * next.abs(),
            Epilogue::Bias => e + U32 * (v.abs() + bias.abs()),
            Epilogue::Residual => e + U32 * (v.abs() + residual.abs()),
            Epilogue::Relu => e,
            Epilogue::Gelu | Epilogue::GeluErf => {
                1.13 * e + activation_error(inst, s) * v.abs() + 4.0 * U32 * next.abs()
            }
            Epilogue::Silu => {
                1.1 * e + activation_error(inst, s) * v.abs() + 4.0 * U32 * next.abs()
            }
        };
        v = next;
    }
    (v, e)
}

/// Additions on the longest path of a row reduction over `threads` threads: each thread's
/// share in turn, then a tree across the block.
fn row_sum_depth(cols: usize, threads: u32) -> f64 {
    let t = threads.max(1) as usize;
    cols.div_ceil(t) as f64 + (t as f64).log2().ceil() + 2.0
}

/// The reference output of an instance for a problem, or an error naming what it does not
/// handle (a reference that silently returned nothing would pass anything).
pub fn compute(inst: &InstanceEntry, p: Problem, inp: &Inputs) -> Result<Expected, String> {
    let get = |k: &str| -> Result<&[f64], String> {
        inp.get(k)
            .map(Vec::as_slice)
            .ok_or_else(|| format!("{}: no input `{k}` for the reference", inst.name))
    };
    let opt = |k: &str| inp.get(k).map(Vec::as_slice).unwrap_or(&[]);
    let out = match (inst.op, p) {
        (Op::VectorAdd, Problem::Elements { n, .. }) => {
            let (a, b) = (get("a")?, get("b")?);
            let mut ex = Expected::with_len(n as usize);
            for i in 0..n as usize {
                ex.values[i] = a[i] + b[i];
                ex.err[i] = U32 * (a[i].abs() + b[i].abs());
            }
            ex
        }
        (Op::Fma, Problem::Elements { n, cols }) => {
            let (x, w, b, bias) = (get("x")?, get("w")?, get("b")?, opt("bias"));
            let mut ex = Expected::with_len(n as usize);
            for i in 0..n as usize {
                let bv = if bias.is_empty() {
                    0.0
                } else {
                    bias[i % cols as usize]
                };
                let v = x[i] * w[i] + b[i];
                let e = U32 * ((x[i] * w[i]).abs() + b[i].abs());
                (ex.values[i], ex.err[i]) = epilogue_with_error(inst, v, e, bv, 0.0);
            }
            ex
        }
        (Op::Softmax | Op::LayerNorm | Op::RmsNorm, Problem::Rows { rows, cols }) => {
            let x = get("x")?;
            let (weight, bias) = (opt("weight"), opt("bias"));
            let c = cols as usize;
            let depth = row_sum_depth(c, inst.launch.threads);
            let mut ex = Expected::with_len((rows * cols) as usize);
            ex.values
                .par_chunks_mut(c)
                .zip(ex.err.par_chunks_mut(c))
                .enumerate()
                .for_each(|(r, (o, e))| {
                    let row = &x[r * c..(r + 1) * c];
                    match inst.op {
                        Op::Softmax => softmax_row(row, o, e, depth, inst),
                        Op::LayerNorm => layernorm_row(row, weight, bias, o, e, depth),
                        _ => rmsnorm_row(row, weight, o, e, depth),
                    }
                });
            ex
        }
        (Op::AddRmsNorm, Problem::Rows { rows, cols }) => {
            let (x, r) = (get("x")?, get("r")?);
            let (c, len) = (cols as usize, (rows * cols) as usize);
            // h as the kernel writes it: x + r in f32, rounded to the dtype; y is the norm of
            // that rounded h. Expected: h exactly, then y (the kernel's outputs in order).
            let sums: Vec<f32> = x.iter().zip(r).map(|(a, b)| (a + b) as f32).collect();
            let h = super::data::from_values(inst.dtype, &sums).values;
            let mut ex = Expected::with_len(2 * len);
            let (hv, yv) = ex.values.split_at_mut(len);
            let (he, ye) = ex.err.split_at_mut(len);
            for (((hv, he), a), b) in hv.iter_mut().zip(he.iter_mut()).zip(x).zip(r) {
                *hv = a + b;
                *he = U32 * hv.abs();
            }
            let depth = row_sum_depth(c, inst.launch.threads);
            let weight = opt("weight");
            yv.par_chunks_mut(c.max(1))
                .zip(ye.par_chunks_mut(c.max(1)))
                .zip(h.par_chunks(c.max(1)))
                .for_each(|((o, e), row)| rmsnorm_row(row, weight, o, e, depth));
            ex
        }
        (Op::Gemm, Problem::Gemm { m, n, k }) => {
            let (a, b) = (get("a")?, get("b")?);
            let (lda, ldb, _) = problem::gemm_ld(inst, m, n, k);
            let layout = inst.params.layout.unwrap_or(Layout::Nn);
            let (lda, ldb) = (lda as usize, ldb as usize);
            // A is m×k and B is k×n in the math; `t` stores the operand transposed
            // (column-major for that operand), with its leading dimension between columns.
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
            gemm_epilogue(inst, p, &acc, &mag, 1.0, inp)?
        }
        _ => {
            return Err(format!(
                "{}: the reference has no {:?} for a {p} problem",
                inst.name, inst.op
            ))
        }
    };
    Ok(out)
}

/// Relative error per unit of Σ|a·b| of an f32-accumulated GEMM over `k`: `2k` roundings,
/// and for TF32 both operands rounded to 10-bit mantissas first (2^-11 each).
pub fn gemm_accumulation_error(inst: &InstanceEntry, k: u64) -> f64 {
    let tf32 = if inst.params.tf32 == Some(true) {
        2.0 / 2048.0
    } else {
        0.0
    };
    2.0 * k as f64 * U32 + tf32
}

/// Applies a GEMM instance's epilogue (bias per column, residual C) to accumulated A·B, with
/// `mag` = Σ|a·b| per element. `extra_acc` scales the accumulation error for a reference that
/// has its own (cuBLAS in f32 has as much as the kernel: 2.0).
pub fn gemm_epilogue(
    inst: &InstanceEntry,
    p: Problem,
    acc: &[f64],
    mag: &[f64],
    extra_acc: f64,
    inp: &Inputs,
) -> Result<Expected, String> {
    let Problem::Gemm { n, k, m } = p else {
        return Err(format!("{}: a GEMM epilogue on {p}", inst.name));
    };
    if acc.len() as u64 != m * n || mag.len() != acc.len() {
        return Err(format!(
            "{}: {} accumulated values for a {m}x{n} output",
            inst.name,
            acc.len()
        ));
    }
    let empty = Vec::new();
    let bias = inp.get("bias").unwrap_or(&empty);
    let c = inp.get("c").unwrap_or(&empty);
    let n = n as usize;
    let rel = extra_acc * gemm_accumulation_error(inst, k);
    let (values, err) = acc
        .par_iter()
        .zip(mag.par_iter())
        .enumerate()
        .map(|(idx, (&v, &mg))| {
            let bv = if bias.is_empty() { 0.0 } else { bias[idx % n] };
            let cv = if c.is_empty() { 0.0 } else { c[idx] };
            epilogue_with_error(inst, v, rel * mg, bv, cv)
        })
        .unzip();
    Ok(Expected { values, err })
}

/// Softmax of one row and its error bound. A row whose every entry is -inf has no maximum:
/// its outputs are NaN (0/0), as in PyTorch; -inf entries of other rows give exactly 0.
fn softmax_row(row: &[f64], o: &mut [f64], e: &mut [f64], depth: f64, inst: &InstanceEntry) {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
    for (o, v) in o.iter_mut().zip(row) {
        *o = (v - m).exp() / s;
    }
    if !m.is_finite() {
        return; // NaN everywhere: the comparison wants NaN
    }
    // exp((x - m)·log2e) on ex2.approx: two roundings of the argument (2U|x - m| relative)
    // plus the instruction's own error; the sum of the row's terms adds its depth, the
    // online variant's rescaling one ex2 per chunk.
    let chunks = row.len() as f64
        / (inst.launch.threads.max(1) as f64 * inst.dtype.per_16_bytes() as f64)
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
            e[j] = 2.0 * (weight[j].abs() * e_y + U32 * ((y * weight[j]).abs() + bias[j].abs()));
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
