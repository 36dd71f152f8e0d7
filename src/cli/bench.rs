//! `tilegen bench`: time every selected instance at the goal sizes beside its ceiling
//! measured in the same run.

use std::path::PathBuf;
use std::process::ExitCode;

use tilegen::Error;

use super::gpu::{LibraryArgs, Select, WaitLimit};
use super::report::Reporter;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    library: LibraryArgs,
    #[command(flatten)]
    wait_limit: WaitLimit,
    /// Before each timed comparison (an instance beside its peers), run the same launches for
    /// this many milliseconds, so that the GPU's clock settles where it stays under sustained
    /// load (a power-limited chip such as the H200 boosts through short bursts and slows under
    /// long ones, and instances can rank differently in the two regimes); 0 times right after
    /// a brief warm-up. Not with `--dispatch`, whose turns hold every instance of a method.
    #[arg(long = "settle-ms", value_name = "MS", default_value_t = 0, conflicts_with = "dispatch",
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    settle_ms: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Instead: per method and goal shape, the instance dispatch picks (tuning tables, then
    /// the fixed rules) beside the fixed rules' pick and the fastest instance, timed turn
    /// about (`tilegen tune --dry-run`; `--filter` selects methods).
    #[arg(long)]
    dispatch: bool,
    /// Time at these shapes instead of the goal sizes, for the ops the file names (a JSON
    /// object from op name to lists of sizes, as `tilegen tune --shapes` reads).
    #[arg(long, conflicts_with = "dispatch")]
    shapes: Option<PathBuf>,
}

pub fn run(args: BenchArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    use tilegen::__internal::gpu::{bench, problem};
    let BenchArgs {
        library: LibraryArgs { lib, filter, op },
        wait_limit,
        settle_ms,
        json_out,
        dispatch,
        shapes,
    } = args;
    if dispatch {
        return super::tune::run(super::tune::TuneArgs::report(lib, filter, wait_limit), rep);
    }
    let shapes = match &shapes {
        Some(path) => Some(tilegen::__internal::gpu::tune::read_shapes(path)?),
        None => None,
    };
    let select = Select::new(filter, op)?;
    let mut gpu = super::gpu::open(&lib, wait_limit, *rep)?;
    gpu.settle = std::time::Duration::from_millis(settle_ms);
    let settled = match settle_ms {
        0 => String::new(),
        ms => format!("; each comparison timed after {ms} ms of its launches"),
    };
    let ceiling = bench::copy_ceiling(&gpu, 1 << 30)?;
    rep.text(|| {
        format!(
            "bench {} on {} (sm_{}, {} SMs); device copy: {ceiling:.0} GB/s{}\n{:<44} {:<18} {:>10} {:>10} {:>8}",
            lib.display(),
            gpu.name,
            gpu.sm,
            gpu.sm_count,
            settled,
            "instance",
            "shape",
            "ms",
            "GB/s",
            "vs copy"
        )
    });
    let mut results = Vec::new();
    let mut failures = 0;
    let insts = select.of(&gpu);
    let blas = match insts.iter().any(|i| i.op == tilegen::Op::Gemm) {
        true => Some(tilegen::__internal::gpu::cublas::Blas::new(&gpu)?),
        false => None,
    };
    let mut attention = Vec::new();
    for inst in insts {
        if inst.op == tilegen::Op::Attention {
            let (r, f) =
                tilegen::__internal::gpu::attention::bench_instance(&mut gpu, &inst, rep.is_json());
            for x in &r {
                rep.event(|| serde_json::json!({"event": "bench", "attention": x}));
            }
            attention.extend(r);
            failures += f;
            continue;
        }
        let plain = bench::plain_partner(&inst, &gpu.manifest.instances).cloned();
        let cases = shapes
            .as_ref()
            .and_then(|s| tilegen::__internal::gpu::tune::shape_problems(&inst, s))
            .unwrap_or_else(|| problem::bench_cases(&inst));
        for p in cases {
            match bench::bench_case(&mut gpu, &inst, p, ceiling, blas.as_ref(), plain.as_ref()) {
                Ok(r) => {
                    rep.out(
                        || serde_json::json!({"event": "bench", "result": r}),
                        || {
                            if r.flops > 0 {
                                let mut vs_plain = r
                                    .vs_plain
                                    .map(|v| format!("  vs plain {v:.3}"))
                                    .unwrap_or_default();
                                if let Some(us) = r.encode_us_per_map {
                                    vs_plain += &format!("  map encode {us:.2} us");
                                }
                                format!(
                                    "{:<44} {:<18} {:>10.4} {:>8.1} TFLOP/s  peer {:>8.1} ({})  ratio {:.3}{vs_plain}",
                                    r.instance, r.problem.to_string(), r.median_ms, r.tflop_per_s, r.peer_value, r.peer, r.ratio
                                )
                            } else {
                                format!(
                                    "{:<44} {:<18} {:>10.4} {:>10.0} {:>8.3}",
                                    r.instance,
                                    r.problem.to_string(),
                                    r.median_ms,
                                    r.gb_per_s,
                                    r.ratio
                                )
                            }
                        },
                    );
                    results.push(r);
                }
                Err(e) => {
                    failures += 1;
                    rep.note(|| format!("{}: {}: {e}", inst.name, p));
                }
            }
        }
    }
    if let Some(path) = json_out {
        let doc = serde_json::json!({
            "gpu": gpu.name, "sm": gpu.sm, "sm_count": gpu.sm_count, "copy_gb_per_s": ceiling,
            "settle_ms": settle_ms,
            "tilegen_version": tilegen::VERSION, "results": results,
        });
        let mut doc = doc;
        if !attention.is_empty() {
            doc["attention"] = serde_json::json!(attention);
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap_or_default())
            .map_err(|e| Error::io(&path, e))?;
    }
    // A case that could not run (launch failure, bad size) is a failed benchmark.
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
