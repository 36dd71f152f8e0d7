//! The CPU side of `tilegen verify`, without a GPU: for every instance of the checked-in
//! library and every shape verify would try, the reference computes finite values quickly.
//! (A reference that hangs or yields NaN would waste a whole GPU session.)

use std::time::Instant;

use tilegen::gpu::{data, problem, reference};
use tilegen::manifest::Manifest;
use tilegen::ops::ArgKind;

#[test]
fn references_are_finite_and_fast_for_every_verify_case() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/generated/manifest.json"
    ))
    .unwrap();
    let manifest = Manifest::from_bytes(&bytes).unwrap();
    let mut rng = data::rng(7);
    let start = Instant::now();
    for inst in &manifest.instances {
        let cases = problem::verify_cases(inst);
        assert!(!cases.is_empty(), "{} has no verify cases", inst.name);
        for p in cases {
            if let problem::Problem::Gemm { m, n, k } = p {
                if m * n * k > 1 << 24 {
                    continue; // large GEMMs are checked against cuBLAS on the GPU
                }
            }
            let mut inputs = reference::Inputs::new();
            for a in inst.args.iter().filter(|a| a.kind == ArgKind::In) {
                let dt = tilegen::spec::DType::parse(&a.ty).unwrap();
                let len = problem::buffer_len(inst, &a.name, p) as usize;
                inputs.insert(
                    a.name.clone(),
                    data::uniform(&mut rng, dt, len, -2.0, 2.0).values,
                );
            }
            let t = Instant::now();
            let out = reference::compute(inst, p, &inputs);
            let expect_len = problem::buffer_len(inst, "out", p);
            assert_eq!(out.len() as u64, expect_len, "{} {p}", inst.name);
            assert!(
                out.iter().all(|v| v.is_finite()),
                "{} {p}: non-finite reference",
                inst.name
            );
            assert!(
                t.elapsed().as_secs() < 20,
                "{} {p}: reference too slow",
                inst.name
            );
        }
    }
    eprintln!(
        "references for {} instances in {:?}",
        manifest.instances.len(),
        start.elapsed()
    );
}
