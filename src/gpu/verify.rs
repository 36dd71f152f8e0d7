//! `tilegen verify`: every instance against the f64 CPU reference, element by element, on
//! fresh random data and hostile inputs, with outputs poisoned (NaN) before each launch, every
//! buffer between guard zones, and inputs checked unchanged after the run.

use std::time::Instant;

use rand::Rng;

use super::data::{self, ElementReport, HostTensor};
use super::problem::{self, Case, Numerics, Problem};
use super::reference::{self, Expected};
use super::{call_args_with, launch, ArgValue, Gpu};
use crate::error::{Error, Result};
use crate::launch::ArgKind;
use crate::manifest::InstanceEntry;
use crate::ops::{self, verification::symmetric_range};
use crate::spec::model::DType;

/// The outcome of one instance on one case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    pub instance: String,
    #[serde(flatten)]
    pub case: Case,
    /// Every output element against its bound (absent when the case could not run).
    pub elements: Option<ElementReport>,
    pub passed: bool,
    /// Why the case failed outside the element check: a launch error, a write into a guard
    /// zone, an input the kernel changed.
    pub error: Option<String>,
    pub millis: u64,
}

impl CaseResult {
    /// One line on what failed, naming the element (empty for a pass).
    pub fn failure(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        match &self.elements {
            Some(rep) if !rep.passed() => {
                let w = rep.worst.expect("a failed check has a worst element");
                format!(
                    "{} of {} elements out of bounds ({} not finite); worst [{}] = {:e}, expected {:e} ± {:.2e}",
                    rep.failed, rep.checked, rep.non_finite, w.index, w.out, w.expected, w.bound
                )
            }
            _ => String::new(),
        }
    }
}

/// Bytes of guard zone before and after each buffer: a quarter of the buffer, at least 64 KiB
/// (so a tile written a row past the end lands in it), at most 8 MiB. A multiple of 256 keeps
/// every buffer as aligned as the allocation.
fn guard_bytes(len: usize) -> usize {
    (len / 4).clamp(64 << 10, 8 << 20).next_multiple_of(256)
}

/// Guard zones hold this byte; outputs start as 0xFF (NaN in every float type).
const GUARD: u8 = 0xA5;
const POISON: u8 = 0xFF;

/// A device buffer between two guard zones.
struct Guarded {
    whole: cudarc::driver::CudaSlice<u8>,
    guard: usize,
    len: usize,
    /// What the whole allocation held before the launch, for inputs (which must not change).
    before: Option<Vec<u8>>,
}

impl Guarded {
    /// `offset` more bytes of guard before the buffer (16-byte aligned starts that are not
    /// 128-byte aligned); `guard` is then the whole head.
    fn new(gpu: &Gpu, data: Option<&[u8]>, len: usize, offset: usize) -> Result<Guarded> {
        let tail = guard_bytes(len);
        let guard = tail + offset;
        let mut bytes = vec![GUARD; guard];
        match data {
            Some(d) => bytes.extend_from_slice(d),
            None => bytes.resize(guard + len, POISON),
        }
        bytes.resize(guard + len + tail, GUARD);
        let whole = gpu.upload(&bytes)?;
        Ok(Guarded {
            whole,
            guard,
            len,
            before: data.map(|_| bytes),
        })
    }

    fn view(&self) -> ArgValue<'_> {
        ArgValue::View(self.whole.slice(self.guard..self.guard + self.len))
    }

    /// The buffer's own bytes after the run, or an error naming the first byte written
    /// outside it (or, for an input, changed anywhere).
    fn check(&self, gpu: &Gpu, name: &str) -> Result<Vec<u8>, String> {
        let after = gpu.download(&self.whole).map_err(|e| e.to_string())?;
        if let Some(before) = &self.before {
            if let Some(i) = before.iter().zip(&after).position(|(a, b)| a != b) {
                let at = i as i64 - self.guard as i64;
                return Err(format!(
                    "input `{name}` changed by the kernel at byte {at} of {}",
                    self.len
                ));
            }
        }
        let head = &after[..self.guard];
        if let Some(i) = head.iter().rposition(|&b| b != GUARD) {
            return Err(format!(
                "`{name}` written {} bytes before its start",
                self.guard - i
            ));
        }
        let tail = &after[self.guard + self.len..];
        if let Some(i) = tail.iter().position(|&b| b != GUARD) {
            return Err(format!(
                "`{name}` written past its end: byte {} after its {} bytes",
                i, self.len
            ));
        }
        Ok(after[self.guard..self.guard + self.len].to_vec())
    }
}

/// The smallest normal value of a 16-bit dtype (subnormals lie below it).
fn min_normal(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => 6.103_515_6e-5,
        DType::Bf16 => f32::MIN_POSITIVE,
        DType::F32 => f32::MIN_POSITIVE,
    }
}

/// The values of input `arg` for a case (before rounding to the dtype): typical in the op's
/// range, or, for the inputs the op names as stressed, with the case's numerics.
fn input_values(
    inst: &InstanceEntry,
    arg: &str,
    dtype: DType,
    case: &Case,
    rng: &mut impl Rng,
) -> Vec<f32> {
    let len = problem::buffer_len(arg, case.problem) as usize;
    let op = ops::info(inst.op).verification.as_ref();
    let (lo, hi) = op.map_or_else(|| symmetric_range(arg), |o| (o.typical_range)(arg));
    let mut v: Vec<f32> = (0..len).map(|_| rng.random_range(lo..hi)).collect();
    let stressed = op.is_some_and(|o| o.stressed.contains(&arg));
    if !stressed || v.is_empty() {
        return v;
    }
    let row_len = match case.problem {
        Problem::Rows { cols, .. } => cols as usize,
        Problem::Gemm { k, .. } => k as usize, // a row of A in the math (any layout)
        Problem::Elements { .. } => len,
    };
    match case.numerics {
        Numerics::Typical => {}
        Numerics::Offset => v.iter_mut().for_each(|x| *x += 1000.0),
        Numerics::Outliers => {
            for row in v.chunks_mut(row_len.max(1)) {
                let j = rng.random_range(0..row.len());
                row[j] = match op.and_then(|o| o.outlier) {
                    Some(x) => x,
                    None if rng.random_bool(0.5) => 1000.0,
                    None => -1000.0,
                };
            }
        }
        Numerics::Infinities => {
            for (r, row) in v.chunks_mut(row_len.max(1)).enumerate() {
                match r {
                    0 => row.fill(f32::NEG_INFINITY),
                    1 => {
                        let keep = rng.random_range(0..row.len());
                        for (j, x) in row.iter_mut().enumerate() {
                            if j != keep {
                                *x = f32::NEG_INFINITY;
                            }
                        }
                    }
                    _ => {
                        for x in row.iter_mut() {
                            if rng.random_bool(0.1) {
                                *x = f32::NEG_INFINITY;
                            }
                        }
                    }
                }
            }
        }
        Numerics::Subnormal => {
            let tiny = min_normal(dtype);
            v.iter_mut()
                .for_each(|x| *x = tiny * rng.random_range(-1.0f32..1.0));
        }
        Numerics::Wide => v
            .iter_mut()
            .for_each(|x| *x = rng.random_range(-30.0..30.0)),
    }
    v
}

/// Fresh random inputs for a case: by name as f64 for the reference, and per argument (None
/// for outputs and scalars) as the dtype's bytes for the device.
pub fn case_inputs(
    inst: &InstanceEntry,
    case: &Case,
    rng: &mut impl Rng,
) -> (reference::Inputs, Vec<Option<HostTensor>>) {
    let mut inputs = reference::Inputs::new();
    let mut hosts = Vec::new();
    for a in &inst.args {
        hosts.push(if a.kind == ArgKind::In {
            let dt = data::dtype_of(&a.ty);
            let t = data::from_values(dt, &input_values(inst, &a.name, dt, case, rng));
            inputs.insert(a.name.clone(), t.values.clone());
            Some(t)
        } else {
            None
        });
    }
    (inputs, hosts)
}

/// Which run of how many a case result belongs to, where `verify --repeat` runs every case
/// more than once (None for a single run).
pub type RunOf = Option<(u32, u32)>;

/// A case's JSON event, with its run where there is more than one.
pub fn case_event(result: &impl serde::Serialize, run_of: RunOf) -> serde_json::Value {
    let mut event = serde_json::json!({"event": "case", "result": result});
    if let Some((run, _)) = run_of {
        event["run"] = run.into();
    }
    event
}

/// "FAIL " and, where there is more than one run, which one, before a failure's words.
pub fn fail_prefix(run_of: RunOf) -> String {
    match run_of {
        Some((run, runs)) => format!("FAIL (run {run} of {runs}) "),
        None => "FAIL ".to_string(),
    }
}

/// Runs one case; errors (launch failures, bad sizes, guard zones) become failed results.
pub fn run_case(gpu: &mut Gpu, inst: &InstanceEntry, case: Case, rng: &mut impl Rng) -> CaseResult {
    let start = Instant::now();
    gpu.doing(format!("verifying {} on case {case}", inst.name));
    let mut res = CaseResult {
        instance: inst.name.clone(),
        case,
        elements: None,
        passed: false,
        error: None,
        millis: 0,
    };
    match try_case(gpu, inst, &case, rng) {
        Ok(rep) => {
            res.passed = rep.passed();
            res.elements = Some(rep);
        }
        Err(e) => res.error = Some(e),
    }
    res.millis = start.elapsed().as_millis() as u64;
    res
}

/// How a GEMM case with padded rows ([`Case::ld_pad`]) stores matrix `arg`: rows, bytes of a
/// row and bytes between rows; None for a dense case or a non-matrix argument.
fn padded_layout(inst: &InstanceEntry, case: &Case, arg: &str, ty: &str) -> Option<[usize; 3]> {
    let pad = case.ld_pad?;
    let Problem::Gemm { m, n, k } = case.problem else {
        return None;
    };
    let ld = problem::gemm_ld_padded(inst, m, n, k, pad);
    problem::gemm_matrix_layout(inst, arg, ty, (m, n, k), ld)
}

/// Dense rows spread to padded ones; the padding holds NaN (POISON), which a kernel that
/// reads it carries into its output.
fn scatter(dense: &[u8], [rows, row, ld]: [usize; 3]) -> Vec<u8> {
    let mut out = vec![POISON; rows * ld];
    for r in 0..rows {
        out[r * ld..r * ld + row].copy_from_slice(&dense[r * row..(r + 1) * row]);
    }
    out
}

/// Padded output rows back to dense ones; the padding must be as it was (unwritten).
fn gather(bytes: &[u8], [rows, row, ld]: [usize; 3], name: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(rows * row);
    for r in 0..rows {
        let line = &bytes[r * ld..(r + 1) * ld];
        if let Some(i) = line[row..].iter().position(|&b| b != POISON) {
            return Err(format!(
                "`{name}` written in the padding of row {r}, byte {} past the row's {row}",
                i
            ));
        }
        out.extend_from_slice(&line[..row]);
    }
    Ok(out)
}

fn try_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    case: &Case,
    rng: &mut impl Rng,
) -> Result<ElementReport, String> {
    let p = case.problem;
    let f = gpu.function(inst).map_err(|e| e.to_string())?;
    let (inputs, hosts) = case_inputs(inst, case, rng);
    let mut bufs: Vec<Option<Guarded>> = Vec::new();
    let offset = case.offset as usize;
    for (a, host) in inst.args.iter().zip(&hosts) {
        let layout = padded_layout(inst, case, &a.name, &a.ty);
        let g = match a.kind {
            ArgKind::In => {
                let t = host.as_ref().expect("inputs have host data");
                let bytes = match layout {
                    Some(l) => scatter(&t.bytes, l),
                    None => t.bytes.clone(),
                };
                Some(Guarded::new(gpu, Some(&bytes), bytes.len(), offset))
            }
            ArgKind::Out => {
                let len = match layout {
                    Some([rows, _, ld]) => rows * ld,
                    None => {
                        problem::buffer_len(&a.name, p) as usize
                            * data::dtype_of(&a.ty).size() as usize
                    }
                };
                Some(Guarded::new(gpu, None, len, offset))
            }
            ArgKind::Scalar => None,
        };
        bufs.push(g.transpose().map_err(|e| e.to_string())?);
    }
    let mut args = call_args_with(inst, p, |name, kind| {
        let i = inst
            .args
            .iter()
            .position(|b| b.name == name && b.kind == kind)?;
        bufs[i].as_ref().map(Guarded::view)
    })
    .ok_or("a pointer argument has no buffer")?;
    if let (Some(pad), Problem::Gemm { m, n, k }) = (case.ld_pad, p) {
        problem::set_gemm_ld(inst, &mut args, problem::gemm_ld_padded(inst, m, n, k, pad));
    }
    let mut dims = gpu.dims(inst, p).map_err(|e| e.to_string())?;
    let args = super::with_tensor_maps(gpu, inst, args).map_err(|e| e.to_string())?;
    if let Some(cap) = case.grid_cap {
        // In whole clusters: a grid that is no multiple of the compiled cluster cannot launch.
        let cluster = inst.launch.grid.cluster();
        dims.grid.0 = dims.grid.0.min(cap.saturating_mul(cluster));
    }
    launch(gpu, &f, dims, &args).map_err(|e| e.to_string())?;
    gpu.sync().map_err(|e| e.to_string())?;
    drop(args);
    // Every buffer's guard zones (and every input) first: a stray write anywhere fails.
    let mut out = None;
    for (a, g) in inst.args.iter().zip(&bufs) {
        if let Some(g) = g {
            let mut bytes = g.check(gpu, &a.name)?;
            if let Some(l) = padded_layout(inst, case, &a.name, &a.ty) {
                if a.kind == ArgKind::Out {
                    bytes = gather(&bytes, l, &a.name)?;
                }
            }
            if a.kind == ArgKind::Out {
                // Several outputs (add_rmsnorm's h and y): one after another, in signature
                // order, as the reference gives them.
                out.get_or_insert_with(Vec::new)
                    .extend(data::decode(data::dtype_of(&a.ty), &bytes));
            }
        }
    }
    let out = out.ok_or("the kernel has no output argument")?;
    let expected = match p {
        Problem::Gemm { .. } if problem::too_big_for_cpu(p) => {
            cublas_expected(gpu, inst, p, &inputs, &hosts).map_err(|e| e.to_string())?
        }
        _ => reference::compute(inst, p, &inputs)?,
    };
    data::check_elements(&out, &expected, inst.out_dtype)
}

/// A large GEMM's expected values: A·B and |A|·|B| by cuBLAS in f32 (no TF32), the epilogue in
/// f64 here. cuBLAS's own rounding doubles the accumulation bound.
fn cublas_expected(
    gpu: &Gpu,
    inst: &InstanceEntry,
    p: Problem,
    inputs: &reference::Inputs,
    hosts: &[Option<HostTensor>],
) -> Result<Expected> {
    let Problem::Gemm { m, n, k } = p else {
        return Err(Error::Gpu(format!("{}: not a GEMM problem", inst.name)));
    };
    let host = |name: &str| {
        inst.args
            .iter()
            .position(|a| a.name == name && a.kind == ArgKind::In)
            .and_then(|i| hosts[i].as_ref())
            .ok_or_else(|| Error::Gpu(format!("{}: no input `{name}`", inst.name)))
    };
    let (a, b) = (host("a")?, host("b")?);
    let blas = super::cublas::Blas::new(gpu)?;
    let product = |a: &[u8], b: &[u8]| -> Result<Vec<f64>> {
        let (a, b) = (gpu.upload(a)?, gpu.upload(b)?);
        let mut d = gpu.alloc_filled((m * n * 4) as usize, POISON)?;
        let ld = problem::gemm_ld(inst, m, n, k);
        blas.gemm(gpu, inst, (m, n, k), ld, &a, &b, &mut d, DType::F32, false)?;
        Ok(data::decode(DType::F32, &gpu.download(&d)?))
    };
    let acc = product(&a.bytes, &b.bytes)?;
    let mag = product(&data::abs_bytes(a), &data::abs_bytes(b))?;
    ops::gemm::reference::epilogue(inst, p, &acc, &mag, 2.0, inputs).map_err(Error::Gpu)
}
