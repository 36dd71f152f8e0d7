//! One cache entry on disk: its bytes (a header, the PTX, the cubin, then a sha256 of all
//! before it), read without following links or blocking on a FIFO.

use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::hashing::sha256_hex;
use crate::nvrtc::{Compiled, Resources};

pub(super) const MAGIC: &[u8] = b"TILEGEN-CACHE v1\n";

/// The largest entry read: a kernel's PTX and cubin are a few MiB at most, and a remote value
/// may be no larger either (`remote::MAX_VALUE`).
pub(super) const MAX_ENTRY_BYTES: u64 = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    key: String,
    ptx_len: usize,
    cubin_len: usize,
    resources: Resources,
    log: String,
}

/// The bytes of the entry at `path`: Ok(None) when there is none, Err(why) when something
/// unusable is there. Never blocks on a fifo and never follows a link.
pub(super) fn read_entry(path: &Path) -> std::result::Result<Option<Vec<u8>>, String> {
    let f = fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let f = match f {
        Ok(f) => f,
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                Some(libc::ELOOP) => Err("a symbolic link, not an entry".into()),
                Some(libc::ENOTDIR) => Err("its folder is not a folder".into()),
                _ => Err(format!("cannot be read: {e}")),
            }
        }
    };
    let m = f.metadata().map_err(|e| format!("cannot be read: {e}"))?;
    if m.is_dir() {
        return Err("a folder, not an entry".into());
    }
    if !m.is_file() {
        return Err("not a regular file".into());
    }
    if m.len() > MAX_ENTRY_BYTES {
        return Err(format!(
            "{} bytes, more than any entry ({MAX_ENTRY_BYTES})",
            m.len()
        ));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    // Bounded even if the file grows while it is read.
    f.take(MAX_ENTRY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > MAX_ENTRY_BYTES {
        return Err(format!("more than any entry ({MAX_ENTRY_BYTES} bytes)"));
    }
    Ok(Some(bytes))
}

/// Removes what is at an entry's path: a file or link, or an empty folder. A folder with
/// something in it is not tilegen's to empty.
pub(super) fn discard(path: &Path) -> std::result::Result<(), String> {
    match fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => fs::remove_dir(path)
            .map_err(|_| "a folder with files in it; remove it yourself".to_string()),
        Ok(_) => fs::remove_file(path).map_err(|e| format!("cannot be removed: {e}")),
    }
}

pub(super) fn remove_non_dir(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir()) && fs::remove_file(p).is_ok()
}

pub(super) fn encode(key: &str, c: &Compiled) -> Vec<u8> {
    let meta = Meta {
        key: key.to_string(),
        ptx_len: c.ptx.len(),
        cubin_len: c.cubin.len(),
        resources: c.resources.clone(),
        log: c.log.clone(),
    };
    let json = serde_json::to_vec(&meta).expect("meta serializes");
    let mut out = Vec::with_capacity(MAGIC.len() + json.len() + c.ptx.len() + c.cubin.len() + 96);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(format!("{}\n", json.len()).as_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&c.ptx);
    out.extend_from_slice(&c.cubin);
    let sum = sha256_hex(&out);
    out.extend_from_slice(sum.as_bytes());
    out.push(b'\n');
    out
}

pub(super) fn decode(key: &str, bytes: &[u8]) -> std::result::Result<Compiled, String> {
    if bytes.len() < MAGIC.len() + 65 || !bytes.starts_with(MAGIC) {
        return Err("not a cache entry (truncated or foreign)".into());
    }
    let (body, tail) = bytes.split_at(bytes.len() - 65);
    if tail[64] != b'\n' || &tail[..64] != sha256_hex(body).as_bytes() {
        return Err("checksum mismatch (truncated or corrupted)".into());
    }
    let rest = &body[MAGIC.len()..];
    let nl = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header length")?;
    let json_len: usize = std::str::from_utf8(&rest[..nl])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("bad header length")?;
    let rest = &rest[nl + 1..];
    if rest.len() < json_len {
        return Err("header runs past the end".into());
    }
    let meta: Meta =
        serde_json::from_slice(&rest[..json_len]).map_err(|e| format!("bad header: {e}"))?;
    if meta.key != key {
        return Err(format!("entry is for key {}, not {key}", meta.key));
    }
    let payload = &rest[json_len..];
    // Checked: entries can come from a shared store, and a wrapped sum would pass.
    if meta.ptx_len.checked_add(meta.cubin_len) != Some(payload.len()) {
        return Err("payload length does not match the header".into());
    }
    let (ptx, cubin) = payload.split_at(meta.ptx_len);
    Ok(Compiled {
        ptx: ptx.to_vec(),
        cubin: cubin.to_vec(),
        log: meta.log,
        resources: meta.resources,
    })
}
