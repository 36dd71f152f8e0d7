//! `tilegen tune`: measure every instance of each method at its shapes on this GPU and write
//! the winners as a tuning table, which `generate` bakes into the bindings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tilegen::__internal::tuning;
use tilegen::Error;

use super::report::Reporter;

/// Verify cases larger than this are skipped by default: they take most of verify's time, and
/// the smaller ones already cover every ragged edge.
const MAX_VERIFY_ELEMENTS: u64 = 1 << 24;

#[derive(clap::Args)]
pub struct TuneArgs {
    /// Library folder (written by `tilegen generate`).
    #[arg(long, default_value = "generated")]
    lib: PathBuf,
    /// Only methods whose name contains this text (e.g. `layernorm_bf16`).
    #[arg(long)]
    filter: Option<String>,
    /// Shapes to measure instead of the defaults, per op: a JSON object from op name to
    /// lists of sizes (`{"layernorm": [[32768, 4096]], "gemm": [[16, 4096, 4096]]}`).
    #[arg(long)]
    shapes: Option<PathBuf>,
    /// Folder to write the table into, as `<device name>.json`. A table already there keeps
    /// its entries for the methods and shapes this run does not measure.
    #[arg(long, default_value = "tuning")]
    out: PathBuf,
    /// Write only this run's measurements, dropping every entry the table had.
    #[arg(long, conflicts_with = "dry_run")]
    replace: bool,
    /// Measure and report only; write no table.
    #[arg(long)]
    dry_run: bool,
    /// Judge the tuning tables in this folder (the `table` column) instead of the ones baked
    /// into the library: what dispatch will do once `generate` bakes them in.
    #[arg(long)]
    tuning: Option<PathBuf>,
    /// Verify cases with more output elements than this are skipped (they are the slowest).
    #[arg(long, default_value_t = MAX_VERIFY_ELEMENTS)]
    max_verify_elements: u64,
    /// Seed of the verification inputs (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    wait_limit: super::gpu::WaitLimit,
}

/// Writes this run's table so far, laid over `earlier` when given, in place of the file at
/// `path`.
fn save(
    gpu: &tilegen::__internal::gpu::Gpu,
    all: &[tilegen::__internal::gpu::tune::Measured],
    earlier: Option<&tuning::TuningTable>,
    out: &Path,
    path: &Path,
) -> Result<tuning::MergeCounts, Error> {
    use tilegen::__internal::gpu::tune;
    let mut table = tune::table(gpu, all);
    let mut counts = tuning::MergeCounts {
        added: table.entries.len(),
        ..Default::default()
    };
    if let Some(earlier) = earlier {
        (table, counts) = tuning::merge(earlier, table)
            .map_err(|m| Error::Usage(format!("{}: {m}", path.display())))?;
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    tuning::write_file(path, &table)?;
    Ok(counts)
}

impl TuneArgs {
    /// Measure and report only, with the library's own tables (`bench --dispatch`).
    pub fn report(
        lib: PathBuf,
        filter: Option<String>,
        shapes: Option<PathBuf>,
        wait_limit: super::gpu::WaitLimit,
    ) -> TuneArgs {
        TuneArgs {
            lib,
            filter,
            shapes,
            out: PathBuf::new(),
            replace: false,
            dry_run: true,
            tuning: None,
            max_verify_elements: MAX_VERIFY_ELEMENTS,
            seed: None,
            wait_limit,
        }
    }
}

pub fn run(args: TuneArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    use tilegen::__internal::gpu::tune;
    let shapes = match &args.shapes {
        Some(path) => tune::read_shapes(path)?,
        None => BTreeMap::new(),
    };
    let started = std::time::Instant::now();
    let mut gpu = super::gpu::open(&args.lib, args.wait_limit, *rep)?;
    if let Some(dir) = &args.tuning {
        let (tables, _) = tilegen::__internal::tuning::load_dir(dir)?;
        let (tables, dropped) = tilegen::__internal::tuning::attach(tables, &gpu.manifest);
        for d in dropped {
            rep.note(|| format!("warning: {d}"));
        }
        gpu.manifest.tuning = tables;
    }
    let methods = tune::methods(&gpu, args.filter.as_deref());
    if methods.is_empty() {
        return Err(Error::Usage(format!(
            "no method of {} with two or more instances matches the selection",
            args.lib.display()
        )));
    }
    // The table already in --out is read (and checked) before anything is measured: this
    // run's entries are laid over it after each method, so an unsound file stops the run
    // here rather than being written over, and an interrupted run keeps what it measured.
    let path = args.out.join(tune::file_name(&gpu.name));
    let earlier = if args.dry_run || args.replace || !path.exists() {
        None
    } else {
        let earlier = tuning::load_file(&path).map_err(|e| {
            Error::Usage(format!(
                "{e}\n(tune keeps the entries of the table there; fix or move it, or pass --replace to write this run's table over it)"
            ))
        })?;
        if let Some(why) = tuning::other_device(&earlier.device, &tune::device_key(&gpu)) {
            return Err(Error::Usage(format!("{}: {why}", path.display())));
        }
        Some(earlier)
    };
    let seed = args.seed.unwrap_or_else(super::gpu::clock_seed);
    // Memory-bound methods are also reported against the device copy of this run.
    let ceiling = tilegen::__internal::gpu::bench::copy_ceiling(&gpu, 1 << 30)?;
    rep.text(|| {
        format!(
            "tune {} on {} (sm_{}, {} SMs), {} methods, seed {seed}; device copy {ceiling:.0} GB/s\n{:<34} {:<16} {:<44} {:>9} {:>7} {:>7} {:>7} {:>7}",
            args.lib.display(),
            gpu.name,
            gpu.sm,
            gpu.sm_count,
            methods.len(),
            "method",
            "shape",
            "fastest",
            "µs",
            "rule",
            "table",
            "2nd",
            "vs copy"
        )
    });
    let mut rng = tilegen::__internal::gpu::data::rng(seed);
    let mut verified = BTreeMap::new();
    let mut all = Vec::new();
    let mut unverified = std::collections::BTreeSet::new();
    let mut saved = None;
    for (method, members) in &methods {
        // Each shape's line goes out as soon as it is measured: a later shape that stops the
        // run (a kernel that does not finish) leaves the earlier ones reported.
        let mut report = |m: &tune::Measured| {
            let (best, best_us) = m.times[0].clone();
            // Each pick's time over the fastest: 1.00 is the best single instance.
            let slowdown = |pick: &Option<String>| {
                pick.as_deref()
                    .and_then(|p| m.time_of(p))
                    .map_or("-".to_string(), |t| format!("{:.3}", t / best_us))
            };
            let second = m
                .times
                .get(1)
                .map_or("-".to_string(), |t| format!("{:.3}", t.1 / best_us));
            let vs_copy = match m.problem {
                tilegen::__internal::gpu::problem::Problem::Gemm { .. } => None,
                p => {
                    let bytes = tilegen::__internal::gpu::bench::traffic(&members[0], p).0 as f64;
                    Some(bytes / (best_us * 1e-6) / 1e9 / ceiling)
                }
            };
            rep.out(
                || serde_json::json!({"event": "tuned", "result": m, "best_vs_copy": vs_copy}),
                || {
                    format!(
                        "{:<34} {:<16} {:<44} {:>9.1} {:>7} {:>7} {:>7} {:>7}",
                        m.method,
                        m.problem.to_string(),
                        best,
                        best_us,
                        slowdown(&m.rule),
                        slowdown(&m.tuned),
                        second,
                        vs_copy.map_or("-".to_string(), |r| format!("{r:.3}"))
                    )
                },
            );
        };
        let measured = tune::measure_method(
            &mut gpu,
            method,
            members,
            &shapes,
            &mut verified,
            &mut rng,
            args.max_verify_elements,
            &mut report,
        )?;
        for m in measured {
            unverified.extend(m.unverified.iter().cloned());
            all.push(m);
        }
        if !args.dry_run {
            saved = Some(save(&gpu, &all, earlier.as_ref(), &args.out, &path)?);
        }
    }
    let measured = tune::table(&gpu, &all).entries.len();
    let written = saved.map(|_| &path);
    let seconds = started.elapsed().as_secs_f64();
    rep.err(
        || {
            let counts = saved.unwrap_or_default();
            serde_json::json!({
                "event": "done", "entries": measured, "table": written,
                "replaced": counts.replaced, "added": counts.added, "kept": counts.kept,
                "unverified": unverified, "seconds": seconds, "seed": seed,
            })
        },
        || {
            let mut s = format!(
                "{measured} entries in {seconds:.0} s (times relative to the fastest: `rule` is the fixed rules' pick, `table` the library's tuning tables', `2nd` the runner-up)"
            );
            if let Some(p) = written {
                s += &format!("\nwrote {}", p.display());
                if let (Some(c), Some(_)) = (saved, &earlier) {
                    s += &format!(
                        " ({} entries replaced, {} added, {} kept from the table there)",
                        c.replaced, c.added, c.kept
                    );
                }
                s += "; `tilegen generate` bakes it into the bindings";
            }
            if !unverified.is_empty() {
                s += &format!(
                    "\nleft out, failed verification: {}",
                    unverified.iter().cloned().collect::<Vec<_>>().join(", ")
                );
            }
            s
        },
    );
    Ok(if unverified.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
