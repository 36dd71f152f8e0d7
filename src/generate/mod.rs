//! The generator core: specs → instances → CUDA C → (cache | NVRTC) → library files.
//! The CLI and the build.rs `Builder` both call [`generate`]; with a bundle it writes the library
//! from the bundle instead of compiling.

mod from_bundle;

use std::collections::BTreeMap;
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
    /// needed. When the specs are present, only their instances are taken from the bundle
    /// (which may hold more), each checked against what the specs render; any mismatch is an
    /// error and nothing is written.
    pub bundle: Option<PathBuf>,
    /// With `bundle`: the public key (a `.pub` file or the key itself) whose signature
    /// `BUNDLE.minisig` must verify before anything in the bundle is read.
    pub bundle_pubkey: Option<String>,
    /// A shared remote cache behind the local one (`redis://…`, `s3://…`); None reads
    /// `TILEGEN_CACHE_URL`. Needs the `remote-cache` feature (else only a warning).
    pub remote_cache: Option<String>,
    /// Folder of tuning tables (`tilegen tune`) to bake into the bindings; None reads the
    /// `tuning` folder beside the specs when there is one.
    pub tuning: Option<PathBuf>,
    /// Leave out instances of kernels marked `tuning: candidates` that no tuning table names
    /// as a winner (every other instance is kept: the fixed rules' fallbacks).
    pub prune_by_tuning: bool,
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
            remote_cache: None,
            tuning: None,
            prune_by_tuning: false,
        }
    }
}

/// Progress events, for a progress bar or `--message-format json`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    Planned {
        instances: usize,
        compiles: usize,
    },
    Compiled {
        instance: String,
        arch: Arch,
        cached: bool,
        /// Where the result came from: `local` or `remote` cache, or `compiled` here.
        source: Source,
        millis: u64,
        /// The compiler's warnings in its log (from the cache too: they were logged when
        /// the kernel was compiled).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    },
    CacheCorrupt {
        message: String,
    },
    /// The cache could not be used or written (a folder that is not a tilegen cache, a full
    /// disk); the run goes on without it. Reported once per run.
    CacheWarning {
        message: String,
    },
    /// A tuning entry that no longer matches the library was dropped.
    TuningDropped {
        message: String,
    },
}

/// Where one compile result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Local,
    Remote,
    Compiled,
}

/// What a run did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Report {
    pub instances: usize,
    pub compiled: usize,
    /// Results from a cache, local or remote.
    pub cache_hits: usize,
    /// Of `cache_hits`, those the remote cache served.
    pub remote_hits: usize,
    pub corrupt_cache_entries: usize,
    /// The remote cache's configuration and this run's counts, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<crate::cache::RemoteSummary>,
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
    /// Spec files read, then template files read, then tuning tables read.
    pub inputs: Vec<PathBuf>,
    /// How many of `inputs` are spec files.
    pub spec_files: usize,
    /// The tuning tables `opts` points at (checked, not yet matched to a library).
    pub tuning: Vec<crate::tuning::TuningTable>,
}

pub fn render_all(opts: &Options) -> Result<Rendered> {
    let (spec_files, mut instances) = spec::load_dir(&opts.specs)?;
    if let Some(f) = &opts.filter {
        let all = instances.len();
        instances.retain(|i| i.name.contains(f.as_str()));
        // Most likely a typo; generating nothing would also empty the library.
        if instances.is_empty() {
            return Err(Error::Usage(format!(
                "filter `{}` matches none of the {all} instances the specs produce \
                 (`tilegen list` shows them)",
                f.escape_debug()
            )));
        }
    }
    // After the filter: `--filter X --arch sm_90` must not fail on an sm_90a-only instance
    // that the filter leaves out.
    if let Some(archs) = &opts.archs {
        // Sorted and without repeats, as a spec's `archs` are (`--arch sm_80,sm_80` must not
        // compile and embed everything twice).
        let mut archs = archs.clone();
        archs.sort();
        archs.dedup();
        if archs.is_empty() {
            // `TILEGEN_ARCHS=","` or `Builder::archs([])`: every instance would compile for
            // nothing and the library hold no binary.
            return Err(Error::Usage(
                "the arch list that replaces the specs' (--arch, TILEGEN_ARCHS or \
                 Builder::archs) is empty; name at least one arch, e.g. sm_90"
                    .into(),
            ));
        }
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
    let (tuning, tables_read) = read_tuning(opts)?;
    // After --arch: the tables' hashes are those of the instances as compiled.
    if opts.prune_by_tuning {
        // Without a tuning folder every candidate would go, and the library's previous
        // kernels with them: one that was not found is a mistake (`--specs` naming a file
        // looks beside the file), not a request. A folder given or found prunes by what it
        // holds, even nothing.
        if crate::tuning::dir(opts.tuning.as_deref(), &opts.specs).is_none() {
            return Err(Error::Usage(format!(
                "--prune-by-tuning keeps a tuning candidate only where a tuning table picks it, \
                 and no table was found (there is no `{}` folder beside `{}`); name the folder \
                 with --tuning DIR",
                crate::tuning::DIR_NAME,
                opts.specs.display()
            )));
        }
        let winners: std::collections::BTreeSet<(&str, &str)> = tuning
            .iter()
            .flat_map(|t| &t.entries)
            .map(|e| (e.instance.as_str(), e.config_sha256.as_str()))
            .collect();
        instances.retain(|i| {
            !(i.tuning_candidate || i.table_only)
                || winners.contains(&(i.name.as_str(), config_hash(i).as_str()))
        });
    }
    let renderer = Renderer::new(opts.templates.as_deref())?;
    let sources = instances
        .iter()
        .map(|i| renderer.render(i))
        .collect::<Result<Vec<_>>>()?;
    let mut inputs: Vec<PathBuf> = spec_files.into_iter().map(|s| s.path).collect();
    let spec_files = inputs.len();
    inputs.extend(renderer.files_read);
    inputs.extend(tables_read);
    Ok(Rendered {
        instances,
        sources,
        inputs,
        spec_files,
        tuning,
    })
}

/// Runs the whole pipeline. Nothing is written unless every instance rendered and compiled.
pub fn generate(opts: &Options, on_event: &(dyn Fn(&Event) + Sync)) -> Result<Report> {
    if let Some(bundle) = &opts.bundle {
        return from_bundle::generate_from_bundle(opts, bundle, on_event);
    }
    let start = Instant::now();
    let mut rendered = render_all(opts)?;
    let nvrtc_version = if opts.compile {
        nvrtc::load()?.version()
    } else {
        "none".to_string()
    };
    // No cache folder known (no HOME) costs the cache, never the build.
    let cache = match &opts.cache_dir {
        Some(d) => Cache::open(d.clone()),
        None => match Cache::default_location() {
            Ok(d) => Cache::open(d),
            Err(e) => Cache::unusable(format!("{e}; compiling without a cache")),
        },
    }
    .with_remote(opts.remote_cache.as_deref());

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
    let remote_hits = AtomicUsize::new(0);
    let corrupt = AtomicUsize::new(0);
    let compile_one = |&(i, arch): &(usize, Arch)| -> Result<(String, nvrtc::Compiled)> {
        let inst = &rendered.instances[i];
        let t = Instant::now();
        let done = compile_cached(
            &cache,
            &nvrtc_version,
            &inst.name,
            &rendered.sources[i],
            arch,
        )
        .map_err(|mut e| {
            // Name the spec entry: `check` may pass a configuration ptxas then refuses.
            if let Error::Compile { log, .. } = &mut e {
                *log = format!(
                    "  spec: {}:{}\n{log}",
                    crate::escape::shown(&inst.origin.file),
                    inst.origin.line
                );
            }
            e
        })?;
        if let Some(message) = done.corrupt {
            corrupt.fetch_add(1, Ordering::Relaxed);
            on_event(&Event::CacheCorrupt { message });
        }
        if let Some(message) = done.warning {
            on_event(&Event::CacheWarning { message });
        }
        if let Some(message) = cache.take_remote_warning() {
            on_event(&Event::CacheWarning { message });
        }
        if done.cached {
            hits.fetch_add(1, Ordering::Relaxed);
        }
        if done.from_remote {
            remote_hits.fetch_add(1, Ordering::Relaxed);
        }
        on_event(&Event::Compiled {
            instance: inst.name.clone(),
            arch,
            cached: done.cached,
            source: match (done.cached, done.from_remote) {
                (_, true) => Source::Remote,
                (true, false) => Source::Local,
                (false, false) => Source::Compiled,
            },
            millis: if done.cached {
                0
            } else {
                t.elapsed().as_millis() as u64
            },
            warnings: nvrtc::warnings(&done.compiled.log),
        });
        Ok((done.key, done.compiled))
    };
    let results = in_parallel(&jobs, opts.jobs, compile_one);
    let compiled = first_error_of_all(results)?;

    let (files, mut manifest) = assemble(&rendered, &nvrtc_version, &jobs, &compiled)?;
    let (tuning, dropped) = crate::tuning::attach(std::mem::take(&mut rendered.tuning), &manifest);
    manifest.tuning = tuning;
    for message in dropped {
        on_event(&Event::TuningDropped { message });
    }
    let files = finish_library(files, manifest, opts.bindings)?;
    let mut report = Report {
        instances: rendered.instances.len(),
        compiled: jobs.len() - hits.load(Ordering::Relaxed),
        cache_hits: hits.load(Ordering::Relaxed),
        remote_hits: remote_hits.load(Ordering::Relaxed),
        corrupt_cache_entries: corrupt.load(Ordering::Relaxed),
        remote: cache.remote_summary(),
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
/// there (`against` says what the folder is out of date with). The files are bytes, or
/// staged files of a bundle (see [`output::Content`]).
pub(crate) fn write_or_check<C: output::AsContent>(
    opts: &Options,
    files: &BTreeMap<String, C>,
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
        report.unchanged = files.len();
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
    /// Of those, served by the remote cache.
    pub from_remote: bool,
    /// A corrupt entry found (and removed) on the way, to report.
    pub corrupt: Option<String>,
    /// The cache could not be used or written (once per run), to report.
    pub warning: Option<String>,
}

/// Compiles one instance's source for one arch, through the cache: an intact entry is used,
/// a corrupt or unreadable one is replaced, a new result is published for other processes.
/// While one process compiles a key, others wanting it wait on its lock and then take the
/// entry it published. A cache that cannot be used or written costs only a warning.
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
    let mut warning = cache.unusable_warning();
    let mut corrupt = None;
    let mut lock: Option<crate::cache::KeyLock> = None;
    for attempt in 0..2 {
        // After the wait, only this machine's entries can be new: the remote was asked.
        let lookup = match attempt {
            0 => cache.get(&key),
            _ => cache.get_local(&key),
        };
        let (found, from_remote) = match lookup {
            Lookup::Hit(c) => (Some(c), false),
            Lookup::RemoteHit(c) => (Some(c), true),
            Lookup::Corrupt(message) => {
                corrupt = corrupt.or(Some(message));
                (None, false)
            }
            Lookup::Miss => (None, false),
        };
        if let Some(compiled) = found {
            // Found after waiting for the lock: the entry is published, so the lock file can
            // go (as its compiler would have removed it).
            if let Some(l) = lock {
                l.published();
            }
            return Ok(CompileDone {
                key,
                compiled,
                cached: true,
                from_remote,
                corrupt,
                warning,
            });
        }
        if attempt == 0 {
            // Another process may be compiling this key: wait for it, then look again.
            lock = cache.lock(&key);
            if lock.is_none() {
                break;
            }
        }
    }
    let compiled = nvrtc::compile(name, source, arch).map_err(|e| match e {
        nvrtc::CompileError::Broken(message) => Error::Environment(message),
        nvrtc::CompileError::Rejected { log, options } => Error::Compile {
            instance: name.to_string(),
            arch: arch.to_string(),
            source_path: keep_failed_source(name, arch, source),
            options,
            log,
        },
    })?;
    match cache.put(&key, &compiled) {
        Ok(()) => {
            if let Some(l) = lock {
                l.published();
            }
        }
        Err(e) => {
            warning = warning.or_else(|| {
                cache.warn_once(format!(
                    "cannot write to the cache ({e}); compiled kernels are used without caching"
                ))
            })
        }
    }
    Ok(CompileDone {
        key,
        compiled,
        cached: false,
        from_remote: false,
        corrupt,
        warning,
    })
}

/// How many runs' failed sources are kept in the temporary folder.
const KEEP_FAILED_RUNS: usize = 8;

/// This process's folder of sources NVRTC rejected, made on the first failure.
static FAILED_RUN_DIR: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Writes a source NVRTC rejected into this run's folder, `tilegen-failed-XXXXXX` in the
/// system temporary folder (a fresh private name, never a predictable one in a shared folder),
/// and returns its path. Making that folder removes the folders of all but the latest runs.
fn keep_failed_source(name: &str, arch: Arch, source: &str) -> PathBuf {
    let file: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    let kept = (|| -> std::io::Result<PathBuf> {
        let mut run = FAILED_RUN_DIR.lock().unwrap_or_else(|p| p.into_inner());
        let dir = match run.as_ref().filter(|d| d.is_dir()) {
            Some(d) => d.clone(),
            None => {
                let parent = std::env::temp_dir();
                prune_failed_runs(&parent, KEEP_FAILED_RUNS - 1);
                let d = tempfile::Builder::new()
                    .prefix("tilegen-failed-")
                    .rand_bytes(6)
                    .tempdir_in(&parent)?
                    .keep();
                *run = Some(d.clone());
                d
            }
        };
        let path = dir.join(format!("{file}.{arch}.cu"));
        std::fs::write(&path, source)?;
        Ok(path)
    })();
    kept.unwrap_or_else(|_| PathBuf::from("(the rendered source could not be saved)"))
}

/// Removes this user's failed-source folders in `parent` but the `keep` newest, and loose
/// `tilegen-failed-*.cu` files older tilegens wrote there. Only names of that form, owned by
/// this user, and inside a folder only its `.cu` files.
fn prune_failed_runs(parent: &std::path::Path, keep: usize) {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut runs = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("tilegen-failed-") else {
            continue;
        };
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if m.uid() != me {
            continue;
        }
        if m.is_dir() && rest.len() == 6 && rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
            runs.push((m.modified().ok(), e.path()));
        } else if m.is_file() && name.ends_with(".cu") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    runs.sort();
    let old = runs.len().saturating_sub(keep);
    for (_, dir) in runs.into_iter().take(old) {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for f in rd.filter_map(|e| e.ok()).map(|e| e.path()) {
                let is_cu = f.extension().is_some_and(|x| x == "cu");
                if is_cu && std::fs::symlink_metadata(&f).is_ok_and(|m| m.is_file()) {
                    let _ = std::fs::remove_file(&f);
                }
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Every job's result, or the first failure with the others named in it, so one run reports
/// every instance that does not compile.
/// `f` over every item on `jobs` threads (0: one per core), results in the items' order:
/// each thread takes the next unclaimed item, so a slow compile never holds up the others.
fn in_parallel<I: Sync, T: Send>(items: &[I], jobs: usize, f: impl Fn(&I) -> T + Sync) -> Vec<T> {
    let threads = match jobs {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<T>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let out = f(item);
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item is taken by one thread")
        })
        .collect()
}

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
) -> Result<(FileSet, Manifest)> {
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
            kernel: inst.kernel.clone(),
            origin: inst.origin.clone(),
            entry_point: inst.entry_point(),
            args: ops::signature(inst),
            tensor_maps: ops::tensor_maps(inst),
            launch: ops::launch(inst),
            table_only: inst.table_only,
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
        tuning: Vec::new(),
    };
    Ok((files, manifest))
}

/// The tuning tables `opts` asks for (none without a folder), and the files read.
fn read_tuning(opts: &Options) -> Result<(Vec<crate::tuning::TuningTable>, Vec<PathBuf>)> {
    match crate::tuning::dir(opts.tuning.as_deref(), &opts.specs) {
        Some(dir) => crate::tuning::load_dir(&dir),
        None => Ok((Vec::new(), Vec::new())),
    }
}
