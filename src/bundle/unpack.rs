//! Unpacking a bundle: its members stream into a temporary folder beside the destination
//! (each under a number, not its own name, until the whole bundle has been verified), are
//! synced, moved to their names and renamed into place in one step. A failed check removes
//! the temporary folder, so nothing is left; a run killed midway leaves at most a folder named
//! `.DEST.tilegen-unpack-PID-*`, never a half-filled DEST, and the next unpack into DEST
//! removes such leftovers: those whose owner no longer holds their lock, so two unpacks
//! running at once do not delete each other's work.

use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, IoContext, Result};

use super::manifest::BundleManifest;
use super::sign::{SignaturePolicy, Signed};
use super::stage::{Disk, Held, Staged};
use super::{verify, Limits};

/// Verifies the bundle at `path`, then installs it into `dest` (absent or an empty folder)
/// atomically: nothing is written when any check fails.
pub fn unpack(path: &Path, dest: &Path, limits: &Limits) -> Result<BundleManifest> {
    unpack_signed(path, dest, limits, None).map(|(b, _)| b)
}

/// [`unpack`] with the signature check of [`super::open_signed`] first. Members are written into the
/// temporary folder beside `dest` as they stream (each under a number until every check has
/// passed), then moved to their names and the folder renamed into place.
pub fn unpack_signed(
    path: &Path,
    dest: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(BundleManifest, Option<Signed>)> {
    let (parent, prefix) = prepare(dest)?;
    let created = missing_ancestors(&parent);
    let mut disk = Disk::new(&parent, &prefix);
    let (c, signed) = match verify::stream(path, limits, policy, &mut disk) {
        Ok(r) => r,
        Err(e) => {
            // Nothing may be left behind: the staging folder goes with `disk`, and folders
            // made to hold it go too (only if empty).
            drop(disk);
            for d in &created {
                let _ = fs::remove_dir(d);
            }
            return Err(e);
        }
    };
    let staged = disk.into_staged(c)?;
    install(&staged, dest)?;
    Ok((staged.manifest, signed))
}

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

/// How long a temporary folder without an owner lock counts as in the making (its owner
/// locks one an instant after creating it) and is left alone, whatever its pid says.
const UNLOCKED_GRACE: Duration = Duration::from_secs(600);

/// Whether the run that made the temporary folder `folder` (metadata `meta`), named
/// `…-PID-…`, may still be running. Only a folder of this user is judged, and only by what
/// cannot hang: its owner lock is opened without blocking and must be a plain file. Held,
/// or not lockable here (it exists only because its owner once locked it), the owner may
/// live; free, it is gone. A folder without one (in the making, made where files cannot be
/// locked, or by an older tilegen) lives while it is young or its pid runs here.
fn owner_alive(folder: &Path, meta: &fs::Metadata, rest: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } {
        return true;
    }
    let owner = fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(folder.join(super::stage::OWNER_FILE));
    match owner {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => return f.try_lock_shared().is_err(),
        Ok(_) => return true,
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return true,
        Err(_) => {}
    }
    let young = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_none_or(|age| age < UNLOCKED_GRACE);
    let pid_runs = rest
        .split('-')
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| {
            pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
        });
    young || pid_runs
}

/// Leftovers of unpacks into the same destination that were killed midway: folders whose
/// owner lock is free (or, without one, old and whose pid is gone).
pub fn leftovers(dest: &Path) -> Result<Vec<PathBuf>> {
    let prefix = temp_prefix(dest)?;
    Ok(leftovers_with_prefix(&parent_of(dest), &prefix))
}

/// Folders of `dir` (not links or files, whatever their names) named `PREFIX PID-…` whose
/// owner is gone.
pub fn leftovers_with_prefix(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| {
            let Some(rest) = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .map(String::from)
            else {
                return false;
            };
            let path = e.path();
            fs::symlink_metadata(&path)
                .is_ok_and(|meta| meta.is_dir() && !owner_alive(&path, &meta, &rest))
        })
        .map(|e| e.path())
        .collect()
}

/// Removes a leftover folder (best effort), its owner lock last: a cleanup killed midway
/// leaves a folder that the next one still knows for a leftover, not one that looks as if
/// it were in the making.
pub(super) fn remove_leftover(folder: &Path) {
    let Ok(rd) = fs::read_dir(folder) else {
        return;
    };
    let mut emptied = true;
    for e in rd {
        let Ok(e) = e else {
            emptied = false;
            continue;
        };
        if e.file_name() == super::stage::OWNER_FILE {
            continue;
        }
        let removed = match e.file_type() {
            Ok(t) if t.is_dir() => fs::remove_dir_all(e.path()),
            _ => fs::remove_file(e.path()),
        };
        // Gone already is gone (another cleanup may be at the same folder).
        emptied &= match removed {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
    }
    // Whatever could not go keeps the lock beside it, so it stays a leftover.
    if emptied {
        let _ = fs::remove_file(folder.join(super::stage::OWNER_FILE));
        let _ = fs::remove_dir(folder);
    }
}

fn parent_of(dest: &Path) -> PathBuf {
    match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Checks that `dest` is absent or an empty folder (before anything is read), and returns
/// the folder and the name prefix for this unpack's temporary folder.
fn prepare(dest: &Path) -> Result<(PathBuf, String)> {
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
    Ok((parent_of(dest), prefix))
}

/// The folders of `dir` and its ancestors that do not exist yet, deepest first.
fn missing_ancestors(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .map(Path::to_path_buf)
        .collect()
}

/// Installs a verified bundle staged beside `dest` (by `prepare`'s prefix): moves each
/// member to its name in a fresh tree in the staging folder, adds `bundle.json`, and renames
/// the tree to `dest`, which must not exist or be an empty folder.
fn install(staged: &Staged, dest: &Path) -> Result<()> {
    let parent = parent_of(dest);
    // Best effort: a leftover that cannot be removed stays; it is not this run's and must
    // not fail it.
    for old in leftovers(dest)? {
        if old != staged.dir() {
            remove_leftover(&old);
        }
    }
    let tree = staged.dir().join("tree");
    fs::create_dir(&tree).at(&tree)?;
    for (rel, held) in &staged.files {
        // Names were checked when the archive was read; check again before touching disk.
        super::archive::check_member_path(rel)
            .map_err(|m| Error::internal(format!("refusing to write: {m}")))?;
        let path = tree.join(rel);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).at(dir)?;
        }
        // Synced once the whole bundle has passed (not while it streamed: a hostile one
        // must not cost a sync per member).
        match held {
            Held::File(file) => {
                fs::File::open(file).and_then(|f| f.sync_all()).at(file)?;
                fs::rename(file, &path).at(&path)?;
            }
            Held::Memory(bytes) => {
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .at(&path)?;
                std::io::Write::write_all(&mut f, bytes).at(&path)?;
                f.sync_all().at(&path)?;
            }
        }
    }
    let bj = tree.join(super::manifest::FILE_NAME);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&bj)
        .at(&bj)?;
    std::io::Write::write_all(&mut f, &staged.manifest_bytes).at(&bj)?;
    f.sync_all().at(&bj)?;
    // rename(2) also replaces an empty folder, atomically.
    fs::rename(&tree, dest).at(dest)?;
    if let Ok(d) = fs::File::open(&parent) {
        let _ = d.sync_all();
    }
    Ok(())
}
