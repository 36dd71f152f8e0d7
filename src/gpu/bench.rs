//! `tilegen bench`: each instance at the goal sizes beside its ceiling measured in the same
//! run — a device-to-device copy for memory-bound kernels. CUDA events around every launch,
//! warm-up first, the median of many runs, inputs rotated over a working set several times the
//! L2 so repeated runs do not measure the cache.

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use super::cublas::Blas;
use super::data;
use super::problem::{self, Problem};
use super::{call_args, gpu_err, launch, Gpu};
use crate::error::Result;
use crate::manifest::InstanceEntry;
use crate::ops::ArgKind;
use crate::spec::model::{DType, Op};

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
}

/// Times `body` with events: median and minimum milliseconds over RUNS after WARMUP.
pub fn time_ms(gpu: &Gpu, mut body: impl FnMut(usize) -> Result<()>) -> Result<(f64, f64)> {
    for i in 0..WARMUP {
        body(i)?;
    }
    gpu.sync()?;
    let mut times = Vec::with_capacity(RUNS);
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    for i in 0..RUNS {
        let start = gpu
            .stream
            .record_event(flags)
            .map_err(|e| gpu_err("event", e))?;
        body(WARMUP + i)?;
        let end = gpu
            .stream
            .record_event(flags)
            .map_err(|e| gpu_err("event", e))?;
        end.synchronize().map_err(|e| gpu_err("kernel failed", e))?;
        times.push(
            start
                .elapsed_ms(&end)
                .map_err(|e| gpu_err("event timing", e))? as f64,
        );
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok((times[times.len() / 2], times[0]))
}

/// Device-to-device copy bandwidth (bytes read + written per second, GB/s) over `bytes`.
pub fn copy_ceiling(gpu: &Gpu, bytes: usize) -> Result<f64> {
    let src = random_buffer(gpu, bytes, DType::F32, 1)?;
    let mut dst = gpu.alloc_filled(bytes, 0)?;
    let (ms, _) = time_ms(gpu, |_| {
        let (s, _a) = src.device_ptr(&gpu.stream);
        let (d, _b) = dst.device_ptr_mut(&gpu.stream);
        // SAFETY: both buffers hold `bytes` bytes and outlive the copy (synchronized by timing).
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
        .map(|a| problem::buffer_len(inst, &a.name, p) * data::dtype_of(&a.ty).size() as u64)
        .sum();
    let flops = match p {
        Problem::Gemm { m, n, k } => 2 * m * n * k,
        _ => 0,
    };
    (bytes, flops)
}

/// Times one instance on one problem beside its peer: the copy bandwidth of this run
/// (`ceiling_gbps`) for memory-bound ops; for GEMMs cuBLASLt with the same fused bias+activation
/// where it has one, else plain cuBLAS (TF32 for TF32 instances), timed here on the same data.
pub fn bench_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    p: Problem,
    ceiling_gbps: f64,
    blas: Option<&Blas>,
) -> Result<BenchResult> {
    let f = gpu.function(inst)?;
    let (bytes, flops) = traffic(inst, p);
    // Enough input sets that one cycle through them is at least 4x the L2.
    let sets = ((4 * gpu.l2_bytes).div_ceil(bytes.max(1)) as usize).clamp(1, 8);
    let mut buffers: Vec<Vec<Option<CudaSlice<u8>>>> = Vec::new();
    for s in 0..sets {
        let mut set = Vec::new();
        for (i, a) in inst.args.iter().enumerate() {
            let len = problem::buffer_len(inst, &a.name, p) as usize
                * data::dtype_of(&a.ty).size() as usize;
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
    let dims = problem::dims(inst, p, gpu.sm_count).map_err(|e| crate::Error::Gpu(e.to_string()))?;
    let (median_ms, min_ms) = time_ms(gpu, |run| {
        let set = &buffers[run % sets];
        let args = call_args(inst, p, set);
        launch(gpu, &f, dims, &args)
    })?;
    let secs = median_ms * 1e-3;
    let gb_per_s = bytes as f64 / secs / 1e9;
    let tflop_per_s = flops as f64 / secs / 1e12;
    let (peer, peer_value, ratio) = match (p, blas) {
        (Problem::Gemm { m, n, k }, Some(blas)) => {
            let set = &mut buffers[0];
            let idx = |name: &str| inst.args.iter().position(|a| a.name == name);
            let out_i = inst
                .args
                .iter()
                .position(|a| a.kind == ArgKind::Out)
                .expect("an output");
            let mut d = set[out_i].take().expect("output buffer");
            let (a, b) = (
                set[idx("a").expect("a")].as_ref().expect("a"),
                set[idx("b").expect("b")].as_ref().expect("b"),
            );
            let bias = idx("bias").and_then(|i| set[i].as_ref());
            let fused = bias.is_some_and(|bias| {
                blas.fused_bias_act(inst, (m, n, k), a, b, bias, &mut d)
                    .is_some()
            });
            let tf32 = inst.params.tf32 == Some(true);
            let (peer_ms, _) = time_ms(gpu, |_| match bias.filter(|_| fused) {
                Some(bias) => blas
                    .fused_bias_act(inst, (m, n, k), a, b, bias, &mut d)
                    .expect("fused peer exists"),
                None => blas.gemm(gpu, inst, (m, n, k), a, b, &mut d, inst.out_dtype, tf32),
            })?;
            let name = match (fused, tf32) {
                (true, _) => "cuBLASLt fused bias+act TFLOP/s",
                (false, true) => "cuBLAS TF32 TFLOP/s",
                (false, false) => "cuBLAS GEMM TFLOP/s",
            };
            let peer_tflops = flops as f64 / (peer_ms * 1e-3) / 1e12;
            (name.to_string(), peer_tflops, tflop_per_s / peer_tflops)
        }
        _ => (
            "device copy GB/s".to_string(),
            ceiling_gbps,
            gb_per_s / ceiling_gbps,
        ),
    };
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
    })
}
