//! Reading a small file from outside (a tuning table, a shapes file, a bundle's signature):
//! only a regular file, and never more of it than its limit, whatever is planted there.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, Result};

/// The file at `path` opened for reading if it is a regular file (`None` for a fifo, a device
/// or a folder, whatever a link points to): opened without blocking, so a fifo planted there
/// cannot hang the open, and checked on the opened file.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let opened = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    match opened {
        Ok(f) => Ok(f.metadata()?.is_file().then_some(f)),
        // A socket (or a device with nothing behind it) cannot be opened at all.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The bytes of the regular file at `path`, `None` for anything else, at most `max` of them
/// (`InvalidData` past that; reading a file gives that kind for nothing else), read no
/// further even if it grows meanwhile.
pub(crate) fn read_regular(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    match open_regular(path)? {
        Some(f) => read_at_most(f, max).map(Some),
        None => Ok(None),
    }
}

/// All of `from`, if that is at most `max` bytes (`InvalidData` past that, having read one
/// byte more than `max` and no further).
pub(crate) fn read_at_most(from: impl Read, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    from.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("longer than {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// The bytes of the file at `path`: a regular file (not a fifo or a device, checked on the
/// opened file, which a non-blocking open cannot hang on) of at most `max` bytes, read no
/// further even if it grows meanwhile. `bad` words a refusal; a file that cannot be opened
/// or read is an [`Error::Io`] (so a caller can tell a missing one apart).
pub(crate) fn read_limited(
    path: &Path,
    max: u64,
    bad: &dyn Fn(String) -> Error,
) -> Result<Vec<u8>> {
    match read_regular(path, max) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(bad("not a regular file".into())),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(bad(format!(
            "longer than {max} bytes, the most it may have"
        ))),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// [`read_limited`] with a refusal worded `PATH: why` (the path escaped, as every message shows
/// one), for files that need no other name.
pub(crate) fn read_file(path: &Path, max: u64) -> Result<Vec<u8>> {
    read_limited(path, max, &|why| {
        Error::input(path, format!("{}: {why}", crate::escape::shown_path(path)))
    })
}
