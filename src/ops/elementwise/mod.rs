//! Elementwise ops: `vector_add` (out = a + b), `fma` (out = epilogue(x*w + b)) and `silu_mul`
//! (out = silu(gate) * up).
//! Memory-bound: 16-byte vector accesses, `items` independent loads in flight per thread,
//! grid-stride over the flat tensor, a scalar tail for lengths that are not a whole vector.

use super::{epilogue, pow2_problem, Field, OpFamily, OpInfo};
use crate::launch::{Arg, GridRule, Launch};
use crate::spec::model::{DType, Epilogue, Instance, Op, Params};

pub mod calls;
#[cfg(feature = "gpu")]
mod cases;

const ALL_DTYPES: &[DType] = &[DType::F32, DType::F16, DType::Bf16];

pub static VECTOR_ADD: OpInfo = OpInfo {
    template: "elementwise.cu",
    dtypes: ALL_DTYPES,
    fields: &[Field::Block, Field::Items],
    epilogues: &[],
    what: |_| "`out[i] = a[i] + b[i]` for `i < n`.".into(),
    #[cfg(feature = "gpu")]
    verification: Some(reference::VECTOR_ADD),
};

pub static FMA: OpInfo = OpInfo {
    template: "elementwise.cu",
    dtypes: ALL_DTYPES,
    fields: &[Field::Block, Field::Items, Field::Epilogue],
    epilogues: &[
        Epilogue::Bias,
        Epilogue::Relu,
        Epilogue::Gelu,
        Epilogue::GeluErf,
        Epilogue::Silu,
    ],
    what: |k| {
        let e = epilogue::docs_formula(&k.epilogue, "x[i] * w[i] + b[i]");
        let mut s = format!("`out[i] = {e}` for `i < n`, in f32 arithmetic.");
        for note in epilogue::docs_notes(&k.epilogue) {
            s = s + " " + note;
        }
        s
    },
    #[cfg(feature = "gpu")]
    verification: Some(reference::FMA),
};

/// SwiGLU's gating, between the two projections of a Llama-class MLP.
pub static SILU_MUL: OpInfo = OpInfo {
    template: "elementwise.cu",
    dtypes: ALL_DTYPES,
    fields: &[Field::Block, Field::Items],
    epilogues: &[],
    what: |_| {
        let silu = epilogue::docs_formula(&[Epilogue::Silu], "gate[i]");
        format!("`out[i] = {silu} * up[i]` for `i < n`, in f32 arithmetic (SwiGLU's gating).")
    },
    #[cfg(feature = "gpu")]
    verification: Some(reference::SILU_MUL),
};

/// The family's table (`ops::family`).
pub static FAMILY: OpFamily = OpFamily {
    info: |op| match op {
        Op::VectorAdd => &VECTOR_ADD,
        Op::Fma => &FMA,
        Op::SiluMul => &SILU_MUL,
        op => unreachable!("{op:?} is not an elementwise op (Op::family)"),
    },
    defaults: |_, p| defaults(p),
    check,
    resolved,
    signature,
    launch,
    template: super::op_template,
    tensor_maps: super::no_tensor_maps,
    template_values,
    arch_problem: super::no_arch_problem,
    shared_memory_field: Field::Block,
    #[cfg(feature = "gpu")]
    cases: &cases::CASES,
    calls: &calls::CALLS,
    name_head: super::no_name_head,
};

pub fn defaults(p: &mut Params) {
    p.block.get_or_insert(256);
    p.items.get_or_insert(4);
}

/// Every parameter the kernel uses, defaults filled in (see `ops::resolved`).
pub fn resolved(inst: &Instance) -> Params {
    let mut p = inst.params.clone();
    defaults(&mut p);
    p
}

pub fn check(inst: &Instance) -> Vec<(Field, String)> {
    let p = &inst.params;
    [
        p.block
            .and_then(|b| pow2_problem(Field::Block, b, 32, 1024)),
        p.items.and_then(|i| pow2_problem(Field::Items, i, 1, 16)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

pub fn signature(inst: &Instance) -> Vec<Arg> {
    let t = inst.dtype;
    match inst.op {
        Op::VectorAdd => vec![
            Arg::input("a", t),
            Arg::input("b", t),
            Arg::output("out", t),
            Arg::scalar("n", "i64"),
        ],
        Op::SiluMul => vec![
            Arg::input("gate", t),
            Arg::input("up", t),
            Arg::output("out", t),
            Arg::scalar("n", "i64"),
        ],
        _ => {
            let mut args = vec![Arg::input("x", t), Arg::input("w", t), Arg::input("b", t)];
            if inst.has_epilogue(Epilogue::Bias) {
                args.push(Arg::input("bias", t));
            }
            args.push(Arg::output("out", t));
            args.push(Arg::scalar("n", "i64"));
            if inst.has_epilogue(Epilogue::Bias) {
                // The bias is a row vector broadcast over rows of `cols` elements.
                args.push(Arg::scalar("cols", "i64"));
            }
            args
        }
    }
}

pub fn launch(inst: &Instance) -> Launch {
    let block = inst.params.block.unwrap_or(256);
    let items = inst.params.items.unwrap_or(1);
    Launch {
        threads: block,
        grid: GridRule::Elements {
            elems_per_block: block * items * inst.dtype.per_16_bytes(),
        },
        shared_bytes: 0,
    }
}

/// The CPU references (`ops::verification`).
#[cfg(feature = "gpu")]
mod reference {
    use crate::ops::epilogue::{self, Chain};
    use crate::ops::verification::{
        apply_epilogue, epilogue_with_error, symmetric_range, Call, Expected, Problem,
        Verification, U32,
    };
    use crate::spec::model::{DType, Epilogue};

    pub const VECTOR_ADD: Verification = Verification {
        reference: vector_add,
        typical_range: symmetric_range,
        stressed: &["a", "b"],
        outlier: None,
        infinities: false,
    };

    pub const FMA: Verification = Verification {
        reference: fma,
        typical_range: symmetric_range,
        stressed: &["x"],
        outlier: None,
        infinities: false,
    };

    pub const SILU_MUL: Verification = Verification {
        reference: silu_mul,
        typical_range: symmetric_range,
        // The gate carries the hostile cases: SiLU's tails (exp over- and underflow).
        stressed: &["gate"],
        outlier: None,
        infinities: false,
    };

    /// `silu(gate)` on the kernel's device function (good to `err_per_v`·|gate|), rounded,
    /// then times `up`, rounded.
    fn silu_mul(call: &Call) -> Result<Expected, String> {
        let Problem::Elements { n, .. } = call.problem else {
            return Err(call.wrong_problem());
        };
        let (gate, up) = (call.input("gate")?, call.input("up")?);
        // The kernel runs the elementwise chain's f32 SiLU (`tg_silu`).
        let form = epilogue::device_fn(Epilogue::Silu, Chain::Elementwise, DType::F32)
            .map_or(0.0, |f| f.err_per_v);
        let mut ex = Expected::with_len(n as usize);
        for i in 0..n as usize {
            let s = apply_epilogue(&[Epilogue::Silu], gate[i], 0.0, 0.0);
            ex.values[i] = s * up[i];
            let e_s = form * gate[i].abs() + 4.0 * U32 * s.abs();
            ex.err[i] = up[i].abs() * e_s + U32 * ex.values[i].abs();
        }
        Ok(ex)
    }

    fn vector_add(call: &Call) -> Result<Expected, String> {
        let Problem::Elements { n, .. } = call.problem else {
            return Err(call.wrong_problem());
        };
        let (a, b) = (call.input("a")?, call.input("b")?);
        let mut ex = Expected::with_len(n as usize);
        for i in 0..n as usize {
            ex.values[i] = a[i] + b[i];
            ex.err[i] = U32 * (a[i].abs() + b[i].abs());
        }
        Ok(ex)
    }

    fn fma(call: &Call) -> Result<Expected, String> {
        let Problem::Elements { n, cols } = call.problem else {
            return Err(call.wrong_problem());
        };
        let (x, w, b) = (call.input("x")?, call.input("w")?, call.input("b")?);
        let bias = call.optional("bias");
        let mut ex = Expected::with_len(n as usize);
        for i in 0..n as usize {
            let bv = if bias.is_empty() {
                0.0
            } else {
                bias[i % cols as usize]
            };
            let v = x[i] * w[i] + b[i];
            let e = U32 * ((x[i] * w[i]).abs() + b[i].abs());
            (ex.values[i], ex.err[i]) = epilogue_with_error(call.kernel, v, e, bv, 0.0);
        }
        Ok(ex)
    }
}

/// The template's parameters: whether a bias row is read, and the map the kernel calls with
/// its own arguments.
pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    let map_call = match inst.op {
        Op::Fma => format!(
            "tg_map_fma({})",
            super::forward_args(
                inst,
                &[
                    ("x", "x"),
                    ("w", "w"),
                    ("b", "b"),
                    ("bias", "nullptr"),
                    ("out", "out"),
                    ("n", "n"),
                    ("cols", "1"),
                ],
            )
        ),
        // The two-input ops: their inputs, `out` and `n`, in signature order.
        _ => {
            let names: Vec<String> = signature(inst).into_iter().map(|a| a.name).collect();
            format!("tg_map2({})", names.join(", "))
        }
    };
    vec![
        ("has_bias", inst.has_epilogue(Epilogue::Bias).into()),
        ("map_call", map_call.into()),
    ]
}
