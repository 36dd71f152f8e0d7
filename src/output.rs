//! Writing a library folder: only files whose bytes change, each replaced atomically, in an
//! order that never lets a reader see a file naming one that is not there yet (kernels, then
//! `bindings.rs`, `manifest.json` last); files an older manifest listed that are no longer
//! produced are removed, and so are temporary files a killed run left. `check` compares
//! instead of writing.

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

/// Name prefix of the temporary file each write goes through before its atomic rename.
pub const TEMP_PREFIX: &str = ".tilegen-";

/// A lock on a library folder (flock on the folder itself, so nothing is added to it): one
/// writer at a time, and readers (`--check`) wait for a writer to finish. Released on drop.
pub struct LibraryLock {
    held: bool,
    _dir: Option<fs::File>,
}

impl LibraryLock {
    /// Whether the lock is held (false where the platform or file system has no locks).
    pub fn held(&self) -> bool {
        self.held
    }
}

/// Locks `dir`, exclusively for a writer or shared for a reader; waits for the other side.
/// A folder that does not exist, or a file system without locks, gives an unheld lock.
pub fn lock_library(dir: &Path, exclusive: bool) -> LibraryLock {
    let Ok(file) = fs::File::open(dir) else {
        return LibraryLock {
            held: false,
            _dir: None,
        };
    };
    #[cfg(unix)]
    let held = {
        use std::os::unix::io::AsRawFd;
        let op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        loop {
            // SAFETY: flock on a descriptor we own, kept open for as long as the lock.
            if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
                break true;
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break false;
            }
        }
    };
    #[cfg(not(unix))]
    let held = {
        let _ = exclusive;
        false
    };
    LibraryLock {
        held,
        _dir: Some(file),
    }
}

/// Temporary files (`.tilegen-*`) in the folders a library writes into (its root and the
/// folder of every file in `files`), as library paths. Under the library's lock none can
/// belong to a live writer: each is what a killed run left.
pub fn temp_files<'a>(dir: &Path, files: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut folders = std::collections::BTreeSet::from([String::new()]);
    for rel in files {
        if is_safe_relative(rel) {
            if let Some((parent, _)) = rel.rsplit_once('/') {
                folders.insert(parent.to_string());
            }
        }
    }
    let mut out = Vec::new();
    for folder in folders {
        let Ok(entries) = fs::read_dir(dir.join(&folder)) else {
            continue;
        };
        let mut found: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|name| name.starts_with(TEMP_PREFIX))
            .map(|name| {
                if folder.is_empty() {
                    name
                } else {
                    format!("{folder}/{name}")
                }
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// Writes `bytes` to `path` unless it already holds exactly them. Returns whether it wrote.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).at(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
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

/// The order files are published in: everything else first, then `bindings.rs` (which
/// embeds them), then `manifest.json` (which lists them all), so a failure or a kill part way
/// leaves no bindings or manifest of the new run that names a file not yet written.
pub fn publication_order(rel: &str) -> u8 {
    if rel == manifest::FILE_NAME {
        2
    } else if rel == crate::bindings::FILE_NAME {
        1
    } else {
        0
    }
}

pub fn write_library(dir: &Path, files: &FileSet) -> Result<WriteReport> {
    let mut report = WriteReport::default();
    fs::create_dir_all(dir).at(dir)?;
    let lock = lock_library(dir, true);
    let previous = previous_files(dir);
    let stale: Vec<String> = previous
        .iter()
        .filter(|f| !files.contains_key(*f) && is_safe_relative(f))
        .cloned()
        .collect();
    // Without the lock another writer's temporary files could be live: leave them.
    if lock.held() {
        let all = files.keys().chain(&previous).map(String::as_str);
        for rel in temp_files(dir, all) {
            let path = dir.join(&rel);
            fs::remove_file(&path).at(&path)?;
            report.removed.push(path);
        }
    }
    let mut ordered: Vec<(&String, &Vec<u8>)> = files.iter().collect();
    ordered.sort_by_key(|(rel, _)| publication_order(rel));
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
    let _lock = lock_library(dir, false);
    let mut diffs = Vec::new();
    for (rel, bytes) in files {
        match fs::read(dir.join(rel)) {
            Ok(old) if &old == bytes => {}
            Ok(_) => diffs.push(format!("differs: {rel}")),
            Err(_) => diffs.push(format!("missing: {rel}")),
        }
    }
    let previous = previous_files(dir);
    for rel in &previous {
        if !files.contains_key(rel) && dir.join(rel).is_file() {
            diffs.push(format!("stale: {rel}"));
        }
    }
    let all = files.keys().chain(&previous).map(String::as_str);
    for rel in temp_files(dir, all) {
        diffs.push(format!("temporary file left by an interrupted run: {rel}"));
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
    fn kernels_are_published_before_bindings_and_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = FileSet::new();
        files.insert("bindings.rs".into(), b"new bindings".to_vec());
        files.insert("kernels/a.cu".into(), b"a".to_vec());
        files.insert("manifest.json".into(), b"{}".to_vec());
        // A folder where a kernel goes: its write fails.
        fs::create_dir_all(dir.path().join("kernels/a.cu")).unwrap();
        fs::write(dir.path().join("bindings.rs"), b"old bindings").unwrap();
        assert!(write_library(dir.path(), &files).is_err());
        assert_eq!(
            fs::read(dir.path().join("bindings.rs")).unwrap(),
            b"old bindings"
        );
        assert!(!dir.path().join("manifest.json").exists());
    }

    #[test]
    fn leftover_temporary_files_are_reported_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = FileSet::new();
        files.insert("kernels/a.cu".into(), b"a".to_vec());
        write_library(dir.path(), &files).unwrap();
        fs::write(dir.path().join("kernels/.tilegen-Ab12Cd"), b"half").unwrap();
        fs::write(dir.path().join(".tilegen-Zz99Yy"), b"half").unwrap();
        assert_eq!(
            check_library(dir.path(), &files),
            vec![
                "temporary file left by an interrupted run: .tilegen-Zz99Yy".to_string(),
                "temporary file left by an interrupted run: kernels/.tilegen-Ab12Cd".to_string(),
            ]
        );
        let r = write_library(dir.path(), &files).unwrap();
        assert_eq!(r.removed.len(), 2);
        assert!(check_library(dir.path(), &files).is_empty());
    }

    #[test]
    fn unsafe_paths_are_never_removed() {
        for p in ["../x", "/etc/passwd", "a/../../b", ""] {
            assert!(!is_safe_relative(p), "{p}");
        }
        assert!(is_safe_relative("kernels/a.cu"));
    }
}
