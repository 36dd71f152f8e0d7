//! `tilegen bench`: each instance at the goal sizes beside its ceiling measured in the same
//! run — a device-to-device copy for memory-bound kernels. CUDA events around every launch,
//! warm-up first, the median of many runs, inputs rotated over a working set several times the
//! L2 so repeated runs do not measure the cache.

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use super::cublas::Blas;
use super::data;
use super::problem::{self, Problem};
use super::{call_args, call_args_from, gpu_err, launch, with_tensor_maps, ArgValue, Gpu};
use crate::error::Result;
use crate::launch::ArgKind;
use crate::manifest::InstanceEntry;
use crate::spec::model::{DType, Epilogue, Op};

pub const WARMUP: usize = 3;
pub const RUNS: usize = 25;

#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchResult {
    pub instance: String,
    pub op: Op,
    pub dtype: DType,
    pub problem: Problem,
    pub median_ms: f64,
    pub min_ms: f64,
    /// Bytes each call must move (inputs read once, output written once).
    pub bytes: u64,
    pub flops: u64,
    pub gb_per_s: f64,
    pub tflop_per_s: f64,
    /// The peer measured in the same run (copy bandwidth in GB/s, or a library's TFLOP/s).
    pub peer: String,
    pub peer_value: f64,
    /// gb_per_s or tflop_per_s over the peer.
    pub ratio: f64,
    /// For a GEMM with an epilogue: the library's instance with the same configuration and
    /// no epilogue, timed turn about with this one, and this one's speed over it (1 - the
    /// epilogue's cost).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_plain: Option<f64>,
    /// For a tensor-map kernel: host microseconds to check and encode one of its maps (the
    /// bindings do it on every launch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encode_us_per_map: Option<f64>,
    /// Over several rounds (`tilegen bench --rounds`): how many went into the medians above,
    /// and the lowest and highest ratio among them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_range: Option<[f64; 2]>,
    /// A GEMM timed with padded rows (`bench --ld-align`): the leading dimensions (lda, ldb,
    /// ldd) that it and its peers were given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ld: Option<[u64; 3]>,
}

/// One comparison's results over several rounds as one: the median of the rounds' medians,
/// ratios and epilogue costs, the lowest minimum, and the ratios' range. A ratio comes from
/// one turn-about timing, so its median over rounds is taken as is, not recomputed from the
/// medians of the times. One round is returned as it is; None for no rounds.
pub fn combine_rounds(rounds: &[BenchResult]) -> Option<BenchResult> {
    let first = rounds.first()?;
    if rounds.len() == 1 {
        return Some(first.clone());
    }
    let median_of = |f: &dyn Fn(&BenchResult) -> f64| median(rounds.iter().map(f).collect());
    let mut out = first.clone();
    out.median_ms = median_of(&|r| r.median_ms);
    out.min_ms = rounds
        .iter()
        .map(|r| r.min_ms)
        .fold(f64::INFINITY, f64::min);
    let secs = out.median_ms * 1e-3;
    out.gb_per_s = out.bytes as f64 / secs / 1e9;
    out.tflop_per_s = out.flops as f64 / secs / 1e12;
    out.peer_value = median_of(&|r| r.peer_value);
    out.ratio = median_of(&|r| r.ratio);
    // Reported only where every round has them.
    let median_if_all = |f: &dyn Fn(&BenchResult) -> Option<f64>| {
        rounds
            .iter()
            .map(f)
            .collect::<Option<Vec<f64>>>()
            .map(median)
    };
    out.vs_plain = median_if_all(&|r| r.vs_plain);
    out.encode_us_per_map = median_if_all(&|r| r.encode_us_per_map);
    let ratios = rounds.iter().map(|r| r.ratio);
    out.ratio_range = Some([
        ratios.clone().fold(f64::INFINITY, f64::min),
        ratios.fold(f64::NEG_INFINITY, f64::max),
    ]);
    out.rounds = Some(rounds.len());
    Some(out)
}

/// The middle value (the mean of the two middle ones for an even count; NaN for none).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The library's GEMM instance that differs from `inst` only by having no epilogue.
pub fn plain_partner<'a>(
    inst: &InstanceEntry,
    all: &'a [InstanceEntry],
) -> Option<&'a InstanceEntry> {
    if inst.op != Op::Gemm || inst.epilogue.is_empty() {
        return None;
    }
    all.iter().find(|o| {
        o.op == Op::Gemm
            && o.epilogue.is_empty()
            && o.dtype == inst.dtype
            && o.out_dtype == inst.out_dtype
            && o.params == inst.params
    })
}

/// Times `body` (launching `name`) with events: median and minimum milliseconds over RUNS
/// after WARMUP.
pub fn time_ms(gpu: &Gpu, name: &str, body: impl FnMut(usize) -> Result<()>) -> Result<(f64, f64)> {
    let mut body = body;
    Ok(time_interleaved(gpu, &[name], &mut [&mut body])?[0])
}

/// Times several launches turn about (run i of each, then run i + 1 of each, ...), so that
/// clock and temperature drift during the measurement reach all of them alike and their
/// ratios stay fair: median and minimum milliseconds of each over RUNS after WARMUP, and after
/// [`Gpu::settle`] of further turns where that is set. `names` says what each body launches:
/// the host waits for the launches one at a time, in the order they run, so that a wait that
/// outlives the limit names the launch still running (the GPU runs ahead all the same).
///
/// Each call of a body gets the launch's number counted over all bodies (0, 1, 2, ... in the
/// order they run). A body that reads input set `number % sets` thus never reads the set the
/// launch before it read, whoever ran that one: were the runs of each body counted apart, the
/// second body of a turn would find the first one's operands in L2 wherever they fit there.
pub fn time_interleaved(
    gpu: &Gpu,
    names: &[&str],
    bodies: &mut [&mut dyn FnMut(usize) -> Result<()>],
) -> Result<Vec<(f64, f64)>> {
    let turn = bodies.len();
    debug_assert_eq!(names.len(), turn, "a name for each body");
    let name = |k: usize| names.get(k).copied().unwrap_or("a launch");
    // Turns run so far: every launch gets its number from it.
    let mut run = 0;
    let mut warm_up = Vec::with_capacity(WARMUP);
    for _ in 0..WARMUP {
        warm_up.push(untimed_turn(gpu, bodies, run)?);
        run += 1;
    }
    for (w, events) in warm_up.into_iter().enumerate() {
        wait_turn(gpu, events, |k| {
            format!("{} (warm-up launch {} of {WARMUP})", name(k), w + 1)
        })?;
    }
    // Settling: the same turns for `gpu.settle`. The host waits for the turn before the one
    // it has just queued, so the GPU always has work and the queue never runs far past the
    // time asked for.
    let settle_start = std::time::Instant::now();
    let mut queued = std::collections::VecDeque::new();
    let settling = |k: usize| format!("{} (a settling launch)", name(k));
    while settle_start.elapsed() < gpu.settle {
        queued.push_back(untimed_turn(gpu, bodies, run)?);
        run += 1;
        if queued.len() > 2 {
            wait_turn(gpu, queued.pop_front().expect("three queued"), settling)?;
        }
    }
    for events in queued {
        wait_turn(gpu, events, settling)?;
    }
    // Everything is enqueued before the first wait: the host runs ahead of the GPU, so each
    // measured span holds its launch alone, not the host's launch latency too.
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let mut spans = Vec::with_capacity(RUNS * bodies.len());
    for _ in 0..RUNS {
        for (k, body) in bodies.iter_mut().enumerate() {
            let start = gpu
                .stream
                .record_event(flags)
                .map_err(|e| gpu_err("event", e))?;
            body(launch_number(run, turn, k))?;
            let end = gpu
                .stream
                .record_event(flags)
                .map_err(|e| gpu_err("event", e))?;
            spans.push((k, start, end));
        }
        run += 1;
    }
    for (i, (k, _, end)) in spans.iter().enumerate() {
        let launch = format!("{} (timed launch {} of {RUNS})", name(*k), i / turn + 1);
        gpu.wait_event(end, &launch)?;
    }
    let mut times = vec![Vec::with_capacity(RUNS); bodies.len()];
    for (k, start, end) in spans {
        times[k].push(
            start
                .elapsed_ms(&end)
                .map_err(|e| gpu_err("event timing", e))? as f64,
        );
    }
    Ok(times
        .into_iter()
        .map(|mut t| {
            t.sort_by(|a, b| a.total_cmp(b));
            (t[t.len() / 2], t[0])
        })
        .collect())
}

/// One launch of each body, the `run`-th turn, untimed: an event after each launch.
fn untimed_turn(
    gpu: &Gpu,
    bodies: &mut [&mut dyn FnMut(usize) -> Result<()>],
    run: usize,
) -> Result<Vec<cudarc::driver::CudaEvent>> {
    let turn = bodies.len();
    let mut events = Vec::with_capacity(turn);
    for (k, body) in bodies.iter_mut().enumerate() {
        body(launch_number(run, turn, k))?;
        events.push(
            gpu.stream
                .record_event(None)
                .map_err(|e| gpu_err("event", e))?,
        );
    }
    Ok(events)
}

/// Waits for one untimed turn's launches in order; `launch(k)` names body `k`'s.
fn wait_turn(
    gpu: &Gpu,
    events: Vec<cudarc::driver::CudaEvent>,
    launch: impl Fn(usize) -> String,
) -> Result<()> {
    for (k, event) in events.iter().enumerate() {
        gpu.wait_event(event, &launch(k))?;
    }
    Ok(())
}

/// The number `time_interleaved` gives body `k` of `turn` bodies on its `run`-th turn: launches
/// counted in the order they run.
fn launch_number(run: usize, turn: usize, k: usize) -> usize {
    run * turn + k
}

/// Device-to-device copy bandwidth (bytes read + written per second, GB/s) over `bytes`.
pub fn copy_ceiling(gpu: &Gpu, bytes: usize) -> Result<f64> {
    gpu.doing("timing the device copy");
    let src = random_buffer(gpu, bytes, DType::F32, 1)?;
    let mut dst = gpu.alloc_filled(bytes, 0)?;
    let (ms, _) = time_ms(gpu, "the device copy", |_| {
        let (s, _a) = src.device_ptr(&gpu.stream);
        let (d, _b) = dst.device_ptr_mut(&gpu.stream);
        // SAFETY: both buffers hold `bytes` bytes and outlive the copy (timing waits for it).
        unsafe { cudarc::driver::result::memcpy_dtod_async(d, s, bytes, gpu.stream.cu_stream()) }
            .map_err(|e| gpu_err("device copy", e))
    })?;
    Ok(2.0 * bytes as f64 / (ms * 1e-3) / 1e9)
}

/// A device buffer of `bytes` holding random `dtype` values in [-2, 2) (a random 16 MiB block
/// repeated): real data, never zeros.
pub fn random_buffer(gpu: &Gpu, bytes: usize, dtype: DType, seed: u64) -> Result<CudaSlice<u8>> {
    let mut rng = data::rng(seed);
    let block = bytes.min(16 << 20).max(dtype.size() as usize);
    let host = data::uniform(&mut rng, dtype, block / dtype.size() as usize, -2.0, 2.0).bytes;
    let mut buf =
        unsafe { gpu.stream.alloc::<u8>(bytes.max(1)) }.map_err(|e| gpu_err("allocating", e))?;
    let mut off = 0;
    while off < bytes {
        let n = host.len().min(bytes - off);
        let mut view = buf.slice_mut(off..off + n);
        gpu.stream
            .memcpy_htod(&host[..n], &mut view)
            .map_err(|e| gpu_err("copy to device", e))?;
        off += n;
    }
    Ok(buf)
}

/// Bytes a call must move and flops it does.
pub fn traffic(inst: &InstanceEntry, p: Problem) -> (u64, u64) {
    let bytes: u64 = inst
        .args
        .iter()
        .filter(|a| a.kind != ArgKind::Scalar)
        .map(|a| problem::buffer_len(&a.name, p) * data::dtype_of(&a.ty).size() as u64)
        .sum();
    let flops = match p {
        Problem::Gemm { m, n, k } => 2 * m * n * k,
        _ => 0,
    };
    (bytes, flops)
}

/// Times one instance on one problem beside its peer: the copy bandwidth of this run
/// (`ceiling_gbps`) for memory-bound ops; for GEMMs cuBLASLt with the same fused bias epilogue
/// (alone, with an activation, or with the residual as beta·C) where it has one, else plain
/// cuBLAS (TF32 for TF32 instances), timed here on the same data. A GEMM's matrices are dense,
/// or with `ld_align` have their rows rounded up to a multiple of that many elements, for the
/// instance and its peers alike.
pub fn bench_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    p: Problem,
    ceiling_gbps: f64,
    blas: Option<&Blas>,
    plain: Option<&InstanceEntry>,
    ld_align: Option<u64>,
) -> Result<BenchResult> {
    gpu.doing(format!("timing {} at {p}", inst.name));
    let f = gpu.function(inst)?;
    let (bytes, flops) = traffic(inst, p);
    // A GEMM's leading dimensions: padded ones (which the calls below are given), else dense.
    let (ld, padded) = match p {
        Problem::Gemm { m, n, k } => {
            let padded = ld_align.map(|align| problem::gemm_ld_aligned(inst, m, n, k, align));
            (padded.unwrap_or(problem::gemm_ld(inst, m, n, k)), padded)
        }
        _ => ((0, 0, 0), None),
    };
    let buffer_bytes = |name: &str, ty: &str| -> usize {
        match p {
            Problem::Gemm { m, n, k } => problem::gemm_matrix_layout(inst, name, ty, (m, n, k), ld)
                .map(|[rows, _, pitch]| rows * pitch),
            _ => None,
        }
        .unwrap_or(problem::buffer_len(name, p) as usize * data::dtype_of(ty).size() as usize)
    };
    // Enough input sets that one cycle through them is at least 4x the L2.
    let sets = ((4 * gpu.l2_bytes).div_ceil(bytes.max(1)) as usize).clamp(1, 8);
    let mut buffers: Vec<Vec<Option<CudaSlice<u8>>>> = Vec::new();
    for s in 0..sets {
        let mut set = Vec::new();
        for (i, a) in inst.args.iter().enumerate() {
            let len = buffer_bytes(&a.name, &a.ty);
            set.push(match a.kind {
                ArgKind::In => Some(random_buffer(
                    gpu,
                    len,
                    data::dtype_of(&a.ty),
                    (s * 64 + i) as u64,
                )?),
                ArgKind::Out => Some(gpu.alloc_filled(len, 0xFF)?),
                ArgKind::Scalar => None,
            });
        }
        buffers.push(set);
    }
    let dims = gpu.dims(inst, p)?;
    let plain = match plain {
        Some(o) => Some((o, gpu.function(o)?, gpu.dims(o, p)?)),
        None => None,
    };
    // Each set's whole parameter list, tensor maps encoded once per set (the bindings encode
    // per launch; that is host time, which the GPU spans timed here do not hold).
    let mut kernel_args = Vec::with_capacity(sets);
    let mut plain_args = Vec::with_capacity(sets);
    // The instance's argument list for a set, with the padded leading dimensions if any.
    let kernel_call = |set| {
        let mut call = call_args(inst, p, set);
        if let Some(ld) = padded {
            problem::set_gemm_ld(inst, &mut call, ld);
        }
        call
    };
    for set in &buffers {
        kernel_args.push(with_tensor_maps(gpu, inst, kernel_call(set))?);
        if let Some((o, _, _)) = &plain {
            let mut args = call_args_from(o, p, inst, set).ok_or_else(|| {
                crate::Error::Gpu(format!("{}: arguments do not match {}", o.name, inst.name))
            })?;
            if let Some(ld) = padded {
                problem::set_gemm_ld(o, &mut args, ld);
            }
            plain_args.push(with_tensor_maps(gpu, o, args)?);
        }
    }
    let encode_us_per_map = encode_cost(gpu, inst, &kernel_call(&buffers[0]))?;
    let gpu = &*gpu;
    let mut run_kernel = |run: usize| launch(gpu, &f, dims, &kernel_args[run % sets]);
    let mut plain_ms = None;
    let (median_ms, min_ms, peer, peer_value, ratio) = match (p, blas) {
        (Problem::Gemm { m, n, k }, Some(blas)) => {
            // The peer writes its own output, so all three can run turn about.
            let out = inst
                .args
                .iter()
                .find(|a| a.kind == ArgKind::Out)
                .expect("an output");
            let mut d = gpu.alloc_filled(buffer_bytes(&out.name, &out.ty), 0xFF)?;
            // The peer cycles through the input sets like the kernel (`time_interleaved`
            // numbers the launches so that no two in a row read one set): with one set of
            // its own, a peer whose operands fit in L2 kept them there between its runs.
            let input = |set: usize, name: &str| {
                inst.args
                    .iter()
                    .position(|a| a.name == name)
                    .and_then(|i| buffers[set][i].as_ref())
            };
            let operands = |set: usize| {
                let a = input(set, "a").expect("a");
                (a, input(set, "b").expect("b"), input(set, "bias"))
            };
            // A residual's peer adds C in place (beta 1): it gets a copy of each set's C to
            // overwrite, so that it reads as many distinct bytes as the kernel.
            let mut peer_out = match input(0, "c") {
                Some(_) => (0..sets)
                    .map(|set| {
                        let c = input(set, "c").expect("c");
                        gpu.stream
                            .clone_dtod(c)
                            .map_err(|e| gpu_err("copying C", e))
                    })
                    .collect::<Result<Vec<_>>>()?,
                None => Vec::new(),
            };
            let fused = match operands(0) {
                (a, b, Some(bias)) => {
                    let out = peer_out.first_mut().unwrap_or(&mut d);
                    blas.fused_epilogue(inst, (m, n, k), ld, a, b, bias, out)
                        .is_some()
                }
                _ => false,
            };
            let tf32 = inst.params.tf32 == Some(true);
            let mut run_peer = |run: usize| match operands(run % sets) {
                (a, b, Some(bias)) if fused => {
                    let out = peer_out.get_mut(run % sets).unwrap_or(&mut d);
                    blas.fused_epilogue(inst, (m, n, k), ld, a, b, bias, out)
                        .expect("fused peer exists")
                }
                (a, b, _) => {
                    blas.gemm(gpu, inst, (m, n, k), ld, a, b, &mut d, inst.out_dtype, tf32)
                }
            };
            let mut run_plain = |run: usize| match &plain {
                Some((_, pf, pdims)) => launch(gpu, pf, *pdims, &plain_args[run % sets]),
                None => Ok(()),
            };
            let mut bodies: Vec<&mut dyn FnMut(usize) -> Result<()>> =
                vec![&mut run_kernel, &mut run_peer];
            if plain.is_some() {
                bodies.push(&mut run_plain);
            }
            let peer_launch = if fused {
                "the cuBLASLt peer"
            } else {
                "the cuBLAS peer"
            };
            let mut names = vec![inst.name.as_str(), peer_launch];
            if let Some((o, _, _)) = &plain {
                names.push(o.name.as_str());
            }
            let times = time_interleaved(gpu, &names, &mut bodies)?;
            let (median_ms, min_ms) = times[0];
            plain_ms = times.get(2).map(|t| t.0);
            let name = match (fused, tf32) {
                (true, _) if inst.epilogue == [Epilogue::Bias] => "cuBLASLt fused bias TFLOP/s",
                (true, _) if inst.epilogue.contains(&Epilogue::Residual) => {
                    "cuBLASLt alpha·A·B + C + bias TFLOP/s"
                }
                (true, _) => "cuBLASLt fused bias+act TFLOP/s",
                (false, true) => "cuBLAS TF32 TFLOP/s",
                (false, false) => "cuBLAS GEMM TFLOP/s",
            };
            let peer_tflops = flops as f64 / (times[1].0 * 1e-3) / 1e12;
            let tflops = flops as f64 / (median_ms * 1e-3) / 1e12;
            (
                median_ms,
                min_ms,
                name.to_string(),
                peer_tflops,
                tflops / peer_tflops,
            )
        }
        _ => {
            let (median_ms, min_ms) = time_ms(gpu, &inst.name, run_kernel)?;
            let gb_per_s = bytes as f64 / (median_ms * 1e-3) / 1e9;
            (
                median_ms,
                min_ms,
                "device copy GB/s".to_string(),
                ceiling_gbps,
                gb_per_s / ceiling_gbps,
            )
        }
    };
    let secs = median_ms * 1e-3;
    let gb_per_s = bytes as f64 / secs / 1e9;
    let tflop_per_s = flops as f64 / secs / 1e12;
    Ok(BenchResult {
        instance: inst.name.clone(),
        op: inst.op,
        dtype: inst.dtype,
        problem: p,
        median_ms,
        min_ms,
        bytes,
        flops,
        gb_per_s,
        tflop_per_s,
        peer,
        peer_value,
        ratio,
        plain: plain_ms.and(plain.map(|(o, ..)| o.name.clone())),
        vs_plain: plain_ms.map(|t| t / median_ms),
        encode_us_per_map,
        rounds: None,
        ratio_range: None,
        ld: padded.map(|(a, b, d)| [a, b, d]),
    })
}

/// Host microseconds to check and encode one tensor map (`cuTensorMapEncodeTiled`), what the
/// bindings' launcher adds to every launch: the median over 21 rounds of 100 encodings of all
/// the instance's maps for this problem; None without maps.
fn encode_cost(gpu: &mut Gpu, inst: &InstanceEntry, call: &[ArgValue]) -> Result<Option<f64>> {
    if inst.tensor_maps.is_empty() {
        return Ok(None);
    }
    let rules = gpu.map_rules(inst)?;
    let values = super::map_values(gpu, call);
    let mut samples = Vec::with_capacity(21);
    for _ in 0..21 {
        let start = std::time::Instant::now();
        for _ in 0..100 {
            std::hint::black_box(super::encode_maps(inst, rules, &values)?);
        }
        samples.push(start.elapsed().as_secs_f64() * 1e6 / (100 * inst.tensor_maps.len()) as f64);
    }
    Ok(Some(median(samples)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(median_ms: f64, min_ms: f64, ratio: f64, vs_plain: Option<f64>) -> BenchResult {
        BenchResult {
            instance: "gemm_x".into(),
            op: Op::Gemm,
            dtype: DType::Bf16,
            problem: Problem::Gemm {
                m: 4096,
                n: 4096,
                k: 4096,
            },
            median_ms,
            min_ms,
            bytes: 3 * 4096 * 4096 * 2,
            flops: 2 * 4096 * 4096 * 4096,
            gb_per_s: 0.0,
            tflop_per_s: 0.0,
            peer: "cuBLAS GEMM TFLOP/s".into(),
            peer_value: 800.0,
            ratio,
            plain: vs_plain.map(|_| "gemm_plain".into()),
            vs_plain,
            encode_us_per_map: None,
            rounds: None,
            ratio_range: None,
            ld: None,
        }
    }

    #[test]
    fn rounds_combine_into_medians_the_lowest_minimum_and_the_ratios_range() {
        let rounds = [
            result(0.175, 0.173, 0.990, Some(0.97)),
            result(0.171, 0.170, 1.004, Some(0.98)),
            result(0.172, 0.169, 0.998, Some(0.96)),
        ];
        let c = combine_rounds(&rounds).expect("three rounds");
        assert_eq!(c.median_ms, 0.172);
        assert_eq!(c.min_ms, 0.169);
        // The median of the rounds' ratios, each from one turn-about timing.
        assert_eq!(c.ratio, 0.998);
        assert_eq!(c.ratio_range, Some([0.990, 1.004]));
        assert_eq!(c.vs_plain, Some(0.97));
        assert_eq!(c.rounds, Some(3));
        let tflops = c.flops as f64 / (0.172e-3) / 1e12;
        assert!((c.tflop_per_s - tflops).abs() < 1e-9);
        // An even count takes the mean of the middle two; one round is itself.
        let c = combine_rounds(&rounds[..2]).expect("two rounds");
        assert!((c.median_ms - 0.173).abs() < 1e-12 && (c.ratio - 0.997).abs() < 1e-12);
        let one = combine_rounds(&rounds[..1]).expect("one");
        assert_eq!(
            (one.ratio, one.rounds, one.ratio_range),
            (0.990, None, None)
        );
        assert!(combine_rounds(&[]).is_none());
        // An epilogue cost known in only some rounds is not reported.
        let mixed = [rounds[0].clone(), result(0.171, 0.170, 1.0, None)];
        assert_eq!(combine_rounds(&mixed).expect("two").vs_plain, None);
    }

    #[test]
    fn no_launch_reads_the_input_set_of_the_launch_before_it() {
        // Bodies read set `number % sets`; with two or more sets, two launches in a row (within
        // a turn and across turns) never share one, however many bodies take turns.
        for turn in 1..=4 {
            for sets in 2..=8 {
                let order: Vec<usize> = (0..WARMUP + RUNS)
                    .flat_map(|run| (0..turn).map(move |k| launch_number(run, turn, k) % sets))
                    .collect();
                for pair in order.windows(2) {
                    assert_ne!(pair[0], pair[1], "{turn} bodies, {sets} sets: {order:?}");
                }
                // And every set is read, so the rotation spans the whole 4x L2.
                for s in 0..sets {
                    assert!(order.contains(&s), "{turn} bodies, {sets} sets: {order:?}");
                }
            }
        }
    }
}
