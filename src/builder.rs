//! The build-script front end: [`Builder`] turns a specs folder into a kernel library under
//! `OUT_DIR` and tells cargo what to watch. It runs the same core as `tilegen generate`. Its
//! user-facing documentation (layout under `OUT_DIR`, cargo conventions) is the crate's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::generate::{self, Event, Options, Report};
use crate::manifest::Manifest;
use crate::spec::Arch;

/// Generates a kernel library from a build script.
///
/// ```no_run
/// // in build.rs's main:
/// tilegen::Builder::new().specs("specs").archs(["sm_80", "sm_90"]).compile();
/// ```
///
/// It needs NVRTC (found as `tilegen doctor` reports) but no GPU. It prints
/// `cargo:rerun-if-changed` for the specs folder and every spec and template it reads, and
/// `cargo:rerun-if-env-changed` for every environment variable it reads; it writes only
/// under `OUT_DIR` (unless [`Builder::out_dir`] is given an absolute path), and only files
/// whose bytes change. Under `DOCS_RS` it compiles nothing: the bindings still compile, and
/// their kernels fail at load time.
#[derive(Debug, Clone)]
pub struct Builder {
    specs: Option<PathBuf>,
    templates: Option<PathBuf>,
    archs: Option<Vec<String>>,
    out_dir: Option<PathBuf>,
    jobs: Option<usize>,
    cache_dir: Option<PathBuf>,
    remote_cache: Option<String>,
    filter: Option<String>,
    bundle: Option<PathBuf>,
    bundle_pubkey: Option<String>,
    tuning: Option<PathBuf>,
    prune_by_tuning: bool,
    emit_rerun: bool,
    install_nvrtc: bool,
}

impl Default for Builder {
    /// The same as [`Builder::new`]: cargo directives on.
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            emit_rerun: true,
            install_nvrtc: false,
            specs: None,
            templates: None,
            archs: None,
            out_dir: None,
            jobs: None,
            cache_dir: None,
            remote_cache: None,
            filter: None,
            bundle: None,
            bundle_pubkey: None,
            tuning: None,
            prune_by_tuning: false,
        }
    }

    /// Specs folder (every `*.yaml` under it) or one spec file; relative to the package
    /// root, where cargo runs build scripts. Default: `specs`.
    pub fn specs(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.specs = Some(path.as_ref().to_path_buf());
        self
    }

    /// Folder of templates that replace the embedded ones of the same file name.
    pub fn templates(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.templates = Some(path.as_ref().to_path_buf());
        self
    }

    /// Compile for these archs (`sm_80`, `sm_90a`, …) instead of each spec's own.
    /// `TILEGEN_ARCHS` in the environment, when set, takes precedence.
    pub fn archs<I, S>(&mut self, archs: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.archs = Some(archs.into_iter().map(|a| a.as_ref().to_string()).collect());
        self
    }

    /// Library folder. Default `$OUT_DIR/tilegen`; a relative path is taken under `OUT_DIR`.
    pub fn out_dir(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.out_dir = Some(path.as_ref().to_path_buf());
        self
    }

    /// Parallel compiles, taken as given. Default: under cargo, the build script's own job plus
    /// the jobserver tokens free when compiling starts, at most `NUM_JOBS`; else one per core.
    pub fn jobs(&mut self, jobs: usize) -> &mut Self {
        self.jobs = Some(jobs);
        self
    }

    /// Compile cache folder. Default: `TILEGEN_CACHE_DIR`, else the user cache folder.
    pub fn cache_dir(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.cache_dir = Some(path.as_ref().to_path_buf());
        self
    }

    /// A shared remote cache behind the local one: `redis://host:port[/db]` or
    /// `s3://bucket[/prefix]` (the `remote-cache` feature). Default: `TILEGEN_CACHE_URL`
    /// when set. Best effort: a remote that fails costs one warning, never the build.
    pub fn remote_cache(&mut self, url: impl Into<String>) -> &mut Self {
        self.remote_cache = Some(url.into());
        self
    }

    /// Only instances whose name contains this text.
    pub fn filter(&mut self, text: impl Into<String>) -> &mut Self {
        self.filter = Some(text.into());
        self
    }

    /// Take the kernels from this prebuilt bundle (`tilegen bundle create`) instead of
    /// compiling: no NVRTC is needed. Default: `TILEGEN_BUNDLE` when set. When specs are
    /// present, only their instances are taken, and the bundle (which may hold more) must
    /// hold each in the same configuration (else an error lists what is missing or differs).
    pub fn bundle(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.bundle = Some(path.as_ref().to_path_buf());
        self
    }

    /// Require the bundle's detached signature (`BUNDLE.minisig`) to verify with this public
    /// key (a `.pub` file or the key itself) before it is used. Default:
    /// `TILEGEN_BUNDLE_PUBKEY` when set.
    pub fn bundle_pubkey(&mut self, key: impl Into<String>) -> &mut Self {
        self.bundle_pubkey = Some(key.into());
        self
    }

    /// Folder of tuning tables (`tilegen tune` writes them) to bake into the bindings' dispatch.
    /// Default: the `tuning` folder beside the specs folder, when there is one.
    pub fn tuning(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.tuning = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Leave out instances of kernels marked `tuning: candidates` that no tuning table names
    /// as a winner (default false: every instance is compiled).
    pub fn prune_by_tuning(&mut self, on: bool) -> &mut Self {
        self.prune_by_tuning = on;
        self
    }

    /// When no NVRTC is found, install the pinned one first, as `tilegen nvrtc install` does
    /// (pip, the wheel's sha256 checked, into the user cache folder), saying so in a
    /// `cargo:warning`. Off by default: a build fetches from the network only when asked.
    pub fn install_nvrtc(&mut self, on: bool) -> &mut Self {
        self.install_nvrtc = on;
        self
    }

    /// Whether to print `cargo:` directives, warnings included (default true; turn off
    /// outside build scripts).
    pub fn emit_rerun_if_changed(&mut self, on: bool) -> &mut Self {
        self.emit_rerun = on;
        self
    }

    /// Generates the library and returns the path of its `bindings.rs`.
    ///
    /// # Panics
    ///
    /// Panics with the full message (every spec error, or the compiler log) when generation
    /// fails: a build script has no better way to report it.
    pub fn compile(&self) -> PathBuf {
        match self.try_compile() {
            Ok(path) => path,
            Err(e) => panic!("tilegen failed:\n{e}"),
        }
    }

    /// Generates the library and returns the path of its `bindings.rs`.
    pub fn try_compile(&self) -> Result<PathBuf> {
        let specs = self.specs.clone().unwrap_or_else(|| PathBuf::from("specs"));
        // Watch the folder itself too, so that a new spec file reruns the build script;
        // printed first so that a failed run still watches it.
        self.rerun_if_changed(&specs)?;
        if let Some(t) = &self.templates {
            self.rerun_if_changed(t)?;
        }
        // The tables' folder too, so that a new table reruns the build script.
        if let Some(t) = &crate::tuning::dir(self.tuning.as_deref(), &specs) {
            self.rerun_if_changed(t)?;
        }
        let result = self.run(&specs);
        // Variables read, whether or not generation succeeded.
        if self.emit_rerun {
            for var in crate::env::read_so_far() {
                println!("cargo:rerun-if-env-changed={var}");
            }
        }
        let (report, bindings) = result?;
        for input in &report.inputs {
            self.rerun_if_changed(input)?;
        }
        Ok(bindings)
    }

    fn run(&self, specs: &Path) -> Result<(Report, PathBuf)> {
        let out_dir = crate::env::var_os("OUT_DIR").map(PathBuf::from);
        let out = match (&self.out_dir, &out_dir) {
            (Some(dir), _) if dir.is_absolute() => dir.clone(),
            (dir, Some(root)) => root.join(dir.as_deref().unwrap_or(Path::new("tilegen"))),
            (_, None) => {
                return Err(Error::Usage(
                    "OUT_DIR is not set: run tilegen::Builder from a build script, or give Builder::out_dir an absolute path"
                        .into(),
                ))
            }
        };
        let docs_rs = crate::env::var_os("DOCS_RS").is_some();
        let mut opts = Options::new(specs, &out);
        opts.templates = self.templates.clone();
        opts.archs = match crate::env::var("TILEGEN_ARCHS")?.filter(|v| !v.trim().is_empty()) {
            Some(list) => Some(parse_archs_var(&list)?),
            None => self.archs.as_ref().map(|a| parse_archs(a)).transpose()?,
        };
        // Held until the compiles are done; dropping them hands the tokens back to cargo.
        let (jobs, _tokens) = match self.jobs {
            Some(j) => (j, Vec::new()),
            None => cargo_jobs(),
        };
        opts.jobs = jobs;
        opts.cache_dir = self.cache_dir.clone();
        opts.remote_cache = self.remote_cache.clone();
        opts.filter = self.filter.clone();
        opts.tuning = self.tuning.clone();
        opts.prune_by_tuning = self.prune_by_tuning;
        opts.bundle = self
            .bundle
            .clone()
            .or_else(|| crate::env::path("TILEGEN_BUNDLE"));
        opts.bundle_pubkey = match &self.bundle_pubkey {
            Some(key) => Some(key.clone()),
            None => crate::env::var("TILEGEN_BUNDLE_PUBKEY")?,
        };
        opts.bindings = true;
        opts.compile = !docs_rs;
        if docs_rs && opts.cache_dir.is_none() {
            // Nothing is compiled, but keep the cache lookup inside the sandbox.
            opts.cache_dir = out_dir.map(|d| d.join("tilegen-cache"));
        }
        let warnings = Warnings::new(self.emit_rerun);
        if self.install_nvrtc && opts.compile && opts.bundle.is_none() && !crate::nvrtc::findable()
        {
            let dir = crate::provision::default_dir().ok_or_else(|| {
                Error::Environment(
                    "Builder::install_nvrtc: no user cache folder is known here (HOME unset)"
                        .into(),
                )
            })?;
            warnings.emit(format!(
                "no NVRTC found: installing the pinned {} into {}",
                crate::nvrtc::PINNED_WHEEL,
                dir.display()
            ));
            crate::provision::install(&dir)?;
        }
        let report = generate::generate(&opts, &|ev| match ev {
            Event::Compiled {
                instance,
                arch,
                warnings: lines,
                ..
            } => {
                for line in lines {
                    warnings.emit(format!("NVRTC, {instance} on {arch}: {line}"));
                }
            }
            Event::CacheCorrupt { message } => {
                warnings.emit(format!("corrupt cache entry rebuilt: {message}"))
            }
            Event::CacheWarning { message } | Event::TuningDropped { message } => {
                warnings.emit(message.clone())
            }
            _ => {}
        })?;
        if opts.compile {
            self.warn_about_kernels(&out, &warnings);
        }
        Ok((report, out.join(crate::bindings::FILE_NAME)))
    }

    /// Spills (from the manifest; NVRTC's warnings come with each compile's event).
    fn warn_about_kernels(&self, out: &Path, warnings: &Warnings) {
        if !self.emit_rerun {
            return;
        }
        let path = out.join(crate::manifest::FILE_NAME);
        let Some(manifest) = std::fs::read(&path)
            .ok()
            .and_then(|b| Manifest::from_bytes(&b).ok())
        else {
            return;
        };
        for inst in &manifest.instances {
            for t in &inst.targets {
                let r = &t.resources;
                if r.spill_store_bytes > 0 || r.spill_load_bytes > 0 {
                    warnings.emit(format!(
                        "{} on {} spills registers to local memory ({} bytes stored, {} loaded)",
                        inst.name, t.arch, r.spill_store_bytes, r.spill_load_bytes
                    ));
                }
            }
        }
    }

    /// Refuses a path with a line break, which would end the directive and start another of
    /// the file name's making. (One that is not UTF-8 goes as its lossy text: cargo then
    /// watches a name that does not exist, and reruns the build script every time.)
    fn rerun_if_changed(&self, path: &Path) -> Result<()> {
        if !self.emit_rerun {
            return Ok(());
        }
        let text = path.to_string_lossy();
        if text.contains(['\n', '\r']) {
            return Err(Error::Usage(format!(
                "{}: a build script cannot watch a path with a line break; rename it",
                crate::escape::shown_path(path)
            )));
        }
        println!("cargo:rerun-if-changed={text}");
        Ok(())
    }
}

fn parse_archs(names: &[String]) -> Result<Vec<Arch>> {
    names
        .iter()
        .map(|n| n.parse::<Arch>().map_err(Error::Usage))
        .collect()
}

/// `TILEGEN_ARCHS`: archs separated by commas or spaces.
fn parse_archs_var(list: &str) -> Result<Vec<Arch>> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|a| !a.is_empty())
        .map(|a| {
            a.parse::<Arch>()
                .map_err(|e| Error::Usage(format!("TILEGEN_ARCHS=`{list}`: {e}")))
        })
        .collect()
}

/// `cargo:warning=` lines, each printed once per run.
struct Warnings {
    seen: Mutex<BTreeSet<String>>,
    on: bool,
}

impl Warnings {
    fn new(on: bool) -> Warnings {
        Warnings {
            seen: Mutex::new(BTreeSet::new()),
            on,
        }
    }

    fn emit(&self, message: String) {
        // A directive is one line: cargo would read the rest as directives of their own.
        let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.insert(line.clone()) && self.on {
            println!("cargo:warning=tilegen: {line}");
        }
    }
}

/// Parallel compiles under cargo: this process's own job, plus the jobserver tokens free now
/// (held by the caller while it compiles), at most `NUM_JOBS` in all. Without a jobserver,
/// `NUM_JOBS` (0, one per core, when unset).
fn cargo_jobs() -> (usize, Vec<jobserver::Acquired>) {
    // Cargo's own variable: a value that is not a number counts as unset.
    let limit: usize = crate::env::var("NUM_JOBS")
        .ok()
        .flatten()
        .and_then(|j| j.parse().ok())
        .unwrap_or(0);
    static CLIENT: OnceLock<Option<jobserver::Client>> = OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        // SAFETY: the descriptors named by cargo's MAKEFLAGS are checked to be a pipe (or the
        // named fifo) before use, and nothing else in this process closes them.
        unsafe { jobserver::Client::from_env_ext(true) }.client.ok()
    });
    let Some(client) = client else {
        return (limit, Vec::new());
    };
    let want = match limit {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let mut tokens = Vec::new();
    while tokens.len() + 1 < want {
        match client.try_acquire() {
            Ok(Some(t)) => tokens.push(t),
            _ => break,
        }
    }
    (tokens.len() + 1, tokens)
}

/// Generates the library of the specs folder `specs` with default settings, for the common
/// build script:
///
/// ```no_run
/// // in build.rs's main:
/// tilegen::compile_specs("specs");
/// ```
///
/// # Panics
///
/// As [`Builder::compile`].
pub fn compile_specs(specs: impl AsRef<Path>) -> PathBuf {
    Builder::new().specs(specs).compile()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arch_is_a_usage_error() {
        assert!(parse_archs(&["sm_80".into(), "sm_90a".into()]).is_ok());
        let e = parse_archs(&["sm_99".into()]).unwrap_err();
        assert!(e.to_string().contains("unknown arch `sm_99`"), "{e}");
    }

    #[test]
    fn archs_from_the_environment() {
        let a = parse_archs_var("sm_80, sm_90a").unwrap();
        assert_eq!(
            a,
            vec!["sm_80".parse().unwrap(), "sm_90a".parse::<Arch>().unwrap()]
        );
        let e = parse_archs_var("sm_80,sm_99").unwrap_err();
        assert!(e.to_string().contains("TILEGEN_ARCHS=`sm_80,sm_99`"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn compiler_warnings_and_one_line_each() {
        let log = "k.cu(3): warning #177-D: variable declared but never used\nptxas info    : Used 32 registers, warnings none\n";
        assert_eq!(
            crate::nvrtc::warnings(log),
            ["k.cu(3): warning #177-D: variable declared but never used"]
        );
        let w = Warnings::new(false);
        w.emit("a\nb".into());
        w.emit("a b".into());
        assert_eq!(w.seen.lock().unwrap().len(), 1);
    }

    #[test]
    fn setters_chain() {
        let mut b = Builder::new();
        b.specs("s")
            .templates("t")
            .archs(["sm_90"])
            .jobs(2)
            .cache_dir("/c")
            .filter("x");
        assert_eq!(b.specs.as_deref(), Some(Path::new("s")));
        assert_eq!(b.archs, Some(vec!["sm_90".to_string()]));
        assert!(b.emit_rerun);
    }
}
