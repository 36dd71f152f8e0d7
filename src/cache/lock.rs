//! A lock per cache key (flock on `locks/KEY.lock`), held while one process compiles it.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

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
        let same = match (fs::symlink_metadata(&self.path), self.file.metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if same {
            let _ = fs::remove_file(&self.path);
        }
        // Dropping the file releases the lock.
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
