//! Content-addressed cache of compiled kernels.
//!
//! One entry is one file, `<dir>/v1/<key[..2]>/<key>.entry`, holding a kernel's PTX, cubin,
//! resource report and compile log for one arch, followed by a sha256 of everything before
//! it. Entries are written under a temporary name in the same folder tree and published with
//! an atomic rename, so readers see either nothing or a whole entry, and many processes can
//! fill the cache at once (the last rename of identical bytes wins). A read that fails its
//! checksum is a miss: the entry is removed and rebuilt, and the caller is told.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::hashing::sha256_hex;
use crate::nvrtc::{Compiled, Resources};

const MAGIC: &[u8] = b"TILEGEN-CACHE v1\n";
/// Temporary files older than this are leftovers of a crash, removed by `gc`.
const STALE_TMP: Duration = Duration::from_secs(3600);

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    key: String,
    ptx_len: usize,
    cubin_len: usize,
    resources: Resources,
    log: String,
}

/// The outcome of a lookup.
pub enum Lookup {
    Hit(Compiled),
    Miss,
    /// An entry existed but failed its check; it has been removed.
    Corrupt(String),
}

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// Totals for `tilegen cache stats`.
#[derive(Debug, Default, Serialize)]
pub struct Stats {
    pub entries: usize,
    pub bytes: u64,
    pub temporary_files: usize,
}

impl Cache {
    /// The cache at `TILEGEN_CACHE_DIR`, else the user's cache folder.
    pub fn default_location() -> Result<PathBuf> {
        if let Some(p) = crate::env::var_os("TILEGEN_CACHE_DIR") {
            return Ok(PathBuf::from(p));
        }
        dirs::cache_dir().map(|d| d.join("tilegen")).ok_or_else(|| {
            Error::Usage("no user cache folder is known here; set TILEGEN_CACHE_DIR".into())
        })
    }

    pub fn open(root: PathBuf) -> Cache {
        Cache { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn entries_dir(&self) -> PathBuf {
        self.root.join("v1")
    }

    fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub fn entry_path(&self, key: &str) -> PathBuf {
        self.entries_dir()
            .join(&key[..2])
            .join(format!("{key}.entry"))
    }

    /// Looks an entry up and checks it end to end.
    pub fn get(&self, key: &str) -> Lookup {
        let path = self.entry_path(key);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(_) => return Lookup::Miss,
        };
        match decode(key, &bytes) {
            Ok(c) => {
                // Mark as recently used for `gc`; failure to do so is harmless.
                if let Ok(f) = fs::File::options().append(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Lookup::Hit(c)
            }
            Err(why) => {
                let _ = fs::remove_file(&path);
                Lookup::Corrupt(format!("{}: {why}", path.display()))
            }
        }
    }

    /// Publishes an entry atomically.
    pub fn put(&self, key: &str, c: &Compiled) -> Result<()> {
        let path = self.entry_path(key);
        let dir = path.parent().expect("entry has a folder");
        fs::create_dir_all(dir).at(dir)?;
        let tmp_dir = self.tmp_dir();
        fs::create_dir_all(&tmp_dir).at(&tmp_dir)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!("{}.", &key[..16]))
            .tempfile_in(&tmp_dir)
            .at(&tmp_dir)?;
        tmp.write_all(&encode(key, c)).at(tmp.path())?;
        tmp.as_file().sync_all().at(tmp.path())?;
        tmp.persist(&path).map_err(|e| Error::io(&path, e.error))?;
        Ok(())
    }

    fn entry_files(&self) -> Vec<PathBuf> {
        walkdir::WalkDir::new(self.entries_dir())
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file())
            .map(|e| e.into_path())
            .collect()
    }

    fn tmp_files(&self) -> Vec<PathBuf> {
        fs::read_dir(self.tmp_dir())
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for p in self.entry_files() {
            s.entries += 1;
            s.bytes += fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        }
        s.temporary_files = self.tmp_files().len();
        s
    }

    /// Checks every entry; returns the corrupt ones (which are removed).
    pub fn verify(&self) -> (usize, Vec<String>) {
        let mut bad = Vec::new();
        let files = self.entry_files();
        for p in &files {
            let key = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let ok = key.len() == 64 && fs::read(p).is_ok_and(|b| decode(key, &b).is_ok());
            if !ok {
                let _ = fs::remove_file(p);
                bad.push(p.display().to_string());
            }
        }
        (files.len(), bad)
    }

    /// Removes everything.
    pub fn clean(&self) -> Result<()> {
        for d in [self.entries_dir(), self.tmp_dir()] {
            if d.exists() {
                fs::remove_dir_all(&d).at(&d)?;
            }
        }
        Ok(())
    }

    /// Removes stale temporary files, then least recently used entries until the cache is at
    /// most `max_bytes`. Returns (entries removed, bytes freed).
    pub fn gc(&self, max_bytes: u64) -> (usize, u64) {
        let now = SystemTime::now();
        for t in self.tmp_files() {
            let old = fs::metadata(&t)
                .and_then(|m| m.modified())
                .is_ok_and(|m| now.duration_since(m).unwrap_or_default() > STALE_TMP);
            if old {
                let _ = fs::remove_file(&t);
            }
        }
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = self
            .entry_files()
            .into_iter()
            .filter_map(|p| {
                let m = fs::metadata(&p).ok()?;
                Some((m.modified().ok()?, m.len(), p))
            })
            .collect();
        entries.sort();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        let (mut removed, mut freed) = (0, 0);
        for (_, len, p) in entries {
            if total <= max_bytes {
                break;
            }
            if fs::remove_file(&p).is_ok() {
                total -= len;
                freed += len;
                removed += 1;
            }
        }
        (removed, freed)
    }
}

fn encode(key: &str, c: &Compiled) -> Vec<u8> {
    let meta = Meta {
        key: key.to_string(),
        ptx_len: c.ptx.len(),
        cubin_len: c.cubin.len(),
        resources: c.resources.clone(),
        log: c.log.clone(),
    };
    let json = serde_json::to_vec(&meta).expect("meta serializes");
    let mut out = Vec::with_capacity(MAGIC.len() + json.len() + c.ptx.len() + c.cubin.len() + 96);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(format!("{}\n", json.len()).as_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&c.ptx);
    out.extend_from_slice(&c.cubin);
    let sum = sha256_hex(&out);
    out.extend_from_slice(sum.as_bytes());
    out.push(b'\n');
    out
}

fn decode(key: &str, bytes: &[u8]) -> std::result::Result<Compiled, String> {
    if bytes.len() < MAGIC.len() + 65 || !bytes.starts_with(MAGIC) {
        return Err("not a cache entry (truncated or foreign)".into());
    }
    let (body, tail) = bytes.split_at(bytes.len() - 65);
    if tail[64] != b'\n' || &tail[..64] != sha256_hex(body).as_bytes() {
        return Err("checksum mismatch (truncated or corrupted)".into());
    }
    let rest = &body[MAGIC.len()..];
    let nl = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header length")?;
    let json_len: usize = std::str::from_utf8(&rest[..nl])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("bad header length")?;
    let rest = &rest[nl + 1..];
    if rest.len() < json_len {
        return Err("header runs past the end".into());
    }
    let meta: Meta =
        serde_json::from_slice(&rest[..json_len]).map_err(|e| format!("bad header: {e}"))?;
    if meta.key != key {
        return Err(format!("entry is for key {}, not {key}", meta.key));
    }
    let payload = &rest[json_len..];
    if payload.len() != meta.ptx_len + meta.cubin_len {
        return Err("payload length does not match the header".into());
    }
    let (ptx, cubin) = payload.split_at(meta.ptx_len);
    Ok(Compiled {
        ptx: ptx.to_vec(),
        cubin: cubin.to_vec(),
        log: meta.log,
        resources: meta.resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Compiled {
        Compiled {
            ptx: b".version 9.0\n".to_vec(),
            cubin: vec![0x7f, b'E', b'L', b'F', 1, 2, 3],
            log: "ptxas info: Used 8 registers".into(),
            resources: Resources {
                registers: 8,
                ..Default::default()
            },
        }
    }

    const KEY: &str = "ab00000000000000000000000000000000000000000000000000000000000001";

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        assert!(matches!(cache.get(KEY), Lookup::Miss));
        cache.put(KEY, &sample()).unwrap();
        match cache.get(KEY) {
            Lookup::Hit(c) => {
                assert_eq!(c.ptx, sample().ptx);
                assert_eq!(c.cubin, sample().cubin);
                assert_eq!(c.resources.registers, 8);
            }
            _ => panic!("expected a hit"),
        }
        assert_eq!(cache.stats().entries, 1);
    }

    #[test]
    fn truncated_and_flipped_entries_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        let path = cache.entry_path(KEY);
        let good = encode(KEY, &sample());
        // Every truncation and every single bit flip must be caught.
        for cut in [0, 1, MAGIC.len(), good.len() / 2, good.len() - 1] {
            cache.put(KEY, &sample()).unwrap();
            fs::write(&path, &good[..cut]).unwrap();
            assert!(
                matches!(cache.get(KEY), Lookup::Corrupt(_) | Lookup::Miss),
                "cut {cut}"
            );
            assert!(!path.exists(), "corrupt entry removed");
        }
        for i in (0..good.len()).step_by(7) {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, &bad).unwrap();
            assert!(matches!(cache.get(KEY), Lookup::Corrupt(_)), "flip at {i}");
        }
    }

    #[test]
    fn entry_under_wrong_key_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        let other = "ab00000000000000000000000000000000000000000000000000000000000002";
        cache.put(KEY, &sample()).unwrap();
        fs::copy(cache.entry_path(KEY), cache.entry_path(other)).unwrap();
        assert!(matches!(cache.get(other), Lookup::Corrupt(_)));
    }

    #[test]
    fn gc_keeps_under_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        for i in 0..5 {
            let key = format!("{:064x}", i + 1);
            cache.put(&key, &sample()).unwrap();
        }
        let one = cache.stats().bytes / 5;
        let (removed, _) = cache.gc(one * 2);
        assert_eq!(removed, 3);
        assert_eq!(cache.stats().entries, 2);
    }
}
