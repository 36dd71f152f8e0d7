//! The GPU commands: `tilegen verify`, `tilegen bench`, and the GPU line of `tilegen doctor`.

use std::process::ExitCode;

use tilegen::error::Error;

use crate::emit_json;

/// What `tilegen doctor` reports of the GPU: a line for people and fields for JSON, and
/// whether a device opened.
pub fn gpu_status() -> (String, serde_json::Value, bool) {
    if !tilegen::gpu::driver_present() {
        return (
            "GPU: no CUDA driver (libcuda.so) found".into(),
            serde_json::json!({"driver": false, "device": null}),
            false,
        );
    }
    let driver = tilegen::gpu::driver_version().map(|v| v.to_string());
    match cudarc::driver::CudaContext::new(0) {
        Ok(ctx) => {
            let cc = ctx
                .compute_capability()
                .map(|(a, b)| format!("sm_{a}{b}"))
                .unwrap_or_default();
            let name = ctx.name().unwrap_or_default();
            (
                format!(
                    "GPU: {name} ({cc}), driver CUDA {}",
                    driver.as_deref().unwrap_or("?")
                ),
                serde_json::json!({"driver": true, "driver_cuda": driver, "device": {"name": name, "arch": cc}}),
                true,
            )
        }
        Err(e) => (
            format!("GPU: driver present but no device opened: {e:?}"),
            serde_json::json!({"driver": true, "driver_cuda": driver, "device": null, "error": format!("{e:?}")}),
            false,
        ),
    }
}

/// Which instances a GPU command runs: by name text and by op, checked before the driver is
/// touched.
pub struct Select {
    filter: Option<String>,
    op: Option<tilegen::spec::Op>,
}

impl Select {
    pub fn new(filter: Option<String>, op: Option<String>) -> Result<Select, Error> {
        let op = match op {
            None => None,
            Some(o) => Some(tilegen::spec::Op::parse(&o).ok_or_else(|| {
                Error::Usage(format!(
                    "--op {o}: not an op ({})",
                    tilegen::spec::Op::choices()
                ))
            })?),
        };
        Ok(Select { filter, op })
    }

    fn of(&self, gpu: &tilegen::gpu::Gpu) -> Vec<tilegen::manifest::InstanceEntry> {
        gpu.manifest
            .instances
            .iter()
            .filter(|i| self.filter.as_deref().is_none_or(|f| i.name.contains(f)))
            .filter(|i| self.op.is_none_or(|o| i.op == o))
            .cloned()
            .collect()
    }
}

pub fn gpu_verify(
    lib: &std::path::Path,
    select: &Select,
    seed: Option<u64>,
    max_elements: Option<u64>,
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
    let instances = select.of(&gpu);
    if instances.is_empty() {
        return Err(Error::Usage(format!(
            "no instance of {} matches the selection",
            lib.display()
        )));
    }
    if !json {
        println!(
            "verify {} on {} (sm_{}), seed {seed}",
            lib.display(),
            gpu.name,
            gpu.sm
        );
        println!(
            "{:<44} {:<34} {:>9} {:>9}  result",
            "instance", "case", "worst/bd", "rel L2"
        );
    }
    let mut rng = tilegen::gpu::data::rng(seed);
    let (mut passed, mut failed) = (0, 0);
    for inst in &instances {
        let started = std::time::Instant::now();
        if inst.op == tilegen::spec::Op::Attention {
            let emit = |v: serde_json::Value| emit_json(v);
            let verbose = tilegen::env::var_os("TILEGEN_VERBOSE").is_some();
            let json_emit: Option<&dyn Fn(serde_json::Value)> = json.then_some(&emit);
            let (p, f) = tilegen::gpu::attention::verify_instance(
                &mut gpu,
                inst,
                max_elements,
                &mut rng,
                verbose,
                json_emit,
            );
            (passed, failed) = (passed + p, failed + f);
        }
        let cases = problem::verify_cases(inst)
            .into_iter()
            .filter(|c| max_elements.is_none_or(|m| problem::output_len(c.problem) <= m));
        for case in cases {
            let r = verify::run_case(&mut gpu, inst, case, &mut rng);
            if r.passed {
                passed += 1
            } else {
                failed += 1
            }
            if json {
                emit_json(serde_json::json!({"event": "case", "result": r}));
            } else if !r.passed || tilegen::env::var_os("TILEGEN_VERBOSE").is_some() {
                let (ratio, l2) = match &r.elements {
                    Some(e) => (e.worst.map_or(0.0, |w| w.ratio), e.rel_l2),
                    None => (f64::NAN, f64::NAN),
                };
                let what = if r.passed {
                    "ok".to_string()
                } else {
                    format!("FAIL {}", r.failure())
                };
                println!(
                    "{:<44} {:<34} {ratio:>9.3} {l2:>9.1e}  {what}",
                    r.instance,
                    r.case.to_string(),
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
        emit_json(serde_json::json!({
            "event": "done", "instances": instances.len(), "passed": passed,
            "failed": failed, "seed": seed,
        }));
    } else {
        println!(
            "{} instances: {passed} passed, {failed} failed",
            instances.len()
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn gpu_bench(
    lib: &std::path::Path,
    select: &Select,
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
    let insts = select.of(&gpu);
    let blas = match insts.iter().any(|i| i.op == tilegen::spec::Op::Gemm) {
        true => Some(tilegen::gpu::cublas::Blas::new(&gpu)?),
        false => None,
    };
    let mut attention = Vec::new();
    for inst in insts {
        if inst.op == tilegen::spec::Op::Attention {
            let (r, f) = tilegen::gpu::attention::bench_instance(&mut gpu, &inst, json);
            if json {
                for x in &r {
                    emit_json(serde_json::json!({"event": "bench", "attention": x}));
                }
            }
            attention.extend(r);
            failures += f;
            continue;
        }
        let plain = bench::plain_partner(&inst, &gpu.manifest.instances).cloned();
        for p in problem::bench_cases(&inst) {
            match bench::bench_case(&mut gpu, &inst, p, ceiling, blas.as_ref(), plain.as_ref()) {
                Ok(r) => {
                    if json {
                        emit_json(serde_json::json!({"event": "bench", "result": r}));
                    } else if r.flops > 0 {
                        let mut vs_plain = r
                            .vs_plain
                            .map(|v| format!("  vs plain {v:.3}"))
                            .unwrap_or_default();
                        if let Some(us) = r.encode_us_per_map {
                            vs_plain += &format!("  map encode {us:.2} us");
                        }
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
        let mut doc = doc;
        if !attention.is_empty() {
            doc["attention"] = serde_json::json!(attention);
        }
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
