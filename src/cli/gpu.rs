//! The GPU commands: `tilegen verify`, `tilegen bench`, and the GPU line of `tilegen doctor`.

use std::process::ExitCode;

use tilegen::error::Error;

use crate::emit_json;

pub fn tilegen_gpu_line() -> String {
    if !tilegen::gpu::driver_present() {
        return "GPU: no CUDA driver (libcuda.so) found".into();
    }
    match cudarc::driver::CudaContext::new(0) {
        Ok(ctx) => {
            let cc = ctx
                .compute_capability()
                .map(|(a, b)| format!("sm_{a}{b}"))
                .unwrap_or_default();
            let driver = tilegen::gpu::driver_version()
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into());
            format!(
                "GPU: {} ({cc}), driver CUDA {driver}",
                ctx.name().unwrap_or_default()
            )
        }
        Err(e) => format!("GPU: driver present but no device opened: {e:?}"),
    }
}

fn selected<'a>(
    gpu: &'a tilegen::gpu::Gpu,
    filter: Option<&str>,
) -> Vec<tilegen::manifest::InstanceEntry> {
    gpu.manifest
        .instances
        .iter()
        .filter(|i| filter.is_none_or(|f| i.name.contains(f)))
        .cloned()
        .collect()
}

pub fn gpu_verify(
    lib: &std::path::Path,
    filter: Option<&str>,
    seed: Option<u64>,
    json: bool,
) -> Result<ExitCode, Error> {
    use tilegen::gpu::{problem, verify, Gpu};
    let mut gpu = Gpu::open(lib)?;
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    if !json {
        println!(
            "verify {} on {} (sm_{}), seed {seed}",
            lib.display(),
            gpu.name,
            gpu.sm
        );
        println!(
            "{:<44} {:<22} {:>12} {:>9}  result",
            "instance", "shape", "rel error", "bound"
        );
    }
    let mut rng = tilegen::gpu::data::rng(seed);
    let (mut passed, mut failed) = (0, 0);
    for inst in selected(&gpu, filter) {
        let started = std::time::Instant::now();
        for p in problem::verify_cases(&inst) {
            let r = verify::run_case(&mut gpu, &inst, p, &mut rng);
            if r.passed {
                passed += 1
            } else {
                failed += 1
            }
            if json {
                emit_json(serde_json::json!({"event": "case", "result": r}));
            } else if !r.passed || tilegen::env::var_os("TILEGEN_VERBOSE").is_some() {
                let what = match &r.error {
                    Some(e) => format!("ERROR {e}"),
                    None if r.non_finite > 0 => {
                        format!("FAIL ({} outputs not finite)", r.non_finite)
                    }
                    None if !r.passed => "FAIL".into(),
                    None => "ok".into(),
                };
                println!(
                    "{:<44} {:<22} {:>12.3e} {:>9.1e}  {what}",
                    r.instance,
                    r.problem.to_string(),
                    r.rel_error,
                    r.tolerance
                );
            }
        }
        if !json {
            println!(
                "{:<44} done in {:.2}s",
                inst.name,
                started.elapsed().as_secs_f64()
            );
        }
    }
    if json {
        emit_json(
            serde_json::json!({"event": "done", "passed": passed, "failed": failed, "seed": seed}),
        );
    } else {
        println!("{passed} passed, {failed} failed");
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn gpu_bench(
    lib: &std::path::Path,
    filter: Option<&str>,
    json_out: Option<&std::path::Path>,
    json: bool,
) -> Result<ExitCode, Error> {
    use tilegen::gpu::{bench, problem, Gpu};
    let mut gpu = Gpu::open(lib)?;
    let ceiling = bench::copy_ceiling(&gpu, 1 << 30)?;
    if !json {
        println!(
            "bench {} on {} (sm_{}, {} SMs); device copy: {ceiling:.0} GB/s",
            lib.display(),
            gpu.name,
            gpu.sm,
            gpu.sm_count
        );
        println!(
            "{:<44} {:<18} {:>10} {:>10} {:>8}",
            "instance", "shape", "ms", "GB/s", "vs copy"
        );
    }
    let mut results = Vec::new();
    let mut failures = 0;
    let insts = selected(&gpu, filter);
    let blas = match insts.iter().any(|i| i.op == tilegen::spec::Op::Gemm) {
        true => Some(tilegen::gpu::cublas::Blas::new(&gpu)?),
        false => None,
    };
    for inst in insts {
        let plain = bench::plain_partner(&inst, &gpu.manifest.instances).cloned();
        for p in problem::bench_cases(&inst) {
            match bench::bench_case(&mut gpu, &inst, p, ceiling, blas.as_ref(), plain.as_ref()) {
                Ok(r) => {
                    if json {
                        emit_json(serde_json::json!({"event": "bench", "result": r}));
                    } else if r.flops > 0 {
                        let vs_plain = r
                            .vs_plain
                            .map(|v| format!("  vs plain {v:.3}"))
                            .unwrap_or_default();
                        println!(
                            "{:<44} {:<18} {:>10.4} {:>8.1} TFLOP/s  peer {:>8.1} ({})  ratio {:.3}{vs_plain}",
                            r.instance, r.problem.to_string(), r.median_ms, r.tflop_per_s, r.peer_value, r.peer, r.ratio
                        );
                    } else {
                        println!(
                            "{:<44} {:<18} {:>10.4} {:>10.0} {:>8.3}",
                            r.instance,
                            r.problem.to_string(),
                            r.median_ms,
                            r.gb_per_s,
                            r.ratio
                        );
                    }
                    results.push(r);
                }
                Err(e) => {
                    failures += 1;
                    eprintln!("{}: {}: {e}", inst.name, p);
                }
            }
        }
    }
    if let Some(path) = json_out {
        let doc = serde_json::json!({
            "gpu": gpu.name, "sm": gpu.sm, "sm_count": gpu.sm_count, "copy_gb_per_s": ceiling,
            "tilegen_version": tilegen::VERSION, "results": results,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc).unwrap_or_default())
            .map_err(|e| Error::io(path, e))?;
    }
    // A case that could not run (launch failure, bad size) is a failed benchmark.
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
