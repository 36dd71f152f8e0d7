//! The shapes `verify` tries on a row kernel and the ones `bench` times.

use crate::launch::GridRule;
use crate::manifest::InstanceEntry;
use crate::ops::verification::{hostile, Case, FamilyCases, Numerics, Problem};

pub static CASES: FamilyCases = FamilyCases {
    verify,
    bench,
    problem_of: |_, shape| match shape {
        &[rows, cols] => Some(Problem::Rows { rows, cols }),
        _ => None,
    },
    tune_sizes: &[],
};

/// Row lengths of 1, vector and chunk edges ±1, a prime, the row limit; no rows; several rows
/// per block; grids that stride; offset, outlier, subnormal (and for softmax infinite)
/// inputs on ragged rows.
fn verify(inst: &InstanceEntry) -> Vec<Case> {
    let GridRule::Rows {
        max_cols,
        rows_per_block,
    } = &inst.launch.grid
    else {
        return Vec::new();
    };
    let vec = inst.dtype.per_16_bytes() as u64;
    let mut out = Vec::new();
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
    if crate::ops::info(inst.op)
        .verification
        .as_ref()
        .is_some_and(|v| v.infinities)
    {
        kinds.push(Numerics::Infinities);
    }
    for c in [97.min(limit), (chunk + 1).min(limit), limit] {
        hostile(&mut out, inst, Problem::Rows { rows: 37, cols: c }, &kinds);
    }
    out
}

/// The sizes of the project's goals: 32768×4096, 8192×32768, 65536×1024.
fn bench(_: &InstanceEntry) -> Vec<Problem> {
    vec![
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
    ]
}
