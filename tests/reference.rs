//! The CPU side of `tilegen verify`, without a GPU: the reference against values computed by
//! hand (so the reference and a kernel cannot share a mistake), and, for every instance of the
//! checked-in library and every case verify would run, a reference that is complete, finite
//! where it should be, and fast. (A reference that hangs or yields NaN would waste a whole GPU
//! run.)

use std::time::Instant;

use tilegen::__internal::gpu::problem::{self, Numerics, Problem};
use tilegen::__internal::gpu::reference::{self, Inputs};
use tilegen::__internal::gpu::{data, verify};
use tilegen::ArgKind;
use tilegen::{Epilogue, Layout, Op};
use tilegen::{InstanceEntry, Manifest};

fn manifest() -> Manifest {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/generated/manifest.json"
    ))
    .unwrap();
    Manifest::from_bytes(&bytes).unwrap()
}

/// An instance of the library with this op (and, for GEMM, f32 so nothing rounds).
fn instance(op: Op) -> InstanceEntry {
    manifest()
        .instances
        .into_iter()
        .find(|i| i.op == op && i.epilogue.is_empty() && i.params.tf32 != Some(true))
        .unwrap_or_else(|| panic!("no plain {op:?} instance"))
}

fn inputs(pairs: &[(&str, &[f64])]) -> Inputs {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{what}[{i}]: {g} != {w}"
        );
    }
}

#[test]
fn softmax_by_hand() {
    let inst = instance(Op::Softmax);
    let p = Problem::Rows { rows: 2, cols: 3 };
    let inp = inputs(&[("x", &[1.0, 2.0, 3.0, 0.0, f64::NEG_INFINITY, 0.0])]);
    let ex = reference::compute(&inst, p, &inp).unwrap();
    // e^-2, e^-1, 1 over their sum; a -inf entry gives 0 and the rest share equally.
    let s = 1.0 + (-1f64).exp() + (-2f64).exp();
    let want = [(-2f64).exp() / s, (-1f64).exp() / s, 1.0 / s, 0.5, 0.0, 0.5];
    assert_close(&ex.values, &want, "softmax");
    // A row of only -inf has no maximum: NaN, as PyTorch gives.
    let inf = f64::NEG_INFINITY;
    let ex =
        reference::compute(&inst, p, &inputs(&[("x", &[inf, inf, inf, 1.0, 1.0, 1.0])])).unwrap();
    assert!(ex.values[..3].iter().all(|v| v.is_nan()));
    assert_close(&ex.values[3..], &[1.0 / 3.0; 3], "softmax after a -inf row");
}

#[test]
fn norms_by_hand() {
    let mut ln = instance(Op::LayerNorm);
    ln.params.affine = Some(true);
    let p = Problem::Rows { rows: 1, cols: 4 };
    let inp = inputs(&[
        ("x", &[1.0, 2.0, 3.0, 4.0]),
        ("weight", &[1.0, 2.0, 0.5, -1.0]),
        ("bias", &[0.0, 1.0, 0.0, 10.0]),
    ]);
    // mean 2.5, variance 1.25: (x - 2.5) / sqrt(1.25 + eps) * w + b, eps as the kernels
    // take it (an f32 argument).
    let eps = problem::LAYERNORM_EPS as f64;
    let r = 1.0 / (1.25 + eps).sqrt();
    let want = [
        -1.5 * r,
        -0.5 * r * 2.0 + 1.0,
        0.5 * r * 0.5,
        -1.5 * r + 10.0,
    ];
    let got = reference::compute(&ln, p, &inp).unwrap().values;
    assert_close(&got, &want, "layernorm");

    let rms = instance(Op::RmsNorm);
    let p = Problem::Rows { rows: 1, cols: 2 };
    let inp = inputs(&[("x", &[3.0, 4.0]), ("weight", &[1.0, -2.0])]);
    // mean of squares 12.5.
    let r = 1.0 / (12.5 + eps).sqrt();
    let want: Vec<f64> = if rms.params.affine == Some(false) {
        vec![3.0 * r, 4.0 * r]
    } else {
        vec![3.0 * r, -8.0 * r]
    };
    assert_close(
        &reference::compute(&rms, p, &inp).unwrap().values,
        &want,
        "rmsnorm",
    );
}

#[test]
fn epilogue_steps_by_hand() {
    use reference::epilogue;
    let one = |e: Epilogue, v: f64| epilogue(&[e], v, 0.25, 3.0);
    assert_eq!(one(Epilogue::Scale, 3.0), 1.5); // alpha 0.5
    assert_eq!(one(Epilogue::Bias, 3.0), 3.25);
    assert_eq!(one(Epilogue::Residual, 3.0), 6.0);
    assert_eq!(one(Epilogue::Relu, -3.0), 0.0);
    assert_eq!(one(Epilogue::Relu, 3.0), 3.0);
    // GELU(1): tanh form 0.8411919906, erf form 0.8413447461; SiLU(1) = 1/(1+e^-1).
    assert!((one(Epilogue::Gelu, 1.0) - 0.841_191_990_6).abs() < 1e-9);
    assert!((one(Epilogue::GeluErf, 1.0) - 0.841_344_746_1).abs() < 1e-9);
    assert!((one(Epilogue::GeluErf, -3.0) + 0.004_049_694_9).abs() < 1e-9);
    assert!((one(Epilogue::Silu, 1.0) - 0.731_058_578_6).abs() < 1e-9);
    // A chain applies in order.
    assert_eq!(
        epilogue(&[Epilogue::Bias, Epilogue::Relu], -1.0, 0.5, 0.0),
        0.0
    );
    assert_eq!(
        epilogue(&[Epilogue::Relu, Epilogue::Bias], -1.0, 0.5, 0.0),
        0.5
    );
}

#[test]
fn elementwise_by_hand() {
    let add = instance(Op::VectorAdd);
    let p = Problem::Elements { n: 3, cols: 1 };
    let ex = reference::compute(
        &add,
        p,
        &inputs(&[("a", &[1.0, 2.0, -3.0]), ("b", &[0.5, 0.0, 3.0])]),
    )
    .unwrap();
    assert_close(&ex.values, &[1.5, 2.0, 0.0], "vector_add");
    let mut fma = instance(Op::Fma);
    fma.epilogue = vec![Epilogue::Bias, Epilogue::Relu];
    let p = Problem::Elements { n: 4, cols: 2 };
    let inp = inputs(&[
        ("x", &[1.0, 2.0, 3.0, -4.0]),
        ("w", &[2.0, 2.0, 2.0, 2.0]),
        ("b", &[0.0, 1.0, 0.0, 1.0]),
        ("bias", &[10.0, -100.0]), // a row of `cols`, repeating
    ]);
    let ex = reference::compute(&fma, p, &inp).unwrap();
    assert_close(&ex.values, &[12.0, 0.0, 16.0, 0.0], "fma bias relu");
}

#[test]
fn every_gemm_layout_by_hand() {
    // A is 2x3, B is 3x2, D = A·B = [[58, 64], [139, 154]]. M, N and K differ, so a wrong
    // leading-dimension rule shows. `t` stores an operand transposed: Aᵀ as 3 rows of 2.
    let a_n = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let a_t = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
    let b_n = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
    let b_t = [7.0, 9.0, 11.0, 8.0, 10.0, 12.0];
    let mut inst = instance(Op::Gemm);
    inst.epilogue.clear();
    let p = Problem::Gemm { m: 2, n: 2, k: 3 };
    for (layout, a, b, ld) in [
        (Layout::Nn, &a_n, &b_n, (3, 2, 2)),
        (Layout::Nt, &a_n, &b_t, (3, 3, 2)),
        (Layout::Tn, &a_t, &b_n, (2, 2, 2)),
        (Layout::Tt, &a_t, &b_t, (2, 3, 2)),
    ] {
        inst.params.layout = Some(layout);
        assert_eq!(
            problem::gemm_ld(&inst, 2, 2, 3),
            ld,
            "{layout:?} leading dimensions"
        );
        let ex = reference::compute(&inst, p, &inputs(&[("a", a), ("b", b)])).unwrap();
        assert_close(
            &ex.values,
            &[58.0, 64.0, 139.0, 154.0],
            &format!("{layout:?}"),
        );
    }
    // Bias per column, then the residual C.
    inst.params.layout = Some(Layout::Nn);
    inst.epilogue = vec![Epilogue::Scale, Epilogue::Bias, Epilogue::Residual];
    let inp = inputs(&[
        ("a", &a_n),
        ("b", &b_n),
        ("bias", &[1.0, 2.0]),
        ("c", &[0.0, 0.0, 0.0, 100.0]),
    ]);
    let ex = reference::compute(&inst, p, &inp).unwrap();
    assert_close(
        &ex.values,
        &[30.0, 34.0, 70.5, 179.0],
        "scale bias residual",
    );
}

#[test]
fn an_op_the_reference_does_not_handle_is_an_error() {
    let inst = instance(Op::Softmax);
    let p = Problem::Gemm { m: 1, n: 1, k: 1 };
    assert!(reference::compute(&inst, p, &Inputs::new()).is_err());
    // Missing inputs are an error too, not an empty answer.
    let p = Problem::Rows { rows: 1, cols: 1 };
    assert!(reference::compute(&inst, p, &Inputs::new()).is_err());
}

#[test]
fn references_are_complete_and_fast_for_every_verify_case() {
    let manifest = manifest();
    let mut rng = data::rng(7);
    let start = Instant::now();
    let mut cases = 0;
    let mut large_done = std::collections::BTreeSet::new();
    for inst in &manifest.instances {
        // Large cases differ between instances of an op only in their numbers: check them
        // for the first instance of each op (the suite's time matters on 2 cores).
        // Attention's cases and reference are its own (strides, varlen): gpu::attention.
        if inst.op == Op::Attention {
            assert!(!tilegen::__internal::gpu::attention::verify_cases(inst, None).is_empty());
            continue;
        }
        let large_ok = large_done.insert(inst.op);
        let all = problem::verify_cases(inst);
        assert!(!all.is_empty(), "{} has no verify cases", inst.name);
        // Every GEMM layout is verified off the tile, not only at 1024³.
        if inst.op == Op::Gemm {
            let ragged = all.iter().filter(|c| {
                matches!(c.problem, Problem::Gemm { m, .. } if m % inst.params.tile.unwrap()[0] as u64 != 0)
            });
            assert!(
                ragged.count() >= 4,
                "{}: too few ragged GEMM cases",
                inst.name
            );
        }
        for case in all {
            let p = case.problem;
            if let Problem::Gemm { m, n, k } = p {
                if m * n * k > 1 << 24 {
                    continue; // large GEMMs are checked against cuBLAS on the GPU
                }
            }
            if problem::output_len(p) > 1 << 20 && !large_ok {
                continue;
            }
            cases += 1;
            let (inputs, _) = verify::case_inputs(inst, &case, &mut rng);
            let t = Instant::now();
            let ex = reference::compute(inst, p, &inputs).unwrap();
            // Several outputs (add_rmsnorm's h and y) come one after another.
            let outputs = inst.args.iter().filter(|a| a.kind == ArgKind::Out).count();
            let len = problem::output_len(p) as usize * outputs;
            assert_eq!(ex.values.len(), len, "{} {case}", inst.name);
            assert_eq!(ex.err.len(), len, "{} {case}", inst.name);
            // Only a softmax row of nothing but -inf has no answer (NaN).
            let nan_rows = usize::from(case.numerics == Numerics::Infinities);
            let cols = match p {
                Problem::Rows { cols, .. } => cols as usize,
                _ => len,
            };
            let nans = ex.values.iter().filter(|v| v.is_nan()).count();
            assert_eq!(
                nans,
                nan_rows * cols,
                "{} {case}: NaN in the reference",
                inst.name
            );
            assert!(
                ex.err.iter().all(|e| e.is_finite() && *e >= 0.0),
                "{} {case}: bad error bound",
                inst.name
            );
            assert!(
                t.elapsed().as_secs() < 20,
                "{} {case}: reference too slow",
                inst.name
            );
        }
    }
    eprintln!(
        "references for {cases} cases of {} instances in {:?}",
        manifest.instances.len(),
        start.elapsed()
    );
}

/// A wrong `--lib` is named (exit 5) before the GPU is looked for, on any machine, and a bad
/// `--op` is a usage error (exit 2).
#[test]
fn verify_checks_its_arguments_before_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-library");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tilegen"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["verify", "--lib", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-library/manifest.json"), "{err}");
    let out = run(&["verify", "--op", "transpose"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--op transpose"));
}
