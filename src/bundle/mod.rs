//! Prebuilt kernel bundles: one reproducible `.tar.gz` holding a kernel library (what
//! `tilegen generate` writes) and `bundle.json`, which lists every member with its sha256
//! and size, the tilegen and NVRTC versions, the archs and the PTX ISA versions.
//!
//! - [`create`] packs a library folder;
//! - [`check_signed`] verifies a bundle as a stream, holding no member (`bundle verify`,
//!   `bundle inspect`); [`stage_signed`] verifies it while writing each member into a private
//!   staging folder (`generate --bundle`); [`open`] keeps the files in memory. The archive is
//!   read from its file once, never held whole (hostile input: see [`archive::read_from`]
//!   and [`Limits`]);
//! - [`unpack`] verifies while streaming into a temporary folder, then installs atomically;
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

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::output::FileSet;

pub use archive::Limits;
pub use manifest::{BundleManifest, Member};
pub use sign::{SignaturePolicy, Signed};

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

/// A member's size, sha256 and the PTX ISA version its first bytes declare, if any: all that
/// verification needs of it once it has streamed past.
#[derive(Debug, Clone)]
struct Digest {
    sha256: String,
    bytes: u64,
    ptx_isa: Option<String>,
}

/// Where member bytes go while a bundle streams: nowhere (`bundle verify`), into memory
/// ([`open`]) or into a staging folder ([`stage_signed`], [`unpack`]). Only errors of the store
/// itself come back, as I/O errors.
trait Store {
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

/// Bytes of a member kept from its start, for [`crate::loader::Version::of_ptx`] (which reads
/// no further).
const HEAD_BYTES: usize = 4096;

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
struct Checked {
    manifest: BundleManifest,
    manifest_bytes: Vec<u8>,
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
        if d.bytes != member.bytes {
            return Err(format!(
                "`{}` is {} bytes, but `{}` says {}",
                member.path,
                d.bytes,
                manifest::FILE_NAME,
                member.bytes
            ));
        }
        if d.sha256 != member.sha256 {
            return Err(format!(
                "`{}` has sha256 {}, but `{}` says {}",
                member.path,
                d.sha256,
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
    let expected = describe_digests(v.library_json.as_deref(), files, m.source_date_epoch)?;
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

/// [`BundleManifest::describe`] from digests instead of the files themselves: the same checks
/// of the files against `manifest.json`, with the same messages.
fn describe_digests(
    library_json: Option<&[u8]>,
    files: &BTreeMap<String, Digest>,
    source_date_epoch: u64,
) -> std::result::Result<BundleManifest, String> {
    let mut only_manifest = FileSet::new();
    if let Some(b) = library_json {
        only_manifest.insert(crate::manifest::FILE_NAME.into(), b.to_vec());
    }
    let lib = manifest::library_manifest(&only_manifest)?;
    drop(only_manifest);
    let listed: std::collections::BTreeSet<&str> = lib
        .files
        .iter()
        .map(String::as_str)
        .chain([crate::manifest::FILE_NAME])
        .collect();
    if let Some(missing) = listed.iter().find(|p| !files.contains_key(**p)) {
        return Err(format!(
            "`{missing}` is listed in `{}` but missing",
            crate::manifest::FILE_NAME
        ));
    }
    if let Some(extra) = files.keys().find(|p| !listed.contains(p.as_str())) {
        return Err(format!(
            "`{extra}` is not listed in `{}`",
            crate::manifest::FILE_NAME
        ));
    }
    let check = |r: &crate::manifest::FileRef| -> std::result::Result<&Digest, String> {
        let d = files.get(&r.path).ok_or_else(|| {
            format!(
                "`{}` is described in `{}` but missing",
                r.path,
                crate::manifest::FILE_NAME
            )
        })?;
        if d.bytes != r.bytes || d.sha256 != r.sha256 {
            return Err(format!(
                "`{}` does not match `{}` (sha256 {}, expected {})",
                r.path,
                crate::manifest::FILE_NAME,
                d.sha256,
                r.sha256
            ));
        }
        Ok(d)
    };
    for inst in &lib.instances {
        check(&inst.source)?;
        for t in &inst.targets {
            check(&t.ptx)?;
            check(&t.cubin)?;
        }
    }
    let mut archs = std::collections::BTreeSet::new();
    let mut ptx_isa = std::collections::BTreeSet::new();
    for inst in &lib.instances {
        for t in &inst.targets {
            archs.insert(t.arch.as_str().to_string());
            let v = files[&t.ptx.path]
                .ptx_isa
                .clone()
                .ok_or_else(|| format!("`{}` has no `.version X.Y` line", t.ptx.path))?;
            ptx_isa.insert(v);
        }
    }
    Ok(BundleManifest {
        format: manifest::FORMAT,
        tilegen_version: lib.tilegen_version.clone(),
        nvrtc_version: lib.nvrtc_version.clone(),
        library_format: lib.format,
        archs: archs.into_iter().collect(),
        ptx_isa: ptx_isa.into_iter().collect(),
        instances: lib.instances.len(),
        source_date_epoch,
        members: files
            .iter()
            .map(|(path, d)| Member {
                path: path.clone(),
                sha256: d.sha256.clone(),
                bytes: d.bytes,
            })
            .collect(),
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
fn stream(
    path: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
    store: &mut dyn Store,
) -> Result<(Checked, Option<Signed>)> {
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
    let file = fs::File::open(path).at(path)?;
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
/// [`check_signed`] and [`stage_signed`] for bundles too large for that).
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

/// A verified bundle whose members lie on disk, in a private staging folder removed when
/// this is dropped (small members are kept in memory, up to a fixed budget).
#[derive(Debug)]
pub struct Staged {
    pub manifest: BundleManifest,
    /// `bundle.json` exactly as stored.
    pub manifest_bytes: Vec<u8>,
    dir: tempfile::TempDir,
    /// Library path → where its bytes are.
    files: BTreeMap<String, Held>,
}

/// Where a staged member's bytes are.
#[derive(Debug)]
enum Held {
    Memory(Vec<u8>),
    File(PathBuf),
}

impl Held {
    fn open(&self) -> Result<Box<dyn Read + '_>> {
        Ok(match self {
            Held::Memory(b) => Box::new(b.as_slice()),
            Held::File(p) => Box::new(fs::File::open(p).at(p)?),
        })
    }

    fn len(&self) -> Result<u64> {
        Ok(match self {
            Held::Memory(b) => b.len() as u64,
            Held::File(p) => fs::metadata(p).at(p)?.len(),
        })
    }
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

    /// The library's `manifest.json`, parsed.
    pub fn library_manifest(&self) -> std::result::Result<crate::manifest::Manifest, String> {
        let mut only = FileSet::new();
        if let Ok(b) = self.read(crate::manifest::FILE_NAME) {
            only.insert(crate::manifest::FILE_NAME.into(), b);
        }
        manifest::library_manifest(&only)
    }

    /// The staging folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Writes each member to its own flat file (`staged/N`, never a member's own name, so
/// hostile names touch nothing before all checks pass) in a temporary folder made, on the
/// first such member, in `parent` with a name starting with `prefix`; small members stay
/// in memory.
struct Disk {
    parent: PathBuf,
    prefix: String,
    dir: Option<tempfile::TempDir>,
    files: BTreeMap<String, Held>,
    small: u64,
    current: Option<(String, Writing)>,
}

enum Writing {
    Memory(Vec<u8>),
    File(PathBuf, std::io::BufWriter<fs::File>),
}

impl Disk {
    fn new(parent: &Path, prefix: &str) -> Self {
        Disk {
            parent: parent.to_path_buf(),
            prefix: prefix.to_string(),
            dir: None,
            files: BTreeMap::new(),
            small: 0,
            current: None,
        }
    }

    fn into_staged(mut self, c: Checked) -> Result<Staged> {
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

    fn make_dir(&self) -> Result<tempfile::TempDir> {
        fs::create_dir_all(&self.parent).at(&self.parent)?;
        let d = tempfile::Builder::new()
            .prefix(&self.prefix)
            .tempdir_in(&self.parent)
            .at(&self.parent)?;
        let staged = d.path().join("staged");
        fs::create_dir(&staged).at(&staged)?;
        Ok(d)
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
            Some(d) => d.path().to_path_buf(),
            None => {
                let d = self.make_dir()?;
                let p = d.path().to_path_buf();
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

/// Verifies the bundle at `path` (its signature first, as [`open_signed`]), writing each
/// member into a private staging folder in the system's temporary folder as it streams, so
/// at most one member's buffers are in memory. Nothing is staged before the signature
/// verifies; on any failure the staging folder is removed. Leftovers of killed runs (whose
/// process is gone) are removed first.
pub fn stage_signed(
    path: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(Staged, Option<Signed>)> {
    let tmp = std::env::temp_dir();
    for old in unpack::leftovers_with_prefix(&tmp, STAGE_PREFIX) {
        let _ = fs::remove_dir_all(&old);
    }
    let mut disk = Disk::new(&tmp, &format!("{STAGE_PREFIX}{}-", std::process::id()));
    let (c, signed) = stream(path, limits, policy, &mut disk)?;
    Ok((disk.into_staged(c)?, signed))
}

/// Verifies the bundle at `path`, then installs it into `dest` (absent or an empty folder)
/// atomically: nothing is written when any check fails.
pub fn unpack(path: &Path, dest: &Path, limits: &Limits) -> Result<BundleManifest> {
    unpack_signed(path, dest, limits, None).map(|(b, _)| b)
}

/// [`unpack`] with the signature check of [`open_signed`] first. Members are written into the
/// temporary folder beside `dest` as they stream (each under a number until every check has
/// passed), then moved to their names and the folder renamed into place.
pub fn unpack_signed(
    path: &Path,
    dest: &Path,
    limits: &Limits,
    policy: Option<SignaturePolicy>,
) -> Result<(BundleManifest, Option<Signed>)> {
    let (parent, prefix) = unpack::prepare(dest)?;
    let created = unpack::missing_ancestors(&parent);
    let mut disk = Disk::new(&parent, &prefix);
    let (c, signed) = match stream(path, limits, policy, &mut disk) {
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
    unpack::install(&staged, dest)?;
    Ok((staged.manifest, signed))
}

/// The library a staged bundle makes (see `generate::finish_library`): its files on disk
/// but `manifest.json` and `bindings.rs`, which are generated.
pub struct StagedLibrary<'a> {
    staged: &'a Staged,
    /// Library paths taken from the bundle, sorted.
    kept: Vec<String>,
    /// `bindings.rs` (when wanted) and `manifest.json`, generated.
    generated: FileSet,
}

/// Builds the library files for a verified, staged bundle (`lib` is its `manifest.json`):
/// its files, with `bindings.rs` generated by this tilegen (or left out, and unlisted, when
/// `bindings` is false) and `manifest.json` listing them. Reads one PTX file at a time.
pub fn staged_library(
    staged: &Staged,
    mut lib: crate::manifest::Manifest,
    bindings: bool,
) -> Result<StagedLibrary<'_>> {
    let kept: Vec<String> = staged
        .paths()
        .filter(|p| *p != crate::manifest::FILE_NAME && *p != crate::bindings::FILE_NAME)
        .map(str::to_string)
        .collect();
    lib.files = kept.clone();
    let mut generated = FileSet::new();
    if bindings {
        let text = crate::bindings::generate(&lib, &|p| {
            if kept.iter().any(|k| k == p) {
                staged.read(p).ok()
            } else {
                None
            }
        })?;
        generated.insert(crate::bindings::FILE_NAME.into(), text.into_bytes());
        lib.files.push(crate::bindings::FILE_NAME.into());
        lib.files.sort();
    }
    generated.insert(crate::manifest::FILE_NAME.into(), lib.to_bytes());
    Ok(StagedLibrary {
        staged,
        kept,
        generated,
    })
}

/// `generate::write_or_check` for a staged library: each file goes from its staged copy to
/// the library one at a time (kernels first, then `bindings.rs`, `manifest.json` last), only
/// when its bytes change; files an older manifest listed that are no longer produced are
/// removed. With `opts.check`, compares instead and fails listing the differences.
pub fn write_or_check(
    opts: &crate::generate::Options,
    files: &StagedLibrary<'_>,
    against: &str,
    report: &mut crate::generate::Report,
) -> Result<()> {
    use crate::output;
    let out = &opts.out;
    let produced = |rel: &str| {
        files.generated.contains_key(rel) || files.kept.binary_search(&rel.to_string()).is_ok()
    };
    if opts.check {
        let _lock = output::lock_library(out, false);
        let previous = previous_files(out);
        let mut names: Vec<&str> = files
            .kept
            .iter()
            .map(String::as_str)
            .chain(files.generated.keys().map(String::as_str))
            .collect();
        names.sort();
        let mut diffs = Vec::new();
        for rel in names {
            let target = out.join(rel);
            let same = match files.generated.get(rel) {
                Some(bytes) => fs::read(&target).map(|old| &old == bytes),
                None => match files.staged.held(rel) {
                    Ok(src) => same_contents(src, &target),
                    Err(_) => Ok(false),
                },
            };
            match same {
                Ok(true) => {}
                Ok(false) => diffs.push(format!("differs: {rel}")),
                Err(_) => diffs.push(format!("missing: {rel}")),
            }
        }
        for rel in &previous {
            if !produced(rel) && out.join(rel).is_file() {
                diffs.push(format!("stale: {rel}"));
            }
        }
        let all = files
            .kept
            .iter()
            .chain(files.generated.keys())
            .chain(&previous);
        for rel in output::temp_files(out, all.map(String::as_str)) {
            diffs.push(format!("temporary file left by an interrupted run: {rel}"));
        }
        if !diffs.is_empty() {
            return Err(Error::OutOfDate(format!(
                "{} is out of date with {against} ({} differences):\n  {}",
                out.display(),
                diffs.len(),
                diffs.join("\n  ")
            )));
        }
        return Ok(());
    }
    fs::create_dir_all(out).at(out)?;
    let lock = output::lock_library(out, true);
    let previous = previous_files(out);
    let stale: Vec<String> = previous
        .iter()
        .filter(|f| !produced(f) && is_safe_relative(f))
        .cloned()
        .collect();
    // Without the lock another writer's temporary files could be live: leave them.
    if lock.held() {
        let all = files
            .kept
            .iter()
            .chain(files.generated.keys())
            .chain(&previous);
        for rel in output::temp_files(out, all.map(String::as_str)) {
            let path = out.join(&rel);
            fs::remove_file(&path).at(&path)?;
            report.removed.push(path);
        }
    }
    // Kernels first, then `bindings.rs`, `manifest.json` last (`output::publication_order`).
    for rel in &files.kept {
        let target = out.join(rel);
        let src = files.staged.held(rel)?;
        if same_contents(src, &target).unwrap_or(false) {
            report.unchanged += 1;
        } else {
            copy_atomic(src, &target)?;
            report.written.push(target);
        }
    }
    let mut ordered: Vec<(&String, &Vec<u8>)> = files.generated.iter().collect();
    ordered.sort_by_key(|(rel, _)| output::publication_order(rel));
    for (rel, bytes) in ordered {
        let target = out.join(rel);
        if output::write_if_changed(&target, bytes)? {
            report.written.push(target);
        } else {
            report.unchanged += 1;
        }
    }
    for rel in stale {
        let path = out.join(&rel);
        if path.is_file() {
            fs::remove_file(&path).at(&path)?;
            report.removed.push(path.clone());
            let mut parent = path.parent();
            while let Some(p) = parent {
                if p == out.as_path() || fs::remove_dir(p).is_err() {
                    break;
                }
                parent = p.parent();
            }
        }
    }
    Ok(())
}

/// The files the library manifest in `dir` lists (none when there is none).
fn previous_files(dir: &Path) -> Vec<String> {
    fs::read(dir.join(crate::manifest::FILE_NAME))
        .ok()
        .and_then(|b| crate::manifest::Manifest::from_bytes(&b).ok())
        .map(|m| m.files)
        .unwrap_or_default()
}

/// Only plain relative paths inside the library may be removed.
fn is_safe_relative(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty()
        && path.is_relative()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Whether a staged member and a file hold the same bytes, compared a buffer at a time.
fn same_contents(a: &Held, b: &Path) -> std::io::Result<bool> {
    let io = |e: Error| match e {
        Error::Io { source, .. } => source,
        e => std::io::Error::other(e.to_string()),
    };
    let fb = fs::File::open(b)?;
    if a.len().map_err(io)? != fb.metadata()?.len() {
        return Ok(false);
    }
    let mut ra = std::io::BufReader::with_capacity(64 << 10, a.open().map_err(io)?);
    let mut rb = std::io::BufReader::with_capacity(64 << 10, fb);
    loop {
        let (ba, bb) = (ra.fill_buf()?, rb.fill_buf()?);
        if ba.is_empty() || bb.is_empty() {
            return Ok(ba.is_empty() && bb.is_empty());
        }
        let n = ba.len().min(bb.len());
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
        ra.consume(n);
        rb.consume(n);
    }
}

/// Publishes the staged member `src` at `dest` as `output::write_if_changed` writes: in one
/// rename, keeping the mode of the file it replaces (else 0644). A staged file is moved
/// (used up) when both are on one file system, else copied into a temporary file beside
/// `dest` first.
fn copy_atomic(src: &Held, dest: &Path) -> Result<()> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).at(dir)?;
    #[cfg(unix)]
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(dest)
            .map(|m| m.permissions())
            .unwrap_or_else(|_| fs::Permissions::from_mode(0o644))
    };
    #[cfg(unix)]
    if let Held::File(p) = src {
        if fs::set_permissions(p, mode.clone()).is_ok() && fs::rename(p, dest).is_ok() {
            return Ok(());
        }
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(crate::output::TEMP_PREFIX)
        .tempfile_in(dir)
        .at(dir)?;
    std::io::copy(&mut src.open()?, tmp.as_file_mut()).at(tmp.path())?;
    #[cfg(unix)]
    tmp.as_file().set_permissions(mode).at(tmp.path())?;
    tmp.persist(dest).map_err(|e| Error::io(dest, e.error))?;
    Ok(())
}
