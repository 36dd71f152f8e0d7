//! The cache and NVRTC under hostile or careless conditions: cache commands on folders that
//! are not caches, entries of the wrong type, a truncated or incomplete NVRTC, failed sources
//! piling up, and many cold runs on one cache compiling the same kernels.
//! Every run uses a tiny spec (four vector_add instances, one arch).

mod common;
use common::finish;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");

const SPEC: &str = "\
kernels:
  - name: tiny
    op: vector_add
    dtype: [f32, f16]
    block: 256
    items: [1, 2]
    archs: [sm_80]
";
const INSTANCES: usize = 4;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn nvrtc_lib() -> PathBuf {
    repo().join(".nvrtc/nvidia/cu13/lib/libnvrtc.so.13")
}

fn spec(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.yaml");
    std::fs::write(&p, SPEC).unwrap();
    p
}

fn command(args: &[&str], cache: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(repo())
        .args(args)
        .env("TILEGEN_CACHE_DIR", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn run(mut c: Command, what: &str) -> Output {
    finish(c.spawn().unwrap(), what)
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `generate` of the tiny spec into `out`, with `extra` arguments before it.
fn generate_command(extra: &[&str], spec: &Path, out: &Path, cache: &Path) -> Command {
    let mut args = extra.to_vec();
    args.extend([
        "generate",
        "--specs",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    command(&args, cache)
}

/// A JSON generate of the tiny spec into `out`, not yet started.
fn json_generate(spec: &Path, out: &Path, cache: &Path) -> Command {
    let mut c = generate_command(&["--message-format", "json"], spec, out, cache);
    c.args(["-j", "2"]);
    c
}

/// A JSON generate of the tiny spec into `out`; returns its output.
fn generate(spec: &Path, out: &Path, cache: &Path) -> Output {
    run(json_generate(spec, out, cache), "generate")
}

/// A cache command (`cache ARGS`) on `cache` with JSON output.
fn cache_json(args: &[&str], cache: &Path) -> Output {
    let mut all = vec!["--message-format", "json", "cache"];
    all.extend_from_slice(args);
    run(command(&all, cache), args[0])
}

fn assert_cache_warning(o: &Output) {
    assert!(
        json_lines(o).iter().any(|v| v["event"] == "cache_warning"),
        "{}",
        text(o)
    );
}

fn stderr_has(o: &Output, what: &str) -> bool {
    String::from_utf8_lossy(&o.stderr).contains(what)
}

fn report(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    json_lines(o)
        .into_iter()
        .find(|v| v["event"] == "done")
        .map(|v| v["report"].clone())
        .expect("a done event")
}

/// Kernels NVRTC actually compiled in a run (not served from the cache).
fn compiles(o: &Output) -> usize {
    json_lines(o)
        .iter()
        .filter(|v| v["event"] == "compiled" && v["cached"] == false)
        .count()
}

/// Every file and link under `dir`: relative path → bytes (a link → its target).
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_type().is_dir())
        .map(|e| {
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            let bytes = if e.file_type().is_symlink() {
                std::fs::read_link(e.path())
                    .unwrap()
                    .display()
                    .to_string()
                    .into_bytes()
            } else {
                std::fs::read(e.path()).unwrap()
            };
            (rel, bytes)
        })
        .collect()
}

fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = walkdir::WalkDir::new(cache.join("v1"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".entry"))
        .map(|e| e.into_path())
        .collect();
    v.sort();
    v
}

/// `parent/name`, made.
fn new_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_old(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::options()
        .append(true)
        .open(path)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
}

// Cache commands never delete what is not theirs.
#[test]
fn cache_commands_refuse_a_folder_that_is_not_a_cache_and_remove_only_their_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let key = "ab".repeat(32);

    // A user's folder that happens to have tmp/ and v1/, even with entry-like names.
    let home = tmp.path().join("home");
    write_old(&home.join("tmp/old-notes.txt"), "mine");
    write_old(&home.join("tmp/0123456789abcdef.Ab3xZ9"), "mine");
    write_old(&home.join("v1/notes.txt"), "mine");
    write_old(&home.join("v1/ab/user.txt"), "mine");
    write_old(&home.join(format!("v1/ab/{key}.entry")), "mine");
    write_old(&home.join("thesis.tex"), "mine");
    let before = tree(&home);
    for cmd in [
        &["cache", "clean"][..],
        &["cache", "gc", "--max-size", "0"],
        &["cache", "verify"],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--cache-dir", home.to_str().unwrap()]);
        let o = run(command(&args, &home), "cache command");
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", text(&o));
        assert!(
            stderr_has(&o, "is not a tilegen cache"),
            "{cmd:?}: {}",
            text(&o)
        );
        assert_eq!(tree(&home), before, "{cmd:?} changed a foreign folder");
    }
    // generate does not take such a folder over either: it warns and compiles without it.
    let o = generate(&spec, &tmp.path().join("out0"), &home);
    assert_eq!(report(&o)["compiled"], INSTANCES);
    assert_cache_warning(&o);
    assert_eq!(tree(&home), before, "generate wrote into a foreign folder");

    // A real cache with someone's files in it: gc and clean remove only entries, and say how
    // many they removed.
    let cache = tmp.path().join("cache");
    report(&generate(&spec, &tmp.path().join("out1"), &cache));
    assert!(cache.join("CACHEDIR.TAG").is_file());
    assert!(std::fs::read_to_string(cache.join("CACHEDIR.TAG"))
        .unwrap()
        .starts_with("Signature: 8a477f597d28d172789f06886806bc55"));
    assert_eq!(entries(&cache).len(), INSTANCES);
    let shard = entries(&cache)[0].parent().unwrap().to_path_buf();
    let foreign = [
        cache.join("notes.txt"),
        cache.join("tmp/old-notes.txt"),
        cache.join("v1/notes.txt"),
        cache.join("v1/zz/user.txt"),
        shard.join("user.txt"),
    ];
    for f in &foreign {
        write_old(f, "mine");
    }
    let o = cache_json(&["gc", "--max-size", "0"], &cache);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_lines(&o)[0]["removed"], INSTANCES, "{}", text(&o));
    assert!(entries(&cache).is_empty());
    report(&generate(&spec, &tmp.path().join("out1"), &cache));
    let o = cache_json(&["clean"], &cache);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_lines(&o)[0]["removed"]["entries"], INSTANCES);
    assert!(entries(&cache).is_empty());
    for f in &foreign {
        assert!(f.is_file(), "{} was removed", f.display());
    }
    assert!(cache.join("CACHEDIR.TAG").is_file() && cache.join("tilegen-cache.version").is_file());

    // A cache from before the marks: destructive commands refuse it, generate adopts it.
    let old = tmp.path().join("old-cache");
    report(&generate(&spec, &tmp.path().join("out2"), &old));
    std::fs::remove_file(old.join("CACHEDIR.TAG")).unwrap();
    std::fs::remove_file(old.join("tilegen-cache.version")).unwrap();
    let o = run(command(&["cache", "clean"], &old), "clean");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr_has(&o, "older tilegen"));
    assert_eq!(entries(&old).len(), INSTANCES);
    let r = report(&generate(&spec, &tmp.path().join("out2"), &old));
    assert_eq!(r["cache_hits"], INSTANCES, "adopted, entries used");
    assert!(old.join("CACHEDIR.TAG").is_file());
    let o = run(command(&["cache", "clean"], &old), "clean");
    assert!(o.status.success(), "{}", text(&o));
}

// Entries replaced by folders, fifos, dangling links; v1/XX and tmp replaced by files.
#[test]
fn wrong_typed_entries_are_misses_and_verify_repairs_them() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let cache = tmp.path().join("cache");
    let cold = tmp.path().join("cold");
    report(&generate(&spec, &cold, &cache));
    let want = tree(&cold);
    let all = entries(&cache);
    assert_eq!(all.len(), INSTANCES);
    // The entry whose folder becomes a file must be alone in it, so that each planted
    // problem is one thing to repair.
    let shard_of = |p: &PathBuf| p.parent().unwrap().to_path_buf();
    let alone = all
        .iter()
        .position(|e| all.iter().filter(|o| shard_of(o) == shard_of(e)).count() == 1)
        .expect("an entry alone in its folder");
    let mut others: Vec<PathBuf> = all.clone();
    let lone = others.remove(alone);
    let (as_dir, as_fifo, as_link) = (&others[0], &others[1], &others[2]);

    let plant = |dir_content: bool| {
        std::fs::remove_file(as_dir).unwrap();
        std::fs::create_dir(as_dir).unwrap();
        if dir_content {
            std::fs::write(as_dir.join("something"), "x").unwrap();
        }
        std::fs::remove_file(as_fifo).unwrap();
        let c = std::ffi::CString::new(as_fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        std::fs::remove_file(as_link).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), as_link).unwrap();
        std::fs::remove_dir_all(shard_of(&lone)).unwrap();
        std::fs::write(shard_of(&lone), "not a folder").unwrap();
        let _ = std::fs::remove_dir_all(cache.join("tmp"));
        std::fs::write(cache.join("tmp"), "not a folder").unwrap();
    };

    // generate copes with all of them (the non-empty folder stays; that kernel is compiled
    // and used without being cached) and gives the same library.
    plant(true);
    let out = tmp.path().join("out");
    let o = generate(&spec, &out, &cache);
    let r = report(&o);
    assert_eq!(tree(&out), want, "same library as the cold run");
    assert_eq!(r["corrupt_cache_entries"], 4, "{}", text(&o));
    assert_cache_warning(&o);
    let verify = || {
        let o = cache_json(&["verify"], &cache);
        (o.status.code(), json_lines(&o).remove(0))
    };
    let (code, v) = verify();
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["corrupt_removed"].as_array().unwrap().len(), 0, "{v}");
    let unrepaired = v["unrepaired"].as_array().unwrap();
    assert_eq!(unrepaired.len(), 1, "{v}");
    assert!(unrepaired[0]
        .as_str()
        .unwrap()
        .contains("folder with files"));
    // Once the user removes that folder, the entry is compiled and cached again.
    std::fs::remove_dir_all(as_dir).unwrap();

    // verify finds and removes every one of them, and counts them.
    let r = report(&generate(&spec, &out, &cache));
    assert_eq!(r["corrupt_cache_entries"], 0);
    plant(false);
    let (code, v) = verify();
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(
        v["corrupt_removed"].as_array().unwrap().len(),
        5,
        "three entries, one entry folder, tmp: {v}"
    );
    assert_eq!(v["unrepaired"].as_array().unwrap().len(), 0, "{v}");
    let (code, v) = verify();
    assert_eq!(code, Some(0), "{v}");
    let o = generate(&spec, &out, &cache);
    let r = report(&o);
    assert_eq!(r["corrupt_cache_entries"], 0, "{}", text(&o));
    assert_eq!(r["cache_hits"], 0, "every planted entry was removed");
    assert_eq!(tree(&out), want);
    let (code, v) = verify();
    assert_eq!(
        (code, v["checked"].as_u64()),
        (Some(0), Some(INSTANCES as u64))
    );
}

// A truncated libnvrtc is reported (exit 6, its path), not a SIGBUS.
#[test]
fn truncated_or_foreign_nvrtc_is_exit_6_with_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let real = std::fs::read(nvrtc_lib()).expect("scripts/setup-nvrtc installs NVRTC");
    for (what, bytes) in [
        ("truncated", &real[..real.len() / 2]),
        ("not an ELF file", b"not a library at all".as_slice()),
    ] {
        let dir = new_dir(tmp.path(), &what.replace(' ', "-"));
        let lib = dir.join("libnvrtc.so.13");
        std::fs::write(&lib, bytes).unwrap();
        let cache = tmp.path().join("cache");
        for (mut c, want_code) in [
            (
                generate_command(&[], &spec, &tmp.path().join("out"), &cache),
                6,
            ),
            (command(&["doctor"], &cache), 6),
        ] {
            c.env("TILEGEN_NVRTC", &lib);
            let o = run(c, "tilegen with a bad NVRTC");
            let all = text(&o);
            assert_eq!(o.status.code(), Some(want_code), "{what}: {all}");
            assert!(all.contains(lib.to_str().unwrap()), "{what}: {all}");
            assert!(all.contains(what), "{what}: {all}");
        }
    }
}

// An NVRTC without its builtins library is a broken NVRTC (6), not a failed compile (4).
#[test]
fn nvrtc_without_builtins_is_exit_6() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let dir = new_dir(tmp.path(), "lonely");
    std::fs::copy(nvrtc_lib(), dir.join("libnvrtc.so.13")).unwrap();
    let out = tmp.path().join("out");
    let mut c = generate_command(&[], &spec, &out, &tmp.path().join("cache"));
    c.env("TILEGEN_NVRTC", &dir).env("TMPDIR", tmp.path());
    let o = run(c, "generate");
    let all = text(&o);
    assert_eq!(o.status.code(), Some(6), "{all}");
    assert!(all.contains("NVRTC is broken"), "{all}");
    assert!(all.contains("libnvrtc-builtins"), "{all}");
    assert!(!out.exists());
}

// Sources NVRTC rejects go to one folder per run, and old runs' folders are removed.
#[test]
fn failed_sources_go_to_one_folder_per_run_and_old_ones_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let templates = new_dir(tmp.path(), "templates");
    std::fs::write(
        templates.join("prelude.cuh"),
        "#error tilegen test: this source must not compile\n",
    )
    .unwrap();
    let sys_tmp = new_dir(tmp.path(), "systmp");
    // What an older tilegen left: one loose file per failed compile.
    let loose = sys_tmp.join("tilegen-failed-tiny_f32_b256_i1-Ab3xZ9.cu");
    std::fs::write(&loose, "old").unwrap();
    let runs = 11;
    let mut kept = Vec::new();
    for _ in 0..runs {
        let out = tmp.path().join("out");
        let mut c = generate_command(&[], &spec, &out, &tmp.path().join("cache"));
        c.args(["--templates", templates.to_str().unwrap()])
            .env("TMPDIR", &sys_tmp);
        let o = run(c, "generate");
        let all = text(&o);
        assert_eq!(o.status.code(), Some(4), "{all}");
        let source = all
            .lines()
            .find_map(|l| l.trim().strip_prefix("source: "))
            .map(PathBuf::from)
            .expect("the error names the kept source");
        assert!(source.is_file(), "{all}");
        assert!(std::fs::read_to_string(&source)
            .unwrap()
            .contains("#error tilegen test"));
        let run_dir = source.parent().unwrap().to_path_buf();
        assert_eq!(run_dir.parent().unwrap(), sys_tmp);
        assert_eq!(
            std::fs::read_dir(&run_dir).unwrap().count(),
            INSTANCES,
            "every failed source of the run in its one folder"
        );
        kept.push(run_dir);
    }
    assert!(!loose.exists(), "an older tilegen's loose file is removed");
    let left: Vec<_> = std::fs::read_dir(&sys_tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left.len(), 8, "the latest runs are kept: {left:?}");
    for d in &kept[runs - 8..] {
        assert!(d.is_dir(), "{} was removed too early", d.display());
    }
}

// Many cold runs on one cache compile each kernel about once.
#[test]
fn concurrent_cold_generates_compile_each_kernel_about_once() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let single = generate(
        &spec,
        &tmp.path().join("single"),
        &tmp.path().join("cache1"),
    );
    report(&single);
    let one_run = compiles(&single);
    assert_eq!(one_run, INSTANCES);
    let want = tree(&tmp.path().join("single"));

    let n = 16;
    let cache = tmp.path().join("shared-cache");
    let children: Vec<_> = (0..n)
        .map(|i| {
            let out = tmp.path().join(format!("out{i}"));
            let child = json_generate(&spec, &out, &cache).spawn().unwrap();
            (out, child)
        })
        .collect();
    let mut total = 0;
    for (out, child) in children {
        let o = finish(child, "concurrent generate");
        report(&o);
        total += compiles(&o);
        assert_eq!(
            tree(&out),
            want,
            "concurrent runs produced different libraries"
        );
    }
    eprintln!("{n} concurrent cold generates: {total} compiles; one cold run: {one_run}");
    assert!(
        total * 2 <= one_run * 3,
        "{n} concurrent cold runs compiled {total} kernels, one run {one_run}"
    );
    let o = run(command(&["cache", "verify"], &cache), "verify");
    assert!(o.status.success(), "{}", text(&o));
}
