//! The `tilegen` command line: a thin front end over the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tilegen::cache::Cache;
use tilegen::error::Error;
use tilegen::generate::{self, Event, Options};
use tilegen::spec::Arch;

mod cli;

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

#[derive(clap::Args, Clone)]
struct Inputs {
    /// Specs folder (every *.yaml under it) or one spec file.
    #[arg(long, default_value = "specs")]
    specs: PathBuf,
    /// Folder of templates overriding the embedded ones by file name.
    #[arg(long)]
    templates: Option<PathBuf>,
    /// Only instances whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Compile for these archs instead of each spec's (comma-separated, e.g. sm_80,sm_90).
    #[arg(long, value_delimiter = ',', value_parser = parse_arch)]
    arch: Option<Vec<Arch>>,
}

#[derive(Subcommand)]
enum Command {
    /// Render, compile and write the kernel library.
    Generate {
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
        /// default: TILEGEN_BUNDLE when set).
        #[arg(long)]
        bundle: Option<PathBuf>,
        /// With a bundle: require its signature `BUNDLE.minisig` to verify with this public key
        /// (a .pub file or the key); default: TILEGEN_BUNDLE_PUBKEY when set.
        #[arg(long)]
        bundle_pubkey: Option<String>,
    },
    /// Validate the specs and render every instance; needs no NVRTC.
    Check {
        #[command(flatten)]
        inputs: Inputs,
    },
    /// List the instances the specs produce.
    List {
        #[command(flatten)]
        inputs: Inputs,
    },
    /// Print one instance's CUDA C, or its PTX for an arch.
    Show {
        /// Instance name (see `tilegen list`).
        name: String,
        #[command(flatten)]
        inputs: Inputs,
        /// Print the PTX for this arch instead (compiles it, through the cache).
        #[arg(long, value_parser = parse_arch)]
        ptx: Option<Arch>,
    },
    /// Inspect or prune the compile cache.
    Cache {
        #[command(subcommand)]
        action: CacheAction,
        /// Cache folder (default: TILEGEN_CACHE_DIR, else the user cache folder).
        #[arg(long, global = true)]
        cache_dir: Option<PathBuf>,
    },
    /// Report what NVRTC, driver and GPU tilegen finds; exit 6 when NVRTC is not usable
    /// (or, with --gpu, when no GPU opens).
    Doctor {
        /// Also require a GPU that opens.
        #[arg(long)]
        gpu: bool,
    },
    /// Install the pinned NVRTC (no CUDA toolkit needed), or show which one tilegen uses.
    Nvrtc {
        #[command(subcommand)]
        action: NvrtcAction,
    },
    /// Create, verify, inspect or unpack a prebuilt kernel bundle (one reproducible .tar.gz).
    Bundle {
        #[command(subcommand)]
        action: BundleAction,
    },
    /// Run every instance of a library on the GPU against a CPU f64 reference.
    Verify {
        /// Library folder (written by `tilegen generate`).
        #[arg(long, default_value = "generated")]
        lib: PathBuf,
        /// Only instances whose name contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Only instances of this op (vector_add, fma, softmax, layernorm, rmsnorm, gemm, add_rmsnorm, attention).
        #[arg(long)]
        op: Option<String>,
        /// Seed for the random inputs (default: from the clock; printed for replay).
        #[arg(long)]
        seed: Option<u64>,
        /// Only cases whose output has at most this many elements (for compute-sanitizer,
        /// which runs kernels a hundred times slower).
        #[arg(long)]
        max_elements: Option<u64>,
    },
    /// Time every instance at the goal sizes beside its ceiling measured in the same run.
    Bench {
        /// Library folder (written by `tilegen generate`).
        #[arg(long, default_value = "generated")]
        lib: PathBuf,
        /// Only instances whose name contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Only instances of this op.
        #[arg(long)]
        op: Option<String>,
        /// Write the results as JSON here.
        #[arg(long)]
        json_out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BundleAction {
    /// Pack a library folder (written by `tilegen generate`) into a bundle.
    Create {
        #[arg(long, default_value = "generated")]
        lib: PathBuf,
        /// Bundle file to write (.tar.gz).
        #[arg(long)]
        out: PathBuf,
    },
    /// Check every member against bundle.json (and, with --pubkey, the signature FILE.minisig
    /// first); exit 7 when anything is wrong.
    Verify {
        file: PathBuf,
        #[command(flatten)]
        sig: SigArgs,
    },
    /// Verify, then print the bundle manifest's summary.
    Inspect {
        file: PathBuf,
        #[command(flatten)]
        sig: SigArgs,
    },
    /// Verify, then install into an absent or empty folder atomically.
    Unpack {
        file: PathBuf,
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        sig: SigArgs,
    },
    /// Sign a bundle (or any file) with a minisign secret key, writing FILE.minisig beside it.
    Sign {
        file: PathBuf,
        /// Minisign secret key file (an encrypted one takes its password from
        /// TILEGEN_SIGN_PASSWORD).
        #[arg(long)]
        key: PathBuf,
    },
    /// Write a new unencrypted minisign key pair, tilegen.pub and tilegen.key, into a folder
    /// (for tests and CI secrets; never overwrites).
    Keygen {
        #[arg(long)]
        out: PathBuf,
    },
}

/// Signature checking for the bundle commands that read a bundle.
#[derive(Args)]
struct SigArgs {
    /// Check the bundle's signature FILE.minisig with this minisign public key (a .pub file,
    /// or the key itself, RW…) before reading the bundle; a bad signature is an error.
    #[arg(long)]
    pubkey: Option<String>,
    /// Refuse a bundle without a signature (needs --pubkey).
    #[arg(long, requires = "pubkey")]
    require_signed: bool,
}

#[derive(Subcommand)]
enum NvrtcAction {
    /// Fetch the pinned nvidia-cuda-nvrtc wheel with pip (sha256-checked) into a versioned
    /// folder that every later tilegen run and build script searches.
    Install {
        /// Install folder (default: <user cache folder>/tilegen-nvrtc/<release>).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Do nothing when tilegen already finds a working NVRTC anywhere.
        #[arg(long)]
        if_missing: bool,
    },
    /// Print the NVRTC tilegen finds and loads, or why none.
    Path,
}

#[derive(Subcommand)]
enum CacheAction {
    /// Entries and size.
    Stats,
    /// Check every entry; remove corrupt, unreadable and wrong-typed ones (a marked cache only).
    Verify,
    /// Remove every entry (a marked cache only; files tilegen did not write stay).
    Clean,
    /// Remove least recently used entries until the cache is at most --max-size.
    Gc {
        /// Size such as 500M or 2G.
        #[arg(long, value_parser = parse_size)]
        max_size: u64,
    },
}

fn parse_arch(s: &str) -> Result<Arch, String> {
    s.parse()
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let m = match s[i..]
                .to_ascii_uppercase()
                .trim_end_matches('B')
                .trim_end_matches('I')
            {
                "" => 1u64,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(format!("unknown size unit in `{s}` (use K, M, G or T)")),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size `{s}`"))
}

fn options(inputs: &Inputs, out: PathBuf) -> Options {
    let mut o = Options::new(&inputs.specs, out);
    o.templates = inputs.templates.clone();
    o.filter = inputs.filter.clone();
    o.archs = inputs.arch.clone();
    o
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
    let json = cli.message_format == MessageFormat::Json;
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if json {
                let diagnostics: Vec<serde_json::Value> = match &e {
                    Error::Spec(d) => d
                        .0
                        .iter()
                        .map(|d| {
                            serde_json::json!({
                                "file": d.file, "line": d.mark.line, "column": d.mark.col, "message": d.message
                            })
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                println!(
                    "{}",
                    serde_json::json!({"event": "error", "exit_code": e.exit_code(), "message": e.to_string(), "diagnostics": diagnostics})
                );
            } else {
                eprintln!("{}", e);
            }
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn emit_json(v: serde_json::Value) {
    println!("{v}");
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    let json = cli.message_format == MessageFormat::Json;
    match cli.command {
        Command::Generate {
            inputs,
            out,
            jobs,
            check,
            cache_dir,
            no_bindings,
            bundle,
            bundle_pubkey,
        } => {
            let mut o = options(&inputs, out);
            o.bundle = bundle.or_else(|| tilegen::env::var_os("TILEGEN_BUNDLE").map(PathBuf::from));
            o.bundle_pubkey = bundle_pubkey.or_else(|| tilegen::env::var("TILEGEN_BUNDLE_PUBKEY"));
            o.jobs = jobs;
            o.check = check;
            o.cache_dir = cache_dir;
            o.bindings = !no_bindings;
            let bar: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);
            let show_bar = !json && std::io::stderr().is_terminal();
            let on_event = |ev: &Event| {
                if json {
                    emit_json(serde_json::to_value(ev).unwrap_or_default());
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
                    Event::CacheCorrupt { message } => {
                        let line = format!("warning: corrupt cache entry rebuilt: {message}");
                        match bar.as_ref() {
                            Some(pb) => pb.println(line),
                            None => eprintln!("{line}"),
                        }
                    }
                    Event::CacheWarning { message } => {
                        let line = format!("warning: {message}");
                        match bar.as_ref() {
                            Some(pb) => pb.println(line),
                            None => eprintln!("{line}"),
                        }
                    }
                    _ => {}
                }
            };
            let report = generate::generate(&o, &on_event)?;
            if let Some(pb) = bar.lock().unwrap_or_else(|p| p.into_inner()).take() {
                pb.finish_and_clear();
            }
            if json {
                emit_json(serde_json::json!({"event": "done", "report": report}));
            } else {
                let verb = if check { "checked" } else { "generated" };
                eprintln!(
                    "{verb} {} instances into {} in {:.2}s: {} compiled, {} from cache, {} files written, {} removed, {} unchanged",
                    report.instances,
                    o.out.display(),
                    report.millis as f64 / 1000.0,
                    report.compiled,
                    report.cache_hits,
                    report.written.len(),
                    report.removed.len(),
                    report.unchanged
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { inputs } => {
            let r = generate::render_all(&options(&inputs, PathBuf::new()))?;
            if json {
                emit_json(serde_json::json!({"event": "checked", "instances": r.instances.len()}));
            } else {
                eprintln!(
                    "{} spec file(s) OK: {} instances rendered",
                    r.spec_files,
                    r.instances.len()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List { inputs } => {
            let r = generate::render_all(&options(&inputs, PathBuf::new()))?;
            for inst in &r.instances {
                let launch = tilegen::ops::launch(inst);
                if json {
                    emit_json(serde_json::json!({
                        "name": inst.name, "op": inst.op, "dtype": inst.dtype, "params": inst.params,
                        "epilogue": inst.epilogue, "archs": inst.archs, "threads": launch.threads,
                        "origin": format!("{}:{}", inst.origin.file, inst.origin.line)
                    }));
                } else {
                    let archs: Vec<&str> = inst.archs.iter().map(|a| a.as_str()).collect();
                    let epi: Vec<&str> = inst.epilogue.iter().map(|e| e.as_str()).collect();
                    println!(
                        "{:<44} {:<10} {:<5} threads={:<5} epilogue=[{}] archs={}  ({}:{})",
                        inst.name,
                        inst.op,
                        inst.dtype,
                        launch.threads,
                        epi.join(","),
                        archs.join(","),
                        inst.origin.file,
                        inst.origin.line
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { name, inputs, ptx } => {
            let r = generate::render_all(&options(&inputs, PathBuf::new()))?;
            let Some(i) = r.instances.iter().position(|i| i.name == name) else {
                let near = r
                    .instances
                    .iter()
                    .map(|i| (strsim::jaro_winkler(&i.name, &name), &i.name))
                    .filter(|(score, _)| *score > 0.8)
                    .max_by(|a, b| a.0.total_cmp(&b.0));
                let hint = match near {
                    Some((_, n)) => format!("did you mean `{n}`? "),
                    None => String::new(),
                };
                return Err(Error::Usage(format!(
                    "no instance named `{}`; {hint}`tilegen list` shows them",
                    tilegen::escape::shown(&name)
                )));
            };
            match ptx {
                None => print!("{}", r.sources[i]),
                Some(arch) => {
                    // The checks `generate` applies to the instance's own archs, for this one.
                    let mut one = r.instances[i].clone();
                    one.archs = vec![arch];
                    if let Some((_, why)) = tilegen::ops::arch_problems(&one).into_iter().next() {
                        return Err(Error::Usage(format!(
                            "cannot show {name}'s PTX for {arch}: {why}"
                        )));
                    }
                    let nvrtc = tilegen::nvrtc::load()?.version();
                    let cache = Cache::open(Cache::default_location()?);
                    let c = generate::compile_cached(&cache, &nvrtc, &name, &r.sources[i], arch)?
                        .compiled;
                    print!("{}", String::from_utf8_lossy(&c.ptx));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Cache { action, cache_dir } => {
            let cache = Cache::open(match cache_dir {
                Some(d) => d,
                None => Cache::default_location()?,
            });
            match action {
                CacheAction::Stats => {
                    let s = cache.stats();
                    if json {
                        emit_json(serde_json::json!({"cache": cache.root(), "stats": s}));
                    } else {
                        println!(
                            "{}: {} entries, {:.1} MiB, {} temporary files{}",
                            cache.root().display(),
                            s.entries,
                            s.bytes as f64 / (1 << 20) as f64,
                            s.temporary_files,
                            if s.marked {
                                ""
                            } else {
                                " (not marked as a tilegen cache)"
                            }
                        );
                    }
                }
                CacheAction::Verify => {
                    let r = cache.verify()?;
                    let bad = r.removed.len() + r.unrepaired.len();
                    if json {
                        emit_json(serde_json::json!({
                            "checked": r.checked, "corrupt_removed": r.removed,
                            "unrepaired": r.unrepaired, "foreign": r.foreign
                        }));
                    } else {
                        println!(
                            "{} entries checked, {} corrupt or unreadable ({} removed)",
                            r.checked,
                            bad,
                            r.removed.len()
                        );
                        for b in &r.removed {
                            println!("  removed: {b}");
                        }
                        for b in &r.unrepaired {
                            println!("  not repaired: {b}");
                        }
                        for f in &r.foreign {
                            println!("  left alone (not tilegen's): {f}");
                        }
                    }
                    if bad > 0 {
                        return Ok(ExitCode::from(1));
                    }
                }
                CacheAction::Clean => {
                    let r = cache.clean()?;
                    if json {
                        emit_json(serde_json::json!({"removed": r}));
                    } else {
                        println!(
                            "removed {} entries ({:.1} MiB), {} temporary and {} lock files under {}",
                            r.entries,
                            r.bytes as f64 / (1 << 20) as f64,
                            r.temporary_files,
                            r.lock_files,
                            cache.root().display()
                        );
                        for f in &r.foreign {
                            println!("  left alone (not tilegen's): {f}");
                        }
                    }
                }
                CacheAction::Gc { max_size } => {
                    let r = cache.gc(max_size)?;
                    if json {
                        emit_json(serde_json::json!({
                            "removed": r.entries, "bytes_freed": r.bytes,
                            "temporary_files_removed": r.temporary_files,
                            "lock_files_removed": r.lock_files, "foreign": r.foreign
                        }));
                    } else {
                        println!(
                            "removed {} entries, freed {:.1} MiB; removed {} stale temporary and {} stale lock files",
                            r.entries,
                            r.bytes as f64 / (1 << 20) as f64,
                            r.temporary_files,
                            r.lock_files
                        );
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bundle { action } => cli::bundle::bundle_command(action, json),
        Command::Verify {
            lib,
            filter,
            op,
            seed,
            max_elements,
        } => {
            let select = cli::gpu::Select::new(filter, op)?;
            cli::gpu::gpu_verify(&lib, &select, seed, max_elements, json)
        }
        Command::Bench {
            lib,
            filter,
            op,
            json_out,
        } => {
            let select = cli::gpu::Select::new(filter, op)?;
            cli::gpu::gpu_bench(&lib, &select, json_out.as_deref(), json)
        }
        Command::Nvrtc { action } => cli::nvrtc::nvrtc_command(action, json),
        Command::Doctor { gpu } => {
            let nvrtc = tilegen::nvrtc::load();
            let cache = Cache::default_location();
            let (gpu_line, gpu_fields, gpu_ok) = cli::gpu::gpu_status();
            // NVRTC is what every generate needs; a GPU only what --gpu asks for.
            let ok = nvrtc.is_ok() && (gpu_ok || !gpu);
            if json {
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
                emit_json(
                    serde_json::json!({"event": "doctor", "ok": ok, "nvrtc": nvrtc, "cache": cache, "gpu": gpu_fields}),
                );
            } else {
                match &nvrtc {
                    Ok(nv) => println!("NVRTC {} at {}", nv.version(), nv.location),
                    Err(e) => println!("NVRTC: not usable\n{e}"),
                }
                match &cache {
                    Ok(p) => println!("cache: {}", p.display()),
                    Err(e) => println!("cache: {e}"),
                }
                println!("{gpu_line}");
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(6)
            })
        }
    }
}
