//! Prebuilt kernel bundles: one reproducible `.tar.gz` holding a kernel library (what
//! `tilegen generate` writes) and `bundle.json`, which lists every member with its sha256
//! and size, the tilegen and NVRTC versions, the archs and the PTX ISA versions.
//!
//! One module per job:
//! - this one: [`create`] and [`pack`] a library folder;
//! - [`archive`]: the tar.gz format, read as a stream against hostile input ([`Limits`]);
//! - [`manifest`]: `bundle.json`, derived from the library's files (or their digests);
//! - [`verify`]: streaming verification, holding no member ([`check_signed`], for
//!   `bundle verify` and `bundle inspect`) or keeping the files in memory ([`open`]);
//! - [`stage`]: verifying while writing each member into a private staging folder
//!   ([`stage_signed`], for `generate --bundle`);
//! - [`unpack()`]: verifying into a temporary folder, then installing atomically;
//! - [`sign`]: detached minisign signatures (`FILE.minisig`), checked on the raw archive
//!   before anything in it is read;
//! - [`library`]: a library from a bundle with no NVRTC (`tilegen generate --bundle`,
//!   [`crate::Builder::bundle`], `TILEGEN_BUNDLE`), written by [`crate::output`].
//!
//! Layout inside the archive: `bundle.json` first, then the library files sorted by path
//! (`bindings.rs`, `kernels/…`, `manifest.json`), all at the archive root.

pub mod archive;
pub mod library;
pub mod manifest;
pub mod sign;
pub mod stage;
pub mod unpack;
pub mod verify;

use std::fs;
use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::output::FileSet;

pub use archive::Limits;
pub use manifest::{BundleManifest, Member};
pub use sign::{SignaturePolicy, Signed};
pub use stage::{stage_signed, Staged};
pub use unpack::{unpack, unpack_signed};
pub use verify::{check_signed, open, open_signed, verify_bytes};

/// A verified bundle, in memory (for small bundles and tests; see [`Staged`]).
#[derive(Debug, Clone)]
pub struct Bundle {
    pub manifest: BundleManifest,
    /// `bundle.json` exactly as stored.
    pub manifest_bytes: Vec<u8>,
    /// The library files (`manifest.json` among them), without `bundle.json`.
    pub files: FileSet,
}

fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::Bundle {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// `SOURCE_DATE_EPOCH` (read through [`crate::env`]), else 0.
pub fn source_date_epoch() -> Result<u64> {
    match crate::env::var("SOURCE_DATE_EPOCH") {
        None => Ok(0),
        Some(v) => v.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "SOURCE_DATE_EPOCH=`{v}` is not a whole number of seconds"
            ))
        }),
    }
}

/// Reads the files of a library folder: `manifest.json` and every file it lists.
pub fn load_library(dir: &Path) -> Result<FileSet> {
    let mpath = dir.join(crate::manifest::FILE_NAME);
    let mbytes = fs::read(&mpath).at(&mpath)?;
    let lib = crate::manifest::Manifest::from_bytes(&mbytes).map_err(|e| {
        Error::Usage(format!(
            "{}: not a tilegen library manifest: {e}",
            mpath.display()
        ))
    })?;
    let mut files = FileSet::new();
    for rel in &lib.files {
        archive::check_member_path(rel)
            .map_err(|m| Error::Usage(format!("{}: {m}", mpath.display())))?;
        let p = dir.join(rel);
        files.insert(rel.clone(), fs::read(&p).at(&p)?);
    }
    files.insert(crate::manifest::FILE_NAME.into(), mbytes);
    Ok(files)
}

/// The archive bytes for a library's files, and its bundle manifest.
pub fn pack(
    files: &FileSet,
    source_date_epoch: u64,
) -> std::result::Result<(Vec<u8>, BundleManifest), String> {
    let m = BundleManifest::describe(files, source_date_epoch)?;
    let mbytes = m.to_bytes();
    let mut members: Vec<(&str, &[u8])> = vec![(manifest::FILE_NAME, &mbytes)];
    members.extend(files.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
    let bytes = archive::write(&members, source_date_epoch)
        .map_err(|e| format!("cannot write the archive: {e}"))?;
    Ok((bytes, m))
}

/// Packs the library folder `lib` into the bundle `out` (written atomically, and only when
/// its bytes change). Member times are `SOURCE_DATE_EPOCH`, else 0.
pub fn create(lib: &Path, out: &Path) -> Result<BundleManifest> {
    let files = load_library(lib)?;
    let (bytes, m) = pack(&files, source_date_epoch()?).map_err(|msg| bad(lib, msg))?;
    crate::output::write_if_changed(out, &bytes)?;
    Ok(m)
}
