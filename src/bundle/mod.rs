//! Prebuilt kernel bundles: one reproducible `.tar.gz` holding a kernel library (what
//! `tilegen generate` writes) and `bundle.json` ([`BundleManifest`]), which lists every member
//! with its sha256 and size, the tilegen and NVRTC versions, the archs and the PTX ISA
//! versions.
//!
//! - [`create`] and [`pack`] make one from a library folder;
//! - [`open`] and [`verify_bytes`] verify one into memory ([`Bundle`]); [`check_signed`]
//!   verifies one as a stream, holding no member; [`stage_signed`] verifies while writing each
//!   member into a private staging folder ([`Staged`]);
//! - [`unpack()`] verifies one into a temporary folder, then installs it atomically;
//! - the `_signed` forms first check a detached minisign signature (`FILE.minisig`) on the raw
//!   archive against a [`SignaturePolicy`] ([`read_public_key`]), before anything in it is read.
//!
//! Every reader treats the archive as hostile, within [`Limits`]. A build script takes its
//! library from a bundle with [`crate::Builder::bundle`] (or `TILEGEN_BUNDLE`).
//!
//! Layout inside the archive: `bundle.json` first, then the library files sorted by path
//! (`bindings.rs`, `kernels/…`, `manifest.json`), all at the archive root.

// One module per job: `archive` (the tar.gz format, read as a stream against hostile input),
// `manifest` (`bundle.json`, derived from the library's files or their digests), `verify`,
// `stage`, `unpack` and `sign`. A library made from a bundle (`generate --bundle`) is the
// generator's (`generate::from_bundle`): this module is only the archive format.
pub(crate) mod archive;
pub(crate) mod manifest;
pub(crate) mod sign;
pub(crate) mod stage;
pub(crate) mod unpack;
pub(crate) mod verify;

use std::path::Path;

use crate::error::{Error, Result};

pub use crate::output::FileSet;

pub use archive::Limits;
pub use manifest::{BundleManifest, Member, TunedDevice};
pub use sign::{read_public_key, PublicKey, SignaturePolicy, Signed};
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

/// `SOURCE_DATE_EPOCH` (a build script reruns when it changes), else 0.
pub fn source_date_epoch() -> Result<u64> {
    match crate::env::var("SOURCE_DATE_EPOCH")? {
        None => Ok(0),
        Some(v) => v.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "SOURCE_DATE_EPOCH=`{v}` is not a whole number of seconds"
            ))
        }),
    }
}

/// Reads the files of a library folder: `manifest.json` and every file it lists, each a
/// regular file within what a bundle may hold (64 MiB for the manifest, as the bundle reader
/// allows JSON; a member's limit for the rest).
pub fn load_library(dir: &Path) -> Result<FileSet> {
    let mpath = dir.join(crate::manifest::FILE_NAME);
    let mbytes = crate::input::read_file(&mpath, crate::manifest::MAX_FILE_BYTES)?;
    let lib = crate::manifest::Manifest::from_bytes(&mbytes).map_err(|e| {
        Error::input(
            &mpath,
            format!("{}: not a tilegen library manifest: {e}", mpath.display()),
        )
    })?;
    let mut files = FileSet::new();
    for rel in &lib.files {
        archive::check_member_path(rel)
            .map_err(|m| Error::input(&mpath, format!("{}: {m}", mpath.display())))?;
        let p = dir.join(rel);
        files.insert(
            rel.clone(),
            crate::input::read_file(&p, Limits::default().max_member_bytes)?,
        );
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
