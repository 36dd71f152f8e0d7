//! `tilegen doctor`: what NVRTC, cache folder, driver and GPU tilegen finds.

use std::process::ExitCode;

use tilegen::__internal::cache::Cache;
use tilegen::Error;

use super::report::Reporter;

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Also require a GPU that opens.
    #[arg(long)]
    gpu: bool,
}

pub fn run(args: DoctorArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    let nvrtc = tilegen::__internal::nvrtc::load();
    let cache = Cache::default_location();
    let (gpu_line, gpu_fields, gpu_ok) = gpu_status();
    // NVRTC is what every generate needs; a GPU only what --gpu asks for.
    let ok = nvrtc.is_ok() && (gpu_ok || !args.gpu);
    rep.out(
        || {
            let nvrtc = match &nvrtc {
                Ok(nv) => {
                    serde_json::json!({"found": true, "version": nv.version(), "location": nv.location})
                }
                Err(e) => serde_json::json!({"found": false, "error": e.to_string()}),
            };
            let cache = match &cache {
                Ok(p) => serde_json::json!({"path": p}),
                Err(e) => serde_json::json!({"path": null, "error": e.to_string()}),
            };
            serde_json::json!({"event": "doctor", "ok": ok, "nvrtc": nvrtc, "cache": cache, "gpu": gpu_fields})
        },
        || {
            let nvrtc = match &nvrtc {
                Ok(nv) => format!("NVRTC {} at {}", nv.version(), nv.location),
                Err(e) => format!("NVRTC: not usable\n{e}"),
            };
            let cache = match &cache {
                Ok(p) => format!("cache: {}", p.display()),
                Err(e) => format!("cache: {e}"),
            };
            format!("{nvrtc}\n{cache}\n{gpu_line}")
        },
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(6)
    })
}

/// What doctor reports of the GPU: a line for people and fields for JSON, and whether a
/// device opened.
fn gpu_status() -> (String, serde_json::Value, bool) {
    if !tilegen::__internal::gpu::driver_present() {
        return (
            "GPU: no CUDA driver (libcuda.so) found".into(),
            serde_json::json!({"driver": false, "device": null}),
            false,
        );
    }
    let driver = tilegen::__internal::gpu::driver_version().map(|v| v.to_string());
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
