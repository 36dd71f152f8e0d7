//! The shared remote cache against real servers: Redis (`redis-server`) and an S3 server
//! (`s3s-fs`), both started by `scripts/test-stores start` (which `.ci/run` runs), found
//! through `target/test-stores/env` or the same variables in the environment. Without
//! them these tests say so and pass, unless `TILEGEN_TEST_STORES_REQUIRED=1` (set by CI).
//!
//! Every run is a tiny spec (two vector_add instances, one arch) with empty local caches,
//! as two machines sharing one store would be. Each test uses its own Redis database.

mod common;
use common::finish;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");

const SPEC: &str = "\
kernels:
  - name: tiny
    op: vector_add
    dtype: [f32, f16]
    block: 256
    items: [1]
    archs: [sm_80]
";
const COMPILES: usize = 2;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The stores' variables: from the environment, else the file `scripts/test-stores` wrote.
fn stores() -> Option<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(repo().join("target/test-stores/env")) {
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                vars.insert(k.to_string(), v.to_string());
            }
        }
    }
    for k in ["TILEGEN_TEST_REDIS", "TILEGEN_TEST_S3_ENDPOINT"] {
        if let Some(v) = tilegen::__internal::env::var(k).unwrap() {
            vars.insert(k.to_string(), v);
        }
    }
    if vars.contains_key("TILEGEN_TEST_REDIS") {
        return Some(vars);
    }
    if tilegen::__internal::env::var("TILEGEN_TEST_STORES_REQUIRED")
        .unwrap()
        .as_deref()
        == Some("1")
    {
        panic!("no test stores: run `scripts/test-stores start` first");
    }
    eprintln!("remote cache tests skipped: no test stores (run `scripts/test-stores start`)");
    None
}

/// The Redis URL of database `db` on the shared test server.
fn redis_url(vars: &BTreeMap<String, String>, db: u32) -> String {
    format!("redis://{}/{db}", vars["TILEGEN_TEST_REDIS"])
}

struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    spec: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let spec = root.join("tiny.yaml");
    std::fs::write(&spec, SPEC).unwrap();
    Dirs {
        _tmp: tmp,
        root,
        spec,
    }
}

/// `tilegen generate` of the tiny spec into `root/out-NAME` with the empty cache
/// `root/cache-NAME`, remote at `url`, with extra variables.
fn generate(d: &Dirs, name: &str, url: &str, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(repo())
        .args(["--message-format", "json", "generate", "--specs"])
        .arg(&d.spec)
        .arg("--out")
        .arg(d.root.join(format!("out-{name}")))
        .env("TILEGEN_CACHE_DIR", d.root.join(format!("cache-{name}")))
        .env("TILEGEN_CACHE_URL", url)
        .env_remove("TILEGEN_CACHE_HMAC_KEY")
        .env_remove("TILEGEN_CACHE_REMOTE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

struct Run {
    events: Vec<serde_json::Value>,
    stderr: String,
}

impl Run {
    fn sources(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|v| v["event"] == "compiled")
            .map(|v| v["source"].as_str().unwrap_or("?").to_string())
            .collect()
    }
    fn count(&self, source: &str) -> usize {
        self.sources().iter().filter(|s| *s == source).count()
    }
    fn events_named(&self, name: &str) -> Vec<&serde_json::Value> {
        self.events.iter().filter(|v| v["event"] == name).collect()
    }
    fn remote(&self) -> serde_json::Value {
        self.events_named("done")[0]["report"]["remote"].clone()
    }
}

fn run(mut c: Command, what: &str) -> Run {
    let o = finish(c.spawn().unwrap(), what);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: `{l}`: {e}")))
        .collect();
    assert_eq!(
        events.iter().filter(|v| v["event"] == "compiled").count(),
        COMPILES,
        "{what}: {stdout}"
    );
    Run { events, stderr }
}

/// Every file under `dir`: relative path → bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            (rel, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn out(d: &Dirs, name: &str) -> BTreeMap<String, Vec<u8>> {
    tree(&d.root.join(format!("out-{name}")))
}

/// A minimal Redis client (RESP over TCP), to look at and tamper with stored values.
struct Redis {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

#[derive(Debug)]
enum Reply {
    Status(String),
    Int,
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

impl Redis {
    fn connect(addr: &str, db: u32) -> Redis {
        let w = TcpStream::connect(addr).expect("the test Redis answers");
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        let mut c = Redis { w, r };
        c.cmd(&[b"SELECT", db.to_string().as_bytes()]);
        c
    }

    fn cmd(&mut self, args: &[&[u8]]) -> Reply {
        let mut m = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            m.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            m.extend_from_slice(a);
            m.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&m).unwrap();
        self.reply()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    }

    fn reply(&mut self) -> Reply {
        let l = self.line();
        let (t, rest) = l.split_at(1);
        match t {
            "+" => Reply::Status(rest.into()),
            "-" => panic!("redis error: {rest}"),
            ":" => Reply::Int,
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                Reply::Bulk(Some(b))
            }
            "*" => {
                let n: usize = rest.parse().unwrap();
                Reply::Array((0..n).map(|_| self.reply()).collect())
            }
            _ => panic!("unexpected reply `{l}`"),
        }
    }

    fn keys(&mut self) -> Vec<String> {
        match self.cmd(&[b"KEYS", b"*"]) {
            Reply::Array(v) => {
                let mut keys: Vec<String> = v
                    .into_iter()
                    .map(|r| match r {
                        Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                keys.sort();
                keys
            }
            other => panic!("{other:?}"),
        }
    }

    fn get(&mut self, key: &str) -> Vec<u8> {
        match self.cmd(&[b"GET", key.as_bytes()]) {
            Reply::Bulk(Some(b)) => b,
            other => panic!("{other:?}"),
        }
    }

    fn set(&mut self, key: &str, value: &[u8]) {
        match self.cmd(&[b"SET", key.as_bytes(), value]) {
            Reply::Status(s) if s == "OK" => {}
            other => panic!("{other:?}"),
        }
    }

    fn flush(&mut self) {
        self.cmd(&[b"FLUSHDB"]);
    }
}

/// A fresh, empty database `db` on the shared test Redis.
fn fresh_db(vars: &BTreeMap<String, String>, db: u32) -> Redis {
    let mut r = Redis::connect(&vars["TILEGEN_TEST_REDIS"], db);
    r.flush();
    r
}

/// The warnings a run reported about the cache.
fn warnings(r: &Run) -> Vec<String> {
    r.events_named("cache_warning")
        .iter()
        .map(|v| v["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn second_machine_compiles_nothing() {
    let Some(vars) = stores() else { return };
    let mut redis = fresh_db(&vars, 1);
    let url = redis_url(&vars, 1);
    let d = dirs();
    let first = run(generate(&d, "a", &url, &[]), "first machine");
    assert_eq!(first.count("compiled"), COMPILES);
    assert_eq!(first.remote()["writes"], COMPILES);
    assert_eq!(redis.keys().len(), COMPILES);
    let second = run(generate(&d, "b", &url, &[]), "second machine");
    assert_eq!(second.count("remote"), COMPILES, "{:?}", second.sources());
    assert_eq!(second.remote()["hits"], COMPILES);
    assert!(warnings(&second).is_empty(), "{:?}", warnings(&second));
    assert_eq!(out(&d, "a"), out(&d, "b"));
    // The remote hits were kept locally: a third run on that cache needs no remote.
    let third = run(generate(&d, "b", "redis://127.0.0.1:1/0", &[]), "local");
    assert_eq!(third.count("local"), COMPILES, "{:?}", third.sources());
}

/// Runs with a tampered store must compile everything, report it, and write the same files.
fn assert_not_served(r: &Run, d: &Dirs, clean: &str, name: &str) {
    assert_eq!(r.count("compiled"), COMPILES, "{:?}", r.sources());
    let corrupt = r.events_named("cache_corrupt");
    assert_eq!(corrupt.len(), COMPILES, "{:?}", r.events);
    assert!(corrupt
        .iter()
        .all(|v| v["message"].as_str().unwrap().contains("remote entry")));
    assert_eq!(r.remote()["rejected"], COMPILES);
    assert_eq!(out(d, clean), out(d, name), "byte-identical to a clean run");
}

fn sha_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// `value` rebuilt with its entry's `ptx_len` at the largest usize and `cubin_len` such that
/// the sum wraps to the payload's length, every checksum recomputed.
fn overflowing(value: &[u8]) -> Vec<u8> {
    let lines: Vec<&[u8]> = value.splitn(5, |&b| b == b'\n').collect();
    let (key_line, entry) = (lines[1], lines[4]);
    let magic = b"TILEGEN-CACHE v1\n";
    let rest = &entry[magic.len()..];
    let nl = rest.iter().position(|&b| b == b'\n').unwrap();
    let json_len: usize = std::str::from_utf8(&rest[..nl]).unwrap().parse().unwrap();
    let mut meta: serde_json::Value = serde_json::from_slice(&rest[nl + 1..][..json_len]).unwrap();
    let payload = &rest[nl + 1 + json_len..rest.len() - 65];
    meta["ptx_len"] = serde_json::json!(u64::MAX);
    meta["cubin_len"] = serde_json::json!(payload.len() as u64 + 1);
    let json = serde_json::to_vec(&meta).unwrap();
    let mut e = magic.to_vec();
    e.extend_from_slice(format!("{}\n", json.len()).as_bytes());
    e.extend_from_slice(&json);
    e.extend_from_slice(payload);
    let sum = sha_hex(&e);
    e.extend_from_slice(format!("{sum}\n").as_bytes());
    let mut out = b"TILEGEN-REMOTE 1\n".to_vec();
    out.extend_from_slice(key_line);
    out.extend_from_slice(format!("\nsha256 {}\nhmac -\n", sha_hex(&e)).as_bytes());
    out.extend_from_slice(&e);
    out
}

#[test]
fn tampered_entries_are_not_served() {
    let Some(vars) = stores() else { return };
    let mut redis = fresh_db(&vars, 2);
    let url = redis_url(&vars, 2);
    let d = dirs();
    run(generate(&d, "clean", &url, &[]), "fill");
    let keys = redis.keys();
    let good: Vec<Vec<u8>> = keys.iter().map(|k| redis.get(k)).collect();

    // One byte of the content changed (the end: the cubin and the entry's own checksum).
    for (k, v) in keys.iter().zip(&good) {
        let mut bad = v.clone();
        let i = bad.len() - 100;
        bad[i] ^= 0x40;
        redis.set(k, &bad);
    }
    let r = run(generate(&d, "flipped", &url, &[]), "flipped byte");
    assert_not_served(&r, &d, "clean", "flipped");
    // The run wrote its own results back: the store serves again.
    let r = run(generate(&d, "healed", &url, &[]), "after the rebuild");
    assert_eq!(r.count("remote"), COMPILES, "{:?}", r.sources());

    // Each key's value swapped with the other's: intact, but for another key.
    redis.set(&keys[0], &good[1]);
    redis.set(&keys[1], &good[0]);
    let r = run(generate(&d, "swapped", &url, &[]), "swapped values");
    assert_not_served(&r, &d, "clean", "swapped");
    assert!(r.events_named("cache_corrupt")[0]["message"]
        .as_str()
        .unwrap()
        .contains("not this one"));

    // Truncated values: header only, half, all but the last byte.
    for cut in [10, good[0].len() / 2, good[0].len() - 1] {
        for (k, v) in keys.iter().zip(&good) {
            redis.set(k, &v[..cut.min(v.len() - 1)]);
        }
        let name = format!("cut{cut}");
        let r = run(generate(&d, &name, &url, &[]), "truncated values");
        assert_not_served(&r, &d, "clean", &name);
    }

    // Well-formed values (every checksum right, as any writer can make them) whose entry
    // claims lengths that overflow when added.
    for (k, v) in keys.iter().zip(&good) {
        redis.set(k, &overflowing(v));
    }
    let r = run(generate(&d, "overflow", &url, &[]), "overflowing lengths");
    assert_not_served(&r, &d, "clean", "overflow");

    // A value that is not an entry at all.
    for k in &keys {
        redis.set(k, b"\xff\xfe garbage \n\n\n key sha256 hmac");
    }
    let r = run(generate(&d, "garbage", &url, &[]), "garbage values");
    assert_not_served(&r, &d, "clean", "garbage");
}

/// A forged entry: the content replaced by another kernel's, with a fresh matching sha256.
/// Without a key this cannot be told from a real entry, so the HMAC is what catches it.
fn forge(value: &[u8], other: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    let header = |v: &[u8]| {
        let mut n = 0;
        for _ in 0..4 {
            n += v[n..].iter().position(|&b| b == b'\n').unwrap() + 1;
        }
        n
    };
    let key_line = value.split(|&b| b == b'\n').nth(1).unwrap().to_vec();
    let content = &other[header(other)..];
    let sha = hex::encode(sha2::Sha256::digest(content));
    let mut out = b"TILEGEN-REMOTE 1\n".to_vec();
    out.extend_from_slice(&key_line);
    out.extend_from_slice(format!("\nsha256 {sha}\nhmac -\n").as_bytes());
    out.extend_from_slice(content);
    out
}

#[test]
fn wrong_hmac_key_and_unsigned_entries_are_not_served() {
    let Some(vars) = stores() else { return };
    let mut redis = fresh_db(&vars, 3);
    let url = redis_url(&vars, 3);
    let d = dirs();
    let k1 = [("TILEGEN_CACHE_HMAC_KEY", "first key")];
    let k2 = [("TILEGEN_CACHE_HMAC_KEY", "second key")];
    let ro = ("TILEGEN_CACHE_REMOTE", "read-only");
    run(generate(&d, "clean", &url, &k1), "signed fill");
    let signed: Vec<Vec<u8>> = redis.keys().iter().map(|k| redis.get(k)).collect();

    let r = run(generate(&d, "wrong", &url, &[k2[0], ro]), "wrong key");
    assert_not_served(&r, &d, "clean", "wrong");
    let r = run(generate(&d, "right", &url, &[k1[0], ro]), "right key");
    assert_eq!(r.count("remote"), COMPILES);
    assert_eq!(r.remote()["signed"], true);
    // A key set but empty (a secret this job was not given) leaves the remote out, with a
    // warning: its entries are neither read unauthenticated nor written unsigned.
    let r = run(
        generate(&d, "empty-key", &url, &[("TILEGEN_CACHE_HMAC_KEY", "")]),
        "empty key",
    );
    assert_eq!(r.count("compiled"), COMPILES);
    assert_eq!(r.count("remote"), 0);
    assert!(
        warnings(&r)
            .iter()
            .any(|w| w.contains("TILEGEN_CACHE_HMAC_KEY is set but empty")),
        "{:?}",
        warnings(&r)
    );
    assert_eq!(redis.keys().len(), signed.len(), "nothing written");

    // Entries written without a key are refused by a reader with one.
    redis.flush();
    run(generate(&d, "unsigned-fill", &url, &[]), "unsigned fill");
    let r = run(generate(&d, "unsigned", &url, &[k1[0], ro]), "unsigned");
    assert_not_served(&r, &d, "clean", "unsigned");
    assert!(r.events_named("cache_corrupt")[0]["message"]
        .as_str()
        .unwrap()
        .contains("unsigned"));

    // A forgery with a correct sha256 (each key given the other kernel's entry): served
    // without a key (it checks out, but the entry's own check then refuses the key), and
    // refused with one.
    let keys = redis.keys();
    let plain: Vec<Vec<u8>> = keys.iter().map(|k| redis.get(k)).collect();
    redis.set(&keys[0], &forge(&plain[0], &plain[1]));
    redis.set(&keys[1], &forge(&plain[1], &plain[0]));
    let r = run(
        generate(&d, "forged", &url, &[k1[0], ro]),
        "forged, key set",
    );
    assert_not_served(&r, &d, "clean", "forged");
    let r = run(generate(&d, "forged-nokey", &url, &[ro]), "forged, no key");
    assert_not_served(&r, &d, "clean", "forged-nokey");
    // A signed value moved to another key, its key line rewritten to match: the tag binds
    // the key.
    let signed_keys: Vec<Vec<u8>> = signed
        .iter()
        .map(|v| v.split(|&b| b == b'\n').nth(1).unwrap().to_vec())
        .collect();
    let rekey = |v: &[u8], key_line: &[u8]| {
        let start = v.iter().position(|&b| b == b'\n').unwrap() + 1;
        let end = start + v[start..].iter().position(|&b| b == b'\n').unwrap();
        [&v[..start], key_line, &v[end..]].concat()
    };
    redis.set(&keys[0], &rekey(&signed[1], &signed_keys[0]));
    redis.set(&keys[1], &rekey(&signed[0], &signed_keys[1]));
    let r = run(generate(&d, "moved", &url, &[k1[0], ro]), "signed, moved");
    assert_not_served(&r, &d, "clean", "moved");
    assert!(r.events_named("cache_corrupt")[0]["message"]
        .as_str()
        .unwrap()
        .contains("HMAC"));
}

#[test]
fn read_only_writes_nothing() {
    let Some(vars) = stores() else { return };
    let mut redis = fresh_db(&vars, 4);
    let url = redis_url(&vars, 4);
    let d = dirs();
    let ro = [("TILEGEN_CACHE_REMOTE", "read-only")];
    let r = run(generate(&d, "a", &url, &ro), "read-only, empty store");
    assert_eq!(r.count("compiled"), COMPILES);
    assert_eq!(r.remote()["read_only"], true);
    assert_eq!(r.remote()["writes"], 0);
    assert!(redis.keys().is_empty(), "{:?}", redis.keys());
    run(generate(&d, "b", &url, &[]), "read-write fill");
    let r = run(generate(&d, "c", &url, &ro), "read-only, filled store");
    assert_eq!(r.count("remote"), COMPILES);
    // An unknown mode is taken as read-only, with a warning.
    redis.flush();
    let r = run(
        generate(&d, "e", &url, &[("TILEGEN_CACHE_REMOTE", "yes please")]),
        "unknown mode",
    );
    assert!(redis.keys().is_empty());
    assert_eq!(warnings(&r).len(), 1, "{:?}", warnings(&r));
    // So is one that is not UTF-8 (it once read as unset, that is read-write).
    let mut c = generate(&d, "f", &url, &[]);
    c.env(
        "TILEGEN_CACHE_REMOTE",
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"read-only\xff"),
    );
    let r = run(c, "non-UTF-8 mode");
    assert!(redis.keys().is_empty(), "{:?}", redis.keys());
    assert!(
        warnings(&r).iter().any(|w| w.contains("not UTF-8")),
        "{:?}",
        warnings(&r)
    );
}

/// A free loopback port with nothing listening on it.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn unreachable_remote_costs_one_warning_and_is_dropped_for_the_run() {
    if stores().is_none() {
        return;
    }
    let d = dirs();
    // Nothing listening (refused at once), and a server that accepts but never answers
    // (only the timeouts end it).
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("redis://{}/0", silent.local_addr().unwrap());
    let s3_silent = [
        (
            "AWS_ENDPOINT_URL",
            format!("http://{}", silent.local_addr().unwrap()),
        ),
        ("AWS_ACCESS_KEY_ID", "x".into()),
        ("AWS_SECRET_ACCESS_KEY", "y".into()),
    ];
    let s3_env: Vec<(&str, &str)> = s3_silent.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cases = [
        (
            "refused",
            format!("redis://127.0.0.1:{}/0", closed_port()),
            vec![],
        ),
        ("silent", silent_url, vec![]),
        ("silent-s3", "s3://tilegen-test/x".to_string(), s3_env),
    ];
    let mut base = generate(&d, "base", "", &[]);
    base.env_remove("TILEGEN_CACHE_URL");
    run(base, "no remote");
    for (name, url, env) in &cases {
        let r = run(generate(&d, name, url, env), name);
        assert_eq!(r.count("compiled"), COMPILES, "{name}");
        // The first failure turns the remote off for the run: one warning, no further
        // waits (what that costs in time is measured in bench/results, not asserted here).
        let w = warnings(&r);
        assert_eq!(w.len(), 1, "{name}: one warning, got {w:?}");
        assert!(w[0].contains("not used for the rest of this run"), "{w:?}");
        assert!(!r.stderr.contains("panic"), "{}", r.stderr);
        assert_eq!(r.remote()["disabled"], true);
        assert_eq!(out(&d, "base"), out(&d, name));
    }
    drop(silent);
}

/// A server this test started: stopped when asked, or when the test ends either way.
struct Server(Child);

impl Server {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn server_killed_mid_run_costs_one_warning() {
    if stores().is_none() {
        return;
    }
    // A private server, to kill.
    let port = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server(
        Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test-stores installs it)"),
    );
    let addr = format!("127.0.0.1:{port}");
    let start = Instant::now();
    while TcpStream::connect(&addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let d = dirs();
    let url = format!("redis://{addr}/0");
    // One compile at a time; the server dies when the first result is reported.
    let mut c = generate(&d, "killed", &url, &[]);
    c.args(["--jobs", "1"]);
    let mut child = c.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if stdout.read_line(&mut l).unwrap() == 0 {
            break;
        }
        if l.contains("\"compiled\"") && lines.iter().all(|l: &String| !l.contains("\"compiled\""))
        {
            server.stop();
        }
        lines.push(l);
    }
    let o = finish(child, "killed mid-run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let warns = events
        .iter()
        .filter(|v| v["event"] == "cache_warning")
        .count();
    assert_eq!(warns, 1, "{lines:?}");
    let done = events.iter().find(|v| v["event"] == "done").unwrap();
    assert_eq!(done["report"]["remote"]["disabled"], true, "{done}");
    assert_eq!(done["report"]["remote"]["writes"], 1, "{done}");
    // The same files as a run without a remote.
    let mut c = generate(&d, "plain", "", &[]);
    c.env_remove("TILEGEN_CACHE_URL");
    run(c, "no remote");
    assert_eq!(out(&d, "plain"), out(&d, "killed"));
}

#[test]
fn s3_round_trip() {
    let Some(vars) = stores() else { return };
    let endpoint = vars
        .get("TILEGEN_TEST_S3_ENDPOINT")
        .expect("scripts/test-stores starts an S3 server");
    let bucket = &vars["TILEGEN_TEST_S3_BUCKET"];
    let data = PathBuf::from(&vars["TILEGEN_TEST_S3_DATA"]);
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        (
            "AWS_ACCESS_KEY_ID",
            vars["TILEGEN_TEST_S3_ACCESS_KEY"].as_str(),
        ),
        (
            "AWS_SECRET_ACCESS_KEY",
            vars["TILEGEN_TEST_S3_SECRET_KEY"].as_str(),
        ),
        ("TILEGEN_CACHE_HMAC_KEY", "s3 test key"),
    ];
    let prefix = format!("run-{}", std::process::id());
    let url = format!("s3://{bucket}/{prefix}/kernels");
    let d = dirs();
    let first = run(generate(&d, "a", &url, &env), "S3 fill");
    assert_eq!(first.count("compiled"), COMPILES);
    assert!(warnings(&first).is_empty(), "{:?}", warnings(&first));
    assert_eq!(first.remote()["writes"], COMPILES);
    // The objects are where the URL says, in the server's own folder.
    let stored: Vec<_> = walkdir::WalkDir::new(data.join(bucket).join(&prefix))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.path().to_string_lossy().contains("/v1/"))
        .collect();
    assert_eq!(stored.len(), COMPILES, "{stored:?}");
    let second = run(generate(&d, "b", &url, &env), "S3 hits");
    assert_eq!(second.count("remote"), COMPILES, "{:?}", second.events);
    assert_eq!(out(&d, "a"), out(&d, "b"));
    // 4 GiB values (sparse files): refused by the length the response states, before any of
    // the body is read (reading them whole would not finish in the lookup's 1 s); compiled
    // locally.
    for e in &stored {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(e.path())
            .unwrap();
        f.set_len(4 << 30).unwrap();
    }
    let r = run(generate(&d, "huge", &url, &env), "oversized values");
    assert_eq!(r.count("compiled"), COMPILES, "{:?}", r.events);
    let corrupt = r.events_named("cache_corrupt");
    assert_eq!(corrupt.len(), COMPILES, "{:?}", r.events);
    assert!(
        corrupt[0]["message"]
            .as_str()
            .unwrap()
            .contains("larger than 67108864 bytes"),
        "{:?}",
        corrupt[0]
    );
    assert_eq!(out(&d, "a"), out(&d, "huge"));
    // Wrong credentials: refused by the server, one warning, compiled locally.
    let mut bad = env;
    bad[3] = ("AWS_SECRET_ACCESS_KEY", "not the secret");
    let r = run(generate(&d, "c", &url, &bad), "bad credentials");
    assert_eq!(r.count("compiled"), COMPILES);
    assert_eq!(warnings(&r).len(), 1, "{:?}", r.events);
}

#[test]
fn sixteen_concurrent_generates_share_one_remote() {
    let Some(vars) = stores() else { return };
    let mut redis = fresh_db(&vars, 5);
    let url = redis_url(&vars, 5);
    let d = dirs();
    let children: Vec<Child> = (0..16)
        .map(|i| {
            let mut c = generate(&d, &format!("p{i}"), &url, &[]);
            c.args(["--jobs", "1"]);
            c.spawn().unwrap()
        })
        .collect();
    let mut compiled = 0;
    for (i, child) in children.into_iter().enumerate() {
        let o = finish(child, "concurrent generate");
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!stdout.contains("cache_warning"), "{stdout}");
        assert!(!stdout.contains("cache_corrupt"), "{stdout}");
        compiled += stdout.matches("\"source\":\"compiled\"").count();
    }
    let first = out(&d, "p0");
    assert_eq!(first.len(), 3 * COMPILES + 2);
    for i in 1..16 {
        assert!(out(&d, &format!("p{i}")) == first, "p{i} differs");
    }
    assert!(compiled >= COMPILES);
    assert_eq!(redis.keys().len(), COMPILES);
    // What they left in the store serves a seventeenth machine.
    let r = run(generate(&d, "late", &url, &[]), "after them");
    assert_eq!(r.count("remote"), COMPILES);
}
