//! The shared remote layer behind the local cache (`TILEGEN_CACHE_URL`), through OpenDAL.
//!
//! A remote value is a small text header followed by the local entry's bytes:
//!
//! ```text
//! TILEGEN-REMOTE 1
//! key <64 hex: the cache key>
//! sha256 <64 hex: sha256 of the entry bytes>
//! hmac <64 hex: HMAC-SHA256 over the key and sha256> | hmac -
//! <the local entry bytes>
//! ```
//!
//! Everything read is untrusted: a value larger than [`MAX_VALUE`], a header that is not
//! exactly this, another key, a wrong sha256, or (with `TILEGEN_CACHE_HMAC_KEY` set) a
//! missing or wrong tag is rejected, and the kernel is compiled locally. The entry bytes are
//! then decoded by the local layout's own checks.
//!
//! Everything is best effort with bounded waits: the first failure (timeout, refused
//! connection, server error) turns the remote off for the rest of the run, with one warning.
//! OpenDAL is async; its futures run on a current-thread tokio runtime owned by this module.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::RemoteSummary;
use crate::hashing::sha256_hex;

/// The largest value read (entries are a kernel's PTX and cubin: a few MiB at most).
pub(super) const MAX_VALUE: u64 = 64 << 20;
/// A lookup that takes longer than this counts as a failure (and turns the remote off).
const READ_TIMEOUT: Duration = Duration::from_millis(1000);
/// Writes carry a whole entry; they come only after the remote answered a lookup.
const WRITE_TIMEOUT: Duration = Duration::from_millis(3000);

const MAGIC: &str = "TILEGEN-REMOTE 1\n";
/// Domain separation for the tag, so it can mean nothing else.
const TAG_CONTEXT: &[u8] = b"tilegen remote cache entry v1\n";

type HmacSha256 = Hmac<Sha256>;

/// Where writes may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    ReadWrite,
    ReadOnly,
}

/// The store's address, parsed; credentials never kept in `shown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Redis {
        endpoint: String,
        db: i64,
        username: Option<String>,
        password: Option<String>,
        tls: bool,
    },
    S3 {
        bucket: String,
        prefix: String,
    },
}

/// Parses `redis://[user[:password]@]host:port[/db]` (or `rediss://`) and
/// `s3://bucket[/prefix]`. Returns the target and the URL without credentials.
pub(super) fn parse_url(url: &str) -> std::result::Result<(Target, String), String> {
    let bad = |why: &str| Err(format!("TILEGEN_CACHE_URL `{}`: {why}", redact(url)));
    if url.len() > 2048 || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return bad("not a URL");
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad("expected redis://host:port[/db] or s3://bucket[/prefix]");
    };
    match scheme {
        "redis" | "rediss" => {
            let (auth, hostpart) = match rest.rsplit_once('@') {
                Some((a, h)) => (Some(a), h),
                None => (None, rest),
            };
            let (hostport, db) = match hostpart.split_once('/') {
                Some((h, "")) => (h, 0),
                Some((h, d)) => match d.parse::<i64>() {
                    Ok(n) if (0..=1_000_000).contains(&n) => (h, n),
                    _ => return bad("the database after the host must be a number"),
                },
                None => (hostpart, 0),
            };
            if hostport.is_empty()
                || !hostport
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]_".contains(c))
            {
                return bad("no host");
            }
            let hostport = if hostport.rsplit_once(':').is_some_and(|(_, p)| {
                !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) && !hostport.ends_with(']')
            }) {
                hostport.to_string()
            } else {
                format!("{hostport}:6379")
            };
            let (username, password) = match auth {
                None => (None, None),
                Some(a) => match a.split_once(':') {
                    Some((u, p)) => ((!u.is_empty()).then(|| u.to_string()), Some(p.to_string())),
                    None => (None, Some(a.to_string())),
                },
            };
            let tls = scheme == "rediss";
            let shown = format!("{scheme}://{hostport}/{db}");
            let endpoint = format!("{}://{hostport}", if tls { "rediss" } else { "tcp" });
            Ok((
                Target::Redis {
                    endpoint,
                    db,
                    username,
                    password,
                    tls,
                },
                shown,
            ))
        }
        "s3" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let prefix = prefix.trim_matches('/');
            let bucket_ok = (3..=63).contains(&bucket.len())
                && bucket
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c));
            if !bucket_ok {
                return bad("not a valid bucket name");
            }
            if prefix.split('/').any(|p| p == "." || p == "..")
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/-_.".contains(c))
            {
                return bad("the prefix may hold letters, digits, `/-_.` only");
            }
            let shown = if prefix.is_empty() {
                format!("s3://{bucket}")
            } else {
                format!("s3://{bucket}/{prefix}")
            };
            Ok((
                Target::S3 {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                },
                shown,
            ))
        }
        _ => bad("unsupported scheme (redis://, rediss://, s3://)"),
    }
}

/// The URL with any `user:password@` removed, for messages.
pub(super) fn redact(url: &str) -> String {
    // Whatever precedes the last `@` may be a password, with or without a well-formed
    // scheme; it goes before the text is cut short, however long it is.
    let (scheme, rest) = match url.split_once("://") {
        Some((s, rest)) => (format!("{s}://"), rest),
        None => (String::new(), url),
    };
    let shown = match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}***@{host}"),
        None => url.to_string(),
    };
    shown.chars().take(200).collect()
}

fn tag(hmac_key: &[u8], key: &str, sha: &str) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(hmac_key).expect("HMAC takes any key length");
    mac.update(TAG_CONTEXT);
    mac.update(key.as_bytes());
    mac.update(b"\n");
    mac.update(sha.as_bytes());
    mac
}

/// The remote value for an entry.
pub(super) fn seal(key: &str, entry: &[u8], hmac_key: Option<&[u8]>) -> Vec<u8> {
    let sha = sha256_hex(entry);
    let tag = match hmac_key {
        Some(k) => hex::encode(tag(k, key, &sha).finalize().into_bytes()),
        None => "-".to_string(),
    };
    let mut out = Vec::with_capacity(entry.len() + 256);
    out.extend_from_slice(MAGIC.as_bytes());
    out.extend_from_slice(format!("key {key}\nsha256 {sha}\nhmac {tag}\n").as_bytes());
    out.extend_from_slice(entry);
    out
}

fn take_line<'a>(bytes: &mut &'a [u8], label: &str, max: usize) -> Option<&'a [u8]> {
    let limit = bytes.len().min(label.len() + 1 + max + 1);
    let nl = bytes[..limit].iter().position(|&b| b == b'\n')?;
    let line = &bytes[..nl];
    *bytes = &bytes[nl + 1..];
    line.strip_prefix(label.as_bytes())?.strip_prefix(b" ")
}

fn is_hex64(s: &[u8]) -> bool {
    s.len() == 64 && s.iter().all(|b| b"0123456789abcdef".contains(b))
}

/// Checks a remote value for `key` and returns its entry bytes, or why it is rejected.
pub(super) fn open<'a>(
    key: &str,
    value: &'a [u8],
    hmac_key: Option<&[u8]>,
) -> std::result::Result<&'a [u8], String> {
    if value.len() as u64 > MAX_VALUE {
        return Err(format!("larger than {MAX_VALUE} bytes"));
    }
    let Some(mut rest) = value.strip_prefix(MAGIC.as_bytes()) else {
        return Err("not a tilegen remote entry (truncated or foreign)".into());
    };
    let header = "truncated or malformed header";
    let k = take_line(&mut rest, "key", 64).ok_or(header)?;
    let sha = take_line(&mut rest, "sha256", 64).ok_or(header)?;
    let t = take_line(&mut rest, "hmac", 64).ok_or(header)?;
    if !is_hex64(k) || !is_hex64(sha) || !(t == b"-" || is_hex64(t)) {
        return Err(header.into());
    }
    if k != key.as_bytes() {
        return Err(format!(
            "stored for key {}, not this one",
            String::from_utf8_lossy(k)
        ));
    }
    if sha256_hex(rest).as_bytes() != sha {
        return Err("sha256 of the content does not match (truncated or altered)".into());
    }
    if let Some(hk) = hmac_key {
        if t == b"-" {
            return Err("unsigned, and TILEGEN_CACHE_HMAC_KEY is set".into());
        }
        let want = hex::decode(t).map_err(|_| header.to_string())?;
        let sha = std::str::from_utf8(sha).map_err(|_| header.to_string())?;
        if tag(hk, key, sha).verify_slice(&want).is_err() {
            return Err("HMAC tag does not verify with TILEGEN_CACHE_HMAC_KEY".into());
        }
    }
    Ok(rest)
}

/// What a lookup found.
pub(super) enum Fetched {
    /// A value that passed the header checks: the local entry bytes.
    Entry(Vec<u8>),
    Missing,
    /// A value that failed a check, with why.
    Rejected(String),
    /// The remote is off (unreachable earlier, or never configured correctly).
    Off,
}

pub(super) struct Remote {
    shown: String,
    mode: Mode,
    hmac_key: Option<Vec<u8>>,
    /// None when the remote could not even be set up (the reason is in `warning`).
    store: Option<Store>,
    off: AtomicBool,
    /// The one warning of the run, until taken.
    warning: Mutex<Option<String>>,
    warned: AtomicBool,
    /// Keys already looked up in this run: a second look (after waiting on a local lock)
    /// goes to the local cache only.
    looked_up: Mutex<HashSet<String>>,
    hits: AtomicUsize,
    misses: AtomicUsize,
    rejected: AtomicUsize,
    errors: AtomicUsize,
    writes: AtomicUsize,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.shown)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

struct Store {
    rt: tokio::runtime::Runtime,
    op: opendal::Operator,
}

/// The value at `path`, or `None` when it is larger than [`MAX_VALUE`]: refused before its
/// body is read where the response states its length (S3), and otherwise given up once the
/// pieces read pass the cap, so a hostile store cannot fill memory within the read timeout.
/// (A range read cannot cap it: a range past the end is an error in OpenDAL.) Redis hands
/// over a value whole; this bounds what is kept, not what that client receives.
async fn read_capped(op: &opendal::Operator, path: &str) -> opendal::Result<Option<Vec<u8>>> {
    let mut pieces = op.reader(path).await?.into_stream(..).await?;
    match pieces.metadata().await {
        Ok(m) if m.content_length() > MAX_VALUE => return Ok(None),
        Ok(_) => {}
        Err(e) if e.kind() == opendal::ErrorKind::Unsupported => {}
        Err(e) => return Err(e),
    }
    collect_capped(&mut pieces, MAX_VALUE).await
}

/// The pieces of `stream` joined, or `None` as soon as they pass `cap` bytes (nothing more is
/// read).
async fn collect_capped<S>(stream: &mut S, cap: u64) -> opendal::Result<Option<Vec<u8>>>
where
    S: futures_core::Stream<Item = opendal::Result<opendal::Buffer>> + Unpin,
{
    let mut value = Vec::new();
    while let Some(piece) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
    {
        let piece = piece?;
        if (value.len() + piece.len()) as u64 > cap {
            return Ok(None);
        }
        for bytes in piece {
            value.extend_from_slice(&bytes);
        }
    }
    Ok(Some(value))
}

fn build_operator(target: &Target) -> std::result::Result<opendal::Operator, String> {
    use opendal::services;
    let op = match target {
        Target::Redis {
            endpoint,
            db,
            username,
            password,
            ..
        } => {
            let mut b = services::Redis::default()
                .endpoint(endpoint)
                .db(*db)
                .root("/tilegen");
            if let Some(u) = username {
                b = b.username(u);
            }
            if let Some(p) = password {
                b = b.password(p);
            }
            opendal::Operator::new(b).map(|o| o.finish())
        }
        Target::S3 { bucket, prefix } => {
            let var = |n: &str| -> std::result::Result<Option<String>, String> {
                let v = crate::env::var(n).map_err(|e| e.to_string())?;
                Ok(v.filter(|v| !v.is_empty()))
            };
            let mut b = services::S3::default()
                .bucket(bucket)
                .root(&format!("/{prefix}"))
                .region(&var("AWS_REGION")?.unwrap_or_else(|| "us-east-1".into()));
            if let Some(e) = var("AWS_ENDPOINT_URL")? {
                b = b.endpoint(&e);
            }
            if let (Some(id), Some(secret)) =
                (var("AWS_ACCESS_KEY_ID")?, var("AWS_SECRET_ACCESS_KEY")?)
            {
                b = b.access_key_id(&id).secret_access_key(&secret);
                if let Some(t) = var("AWS_SESSION_TOKEN")? {
                    b = b.session_token(&t);
                }
            }
            opendal::Operator::new(b).map(|o| o.finish())
        }
    };
    op.map_err(|e| e.to_string())
}

impl Remote {
    /// Sets up the remote for `url`; nothing is contacted yet. A URL or variable that cannot
    /// be used gives a remote that is off, with its one warning pending.
    pub(super) fn new(url: &str, mode: Mode, hmac_key: Option<Vec<u8>>) -> Remote {
        let mut r = Remote {
            shown: redact(url),
            mode,
            hmac_key,
            store: None,
            off: AtomicBool::new(true),
            warning: Mutex::new(None),
            warned: AtomicBool::new(false),
            looked_up: Mutex::new(HashSet::new()),
            hits: AtomicUsize::new(0),
            misses: AtomicUsize::new(0),
            rejected: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        };
        let setup = parse_url(url).and_then(|(target, shown)| {
            r.shown = shown;
            let op = build_operator(&target)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(|e| format!("cannot start its I/O runtime: {e}"))?;
            Ok(Store { rt, op })
        });
        match setup {
            Ok(store) => {
                r.store = Some(store);
                r.off.store(false, Ordering::Relaxed);
            }
            Err(why) => r.fail(format!(
                "remote cache not used: {why}; using the local cache only"
            )),
        }
        r
    }

    fn path(key: &str) -> String {
        format!("v1/{}/{key}", &key[..2])
    }

    /// Turns the remote off for the rest of the run; the first reason becomes the warning.
    fn fail(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if !self.off.swap(true, Ordering::Relaxed) || self.store.is_none() {
            if let Ok(mut w) = self.warning.lock() {
                if w.is_none() && !self.warned.load(Ordering::Relaxed) {
                    *w = Some(message);
                }
            }
        }
    }

    fn is_off(&self) -> bool {
        self.off.load(Ordering::Relaxed)
    }

    /// The run's one remote warning, the first time it is asked for after a failure.
    pub(super) fn take_warning(&self) -> Option<String> {
        let w = self.warning.lock().ok()?.take()?;
        (!self.warned.swap(true, Ordering::Relaxed)).then_some(w)
    }

    fn run<T>(
        &self,
        limit: Duration,
        what: &str,
        fut: impl std::future::Future<Output = opendal::Result<T>>,
    ) -> Option<opendal::Result<T>> {
        let store = self.store.as_ref()?;
        match store
            .rt
            .block_on(async { tokio::time::timeout(limit, fut).await })
        {
            Ok(r) => Some(r),
            Err(_) => {
                self.fail(format!(
                    "remote cache {} did not answer a {what} within {} ms; it is not used for \
                     the rest of this run",
                    self.shown,
                    limit.as_millis()
                ));
                None
            }
        }
    }

    /// Looks `key` up (once per run and key).
    pub(super) fn fetch(&self, key: &str) -> Fetched {
        if self.is_off() {
            return Fetched::Off;
        }
        if let Ok(mut seen) = self.looked_up.lock() {
            if !seen.insert(key.to_string()) {
                return Fetched::Missing;
            }
        }
        let Some(store) = self.store.as_ref() else {
            return Fetched::Off;
        };
        let path = Self::path(key);
        let value = match self.run(READ_TIMEOUT, "lookup", read_capped(&store.op, &path)) {
            None => return Fetched::Off,
            Some(Ok(Some(value))) => value,
            Some(Ok(None)) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                return Fetched::Rejected(format!(
                    "remote entry {}/{path}: larger than {MAX_VALUE} bytes",
                    self.shown
                ));
            }
            Some(Err(e)) if e.kind() == opendal::ErrorKind::NotFound => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                return Fetched::Missing;
            }
            Some(Err(e)) => {
                self.fail(format!(
                    "remote cache {} failed a lookup ({e}); it is not used for the rest of \
                     this run",
                    self.shown
                ));
                return Fetched::Off;
            }
        };
        self.bytes_read
            .fetch_add(value.len() as u64, Ordering::Relaxed);
        match open(key, &value, self.hmac_key.as_deref()) {
            Ok(entry) => Fetched::Entry(entry.to_vec()),
            Err(why) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                Fetched::Rejected(format!("remote entry {}/{path}: {why}", self.shown))
            }
        }
    }

    /// The lookup's entry decoded fine and is used.
    pub(super) fn served(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// The entry passed the header but not the local layout's own checks.
    pub(super) fn rejected_entry(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes an entry compiled here (not in read-only mode, not once the remote is off).
    pub(super) fn store(&self, key: &str, entry: &[u8]) {
        if self.mode == Mode::ReadOnly || self.is_off() {
            return;
        }
        let Some(store) = self.store.as_ref() else {
            return;
        };
        let value = seal(key, entry, self.hmac_key.as_deref());
        let len = value.len() as u64;
        match self.run(
            WRITE_TIMEOUT,
            "write",
            store.op.write(&Self::path(key), value),
        ) {
            None => {}
            Some(Ok(_)) => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                self.bytes_written.fetch_add(len, Ordering::Relaxed);
            }
            Some(Err(e)) => self.fail(format!(
                "remote cache {} failed a write ({e}); it is not used for the rest of this run",
                self.shown
            )),
        }
    }

    /// Whether the store answers a lookup of a key that does not exist.
    pub(super) fn probe(&self) -> std::result::Result<(), String> {
        let Some(store) = self.store.as_ref() else {
            return Err(self
                .warning
                .lock()
                .ok()
                .and_then(|w| w.clone())
                .unwrap_or_else(|| "not set up".into()));
        };
        let path = Self::path(&"0".repeat(64));
        match self.run(READ_TIMEOUT, "lookup", store.op.stat(&path)) {
            None => Err(format!("no answer within {} ms", READ_TIMEOUT.as_millis())),
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) if e.kind() == opendal::ErrorKind::NotFound => Ok(()),
            Some(Err(e)) => Err(e.to_string()),
        }
    }

    pub(super) fn summary(&self) -> RemoteSummary {
        let n = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        RemoteSummary {
            url: self.shown.clone(),
            read_only: self.mode == Mode::ReadOnly,
            signed: self.hmac_key.is_some(),
            hits: n(&self.hits),
            misses: n(&self.misses),
            rejected: n(&self.rejected),
            errors: n(&self.errors),
            writes: n(&self.writes),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            disabled: self.is_off(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ab00000000000000000000000000000000000000000000000000000000000001";

    /// Pieces of the given sizes, then the end; polling past a piece over the cap fails.
    struct Pieces {
        sizes: Vec<usize>,
        next: usize,
        cap: usize,
        seen: usize,
    }

    impl futures_core::Stream for Pieces {
        type Item = opendal::Result<opendal::Buffer>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            assert!(self.seen <= self.cap, "read on past the cap");
            let Some(&size) = self.sizes.get(self.next) else {
                return std::task::Poll::Ready(None);
            };
            self.next += 1;
            self.seen += size;
            let piece = opendal::Buffer::from(vec![self.next as u8; size]);
            std::task::Poll::Ready(Some(Ok(piece)))
        }
    }

    #[test]
    fn a_value_is_read_up_to_the_cap_and_no_further() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let collect = |sizes: &[usize]| {
            let mut s = Pieces {
                sizes: sizes.to_vec(),
                next: 0,
                cap: 10,
                seen: 0,
            };
            rt.block_on(collect_capped(&mut s, 10)).unwrap()
        };
        assert_eq!(collect(&[4, 6]), Some(vec![1, 1, 1, 1, 2, 2, 2, 2, 2, 2]));
        assert_eq!(collect(&[]), Some(vec![]));
        assert_eq!(collect(&[4, 7, 1 << 20]), None);
        assert_eq!(collect(&[11]), None);
    }

    #[test]
    fn urls() {
        let (t, shown) = parse_url("redis://u:secret@127.0.0.1:7000/3").unwrap();
        assert_eq!(shown, "redis://127.0.0.1:7000/3");
        assert!(
            matches!(t, Target::Redis { db: 3, ref endpoint, .. } if endpoint == "tcp://127.0.0.1:7000")
        );
        assert!(parse_url("redis://localhost").is_ok());
        let (t, _) = parse_url("s3://my-bucket/ci/kernels/").unwrap();
        assert_eq!(
            t,
            Target::S3 {
                bucket: "my-bucket".into(),
                prefix: "ci/kernels".into()
            }
        );
        for bad in [
            "",
            "redis://",
            "redis://h/x",
            "s3://A",
            "s3://b/../x",
            "ftp://x",
            "s3://ok-b/a b",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        assert!(!parse_url("gopher://u:pw@h").unwrap_err().contains("pw"));
        // No well-formed scheme: what precedes the `@` is still hidden.
        let long = format!("redis://u:{}pw@h", "p".repeat(300));
        for odd in [
            "u:pw@redis.internal:6379",
            "redis:/u:pw@h",
            "redis://u:pw@h",
            long.as_str(),
        ] {
            assert!(!redact(odd).contains("pw"), "{odd}");
            assert!(
                parse_url(odd).map_or_else(|e| !e.contains("pw"), |_| true),
                "{odd}"
            );
        }
    }

    #[test]
    fn sealed_values_open_only_intact_and_for_their_key() {
        let entry = b"TILEGEN-CACHE v1\nsomething".to_vec();
        let v = seal(KEY, &entry, None);
        assert_eq!(open(KEY, &v, None).unwrap(), &entry[..]);
        // Signed with one key: opens with it, not with another, and unsigned is refused.
        let s = seal(KEY, &entry, Some(b"k1"));
        assert!(open(KEY, &s, Some(b"k1")).is_ok());
        assert!(open(KEY, &s, Some(b"k2")).is_err());
        assert!(open(KEY, &v, Some(b"k1")).is_err());
        let other = KEY.replace("01", "02");
        assert!(open(&other, &v, None).is_err());
        for cut in 0..v.len() {
            assert!(open(KEY, &v[..cut], None).is_err(), "cut {cut}");
        }
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x01;
            assert!(open(KEY, &bad, None).is_err(), "flip at {i}");
        }
        for i in 0..s.len() {
            let mut bad = s.clone();
            bad[i] ^= 0x01;
            assert!(open(KEY, &bad, Some(b"k1")).is_err(), "flip at {i}");
        }
    }
}
