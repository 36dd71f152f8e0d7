//! The fused residual add + RMSNorm op (`add_rmsnorm`) end to end without a GPU: a spec is
//! accepted and sweeps like rmsnorm, its kernel takes x, r, weight and writes h and y, its
//! bindings refuse outputs that overlap, and verify's reference norms the rounded h.

mod common;

use std::path::Path;

use tilegen::__internal::gpu::problem::{Problem, LAYERNORM_EPS};
use tilegen::__internal::gpu::reference::{self, Inputs};
use tilegen::call_checks::{self, Buf};
use tilegen::launch_rules::ArgError;
use tilegen::ArgKind;
use tilegen::Manifest;

use common::instance;
use tilegen::{DType, Op};

const SPEC: &str = "\
kernels:
  - name: add_rmsnorm
    op: add_rmsnorm
    dtype: [f32, bf16]
    block: 64
    items: 2
  - name: add_rmsnorm
    op: add_rmsnorm
    dtype: bf16
    variant: staged
    block: 64
    items: 2
";

/// A library of the spec rendered without NVRTC (no binaries): its manifest, bindings and
/// one kernel's CUDA C.
fn render(dir: &Path) -> (Manifest, String, String) {
    let (m, out) = common::render_spec(dir, SPEC);
    let bindings = std::fs::read_to_string(out.join("bindings.rs")).unwrap();
    let cu =
        std::fs::read_to_string(out.join("kernels/add_rmsnorm_bf16_staged_s1_b64_i2.cu")).unwrap();
    (m, bindings, cu)
}

#[test]
fn spec_is_accepted_with_its_argument_roles_and_checks() {
    let dir = tempfile::tempdir().unwrap();
    let (m, bindings, cu) = render(dir.path());
    let names: Vec<&str> = m.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "add_rmsnorm_bf16_onepass_b64_i2",
            "add_rmsnorm_bf16_staged_s1_b64_i2",
            "add_rmsnorm_f32_onepass_b64_i2"
        ]
    );
    let inst = instance(&m, "add_rmsnorm_bf16_staged_s1_b64_i2");
    assert_eq!(inst.op, Op::AddRmsNorm);
    assert_eq!(
        inst.params.affine,
        Some(true),
        "weight by default, as rmsnorm"
    );
    let args: Vec<(&str, ArgKind)> = inst
        .args
        .iter()
        .map(|a| (a.name.as_str(), a.kind))
        .collect();
    use ArgKind::*;
    assert_eq!(
        args,
        [
            ("x", In),
            ("r", In),
            ("weight", In),
            ("h", Out),
            ("y", Out),
            ("rows", Scalar),
            ("cols", Scalar),
            ("eps", Scalar)
        ]
    );
    // The kernel writes h and norms the h it wrote (staged: back over x's shared copy).
    assert!(
        cu.contains("tg_add_residual(j, ncols, vec_ok, t, rv, hr, srow);"),
        "{cu}"
    );
    // The bindings check both outputs against every input before launching.
    assert!(
        bindings.contains("call_checks::rows_disjoint(rows, cols, &[h, y], &[x, r], &[weight])?;"),
        "no overlap check in the bindings"
    );
    // The plan of the typed method takes the buffers in kernel order.
    assert!(bindings.contains("pub fn add_rmsnorm_bf16("));

    // What rmsnorm refuses, add_rmsnorm refuses: an online variant, a staged row before sm_80.
    let err = common::spec_error(
        dir.path(),
        "kernels:\n  - name: n\n    op: add_rmsnorm\n    dtype: f32\n    variant: online\n  - name: m\n    op: add_rmsnorm\n    dtype: f16\n    variant: staged\n    archs: [sm_75]\n",
    );
    assert!(err.contains("add_rmsnorm has no online variant"), "{err}");
    assert!(err.contains("cp.async, which needs sm_80+"), "{err}");
}

#[test]
fn outputs_may_not_overlap_an_input_or_each_other() {
    let (rows, cols) = (4usize, 1000usize);
    let base = 0x7f00_0000_0000u64;
    let len = rows * cols;
    let bytes = 4 * len as u64;
    let at = |arg, i: u64| Buf::of::<f32>(arg, len, base + i * bytes);
    let weight = Buf::of::<f32>("weight", cols, base + 8 * bytes);
    let check = |h: Buf, y: Buf, w: Buf| {
        call_checks::rows_disjoint(rows, cols, &[h, y], &[at("x", 0), at("r", 1)], &[w])
    };
    // Side by side, touching but not sharing a byte: accepted.
    assert_eq!(check(at("h", 2), at("y", 3), weight), Ok(()));
    // h written over x (in place), y over r, y over h, one byte of overlap, y over the weight.
    let refused = |h: Buf, y: Buf, w: Buf, arg, other| {
        assert_eq!(check(h, y, w), Err(ArgError::Overlap { arg, other }));
    };
    refused(at("h", 0), at("y", 3), weight, "h", "x");
    refused(at("h", 2), at("y", 1), weight, "y", "r");
    refused(at("h", 2), at("y", 2), weight, "h", "y");
    let mut y = at("y", 3);
    y.address -= 1;
    refused(at("h", 2), y, weight, "h", "y");
    refused(
        at("h", 2),
        Buf::of::<f32>("y", len, weight.address - 4),
        weight,
        "y",
        "weight",
    );
    // Only the elements the kernel touches count: a long weight buffer past `cols` may hold y.
    let long_weight = Buf::of::<f32>("weight", len, base + 3 * bytes - 4 * cols as u64);
    assert_eq!(check(at("h", 4), at("y", 3), long_weight), Ok(()));
    // An empty problem touches nothing.
    assert_eq!(
        call_checks::rows_disjoint(0, cols, &[at("h", 0), at("y", 0)], &[at("x", 0)], &[]),
        Ok(())
    );
    // The message names both buffers.
    let e = ArgError::Overlap {
        arg: "h",
        other: "x",
    };
    assert!(e.to_string().contains("`h` overlaps `x`"), "{e}");
}

#[test]
fn reference_norms_the_rounded_h() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _, _) = render(dir.path());
    let p = Problem::Rows { rows: 1, cols: 2 };
    let tiny = 1.0 / 512.0; // 2^-9: under half a bf16 ulp of 1 (2^-8), exact in f32
    let inp: Inputs = [
        ("x", vec![1.0, 3.0]),
        ("r", vec![tiny, 0.0]),
        ("weight", vec![1.0, 2.0]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let eps = LAYERNORM_EPS as f64;
    let close = |got: &[f64], want: &[f64], what: &str| {
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "{what}: {got:?} != {want:?}"
            );
        }
    };
    // bf16: h is written as [1, 3] (x + r rounded), and y is the norm of that h; the expected
    // h is the exact sum, which the check allows the dtype's rounding of.
    let bf16 = instance(&m, "add_rmsnorm_bf16_onepass_b64_i2");
    assert_eq!(bf16.dtype, DType::Bf16);
    let ex = reference::compute(&bf16, p, &inp).unwrap();
    let s = 1.0 / (5.0f64 + eps).sqrt();
    close(&ex.values, &[1.0 + tiny, 3.0, s, 6.0 * s], "bf16 h then y");
    assert_eq!(ex.err.len(), 4);
    // f32 keeps the sum: y is the norm of 1 + 2^-9.
    let f32 = instance(&m, "add_rmsnorm_f32_onepass_b64_i2");
    let ex = reference::compute(&f32, p, &inp).unwrap();
    let h0 = 1.0 + tiny;
    let s = 1.0 / ((h0 * h0 + 9.0) / 2.0 + eps).sqrt();
    close(&ex.values, &[h0, 3.0, h0 * s, 6.0 * s], "f32 h then y");
    // Without r the reference refuses rather than answering.
    let mut no_r = inp.clone();
    no_r.remove("r");
    assert!(reference::compute(&f32, p, &no_r).is_err());
}
