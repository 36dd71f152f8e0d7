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
    /// Instead: per method and goal shape (or `--shapes`), the instance dispatch picks (tuning
    /// tables, then the fixed rules) beside the fixed rules' pick and the fastest instance,
    /// timed turn about (`tilegen tune --dry-run`; `--filter` selects methods).
    #[arg(long)]
    dispatch: bool,
    /// Time at these shapes instead of the goal sizes, for the ops the file names (a JSON
    /// object from op name to lists of sizes, as `tilegen tune --shapes` reads).
    #[arg(long)]
    shapes: Option<PathBuf>,
    /// Time every comparison this many times, all of them in turn each round, and report each
    /// one's median over the rounds with its lowest and highest ratio (a single ratio moves by
    /// about 1 % between comparisons on a power-limited GPU). `--json-out` then holds the
    /// combined results.
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "dispatch",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Time GEMMs with each matrix's rows a multiple of this many elements apart (lda, ldb and
    /// ldc/ldd rounded up), as a caller whose tensors are padded would pass them; cuBLAS and
    /// cuBLASLt get the same leading dimensions. A multiple of 8, so that every row starts on
    /// a 16-byte boundary; 64 puts 16-bit rows on whole 128-byte lines.
    #[arg(long = "ld-align", value_name = "ELEMENTS", value_parser = ld_align, conflicts_with = "dispatch")]
    ld_align: Option<u64>,
}

fn ld_align(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n > 0 && n <= 1 << 16 && n % 8 == 0 => Ok(n),
        Ok(_) => Err("must be a multiple of 8 from 8 to 65536".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// One line of the human report.
fn result_line(r: &tilegen::__internal::gpu::bench::BenchResult) -> String {
    if r.flops == 0 {
        return format!(
            "{:<44} {:<18} {:>10.4} {:>10.0} {:>8.3}{}",
            r.instance,
            r.problem.to_string(),
            r.median_ms,
            r.gb_per_s,
            r.ratio,
            ratio_range(r)
        );
    }
    let mut tail = r
        .vs_plain
        .map(|v| format!("  vs plain {v:.3}"))
        .unwrap_or_default();
    if let Some(us) = r.encode_us_per_map {
        tail += &format!("  map encode {us:.2} us");
    }
    if let Some([a, b, d]) = r.ld {
        tail += &format!("  ld {a},{b},{d}");
    }
    format!(
        "{:<44} {:<18} {:>10.4} {:>8.1} TFLOP/s  peer {:>8.1} ({})  ratio {:.3}{}{tail}",
        r.instance,
        r.problem.to_string(),
        r.median_ms,
        r.tflop_per_s,
        r.peer_value,
        r.peer,
        r.ratio,
        ratio_range(r)
    )
}

/// " (lowest-highest)" of a result combined over rounds; empty for one round.
fn ratio_range(r: &tilegen::__internal::gpu::bench::BenchResult) -> String {
    match r.ratio_range {
        Some([lo, hi]) if r.rounds.is_some_and(|n| n > 1) => format!(" ({lo:.3}-{hi:.3})"),
        _ => String::new(),
    }
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
        rounds,
        ld_align,
    } = args;
    if dispatch {
        return super::tune::run(
            super::tune::TuneArgs::report(lib, filter, shapes, wait_limit),
            rep,
        );
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
    let mut failures = 0;
    let insts = select.of(&gpu);
    let blas = match insts.iter().any(|i| i.op == tilegen::Op::Gemm) {
        true => Some(tilegen::__internal::gpu::cublas::Blas::new(&gpu)?),
        false => None,
    };
    // Each comparison's results, one per round, by name and shape in the order first run.
    let mut results: Vec<(String, Vec<bench::BenchResult>)> = Vec::new();
    let mut attention: Vec<(String, Vec<tilegen::__internal::gpu::attention::AttnBench>)> =
        Vec::new();
    // A result's JSON event, numbered by round when there are several.
    let event = |round: usize, key: &str, v: serde_json::Value| {
        let mut e = serde_json::json!({"event": "bench"});
        e[key] = v;
        if rounds > 1 {
            e["round"] = serde_json::json!(round + 1);
        }
        e
    };
    for round in 0..rounds as usize {
        if rounds > 1 {
            rep.text(|| format!("round {} of {rounds}", round + 1));
        }
        for inst in &insts {
            if inst.op == tilegen::Op::Attention {
                let (r, f) = tilegen::__internal::gpu::attention::bench_instance(
                    &mut gpu,
                    inst,
                    rep.is_json(),
                );
                for x in r {
                    rep.event(|| event(round, "attention", serde_json::json!(x)));
                    let key = format!(
                        "{} {} {} {} {} {} {}",
                        x.instance, x.batch, x.heads_q, x.heads_kv, x.seq, x.head_dim, x.causal
                    );
                    add_round(&mut attention, key, x);
                }
                failures += f;
                continue;
            }
            let plain = bench::plain_partner(inst, &gpu.manifest.instances).cloned();
            let cases = shapes
                .as_ref()
                .and_then(|s| tilegen::__internal::gpu::tune::shape_problems(inst, s))
                .unwrap_or_else(|| problem::bench_cases(inst));
            for p in cases {
                let timed = bench::bench_case(
                    &mut gpu,
                    inst,
                    p,
                    ceiling,
                    blas.as_ref(),
                    plain.as_ref(),
                    ld_align,
                );
                match timed {
                    Ok(r) => {
                        rep.out(
                            || event(round, "result", serde_json::json!(r)),
                            || result_line(&r),
                        );
                        add_round(&mut results, format!("{} {}", r.instance, r.problem), r);
                    }
                    Err(e) => {
                        failures += 1;
                        rep.note(|| format!("{}: {}: {e}", inst.name, p));
                    }
                }
            }
        }
    }
    let results: Vec<bench::BenchResult> = results
        .iter()
        .filter_map(|(_, r)| bench::combine_rounds(r))
        .collect();
    let attention: Vec<_> = attention
        .iter()
        .filter_map(|(_, r)| tilegen::__internal::gpu::attention::combine_rounds(r))
        .collect();
    if rounds > 1 {
        rep.text(|| format!("median of {rounds} rounds (ratio: median, then lowest-highest)"));
        for r in &results {
            rep.out(
                || serde_json::json!({"event": "bench_rounds", "result": r}),
                || result_line(r),
            );
        }
        for x in &attention {
            rep.out(
                || serde_json::json!({"event": "bench_rounds", "attention": x}),
                || tilegen::__internal::gpu::attention::bench_line(x),
            );
        }
    }
    if let Some(path) = json_out {
        let doc = serde_json::json!({
            "gpu": gpu.name, "sm": gpu.sm, "sm_count": gpu.sm_count, "copy_gb_per_s": ceiling,
            "settle_ms": settle_ms, "rounds": rounds,
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

/// Adds a round's result to its comparison's list, found by `key` (a new one at the end).
fn add_round<T>(all: &mut Vec<(String, Vec<T>)>, key: String, r: T) {
    match all.iter_mut().find(|(k, _)| *k == key) {
        Some((_, rounds)) => rounds.push(r),
        None => all.push((key, vec![r])),
    }
}
