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
    let mut bytes = Vec::with_capacity(len * dtype.size() as usize);
    for _ in 0..len {
        encode(dtype, rng.random_range(lo..hi), &mut bytes);
    }
    let values = decode(dtype, &bytes);
    HostTensor {
        dtype,
        bytes,
        values,
    }
}

/// Relative error ‖out − ref‖₂ / ‖ref‖₂, and whether every output is finite where the
/// reference is (so NaN poison that was never overwritten fails).
pub fn compare(out: &[f64], reference: &[f64]) -> (f64, usize) {
    let mut num = 0.0;
    let mut den = 0.0;
    let mut non_finite = 0;
    for (o, r) in out.iter().zip(reference) {
        if !o.is_finite() && r.is_finite() {
            non_finite += 1;
            continue;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    let rel = if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    };
    (rel, non_finite)
}

/// The relative error ‖round(ref) − ref‖₂ / ‖ref‖₂ of the exact answer rounded to `dtype`: what
/// even a perfect kernel cannot beat. It is ~1e-4 for normal f16 values, but reaches percents
/// where outputs are f16 subnormals (below 6.1e-5: GELU of x < -4.5 is one), which a
/// one-element case compares alone. Values past the dtype's range are left out (their rounding
/// is infinite, and an infinite output fails as not finite anyway).
pub fn rounding_floor(dtype: DType, reference: &[f64]) -> f64 {
    let mut bytes = Vec::with_capacity(dtype.size() as usize);
    let (mut num, mut den) = (0.0, 0.0);
    for &r in reference.iter().filter(|r| r.is_finite()) {
        bytes.clear();
        encode(dtype, r as f32, &mut bytes);
        let q = decode(dtype, &bytes)[0];
        if !q.is_finite() {
            continue;
        }
        num += (q - r) * (q - r);
        den += r * r;
    }
    if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    }
}

/// Largest relative error accepted for a case: the instance's tolerance, or twice the rounding
/// floor of its exact answer where that is larger. A kernel that computes in f32 and rounds
/// once lands within 2x the floor (at worst it rounds the other way at a rounding boundary,
/// where the floor is half a quantum), so this only widens cases no kernel could meet, such as
/// one f16 subnormal output; everywhere else the dtype's bound applies unchanged.
pub fn case_tolerance(inst: &crate::manifest::InstanceEntry, floor: f64) -> f64 {
    tolerance_for(inst).max(2.0 * floor)
}

/// Largest relative error accepted for an instance: by output dtype, and at TF32's precision
/// for GEMMs that run f32 on TF32 tensor cores. TF32 rounds both operands to 10-bit mantissas
/// (2^-11 each, so ~2^-10 per product); over a handful of outputs (a 1x4 result of K = 4) the
/// error norm against the result's norm is a small sample and reached 1.5e-3 on the H200, so
/// the bound is twice the per-product figure.
pub fn tolerance_for(inst: &crate::manifest::InstanceEntry) -> f64 {
    if inst.params.tf32 == Some(true) {
        return 2e-3;
    }
    tolerance(inst.out_dtype)
}

/// Largest relative error accepted for outputs of this dtype.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 1e-3,
        DType::Bf16 => 1e-2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_floor_is_what_the_output_dtype_cannot_represent() {
        // Normal f16 values round to within 2^-11 of themselves.
        assert!(rounding_floor(DType::F16, &[1.0, 1.0 / 3.0, -2.7]) < 5e-4);
        assert!(rounding_floor(DType::F32, &[1.0 / 3.0]) < 1e-7);
        // An f16 subnormal (GELU(-4.6) ~ -1.0e-5) is 2^-24 quanta apart: a one-element case
        // cannot meet f16's 1e-3 on its own. The rounded exact answer, and the one a quantum
        // off at a rounding boundary, pass within twice the floor.
        let reference = [-1.0093e-5];
        let floor = rounding_floor(DType::F16, &reference);
        assert!(floor > tolerance(DType::F16), "{floor}");
        let mut bytes = Vec::new();
        encode(DType::F16, reference[0] as f32, &mut bytes);
        let best = decode(DType::F16, &bytes);
        assert!(compare(&best, &reference).0 <= floor);
        let quantum = 2f64.powi(-24);
        let boundary = [-(600.5 * quantum)];
        let other_way = [-(601.0 * quantum)];
        let floor = rounding_floor(DType::F16, &boundary);
        assert!(compare(&other_way, &boundary).0 <= 2.0 * floor);
        // Values past f16's range add nothing (not an infinite floor).
        assert!(rounding_floor(DType::F16, &[1e6, 1.0]) < 5e-4);
        // Normal values keep the dtype's bound, and a wrong answer still fails: 4 % off.
        assert!(2.0 * rounding_floor(DType::F16, &[1.0, -2.7]) < tolerance(DType::F16));
        assert!(compare(&[1.04], &[1.0]).0 > tolerance(DType::F16));
    }
}
