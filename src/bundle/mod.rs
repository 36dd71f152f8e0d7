//! Prebuilt kernel bundles: one reproducible `.tar.gz` holding a kernel library (what
//! `tilegen generate` writes) and `bundle.json`, which lists every member with its sha256
//! and size, the tilegen and NVRTC versions, the archs and the PTX ISA versions.
//!
//! - [`create`] packs a library folder;
//! - [`open`] reads and verifies a bundle entirely in memory (hostile input: see
//!   [`archive::read`] and [`Limits`]);
//! - [`unpack`] verifies, then installs into a folder atomically;
//! - [`sign`]: detached minisign signatures (`FILE.minisig`), checked by [`open_signed`] and
//!   [`unpack_signed`] on the raw archive before anything in it is read;
//! - [`library`] builds a library from a bundle with no NVRTC (`tilegen generate --bundle`,
//!   [`crate::Builder::bundle`], `TILEGEN_BUNDLE`).
//!
//! Layout inside the archive: `bundle.json` first, then the library files sorted by path
//! (`bindings.rs`, `kernels/…`, `manifest.json`), all at the archive root.

pub mod archive;
pub mod library;
pub mod manifest;
pub mod sign;
pub mod unpack;

use std::fs;
use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::output::FileSet;

pub use archive::Limits;
pub use manifest::{BundleManifest, Member};
pub use sign::{SignaturePolicy, Signed};

/// A verified bundle, in memory.
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

/// Checks archive bytes: every member against `bundle.json`, nothing missing or extra, and
/// `bundle.json` against the library it describes.
pub fn verify_bytes(bytes: &[u8], limits: &Limits) -> std::result::Result<Bundle, String> {
    let mut files = FileSet::new();
    let mut manifest_bytes = None;
    for (path, data) in archive::read(bytes, limits)? {
        if path == manifest::FILE_NAME {
            manifest_bytes = Some(data);
        } else {
            files.insert(path, data);
        }
    }
    let manifest_bytes = manifest_bytes.ok_or_else(|| {
        format!(
            "no `{}` in the archive (not a tilegen bundle)",
            manifest::FILE_NAME
        )
    })?;
    let m = BundleManifest::parse(&manifest_bytes)?;
    let mut listed = std::collections::BTreeSet::new();
    for member in &m.members {
        archive::check_member_path(&member.path)
            .map_err(|e| format!("`{}` lists a bad name: {e}", manifest::FILE_NAME))?;
        if !listed.insert(member.path.as_str()) {
            return Err(format!(
                "`{}` lists `{}` twice",
                manifest::FILE_NAME,
                member.path
            ));
        }
        let data = files.get(&member.path).ok_or_else(|| {
            format!(
                "`{}` is listed in `{}` but missing from the archive",
                member.path,
                manifest::FILE_NAME
            )
        })?;
        if data.len() as u64 != member.bytes {
            return Err(format!(
                "`{}` is {} bytes, but `{}` says {}",
                member.path,
                data.len(),
                manifest::FILE_NAME,
                member.bytes
            ));
        }
        let sha = crate::hashing::sha256_hex(data);
        if sha != member.sha256 {
            return Err(format!(
                "`{}` has sha256 {sha}, but `{}` says {}",
                member.path,
                manifest::FILE_NAME,
                member.sha256
            ));
        }
    }
    if let Some(extra) = files.keys().find(|p| !listed.contains(p.as_str())) {
        return Err(format!(
            "`{extra}` is in the archive but not listed in `{}`",
            manifest::FILE_NAME
        ));
    }
    let expected = BundleManifest::describe(&files, m.source_date_epoch)?;
    if expected != m {
        return Err(format!(
            "`{}` does not describe its library (versions, archs, PTX ISA or instance count differ from `{}`)",
            manifest::FILE_NAME,
            crate::manifest::FILE_NAME
        ));
    }
    Ok(Bundle {
        manifest: m,
        manifest_bytes,
        files,
    })
}

/// Reads and verifies the bundle at `path`.
pub fn open(path: &Path, limits: &Limits) -> Result<Bundle> {
    open_signed(path, limits, None).map(|(b, _)| b)
}

/// [`open`], first checking the archive's raw bytes against its detached signature
/// `FILE.minisig` when `policy` is given (see [`sign::check`]): nothing in the archive is read
/// before the signature verifies.
pub fn open_signed(
    path: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(Bundle, Option<Signed>)> {
    let len = fs::metadata(path).at(path)?.len();
    if len > limits.max_archive_bytes {
        return Err(bad(
            path,
            format!(
                "the archive is {len} bytes, over the limit of {}",
                limits.max_archive_bytes
            ),
        ));
    }
    let bytes = fs::read(path).at(path)?;
    let signed = match policy {
        Some(p) => Some(sign::check(path, &bytes, p)?),
        None => None,
    };
    let bundle = verify_bytes(&bytes, limits).map_err(|m| bad(path, m))?;
    Ok((bundle, signed))
}

/// Verifies the bundle at `path`, then installs it into `dest` (absent or an empty folder)
/// atomically: nothing is written when any check fails.
pub fn unpack(path: &Path, dest: &Path, limits: &Limits) -> Result<Bundle> {
    unpack_signed(path, dest, limits, None).map(|(b, _)| b)
}

/// [`unpack`] with the signature check of [`open_signed`] first.
pub fn unpack_signed(
    path: &Path,
    dest: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(Bundle, Option<Signed>)> {
    let (bundle, signed) = open_signed(path, limits, policy)?;
    unpack::install(&bundle, dest)?;
    Ok((bundle, signed))
}
