//! The shapes `verify` tries on a GEMM and the ones `bench` times.

use crate::launch::GridRule;
use crate::manifest::InstanceEntry;
use crate::ops::verification::{hostile, Case, FamilyCases, Numerics, Problem};

pub static CASES: FamilyCases = FamilyCases {
    verify,
    bench,
    problem_of: |_, shape| match shape {
        &[m, n, k] => Some(Problem::Gemm { m, n, k }),
        _ => None,
    },
    tune_sizes: &[],
};

/// Every layout with M, N and K off the tile (by one, and by a vector so that the transposed
/// layouts, whose leading dimension is M, are aligned), primes, 1024³ against the CPU and a
/// larger shape against cuBLAS; outlier and subnormal inputs on a ragged shape.
fn verify(inst: &InstanceEntry) -> Vec<Case> {
    match &inst.launch.grid {
        GridRule::Tiles { tile_m, tile_n } => tiles(inst, *tile_m, *tile_n),
        GridRule::Persistent { tile_m, tile_n, .. } => persistent(inst, *tile_m, *tile_n),
        _ => Vec::new(),
    }
}

fn tiles(inst: &InstanceEntry, tile_m: u32, tile_n: u32) -> Vec<Case> {
    let vec = inst.dtype.per_16_bytes() as u64;
    let mut out = Vec::new();
    let (tm, tn) = (tile_m as u64, tile_n as u64);
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
        inst,
        Problem::Gemm {
            m: tm + v,
            n: tn.saturating_sub(v).max(v),
            k: 64 + v,
        },
        &[Numerics::Outliers, Numerics::Subnormal],
    );
    out
}

fn persistent(inst: &InstanceEntry, tile_m: u32, tile_n: u32) -> Vec<Case> {
    let mut out = Vec::new();
    // Stored with padded rows, so any M, N and K is aligned: 1, tile edges ±1, K off
    // the 64-wide k block, primes; ld larger than the row (padding of NaN); pointers
    // 16-byte but not 128-byte aligned; grids capped so every block walks several
    // tiles; 1024³ against the CPU, 2056×3080×2048 against cuBLAS.
    let (tm, tn) = (tile_m as u64, tile_n as u64);
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
    out
}

/// The shapes of the project's goals: squares from 1024 to 8192, Llama-class projections,
/// and skinny ones (16 and 128 rows).
fn bench(_: &InstanceEntry) -> Vec<Problem> {
    [
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (8192, 11008, 4096),
        (16384, 4096, 4096),
        (16, 4096, 4096),
        (128, 4096, 4096),
        (16, 11008, 4096),
        (128, 11008, 4096),
    ]
    .map(|(m, n, k)| Problem::Gemm { m, n, k })
    .to_vec()
}
