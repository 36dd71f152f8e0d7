//! Content-addressed cache of compiled kernels.
//!
//! Layout of a cache folder (nothing else in it is tilegen's):
//!
//! - `CACHEDIR.TAG` (the Cache Directory Tagging spec, so backup tools skip the folder) and
//!   `tilegen-cache.version` (tilegen's own mark and layout version). The commands that remove
//!   files (`clean`, `gc`, `verify`) refuse a folder without both.
//! - `v1/<key[..2]>/<key>.entry`: one entry per compile, holding a kernel's PTX, cubin,
//!   resource report and compile log for one arch, followed by a sha256 of everything before it.
//! - `tmp/<key[..16]>.<6 letters or digits>`: an entry being written; published by an atomic
//!   rename, so readers see either nothing or a whole entry and many processes can fill the
//!   cache at once (the last rename of identical bytes wins).
//! - `locks/<key>.lock`: held (flock) while one process compiles that key, so concurrent runs
//!   wait for it instead of compiling the same kernel again.
//!
//! A read that fails its checksum, or finds something that is not a regular file where an
//! entry belongs, is a miss: the thing is removed where that is safe and the entry rebuilt.
//! Cleaning commands remove only names of this layout and never recurse into folders they do
//! not know.
//!
//! With the `remote-cache` feature and `TILEGEN_CACHE_URL` (or [`Cache::with_remote`]), a
//! shared store sits behind the local folder (see `remote.rs`): a local miss is looked up
//! there and, when intact, kept locally; an entry compiled here is written there too.

mod entry;
mod layout;
mod lock;
#[cfg(feature = "remote-cache")]
mod remote;

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::error::{Error, IoContext, Result};
use crate::nvrtc::Compiled;

use entry::*;
use layout::*;
pub use layout::{TAG_FILE, VERSION_FILE};
pub use lock::KeyLock;
use lock::*;

/// Temporary files and lock files older than this are leftovers of a crash, removed by `gc`.
const STALE_TMP: Duration = Duration::from_secs(3600);
/// The longest a compile waits for another process compiling the same key before it
/// compiles the key itself.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// The outcome of a lookup.
pub enum Lookup {
    Hit(Compiled),
    /// Served by the remote cache (and now kept locally too).
    RemoteHit(Compiled),
    Miss,
    /// An entry existed but was unusable (failed its check, or was not a readable regular
    /// file); it has been removed where that was possible.
    Corrupt(String),
}

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether this folder may be used (marked, or made so), decided on first use.
    ready: OnceLock<std::result::Result<(), String>>,
    /// Whether a cache problem was already reported in this run (one warning is enough).
    warned: AtomicBool,
    #[cfg(feature = "remote-cache")]
    remote: OnceLock<remote::Remote>,
    /// A note on the remote cache, reported once: a mode that is not known, a remote asked
    /// for that this build cannot use (no `remote-cache` feature), or remote entries that
    /// could not be kept in the local folder.
    remote_note: std::sync::Mutex<Option<String>>,
}

/// The remote cache of a run: its configuration and what this run did with it.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RemoteSummary {
    /// `TILEGEN_CACHE_URL` without credentials.
    pub url: String,
    pub read_only: bool,
    /// Whether entries are signed and checked (`TILEGEN_CACHE_HMAC_KEY`).
    pub signed: bool,
    /// Entries served by the remote.
    pub hits: usize,
    pub misses: usize,
    /// Entries found but refused (wrong key, checksum or tag, malformed, truncated).
    pub rejected: usize,
    /// Failed operations (the first one turns the remote off).
    pub errors: usize,
    pub writes: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Turned off in this run (after an error, or a configuration that cannot be used).
    pub disabled: bool,
}

impl RemoteSummary {
    /// One line for people: configuration, then what this run did.
    pub fn line(&self) -> String {
        format!(
            "remote cache {} ({}{}): {} hits, {} misses, {} rejected, {} errors, {} written; \
             {:.1} MiB read, {:.1} MiB written",
            self.url,
            remote_mode(self.read_only, self.signed),
            if self.disabled { ", turned off" } else { "" },
            self.hits,
            self.misses,
            self.rejected,
            self.errors,
            self.writes,
            self.bytes_read as f64 / (1 << 20) as f64,
            self.bytes_written as f64 / (1 << 20) as f64,
        )
    }
}

/// The remote cache's configuration and whether it answers, for `tilegen cache stats`.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteStatus {
    pub url: String,
    pub read_only: bool,
    pub signed: bool,
    pub reachable: bool,
    /// Why it does not answer, or (with no `url`) why it is not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A note on its configuration (an unknown mode taken as read-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl RemoteStatus {
    pub fn line(&self) -> String {
        if self.url.is_empty() {
            let why = self.error.as_deref().unwrap_or_default();
            return format!("remote cache not used: {why}");
        }
        let mut line = format!(
            "remote cache {} ({}): {}",
            self.url,
            remote_mode(self.read_only, self.signed),
            match &self.error {
                None => "reachable".to_string(),
                Some(e) => format!("not reachable: {e}"),
            }
        );
        if let Some(n) = &self.note {
            line.push_str(&format!(" ({n})"));
        }
        line
    }
}

/// How a remote cache is used, for people: `read-only` or `read-write`, and whether its
/// entries are signed.
fn remote_mode(read_only: bool, signed: bool) -> String {
    let mode = if read_only { "read-only" } else { "read-write" };
    match signed {
        true => format!("{mode}, signed"),
        false => mode.to_string(),
    }
}

/// The remote cache's variables: `TILEGEN_CACHE_REMOTE` (`read-write`, the default, or
/// `read-only`) and `TILEGEN_CACHE_HMAC_KEY`. An unknown (or non-UTF-8) mode is taken as
/// read-only, the safe side, with a note. A key that is set but empty (a secret this job was
/// not given) is an error: the remote is then left out rather than read unauthenticated.
#[cfg(feature = "remote-cache")]
fn remote_settings() -> std::result::Result<RemoteSettings, String> {
    let (mode, note) = match crate::env::var("TILEGEN_CACHE_REMOTE") {
        Ok(None) => (remote::Mode::ReadWrite, None),
        Ok(Some(v)) if v.is_empty() || v == "read-write" => (remote::Mode::ReadWrite, None),
        Ok(Some(v)) if v == "read-only" => (remote::Mode::ReadOnly, None),
        Ok(Some(other)) => (
            remote::Mode::ReadOnly,
            Some(format!(
                "TILEGEN_CACHE_REMOTE `{}` is neither `read-write` nor `read-only`; using \
                 read-only",
                other.escape_debug()
            )),
        ),
        Err(e) => (
            remote::Mode::ReadOnly,
            Some(format!("{e}; using read-only")),
        ),
    };
    let key = match crate::env::var_os("TILEGEN_CACHE_HMAC_KEY") {
        None => None,
        Some(k) if k.is_empty() => {
            return Err(
                "TILEGEN_CACHE_HMAC_KEY is set but empty (a secret this job was not \
                        given?), so remote entries could not be authenticated; the remote \
                        cache is not used"
                    .into(),
            )
        }
        Some(k) => Some(std::os::unix::ffi::OsStrExt::as_bytes(k.as_os_str()).to_vec()),
    };
    Ok(RemoteSettings {
        mode,
        hmac_key: key,
        note,
    })
}

/// What [`remote_settings`] reads: the mode, the HMAC key, and a note on them for the run.
#[cfg(feature = "remote-cache")]
struct RemoteSettings {
    mode: remote::Mode,
    hmac_key: Option<Vec<u8>>,
    note: Option<String>,
}

/// Totals for `tilegen cache stats`.
#[derive(Debug, Default, Serialize)]
pub struct Stats {
    pub marked: bool,
    pub entries: usize,
    pub bytes: u64,
    pub temporary_files: usize,
}

/// What `tilegen cache verify` found.
#[derive(Debug, Default, Serialize)]
pub struct VerifyReport {
    /// Entries read and checked.
    pub checked: usize,
    /// Corrupt, unreadable or wrong-typed entries (or entry folders), removed.
    pub removed: Vec<String>,
    /// Broken ones that could not be removed (a non-empty folder where an entry belongs, an
    /// unreadable folder), with why.
    pub unrepaired: Vec<String>,
    /// Files tilegen did not write, left alone.
    pub foreign: Vec<String>,
}

/// What `tilegen cache clean` and `gc` removed.
#[derive(Debug, Default, Serialize)]
pub struct RemoveReport {
    pub entries: usize,
    pub bytes: u64,
    pub temporary_files: usize,
    pub lock_files: usize,
    /// Files tilegen did not write, left alone.
    pub foreign: Vec<String>,
}

/// The user's cache folder: `$XDG_CACHE_HOME` when it is an absolute path (the XDG Base
/// Directory spec), else `~/Library/Caches` on macOS and `~/.cache` elsewhere.
pub(crate) fn user_cache_dir() -> Option<PathBuf> {
    let xdg = crate::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    if let Some(dir) = xdg.filter(|d| d.is_absolute()) {
        return Some(dir);
    }
    let home = PathBuf::from(crate::env::var_os("HOME")?);
    if !home.is_absolute() {
        return None;
    }
    Some(if cfg!(target_os = "macos") {
        home.join("Library/Caches")
    } else {
        home.join(".cache")
    })
}

impl Cache {
    /// The cache at `TILEGEN_CACHE_DIR`, else the user's cache folder.
    pub fn default_location() -> Result<PathBuf> {
        // Set but empty (a CI variable that expanded to nothing) counts as unset: it must
        // not make the current folder a cache.
        if let Some(p) = crate::env::path("TILEGEN_CACHE_DIR") {
            return Ok(p);
        }
        user_cache_dir().map(|d| d.join("tilegen")).ok_or_else(|| {
            Error::Usage("no user cache folder is known here; set TILEGEN_CACHE_DIR".into())
        })
    }

    pub fn open(root: PathBuf) -> Cache {
        Cache {
            root,
            state: Arc::default(),
        }
    }

    /// A cache that is not used, for `reason` (no cache folder is known here): every lookup
    /// misses, nothing is stored, and [`Cache::unusable_warning`] says why.
    pub fn unusable(reason: String) -> Cache {
        let cache = Cache::open(PathBuf::new());
        let _ = cache.state.ready.set(Err(reason));
        cache
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Puts the remote cache at `url` (else `TILEGEN_CACHE_URL`, when set) behind this
    /// cache. Without the `remote-cache` feature a URL only brings a warning.
    pub fn with_remote(self, url: Option<&str>) -> Cache {
        let set_note = |note: String| {
            if let Ok(mut w) = self.state.remote_note.lock() {
                *w = Some(note);
            }
        };
        let url = match url {
            Some(u) => Some(u.to_string()),
            None => match crate::env::var("TILEGEN_CACHE_URL") {
                Ok(u) => u.filter(|u| !u.is_empty()),
                Err(e) => {
                    set_note(format!("{e}; using the local cache only"));
                    None
                }
            },
        };
        let Some(url) = url else {
            return self;
        };
        #[cfg(feature = "remote-cache")]
        match remote_settings() {
            Ok(s) => {
                let r = remote::Remote::new(&url, s.mode, s.hmac_key);
                let _ = self.state.remote.set(r);
                if let Some(n) = s.note {
                    set_note(n);
                }
            }
            Err(why) => set_note(why),
        }
        #[cfg(not(feature = "remote-cache"))]
        set_note(format!(
            "a remote cache is configured ({}), but this tilegen was built without the \
             `remote-cache` feature; using the local cache only",
            url.split('@').next_back().unwrap_or_default()
        ));
        self
    }

    /// The remote cache's one warning of the run (unreachable, failing, misconfigured), the
    /// first time it is asked for after it happened.
    pub fn take_remote_warning(&self) -> Option<String> {
        if let Some(n) = self
            .state
            .remote_note
            .lock()
            .ok()
            .and_then(|mut w| w.take())
        {
            return Some(n);
        }
        #[cfg(feature = "remote-cache")]
        return self.state.remote.get()?.take_warning();
        #[cfg(not(feature = "remote-cache"))]
        None
    }

    /// The remote cache's configuration and this run's counts; None without one.
    pub fn remote_summary(&self) -> Option<RemoteSummary> {
        #[cfg(feature = "remote-cache")]
        return self.state.remote.get().map(|r| r.summary());
        #[cfg(not(feature = "remote-cache"))]
        None
    }

    /// The remote cache's configuration and whether it answers now (a lookup of a key that
    /// is never stored); None without one. Its hits and misses are per run: `generate`
    /// reports them.
    pub fn remote_status(&self) -> Option<RemoteStatus> {
        #[cfg(feature = "remote-cache")]
        {
            let Some(r) = self.state.remote.get() else {
                return self.remote_left_out();
            };
            let s = r.summary();
            let error = r.probe().err();
            Some(RemoteStatus {
                url: s.url,
                read_only: s.read_only,
                signed: s.signed,
                reachable: error.is_none(),
                error,
                note: self.remote_note(),
            })
        }
        #[cfg(not(feature = "remote-cache"))]
        self.remote_left_out()
    }

    /// What `remote_status` says when a remote cache is configured but not used (a variable
    /// that cannot be used, or no `remote-cache` feature): why, else None.
    fn remote_left_out(&self) -> Option<RemoteStatus> {
        Some(RemoteStatus {
            url: String::new(),
            read_only: true,
            signed: false,
            reachable: false,
            error: Some(self.remote_note()?),
            note: None,
        })
    }

    fn remote_note(&self) -> Option<String> {
        self.state.remote_note.lock().ok()?.clone()
    }

    fn entries_dir(&self) -> PathBuf {
        self.root.join("v1")
    }

    fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    pub fn entry_path(&self, key: &str) -> PathBuf {
        self.entries_dir()
            .join(&key[..2])
            .join(format!("{key}.entry"))
    }

    /// Whether the folder carries both marks.
    pub fn is_marked(&self) -> bool {
        marked(&self.root)
    }

    /// Errors unless the folder is a marked tilegen cache; the commands that remove files
    /// call this first. Ok(false) when there is nothing at all to look at (no folder, or one
    /// holding no more than marks being written).
    fn require_marked(&self) -> Result<bool> {
        if self.is_marked() {
            return Ok(true);
        }
        let only_marks = match fs::read_dir(&self.root) {
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            Ok(rd) => rd.filter_map(|e| e.ok()).all(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                let is_file = fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_file());
                is_file && (n == TAG_FILE || n == VERSION_FILE || n.starts_with(".tilegen-mark-"))
            }),
        };
        if only_marks {
            return Ok(false);
        }
        let root = self.root.display();
        let hint = if adoptable(&self.root) {
            "it looks like a cache written by an older tilegen: one `tilegen generate` with this \
             cache folder marks it"
        } else {
            "refusing to remove anything in it"
        };
        Err(Error::Usage(format!(
            "{root} is not a tilegen cache (no {TAG_FILE} and {VERSION_FILE} written by \
             tilegen); {hint}"
        )))
    }

    /// Makes the folder usable as a cache on first use: a marked cache is used; an absent
    /// folder, an empty one, or one holding only this layout's files (an older tilegen's
    /// cache) is marked and used; anything else is left alone and not used.
    fn ready(&self) -> std::result::Result<(), &str> {
        self.state
            .ready
            .get_or_init(|| prepare(&self.root))
            .as_ref()
            .map(|_| ())
            .map_err(|e| e.as_str())
    }

    /// The reason the cache is not used, once per run (for a warning).
    pub fn unusable_warning(&self) -> Option<String> {
        let why = self.ready().err()?.to_string();
        self.warn_once(why)
    }

    /// `message`, unless a cache problem was already reported by this handle.
    pub fn warn_once(&self, message: String) -> Option<String> {
        (!self.state.warned.swap(true, Ordering::Relaxed)).then_some(message)
    }

    /// Looks an entry up and checks it end to end: locally, then in the remote cache (an
    /// intact remote entry is kept locally; a rejected one is reported as corrupt).
    pub fn get(&self, key: &str) -> Lookup {
        match self.get_local(key) {
            // Not a key at all is a miss here too, and never asked of the remote.
            Lookup::Miss if is_key(key) => self.get_remote(key),
            found => found,
        }
    }

    #[cfg(not(feature = "remote-cache"))]
    fn get_remote(&self, _key: &str) -> Lookup {
        Lookup::Miss
    }

    #[cfg(feature = "remote-cache")]
    fn get_remote(&self, key: &str) -> Lookup {
        let Some(r) = self.state.remote.get() else {
            return Lookup::Miss;
        };
        match r.fetch(key) {
            remote::Fetched::Entry(bytes) => match decode(key, &bytes) {
                Ok(c) => {
                    r.served();
                    // Kept so that the next run finds it locally; when it cannot be, the
                    // run says so once (it still uses the entry).
                    if let Err(e) = self.put_local(key, &bytes) {
                        if let Some(m) = self.warn_once(format!(
                            "cannot keep remote cache entries in the local cache ({e}); the next run fetches them again"
                        )) {
                            if let Ok(mut note) = self.state.remote_note.lock() {
                                note.get_or_insert(m);
                            }
                        }
                    }
                    Lookup::RemoteHit(c)
                }
                Err(why) => {
                    r.rejected_entry();
                    Lookup::Corrupt(format!("remote entry for {key}: {why}"))
                }
            },
            remote::Fetched::Rejected(why) => Lookup::Corrupt(why),
            remote::Fetched::Missing | remote::Fetched::Off => Lookup::Miss,
        }
    }

    /// [`Cache::get`] without the remote cache: this folder's entry, checked.
    pub fn get_local(&self, key: &str) -> Lookup {
        if !is_key(key) || self.ready().is_err() {
            return Lookup::Miss;
        }
        let path = self.entry_path(key);
        let bytes = match read_entry(&path) {
            Ok(Some(b)) => b,
            Ok(None) => return Lookup::Miss,
            Err(why) => {
                self.repair_parents(key);
                let _ = discard(&path);
                return Lookup::Corrupt(format!("{}: {why}", path.display()));
            }
        };
        match decode(key, &bytes) {
            Ok(c) => {
                // Mark as recently used for `gc`; failure to do so is harmless.
                if let Ok(f) = fs::File::options()
                    .append(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(&path)
                {
                    let _ = f.set_modified(SystemTime::now());
                }
                Lookup::Hit(c)
            }
            Err(why) => {
                let _ = discard(&path);
                Lookup::Corrupt(format!("{}: {why}", path.display()))
            }
        }
    }

    /// `v1` or this key's `v1/XX` that is not a folder (a file, a dangling link) is removed so
    /// the entry can be written again.
    fn repair_parents(&self, key: &str) {
        for d in [self.entries_dir(), self.entries_dir().join(&key[..2])] {
            if fs::symlink_metadata(&d).is_ok() && !fs::metadata(&d).is_ok_and(|m| m.is_dir()) {
                let _ = fs::remove_file(&d);
            }
        }
    }

    /// Publishes an entry atomically, and writes it to the remote cache when there is one
    /// (best effort). Does nothing locally when the folder is not used as a cache.
    pub fn put(&self, key: &str, c: &Compiled) -> Result<()> {
        if !is_key(key) {
            return Ok(());
        }
        let bytes = encode(key, c);
        let local = self.put_local(key, &bytes);
        #[cfg(feature = "remote-cache")]
        if let Some(r) = self.state.remote.get() {
            r.store(key, &bytes);
        }
        local
    }

    fn put_local(&self, key: &str, bytes: &[u8]) -> Result<()> {
        // An entry no read would accept is not written (it would be rebuilt on every run).
        if self.ready().is_err() || bytes.len() as u64 > entry::MAX_ENTRY_BYTES {
            return Ok(());
        }
        let path = self.entry_path(key);
        let dir = path.parent().expect("entry has a folder");
        ensure_dir(&self.entries_dir())?;
        ensure_dir(dir)?;
        let tmp_dir = self.tmp_dir();
        ensure_dir(&tmp_dir)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!("{}.", &key[..16]))
            .rand_bytes(6)
            .tempfile_in(&tmp_dir)
            .at(&tmp_dir)?;
        tmp.write_all(bytes).at(tmp.path())?;
        tmp.as_file().sync_all().at(tmp.path())?;
        if let Err(e) = tmp.persist(&path) {
            // An empty folder where the entry belongs is replaced; anything else stays.
            if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                let _ = fs::remove_dir(&path);
            }
            e.file
                .persist(&path)
                .map_err(|e| Error::io(&path, e.error))?;
        }
        Ok(())
    }

    /// A lock on `key` for compiling it: waits while another process holds it (at most a
    /// couple of minutes; a dead holder's lock is released by the kernel). None when no lock
    /// can be had (the folder is not used as a cache, the file system has no locks, or the
    /// wait ran out): the caller then compiles anyway.
    pub fn lock(&self, key: &str) -> Option<KeyLock> {
        if !is_key(key) || self.ready().is_err() {
            return None;
        }
        let dir = self.locks_dir();
        ensure_dir(&dir).ok()?;
        let path = dir.join(format!("{key}.lock"));
        let open = || {
            fs::File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .ok()
                .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
        };
        let mut file = open()?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match try_flock(&file) {
                // The holder before us may have unlinked the file on publishing: a lock on
                // it would exclude nobody, so take the file the path names now.
                Ok(true) if !is_file_at(&file, &path) => file = open()?,
                Ok(true) => return Some(KeyLock { file, path }),
                Ok(false) if start.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                _ => return None,
            }
        }
    }

    /// Every `v1/XX/KEY.entry` path with its file type, and things under `v1` that are not
    /// this layout's.
    fn scan_entries(
        &self,
        foreign: &mut Vec<String>,
        unreadable: &mut Vec<String>,
    ) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let v1 = self.entries_dir();
        let Ok(rd) = fs::read_dir(&v1) else {
            if fs::symlink_metadata(&v1).is_ok() && fs::metadata(&v1).is_ok_and(|m| m.is_dir()) {
                unreadable.push(format!("{}: cannot be read", v1.display()));
            }
            return out;
        };
        let mut shards: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        shards.sort();
        for shard in shards {
            let name = file_name(&shard);
            // A link is not followed: cleaners never reach outside the cache.
            let meta = fs::symlink_metadata(&shard);
            if !is_shard_name(&name) || !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                if !is_shard_name(&name) || meta.is_ok_and(|m| m.is_symlink()) {
                    foreign.push(shard.display().to_string());
                }
                continue;
            }
            let Ok(rd) = fs::read_dir(&shard) else {
                unreadable.push(format!("{}: cannot be read", shard.display()));
                continue;
            };
            let mut files: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            files.sort();
            for f in files {
                match entry_key(&file_name(&f)) {
                    Some(k) if k[..2] == name => out.push(f),
                    _ => foreign.push(f.display().to_string()),
                }
            }
        }
        out
    }

    /// Names under `dir` that `is_ours` accepts; the rest are foreign.
    fn scan_flat(dir: &Path, is_ours: fn(&str) -> bool, foreign: &mut Vec<String>) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Ok(rd) = fs::read_dir(dir) {
            for p in rd.filter_map(|e| e.ok()).map(|e| e.path()) {
                if is_ours(&file_name(&p)) {
                    out.push(p);
                } else {
                    foreign.push(p.display().to_string());
                }
            }
        }
        out.sort();
        out
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            marked: self.is_marked(),
            ..Default::default()
        };
        let (mut foreign, mut unreadable) = (Vec::new(), Vec::new());
        for p in self.scan_entries(&mut foreign, &mut unreadable) {
            if let Ok(m) = fs::symlink_metadata(&p) {
                if m.is_file() {
                    s.entries += 1;
                    // Saturating: sizes come from the file system, which a cache's
                    // neighbours can fill with sparse files of any length.
                    s.bytes = s.bytes.saturating_add(m.len());
                }
            }
        }
        s.temporary_files = Self::scan_flat(&self.tmp_dir(), is_temp_name, &mut foreign).len();
        s
    }

    /// Checks every entry: corrupt, unreadable and wrong-typed ones (and `v1/XX`, `tmp` or
    /// `locks` that are not folders) are removed and listed. Refuses an unmarked folder.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut r = VerifyReport::default();
        if !self.require_marked()? {
            return Ok(r);
        }
        for d in [self.entries_dir(), self.tmp_dir(), self.locks_dir()] {
            if fs::symlink_metadata(&d).is_ok() && !fs::metadata(&d).is_ok_and(|m| m.is_dir()) {
                match fs::remove_file(&d) {
                    Ok(()) => r.removed.push(format!("{}: not a folder", d.display())),
                    Err(e) => r
                        .unrepaired
                        .push(format!("{}: not a folder: {e}", d.display())),
                }
            }
        }
        if let Ok(rd) = fs::read_dir(self.entries_dir()) {
            for shard in rd.filter_map(|e| e.ok()).map(|e| e.path()) {
                let name = file_name(&shard);
                if is_shard_name(&name) && !fs::metadata(&shard).is_ok_and(|m| m.is_dir()) {
                    match fs::remove_file(&shard) {
                        Ok(()) => r.removed.push(format!("{}: not a folder", shard.display())),
                        Err(e) => r
                            .unrepaired
                            .push(format!("{}: not a folder: {e}", shard.display())),
                    }
                }
            }
        }
        let mut foreign = Vec::new();
        let files = self.scan_entries(&mut foreign, &mut r.unrepaired);
        for p in &files {
            r.checked += 1;
            let key = entry_key(&file_name(p)).unwrap_or_default();
            let why = match read_entry(p) {
                Ok(Some(bytes)) => match decode(&key, &bytes) {
                    Ok(_) => continue,
                    Err(why) => why,
                },
                Ok(None) => continue, // removed meanwhile by another process
                Err(why) => why,
            };
            match discard(p) {
                Ok(()) => r.removed.push(format!("{}: {why}", p.display())),
                Err(e) => r.unrepaired.push(format!("{}: {why}; {e}", p.display())),
            }
        }
        r.foreign = foreign;
        Ok(r)
    }

    /// Removes every entry, temporary file and lock file; leaves the marks and anything
    /// tilegen did not write. Refuses an unmarked folder.
    pub fn clean(&self) -> Result<RemoveReport> {
        let mut r = RemoveReport::default();
        if !self.require_marked()? {
            return Ok(r);
        }
        let mut unreadable = Vec::new();
        for p in self.scan_entries(&mut r.foreign, &mut unreadable) {
            let len = fs::symlink_metadata(&p).map(|m| m.len()).unwrap_or(0);
            if discard(&p).is_ok() {
                r.entries += 1;
                r.bytes = r.bytes.saturating_add(len);
            }
        }
        if let Ok(rd) = fs::read_dir(self.entries_dir()) {
            for shard in rd.filter_map(|e| e.ok()).map(|e| e.path()) {
                if is_shard_name(&file_name(&shard)) {
                    let _ = fs::remove_dir(&shard);
                }
            }
        }
        for p in Self::scan_flat(&self.tmp_dir(), is_temp_name, &mut r.foreign) {
            if remove_non_dir(&p) {
                r.temporary_files += 1;
            }
        }
        for p in Self::scan_flat(&self.locks_dir(), is_lock_name, &mut r.foreign) {
            if remove_non_dir(&p) {
                r.lock_files += 1;
            }
        }
        for d in [self.entries_dir(), self.tmp_dir(), self.locks_dir()] {
            let _ = fs::remove_dir(&d); // only when empty
        }
        r.foreign.extend(unreadable);
        Ok(r)
    }

    /// Removes stale temporary and lock files, then least recently used entries until the
    /// entries take at most `max_bytes`. Refuses an unmarked folder.
    pub fn gc(&self, max_bytes: u64) -> Result<RemoveReport> {
        let mut r = RemoveReport::default();
        if !self.require_marked()? {
            return Ok(r);
        }
        let now = SystemTime::now();
        let stale = |p: &Path| {
            fs::symlink_metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|m| now.duration_since(m).unwrap_or_default() > STALE_TMP)
        };
        for t in Self::scan_flat(&self.tmp_dir(), is_temp_name, &mut r.foreign) {
            if stale(&t) && remove_non_dir(&t) {
                r.temporary_files += 1;
            }
        }
        for l in Self::scan_flat(&self.locks_dir(), is_lock_name, &mut r.foreign) {
            // Only a lock nobody holds, removed while we hold it (the holder of a live one
            // is compiling, and one taken after a check would be unlinked under it).
            let held = fs::File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&l)
                .ok()
                .filter(|f| try_flock(f).unwrap_or(false) && is_file_at(f, &l));
            if stale(&l) && held.is_some() && remove_non_dir(&l) {
                r.lock_files += 1;
            }
            drop(held);
        }
        let mut unreadable = Vec::new();
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = self
            .scan_entries(&mut r.foreign, &mut unreadable)
            .into_iter()
            .filter_map(|p| {
                let m = fs::symlink_metadata(&p).ok()?;
                m.is_file().then_some(())?;
                Some((m.modified().ok()?, m.len(), p))
            })
            .collect();
        entries.sort();
        let mut total = entries.iter().fold(0u64, |t, e| t.saturating_add(e.1));
        for (_, len, p) in entries {
            if total <= max_bytes {
                break;
            }
            if fs::remove_file(&p).is_ok() {
                total = total.saturating_sub(len);
                r.bytes = r.bytes.saturating_add(len);
                r.entries += 1;
            }
        }
        r.foreign.extend(unreadable);
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvrtc::Resources;

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
        assert!(cache.is_marked());
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
    fn an_oversized_entry_is_corrupt_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        cache.put(KEY, &sample()).unwrap();
        // Sparse: no disk is used, but reading it whole would need a terabyte of memory.
        fs::File::options()
            .write(true)
            .open(cache.entry_path(KEY))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        assert!(matches!(cache.get(KEY), Lookup::Corrupt(_)));
        assert!(!cache.entry_path(KEY).exists(), "removed");
        cache.put(KEY, &sample()).unwrap();
        assert!(matches!(cache.get(KEY), Lookup::Hit(_)));
    }

    #[test]
    fn cleaners_do_not_follow_a_linked_shard_folder() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache"));
        cache.put(KEY, &sample()).unwrap();
        let entry = cache.entry_path(KEY);
        let shard = entry.parent().unwrap().to_path_buf();
        let kept = outside.path().join(entry.file_name().unwrap());
        fs::rename(&entry, &kept).unwrap();
        fs::remove_dir(&shard).unwrap();
        std::os::unix::fs::symlink(outside.path(), &shard).unwrap();
        let report = cache.clean().unwrap();
        assert_eq!(report.entries, 0);
        assert_eq!(report.foreign, vec![shard.display().to_string()]);
        assert!(kept.exists(), "the file outside the cache stays");
    }

    #[test]
    fn an_empty_path_or_no_known_folder_means_no_cache() {
        for cache in [
            Cache::open(PathBuf::new()),
            Cache::unusable("no user cache folder is known here".into()),
        ] {
            cache.put(KEY, &sample()).unwrap();
            assert!(matches!(cache.get(KEY), Lookup::Miss));
            assert!(cache.unusable_warning().is_some());
        }
        assert!(
            !Path::new(TAG_FILE).exists(),
            "the current folder is not marked"
        );
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
        let r = cache.gc(one * 2).unwrap();
        assert_eq!(r.entries, 3);
        assert_eq!(cache.stats().entries, 2);
    }

    #[test]
    fn names_of_the_layout() {
        assert!(is_temp_name("0123456789abcdef.Ab3xZ9"));
        assert!(!is_temp_name("0123456789abcdef.Ab3xZ"));
        assert!(!is_temp_name("notes.txt"));
        assert!(entry_key(&format!("{KEY}.entry")).is_some());
        assert!(entry_key("ab.entry").is_none());
        assert!(is_lock_name(&format!("{KEY}.lock")));
    }

    #[test]
    fn a_foreign_folder_is_neither_used_nor_marked() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        cache.put(KEY, &sample()).unwrap();
        assert!(matches!(cache.get(KEY), Lookup::Miss));
        assert!(cache.unusable_warning().is_some());
        assert!(!dir.path().join(TAG_FILE).exists());
        assert!(!dir.path().join("v1").exists());
        assert!(cache.clean().is_err() && cache.gc(0).is_err() && cache.verify().is_err());
    }

    #[test]
    fn an_unmarked_cache_of_this_layout_is_adopted() {
        let dir = tempfile::tempdir().unwrap();
        Cache::open(dir.path().to_path_buf())
            .put(KEY, &sample())
            .unwrap();
        fs::remove_file(dir.path().join(TAG_FILE)).unwrap();
        fs::remove_file(dir.path().join(VERSION_FILE)).unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        assert!(cache.clean().is_err(), "unmarked: refused");
        assert!(matches!(cache.get(KEY), Lookup::Hit(_)));
        assert!(cache.is_marked());
        assert_eq!(cache.clean().unwrap().entries, 1);
    }

    #[test]
    fn a_second_lock_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().to_path_buf());
        let held = cache.lock(KEY).expect("lock");
        let f = fs::File::open(dir.path().join("locks").join(format!("{KEY}.lock"))).unwrap();
        assert!(!try_flock(&f).unwrap(), "held elsewhere");
        held.published();
        assert!(!dir
            .path()
            .join("locks")
            .join(format!("{KEY}.lock"))
            .exists());
        assert!(try_flock(&f).unwrap(), "released");
    }
}
