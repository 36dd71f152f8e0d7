//! `tilegen verify`: every instance against the f64 CPU reference, on fresh random data, with
//! outputs poisoned (NaN) before each launch, on ragged shapes.

use std::time::Instant;

use super::data::{self, HostTensor};
use super::problem::{self, Problem};
use super::reference;
use super::{call_args, launch, Gpu};
use crate::error::Result;
use crate::manifest::InstanceEntry;
use crate::ops::ArgKind;
use crate::spec::model::{DType, Op};

/// The outcome of one instance on one shape.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    pub instance: String,
    pub problem: Problem,
    pub rel_error: f64,
    pub tolerance: f64,
    /// Outputs that were NaN/inf where the reference is finite (unwritten poison included).
    pub non_finite: usize,
    pub passed: bool,
    pub error: Option<String>,
    pub millis: u64,
}

/// Value range of random inputs, chosen per op so results are well conditioned.
fn input_range(op: Op, arg: &str) -> (f32, f32) {
    match (op, arg) {
        (Op::Softmax, _) => (-8.0, 8.0),
        (Op::LayerNorm | Op::RmsNorm, "x") => (-1.0, 3.0),
        (Op::LayerNorm | Op::RmsNorm, "weight") => (0.5, 1.5),
        (Op::Gemm, _) => (-1.0, 1.0),
        _ => (-2.0, 2.0),
    }
}

/// Runs one case; errors (launch failures, bad sizes) become failed results.
pub fn run_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    p: Problem,
    rng: &mut impl rand::Rng,
) -> CaseResult {
    let start = Instant::now();
    let mut res = CaseResult {
        instance: inst.name.clone(),
        problem: p,
        rel_error: f64::NAN,
        tolerance: data::tolerance_for(inst), // widened by the case's rounding floor below
        non_finite: 0,
        passed: false,
        error: None,
        millis: 0,
    };
    match try_case(gpu, inst, p, rng) {
        Ok((rel, non_finite, floor)) => {
            res.rel_error = rel;
            res.non_finite = non_finite;
            res.tolerance = data::case_tolerance(inst, floor);
            res.passed = non_finite == 0 && rel <= res.tolerance;
        }
        Err(e) => res.error = Some(e.to_string()),
    }
    res.millis = start.elapsed().as_millis() as u64;
    res
}

/// Relative error, outputs left non-finite, and the rounding floor of the exact answer in the
/// output dtype (`data::rounding_floor`).
fn try_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    p: Problem,
    rng: &mut impl rand::Rng,
) -> Result<(f64, usize, f64)> {
    let f = gpu.function(inst)?;
    let mut inputs = reference::Inputs::new();
    let mut host: Vec<Option<HostTensor>> = Vec::new();
    for a in &inst.args {
        if a.kind == ArgKind::In {
            let (lo, hi) = input_range(inst.op, &a.name);
            let t = data::uniform(
                rng,
                data::dtype_of(&a.ty),
                problem::buffer_len(inst, &a.name, p) as usize,
                lo,
                hi,
            );
            inputs.insert(a.name.clone(), t.values.clone());
            host.push(Some(t));
        } else {
            host.push(None);
        }
    }
    let mut bufs = Vec::new();
    let mut out_index = None;
    for (i, a) in inst.args.iter().enumerate() {
        match a.kind {
            ArgKind::In => bufs.push(Some(gpu.upload(&host[i].as_ref().expect("input").bytes)?)),
            ArgKind::Out => {
                let len = problem::buffer_len(inst, &a.name, p) as usize
                    * data::dtype_of(&a.ty).size() as usize;
                // 0xFF bytes are NaN in every float type: anything left unwritten fails.
                bufs.push(Some(gpu.alloc_filled(len, 0xFF)?));
                out_index = Some(i);
            }
            ArgKind::Scalar => bufs.push(None),
        }
    }
    let args = call_args(inst, p, &bufs);
    let dims = problem::dims(inst, p).map_err(|e| crate::Error::Gpu(e.to_string()))?;
    launch(gpu, &f, dims, &args)?;
    gpu.sync()?;
    let out_i = out_index.expect("every kernel writes an output");
    let out = data::decode(
        inst.out_dtype,
        &gpu.download(bufs[out_i].as_ref().expect("output"))?,
    );
    let reference = match p {
        Problem::Gemm { m, n, k } if problem::too_big_for_cpu(p) => {
            // cuBLAS computes A·B in f32 (no TF32); the epilogue is applied here in f64.
            let find = |name: &str| {
                inst.args
                    .iter()
                    .position(|a| a.name == name)
                    .and_then(|i| bufs[i].as_ref())
            };
            let (a, b) = (find("a").expect("a"), find("b").expect("b"));
            let mut d = gpu.alloc_filled((m * n * 4) as usize, 0xFF)?;
            let blas = super::cublas::Blas::new(gpu)?;
            blas.gemm(gpu, inst, (m, n, k), a, b, &mut d, DType::F32, false)?;
            let acc = data::decode(DType::F32, &gpu.download(&d)?);
            reference::gemm_epilogue(inst, p, &acc, &inputs)
        }
        _ => reference::compute(inst, p, &inputs),
    };
    let (rel, non_finite) = data::compare(&out, &reference);
    Ok((
        rel,
        non_finite,
        data::rounding_floor(inst.out_dtype, &reference),
    ))
}
