//! Spec files: reading, validating and expanding them into kernel instances.
//!
//! A spec file is YAML with optional `defaults` (any kernel field) and a list of `kernels`.
//! Any kernel field given as a list sweeps: one instance per combination. Every problem in
//! every file is collected and reported together, each at its file:line:col.

pub mod model;
mod sweep;
pub mod yaml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::diagnostics::{Diagnostic, Diagnostics, Mark};
use crate::error::Error;
pub use model::*;
pub(crate) use sweep::integer_ceiling;
pub use sweep::MAX_INSTANCES_PER_RUN;

/// Spec files are small; a larger file is a mistake (or an attack).
const MAX_SPEC_BYTES: u64 = 1 << 20;

/// A spec file read from disk, kept for messages.
#[derive(Debug, Clone)]
pub struct SpecSource {
    /// Path shown in messages (as found under the specs folder, or as given).
    pub path: PathBuf,
    /// Path relative to the specs folder, `/`-separated: stable across machines.
    pub rel: String,
    pub text: String,
}

/// Finds the spec files (`*.yaml`, `*.yml`) under `dir`, sorted so results never depend on
/// directory order. A file path is accepted too. Symbolic links are followed (a spec is
/// named by its path under `dir`, not its target's); a link that points nowhere, or back at
/// a folder it is in, is an error rather than skipped.
pub fn find_spec_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    if !dir.is_dir() {
        return Err(Error::Usage(format!(
            "specs folder {} does not exist",
            dir.display()
        )));
    }
    let spec_name =
        |p: &Path| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    let mut files = Vec::new();
    // Hidden entries below the folder are passed over, as version control and editors keep
    // theirs there (`.git`, Emacs' lock links `.#gemm.yaml`).
    let hidden = |name: &std::ffi::OsStr| name.to_string_lossy().starts_with('.');
    let walk = walkdir::WalkDir::new(dir)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !hidden(e.file_name()));
    for entry in walk {
        let entry = match entry {
            Ok(entry) => entry,
            // A link to nothing that would not be read anyway (`notes.txt -> gone`; a lock
            // link, whose error comes before the filter sees it).
            Err(e)
                if e.path().is_some_and(|p| {
                    dangling(p) && (!spec_name(p) || p.file_name().is_some_and(hidden))
                }) =>
            {
                continue
            }
            Err(e) => return Err(walk_error(dir, e)),
        };
        let p = entry.path();
        if entry.file_type().is_file() && spec_name(p) {
            files.push(p.to_path_buf());
        }
    }
    // Most likely a wrong path; generating from nothing would also empty the library.
    if files.is_empty() {
        return Err(Error::Usage(format!(
            "no spec files (*.yaml, *.yml) under {}",
            dir.display()
        )));
    }
    Ok(files)
}

/// A symbolic link whose target does not exist.
fn dangling(p: &Path) -> bool {
    p.symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
        && std::fs::metadata(p).is_err()
}

fn walk_error(dir: &Path, e: walkdir::Error) -> Error {
    let path = e.path().unwrap_or(dir).to_path_buf();
    if let Some(ancestor) = e.loop_ancestor() {
        return Error::Usage(format!(
            "{}: symbolic link loop in the specs folder: it leads back to {}",
            crate::escape::shown_path(&path),
            crate::escape::shown_path(ancestor)
        ));
    }
    let dangling = e
        .io_error()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
        && path.is_symlink();
    match e.into_io_error() {
        Some(io) if dangling => Error::Io {
            path,
            source: std::io::Error::new(io.kind(), "symbolic link to a file that does not exist"),
        },
        Some(io) => Error::Io { path, source: io },
        None => Error::Usage(format!(
            "{}: cannot read the specs folder",
            crate::escape::shown_path(&path)
        )),
    }
}

/// Reads spec files. Unreadable or non-UTF-8 files become diagnostics, not failures, so that
/// every problem is reported in one run.
pub fn read_specs(root: &Path, files: &[PathBuf]) -> Result<(Vec<SpecSource>, Diagnostics), Error> {
    let mut sources = Vec::new();
    let mut diags = Diagnostics::default();
    for path in files {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.len() > MAX_SPEC_BYTES {
            diags.push(Diagnostic::new(
                path,
                Mark { line: 1, col: 1 },
                1,
                format!(
                    "spec file is {} bytes, over the limit of {MAX_SPEC_BYTES}",
                    meta.len()
                ),
            ));
            continue;
        }
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                diags.push(Diagnostic::new(
                    path,
                    Mark { line: 1, col: 1 },
                    1,
                    format!("spec file cannot be read: {e}"),
                ));
                continue;
            }
        };
        let rel = path
            .strip_prefix(root)
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/");
        let rel = if rel.is_empty() {
            path.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            rel
        };
        match String::from_utf8(bytes) {
            Ok(mut text) => {
                // Editors on Windows may start a file with a byte order mark. It takes no
                // column, so positions past it stay right.
                if text.starts_with('\u{feff}') {
                    text.drain(..'\u{feff}'.len_utf8());
                }
                // YAML takes a lone CR as a line break too (old Mac files): made LF, one
                // character for one, so that every position agrees with the parser's.
                if text.contains('\r') {
                    text = lone_cr_to_lf(&text);
                }
                sources.push(SpecSource {
                    path: path.clone(),
                    rel,
                    text,
                })
            }
            Err(e) => {
                let bytes = e.as_bytes();
                let valid = &bytes[..e.utf8_error().valid_up_to()];
                let text = lone_cr_to_lf(&String::from_utf8_lossy(valid));
                let line = text.matches('\n').count() + 1;
                let col = text.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                let shown = lone_cr_to_lf(&String::from_utf8_lossy(bytes));
                diags.push(
                    Diagnostic::new(
                        path,
                        Mark { line, col },
                        1,
                        format!(
                            "spec is not valid UTF-8 (byte 0x{:02x})",
                            bytes[e.utf8_error().valid_up_to()]
                        ),
                    )
                    .with_source(&shown),
                );
            }
        }
    }
    Ok((sources, diags))
}

/// `text` with each CR that does not start a CRLF made LF.
fn lone_cr_to_lf(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(if c == '\r' && chars.peek() != Some(&'\n') {
            '\n'
        } else {
            c
        });
    }
    out
}

/// Parses, validates and expands every spec. Instances come back sorted by name.
///
/// Every file is validated and its sweeps counted before any is expanded: more than
/// [`MAX_INSTANCES_PER_RUN`] instances in all is an error, so time and memory stay within
/// what that many instances need.
pub fn load(sources: &[SpecSource]) -> Result<Vec<Instance>, Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut instances: Vec<Instance> = Vec::new();
    let mut seen: BTreeMap<String, (PathBuf, Mark)> = BTreeMap::new();
    let mut ctxs: Vec<sweep::FileContext> = sources.iter().map(sweep::FileContext::new).collect();
    let mut budget = yaml::MAX_NODES_PER_RUN;
    // Once a file has failed with the run's node budget spent, the files after it are not
    // parsed (each would only fail the same way).
    let mut spent = false;
    let roots: Vec<Option<yaml::Node>> = ctxs
        .iter_mut()
        .map(|c| {
            if spent {
                return None;
            }
            let root = c.parse(&mut budget);
            spent = budget == 0 && c.errors() > 0;
            root
        })
        .collect();
    let plans: Vec<Vec<sweep::KernelPlan>> = ctxs
        .iter_mut()
        .zip(&roots)
        .map(|(ctx, root)| root.as_ref().map(|r| ctx.plan(r)).unwrap_or_default())
        .collect();
    if let Some(too_many) = over_run_bound(sources, &plans) {
        for ctx in ctxs {
            diags.extend(ctx.finish());
        }
        diags.push(too_many);
        return Err(diags.sorted());
    }
    for ((src, mut ctx), file_plans) in sources.iter().zip(ctxs).zip(&plans) {
        let found = file_plans
            .iter()
            .flat_map(|p| ctx.expand(p))
            .collect::<Vec<_>>();
        for (inst, mark) in found {
            if let Some((file, first)) = seen.get(&inst.name) {
                let message = if *file == src.path && *first == mark {
                    format!(
                        "this kernel produces instance `{}` twice (a sweep repeats a value, or \
                         an alias repeats the kernel)",
                        inst.name
                    )
                } else {
                    format!(
                        "instance name `{}` is already produced at {}:{}:{}; rename one of the kernels",
                        inst.name,
                        crate::escape::shown_path(file),
                        first.line,
                        first.col
                    )
                };
                ctx.error_at(mark, inst.name.len(), message);
                continue;
            }
            // Checked here, not only when the bindings are written, so that `check` finds it
            // and the error points at the spec before anything is compiled.
            if crate::bindings::is_reserved(&inst.name) {
                let message = format!(
                    "instance name `{}` is reserved by the bindings (a method of their `Kernels` \
                     type, or a launcher's `run_…` name); rename the kernel",
                    inst.name
                );
                ctx.error_at(mark, inst.name.len(), message);
                continue;
            }
            seen.insert(inst.name.clone(), (src.path.clone(), mark));
            instances.push(inst);
        }
        diags.extend(ctx.finish());
    }
    if !diags.is_empty() {
        return Err(diags.sorted());
    }
    instances.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(instances)
}

/// The error for specs that sweep to more than [`MAX_INSTANCES_PER_RUN`] instances in all,
/// at the kernel entry with the largest sweep; it names each file's share.
fn over_run_bound(sources: &[SpecSource], plans: &[Vec<sweep::KernelPlan>]) -> Option<Diagnostic> {
    let per_file: Vec<usize> = plans
        .iter()
        .map(|p| p.iter().fold(0usize, |acc, k| acc.saturating_add(k.count)))
        .collect();
    let total = per_file
        .iter()
        .fold(0usize, |acc, &n| acc.saturating_add(n));
    if total <= MAX_INSTANCES_PER_RUN {
        return None;
    }
    let (file, largest) = plans
        .iter()
        .enumerate()
        .flat_map(|(f, p)| p.iter().map(move |k| (f, k)))
        .reduce(|best, k| if k.1.count > best.1.count { k } else { best })?;
    let mut shares: Vec<(usize, &SpecSource)> = per_file
        .iter()
        .copied()
        .zip(sources)
        .filter(|(n, _)| *n > 0)
        .collect();
    shares.sort_by_key(|s| std::cmp::Reverse(s.0));
    const SHOWN: usize = 5;
    let mut listed: Vec<String> = shares
        .iter()
        .take(SHOWN)
        .map(|(n, s)| format!("{}: {}", s.path.display(), count_text(*n)))
        .collect();
    if shares.len() > SHOWN {
        listed.push(format!("{} more files", shares.len() - SHOWN));
    }
    let kernels: usize = plans.iter().map(Vec::len).sum();
    let message = format!(
        "the specs sweep to {} instances in all ({kernels} kernel entries; {}), over the limit of \
         {MAX_INSTANCES_PER_RUN} per run; the largest sweep is kernel `{}` here, with {}: \
         narrow the sweeps, or split the specs into several libraries",
        count_text(total),
        listed.join(", "),
        largest.name(),
        count_text(largest.count)
    );
    let src = &sources[file];
    Some(Diagnostic::new(&src.path, largest.mark(), 1, message).with_source(&src.text))
}

/// A count that may have saturated.
fn count_text(n: usize) -> String {
    if n == usize::MAX {
        "too many".to_string()
    } else {
        n.to_string()
    }
}

/// Reads, validates and expands the specs under `dir` in one step.
pub fn load_dir(dir: &Path) -> Result<(Vec<SpecSource>, Vec<Instance>), Error> {
    let files = find_spec_files(dir)?;
    let root = if dir.is_file() {
        dir.parent().unwrap_or(Path::new(""))
    } else {
        dir
    };
    let (sources, mut diags) = read_specs(root, &files)?;
    match load(&sources) {
        Ok(instances) if diags.is_empty() => Ok((sources, instances)),
        Ok(_) => Err(Error::Spec(diags.sorted())),
        Err(more) => {
            diags.extend(more);
            Err(Error::Spec(diags.sorted()))
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn hidden_entries_and_links_to_nothing_that_are_no_specs_are_passed_over() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::create_dir_all(d.join(".git")).unwrap();
        for f in [
            "a.yaml",
            "sub/b.yml",
            ".hidden.yaml",
            ".git/c.yaml",
            "notes.txt",
        ] {
            std::fs::write(d.join(f), "kernels: []\n").unwrap();
        }
        std::os::unix::fs::symlink(d.join("gone"), d.join("todo.txt")).unwrap();
        std::os::unix::fs::symlink("user@host.1234", d.join(".#a.yaml")).unwrap();
        let found = find_spec_files(d).unwrap();
        assert_eq!(found, [d.join("a.yaml"), d.join("sub/b.yml")]);
        // A spec that is a link to nothing is an error: it would have been read.
        std::os::unix::fs::symlink(d.join("gone.yaml"), d.join("z.yaml")).unwrap();
        assert!(find_spec_files(d).is_err());
    }
}
