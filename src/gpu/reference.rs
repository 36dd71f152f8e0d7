//! CPU references in f64 for every op, computed from the same (dtype-rounded) inputs the
//! kernel sees. Written for clarity, not speed; GEMMs above ~1024³ are checked against cuBLAS.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::problem::{self, Problem, GEMM_ALPHA, LAYERNORM_EPS};
use crate::manifest::InstanceEntry;
use crate::spec::model::{Epilogue, Layout, Op};

/// Inputs by argument name, as f64.
pub type Inputs = BTreeMap<String, Vec<f64>>;

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// erf to ~1e-15: its Taylor series below 3, the continued fraction of erfc above.
fn erf(x: f64) -> f64 {
    // For |x| < 3 a Taylor series converges fast enough in f64; beyond, erf is 1 - tiny.
    let ax = x.abs();
    if ax < 3.0 {
        let mut sum = x;
        let mut term = x;
        let x2 = x * x;
        // Terms shrink past f64 precision within ~60 steps for |x| < 3 (and at once for 0).
        for n in 1..=80 {
            let n = n as f64;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // Continued fraction for erfc.
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        let erfc = (-ax * ax).exp() / std::f64::consts::PI.sqrt() / (ax + f);
        (1.0 - erfc).copysign(x)
    }
}

/// Applies an epilogue chain to one value. `bias` and `residual` are the value's operands.
pub fn epilogue(chain: &[Epilogue], mut v: f64, bias: f64, residual: f64) -> f64 {
    for e in chain {
        v = match e {
            Epilogue::Scale => v * GEMM_ALPHA as f64,
            Epilogue::Bias => v + bias,
            Epilogue::Relu => v.max(0.0),
            Epilogue::Gelu => gelu_tanh(v),
            Epilogue::GeluErf => 0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2)),
            Epilogue::Silu => v / (1.0 + (-v).exp()),
            Epilogue::Residual => v + residual,
        };
    }
    v
}

/// The reference output of an instance for a problem.
pub fn compute(inst: &InstanceEntry, p: Problem, inp: &Inputs) -> Vec<f64> {
    let get = |k: &str| inp.get(k).map(Vec::as_slice).unwrap_or(&[]);
    match (inst.op, p) {
        (Op::VectorAdd, Problem::Elements { n, .. }) => {
            (0..n as usize).map(|i| get("a")[i] + get("b")[i]).collect()
        }
        (Op::Fma, Problem::Elements { n, cols }) => {
            let (x, w, b, bias) = (get("x"), get("w"), get("b"), get("bias"));
            (0..n as usize)
                .map(|i| {
                    let bv = if bias.is_empty() {
                        0.0
                    } else {
                        bias[i % cols as usize]
                    };
                    epilogue(&inst.epilogue, x[i] * w[i] + b[i], bv, 0.0)
                })
                .collect()
        }
        (Op::Softmax | Op::LayerNorm | Op::RmsNorm, Problem::Rows { rows, cols }) => {
            let (x, weight, bias) = (get("x"), get("weight"), get("bias"));
            let c = cols as usize;
            let mut out = vec![0.0; (rows * cols) as usize];
            out.par_chunks_mut(c).enumerate().for_each(|(r, o)| {
                let row = &x[r * c..(r + 1) * c];
                match inst.op {
                    Op::Softmax => {
                        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                        for (o, v) in o.iter_mut().zip(row) {
                            *o = (v - m).exp() / s;
                        }
                    }
                    Op::LayerNorm => {
                        let mean = row.iter().sum::<f64>() / c as f64;
                        let var =
                            row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
                        let rstd = 1.0 / (var + LAYERNORM_EPS as f64).sqrt();
                        for (j, (o, v)) in o.iter_mut().zip(row).enumerate() {
                            let y = (v - mean) * rstd;
                            *o = if weight.is_empty() {
                                y
                            } else {
                                y * weight[j] + bias[j]
                            };
                        }
                    }
                    _ => {
                        let ms = row.iter().map(|v| v * v).sum::<f64>() / c as f64;
                        let rstd = 1.0 / (ms + LAYERNORM_EPS as f64).sqrt();
                        for (j, (o, v)) in o.iter_mut().zip(row).enumerate() {
                            *o = if weight.is_empty() {
                                v * rstd
                            } else {
                                v * rstd * weight[j]
                            };
                        }
                    }
                }
            });
            out
        }
        (Op::Gemm, Problem::Gemm { m, n, k }) => {
            let (a, b) = (get("a"), get("b"));
            let (lda, ldb, _) = problem::gemm_ld(inst, m, n, k);
            let layout = inst.params.layout.unwrap_or(Layout::Nn);
            let a_at = |i: usize, p: usize| {
                if !layout.a_transposed() {
                    a[i * lda as usize + p]
                } else {
                    a[p * lda as usize + i]
                }
            };
            let b_at = |p: usize, j: usize| {
                if !layout.b_transposed() {
                    b[p * ldb as usize + j]
                } else {
                    b[j * ldb as usize + p]
                }
            };
            let mut acc = vec![0.0; (m * n) as usize];
            acc.par_chunks_mut(n as usize)
                .enumerate()
                .for_each(|(i, row)| {
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = (0..k as usize).map(|p| a_at(i, p) * b_at(p, j)).sum();
                    }
                });
            gemm_epilogue(inst, p, &acc, inp)
        }
        _ => Vec::new(),
    }
}

/// Applies a GEMM instance's epilogue (bias per column, residual C) to accumulated A·B.
pub fn gemm_epilogue(inst: &InstanceEntry, p: Problem, acc: &[f64], inp: &Inputs) -> Vec<f64> {
    let Problem::Gemm { n, .. } = p else {
        return Vec::new();
    };
    let empty = Vec::new();
    let bias = inp.get("bias").unwrap_or(&empty);
    let c = inp.get("c").unwrap_or(&empty);
    let n = n as usize;
    acc.par_iter()
        .enumerate()
        .map(|(idx, &v)| {
            let bv = if bias.is_empty() { 0.0 } else { bias[idx % n] };
            let cv = if c.is_empty() { 0.0 } else { c[idx] };
            epilogue(&inst.epilogue, v, bv, cv)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.5, 0.9995930479825550),
            (-3.5, -0.9999992569016276),
        ] {
            assert!(
                (erf(x) - want).abs() < 1e-13,
                "erf({x}) = {} not {want}",
                erf(x)
            );
        }
    }

    #[test]
    fn epilogue_chain_in_order() {
        assert_eq!(
            epilogue(&[Epilogue::Bias, Epilogue::Relu], -1.0, 0.5, 0.0),
            0.0
        );
        assert_eq!(
            epilogue(&[Epilogue::Relu, Epilogue::Bias], -1.0, 0.5, 0.0),
            0.5
        );
        assert!((epilogue(&[Epilogue::Gelu], 1.0, 0.0, 0.0) - 0.8411919906082768).abs() < 1e-12);
    }
}
