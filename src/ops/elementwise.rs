//! Elementwise ops: `vector_add` (out = a + b) and `fma` (out = epilogue(x*w + b)).
//! Memory-bound: 16-byte vector accesses, `items` independent loads in flight per thread,
//! grid-stride over the flat tensor, a scalar tail for lengths that are not a whole vector.

use super::{pow2_problem, Field, OpFamily, OpInfo};
use crate::launch::{Arg, GridRule, Launch};
use crate::spec::model::{DType, Epilogue, Instance, Op, Params};

const ALL_DTYPES: &[DType] = &[DType::F32, DType::F16, DType::Bf16];

pub static VECTOR_ADD: OpInfo = OpInfo {
    template: "elementwise.cu",
    dtypes: ALL_DTYPES,
    fields: &[Field::Block, Field::Items],
    epilogues: &[],
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
};

/// The family's table (`ops::family`).
pub static FAMILY: OpFamily = OpFamily {
    defaults: |_, p| defaults(p),
    check,
    resolved,
    signature,
    launch,
    template: super::op_template,
    tensor_maps: super::no_tensor_maps,
    template_values: super::no_template_values,
    arch_problem: super::no_arch_problem,
    shared_memory_field: Field::Block,
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
