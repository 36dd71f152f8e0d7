//! The build-script front end: [`Builder`] turns a specs folder into a kernel library under
//! `OUT_DIR` and tells cargo what to watch. It runs the same core as `tilegen generate`.
//!
//! # Layout under `OUT_DIR`
//!
//! ```text
//! $OUT_DIR/tilegen/            the library (Builder::out_dir changes it)
//!     bindings.rs              include! this
//!     manifest.json            every instance, its signature, launch rule and files
//!     kernels/<name>.cu        rendered CUDA C
//!     kernels/<name>.<arch>.ptx, kernels/<name>.<arch>.cubin
//! ```
//!
//! Compiled kernels are also kept in the shared compile cache (`TILEGEN_CACHE_DIR`, else the
//! user cache folder), so a clean build recompiles nothing that was compiled before.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::generate::{self, Options, Report};
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
    filter: Option<String>,
    bundle: Option<PathBuf>,
    bundle_pubkey: Option<String>,
    emit_rerun: bool,
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
            specs: None,
            templates: None,
            archs: None,
            out_dir: None,
            jobs: None,
            cache_dir: None,
            filter: None,
            bundle: None,
            bundle_pubkey: None,
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

    /// Parallel compiles. Default: cargo's `NUM_JOBS`, else one per core.
    pub fn jobs(&mut self, jobs: usize) -> &mut Self {
        self.jobs = Some(jobs);
        self
    }

    /// Compile cache folder. Default: `TILEGEN_CACHE_DIR`, else the user cache folder.
    pub fn cache_dir(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.cache_dir = Some(path.as_ref().to_path_buf());
        self
    }

    /// Only instances whose name contains this text.
    pub fn filter(&mut self, text: impl Into<String>) -> &mut Self {
        self.filter = Some(text.into());
        self
    }

    /// Take the kernels from this prebuilt bundle (`tilegen bundle create`) instead of
    /// compiling: no NVRTC is needed. Default: `TILEGEN_BUNDLE` when set. Specs that are
    /// present must match the bundle (else an error lists the differences).
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

    /// Whether to print `cargo:` directives (default true; turn off outside build scripts).
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
        self.rerun_if_changed(&specs);
        if let Some(t) = &self.templates {
            self.rerun_if_changed(t);
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
            self.rerun_if_changed(input);
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
        opts.archs = self.archs.as_ref().map(|a| parse_archs(a)).transpose()?;
        opts.jobs = self.jobs.unwrap_or_else(|| {
            crate::env::var("NUM_JOBS")
                .and_then(|j| j.parse().ok())
                .unwrap_or(0)
        });
        opts.cache_dir = self.cache_dir.clone();
        opts.filter = self.filter.clone();
        opts.bundle = self
            .bundle
            .clone()
            .or_else(|| crate::env::var_os("TILEGEN_BUNDLE").map(PathBuf::from));
        opts.bundle_pubkey = self
            .bundle_pubkey
            .clone()
            .or_else(|| crate::env::var("TILEGEN_BUNDLE_PUBKEY"));
        opts.bindings = true;
        opts.compile = !docs_rs;
        if docs_rs && opts.cache_dir.is_none() {
            // Nothing is compiled, but keep the cache lookup inside the sandbox.
            opts.cache_dir = out_dir.map(|d| d.join("tilegen-cache"));
        }
        let report = generate::generate(&opts, &|_| {})?;
        Ok((report, out.join(crate::bindings::FILE_NAME)))
    }

    fn rerun_if_changed(&self, path: &Path) {
        if self.emit_rerun {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn parse_archs(names: &[String]) -> Result<Vec<Arch>> {
    names
        .iter()
        .map(|n| n.parse::<Arch>().map_err(Error::Usage))
        .collect()
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
