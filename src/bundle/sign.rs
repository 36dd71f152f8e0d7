//! Detached bundle signatures in minisign format (Ed25519; readable by the `minisign` tool
//! itself): `tilegen bundle sign` writes `FILE.minisig` beside the bundle, and a bundle is
//! checked against a public key on the archive's raw bytes, before anything in it is read.
//!
//! Checking a signature needs no feature (the verify-only `minisign-verify` crate); creating
//! keys and signatures (`keygen`, `sign`) needs the `sign` feature.
//!
//! Keys are minisign key files: `tilegen bundle keygen` writes an unencrypted pair for tests
//! and CI secrets; keys made by `minisign -G` work too (an encrypted secret key is decrypted
//! with `TILEGEN_SIGN_PASSWORD`, never by prompting).

use std::fs;
use std::io::Read;
#[cfg(feature = "sign")]
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// A minisign public key, as [`read_public_key`] gives it.
#[derive(Debug, Clone)]
pub struct PublicKey {
    key: minisign_verify::PublicKey,
    /// The key ID, as minisign prints it.
    id: String,
}

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
    let n = 8.min(keynum.len());
    b[..n].copy_from_slice(&keynum[..n]);
    format!("{:016X}", u64::from_le_bytes(b))
}

/// The key ID inside a minisign key or signature line (base64 of two algorithm bytes, then the
/// eight ID bytes), which `minisign-verify` does not expose; `None` when the line is too short
/// or not base64.
fn key_id_of_line(b64: &str) -> Option<String> {
    fn sextet(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    // 16 characters are 12 bytes: the algorithm and the key ID.
    let chars = b64.trim().as_bytes().get(..16)?;
    let mut bytes = Vec::with_capacity(12);
    for quad in chars.chunks(4) {
        let mut v = 0u32;
        for &c in quad {
            v = (v << 6) | sextet(c)?;
        }
        bytes.extend_from_slice(&v.to_be_bytes()[1..]);
    }
    Some(key_id(&bytes[2..10]))
}

/// Writes a new unencrypted key pair into `dir` (created if absent) as `tilegen.pub` and
/// `tilegen.key`; refuses to overwrite either. Returns (public, secret) key paths.
#[cfg(feature = "sign")]
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
    let minisign::KeyPair { pk, sk } = minisign::KeyPair::generate_unencrypted_keypair()
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
#[cfg(feature = "sign")]
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

#[cfg(feature = "sign")]
fn read_secret_key(path: &Path) -> Result<minisign::SecretKey> {
    let text = read_key_file(path)?;
    let sk_box = minisign::SecretKeyBox::from_string(&text).map_err(|e| {
        Error::input(
            path,
            format!("{}: not a minisign secret key: {e}", path.display()),
        )
    })?;
    let sk = match crate::env::var("TILEGEN_SIGN_PASSWORD")? {
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

/// The text of a minisign key file the user named: a few hundred bytes, 64 KiB at most. A
/// pipe is fine (`--key <(…)` keeps a CI secret off disk).
fn read_key_file(path: &Path) -> Result<String> {
    let read =
        fs::File::open(path).and_then(|f| crate::input::read_at_most(f, MAX_SIGNATURE_BYTES));
    let bytes = match read {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(Error::input(
                path,
                format!(
                    "{}: longer than {MAX_SIGNATURE_BYTES} bytes, more than a key file",
                    path.display()
                ),
            ))
        }
        read => read.at(path)?,
    };
    String::from_utf8(bytes)
        .map_err(|_| Error::input(path, format!("{}: not UTF-8 text", path.display())))
}

/// A public key from `key`: a minisign public key file, or the key itself (the base64 line
/// that starts with `RW`, as `minisign -P` takes it).
pub fn read_public_key(key: &str) -> Result<PublicKey> {
    let path = Path::new(key);
    let line = if path.is_file() {
        let text = read_key_file(path)?;
        // A key file: an untrusted comment, then the key's base64 line.
        text.lines().nth(1).unwrap_or_default().trim().to_string()
    } else if key.trim().starts_with("RW") {
        key.trim().to_string()
    } else {
        return Err(Error::Usage(format!(
            "--pubkey `{key}` is neither a public key file nor a minisign public key (RW…)"
        )));
    };
    let not_a_key = |e: &dyn std::fmt::Display| {
        Error::Usage(format!("--pubkey `{key}`: not a minisign public key: {e}"))
    };
    let parsed = minisign_verify::PublicKey::from_base64(&line).map_err(|e| not_a_key(&e))?;
    let id = key_id_of_line(&line).ok_or_else(|| not_a_key(&"no key ID"))?;
    Ok(PublicKey { key: parsed, id })
}

/// Signs the file at `file` with the secret key at `secret_key`, writing `FILE.minisig`
/// (replacing an older one). Returns the signature's path.
#[cfg(feature = "sign")]
pub fn sign(file: &Path, secret_key: &Path) -> Result<PathBuf> {
    let sk = read_secret_key(secret_key)?;
    // Read as a stream: minisign prehashes (BLAKE2b) what it signs.
    let opened = crate::input::open_regular(file).at(file)?;
    let opened =
        opened.ok_or_else(|| Error::Usage(format!("{}: not a regular file", file.display())))?;
    let data = std::io::BufReader::new(opened);
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
    // Written whole to a private temporary file of its own beside the bundle, then renamed:
    // never a half signature, never through a link planted there, and concurrent signers
    // do not share a temporary file.
    crate::output::write_replacing(&out, sig.into_string().as_bytes())?;
    Ok(out)
}

#[cfg(feature = "sign")]
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

/// The outcome of a signature check (the `_signed` readers').
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signed {
    /// Verified; the signature's trusted comment.
    Yes { key_id: String, comment: String },
    /// No signature, and none was required.
    Unsigned,
}

/// The longest signature file read: minisign's are under 500 bytes.
const MAX_SIGNATURE_BYTES: u64 = 64 << 10;

/// Checks `data`, the contents of the bundle at `file` (read to its end, as a stream), against
/// `FILE.minisig`. Only prehashed signatures (what minisign and `tilegen bundle sign` write)
/// are accepted, so the archive is never held in memory for this.
pub fn check<R: Read>(file: &Path, mut data: R, policy: SignaturePolicy) -> Result<Signed> {
    let sig_path = signature_path(file);
    let refuse = |why: String| bad(&sig_path, format!("not a minisign signature: {why}"));
    let raw = match crate::input::read_limited(&sig_path, MAX_SIGNATURE_BYTES, &refuse) {
        Ok(t) => t,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
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
        Err(e) => return Err(e),
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
    let sig = minisign_verify::Signature::decode(&text)
        .map_err(|e| bad(&sig_path, format!("not a minisign signature: {e}")))?;
    let want = policy.pubkey.id.clone();
    // Decoded above, so the second line is there and is base64.
    let got = text
        .lines()
        .nth(1)
        .and_then(key_id_of_line)
        .unwrap_or_default();
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
    // Only prehashed signatures are streamed; a legacy one would need the whole file in memory.
    let mut verifier = policy.pubkey.key.verify_stream(&sig).map_err(|e| match e {
        minisign_verify::Error::UnsupportedLegacyMode => {
            failed(&"Legacy signatures are not accepted")
        }
        e => failed(&e),
    })?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match data.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).at(file),
        };
        verifier.update(&buf[..n]);
    }
    verifier.finalize().map_err(|e| failed(&e))?;
    Ok(Signed::Yes {
        key_id: want,
        comment: sig.trusted_comment().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_read_from_base64_lines() {
        // `RW` + base64 of [0x45, 0x64, 1, 2, .., 8, ...]: the ID is bytes 2..10, little-endian.
        let mut raw = vec![0x45u8, 0x64, 1, 2, 3, 4, 5, 6, 7, 8];
        raw.extend([0u8; 2]);
        let b64: String = raw
            .chunks(3)
            .flat_map(|c| {
                let v = (c[0] as u32) << 16 | (c[1] as u32) << 8 | c[2] as u32;
                (0..4).map(move |i| {
                    let s = ((v >> (18 - 6 * i)) & 63) as u8;
                    (match s {
                        0..=25 => b'A' + s,
                        26..=51 => b'a' + s - 26,
                        52..=61 => b'0' + s - 52,
                        62 => b'+',
                        _ => b'/',
                    }) as char
                })
            })
            .collect();
        assert!(b64.starts_with("RW"));
        assert_eq!(key_id_of_line(&b64).as_deref(), Some("0807060504030201"));
        assert_eq!(key_id_of_line("RWQ"), None);
        assert_eq!(key_id_of_line("RW!!!!!!!!!!!!!!!!!!"), None);
    }

    #[cfg(feature = "sign")]
    #[test]
    fn key_ids_agree_with_minisign() {
        let pair = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
        assert_eq!(
            key_id_of_line(&pair.pk.to_base64()),
            Some(key_id(pair.pk.keynum()))
        );
    }
}
