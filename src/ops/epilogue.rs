//! What each epilogue step computes, written once: its name, how the generated docs write it,
//! its exact value (the f64 CPU reference) and the CUDA it renders to. The CUDA device
//! functions live once, in `templates/prelude.cuh` ("epilogue steps"); the templates render
//! [`cuda_lines`] through `templates/epilogue_steps.cuh` rather than deciding per step.

use crate::spec::model::{DType, Epilogue, Op};

/// The operands a step may read beside the running value `v`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Operands {
    /// This output's bias element.
    pub bias: f64,
    /// This output's element of the residual C.
    pub residual: f64,
    /// The GEMM's `alpha`.
    pub alpha: f64,
}

/// Which operand an update step reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    Bias,
    Residual,
    Alpha,
}

/// A CUDA device function of `templates/prelude.cuh` computing a step in f32.
#[derive(Debug, PartialEq)]
pub struct DeviceFn {
    pub name: &'static str,
    /// Absolute error per unit of |v| of this f32 form against the exact step.
    pub err_per_v: f64,
}

impl DeviceFn {
    const fn new(name: &'static str, err_per_v: f64) -> DeviceFn {
        DeviceFn { name, err_per_v }
    }
}

/// Good to a few f32 ulps of the largest intermediate (`expf`, `erfcf`, the `ex2`/`rcp`
/// sigmoid).
const F32_FORM: f64 = 1.0 / 262_144.0; // 2^-18
/// `tanh.approx` is good to 2^-11 relative, so GELU on it to 2^-11·|v| absolute.
const TANH_APPROX: f64 = 1.0 / 2048.0;

const RELU: DeviceFn = DeviceFn::new("tg_relu", 0.0);
const GELU: DeviceFn = DeviceFn::new("tg_gelu", F32_FORM);
const GELU_SIGMOID: DeviceFn = DeviceFn::new("tg_gelu_sigmoid", F32_FORM);
const GELU_FAST: DeviceFn = DeviceFn::new("tg_gelu_fast", TANH_APPROX);
const GELU_ERF: DeviceFn = DeviceFn::new("tg_gelu_erf", F32_FORM);
/// `tg_gelu_fast` of twice its argument (for a halved bias, [`halvable_bias`]).
const GELU_FAST_HALF: &str = "tg_gelu_fast_half";
const SILU: DeviceFn = DeviceFn::new("tg_silu", F32_FORM);
const SILU_FAST: DeviceFn = DeviceFn::new("tg_silu_fast", F32_FORM);

/// The kernels that run an epilogue chain, each with its own trade of speed for accuracy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chain {
    /// `fma`'s `tg_combine`.
    Elementwise,
    /// The GEMMs' `tg_epilogue` (bound by instruction issue with 16-bit outputs: the forms
    /// with fewest MUFU ops).
    Gemm,
}

impl Chain {
    /// The chain an op runs, if it has one.
    pub fn of(op: Op) -> Option<Chain> {
        match op {
            Op::Fma => Some(Chain::Elementwise),
            Op::Gemm => Some(Chain::Gemm),
            _ => None,
        }
    }

    /// How the template's function names each operand (`fma` takes no residual or alpha).
    fn operand(self, o: Operand) -> &'static str {
        match (self, o) {
            (Chain::Elementwise, Operand::Bias) => "bias",
            (Chain::Elementwise, Operand::Residual) => "0.0f",
            (Chain::Elementwise, Operand::Alpha) => "1.0f",
            (Chain::Gemm, Operand::Bias) => "bias_v",
            (Chain::Gemm, Operand::Residual) => "res_v",
            (Chain::Gemm, Operand::Alpha) => "alpha_v",
        }
    }
}

/// How a step is written in CUDA.
#[derive(Debug)]
pub enum Cuda {
    /// `v += operand;` or `v *= operand;`: the operator and the operand.
    Update(&'static str, Operand),
    /// `v = f(v);`, the form of `f` per chain and output precision.
    Apply(Forms),
}

/// An activation's device function per chain, for f32 outputs and for 16-bit outputs.
#[derive(Debug)]
pub struct Forms {
    pub elementwise: [&'static DeviceFn; 2],
    pub gemm: [&'static DeviceFn; 2],
}

impl Forms {
    /// The same form everywhere.
    const fn one(f: &'static DeviceFn) -> Forms {
        Forms::by_precision(f, f)
    }

    /// One form for f32 outputs and one for 16-bit outputs, in every chain.
    const fn by_precision(f32: &'static DeviceFn, narrow: &'static DeviceFn) -> Forms {
        Forms {
            elementwise: [f32, narrow],
            gemm: [f32, narrow],
        }
    }
}

/// One epilogue step.
#[derive(Debug)]
pub struct Step {
    pub step: Epilogue,
    /// How the docs write the step applied to an expression (`{}`), per element `i`.
    pub docs: &'static str,
    /// What the docs add about the step's definition, if anything.
    pub docs_note: Option<&'static str>,
    /// The exact value, in f64.
    pub reference: fn(f64, &Operands) -> f64,
    pub cuda: Cuda,
}

fn gelu_tanh(v: f64) -> f64 {
    0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
}

#[cfg(feature = "gpu")]
fn gelu_erf(v: f64) -> f64 {
    0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2))
}

/// Without the `gpu` feature (no `libm`) nothing evaluates references.
#[cfg(not(feature = "gpu"))]
fn gelu_erf(_: f64) -> f64 {
    f64::NAN
}

/// Every step, in `Epilogue` order.
pub static STEPS: &[Step] = &[
    Step {
        step: Epilogue::Scale,
        docs: "alpha * ({})",
        docs_note: None,
        reference: |v, o| v * o.alpha,
        cuda: Cuda::Update("*=", Operand::Alpha),
    },
    Step {
        step: Epilogue::Bias,
        docs: "{} + bias[i % cols]",
        docs_note: Some("`bias` is a row of `cols` elements broadcast over the `n / cols` rows."),
        reference: |v, o| v + o.bias,
        cuda: Cuda::Update("+=", Operand::Bias),
    },
    Step {
        step: Epilogue::Relu,
        docs: "relu({})",
        docs_note: None,
        reference: |v, _| v.max(0.0),
        cuda: Cuda::Apply(Forms::one(&RELU)),
    },
    Step {
        step: Epilogue::Gelu,
        docs: "gelu({})",
        docs_note: Some("`gelu` is the tanh approximation."),
        reference: |v, _| gelu_tanh(v),
        cuda: Cuda::Apply(Forms {
            elementwise: [&GELU, &GELU_SIGMOID],
            gemm: [&GELU_SIGMOID, &GELU_FAST],
        }),
    },
    Step {
        step: Epilogue::GeluErf,
        docs: "gelu_erf({})",
        docs_note: None,
        reference: |v, _| gelu_erf(v),
        cuda: Cuda::Apply(Forms::one(&GELU_ERF)),
    },
    Step {
        step: Epilogue::Silu,
        docs: "silu({})",
        docs_note: None,
        reference: |v, _| v / (1.0 + (-v).exp()),
        cuda: Cuda::Apply(Forms::by_precision(&SILU, &SILU_FAST)),
    },
    Step {
        step: Epilogue::Residual,
        docs: "{} + c[i]",
        docs_note: None,
        reference: |v, o| v + o.residual,
        cuda: Cuda::Update("+=", Operand::Residual),
    },
];

/// The table's entry for a step.
pub fn step(e: Epilogue) -> &'static Step {
    STEPS
        .iter()
        .find(|s| s.step == e)
        .expect("every epilogue step has an entry in STEPS")
}

/// Applies a chain to one value, exactly.
pub fn apply(chain: &[Epilogue], v: f64, o: &Operands) -> f64 {
    chain.iter().fold(v, |v, e| (step(*e).reference)(v, o))
}

/// The device function an activation step runs in `chain` with outputs of `out_dtype`; `None`
/// for the updates.
pub fn device_fn(e: Epilogue, chain: Chain, out_dtype: DType) -> Option<&'static DeviceFn> {
    match &step(e).cuda {
        Cuda::Update(..) => None,
        Cuda::Apply(f) => {
            let forms = match chain {
                Chain::Elementwise => &f.elementwise,
                Chain::Gemm => &f.gemm,
            };
            Some(forms[usize::from(out_dtype != DType::F32)])
        }
    }
}

/// Whether a chain could take its bias operand halved: a bias step directly followed by GELU
/// in its hardware-tanh form, which starts from half its input. `v = gelu(v + b)` then costs
/// one FFMA for `0.5 v + b / 2` where it took an add and a multiply; the fast form is bound by
/// instruction issue (see `tg_gelu_fast`), and its results do not change: halving is exact, so
/// every intermediate is the old one or exactly half or twice it. The kernel decides whether
/// it stages the bias halved (`ops::gemm::halves_bias`: the wgmma GEMMs).
pub fn halvable_bias(steps: &[Epilogue], chain: Chain, out_dtype: DType) -> bool {
    device_fn(Epilogue::Gelu, chain, out_dtype) == Some(&GELU_FAST)
        && steps
            .windows(2)
            .any(|w| w == [Epilogue::Bias, Epilogue::Gelu])
}

/// The chain's CUDA statements on `v`, in order, for the template's function body. With
/// `bias_halved` (see [`halvable_bias`]) the operand holds half the bias, and the bias step
/// and the GELU after it are one statement.
pub fn cuda_lines(
    steps: &[Epilogue],
    chain: Chain,
    out_dtype: DType,
    bias_halved: bool,
) -> Vec<String> {
    let mut lines = Vec::with_capacity(steps.len());
    let mut i = 0;
    while i < steps.len() {
        let e = steps[i];
        if bias_halved && e == Epilogue::Bias && steps.get(i + 1) == Some(&Epilogue::Gelu) {
            let b = chain.operand(Operand::Bias);
            lines.push(format!("v = {GELU_FAST_HALF}(fmaf(v, 0.5f, {b}));"));
            i += 2;
            continue;
        }
        lines.push(match &step(e).cuda {
            Cuda::Update(op, operand) => format!("v {op} {};", chain.operand(*operand)),
            Cuda::Apply(_) => {
                let f = device_fn(e, chain, out_dtype).expect("an activation has device functions");
                format!("v = {}(v);", f.name)
            }
        });
        i += 1;
    }
    lines
}

/// The chain applied to the expression `x`, as the docs write it.
pub fn docs_formula(steps: &[Epilogue], x: &str) -> String {
    steps
        .iter()
        .fold(x.to_string(), |e, s| step(*s).docs.replace("{}", &e))
}

/// The docs' notes on the steps of a chain, in table order, each once.
pub fn docs_notes(steps: &[Epilogue]) -> Vec<&'static str> {
    STEPS
        .iter()
        .filter(|s| steps.contains(&s.step))
        .filter_map(|s| s.docs_note)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tg_gelu_fast_half(fmaf(acc, 0.5f, b / 2))` against `tg_gelu_fast(acc + b)`, their f32
    /// arithmetic step by step (any tanh: its input is the same bits): equal outputs.
    #[test]
    fn halving_the_bias_leaves_the_fast_gelu_unchanged() {
        // prelude.cuh's literals, rounded to f32 as NVRTC rounds them.
        let (k, c) = (0.7978845608028654_f64 as f32, 0.0356774081363001_f64 as f32);
        let (k2, c8) = (1.5957691216057308_f64 as f32, 0.2854192650904008_f64 as f32);
        assert_eq!((k2, c8), (2.0 * k, 8.0 * c), "the half form's constants");
        let mut seed = 0x2545_f491_u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 * 40.0 - 20.0
        };
        for _ in 0..100_000 {
            let (acc, b) = (next(), next() * 0.25);
            let x = acc + b;
            let u = x * c.mul_add(x * x, k);
            let old = (0.5 * x).mul_add(u.tanh(), 0.5 * x);
            let hx = acc.mul_add(0.5, 0.5 * b);
            let u_half = hx * c8.mul_add(hx * hx, k2);
            let new = hx.mul_add(u_half.tanh(), hx);
            assert_eq!(
                (u.to_bits(), old.to_bits()),
                (u_half.to_bits(), new.to_bits()),
                "{acc} + {b}"
            );
        }
    }

    #[test]
    fn the_table_has_every_step_once_in_order() {
        let steps: Vec<Epilogue> = STEPS.iter().map(|s| s.step).collect();
        assert_eq!(steps, Epilogue::ALL.to_vec());
    }
}
