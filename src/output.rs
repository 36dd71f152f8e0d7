//! Writing a library folder: only files whose bytes change, each replaced atomically, in an
//! order that never lets a reader see a new file naming one that is not written yet (kernels,
//! then `bindings.rs`, `manifest.json` last). Files an older manifest listed that are no
//! longer produced are removed just before the new manifest replaces it, so that a run killed
//! in between leaves them listed (and the next run removes them) rather than orphaned; a
//! reader that does not take the folder's lock may meanwhile see the old manifest name a file
//! that is gone. Temporary files a killed run left are removed too. `check` compares
//! instead of writing. A file's bytes come from memory (what `generate` built) or from a
//! staged file on disk (a verified bundle member), which is moved into place and compared a
//! buffer at a time, so a large member is never held in memory.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, Write};
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

/// Where a library file's bytes are when it is written.
#[derive(Debug, Clone, Copy)]
pub enum Content<'a> {
    Bytes(&'a [u8]),
    /// A staged file this run owns: renamed into the library when it can be (and so used
    /// up), else copied.
    File(&'a Path),
}

/// What the writer takes as a file's content: bytes ([`FileSet`]) or a [`Content`].
pub trait AsContent {
    fn content(&self) -> Content<'_>;
}

impl AsContent for Vec<u8> {
    fn content(&self) -> Content<'_> {
        Content::Bytes(self)
    }
}

impl AsContent for Content<'_> {
    fn content(&self) -> Content<'_> {
        *self
    }
}

impl Content<'_> {
    /// Whether the file at `path` holds exactly these bytes (an error when it cannot be read;
    /// anything but a regular file differs, and is read no further than these bytes' length).
    fn is_in(&self, path: &Path) -> std::io::Result<bool> {
        match *self {
            Content::Bytes(bytes) => match crate::input::read_regular(path, bytes.len() as u64) {
                Ok(old) => Ok(old.as_deref() == Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Ok(false),
                Err(e) => Err(e),
            },
            Content::File(staged) => same_file_contents(staged, path),
        }
    }
}

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
        if let Some((parent, _)) = rel.rsplit_once('/') {
            // Only real folders inside the library (no link leads outside it).
            let real = is_safe_relative(parent)
                && fs::symlink_metadata(dir.join(parent)).is_ok_and(|m| m.is_dir())
                && !Path::new(parent).ancestors().skip(1).any(|a| {
                    !a.as_os_str().is_empty()
                        && fs::symlink_metadata(dir.join(a)).is_ok_and(|m| !m.is_dir())
                });
            if real {
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
    publish(path, Content::Bytes(bytes))
}

/// Replaces whatever is at `path` with `bytes` in one rename, without reading it first (it
/// may be anything a hostile folder holds: a fifo, a link).
pub fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, Content::Bytes(bytes))
}

/// Puts `content` at `path` unless it already holds exactly that. Returns whether it wrote.
fn publish(path: &Path, content: Content<'_>) -> Result<bool> {
    if content.is_in(path).unwrap_or(false) {
        return Ok(false);
    }
    replace(path, content)?;
    Ok(true)
}

/// Replaces `path` in one rename. A staged file is renamed into place itself when it can
/// be; bytes, and a staged file that cannot be renamed (another file system), go through a
/// temporary file beside `path`. Temporary files are private (0600); what we publish keeps
/// the mode of the file it replaces, else gets the usual 0644.
fn replace(path: &Path, content: Content<'_>) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).at(dir)?;
    #[cfg(unix)]
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        // Only a regular file's own mode: a link's target may be anything (`/dev/zero`, 0666).
        fs::symlink_metadata(path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.permissions())
            .unwrap_or_else(|| fs::Permissions::from_mode(0o644))
    };
    #[cfg(unix)]
    if let Content::File(staged) = content {
        if fs::set_permissions(staged, mode.clone()).is_ok() && fs::rename(staged, path).is_ok() {
            return Ok(());
        }
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(dir)
        .at(dir)?;
    match content {
        Content::Bytes(bytes) => tmp.write_all(bytes).at(tmp.path())?,
        Content::File(staged) => {
            let mut from = fs::File::open(staged).at(staged)?;
            std::io::copy(&mut from, tmp.as_file_mut()).at(tmp.path())?;
        }
    }
    #[cfg(unix)]
    tmp.as_file().set_permissions(mode).at(tmp.path())?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

/// Whether two files hold the same bytes, compared a buffer at a time (`b`, the one already
/// in the library, differs unless it is a regular file).
fn same_file_contents(a: &Path, b: &Path) -> std::io::Result<bool> {
    let Some(fb) = crate::input::open_regular(b)? else {
        return Ok(false);
    };
    let fa = fs::File::open(a)?;
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let mut ra = std::io::BufReader::with_capacity(64 << 10, fa);
    let mut rb = std::io::BufReader::with_capacity(64 << 10, fb);
    loop {
        let (ba, bb) = (ra.fill_buf()?, rb.fill_buf()?);
        if ba.is_empty() || bb.is_empty() {
            return Ok(ba.is_empty() && bb.is_empty());
        }
        let n = ba.len().min(bb.len());
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
        ra.consume(n);
        rb.consume(n);
    }
}

/// The files the library's current manifest lists (none where it is missing, not a regular
/// file, over the most read of a manifest, or not a manifest).
fn previous_files(dir: &Path) -> Vec<String> {
    crate::input::read_regular(&dir.join(manifest::FILE_NAME), manifest::MAX_FILE_BYTES)
        .ok()
        .flatten()
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

/// Whether `rel` names a regular file inside `dir` that is safe to remove: a plain relative
/// path none of whose components is a symbolic link (a link planted in the library folder
/// must not lead a removal, or the removal of emptied folders, outside it).
fn removable(dir: &Path, rel: &str) -> bool {
    if !is_safe_relative(rel) {
        return false;
    }
    let parts: Vec<_> = Path::new(rel).components().collect();
    let mut path = dir.to_path_buf();
    for (i, c) in parts.iter().enumerate() {
        path.push(c);
        let Ok(m) = fs::symlink_metadata(&path) else {
            return false;
        };
        let last = i + 1 == parts.len();
        if (last && !m.is_file()) || (!last && !m.is_dir()) {
            return false;
        }
    }
    true
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

/// Writes a library's files into `dir` (see the module docs): under the folder's lock,
/// removing temporary files killed runs left, in [`publication_order`], removing the files an
/// older manifest listed that are no longer produced just before the new manifest goes out
/// (so a run killed in between still finds them listed in the old one, and removes them).
pub fn write_library<C: AsContent>(dir: &Path, files: &BTreeMap<String, C>) -> Result<WriteReport> {
    let mut report = WriteReport::default();
    fs::create_dir_all(dir).at(dir)?;
    let lock = lock_library(dir, true);
    let previous = previous_files(dir);
    let stale: Vec<String> = previous
        .iter()
        .filter(|f| !files.contains_key(*f) && removable(dir, f))
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
    let mut ordered: Vec<(&String, &C)> = files.iter().collect();
    ordered.sort_by_key(|(rel, _)| publication_order(rel));
    let (manifest_last, rest): (Vec<_>, Vec<_>) = ordered
        .into_iter()
        .partition(|(rel, _)| rel.as_str() == manifest::FILE_NAME);
    for (rel, content) in rest {
        publish_into(dir, rel, content, &mut report)?;
    }
    remove_stale(dir, &stale, &mut report)?;
    for (rel, content) in manifest_last {
        publish_into(dir, rel, content, &mut report)?;
    }
    Ok(report)
}

fn publish_into<C: AsContent>(
    dir: &Path,
    rel: &str,
    content: &C,
    report: &mut WriteReport,
) -> Result<()> {
    let path = dir.join(rel);
    if publish(&path, content.content())? {
        report.written.push(path);
    } else {
        report.unchanged += 1;
    }
    Ok(())
}

/// Removes the files of `stale` that are still safe to remove, and folders they leave empty.
fn remove_stale(dir: &Path, stale: &[String], report: &mut WriteReport) -> Result<()> {
    for rel in stale {
        let path = dir.join(rel);
        if removable(dir, rel) {
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
    Ok(())
}

/// Differences between the folder and what would be written, one line each.
pub fn check_library<C: AsContent>(dir: &Path, files: &BTreeMap<String, C>) -> Vec<String> {
    let _lock = lock_library(dir, false);
    let mut diffs = Vec::new();
    for (rel, content) in files {
        match content.content().is_in(&dir.join(rel)) {
            Ok(true) => {}
            Ok(false) => diffs.push(format!("differs: {rel}")),
            Err(_) => diffs.push(format!("missing: {rel}")),
        }
    }
    let previous = previous_files(dir);
    for rel in &previous {
        if !files.contains_key(rel) && removable(dir, rel) {
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

    fn file_set(files: &[(&str, &[u8])]) -> FileSet {
        files
            .iter()
            .map(|(rel, bytes)| (rel.to_string(), bytes.to_vec()))
            .collect()
    }

    #[test]
    fn rewrites_only_changed_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = file_set(&[("a.txt", b"one"), ("sub/b.txt", b"two")]);
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
        let files = file_set(&[
            ("bindings.rs", b"new bindings"),
            ("kernels/a.cu", b"a"),
            ("manifest.json", b"{}"),
        ]);
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

    /// A run that fails (or is killed) after its stale files went but before its manifest
    /// did leaves the old manifest, which no longer finds them: none is orphaned unlisted.
    #[test]
    fn stale_files_are_removed_before_the_manifest_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let old_manifest = br#"{"format": 1, "tilegen_version": "0", "nvrtc_version": "0",
            "instances": [], "files": ["kernels/old.cu"]}"#;
        assert!(Manifest::from_bytes(old_manifest).is_ok());
        let old = file_set(&[("kernels/old.cu", b"old"), ("manifest.json", old_manifest)]);
        write_library(dir.path(), &old).unwrap();
        // The new manifest cannot be published: its staged file is gone.
        let missing = dir.path().join("staged-manifest-that-is-not-there");
        let mut new = BTreeMap::new();
        new.insert("kernels/new.cu".to_string(), Content::Bytes(b"new"));
        new.insert("manifest.json".to_string(), Content::File(&missing));
        assert!(write_library(dir.path(), &new).is_err());
        assert!(!dir.path().join("kernels/old.cu").exists());
        assert!(dir.path().join("kernels/new.cu").exists());
        assert_eq!(
            fs::read(dir.path().join("manifest.json")).unwrap(),
            old_manifest
        );
    }

    #[test]
    fn leftover_temporary_files_are_reported_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let files = file_set(&[("kernels/a.cu", b"a")]);
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
    fn staged_files_are_moved_into_place_and_compared() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        let staged = dir.path().join("staged-0");
        fs::write(&staged, b"a kernel").unwrap();
        let mut files = BTreeMap::new();
        files.insert("kernels/a.cubin".to_string(), Content::File(&staged));
        files.insert("manifest.json".to_string(), Content::Bytes(b"{}"));
        assert_eq!(
            check_library(&lib, &files),
            vec!["missing: kernels/a.cubin", "missing: manifest.json"]
        );
        let r = write_library(&lib, &files).unwrap();
        assert_eq!(r.written.len(), 2);
        assert_eq!(fs::read(lib.join("kernels/a.cubin")).unwrap(), b"a kernel");
        assert!(!staged.exists(), "moved, not copied");
        // The same bytes staged again: compared, not written.
        fs::write(&staged, b"a kernel").unwrap();
        assert!(check_library(&lib, &files).is_empty());
        let r = write_library(&lib, &files).unwrap();
        assert_eq!((r.written.len(), r.unchanged), (0, 2));
        fs::write(&staged, b"a kernel, changed").unwrap();
        assert_eq!(
            check_library(&lib, &files),
            vec!["differs: kernels/a.cubin"]
        );
    }

    #[test]
    fn unsafe_paths_are_never_removed() {
        for p in ["../x", "/etc/passwd", "a/../../b", ""] {
            assert!(!is_safe_relative(p), "{p}");
        }
        assert!(is_safe_relative("kernels/a.cu"));
    }

    #[test]
    fn nothing_is_removed_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("main.rs"), b"keep").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("main.rs"), dir.path().join("f")).unwrap();
        assert!(!removable(dir.path(), "sub/main.rs"));
        assert!(!removable(dir.path(), "f"));
        fs::create_dir(dir.path().join("kernels")).unwrap();
        fs::write(dir.path().join("kernels/a.cu"), b"x").unwrap();
        assert!(removable(dir.path(), "kernels/a.cu"));
        assert!(!removable(dir.path(), "kernels"));
    }
}
