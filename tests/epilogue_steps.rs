//! Epilogue steps are described once (`ops::epilogue::STEPS`): each has an f64 reference, a
//! docs formula and CUDA device functions that exist in the shared header, and the CPU
//! reference, the generated docs and the rendered kernels all draw from that table. Libraries
//! are rendered without NVRTC.

use std::fs;
use std::path::Path;

use tilegen::__internal::gpu::reference;
use tilegen::__internal::ops::epilogue::{self, Chain, Cuda, Operands, STEPS};
use tilegen::__internal::render::EMBEDDED;
use tilegen::{DType, Epilogue, Manifest, Op};

fn template(name: &str) -> &'static str {
    EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no embedded template {name}"))
        .1
}

const CHAINS: [Chain; 2] = [Chain::Elementwise, Chain::Gemm];
const OUTS: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];

#[test]
fn every_step_has_a_reference_a_docs_formula_and_a_cuda_function_in_the_header() {
    let steps: Vec<Epilogue> = STEPS.iter().map(|s| s.step).collect();
    assert_eq!(steps, Epilogue::ALL, "one entry per step, in order");
    let prelude = template("prelude.cuh");
    let ops = Operands {
        bias: 0.0,
        residual: 0.0,
        alpha: 1.0,
    };
    for s in STEPS {
        assert!(
            s.docs.contains("{}"),
            "{}: docs formula {:?} wraps nothing",
            s.step,
            s.docs
        );
        assert!(
            (s.reference)(1.0, &ops).is_finite(),
            "{}: reference",
            s.step
        );
        for chain in CHAINS {
            for out in OUTS {
                let line = &epilogue::cuda_lines(&[s.step], chain, out, false)[0];
                match &s.cuda {
                    Cuda::Apply(_) => {
                        let f = epilogue::device_fn(s.step, chain, out).unwrap();
                        let decl = format!("__device__ __forceinline__ float {}(float x)", f.name);
                        assert!(
                            prelude.contains(&decl),
                            "{}: {decl} not in prelude.cuh",
                            s.step
                        );
                        assert_eq!(*line, format!("v = {}(v);", f.name));
                    }
                    Cuda::Update(op, _) => {
                        assert!(epilogue::device_fn(s.step, chain, out).is_none());
                        assert!(line.starts_with(&format!("v {op} ")), "{}: {line}", s.step);
                    }
                }
            }
        }
    }
    // The templates render the table's statements; none decides per step.
    assert!(template("epilogue_steps.cuh").contains("epilogue_code"));
    for t in [
        "epilogue.cuh",
        "elementwise.cu",
        "gemm.cuh",
        "gemm.cu",
        "gemm_simt.cu",
        "gemm_sm90.cu",
    ] {
        assert!(
            !template(t).contains("step =="),
            "{t} still chooses per step"
        );
    }
    assert!(template("epilogue.cuh").contains("{%- include \"epilogue_steps.cuh\" %}"));
    assert!(template("elementwise.cu").contains("{%- include \"epilogue_steps.cuh\" %}"));
}

#[test]
fn references_agree_with_known_values() {
    let ops = Operands {
        bias: 0.5,
        residual: 0.25,
        alpha: 3.0,
    };
    let one = |e: Epilogue, v: f64| (epilogue::step(e).reference)(v, &ops);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs().max(1.0);
    let cases = [
        (Epilogue::Scale, 2.0, 6.0),
        (Epilogue::Bias, 1.0, 1.5),
        (Epilogue::Relu, -3.0, 0.0),
        (Epilogue::Relu, 2.0, 2.0),
        (Epilogue::Gelu, 1.0, 0.8411919906082768),
        (Epilogue::Gelu, -1.0, -0.15880800939172324),
        (Epilogue::GeluErf, 1.0, 0.8413447460685429),
        (Epilogue::Silu, -2.0, -0.2384058440442351),
        (Epilogue::Residual, 1.0, 1.25),
    ];
    for (e, v, want) in cases {
        assert!(
            close(one(e, v), want),
            "{e}({v}) = {}, not {want}",
            one(e, v)
        );
    }
    // A chain runs in spec order: (2·3 + 0.5) then relu, then + 0.25.
    let chain = [
        Epilogue::Scale,
        Epilogue::Bias,
        Epilogue::Relu,
        Epilogue::Residual,
    ];
    assert!(close(epilogue::apply(&chain, 2.0, &ops), 6.75));
    // verify's reference is the table's (alpha being the problems' 0.5).
    let r = reference::epilogue(&[Epilogue::Scale, Epilogue::Gelu], 2.0, 0.0, 0.0);
    assert!(close(r, 0.8411919906082768), "{r}");
}

const SPEC: &str = "\
defaults:
  archs: [sm_80]
kernels:
  - name: act
    op: fma
    dtype: [f32, bf16]
    epilogue: [bias, gelu, silu, relu, gelu_erf]
  - name: mm
    op: gemm
    dtype: bf16
    out_dtype: [bf16, f32]
    tile: [128, 128, 32]
    warp: [64, 64]
    stages: 3
    epilogue: [scale, bias, gelu, silu, relu, gelu_erf, residual]
";

#[test]
fn generated_docs_and_kernels_draw_each_step_from_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    let (specs, out) = (tmp.path().join("specs"), tmp.path().join("lib"));
    fs::create_dir_all(&specs).unwrap();
    fs::write(specs.join("k.yaml"), SPEC).unwrap();
    let mut o = tilegen::Options::new(&specs, &out);
    o.compile = false;
    o.jobs = 1;
    o.cache_dir = Some(tmp.path().join("cache"));
    tilegen::generate(&o, &|_| {}).expect("the spec renders");
    let m = Manifest::from_bytes(&fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let bindings = fs::read_to_string(out.join("bindings.rs")).unwrap();
    assert_eq!(m.instances.len(), 4);

    // fma's docs: each step's formula from the table, wrapped in spec order, and its notes.
    let fma = m.instances.iter().find(|i| i.op == Op::Fma).unwrap();
    let mut want = "x[i] * w[i] + b[i]".to_string();
    for e in &fma.epilogue {
        want = epilogue::step(*e).docs.replace("{}", &want);
    }
    assert_eq!(
        want,
        "gelu_erf(relu(silu(gelu(x[i] * w[i] + b[i] + bias[i % cols]))))"
    );
    assert!(
        bindings.contains(&format!("`out[i] = {want}`")),
        "fma docs lack {want}"
    );
    for note in [
        "`bias` is a row of `cols`",
        "`gelu` is the tanh approximation.",
    ] {
        assert!(bindings.contains(note), "fma docs lack {note:?}");
        assert!(STEPS
            .iter()
            .any(|s| s.docs_note.is_some_and(|n| n.contains(note))));
    }

    // Every kernel's chain is the table's statements, in order, with the device function
    // of its chain and output precision (mma.sync and elementwise kernels: the bias whole).
    for i in &m.instances {
        let chain = Chain::of(i.op).unwrap();
        let src = fs::read_to_string(out.join(format!("kernels/{}.cu", i.name))).unwrap();
        let body: Vec<String> = epilogue::cuda_lines(&i.epilogue, chain, i.out_dtype, false)
            .iter()
            .map(|l| format!("    {l}\n"))
            .collect();
        assert!(
            src.contains(&body.concat()),
            "{}: chain not rendered as {body:?}",
            i.name
        );
    }
    let src = |op, out_dtype| kernel(&out, &m, op, out_dtype);
    assert!(src(Op::Fma, DType::F32).contains("v = tg_gelu(v);"));
    assert!(src(Op::Fma, DType::Bf16).contains("v = tg_gelu_sigmoid(v);"));
    assert!(src(Op::Gemm, DType::F32).contains("v = tg_gelu_sigmoid(v);\n    v = tg_silu(v);"));
    let gemm16 = src(Op::Gemm, DType::Bf16);
    assert!(gemm16.contains("v = tg_gelu_fast(v);\n    v = tg_silu_fast(v);"));
    assert!(gemm16.contains("v *= alpha_v;\n    v += bias_v;"));
    assert!(gemm16.contains("float tg_epilogue(float v, float bias_v, float res_v, float alpha_v)"));
}

/// The kernel source of the spec's instance of `op` with outputs of `out_dtype`.
fn kernel(out: &Path, m: &Manifest, op: Op, out_dtype: DType) -> String {
    let i = m
        .instances
        .iter()
        .find(|i| i.op == op && i.out_dtype == out_dtype)
        .unwrap_or_else(|| panic!("no {op} instance with {out_dtype} outputs"));
    fs::read_to_string(out.join(format!("kernels/{}.cu", i.name))).unwrap()
}

const WGMMA_SPEC: &str = "\
defaults:
  archs: [sm_90a]
kernels:
  - name: hg
    op: gemm
    engine: wgmma
    dtype: bf16
    out_dtype: [bf16, f32]
    tile: [128, 128, 64]
    stages: 4
    epilogue: [[bias, gelu], [gelu, bias], [bias, relu]]
";

/// The wgmma GEMMs stage their bias once per tile column, so with 16-bit outputs a bias
/// directly followed by GELU arrives halved and both steps are one statement; every other
/// chain (f32 outputs' GELU form, GELU before the bias, other activations) keeps the bias whole.
#[test]
fn wgmma_kernels_halve_the_bias_only_before_the_fast_gelu() {
    let tmp = tempfile::tempdir().unwrap();
    let (specs, out) = (tmp.path().join("specs"), tmp.path().join("lib"));
    fs::create_dir_all(&specs).unwrap();
    fs::write(specs.join("k.yaml"), WGMMA_SPEC).unwrap();
    let mut o = tilegen::Options::new(&specs, &out);
    o.compile = false;
    o.jobs = 1;
    o.cache_dir = Some(tmp.path().join("cache"));
    tilegen::generate(&o, &|_| {}).expect("the spec renders");
    let m = Manifest::from_bytes(&fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m.instances.len(), 6);
    let fused = "v = tg_gelu_fast_half(fmaf(v, 0.5f, bias_v));";
    let staged_half = "0.5f * (col < N ? tg_to_float(bias[col]) : 0.0f)";
    for i in &m.instances {
        let src = fs::read_to_string(out.join(format!("kernels/{}.cu", i.name))).unwrap();
        let halved = i.out_dtype != DType::F32 && i.epilogue == [Epilogue::Bias, Epilogue::Gelu];
        assert_eq!(
            epilogue::halvable_bias(&i.epilogue, Chain::Gemm, i.out_dtype),
            halved,
            "{}",
            i.name
        );
        assert_eq!(src.contains(fused), halved, "{}", i.name);
        assert_eq!(src.contains(staged_half), halved, "{}", i.name);
        let whole: Vec<String> =
            epilogue::cuda_lines(&i.epilogue, Chain::Gemm, i.out_dtype, halved)
                .iter()
                .map(|l| format!("    {l}\n"))
                .collect();
        assert!(
            src.contains(&whole.concat()),
            "{}: chain not rendered as {whole:?}",
            i.name
        );
        if !halved && i.epilogue.contains(&Epilogue::Bias) {
            assert!(
                src.contains("col < N ? tg_to_float(bias[col]) : 0.0f;"),
                "{}",
                i.name
            );
        }
    }
    assert!(template("prelude.cuh")
        .contains("__device__ __forceinline__ float tg_gelu_fast_half(float hx)"));
}
