//! The shapes `verify` tries on an elementwise kernel and the ones `bench` times.

use crate::launch::GridRule;
use crate::manifest::InstanceEntry;
use crate::ops::verification::{hostile, Case, FamilyCases, Numerics, Problem};
use crate::spec::model::Epilogue;

pub static CASES: FamilyCases = FamilyCases {
    verify,
    bench,
    problem_of,
    // The pick depends on the size against the SM count: tune smaller sizes too.
    tune_sizes: &[&[1 << 20], &[1 << 24]],
};

/// Empty (nothing may be written), 1, vector and block edges ±1, a prime, a large size; grids
/// that make the grid-stride loop take several trips; wide and subnormal inputs.
fn verify(inst: &InstanceEntry) -> Vec<Case> {
    let GridRule::Elements { elems_per_block } = &inst.launch.grid else {
        return Vec::new();
    };
    let vec = inst.dtype.per_16_bytes() as u64;
    let mut out = Vec::new();
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
    hostile(&mut out, inst, elements(epb + 1), &kinds);
    hostile(&mut out, inst, elements(10_007), &kinds);
    out
}

/// A quarter of a billion elements.
fn bench(inst: &InstanceEntry) -> Vec<Problem> {
    vec![Problem::Elements {
        n: 1 << 28,
        cols: bench_cols(inst),
    }]
}

/// The row length bench and tune give a broadcast bias (1 without one).
fn bench_cols(inst: &InstanceEntry) -> u64 {
    if inst.epilogue.contains(&Epilogue::Bias) {
        4096
    } else {
        1
    }
}

fn problem_of(inst: &InstanceEntry, shape: &[u64]) -> Option<Problem> {
    match shape {
        &[n] => Some(Problem::Elements {
            n,
            cols: bench_cols(inst),
        }),
        _ => None,
    }
}
