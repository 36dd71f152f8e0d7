//! `tilegen verify`: every selected instance of a library on the GPU against a CPU f64
//! reference.

use std::process::ExitCode;

use tilegen::Error;

use super::gpu::{LibraryArgs, Select, WaitLimit};
use super::report::Reporter;

#[derive(clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    library: LibraryArgs,
    #[command(flatten)]
    wait_limit: WaitLimit,
    /// Seed for the random inputs (default: from the clock; printed for replay).
    #[arg(long)]
    seed: Option<u64>,
    /// Only cases whose output has at most this many elements (for compute-sanitizer,
    /// which runs kernels a hundred times slower).
    #[arg(long)]
    max_elements: Option<u64>,
    /// Run every case this many times, each run on fresh random data with its outputs poisoned
    /// anew. One run finds what fails every launch; a fault that shows in some launches only
    /// (a race, a barrier that lets a warp fall behind) gets more chances to show.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    repeat: u32,
}

pub fn run(args: VerifyArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    use tilegen::__internal::gpu::{problem, verify};
    let VerifyArgs {
        library: LibraryArgs { lib, filter, op },
        wait_limit,
        seed,
        max_elements,
        repeat,
    } = args;
    let select = Select::new(filter, op)?;
    let mut gpu = super::gpu::open(&lib, wait_limit, *rep)?;
    let seed = seed.unwrap_or_else(super::gpu::clock_seed);
    let instances = select.of(&gpu);
    if instances.is_empty() {
        return Err(Error::Usage(format!(
            "no instance of {} matches the selection",
            lib.display()
        )));
    }
    rep.text(|| {
        format!(
            "verify {} on {} (sm_{}), seed {seed}{}\n{:<44} {:<34} {:>9} {:>9}  result",
            lib.display(),
            gpu.name,
            gpu.sm,
            runs_note(repeat),
            "instance",
            "case",
            "worst/bd",
            "rel L2"
        )
    });
    let verbose = tilegen::__internal::env::var_os("TILEGEN_VERBOSE").is_some();
    let mut rng = tilegen::__internal::gpu::data::rng(seed);
    let (mut passed, mut failed) = (0, 0);
    for inst in &instances {
        let started = std::time::Instant::now();
        let cases: Vec<_> = problem::verify_cases(inst)
            .into_iter()
            .filter(|c| max_elements.is_none_or(|m| problem::output_len(c.problem) <= m))
            .collect();
        for run in 1..=repeat {
            // Which run a line belongs to, where there is more than one.
            let run_of = (repeat > 1).then_some((run, repeat));
            if inst.op == tilegen::Op::Attention {
                let emit = |v: serde_json::Value| rep.event(|| v);
                let json_emit: Option<&dyn Fn(serde_json::Value)> = rep.is_json().then_some(&emit);
                let (p, f) = tilegen::__internal::gpu::attention::verify_instance(
                    &mut gpu,
                    inst,
                    max_elements,
                    &mut rng,
                    verbose,
                    json_emit,
                    run_of,
                );
                (passed, failed) = (passed + p, failed + f);
            }
            for &case in &cases {
                let r = verify::run_case(&mut gpu, inst, case, &mut rng);
                if r.passed {
                    passed += 1
                } else {
                    failed += 1
                }
                // People see the failures (every case with TILEGEN_VERBOSE); JSON every case.
                if rep.is_json() || !r.passed || verbose {
                    rep.out(
                        || verify::case_event(&r, run_of),
                        || {
                            let (ratio, l2) = match &r.elements {
                                Some(e) => (e.worst.map_or(0.0, |w| w.ratio), e.rel_l2),
                                None => (f64::NAN, f64::NAN),
                            };
                            let what = if r.passed {
                                "ok".to_string()
                            } else {
                                format!("{}{}", verify::fail_prefix(run_of), r.failure())
                            };
                            format!(
                                "{:<44} {:<34} {ratio:>9.3} {l2:>9.1e}  {what}",
                                r.instance,
                                r.case.to_string(),
                            )
                        },
                    );
                }
            }
        }
        rep.text(|| {
            format!(
                "{:<44} done in {:.2}s",
                inst.name,
                started.elapsed().as_secs_f64()
            )
        });
    }
    rep.out(
        || {
            serde_json::json!({
                "event": "done", "instances": instances.len(), "passed": passed,
                "failed": failed, "seed": seed, "runs_per_case": repeat,
            })
        },
        || {
            format!(
                "{} instances: {passed} passed, {failed} failed{}",
                instances.len(),
                runs_note(repeat)
            )
        },
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// ", each case N times" where cases run more than once (counts are then of runs).
fn runs_note(repeat: u32) -> String {
    if repeat > 1 {
        format!(", each case {repeat} times")
    } else {
        String::new()
    }
}
