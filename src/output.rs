//! Writing a library folder: only files whose bytes change, each replaced atomically, the
//! manifest last; files an older manifest listed that are no longer produced are removed.
//! `check` compares instead of writing.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::manifest::{self, Manifest};

/// What writing (or checking) a library did.
#[derive(Debug, Default, Clone)]
pub struct WriteReport {
    pub written: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    pub unchanged: usize,
}

/// Files of a library: relative path (`/`-separated) → bytes. The manifest is one of them.
pub type FileSet = BTreeMap<String, Vec<u8>>;

/// Writes `bytes` to `path` unless it already holds exactly them. Returns whether it wrote.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).at(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".tilegen-")
        .tempfile_in(dir)
        .at(dir)?;
    tmp.write_all(bytes).at(tmp.path())?;
    // Temporary files are private (0600); what we publish keeps the mode of the file it
    // replaces, else gets the usual 0644.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(path)
            .map(|m| m.permissions())
            .unwrap_or_else(|_| fs::Permissions::from_mode(0o644));
        tmp.as_file().set_permissions(mode).at(tmp.path())?;
    }
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(true)
}

fn previous_files(dir: &Path) -> Vec<String> {
    fs::read(dir.join(manifest::FILE_NAME))
        .ok()
        .and_then(|b| Manifest::from_bytes(&b).ok())
        .map(|m| m.files)
        .unwrap_or_default()
}

/// Only plain relative paths inside the library may be removed (an edited manifest must not
/// make tilegen delete files elsewhere).
fn is_safe_relative(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty()
        && path.is_relative()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

pub fn write_library(dir: &Path, files: &FileSet) -> Result<WriteReport> {
    let mut report = WriteReport::default();
    let stale: Vec<String> = previous_files(dir)
        .into_iter()
        .filter(|f| !files.contains_key(f) && is_safe_relative(f))
        .collect();
    // Manifest last, so an interrupted run leaves a manifest that never names missing files
    // of its own generation.
    let ordered = files
        .iter()
        .filter(|(k, _)| k.as_str() != manifest::FILE_NAME)
        .chain(files.get_key_value(manifest::FILE_NAME));
    for (rel, bytes) in ordered {
        let path = dir.join(rel);
        if write_if_changed(&path, bytes)? {
            report.written.push(path);
        } else {
            report.unchanged += 1;
        }
    }
    for rel in stale {
        let path = dir.join(&rel);
        if path.is_file() {
            fs::remove_file(&path).at(&path)?;
            report.removed.push(path.clone());
            // Drop folders left empty, up to the library root.
            let mut parent = path.parent();
            while let Some(p) = parent {
                if p == dir || fs::remove_dir(p).is_err() {
                    break;
                }
                parent = p.parent();
            }
        }
    }
    Ok(report)
}

/// Differences between the folder and what would be written, one line each.
pub fn check_library(dir: &Path, files: &FileSet) -> Vec<String> {
    let mut diffs = Vec::new();
    for (rel, bytes) in files {
        match fs::read(dir.join(rel)) {
            Ok(old) if &old == bytes => {}
            Ok(_) => diffs.push(format!("differs: {rel}")),
            Err(_) => diffs.push(format!("missing: {rel}")),
        }
    }
    for rel in previous_files(dir) {
        if !files.contains_key(&rel) && dir.join(&rel).is_file() {
            diffs.push(format!("stale: {rel}"));
        }
    }
    diffs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_changed_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = FileSet::new();
        files.insert("a.txt".into(), b"one".to_vec());
        files.insert("sub/b.txt".into(), b"two".to_vec());
        let r = write_library(dir.path(), &files).unwrap();
        assert_eq!(r.written.len(), 2);
        let r = write_library(dir.path(), &files).unwrap();
        assert!(r.written.is_empty());
        assert_eq!(r.unchanged, 2);
        assert!(check_library(dir.path(), &files).is_empty());
        files.insert("a.txt".into(), b"uno".to_vec());
        assert_eq!(
            check_library(dir.path(), &files),
            vec!["differs: a.txt".to_string()]
        );
    }

    #[test]
    fn unsafe_paths_are_never_removed() {
        for p in ["../x", "/etc/passwd", "a/../../b", ""] {
            assert!(!is_safe_relative(p), "{p}");
        }
        assert!(is_safe_relative("kernels/a.cu"));
    }
}
