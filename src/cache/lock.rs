//! A lock per cache key (flock on `locks/KEY.lock`), held while one process compiles it.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Held while compiling one key; released (and its file removed once the entry is published)
/// when dropped or by [`KeyLock::published`].
pub struct KeyLock {
    pub(super) file: fs::File,
    pub(super) path: PathBuf,
}

impl KeyLock {
    /// The entry is in the cache: later arrivals find it there, so the lock file can go.
    /// Removed only while it is still this lock's file.
    pub fn published(self) {
        if is_file_at(&self.file, &self.path) {
            let _ = fs::remove_file(&self.path);
        }
        // Dropping the file releases the lock.
    }
}

/// Whether `path` still names the open `file` (not unlinked, not replaced): a lock taken on a
/// file that was unlinked meanwhile locks nothing another process can see.
pub(super) fn is_file_at(file: &fs::File, path: &Path) -> bool {
    match (fs::symlink_metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Ok(true) when the exclusive lock was taken, Ok(false) when another holds it.
pub(super) fn try_flock(f: &fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}
