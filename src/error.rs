//! Library errors. Every I/O error names its path; spec errors carry all diagnostics; each
//! kind maps to its own process exit code.

use std::path::{Path, PathBuf};

use crate::diagnostics::Diagnostics;
use crate::escape::shown_path;

#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Bad command-line use or configuration (missing folder, bad option).
    Usage(String),

    /// Problems in the specs, all of them.
    Spec(Diagnostics),

    /// A template failed to render (a bug in a template, or a bad override).
    Template {
        template: String,
        instance: String,
        message: String,
    },

    /// NVRTC rejected a kernel.
    Compile {
        instance: String,
        arch: String,
        source_path: PathBuf,
        options: String,
        log: String,
    },

    /// The compiler (or GPU driver) could not be found or loaded.
    Environment(String),

    /// Reading or writing `path` failed.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    /// `--check` found output that differs from what would be written.
    OutOfDate(String),

    /// A GPU run failed (verification mismatch, launch failure).
    Gpu(String),

    /// A bundle that is corrupt, hostile or not a tilegen bundle; the message names the
    /// member and what is wrong.
    Bundle { path: PathBuf, message: String },

    /// A file tilegen reads as untrusted input, other than a spec or a bundle (a tuning
    /// table, a `--shapes` file, a library's `manifest.json`, a secret key), is malformed or
    /// hostile. `message` is the whole report and names `path` (and the line where known).
    Input { path: PathBuf, message: String },

    /// A bug in tilegen: something its own checks should guarantee does not hold.
    Internal(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(m)
            | Error::Environment(m)
            | Error::OutOfDate(m)
            | Error::Gpu(m) => f.write_str(m),
            Error::Spec(d) => write!(f, "{d}"),
            Error::Template {
                template,
                instance,
                message,
            } => write!(f, "template error in {template} for {instance}: {message}"),
            Error::Compile {
                instance,
                arch,
                source_path,
                options,
                log,
            } => write!(
                f,
                "NVRTC failed to compile {instance} for {arch}\n  source: {}\n  options: {options}\n{log}",
                shown_path(source_path)
            ),
            Error::Io { path, source } => write!(f, "{}: {source}", shown_path(path)),
            Error::Bundle { path, message } => {
                write!(f, "{}: bad bundle: {message}", shown_path(path))
            }
            Error::Input { message, .. } => f.write_str(message),
            Error::Internal(m) => write!(
                f,
                "internal error (a bug in tilegen {}; please report it with the command that \
                 led here): {m}",
                crate::VERSION
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// An untrusted file at `path` is malformed; `message` names the path.
    pub fn input(path: &Path, message: impl Into<String>) -> Self {
        Error::Input {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    /// A broken invariant of tilegen itself.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(message.into())
    }

    /// Process exit code for this kind of failure (documented in the README).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::OutOfDate(_) | Error::Gpu(_) => 1,
            // Malformed input files always exited as usage errors; that stays.
            Error::Usage(_) | Error::Input { .. } => 2,
            Error::Spec(_) => 3,
            Error::Template { .. } | Error::Compile { .. } => 4,
            Error::Io { .. } => 5,
            Error::Environment(_) => 6,
            Error::Bundle { .. } => 7,
            Error::Internal(_) => 8,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_error_asks_for_a_report_and_has_its_own_exit_code() {
        let e = Error::internal("bindings: generated code does not parse");
        let text = e.to_string();
        assert!(
            text.starts_with("internal error (a bug in tilegen "),
            "{text}"
        );
        assert!(text.contains("please report it"), "{text}");
        assert!(
            text.ends_with(": bindings: generated code does not parse"),
            "{text}"
        );
        assert_eq!(e.exit_code(), 8);
        // No other kind shares the code.
        for other in [
            Error::Usage(String::new()),
            Error::input(Path::new("t.json"), "t.json: bad"),
            Error::OutOfDate(String::new()),
            Error::Environment(String::new()),
        ] {
            assert_ne!(other.exit_code(), 8, "{other:?}");
        }
    }

    #[test]
    fn input_error_shows_its_message_as_is_and_exits_as_before() {
        let e = Error::input(
            Path::new("tuning/x.json"),
            "tuning table tuning/x.json: empty",
        );
        assert_eq!(e.to_string(), "tuning table tuning/x.json: empty");
        assert!(matches!(&e, Error::Input { path, .. } if path == Path::new("tuning/x.json")));
        assert_eq!(e.exit_code(), 2);
    }
}
