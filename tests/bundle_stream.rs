//! Bundles are read as streams: `bundle verify`, `bundle unpack` and `generate --bundle` never
//! hold the archive, nor more than one member, in memory; and a signature file that is not
//! text is a bad bundle (exit code 7), not an I/O error. No GPU and no NVRTC needed: the
//! library is generated from the golden specs without compiling, then given fake binaries.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::FakeLibrary;
use tilegen::bundle::{self, Limits};
use tilegen::Manifest;

/// A small library (golden specs, `_f32` instances, no NVRTC) with fake binaries for sm_80,
/// written into `dir`; the first instance's cubin is `big` bytes. Returns that cubin's path
/// inside the library.
fn fake_library(dir: &Path, big: usize) -> String {
    let m = FakeLibrary {
        specs: common::golden_specs(),
        filter: Some("_f32"),
        targets: &[("sm_80", "8.0")],
        big_cubin: Some(big),
    }
    .write(dir);
    m.instances[0].targets[0].cubin.path.clone()
}

/// Runs tilegen with `args` in `cwd` and returns its exit code, stderr and peak resident set
/// size in bytes (`wait4` gives that child's own `ru_maxrss`, in KiB on Linux).
fn tilegen_measured(cwd: &Path, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, u64) {
    let (code, err, rss, _) = tilegen_pid(cwd, args, env);
    (code, err, rss)
}

/// [`tilegen_measured`], also giving the process id it ran as.
fn tilegen_pid(cwd: &Path, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, u64, u32) {
    let err_path = cwd.join(format!("stderr-{}.txt", args.join("-").replace('/', "_")));
    let err = std::fs::File::create(&err_path).unwrap();
    let mut c = common::tilegen_command(args);
    c.current_dir(cwd).stdout(Stdio::null()).stderr(err);
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain wait4 on our own child with valid out-pointers; `child` is never waited
    // on again.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let mut text = String::new();
    std::fs::File::open(&err_path)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    (code, text, ru.ru_maxrss as u64 * 1024, pid as u32)
}

fn file_sha(p: &Path) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut f = std::fs::File::open(p).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    hex::encode(h.finalize())
}

/// Peak memory of `generate --bundle` on a bundle with one 128 MiB member stays within 1.2 ×
/// that member plus 64 MiB, and `bundle verify` and `bundle unpack`, which keep no member in
/// memory at all, within the 64 MiB (all members were held, and for `generate --bundle`
/// twice, before); the outputs are right.
#[test]
fn verify_unpack_and_generate_stream_one_member_at_a_time() {
    const BIG: usize = 128 << 20;
    const SLACK: u64 = 64 << 20;
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let lib = w.join("lib");
    let big_rel = fake_library(&lib, BIG);
    let archive = w.join("big.tar.gz");
    // In a child: creating reads the whole library into memory.
    let (code, err, _) = tilegen_measured(
        w,
        &["bundle", "create", "--lib", "lib", "--out", "big.tar.gz"],
        &[],
    );
    assert_eq!(code, 0, "bundle create: {err}");
    let compressed = std::fs::metadata(&archive).unwrap().len();
    assert!(
        compressed * 100 > BIG as u64 && compressed < (BIG / 10) as u64,
        "the big member compresses between 10:1 and 100:1 ({compressed} bytes)"
    );
    let want = file_sha(&lib.join(&big_rel));
    let bound = BIG as u64 * 6 / 5 + SLACK;
    let a = archive.to_str().unwrap();
    let cache = w.join("cache");
    let env = [("TILEGEN_CACHE_DIR", cache.as_path())];
    let generate_args = vec![
        "generate",
        "--bundle",
        a,
        "--specs",
        "no-specs",
        "--out",
        "generated",
    ];
    let mut report = Vec::new();
    let mut pids = Vec::new();
    for (what, args, out, bound) in [
        ("bundle verify", vec!["bundle", "verify", a], None, SLACK),
        (
            "bundle unpack",
            vec!["bundle", "unpack", a, "--to", "unpacked"],
            Some(w.join("unpacked")),
            SLACK,
        ),
        (
            "generate --bundle",
            generate_args.clone(),
            Some(w.join("generated")),
            bound,
        ),
    ] {
        let (code, err, rss, pid) = tilegen_pid(w, &args, &env);
        pids.push(pid);
        assert_eq!(code, 0, "{what} failed: {err}");
        report.push(format!("{what}: peak RSS {} MiB", rss >> 20));
        assert!(
            rss <= bound,
            "{what}: peak RSS {rss} bytes, over {bound} (the member is {BIG} bytes)"
        );
        if let Some(out) = out {
            assert_eq!(
                file_sha(&out.join(&big_rel)),
                want,
                "{what}: the big member"
            );
            let m = Manifest::from_bytes(&std::fs::read(out.join("manifest.json")).unwrap());
            assert!(m.unwrap().files.contains(&big_rel));
        }
    }
    // Building from the bundle again rewrites nothing, and --check agrees.
    let gen = |extra: &[&str]| {
        let mut args = generate_args.clone();
        args.extend_from_slice(extra);
        let (code, err, _, pid) = tilegen_pid(w, &args, &env);
        (code, err, pid)
    };
    let (code, err, pid) = gen(&["--check"]);
    pids.push(pid);
    assert_eq!(code, 0, "--check after generate --bundle: {err}");
    std::fs::write(w.join("generated").join(&big_rel), b"changed").unwrap();
    let (code, err, pid) = gen(&["--check"]);
    pids.push(pid);
    assert_eq!(code, 1, "--check must see the changed member: {err}");
    assert!(err.contains(&format!("differs: {big_rel}")), "{err}");
    let (code, err, pid) = gen(&[]);
    pids.push(pid);
    assert_eq!(code, 0, "{err}");
    assert_eq!(file_sha(&w.join("generated").join(&big_rel)), want);
    // No staging folder of these runs is left behind in the temporary folder.
    let ours: Vec<String> = pids
        .iter()
        .map(|p| format!("tilegen-bundle-{p}-"))
        .collect();
    let leftovers: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| ours.iter().any(|o| n.starts_with(o.as_str())))
        })
        .collect();
    assert!(leftovers.is_empty(), "staging folders left: {leftovers:?}");
    // A spawned child starts from this process's peak (Linux records it at exec), so the
    // figures above are upper bounds; this is how much of them that is.
    let own = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_string)
        })
        .unwrap_or_default();
    eprintln!(
        "member {} MiB, archive {} KiB: {} (test process {own})",
        BIG >> 20,
        compressed >> 10,
        report.join("; ")
    );
}

/// A `.minisig` that is not UTF-8 is a bad signature: exit code 7 with a message naming the
/// signature file, not an I/O error (exit code 5).
#[test]
fn a_non_utf8_signature_is_a_bad_bundle() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let lib = w.join("lib");
    fake_library(&lib, 4096);
    let archive = w.join("kernels.tar.gz");
    bundle::create(&lib, &archive).unwrap();
    let (pk, _) = tilegen::__internal::bundle::sign::keygen(&w.join("keys")).unwrap();
    let sig = tilegen::__internal::bundle::sign::signature_path(&archive);
    std::fs::write(&sig, b"untrusted comment: \xff\xfe\x00 not text\n").unwrap();

    let key = bundle::read_public_key(pk.to_str().unwrap()).unwrap();
    let policy = Some(bundle::SignaturePolicy {
        pubkey: &key,
        required: true,
    });
    let e = bundle::open_signed(&archive, &Limits::default(), policy).unwrap_err();
    assert_eq!(e.exit_code(), 7, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("kernels.tar.gz.minisig") && msg.contains("not UTF-8"),
        "{msg}"
    );

    let a = archive.to_str().unwrap();
    let p = pk.to_str().unwrap();
    for args in [
        vec!["bundle", "verify", a, "--pubkey", p],
        vec!["bundle", "unpack", a, "--to", "dest", "--pubkey", p],
        vec![
            "generate",
            "--bundle",
            a,
            "--bundle-pubkey",
            p,
            "--specs",
            "no-specs",
            "--out",
            "out",
        ],
    ] {
        let (code, err, _) = tilegen_measured(w, &args, &[("TILEGEN_CACHE_DIR", &w.join("c"))]);
        assert_eq!(code, 7, "{args:?}: {err}");
        assert!(err.contains("not UTF-8"), "{args:?}: {err}");
    }
    assert!(!w.join("dest").exists() && !w.join("out").exists());
}
