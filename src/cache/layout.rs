//! The cache folder's layout: its marks (CACHEDIR.TAG and tilegen's version file), the names
//! of entries, temporary files and locks, and whether an unmarked folder may be adopted.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{IoContext, Result};

/// The Cache Directory Tagging spec's file and the line it must start with.
pub const TAG_FILE: &str = "CACHEDIR.TAG";
pub(super) const TAG_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";
pub(super) const TAG_TEXT: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by tilegen (its compile cache).\n\
# For information about cache directory tags, see https://bford.info/cachedir/\n";
/// tilegen's own mark; its first line names the layout.
pub const VERSION_FILE: &str = "tilegen-cache.version";
pub(super) const VERSION_LINE: &str = "tilegen-cache 1";

pub(super) fn prepare(root: &Path) -> std::result::Result<(), String> {
    let shown = root.display();
    let not_used =
        |why: String| format!("cache folder {shown} not used ({why}); compiling without a cache");
    if root.as_os_str().is_empty() {
        return Err(not_used("an empty path".into()));
    }
    if marked(root) {
        if !fs::symlink_metadata(root.join(TAG_FILE)).is_ok_and(|m| m.is_file()) {
            let _ = write_mark(&root.join(TAG_FILE), TAG_TEXT);
        }
        return Ok(());
    }
    match fs::metadata(root) {
        Ok(m) if !m.is_dir() => return Err(not_used("it is not a folder".into())),
        Ok(_) => {
            if let Err(e) = fs::read_dir(root) {
                return Err(not_used(format!("it cannot be read: {e}")));
            }
            if !adoptable(root) {
                return Err(not_used(format!(
                    "it is not a tilegen cache: it has no {VERSION_FILE} and holds files \
                     tilegen did not write; give an empty or new folder"
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(root).map_err(|e| not_used(e.to_string()))?
        }
        Err(e) => return Err(not_used(e.to_string())),
    }
    write_mark(&root.join(TAG_FILE), TAG_TEXT).map_err(not_used)?;
    write_mark(
        &root.join(VERSION_FILE),
        &format!("{VERSION_LINE}\nwritten by tilegen {}\n", crate::VERSION),
    )
    .map_err(not_used)?;
    Ok(())
}

/// Writes a mark file unless one is there (concurrent runs may race to write it).
pub(super) fn write_mark(path: &Path, text: &str) -> std::result::Result<(), String> {
    if marked_file(path, text.lines().next().unwrap_or_default()) {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tilegen-mark-")
        .tempfile_in(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    tmp.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", tmp.path().display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(fs::Permissions::from_mode(0o644));
    }
    tmp.persist(path)
        .map_err(|e| format!("{}: {}", path.display(), e.error))?;
    Ok(())
}

/// Whether `path` is a small regular file whose first line is `first_line`.
pub(super) fn marked_file(path: &Path, first_line: &str) -> bool {
    let Ok(f) = fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = Vec::new();
    if f.take(4096).read_to_end(&mut head).is_err() {
        return false;
    }
    head.split(|&b| b == b'\n').next() == Some(first_line.as_bytes())
}

pub(super) fn marked(root: &Path) -> bool {
    marked_file(&root.join(VERSION_FILE), VERSION_LINE)
        && marked_file(&root.join(TAG_FILE), TAG_SIGNATURE)
}

/// Whether an unmarked folder holds nothing but this layout's files (an empty folder, or a
/// cache of a tilegen from before the marks), so marking and using it harms nothing.
pub(super) fn adoptable(root: &Path) -> bool {
    let Ok(rd) = fs::read_dir(root) else {
        return false;
    };
    let is_dir = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let is_file = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    let all_files = |dir: &Path, ok: &dyn Fn(&str) -> bool| {
        fs::read_dir(dir).is_ok_and(|rd| {
            rd.filter_map(|e| e.ok())
                .all(|e| ok(&e.file_name().to_string_lossy()) && is_file(&e.path()))
        })
    };
    for e in rd {
        let Ok(e) = e else { return false };
        let p = e.path();
        let name = file_name(&p);
        let ok = match name.as_str() {
            TAG_FILE | VERSION_FILE => is_file(&p),
            // A mark being written by a run that was killed.
            _ if name.starts_with(".tilegen-mark-") => is_file(&p),
            "v1" => {
                is_dir(&p)
                    && fs::read_dir(&p).is_ok_and(|rd| {
                        rd.filter_map(|e| e.ok()).all(|s| {
                            let shard = file_name(&s.path());
                            is_shard_name(&shard)
                                && is_dir(&s.path())
                                && all_files(&s.path(), &|n| {
                                    entry_key(n).is_some_and(|k| k[..2] == shard)
                                })
                        })
                    })
            }
            "tmp" => is_dir(&p) && all_files(&p, &is_temp_name),
            "locks" => is_dir(&p) && all_files(&p, &is_lock_name),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// A folder at `dir`, replacing a file or dangling link of that name (only ever called with
/// this layout's folder names inside a cache in use).
pub(super) fn ensure_dir(dir: &Path) -> Result<()> {
    if fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    // A file or dangling link where the folder belongs goes (a link to a folder is followed:
    // `v1` may live on another disk). Another thread may have made the folder since the
    // check above: that one stays, and create_dir_all accepts it.
    if fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        let _ = fs::remove_file(dir);
    }
    fs::create_dir_all(dir).at(dir)
}

pub(super) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub(super) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub(super) fn is_key(s: &str) -> bool {
    is_hex(s, 64)
}

pub(super) fn is_shard_name(s: &str) -> bool {
    is_hex(s, 2)
}

/// The key of an entry file name `KEY.entry`.
pub(super) fn entry_key(name: &str) -> Option<String> {
    let key = name.strip_suffix(".entry")?;
    is_key(key).then(|| key.to_string())
}

/// `put`'s temporary names: the key's first 16 hex digits, a dot, 6 letters or digits.
pub(super) fn is_temp_name(name: &str) -> bool {
    name.split_once('.').is_some_and(|(k, r)| {
        is_hex(k, 16) && r.len() == 6 && r.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

pub(super) fn is_lock_name(name: &str) -> bool {
    name.strip_suffix(".lock").is_some_and(is_key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// Threads publishing entries create the same folders at once: none of them may fail
    /// because another got there first.
    #[test]
    fn ensure_dir_races_with_itself() {
        let tmp = tempfile::tempdir().unwrap();
        const THREADS: usize = 8;
        for round in 0..300 {
            let dir = tmp.path().join(format!("{round}/v1"));
            let start = Arc::new(Barrier::new(THREADS));
            let results: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (dir, start) = (dir.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        ensure_dir(&dir).map_err(|e| e.to_string())
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect();
            for r in results {
                r.unwrap_or_else(|e| panic!("round {round}: {e}"));
            }
        }
    }

    /// A file or a dangling link where the folder belongs is replaced by the folder.
    #[test]
    fn ensure_dir_replaces_what_is_not_a_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        fs::write(&file, b"x").unwrap();
        ensure_dir(&file).unwrap();
        assert!(file.is_dir());
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &link).unwrap();
        ensure_dir(&link).unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().is_dir());
    }
}
