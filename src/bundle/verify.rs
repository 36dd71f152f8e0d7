//! Verifying a bundle as it streams: each member is hashed (and its PTX ISA read from its
//! head) while it goes past, to a `Store` that drops it (`bundle verify`), keeps it in
//! memory ([`open`]) or stages it on disk ([`super::stage`]); then every digest is checked
//! against `bundle.json` and `bundle.json` against the library it describes. The archive is
//! read from its file once, after its signature, and never held whole.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::output::FileSet;

use super::manifest::{self, BundleManifest, Digest, HEAD_BYTES};
use super::sign::{self, SignaturePolicy, Signed};
use super::{archive, bad, Bundle, Limits};

/// The longest `bundle.json` or `manifest.json` read (both are held whole).
const MAX_JSON_BYTES: u64 = crate::manifest::MAX_FILE_BYTES;

/// Where member bytes go while a bundle streams: nowhere (`bundle verify`), into memory
/// ([`open`]) or into a staging folder ([`super::stage_signed`], [`super::unpack()`]). Only errors of the store
/// itself come back, as I/O errors.
pub(super) trait Store {
    fn begin(&mut self, path: &str, size: u64) -> Result<()>;
    fn chunk(&mut self, bytes: &[u8]) -> Result<()>;
    fn end(&mut self) -> Result<()>;
}

/// `bundle verify`: every member is hashed and dropped.
struct Discard;

impl Store for Discard {
    fn begin(&mut self, _: &str, _: u64) -> Result<()> {
        Ok(())
    }
    fn chunk(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn end(&mut self) -> Result<()> {
        Ok(())
    }
}

/// [`open`]: the library files in memory.
#[derive(Default)]
struct Memory {
    files: FileSet,
    current: Option<(String, Vec<u8>)>,
}

impl Store for Memory {
    fn begin(&mut self, path: &str, size: u64) -> Result<()> {
        self.current = Some((
            path.to_string(),
            Vec::with_capacity(size.min(1 << 24) as usize),
        ));
        Ok(())
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some((_, data)) = &mut self.current {
            data.extend_from_slice(bytes);
        }
        Ok(())
    }
    fn end(&mut self) -> Result<()> {
        if let Some((path, data)) = self.current.take() {
            self.files.insert(path, data);
        }
        Ok(())
    }
}

/// Checks each member as it streams past (sha256, size, the PTX ISA of its head) and hands
/// its bytes to a [`Store`]. `bundle.json` and the library's `manifest.json` are also kept
/// whole: verification needs both.
struct Verifier<'a> {
    store: &'a mut dyn Store,
    digests: BTreeMap<String, Digest>,
    bundle_json: Option<Vec<u8>>,
    library_json: Option<Vec<u8>>,
    current: Option<Current>,
    /// Why the store failed: an I/O error, reported as such rather than as a bad bundle.
    store_error: Option<Error>,
}

struct Current {
    path: String,
    hasher: Sha256,
    bytes: u64,
    head: Vec<u8>,
    whole: Option<Vec<u8>>,
    stored: bool,
}

impl<'a> Verifier<'a> {
    fn new(store: &'a mut dyn Store) -> Self {
        Verifier {
            store,
            digests: BTreeMap::new(),
            bundle_json: None,
            library_json: None,
            current: None,
            store_error: None,
        }
    }

    fn store(&mut self, r: Result<()>) -> std::result::Result<(), String> {
        r.map_err(|e| {
            let m = e.to_string();
            self.store_error = Some(e);
            m
        })
    }
}

impl archive::Visit for Verifier<'_> {
    fn begin(&mut self, path: &str, size: u64) -> std::result::Result<(), String> {
        let is_bundle_json = path == manifest::FILE_NAME;
        let keep = is_bundle_json || path == crate::manifest::FILE_NAME;
        if keep && size > MAX_JSON_BYTES {
            return Err(format!(
                "`{path}` is {size} bytes, over the limit of {MAX_JSON_BYTES} for the JSON files \
                 a bundle holds in memory"
            ));
        }
        self.current = Some(Current {
            path: path.to_string(),
            hasher: Sha256::new(),
            bytes: 0,
            head: Vec::new(),
            whole: keep.then(|| Vec::with_capacity(size.min(1 << 24) as usize)),
            stored: !is_bundle_json,
        });
        if is_bundle_json {
            return Ok(());
        }
        let r = self.store.begin(path, size);
        self.store(r)
    }

    fn chunk(&mut self, bytes: &[u8]) -> std::result::Result<(), String> {
        let Some(c) = &mut self.current else {
            return Ok(());
        };
        c.hasher.update(bytes);
        c.bytes += bytes.len() as u64;
        if c.head.len() < HEAD_BYTES {
            let n = (HEAD_BYTES - c.head.len()).min(bytes.len());
            c.head.extend_from_slice(&bytes[..n]);
        }
        if let Some(w) = &mut c.whole {
            w.extend_from_slice(bytes);
        }
        if c.stored {
            let r = self.store.chunk(bytes);
            return self.store(r);
        }
        Ok(())
    }

    fn end(&mut self) -> std::result::Result<(), String> {
        let Some(c) = self.current.take() else {
            return Ok(());
        };
        if !c.stored {
            self.bundle_json = c.whole;
            return Ok(());
        }
        if c.path == crate::manifest::FILE_NAME {
            self.library_json = c.whole;
        }
        self.digests.insert(
            c.path,
            Digest {
                sha256: hex::encode(c.hasher.finalize()),
                bytes: c.bytes,
                ptx_isa: manifest::ptx_isa_version(&c.head),
            },
        );
        let r = self.store.end();
        self.store(r)
    }
}

/// Verified bundle contents, as streaming verification leaves them.
pub(super) struct Checked {
    pub manifest: BundleManifest,
    pub manifest_bytes: Vec<u8>,
}

/// Reads the archive from `input` (`len` bytes) through a [`Verifier`] into `store`, then
/// checks every member against `bundle.json`, nothing missing or extra, and `bundle.json`
/// against the library it describes. `Err(Ok(e))` is the store's own I/O error.
fn verify_stream<R: BufRead>(
    input: R,
    len: u64,
    limits: &Limits,
    store: &mut dyn Store,
) -> std::result::Result<Checked, std::result::Result<Error, String>> {
    let mut v = Verifier::new(store);
    let read = archive::read_from(input, len, limits, &mut v);
    if let Some(e) = v.store_error.take() {
        return Err(Ok(e));
    }
    read.map_err(Err)?;
    check_digests(v).map_err(Err)
}

fn check_digests(v: Verifier<'_>) -> std::result::Result<Checked, String> {
    let files = &v.digests;
    let manifest_bytes = v.bundle_json.ok_or_else(|| {
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
        let d = files.get(&member.path).ok_or_else(|| {
            format!(
                "`{}` is listed in `{}` but missing from the archive",
                member.path,
                manifest::FILE_NAME
            )
        })?;
        let differs = if d.bytes != member.bytes {
            Some((format!("is {} bytes", d.bytes), member.bytes.to_string()))
        } else if d.sha256 != member.sha256 {
            Some((format!("has sha256 {}", d.sha256), member.sha256.clone()))
        } else {
            None
        };
        if let Some((got, want)) = differs {
            return Err(format!(
                "`{}` {got}, but `{}` says {want}",
                member.path,
                manifest::FILE_NAME
            ));
        }
    }
    if let Some(extra) = files.keys().find(|p| !listed.contains(p.as_str())) {
        return Err(format!(
            "`{extra}` is in the archive but not listed in `{}`",
            manifest::FILE_NAME
        ));
    }
    let expected =
        BundleManifest::describe_digests(v.library_json.as_deref(), files, m.source_date_epoch)?;
    if expected != m {
        return Err(format!(
            "`{}` does not describe its library (versions, archs, PTX ISA or instance count differ from `{}`)",
            manifest::FILE_NAME,
            crate::manifest::FILE_NAME
        ));
    }
    Ok(Checked {
        manifest: m,
        manifest_bytes,
    })
}

/// Checks archive bytes: every member against `bundle.json`, nothing missing or extra, and
/// `bundle.json` against the library it describes.
pub fn verify_bytes(bytes: &[u8], limits: &Limits) -> std::result::Result<Bundle, String> {
    let mut mem = Memory::default();
    let c = verify_stream(bytes, bytes.len() as u64, limits, &mut mem).map_err(|e| match e {
        Ok(e) => e.to_string(),
        Err(m) => m,
    })?;
    Ok(Bundle {
        manifest: c.manifest,
        manifest_bytes: c.manifest_bytes,
        files: mem.files,
    })
}

/// Reads the file at `path` once, front to back, hashing what it reads (to tell whether the
/// file changed between the signature check and the read).
struct Hashing<R> {
    inner: R,
    hasher: Option<Sha256>,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
}

impl<R: Seek> Seek for Hashing<R> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// The signature check (when `policy` is given) and then the streaming verification of the
/// bundle at `path`, members going to `store`. The archive is never held in memory: the
/// signature is checked by streaming the file through minisign's prehash (BLAKE2b), then the
/// same open file is read again from the start; a sha256 of both passes must agree, so the
/// bytes read are the bytes that were signed.
pub(super) fn stream(
    path: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
    store: &mut dyn Store,
) -> Result<(Checked, Option<Signed>)> {
    let Some(file) = crate::input::open_regular(path).at(path)? else {
        return Err(bad(path, "not a regular file"));
    };
    let len = file.metadata().at(path)?.len();
    if len > limits.max_archive_bytes {
        return Err(bad(
            path,
            format!(
                "the archive is {len} bytes, over the limit of {}",
                limits.max_archive_bytes
            ),
        ));
    }
    let mut file = Hashing {
        inner: file,
        hasher: policy.is_some().then(Sha256::new),
    };
    let (signed, signed_hash) = match policy {
        Some(p) => {
            let signed = sign::check(path, &mut file, p)?;
            // Only a verified signature read the file; then the second pass must agree.
            let h = match signed {
                Signed::Yes { .. } => file.hasher.replace(Sha256::new()).map(|h| h.finalize()),
                Signed::Unsigned => {
                    file.hasher = None;
                    None
                }
            };
            file.seek(SeekFrom::Start(0)).at(path)?;
            (Some(signed), h)
        }
        None => (None, None),
    };
    let mut input = std::io::BufReader::with_capacity(64 << 10, file);
    let checked = verify_stream(&mut input, len, limits, store).map_err(|e| match e {
        Ok(e) => e,
        Err(m) => bad(path, m),
    })?;
    if let Some(want) = signed_hash {
        let got = input.into_inner().hasher.map(|h| h.finalize());
        if got != Some(want) {
            return Err(bad(
                path,
                "the file changed while it was being read: its contents are not the bytes whose signature was checked",
            ));
        }
    }
    Ok((checked, signed))
}

/// Reads and verifies the bundle at `path`, keeping its files in memory (once; see
/// [`check_signed`] and [`super::stage_signed`] for bundles too large for that).
pub fn open(path: &Path, limits: &Limits) -> Result<Bundle> {
    open_signed(path, limits, None).map(|(b, _)| b)
}

/// [`open`], first checking the archive's raw bytes against its detached signature
/// `FILE.minisig` when `policy` is given (see [`SignaturePolicy`]): nothing in the archive is read
/// before the signature verifies.
pub fn open_signed(
    path: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(Bundle, Option<Signed>)> {
    let mut mem = Memory::default();
    let (c, signed) = stream(path, limits, policy, &mut mem)?;
    Ok((
        Bundle {
            manifest: c.manifest,
            manifest_bytes: c.manifest_bytes,
            files: mem.files,
        },
        signed,
    ))
}

/// [`open_signed`] without keeping anything: every member is hashed as it streams past and
/// dropped, so memory stays bounded by buffers (plus `bundle.json` and `manifest.json`)
/// whatever the bundle's size. For `bundle verify` and `bundle inspect`.
pub fn check_signed(
    path: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(BundleManifest, Option<Signed>)> {
    let (c, signed) = stream(path, limits, policy, &mut Discard)?;
    Ok((c.manifest, signed))
}
