//! Detached bundle signatures in minisign format (Ed25519; readable by the `minisign` tool
//! itself): `tilegen bundle sign` writes `FILE.minisig` beside the bundle, and a bundle is
//! checked against a public key on the archive's raw bytes, before anything in it is read.
//!
//! Keys are minisign key files: `tilegen bundle keygen` writes an unencrypted pair for tests
//! and CI secrets; keys made by `minisign -G` work too (an encrypted secret key is decrypted
//! with `TILEGEN_SIGN_PASSWORD`, never by prompting).

use std::fs;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use minisign::{KeyPair, PublicKeyBox, SecretKey, SecretKeyBox, SignatureBox};

/// A minisign public key, as [`read_public_key`] gives it.
pub use minisign::PublicKey;

use crate::error::{Error, IoContext, Result};

/// The key file names `keygen` writes.
pub const PUBLIC_KEY_FILE: &str = "tilegen.pub";
pub const SECRET_KEY_FILE: &str = "tilegen.key";

/// Where the signature of `file` lives: `FILE.minisig`.
pub fn signature_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".minisig");
    PathBuf::from(name)
}

fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::Bundle {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn key_id(keynum: &[u8]) -> String {
    // minisign prints key IDs as the little-endian u64, in upper-case hex.
    let mut b = [0u8; 8];
    b.copy_from_slice(&keynum[..8.min(keynum.len())]);
    format!("{:016X}", u64::from_le_bytes(b))
}

/// Writes a new unencrypted key pair into `dir` (created if absent) as `tilegen.pub` and
/// `tilegen.key`; refuses to overwrite either. Returns (public, secret) key paths.
pub fn keygen(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    fs::create_dir_all(dir).at(dir)?;
    let (pk_path, sk_path) = (dir.join(PUBLIC_KEY_FILE), dir.join(SECRET_KEY_FILE));
    for p in [&pk_path, &sk_path] {
        if p.exists() {
            return Err(Error::Usage(format!(
                "{} exists; keygen never overwrites a key",
                p.display()
            )));
        }
    }
    let KeyPair { pk, sk } = KeyPair::generate_unencrypted_keypair()
        .map_err(|e| Error::Environment(format!("generating a key pair: {e}")))?;
    let id = key_id(pk.keynum());
    let pk_text = pk
        .to_box()
        .map_err(|e| Error::Environment(format!("encoding the public key: {e}")))?
        .into_string();
    let sk_text = sk
        .to_box(Some(&format!("tilegen secret key {id} (unencrypted)")))
        .map_err(|e| Error::Environment(format!("encoding the secret key: {e}")))?
        .into_string();
    write_new(&sk_path, sk_text.as_bytes(), true)?;
    write_new(&pk_path, pk_text.as_bytes(), false)?;
    Ok((pk_path, sk_path))
}

/// Creates `path` (which must not exist) with `bytes`; private files are readable by the owner
/// only.
fn write_new(path: &Path, bytes: &[u8], private: bool) -> Result<()> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = opts.open(path).at(path)?;
    f.write_all(bytes).at(path)?;
    f.sync_all().at(path)
}

fn read_secret_key(path: &Path) -> Result<SecretKey> {
    let text = fs::read_to_string(path).at(path)?;
    let sk_box = SecretKeyBox::from_string(&text).map_err(|e| {
        Error::Usage(format!(
            "{}: not a minisign secret key: {e}",
            path.display()
        ))
    })?;
    let sk = match crate::env::var("TILEGEN_SIGN_PASSWORD") {
        Some(password) => sk_box.into_secret_key(Some(password)),
        None => sk_box.into_unencrypted_secret_key(),
    };
    sk.map_err(|e| {
        Error::Usage(format!(
            "{}: cannot read the secret key ({e}); an encrypted key needs its password in \
             TILEGEN_SIGN_PASSWORD",
            path.display()
        ))
    })
}

/// A public key from `key`: a minisign public key file, or the key itself (the base64 line
/// that starts with `RW`, as `minisign -P` takes it).
pub fn read_public_key(key: &str) -> Result<PublicKey> {
    let path = Path::new(key);
    let parsed = if path.is_file() {
        let text = fs::read_to_string(path).at(path)?;
        PublicKeyBox::from_string(&text).and_then(PublicKey::from_box)
    } else if key.trim().starts_with("RW") {
        PublicKey::from_base64(key.trim())
    } else {
        return Err(Error::Usage(format!(
            "--pubkey `{key}` is neither a public key file nor a minisign public key (RW…)"
        )));
    };
    parsed.map_err(|e| Error::Usage(format!("--pubkey `{key}`: not a minisign public key: {e}")))
}

/// Signs the file at `file` with the secret key at `secret_key`, writing `FILE.minisig`
/// (replacing an older one). Returns the signature's path.
pub fn sign(file: &Path, secret_key: &Path) -> Result<PathBuf> {
    let sk = read_secret_key(secret_key)?;
    // Read as a stream: minisign prehashes (BLAKE2b) what it signs.
    let data = std::io::BufReader::new(fs::File::open(file).at(file)?);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // As the minisign tool writes it; the file name is informative only (the signature
    // covers the bytes, so a renamed bundle still verifies).
    let trusted = format!(
        "timestamp:{}\tfile:{name}\thashed",
        super::source_date_epoch()
            .ok()
            .filter(|&t| t > 0)
            .unwrap_or_else(now)
    );
    let sig = minisign::sign(
        None,
        &sk,
        data,
        Some(&trusted),
        Some("signature of a tilegen bundle"),
    )
    .map_err(|e| bad(file, format!("signing failed: {e}")))?;
    let out = signature_path(file);
    // Written whole beside the bundle, then renamed: never a half signature.
    let mut tmp = out.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, sig.into_string()).at(&tmp)?;
    fs::rename(&tmp, &out).at(&out)?;
    Ok(out)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What to demand of a bundle's signature.
#[derive(Debug, Clone, Copy)]
pub struct SignaturePolicy<'a> {
    /// The key the signature must verify with.
    pub pubkey: &'a PublicKey,
    /// An absent `FILE.minisig` is an error (else the bundle is taken unsigned).
    pub required: bool,
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signed {
    /// Verified; the signature's trusted comment.
    Yes { key_id: String, comment: String },
    /// No signature, and none was required.
    Unsigned,
}

/// Checks `data`, the contents of the bundle at `file` (read to its end, as a stream), against
/// `FILE.minisig`. Only prehashed signatures (what minisign and `tilegen bundle sign` write)
/// are accepted, so the archive is never held in memory for this.
pub fn check<R: Read + Seek>(file: &Path, data: R, policy: SignaturePolicy) -> Result<Signed> {
    let sig_path = signature_path(file);
    let raw = match fs::read(&sig_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return if policy.required {
                Err(bad(
                    file,
                    format!(
                        "unsigned: there is no `{}`, and a signature is required",
                        sig_path.display()
                    ),
                ))
            } else {
                Ok(Signed::Unsigned)
            };
        }
        Err(e) => return Err(e).at(&sig_path),
    };
    // A signature file is text; anything else is a bad signature, not an I/O failure.
    let text = String::from_utf8(raw).map_err(|e| {
        bad(
            &sig_path,
            format!(
                "not a minisign signature: not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    let sig = SignatureBox::from_string(&text)
        .map_err(|e| bad(&sig_path, format!("not a minisign signature: {e}")))?;
    let want = key_id(policy.pubkey.keynum());
    let got = key_id(sig.keynum());
    if want != got {
        return Err(bad(
            file,
            format!(
                "signature check failed: it was signed with key {got}, not with the given public key {want}"
            ),
        ));
    }
    let failed = |e: &dyn std::fmt::Display| {
        bad(
            file,
            format!(
                "signature check failed ({e}): the bundle, or its signature's trusted comment, is not \
                 what key {want} signed"
            ),
        )
    };
    // Legacy (not prehashed) signatures are refused, before minisign would read the whole
    // file into memory to check one.
    if !sig.is_prehashed() {
        return Err(failed(&"Legacy signatures are not accepted"));
    }
    minisign::verify(policy.pubkey, &sig, data, true, false, false).map_err(|e| failed(&e))?;
    let comment = sig.trusted_comment().unwrap_or_default();
    Ok(Signed::Yes {
        key_id: want,
        comment,
    })
}
