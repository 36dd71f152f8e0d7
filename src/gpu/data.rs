//! Host-side tensors: random data quantized to a dtype, and conversions between dtype bytes
//! and f64 for references and comparisons.

use rand::{Rng, SeedableRng};

use crate::spec::model::DType;

/// A host tensor: its bytes in the kernel's dtype and the same values exactly as f64.
pub struct HostTensor {
    pub dtype: DType,
    pub bytes: Vec<u8>,
    pub values: Vec<f64>,
}

/// The dtype of a manifest argument type (`f32`, `f16`, `bf16`).
pub fn dtype_of(ty: &str) -> DType {
    DType::parse(ty).unwrap_or(DType::F32)
}

/// Rounds `x` to the dtype, returning the dtype's bytes.
fn encode(dtype: DType, x: f32, out: &mut Vec<u8>) {
    match dtype {
        DType::F32 => out.extend_from_slice(&x.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&half::f16::from_f32(x).to_le_bytes()),
        DType::Bf16 => out.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
    }
}

/// Decodes dtype bytes to f64.
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::Bf16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
    }
}

/// A seeded generator (the seed is printed so a failure can be replayed).
pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// `len` values uniform in [lo, hi), rounded to the dtype.
pub fn uniform(rng: &mut impl Rng, dtype: DType, len: usize, lo: f32, hi: f32) -> HostTensor {
    let values: Vec<f32> = (0..len).map(|_| rng.random_range(lo..hi)).collect();
    from_values(dtype, &values)
}

/// A host tensor of `values` rounded to the dtype (±inf stay infinite).
pub fn from_values(dtype: DType, values: &[f32]) -> HostTensor {
    let mut bytes = Vec::with_capacity(values.len() * dtype.size() as usize);
    for &x in values {
        encode(dtype, x, &mut bytes);
    }
    let values = decode(dtype, &bytes);
    HostTensor {
        dtype,
        bytes,
        values,
    }
}

/// The tensor's bytes with every sign bit cleared: |x| elementwise, exactly.
pub fn abs_bytes(t: &HostTensor) -> Vec<u8> {
    let size = t.dtype.size() as usize;
    let mut bytes = t.bytes.clone();
    for c in bytes.chunks_exact_mut(size) {
        c[size - 1] &= 0x7F; // little-endian: the sign is the last byte's top bit
    }
    bytes
}

/// Unit roundoff of a dtype: half the gap between 1 and the next value.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2f64.powi(-24),
        DType::F16 => 2f64.powi(-11),
        DType::Bf16 => 2f64.powi(-8),
    }
}

/// Largest finite value of a dtype.
pub fn max_finite(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f32::MAX as f64,
        DType::F16 => half::f16::MAX.to_f64(),
        DType::Bf16 => half::bf16::MAX.to_f64(),
    }
}

/// Absolute slack every element gets: half the dtype's smallest subnormal (rounding of a tiny
/// value is absolute, not relative), and 2^-100 for f32 intermediates flushed to zero by the
/// kernels' `ftz` instructions (bf16 subnormals are f32 subnormals).
pub fn absolute_slack(dtype: DType) -> f64 {
    let half_subnormal = match dtype {
        DType::F32 => 2f64.powi(-150),
        DType::F16 => 2f64.powi(-25),
        DType::Bf16 => 2f64.powi(-134),
    };
    half_subnormal + 2f64.powi(-100)
}

/// The element of a case farthest outside (or nearest to) its bound.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Worst {
    pub index: usize,
    pub out: f64,
    pub expected: f64,
    pub bound: f64,
    /// |out − expected| / bound: above 1 fails (infinite for a wrong NaN/inf).
    pub ratio: f64,
}

/// Every element of an output judged against its expected value.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ElementReport {
    pub checked: usize,
    pub failed: usize,
    /// Outputs that were NaN/inf where the expected value is finite (unwritten poison
    /// included).
    pub non_finite: usize,
    pub worst: Option<Worst>,
    /// ‖out − expected‖₂ / ‖expected‖₂ over the finite expected values, for reference.
    pub rel_l2: f64,
}

impl ElementReport {
    pub fn passed(&self) -> bool {
        self.failed == 0
    }
}

/// Checks every output element: `|o − r| ≤ atol + e + u·(|r| + e)`, with `e` the reference's
/// bound for an f32 kernel, `u` the output dtype's unit roundoff and `atol` its
/// `absolute_slack`. An expected NaN wants NaN, an expected ±inf the same infinity, and an
/// expected value past the dtype's range (after rounding) the infinity of its sign or the
/// largest finite value. Outputs and references of different lengths are an error (an empty
/// problem has both empty).
pub fn check_elements(
    out: &[f64],
    expected: &super::reference::Expected,
    dtype: DType,
) -> Result<ElementReport, String> {
    let (r, e) = (&expected.values, &expected.err);
    if out.len() != r.len() || e.len() != r.len() {
        return Err(format!(
            "{} outputs against {} expected values ({} bounds)",
            out.len(),
            r.len(),
            e.len()
        ));
    }
    let u = unit_roundoff(dtype);
    let atol = absolute_slack(dtype);
    let max = max_finite(dtype);
    let mut rep = ElementReport {
        checked: out.len(),
        failed: 0,
        non_finite: 0,
        worst: None,
        rel_l2: 0.0,
    };
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..out.len() {
        let (o, r, e) = (out[i], r[i], e[i]);
        let bound = atol + e + u * (r.abs() + e);
        let ratio = if r.is_nan() {
            if o.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if r.is_infinite() {
            if o == r {
                0.0
            } else {
                f64::INFINITY
            }
        } else if o.is_infinite() {
            // Rounding may overflow only where the exact value is within a bound of the
            // dtype's largest value.
            if o.signum() == r.signum() && r.abs() + bound >= max {
                0.0
            } else {
                rep.non_finite += 1;
                f64::INFINITY
            }
        } else if o.is_nan() {
            rep.non_finite += 1;
            f64::INFINITY
        } else {
            let d = o - r;
            num += d * d;
            den += r * r;
            // Past the range, the largest finite value is as good as the infinity.
            let d = if r.abs() > max {
                (o.abs() - max).abs()
            } else {
                d.abs()
            };
            d / bound
        };
        if ratio > 1.0 {
            rep.failed += 1;
        }
        if rep.worst.is_none_or(|w| ratio > w.ratio) {
            rep.worst = Some(Worst {
                index: i,
                out: o,
                expected: r,
                bound,
                ratio,
            });
        }
    }
    rep.rel_l2 = if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    };
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::super::reference::Expected;
    use super::*;

    fn expected(values: &[f64], err: f64) -> Expected {
        Expected {
            values: values.to_vec(),
            err: vec![err; values.len()],
        }
    }

    #[test]
    fn bounds_are_the_dtypes_rounding_plus_the_kernels_error() {
        // The exact answer rounded to f16 passes; one f16 quantum further does not.
        let r = [1.0 / 3.0, -2.7, 1000.3];
        let rounded: Vec<f64> = r.iter().map(|&v| half::f16::from_f64(v).to_f64()).collect();
        assert!(check_elements(&rounded, &expected(&r, 0.0), DType::F16)
            .unwrap()
            .passed());
        let off: Vec<f64> = rounded
            .iter()
            .map(|&v| v + 2.0 * v.abs() * unit_roundoff(DType::F16) * 2.0)
            .collect();
        let rep = check_elements(&off, &expected(&r, 0.0), DType::F16).unwrap();
        assert_eq!(rep.failed, 3);
        // The kernel's own error bound widens it.
        assert!(check_elements(&off, &expected(&r, 2.0), DType::F16)
            .unwrap()
            .passed());
        // f16 subnormals round by an absolute half quantum.
        let tiny = [-1.0093e-5];
        let q = [half::f16::from_f64(tiny[0]).to_f64()];
        assert!(check_elements(&q, &expected(&tiny, 0.0), DType::F16)
            .unwrap()
            .passed());
    }

    #[test]
    fn one_wrong_element_fails_and_is_named() {
        // A bf16 output whose last row of 7 is zero: the normwise error is small, the
        // element check names the first bad element of the worst ones.
        let n = 12_007 * 7;
        let r: Vec<f64> = (0..n).map(|i| 1.0 + (i % 13) as f64 / 13.0).collect();
        let mut out: Vec<f64> = r
            .iter()
            .map(|&v| half::bf16::from_f64(v).to_f64())
            .collect();
        for o in &mut out[n - 7..] {
            *o = 0.0;
        }
        let rep = check_elements(&out, &expected(&r, 0.0), DType::Bf16).unwrap();
        assert!(rep.rel_l2 < 1e-2, "{}", rep.rel_l2);
        assert_eq!(rep.failed, 7);
        assert!(rep.worst.unwrap().index >= n - 7);
    }

    #[test]
    fn special_values() {
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        // Expected NaN wants NaN; expected inf wants the same inf.
        let ex = expected(&[nan, inf, -inf, 1.0], 0.0);
        assert!(check_elements(&[nan, inf, -inf, 1.0], &ex, DType::F32)
            .unwrap()
            .passed());
        assert_eq!(
            check_elements(&[0.0, inf, -inf, 1.0], &ex, DType::F32)
                .unwrap()
                .failed,
            1
        );
        assert_eq!(
            check_elements(&[nan, -inf, -inf, 1.0], &ex, DType::F32)
                .unwrap()
                .failed,
            1
        );
        // NaN poison left where a finite value belongs.
        let rep = check_elements(&[nan, 2.0], &expected(&[1.0, 2.0], 0.0), DType::F32).unwrap();
        assert_eq!((rep.failed, rep.non_finite), (1, 1));
        assert_eq!(rep.worst.unwrap().index, 0);
        // Past f16's range: inf or the largest finite value, of the right sign.
        let big = expected(&[70_000.0, -70_000.0], 0.0);
        assert!(check_elements(&[inf, -65504.0], &big, DType::F16)
            .unwrap()
            .passed());
        assert!(!check_elements(&[-inf, -65504.0], &big, DType::F16)
            .unwrap()
            .passed());
        // An overflow where the exact value is far inside the range fails.
        assert!(
            !check_elements(&[inf], &expected(&[100.0], 0.0), DType::F16)
                .unwrap()
                .passed()
        );
    }

    #[test]
    fn lengths_must_match() {
        assert!(check_elements(&[1.0], &expected(&[], 0.0), DType::F32).is_err());
        assert_eq!(
            check_elements(&[], &expected(&[], 0.0), DType::F32)
                .unwrap()
                .checked,
            0
        );
        assert!(check_elements(&[1.0, 2.0], &expected(&[1.0], 0.0), DType::F32).is_err());
    }
}
