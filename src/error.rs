//! Library errors. Every I/O error names its path; spec errors carry all diagnostics; each
//! kind maps to its own process exit code.

use std::path::{Path, PathBuf};

use crate::diagnostics::Diagnostics;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command-line use or configuration (missing folder, bad option).
    #[error("{0}")]
    Usage(String),

    /// Problems in the specs, all of them.
    #[error("{0}")]
    Spec(Diagnostics),

    /// A template failed to render (a bug in a template, or a bad override).
    #[error("template error in {template} for {instance}: {message}")]
    Template {
        template: String,
        instance: String,
        message: String,
    },

    /// NVRTC rejected a kernel.
    #[error("NVRTC failed to compile {instance} for {arch}\n  source: {source_path}\n  options: {options}\n{log}")]
    Compile {
        instance: String,
        arch: String,
        source_path: PathBuf,
        options: String,
        log: String,
    },

    /// The compiler (or GPU driver) could not be found or loaded.
    #[error("{0}")]
    Environment(String),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// `--check` found output that differs from what would be written.
    #[error("{0}")]
    OutOfDate(String),

    /// A GPU run failed (verification mismatch, launch failure).
    #[error("{0}")]
    Gpu(String),

    /// A bundle that is corrupt, hostile or not a tilegen bundle; the message names the
    /// member and what is wrong.
    #[error("{path}: bad bundle: {message}")]
    Bundle { path: PathBuf, message: String },
}

impl Error {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Process exit code for this kind of failure (documented in the README).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::OutOfDate(_) | Error::Gpu(_) => 1,
            Error::Usage(_) => 2,
            Error::Spec(_) => 3,
            Error::Template { .. } | Error::Compile { .. } => 4,
            Error::Io { .. } => 5,
            Error::Environment(_) => 6,
            Error::Bundle { .. } => 7,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches a path to I/O results.
pub trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
