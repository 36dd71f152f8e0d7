//! What `verify` needs from an op beside its kernel: the problem shapes, the CPU reference in
//! f64 with a bound per value on how far a correct f32 kernel can be from it, and the inputs
//! that test it. Each family module gives every op one [`Verification`] (in its `OpInfo`), so
//! an op's reference lives with its signature and launch rule.
//!
//! The references are computed from the same (dtype-rounded) inputs the kernel sees, written
//! for clarity, not speed; GEMMs above ~1024³ are checked against cuBLAS. The bounds follow
//! the usual forward error analysis of each op in f32 (unit roundoff `U = 2^-24`), with the
//! summation bound `(n - 1)·U·Σ|terms|` for a sum of `n` terms in any order. Row kernels sum
//! each thread's share in turn and then across the block in a tree, so a row of `n` columns
//! over `t` threads counts `n/t + log2 t` additions; GEMMs count `2K` (tensor cores may
//! truncate where IEEE rounds). The hardware's approximate functions add their documented
//! error: `ex2.approx` 2^-22 relative, `tanh.approx` 2^-11 relative (GELU on it is off by up
//! to 2^-11·|x| absolute), the sigmoid forms ~2^-18·|x|. `gpu::data::check_elements` adds the
//! output dtype's own rounding on top.

use std::collections::BTreeMap;

use super::epilogue;
use crate::spec::model::{Epilogue, KernelConfig};

/// One problem size, in the shape of call of the op's family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// `n` elements; rows of `cols` for a broadcast bias.
    Elements {
        n: u64,
        cols: u64,
    },
    Rows {
        rows: u64,
        cols: u64,
    },
    Gemm {
        m: u64,
        n: u64,
        k: u64,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Elements { n, cols } => write!(f, "n={n} cols={cols}"),
            Problem::Rows { rows, cols } => write!(f, "{rows}x{cols}"),
            Problem::Gemm { m, n, k } => write!(f, "{m}x{n}x{k}"),
        }
    }
}

/// The `eps` every norm is verified and benched with.
pub const LAYERNORM_EPS: f32 = 1e-5;
/// The `alpha` of a GEMM's `scale` step in verify and bench.
pub const GEMM_ALPHA: f32 = 0.5;

/// Inputs by argument name, as f64.
pub type Inputs = BTreeMap<String, Vec<f64>>;

/// Unit roundoff of f32 arithmetic.
pub const U32: f64 = 1.0 / 16_777_216.0; // 2^-24
/// Relative error of the hardware's `ex2.approx` (PTX ISA: 2^-22 over the full range).
pub const EX2_APPROX: f64 = 1.0 / 4_194_304.0; // 2^-22

/// The exact answer and, per element, how far an f32 kernel may be from it before the final
/// rounding to the output dtype. An op with several outputs gives them one after another, in
/// signature order.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    pub values: Vec<f64>,
    pub err: Vec<f64>,
}

impl Expected {
    pub fn with_len(len: usize) -> Expected {
        Expected {
            values: vec![0.0; len],
            err: vec![0.0; len],
        }
    }
}

/// What a reference is asked: the kernel, its block size (row kernels' sums are as deep as
/// their threads make them), the problem and the inputs.
pub struct Call<'a> {
    pub kernel: &'a KernelConfig,
    pub threads: u32,
    pub problem: Problem,
    pub inputs: &'a Inputs,
}

impl Call<'_> {
    /// Input `name`, or an error naming it (a reference that silently used nothing would pass
    /// anything).
    pub fn input(&self, name: &str) -> Result<&[f64], String> {
        self.inputs
            .get(name)
            .map(Vec::as_slice)
            .ok_or_else(|| format!("{}: no input `{name}` for the reference", self.kernel.name))
    }

    /// Input `name` when the kernel takes it (a bias, a weight), else empty.
    pub fn optional(&self, name: &str) -> &[f64] {
        self.inputs.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The error for a problem of another family's shape.
    pub fn wrong_problem(&self) -> String {
        format!(
            "{}: the reference has no {:?} for a {} problem",
            self.kernel.name, self.kernel.op, self.problem
        )
    }
}

/// How `verify` checks one op.
pub struct Verification {
    /// The exact outputs and their error bounds.
    pub reference: fn(&Call) -> Result<Expected, String>,
    /// Uniform range of an input's typical random values, by argument name, chosen so the
    /// results are well conditioned.
    pub typical_range: fn(&str) -> (f32, f32),
    /// The inputs that carry a case's hostile numerics (offsets, outliers, subnormals, wide
    /// ranges); the others stay typical.
    pub stressed: &'static [&'static str],
    /// The one large value per row of an outlier case; `None`: ±1000 at random.
    pub outlier: Option<f32>,
    /// Whether `-inf` inputs mean something to the op (softmax's masked entries), so verify
    /// tries rows of them.
    pub infinities: bool,
}

/// Typical inputs for ops without a range of their own.
pub fn symmetric_range(_: &str) -> (f32, f32) {
    (-2.0, 2.0)
}

/// Absolute error per unit of |x| of an activation's f32 form, as the kernel runs it
/// (`ops::epilogue` picks the form).
fn activation_error(kernel: &KernelConfig, step: Epilogue) -> f64 {
    epilogue::Chain::of(kernel.op)
        .and_then(|chain| epilogue::device_fn(step, chain, kernel.out_dtype))
        .map_or(0.0, |f| f.err_per_v)
}

/// The operands of one value: its bias and residual elements, and verify's alpha.
fn operands(bias: f64, residual: f64) -> epilogue::Operands {
    epilogue::Operands {
        bias,
        residual,
        alpha: GEMM_ALPHA as f64,
    }
}

/// Applies an epilogue chain to one value. `bias` and `residual` are the value's operands.
pub fn apply_epilogue(chain: &[Epilogue], v: f64, bias: f64, residual: f64) -> f64 {
    epilogue::apply(chain, v, &operands(bias, residual))
}

/// The kernel's epilogue chain on a value `v` known to within `e`: the exact result and its
/// error bound. Each step adds its own f32 rounding and passes the incoming error through its
/// slope (at most 1.13 for GELU, 1.1 for SiLU, 1 for the rest).
pub fn epilogue_with_error(
    kernel: &KernelConfig,
    mut v: f64,
    mut e: f64,
    bias: f64,
    residual: f64,
) -> (f64, f64) {
    for &s in &kernel.epilogue {
        let next = (epilogue::step(s).reference)(v, &operands(bias, residual));
        e = match s {
            Epilogue::Scale => GEMM_ALPHA as f64 * e + U32 * next.abs(),
            Epilogue::Bias => e + U32 * (v.abs() + bias.abs()),
            Epilogue::Residual => e + U32 * (v.abs() + residual.abs()),
            Epilogue::Relu => e,
            Epilogue::Gelu | Epilogue::GeluErf => {
                1.13 * e + activation_error(kernel, s) * v.abs() + 4.0 * U32 * next.abs()
            }
            Epilogue::Silu => {
                1.1 * e + activation_error(kernel, s) * v.abs() + 4.0 * U32 * next.abs()
            }
        };
        v = next;
    }
    (v, e)
}
