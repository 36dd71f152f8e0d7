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
use crate::manifest::InstanceEntry;
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

/// What a case's inputs look like. `Typical` is uniform in a well-conditioned range per op;
/// the rest are the inputs that break kernels which are right on typical data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Numerics {
    Typical,
    /// Every row offset by +1000: softmax must subtract the row maximum (exp(1000) overflows
    /// f32), layernorm must not take its variance as E\[x²\] − E\[x\]² unshifted.
    Offset,
    /// One large value per row (softmax: 40 above the rest, so it holds nearly all the
    /// mass; norms: ±1000; GEMM: 64 in each row of A).
    Outliers,
    /// Softmax: a tenth of the entries −inf (they give exactly 0), row 0 all −inf (no
    /// maximum: NaN, as PyTorch gives), row 1 all −inf but one (that one gives 1).
    Infinities,
    /// 16-bit inputs: x among the dtype's subnormals. f16 subnormals are normal f32 values and
    /// must come out exact to rounding; bf16 subnormals are f32 subnormals, which the kernels'
    /// `ftz` arithmetic may flush to zero (within the check's absolute slack).
    Subnormal,
    /// Elementwise: x in [−30, 30], the tails of GELU and SiLU (exp over- and underflow).
    Wide,
}

/// One verify case: a shape, its inputs, and optionally a grid smaller than the launch rule
/// gives, so that the kernel's grid-stride loop runs several trips at a size the CPU
/// reference handles (the rule only strides beyond 65536 blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Case {
    pub problem: Problem,
    pub numerics: Numerics,
    /// At most this many blocks (of a clustered grid: clusters) in the grid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid_cap: Option<u32>,
    /// GEMM: matrices stored with padded rows (`gpu::problem::gemm_ld_padded`: rows rounded up to whole
    /// vectors plus this many vectors); the padding holds NaN, which must not reach the output,
    /// and the output's padding must stay unwritten.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ld_pad: Option<u64>,
    /// Bytes every buffer starts past a 256-byte boundary (16-byte aligned, not 128-byte).
    #[serde(skip_serializing_if = "is_zero")]
    pub offset: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Case {
    pub fn typical(problem: Problem) -> Case {
        Case {
            problem,
            numerics: Numerics::Typical,
            grid_cap: None,
            ld_pad: None,
            offset: 0,
        }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.problem)?;
        if self.numerics != Numerics::Typical {
            write!(f, " {:?}", self.numerics)?;
        }
        if let Some(g) = self.grid_cap {
            write!(f, " grid<={g}")?;
        }
        if let Some(p) = self.ld_pad {
            write!(f, " ld+{p}v")?;
        }
        if self.offset > 0 {
            write!(f, " @+{}", self.offset)?;
        }
        Ok(())
    }
}

/// Where a family's verify cases and bench shapes come from.
pub struct FamilyCases {
    /// The cases `verify` runs on an instance (those it cannot take are dropped after).
    pub verify: fn(&InstanceEntry) -> Vec<Case>,
    /// The shapes `bench` times (those it cannot take are dropped after).
    pub bench: fn(&InstanceEntry) -> Vec<Problem>,
    /// A shapes file's sizes as a problem of the family; None when they do not fit it.
    pub problem_of: fn(&InstanceEntry, &[u64]) -> Option<Problem>,
    /// Sizes `tune` measures beyond the bench's, as a shapes file gives them.
    pub tune_sizes: &'static [&'static [u64]],
}

/// Cases of each of `kinds` on problem `p` (subnormal inputs only for 16-bit dtypes).
pub fn hostile(out: &mut Vec<Case>, inst: &InstanceEntry, p: Problem, kinds: &[Numerics]) {
    let sixteen_bit = inst.dtype != crate::spec::model::DType::F32;
    for &numerics in kinds {
        if numerics == Numerics::Subnormal && !sixteen_bit {
            continue;
        }
        out.push(Case {
            numerics,
            ..Case::typical(p)
        });
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
