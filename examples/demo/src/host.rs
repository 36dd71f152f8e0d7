//! Host side of the demo: element types, fresh random data, CPU references in f64 and the
//! comparison against them.

use cudarc::driver::DeviceRepr;
use half::bf16;

/// An element type the demo runs, with its error bound against the f64 reference
/// (relative L2 error: f32 ~1e-5, bf16 ~1e-2, as `tilegen verify` uses).
pub trait Elem: Copy + Default + DeviceRepr + Send + Sync + 'static {
    const NAME: &'static str;
    const BOUND: f64;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
    const BOUND: f64 = 1e-5;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Elem for bf16 {
    const NAME: &'static str = "bf16";
    const BOUND: f64 = 1e-2;
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

/// splitmix64: small, seedable, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `len` random values in [lo, hi) rounded to `T`, and the same values as f64.
pub fn random<T: Elem>(rng: &mut Rng, len: usize, lo: f64, hi: f64) -> (Vec<T>, Vec<f64>) {
    let v: Vec<T> = (0..len).map(|_| T::from_f64(rng.uniform(lo, hi))).collect();
    let f = v.iter().map(|x| x.to_f64()).collect();
    (v, f)
}

/// GELU, tanh approximation, as the kernels compute it.
pub fn gelu(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

pub fn softmax_rows(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for (o, v) in out[r * cols..(r + 1) * cols].iter_mut().zip(row) {
            *o = (v - max).exp() / sum;
        }
    }
    out
}

pub fn layernorm_rows(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    rows: usize,
    cols: usize,
    eps: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for c in 0..cols {
            out[r * cols + c] = (row[c] - mean) * rstd * w[c] + b[c];
        }
    }
    out
}

/// Outcome of comparing a kernel's output with the reference.
/// Attention forward in f64 over dense [batch, seq, heads, d] tensors: `o` like `q` and the
/// row log-sum-exp [batch, heads_q, seq_q]; a causal mask is bottom-right aligned (row r sees
/// keys 0 ..= r + seq_kv - seq_q) and a row that sees no key gives zeros and -inf.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (batch, heads_q, heads_kv, seq_q, seq_kv, d): (usize, usize, usize, usize, usize, usize),
    causal: bool,
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut o = vec![0.0; batch * seq_q * heads_q * d];
    let mut lse = vec![f64::NEG_INFINITY; batch * heads_q * seq_q];
    let group = heads_q / heads_kv;
    let mut s = vec![0.0; seq_kv];
    for b in 0..batch {
        for h in 0..heads_q {
            let hk = h / group;
            for r in 0..seq_q {
                let qrow = &q[((b * seq_q + r) * heads_q + h) * d..][..d];
                let last = if causal {
                    (r + seq_kv).checked_sub(seq_q)
                } else {
                    seq_kv.checked_sub(1)
                };
                let Some(last) = last.map(|l| l.min(seq_kv - 1)) else {
                    continue;
                };
                let mut max = f64::NEG_INFINITY;
                for (j, sj) in s.iter_mut().enumerate().take(last + 1) {
                    let krow = &k[((b * seq_kv + j) * heads_kv + hk) * d..][..d];
                    *sj = scale * qrow.iter().zip(krow).map(|(x, y)| x * y).sum::<f64>();
                    max = max.max(*sj);
                }
                let mut sum = 0.0;
                let orow = &mut o[((b * seq_q + r) * heads_q + h) * d..][..d];
                for (j, sj) in s.iter().enumerate().take(last + 1) {
                    let p = (sj - max).exp();
                    sum += p;
                    let vrow = &v[((b * seq_kv + j) * heads_kv + hk) * d..][..d];
                    for (x, y) in orow.iter_mut().zip(vrow) {
                        *x += p * y;
                    }
                }
                orow.iter_mut().for_each(|x| *x /= sum);
                lse[(b * heads_q + h) * seq_q + r] = max + sum.ln();
            }
        }
    }
    (o, lse)
}

pub struct Comparison {
    /// ‖out − ref‖₂ / ‖ref‖₂.
    pub rel_l2: f64,
    pub max_abs: f64,
    /// Outputs that are NaN or infinite where the reference is finite (poison left unwritten
    /// shows up here).
    pub not_finite: usize,
}

impl Comparison {
    pub fn new<T: Elem>(out: &[T], reference: &[f64]) -> Comparison {
        assert_eq!(out.len(), reference.len());
        let (mut diff, mut norm, mut max_abs, mut not_finite) = (0.0f64, 0.0f64, 0.0f64, 0);
        for (o, r) in out.iter().zip(reference) {
            let o = o.to_f64();
            if !o.is_finite() && r.is_finite() {
                not_finite += 1;
                continue;
            }
            diff += (o - r) * (o - r);
            norm += r * r;
            max_abs = max_abs.max((o - r).abs());
        }
        Comparison {
            rel_l2: diff.sqrt() / norm.sqrt().max(f64::MIN_POSITIVE),
            max_abs,
            not_finite,
        }
    }

    pub fn passes(&self, bound: f64) -> bool {
        self.not_finite == 0 && self.rel_l2 <= bound
    }
}
