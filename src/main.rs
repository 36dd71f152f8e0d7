//! The `tilegen` command line: a thin front end over the library. This file parses the
//! command line and dispatches; each command lives in `cli/` and reports through
//! `cli::report::Reporter`.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod cli;

use cli::report::Reporter;

#[derive(Parser)]
#[command(
    name = "tilegen",
    version,
    about = "Generate, compile and cache CUDA tile kernels from YAML specs"
)]
struct Cli {
    /// Output style: `human` text, or `json` (one JSON object per line on stdout).
    #[arg(long, value_enum, default_value_t = MessageFormat::Human, global = true)]
    message_format: MessageFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MessageFormat {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Render, compile and write the kernel library.
    Generate(cli::generate::GenerateArgs),
    /// Validate the specs and render every instance; needs no NVRTC.
    Check(cli::check::CheckArgs),
    /// List the instances the specs produce.
    List(cli::list::ListArgs),
    /// Print one instance's CUDA C, or its PTX for an arch.
    Show(cli::show::ShowArgs),
    /// Inspect or prune the compile cache.
    Cache(cli::cache::CacheArgs),
    /// Report what NVRTC, driver and GPU tilegen finds; exit 6 when NVRTC is not usable
    /// (or, with --gpu, when no GPU opens).
    Doctor(cli::doctor::DoctorArgs),
    /// Install the pinned NVRTC (no CUDA toolkit needed), or show which one tilegen uses.
    #[command(subcommand)]
    Nvrtc(cli::nvrtc::NvrtcAction),
    /// Create, verify, inspect or unpack a prebuilt kernel bundle (one reproducible .tar.gz).
    #[command(subcommand)]
    Bundle(cli::bundle::BundleAction),
    /// Run every instance of a library on the GPU against a CPU f64 reference.
    Verify(cli::verify::VerifyArgs),
    /// Time every instance at the goal sizes beside its ceiling measured in the same run.
    Bench(cli::bench::BenchArgs),
    /// Measure every instance of each method at its shapes on this GPU and write the winners
    /// as a tuning table (`generate` bakes it into the bindings).
    Tune(cli::tune::TuneArgs),
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`tilegen list | head`), instead of panicking on a broken pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let rep = Reporter::new(cli.message_format == MessageFormat::Json);
    let result = match cli.command {
        Command::Generate(args) => cli::generate::run(args, &rep),
        Command::Check(args) => cli::check::run(args, &rep),
        Command::List(args) => cli::list::run(args, &rep),
        Command::Show(args) => cli::show::run(args, &rep),
        Command::Cache(args) => cli::cache::run(args, &rep),
        Command::Doctor(args) => cli::doctor::run(args, &rep),
        Command::Nvrtc(action) => cli::nvrtc::run(action, &rep),
        Command::Bundle(action) => cli::bundle::run(action, &rep),
        Command::Verify(args) => cli::verify::run(args, &rep),
        Command::Bench(args) => cli::bench::run(args, &rep),
        Command::Tune(args) => cli::tune::run(args, &rep),
    };
    result.unwrap_or_else(|e| rep.error(&e))
}
