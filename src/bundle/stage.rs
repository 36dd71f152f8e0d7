//! Staging a verified bundle on disk: members are written as they stream (each to a
//! numbered file, never its own name, so a hostile name touches nothing before every check
//! has passed; small ones stay in memory) into a private folder removed on drop. Both
//! `generate --bundle` and `bundle unpack` publish from there, moving files rather than
//! holding the archive or a member in memory.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::output::Content;

use super::manifest::{self, BundleManifest};
use super::sign::{SignaturePolicy, Signed};
use super::verify::{stream, Checked, Store};
use super::{unpack, Limits};

/// A verified bundle whose members lie on disk, in a private staging folder removed when
/// this is dropped (small members are kept in memory, up to a fixed budget).
#[derive(Debug)]
pub struct Staged {
    pub manifest: BundleManifest,
    /// `bundle.json` exactly as stored.
    pub manifest_bytes: Vec<u8>,
    dir: StagingDir,
    /// Library path → where its bytes are.
    pub(super) files: BTreeMap<String, Held>,
}

/// Where a staged member's bytes are.
#[derive(Debug)]
pub(super) enum Held {
    Memory(Vec<u8>),
    File(PathBuf),
}

/// Members up to this size are held in memory while the total stays within
/// [`SMALL_BUDGET`]: a bundle of many tiny members (hostile or not) costs no file each.
const SMALL_MEMBER: u64 = 64 << 10;
const SMALL_BUDGET: u64 = 16 << 20;

impl Staged {
    /// The library files' paths (`manifest.json` among them, `bundle.json` not), sorted.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    fn held(&self, rel: &str) -> Result<&Held> {
        self.files
            .get(rel)
            .ok_or_else(|| Error::Usage(format!("the bundle has no member `{rel}`")))
    }

    /// The bytes of member `rel`.
    pub fn read(&self, rel: &str) -> Result<Vec<u8>> {
        match self.held(rel)? {
            Held::Memory(b) => Ok(b.clone()),
            Held::File(p) => fs::read(p).at(p),
        }
    }

    /// Member `rel` for the library writer: a staged file is moved into the library (and so
    /// used up), bytes held in memory are written.
    pub(crate) fn content(&self, rel: &str) -> Result<Content<'_>> {
        Ok(match self.held(rel)? {
            Held::Memory(b) => Content::Bytes(b),
            Held::File(p) => Content::File(p),
        })
    }

    /// The library's `manifest.json`, parsed.
    pub fn library_manifest(&self) -> std::result::Result<crate::manifest::Manifest, String> {
        let bytes = self.read(crate::manifest::FILE_NAME).ok();
        manifest::library_manifest(bytes.as_deref())
    }

    /// The staging folder.
    pub fn dir(&self) -> &Path {
        self.dir.dir.path()
    }
}

/// The name, inside a staging folder, of the file whose lock the folder's owner holds while
/// the folder lives. A later run can tell a live run's folder (locked) from a killed one's (the
/// system released its lock) wherever the folder is shared: other PID namespaces, other
/// hosts, systems without `/proc` (`unpack::owner_alive` judges).
pub(super) const OWNER_FILE: &str = "owner.lock";

/// A staging folder with its owner lock held.
#[derive(Debug)]
pub(super) struct StagingDir {
    // Declared first: the lock is released before its folder is removed.
    _owner: Option<fs::File>,
    dir: tempfile::TempDir,
}

/// Locks a fresh file in `dir` and only then gives it [`OWNER_FILE`]'s name, so a cleanup
/// never finds that file unlocked while its owner lives. `None` where the file system has no
/// locks: the folder is then judged by its age and the pid in its name.
fn lock_owner(dir: &Path) -> Option<fs::File> {
    let fresh = dir.join("owner.lock.new");
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fresh)
        .ok()?;
    if f.try_lock().is_err() || fs::rename(&fresh, dir.join(OWNER_FILE)).is_err() {
        let _ = fs::remove_file(&fresh);
        return None;
    }
    Some(f)
}

/// Writes each member to its own flat file (`staged/N`, never a member's own name, so
/// hostile names touch nothing before all checks pass) in a temporary folder made, on the
/// first such member, in `parent` with a name starting with `prefix`; small members stay
/// in memory.
pub(super) struct Disk {
    parent: PathBuf,
    prefix: String,
    dir: Option<StagingDir>,
    files: BTreeMap<String, Held>,
    small: u64,
    current: Option<(String, Writing)>,
}

enum Writing {
    Memory(Vec<u8>),
    File(PathBuf, std::io::BufWriter<fs::File>),
}

impl Disk {
    pub(super) fn new(parent: &Path, prefix: &str) -> Self {
        Disk {
            parent: parent.to_path_buf(),
            prefix: prefix.to_string(),
            dir: None,
            files: BTreeMap::new(),
            small: 0,
            current: None,
        }
    }

    pub(super) fn into_staged(mut self, c: Checked) -> Result<Staged> {
        let dir = match self.dir.take() {
            Some(d) => d,
            None => self.make_dir()?,
        };
        Ok(Staged {
            manifest: c.manifest,
            manifest_bytes: c.manifest_bytes,
            dir,
            files: self.files,
        })
    }

    fn make_dir(&self) -> Result<StagingDir> {
        fs::create_dir_all(&self.parent).at(&self.parent)?;
        let dir = tempfile::Builder::new()
            .prefix(&self.prefix)
            .tempdir_in(&self.parent)
            .at(&self.parent)?;
        let owner = lock_owner(dir.path());
        let staged = dir.path().join("staged");
        fs::create_dir(&staged).at(&staged)?;
        Ok(StagingDir { _owner: owner, dir })
    }
}

impl Store for Disk {
    fn begin(&mut self, path: &str, size: u64) -> Result<()> {
        if size <= SMALL_MEMBER && self.small + size <= SMALL_BUDGET {
            self.small += size;
            self.current = Some((
                path.to_string(),
                Writing::Memory(Vec::with_capacity(size as usize)),
            ));
            return Ok(());
        }
        let dir = match &self.dir {
            Some(d) => d.dir.path().to_path_buf(),
            None => {
                let d = self.make_dir()?;
                let p = d.dir.path().to_path_buf();
                self.dir = Some(d);
                p
            }
        };
        let p = dir.join("staged").join(self.files.len().to_string());
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .at(&p)?;
        let w = std::io::BufWriter::with_capacity(64 << 10, f);
        self.current = Some((path.to_string(), Writing::File(p, w)));
        Ok(())
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.current {
            Some((_, Writing::Memory(v))) => v.extend_from_slice(bytes),
            Some((_, Writing::File(p, w))) => w.write_all(bytes).at(p)?,
            None => {}
        }
        Ok(())
    }
    fn end(&mut self) -> Result<()> {
        let held = match self.current.take() {
            Some((rel, Writing::Memory(v))) => (rel, Held::Memory(v)),
            Some((rel, Writing::File(p, w))) => {
                w.into_inner().map_err(|e| Error::io(&p, e.into_error()))?;
                (rel, Held::File(p))
            }
            None => return Ok(()),
        };
        self.files.insert(held.0, held.1);
        Ok(())
    }
}

/// The temporary folder prefix for staging a bundle in the system's temporary folder.
const STAGE_PREFIX: &str = "tilegen-bundle-";

/// Verifies the bundle at `path` (its signature first, as [`super::open_signed`]), writing each
/// member into a private staging folder in the system's temporary folder as it streams, so
/// at most one member's buffers are in memory. Nothing is staged before the signature
/// verifies; on any failure the staging folder is removed. Leftovers of killed runs (whose
/// owner lock is free) are removed first.
pub fn stage_signed(
    path: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(Staged, Option<Signed>)> {
    let tmp = std::env::temp_dir();
    for old in unpack::leftovers_with_prefix(&tmp, STAGE_PREFIX) {
        unpack::remove_leftover(&old);
    }
    let mut disk = Disk::new(&tmp, &format!("{STAGE_PREFIX}{}-", std::process::id()));
    let (c, signed) = stream(path, limits, policy, &mut disk)?;
    Ok((disk.into_staged(c)?, signed))
}
