//! The generator core: specs → instances → CUDA C → (cache | NVRTC) → library files.
//! The CLI and the build.rs `Builder` both call [`generate`]; with a bundle it writes the library
//! from the bundle instead of compiling.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::cache::{Cache, Lookup};
use crate::error::{Error, Result};
use crate::hashing::{cache_key, sha256_hex, KeyInputs};
use crate::manifest::{self, FileRef, InstanceEntry, Manifest, Target};
use crate::nvrtc;
use crate::ops;
use crate::output::{self, FileSet, WriteReport};
use crate::render::{config_hash, Renderer};
use crate::spec::{self, Arch, Instance};

/// What to generate and where.
#[derive(Debug, Clone)]
pub struct Options {
    /// A specs folder (every `*.yaml` under it) or one spec file.
    pub specs: PathBuf,
    /// Folder whose templates replace the embedded ones of the same name.
    pub templates: Option<PathBuf>,
    /// Library folder to write.
    pub out: PathBuf,
    /// Parallel compiles; 0 means one per core.
    pub jobs: usize,
    /// Replace every spec's archs with these.
    pub archs: Option<Vec<Arch>>,
    /// Compare with `out` instead of writing.
    pub check: bool,
    /// Cache folder; None for the default location.
    pub cache_dir: Option<PathBuf>,
    /// Also write `bindings.rs` (Rust bindings over the library).
    pub bindings: bool,
    /// Compile the kernels. When false (docs.rs builds, where NVRTC is absent), nothing is
    /// compiled and NVRTC is not loaded: the library lists its instances without binaries,
    /// and its bindings compile but fail at load time.
    pub compile: bool,
    /// Only instances whose name contains this.
    pub filter: Option<String>,
    /// Take the library from this bundle (verified) instead of compiling; NVRTC is not
    /// needed. Specs that are present are compared with it (see [`crate::bundle::library`]).
    pub bundle: Option<PathBuf>,
    /// With `bundle`: the public key (a `.pub` file or the key itself) whose signature
    /// `BUNDLE.minisig` must verify before anything in the bundle is read.
    pub bundle_pubkey: Option<String>,
}

impl Options {
    pub fn new(specs: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        Options {
            specs: specs.into(),
            templates: None,
            out: out.into(),
            jobs: 0,
            archs: None,
            check: false,
            cache_dir: None,
            bindings: true,
            compile: true,
            filter: None,
            bundle: None,
            bundle_pubkey: None,
        }
    }
}

/// Progress events, for a progress bar or `--message-format json`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Planned {
        instances: usize,
        compiles: usize,
    },
    Compiled {
        instance: String,
        arch: Arch,
        cached: bool,
        millis: u64,
    },
    CacheCorrupt {
        message: String,
    },
}

/// What a run did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Report {
    pub instances: usize,
    pub compiled: usize,
    pub cache_hits: usize,
    pub corrupt_cache_entries: usize,
    pub written: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    pub unchanged: usize,
    /// Spec and template files read (for `cargo:rerun-if-changed`).
    pub inputs: Vec<PathBuf>,
    pub millis: u64,
}

/// Everything up to rendering: no NVRTC needed. Used by `check`, `list` and `show`.
pub struct Rendered {
    pub instances: Vec<Instance>,
    pub sources: Vec<String>,
    pub inputs: Vec<PathBuf>,
}

pub fn render_all(opts: &Options) -> Result<Rendered> {
    let (spec_files, mut instances) = spec::load_dir(&opts.specs)?;
    if let Some(archs) = &opts.archs {
        for inst in &mut instances {
            inst.archs = archs.clone();
        }
        // The new archs may not fit (bf16 on sm_75, shared memory on sm_86): recheck.
        let mut problems = Vec::new();
        for inst in &instances {
            problems.extend(
                ops::arch_problems(inst)
                    .into_iter()
                    .map(|(_, m)| format!("{}: {m}", inst.name)),
            );
            problems.extend(
                ops::check(inst)
                    .into_iter()
                    .map(|(_, m)| format!("{}: {m}", inst.name)),
            );
        }
        if !problems.is_empty() {
            return Err(Error::Usage(format!(
                "--arch does not fit every instance:\n  {}",
                problems.join("\n  ")
            )));
        }
    }
    if let Some(f) = &opts.filter {
        instances.retain(|i| i.name.contains(f.as_str()));
    }
    let renderer = Renderer::new(opts.templates.as_deref())?;
    let sources = instances
        .iter()
        .map(|i| renderer.render(i))
        .collect::<Result<Vec<_>>>()?;
    let mut inputs: Vec<PathBuf> = spec_files.into_iter().map(|s| s.path).collect();
    inputs.extend(renderer.files_read);
    Ok(Rendered {
        instances,
        sources,
        inputs,
    })
}

/// Runs the whole pipeline. Nothing is written unless every instance rendered and compiled.
pub fn generate(opts: &Options, on_event: &(dyn Fn(&Event) + Sync)) -> Result<Report> {
    if let Some(bundle) = &opts.bundle {
        return crate::bundle::library::generate_from_bundle(opts, bundle, on_event);
    }
    let start = Instant::now();
    let rendered = render_all(opts)?;
    let nvrtc_version = if opts.compile {
        nvrtc::load()?.version()
    } else {
        "none".to_string()
    };
    let cache = Cache::open(match &opts.cache_dir {
        Some(d) => d.clone(),
        None => Cache::default_location()?,
    });

    // One job per (instance, arch); none when only the bindings are wanted (docs.rs).
    let jobs: Vec<(usize, Arch)> = rendered
        .instances
        .iter()
        .filter(|_| opts.compile)
        .enumerate()
        .flat_map(|(i, inst)| inst.archs.iter().map(move |&a| (i, a)))
        .collect();
    on_event(&Event::Planned {
        instances: rendered.instances.len(),
        compiles: jobs.len(),
    });

    let hits = AtomicUsize::new(0);
    let corrupt = AtomicUsize::new(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()
        .map_err(|e| Error::Environment(format!("cannot start worker threads: {e}")))?;
    let results: Vec<Result<(String, nvrtc::Compiled)>> = pool.install(|| {
        use rayon::prelude::*;
        jobs.par_iter()
            .map(|&(i, arch)| {
                let inst = &rendered.instances[i];
                let t = Instant::now();
                let done = compile_cached(
                    &cache,
                    &nvrtc_version,
                    &inst.name,
                    &rendered.sources[i],
                    arch,
                )?;
                if let Some(message) = done.corrupt {
                    corrupt.fetch_add(1, Ordering::Relaxed);
                    on_event(&Event::CacheCorrupt { message });
                }
                if done.cached {
                    hits.fetch_add(1, Ordering::Relaxed);
                }
                on_event(&Event::Compiled {
                    instance: inst.name.clone(),
                    arch,
                    cached: done.cached,
                    millis: if done.cached {
                        0
                    } else {
                        t.elapsed().as_millis() as u64
                    },
                });
                Ok((done.key, done.compiled))
            })
            .collect()
    });
    let compiled = first_error_of_all(results)?;

    let files = assemble(&rendered, &nvrtc_version, &jobs, &compiled, opts.bindings)?;
    let mut report = Report {
        instances: rendered.instances.len(),
        compiled: jobs.len() - hits.load(Ordering::Relaxed),
        cache_hits: hits.load(Ordering::Relaxed),
        corrupt_cache_entries: corrupt.load(Ordering::Relaxed),
        inputs: rendered.inputs.clone(),
        ..Default::default()
    };
    write_or_check(
        opts,
        &files,
        "the specs; run `tilegen generate`",
        &mut report,
    )?;
    report.millis = start.elapsed().as_millis() as u64;
    Ok(report)
}

/// Writes the library files into `opts.out`, or with `opts.check` compares them with what is
/// there (`against` says what the folder is out of date with).
pub(crate) fn write_or_check(
    opts: &Options,
    files: &FileSet,
    against: &str,
    report: &mut Report,
) -> Result<()> {
    if opts.check {
        let diffs = output::check_library(&opts.out, files);
        if !diffs.is_empty() {
            return Err(Error::OutOfDate(format!(
                "{} is out of date with {against} ({} differences):\n  {}",
                opts.out.display(),
                diffs.len(),
                diffs.join("\n  ")
            )));
        }
    } else {
        let WriteReport {
            written,
            removed,
            unchanged,
        } = output::write_library(&opts.out, files)?;
        report.written = written;
        report.removed = removed;
        report.unchanged = unchanged;
    }
    Ok(())
}

/// Completes a library's files (kernels and sources, without `manifest.json`): adds
/// `bindings.rs` when wanted, which embeds the files listed so far, then `manifest.json`,
/// which lists every file but itself.
pub(crate) fn finish_library(
    mut files: FileSet,
    mut manifest: Manifest,
    bindings: bool,
) -> Result<FileSet> {
    files.remove(manifest::FILE_NAME);
    files.remove(crate::bindings::FILE_NAME);
    manifest.files = files.keys().cloned().collect();
    if bindings {
        let text = crate::bindings::generate(&manifest, &|path| files.get(path).cloned())?;
        files.insert(crate::bindings::FILE_NAME.into(), text.into_bytes());
        manifest.files = files.keys().cloned().collect();
    }
    files.insert(manifest::FILE_NAME.into(), manifest.to_bytes());
    Ok(files)
}

/// One compile, satisfied from the cache or by NVRTC.
pub struct CompileDone {
    pub key: String,
    pub compiled: nvrtc::Compiled,
    /// Served from an intact cache entry.
    pub cached: bool,
    /// A corrupt entry found (and removed) on the way, to report.
    pub corrupt: Option<String>,
}

/// Compiles one instance's source for one arch, through the cache: an intact entry is used,
/// a corrupt one is removed and rebuilt, a new result is published for other processes.
/// On failure the rendered source is kept in a file the error names.
pub fn compile_cached(
    cache: &Cache,
    nvrtc_version: &str,
    name: &str,
    source: &str,
    arch: Arch,
) -> Result<CompileDone> {
    let options = nvrtc::options(arch);
    let key = cache_key(&KeyInputs {
        source,
        nvrtc_version,
        options: &options,
        arch,
        tilegen_version: crate::VERSION,
    });
    let corrupt = match cache.get(&key) {
        Lookup::Hit(compiled) => {
            return Ok(CompileDone {
                key,
                compiled,
                cached: true,
                corrupt: None,
            })
        }
        Lookup::Corrupt(message) => Some(message),
        Lookup::Miss => None,
    };
    let compiled = nvrtc::compile(name, source, arch).map_err(|(log, options)| Error::Compile {
        instance: name.to_string(),
        arch: arch.to_string(),
        source_path: keep_failed_source(name, source),
        options,
        log,
    })?;
    cache.put(&key, &compiled)?;
    Ok(CompileDone {
        key,
        compiled,
        cached: false,
        corrupt,
    })
}

/// Writes a source NVRTC rejected to a fresh temporary file (never a predictable name in a
/// shared folder) and returns its path.
fn keep_failed_source(name: &str, source: &str) -> PathBuf {
    let kept = tempfile::Builder::new()
        .prefix(&format!("tilegen-failed-{name}-"))
        .suffix(".cu")
        .tempfile()
        .and_then(|mut f| {
            use std::io::Write;
            f.write_all(source.as_bytes())?;
            f.keep().map_err(|e| e.error)
        });
    match kept {
        Ok((_, path)) => path,
        Err(_) => PathBuf::from("(the rendered source could not be saved)"),
    }
}

/// Every job's result, or the first failure with the others named in it, so one run reports
/// every instance that does not compile.
fn first_error_of_all<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    let (oks, errs): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
    let mut errs = errs.into_iter().filter_map(|r| r.err());
    match errs.next() {
        None => Ok(oks.into_iter().filter_map(|r| r.ok()).collect()),
        Some(mut first) => {
            let rest: Vec<String> = errs
                .map(|e| match e {
                    Error::Compile { instance, arch, .. } => format!("{instance} ({arch})"),
                    other => other.to_string(),
                })
                .collect();
            if !rest.is_empty() {
                if let Error::Compile { log, .. } = &mut first {
                    log.push_str(&format!(
                        "\n{} more failed: {}",
                        rest.len(),
                        rest.join(", ")
                    ));
                }
            }
            Err(first)
        }
    }
}

fn file_ref(path: String, bytes: &[u8]) -> FileRef {
    FileRef {
        path,
        sha256: sha256_hex(bytes),
        bytes: bytes.len() as u64,
    }
}

/// Builds the full set of library files: sources, binaries, bindings and the manifest.
fn assemble(
    rendered: &Rendered,
    nvrtc_version: &str,
    jobs: &[(usize, Arch)],
    compiled: &[(String, nvrtc::Compiled)],
    bindings: bool,
) -> Result<FileSet> {
    let mut files = FileSet::new();
    let mut entries = Vec::new();
    for (i, inst) in rendered.instances.iter().enumerate() {
        let src_path = format!("kernels/{}.cu", inst.name);
        let src = rendered.sources[i].as_bytes();
        let source = file_ref(src_path.clone(), src);
        files.insert(src_path, src.to_vec());
        let mut targets = Vec::new();
        for ((_, arch), (key, c)) in jobs.iter().zip(compiled).filter(|((j, _), _)| *j == i) {
            let ptx_path = format!("kernels/{}.{}.ptx", inst.name, arch);
            let cubin_path = format!("kernels/{}.{}.cubin", inst.name, arch);
            targets.push(Target {
                arch: *arch,
                cache_key: key.clone(),
                ptx: file_ref(ptx_path.clone(), &c.ptx),
                cubin: file_ref(cubin_path.clone(), &c.cubin),
                resources: c.resources.clone(),
            });
            files.insert(ptx_path, c.ptx.clone());
            files.insert(cubin_path, c.cubin.clone());
        }
        entries.push(InstanceEntry {
            name: inst.name.clone(),
            op: inst.op,
            dtype: inst.dtype,
            out_dtype: inst.out_dtype,
            params: inst.params.clone(),
            epilogue: inst.epilogue.clone(),
            origin: inst.origin.clone(),
            entry_point: inst.entry_point(),
            args: ops::signature(inst),
            launch: ops::launch(inst),
            config_sha256: config_hash(inst),
            source,
            targets,
        });
    }
    let manifest = Manifest {
        format: manifest::FORMAT,
        tilegen_version: crate::VERSION.into(),
        nvrtc_version: nvrtc_version.into(),
        instances: entries,
        files: Vec::new(),
    };
    finish_library(files, manifest, bindings)
}
