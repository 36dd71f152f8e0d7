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
/// directory order. A file path is accepted too.
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
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(|e| Error::io(dir, e.into()))?;
        let p = entry.path();
        if entry.file_type().is_file()
            && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        {
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
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
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
            Ok(text) => sources.push(SpecSource {
                path: path.clone(),
                rel,
                text,
            }),
            Err(e) => {
                let bytes = e.as_bytes();
                let valid = &bytes[..e.utf8_error().valid_up_to()];
                let text = String::from_utf8_lossy(valid);
                let line = text.matches('\n').count() + 1;
                let col = text.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                let shown = String::from_utf8_lossy(bytes).into_owned();
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

/// Parses, validates and expands every spec. Instances come back sorted by name.
pub fn load(sources: &[SpecSource]) -> Result<Vec<Instance>, Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut instances: Vec<Instance> = Vec::new();
    let mut seen: BTreeMap<String, (PathBuf, Mark)> = BTreeMap::new();
    for src in sources {
        let mut ctx = sweep::FileContext::new(src);
        let found = ctx.expand();
        for (inst, mark) in found {
            if let Some((file, first)) = seen.get(&inst.name) {
                let message = if *file == src.path && *first == mark {
                    format!("this kernel produces instance `{}` twice", inst.name)
                } else {
                    format!(
                        "instance name `{}` is already produced at {}:{}:{}; rename one of the kernels",
                        inst.name,
                        file.display(),
                        first.line,
                        first.col
                    )
                };
                ctx.error_at(mark, inst.name.len(), message);
                continue;
            }
            seen.insert(inst.name.clone(), (src.path.clone(), mark));
            instances.push(inst);
        }
        diags.extend(ctx.diags);
    }
    if !diags.is_empty() {
        return Err(diags.sorted());
    }
    instances.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(instances)
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
