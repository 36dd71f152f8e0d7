//! SwiGLU's gating op (`silu_mul`: `out = silu(gate) * up`) end to end without a GPU: a spec
//! is accepted and sweeps like the other elementwise ops, its kernel takes gate and up and
//! writes out, the bindings document and check it, and verify's reference and cases are the
//! op's own.

mod common;

use std::path::Path;

use tilegen::__internal::gpu::problem::{self, Numerics, Problem};
use tilegen::__internal::gpu::reference::{self, Inputs};
use tilegen::ArgKind;
use tilegen::Manifest;

use common::instance;
use tilegen::Op;

const SPEC: &str = "\
kernels:
  - name: silu_mul
    op: silu_mul
    dtype: [f32, bf16]
    block: 64
    items: 2
";

/// A library of the spec rendered without NVRTC (no binaries): its manifest, bindings and
/// the bf16 kernel's CUDA C.
fn render(dir: &Path) -> (Manifest, String, String) {
    let (m, out) = common::render_spec(dir, SPEC);
    let bindings = std::fs::read_to_string(out.join("bindings.rs")).unwrap();
    let cu = std::fs::read_to_string(out.join("kernels/silu_mul_bf16_b64_i2.cu")).unwrap();
    (m, bindings, cu)
}

fn inputs(pairs: &[(&str, &[f64])]) -> Inputs {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

#[test]
fn spec_renders_a_two_input_kernel_with_checked_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let (m, bindings, cu) = render(dir.path());
    let names: Vec<&str> = m.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["silu_mul_bf16_b64_i2", "silu_mul_f32_b64_i2"]);
    let inst = instance(&m, "silu_mul_bf16_b64_i2");
    assert_eq!(inst.op, Op::SiluMul);
    let args: Vec<(&str, ArgKind)> = inst
        .args
        .iter()
        .map(|a| (a.name.as_str(), a.kind))
        .collect();
    use ArgKind::*;
    assert_eq!(
        args,
        [("gate", In), ("up", In), ("out", Out), ("n", Scalar)]
    );
    // 64 threads × 2 vectors × 8 bf16 per block, as vector_add.
    assert_eq!(
        inst.launch.grid,
        tilegen::GridRule::Elements {
            elems_per_block: 1024
        }
    );
    // The kernel maps its gate and up through the two-input loop with SiLU's combine.
    assert!(cu.contains("#define TG_OP TG_SILU_MUL"), "{cu}");
    assert!(
        cu.contains("if constexpr (TG_OP == TG_SILU_MUL) return tg_silu(a) * b;"),
        "{cu}"
    );
    assert!(cu.contains("    tg_map2(gate, up, out, n);\n}"), "{cu}");
    // One typed method per dtype, documented by the op, its buffers checked against n.
    assert!(bindings.contains("pub fn silu_mul_bf16("));
    assert!(bindings.contains(
        "/// `out[i] = silu(gate[i]) * up[i]` for `i < n`, in f32 arithmetic (SwiGLU's gating)."
    ));
    assert!(bindings.contains(
        "/// `gate`, `up`, `out` must hold at least `n` elements and start 16-byte aligned"
    ));

    // What the other elementwise ops refuse, silu_mul refuses: an epilogue, a row field.
    let err = common::spec_error(
        dir.path(),
        "kernels:\n  - name: s\n    op: silu_mul\n    dtype: f32\n    epilogue: [relu]\n  - name: t\n    op: silu_mul\n    dtype: f16\n    variant: staged\n",
    );
    assert!(err.contains("b.yaml:5:"), "{err}");
    assert!(err.contains("b.yaml:9:"), "{err}");
}

#[test]
fn reference_is_silu_of_gate_times_up_with_a_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, _) = render(dir.path());
    let inst = instance(&m, "silu_mul_f32_b64_i2");
    let p = Problem::Elements { n: 4, cols: 1 };
    let inp = inputs(&[
        ("gate", &[0.0, 1.0, -2.0, 30.0]),
        ("up", &[5.0, 2.0, 3.0, -1.0]),
    ]);
    let ex = reference::compute(&inst, p, &inp).unwrap();
    let silu = |x: f64| x / (1.0 + (-x).exp());
    let want = [0.0, 2.0 * silu(1.0), 3.0 * silu(-2.0), -silu(30.0)];
    for (g, w) in ex.values.iter().zip(want) {
        assert!((g - w).abs() <= 1e-15 * w.abs().max(1.0), "{g} != {w}");
    }
    // Each bound covers the f32 SiLU's error (a few ulps of |gate|, times |up|) and the
    // product's rounding, and no more than a few thousandths of the value.
    for (i, (&e, &v)) in ex.err.iter().zip(&ex.values).enumerate() {
        assert!(e >= 0.0 && e.is_finite(), "bound {i}: {e}");
        if v != 0.0 {
            assert!(
                e >= v.abs() * 2f64.powi(-24),
                "bound {i} below an f32 rounding"
            );
            assert!(e <= v.abs() * 1e-3, "bound {i} too loose: {e} for {v}");
        }
    }
    assert_eq!(ex.err[0], 0.0, "silu(0) * up is exactly 0");
    // A missing input or a problem of another shape is refused rather than answered.
    assert!(reference::compute(&inst, p, &inputs(&[("gate", &[0.0; 4])])).is_err());
    let rows = Problem::Rows { rows: 1, cols: 4 };
    assert!(reference::compute(&inst, rows, &inp).is_err());
}

#[test]
fn verify_runs_the_elementwise_cases_with_the_gate_stressed() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, _) = render(dir.path());
    let bf16 = instance(&m, "silu_mul_bf16_b64_i2");
    let cases = problem::verify_cases(&bf16);
    let sizes: Vec<u64> = cases
        .iter()
        .filter_map(|c| match c.problem {
            Problem::Elements { n, .. } => Some(n),
            _ => None,
        })
        .collect();
    assert_eq!(sizes.len(), cases.len(), "every case is elementwise");
    // Empty, one, a vector and a block's elements ±1, a prime, a large ragged size.
    for n in [0, 1, 7, 9, 1023, 1025, 10_007, (1 << 22) + 3] {
        assert!(sizes.contains(&n), "no case of {n} elements: {sizes:?}");
    }
    assert!(
        cases.iter().any(|c| c.grid_cap.is_some()),
        "grid-stride trips"
    );
    // SiLU's tails and the dtype's subnormals.
    for numerics in [Numerics::Wide, Numerics::Subnormal] {
        assert!(cases.iter().any(|c| c.numerics == numerics), "{numerics:?}");
    }
    // f32 has no subnormal case (its subnormals are not what the kernel rounds to).
    let f32 = instance(&m, "silu_mul_f32_b64_i2");
    assert!(!problem::verify_cases(&f32)
        .iter()
        .any(|c| c.numerics == Numerics::Subnormal));
}
