//! Unpacking a verified bundle: written into a temporary folder beside the destination,
//! synced, then renamed into place in one step. Nothing is written before the whole bundle
//! has been verified in memory; a run killed midway leaves at most a temporary folder named
//! `.DEST.tilegen-unpack-PID-*`, never a half-filled DEST, and the next unpack into DEST
//! removes such leftovers: those whose process is gone, so two unpacks running at once do
//! not delete each other's work.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

use super::Bundle;

fn temp_prefix(dest: &Path) -> Result<String> {
    let name = dest.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::Usage(format!(
            "{}: the destination needs a plain folder name",
            dest.display()
        ))
    })?;
    Ok(format!(".{name}.tilegen-unpack-"))
}

/// The temporary folder prefix of this process: the owner's pid is part of the name.
fn own_prefix(dest: &Path) -> Result<String> {
    Ok(format!("{}{}-", temp_prefix(dest)?, std::process::id()))
}

/// Whether the unpack that made a temporary folder named `…-PID-…` may still be running.
/// Where processes cannot be looked up (no /proc), every leftover counts as abandoned.
fn owner_alive(rest: &str) -> bool {
    let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Leftovers of unpacks into the same destination that were killed midway (their process
/// is gone).
pub fn leftovers(dest: &Path) -> Result<Vec<PathBuf>> {
    let prefix = temp_prefix(dest)?;
    let parent = parent_of(dest);
    let Ok(rd) = fs::read_dir(&parent) else {
        return Ok(Vec::new());
    };
    Ok(rd
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .is_some_and(|rest| !owner_alive(rest))
        })
        .map(|e| e.path())
        .collect())
}

fn parent_of(dest: &Path) -> PathBuf {
    match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes a verified bundle's members (and `bundle.json`) into `dest`, which must not exist
/// or be an empty folder.
pub fn install(bundle: &Bundle, dest: &Path) -> Result<()> {
    let prefix = own_prefix(dest)?;
    if dest.exists() {
        let empty = dest.is_dir() && fs::read_dir(dest).at(dest)?.next().is_none();
        if !empty {
            return Err(Error::Usage(format!(
                "{}: already exists and is not an empty folder; remove it or unpack elsewhere",
                dest.display()
            )));
        }
    }
    let parent = parent_of(dest);
    fs::create_dir_all(&parent).at(&parent)?;
    for old in leftovers(dest)? {
        fs::remove_dir_all(&old).at(&old)?;
    }
    let tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(&parent)
        .at(&parent)?;
    let files = bundle
        .files
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .chain([(super::manifest::FILE_NAME, bundle.manifest_bytes.as_slice())]);
    for (rel, bytes) in files {
        // Names were checked when the archive was read; check again before touching disk.
        super::archive::check_member_path(rel)
            .map_err(|m| Error::Usage(format!("refusing to write: {m}")))?;
        let path = tmp.path().join(rel);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).at(dir)?;
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .at(&path)?;
        std::io::Write::write_all(&mut f, bytes).at(&path)?;
        f.sync_all().at(&path)?;
    }
    // rename(2) also replaces an empty folder, atomically.
    fs::rename(tmp.path(), dest).at(dest)?;
    // The TempDir's cleanup now finds nothing at its old path, which it ignores.
    drop(tmp);
    if let Ok(d) = fs::File::open(&parent) {
        let _ = d.sync_all();
    }
    Ok(())
}
