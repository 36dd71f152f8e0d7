//! `tilegen generate`: render, compile and write the kernel library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;

use tilegen::Error;
use tilegen::Event;

use super::report::Reporter;
use super::Inputs;

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Library folder to write.
    #[arg(long, short, default_value = "generated")]
    out: PathBuf,
    /// Parallel compiles (default: one per core).
    #[arg(long, short = 'j', default_value_t = 0)]
    jobs: usize,
    /// Write nothing; exit 1 if the library on disk differs from what would be written.
    #[arg(long)]
    check: bool,
    /// Cache folder (default: TILEGEN_CACHE_DIR, else the user cache folder).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Do not write Rust bindings.
    #[arg(long)]
    no_bindings: bool,
    /// Take the kernels from this prebuilt bundle instead of compiling (no NVRTC needed;
    /// default: TILEGEN_BUNDLE when set). With specs, only their instances are taken, each
    /// checked by config sha256; the bundle may hold more.
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// With a bundle: require its signature `BUNDLE.minisig` to verify with this public key
    /// (a .pub file or the key); default: TILEGEN_BUNDLE_PUBKEY when set.
    #[arg(long)]
    bundle_pubkey: Option<String>,
    /// Folder of tuning tables (`tilegen tune`) to bake into the bindings' dispatch
    /// (default: the `tuning` folder beside the specs, when there is one).
    #[arg(long)]
    tuning: Option<PathBuf>,
    /// Leave out instances of kernels marked `tuning: candidates` that no tuning table names
    /// as a winner.
    #[arg(long)]
    prune_by_tuning: bool,
}

pub fn run(args: GenerateArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    let mut o = args.inputs.options(args.out);
    o.bundle = args
        .bundle
        .or_else(|| tilegen::__internal::env::path("TILEGEN_BUNDLE"));
    o.bundle_pubkey = match args.bundle_pubkey {
        Some(key) => Some(key),
        None => tilegen::__internal::env::var("TILEGEN_BUNDLE_PUBKEY")?,
    };
    o.jobs = args.jobs;
    o.tuning = args.tuning;
    o.prune_by_tuning = args.prune_by_tuning;
    o.check = args.check;
    o.cache_dir = args.cache_dir;
    o.bindings = !args.no_bindings;
    let bar: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);
    let show_bar = !rep.is_json() && std::io::stderr().is_terminal();
    // Warnings go above the progress bar while there is one.
    let warn = |bar: &Option<indicatif::ProgressBar>, line: String| match bar {
        Some(pb) => pb.println(line),
        None => eprintln!("{line}"),
    };
    let on_event = |ev: &Event| {
        if rep.is_json() {
            rep.event(|| serde_json::to_value(ev).unwrap_or_default());
            return;
        }
        let mut bar = bar.lock().unwrap_or_else(|p| p.into_inner());
        match ev {
            Event::Planned { compiles, .. } if show_bar => {
                let pb = indicatif::ProgressBar::new(*compiles as u64);
                pb.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} compiling [{bar:30}] {pos}/{len} {msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                *bar = Some(pb);
            }
            Event::Compiled { instance, arch, .. } => {
                if let Some(pb) = bar.as_ref() {
                    pb.set_message(format!("{instance} ({arch})"));
                    pb.inc(1);
                }
            }
            Event::CacheCorrupt { message } => warn(
                &bar,
                format!("warning: corrupt cache entry rebuilt: {message}"),
            ),
            Event::CacheWarning { message } | Event::TuningDropped { message } => {
                warn(&bar, format!("warning: {message}"))
            }
            _ => {}
        }
    };
    let report = tilegen::generate(&o, &on_event)?;
    if let Some(pb) = bar.lock().unwrap_or_else(|p| p.into_inner()).take() {
        pb.finish_and_clear();
    }
    rep.err(
        || serde_json::json!({"event": "done", "report": report}),
        || {
            let verb = if o.check { "checked" } else { "generated" };
            let remote = report.remote.as_ref().map(|r| format!("\n{}", r.line()));
            format!(
                "{verb} {} instances into {} in {:.2}s: {} compiled, {} from cache, {} files written, {} removed, {} unchanged{}",
                report.instances,
                o.out.display(),
                report.millis as f64 / 1000.0,
                report.compiled,
                report.cache_hits,
                report.written.len(),
                report.removed.len(),
                report.unchanged,
                remote.unwrap_or_default()
            )
        },
    );
    Ok(ExitCode::SUCCESS)
}
