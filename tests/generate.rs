//! End-to-end tests of `tilegen generate` on the default specs: NVRTC compiles every default
//! instance for sm_80 and sm_90, output is deterministic, the checked-in `generated/` is what
//! the specs produce, warm runs write nothing, and the cache survives corruption, concurrent
//! writers and a kill mid-run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tilegen(args: &[&str], cache: &Path) -> Output {
    Command::new(BIN)
        .current_dir(repo())
        .args(args)
        .env("TILEGEN_CACHE_DIR", cache)
        .output()
        .expect("run tilegen")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tilegen failed ({:?}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The final JSON report of a `--message-format json` run.
fn report(stdout: &str) -> serde_json::Value {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "done")
        .map(|v| v["report"].clone())
        .expect("a done event")
}

fn generate(out: &Path, cache: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--message-format",
        "json",
        "generate",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    report(&ok(&tilegen(&args, cache)))
}

/// Every file under `dir`, relative path → bytes.
fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e
                .path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn default_library_is_deterministic_and_checked_in() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let cache_a = tmp.path().join("cache-a");

    // One cold run, compiling everything with NVRTC, must give byte for byte the checked-in
    // library, which another run on another machine wrote: determinism across runs and
    // machines without paying for a second cold compile.
    let ra = generate(&a, &cache_a, &[]);
    let checked_in = tree(&repo().join("generated"));
    let manifest: serde_json::Value = serde_json::from_slice(&checked_in["manifest.json"]).unwrap();
    let count = manifest["instances"].as_array().unwrap().len() as u64;
    assert_eq!(ra["instances"].as_u64().unwrap(), count, "{ra}");
    assert_eq!(ra["cache_hits"], 0);
    let ta = tree(&a);
    let only_a: Vec<&String> = ta.keys().filter(|k| !checked_in.contains_key(*k)).collect();
    let only_g: Vec<&String> = checked_in.keys().filter(|k| !ta.contains_key(*k)).collect();
    assert!(
        only_a.is_empty() && only_g.is_empty(),
        "file sets differ: only in the cold run {only_a:?}, only in generated/ {only_g:?}"
    );
    for (k, v) in &ta {
        assert!(
            checked_in[k] == *v,
            "{k} differs from generated/; run `tilegen generate`"
        );
    }
    // A second folder from the warm cache: the same bytes again.
    let rb = generate(&b, &cache_a, &[]);
    assert_eq!(rb["compiled"], 0, "{rb}");
    assert_eq!(tree(&b), ta, "a warm run into another folder differs");
    // Every instance has a cubin for sm_90, and for sm_80 unless its shared memory is over
    // sm_80's 163 KiB or it is the head_dim-128 attention tile of 128×64 that builds without
    // spills on sm_90 only (the specs give those archs: [sm_90] alone); the wgmma GEMMs have
    // only sm_90a code.
    for inst in manifest["instances"].as_array().unwrap() {
        let archs: Vec<&str> = inst["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["arch"].as_str().unwrap())
            .collect();
        if inst["params"]["engine"] == "wgmma" {
            assert_eq!(archs, ["sm_90a"], "{}", inst["name"]);
            continue;
        }
        let fits_sm80 = inst["launch"]["shared_bytes"].as_u64().unwrap() <= 163 * 1024;
        let p = &inst["params"];
        let spills_on_sm80 = inst["op"] == "attention"
            && p["head_dim"] == 128
            && p["tile_q"] == 128
            && p["tile_kv"] == 64;
        assert!(archs.contains(&"sm_90"), "{}: {archs:?}", inst["name"]);
        assert_eq!(
            archs.contains(&"sm_80"),
            fits_sm80 && !spills_on_sm80,
            "{}: {archs:?}",
            inst["name"]
        );
    }

    // Warm run: everything from the cache, nothing written.
    let warm = generate(&a, &cache_a, &[]);
    assert_eq!(warm["compiled"], 0, "{warm}");
    assert_eq!(warm["written"].as_array().unwrap().len(), 0, "{warm}");

    // The checked-in library is exactly what the specs produce.
    let check = tilegen(&["generate", "--check"], &cache_a);
    assert!(
        check.status.success(),
        "generated/ is out of date; run `tilegen generate`:\n{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // A truncated and a bit-flipped cache entry are detected, rebuilt and reported.
    let entries: Vec<PathBuf> = walkdir::WalkDir::new(cache_a.join("v1"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    let bytes = std::fs::read(&entries[0]).unwrap();
    std::fs::write(&entries[0], &bytes[..bytes.len() / 2]).unwrap();
    let mut flipped = std::fs::read(&entries[1]).unwrap();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    std::fs::write(&entries[1], &flipped).unwrap();
    let out = ok(&tilegen(
        &[
            "--message-format",
            "json",
            "generate",
            "--out",
            a.to_str().unwrap(),
        ],
        &cache_a,
    ));
    let r = report(&out);
    assert_eq!(r["corrupt_cache_entries"], 2, "{r}");
    assert_eq!(r["compiled"], 2, "{r}");
    assert_eq!(out.matches("cache_corrupt").count(), 2);
    assert_eq!(tree(&a), ta, "rebuilt entries give the same library");
}

#[test]
fn stale_files_are_removed_and_check_reports_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lib");
    let cache = tmp.path().join("cache");
    let specs = tmp.path().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let spec = |dtypes: &str| {
        format!("kernels:\n  - name: add\n    op: vector_add\n    dtype: [{dtypes}]\n    archs: sm_80\n")
    };
    std::fs::write(specs.join("a.yaml"), spec("f32, f16")).unwrap();
    let s = specs.to_str().unwrap();
    generate(&out, &cache, &["--specs", s]);
    assert!(out.join("kernels/add_f16_b256_i4.cu").exists());
    std::fs::write(out.join("user-notes.txt"), "mine").unwrap();
    std::fs::write(specs.join("a.yaml"), spec("f32")).unwrap();
    let check = tilegen(
        &[
            "generate",
            "--check",
            "--specs",
            s,
            "--out",
            out.to_str().unwrap(),
        ],
        &cache,
    );
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stderr).contains("stale: kernels/add_f16_b256_i4.cu"));
    let r = generate(&out, &cache, &["--specs", s]);
    assert!(!r["removed"].as_array().unwrap().is_empty());
    assert!(!out.join("kernels/add_f16_b256_i4.cu").exists());
    assert!(
        out.join("user-notes.txt").exists(),
        "files tilegen did not write are kept"
    );
}

/// The cache is keyed by what decides a kernel's bytes: a comment added above a kernel moves
/// it within its spec (the header of its CUDA C names the new line) and compiles nothing,
/// while a change to the kernel compiles it again.
#[test]
fn moving_a_kernel_within_its_spec_compiles_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let specs = tmp.path().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let spec = "kernels:\n  - name: add\n    op: vector_add\n    dtype: f32\n    archs: sm_80\n";
    std::fs::write(specs.join("a.yaml"), spec).unwrap();
    let s = specs.to_str().unwrap();
    let (first, moved) = (tmp.path().join("first"), tmp.path().join("moved"));
    assert_eq!(generate(&first, &cache, &["--specs", s])["compiled"], 1);

    std::fs::write(specs.join("a.yaml"), format!("# vectors\n\n{spec}")).unwrap();
    let r = generate(&moved, &cache, &["--specs", s]);
    assert_eq!(
        (&r["compiled"], &r["cache_hits"]),
        (&0.into(), &1.into()),
        "{r}"
    );
    let (a, b) = (tree(&first), tree(&moved));
    let cu = "kernels/add_f32_b256_i4.cu";
    assert!(String::from_utf8_lossy(&b[cu]).starts_with(&format!(
        "// @generated by tilegen {} from a.yaml:4.",
        env!("CARGO_PKG_VERSION")
    )));
    for (path, bytes) in &a {
        if path.ends_with(".ptx") || path.ends_with(".cubin") {
            assert_eq!(Some(bytes), b.get(path), "{path}");
        }
    }

    std::fs::write(
        specs.join("a.yaml"),
        spec.replace("f32", "f32\n    items: 2"),
    )
    .unwrap();
    let r = generate(&tmp.path().join("changed"), &cache, &["--specs", s]);
    assert_eq!(r["compiled"], 1, "{r}");
}

#[test]
fn concurrent_generates_on_one_cold_cache_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    // A subset keeps this fast on 2 cores; scripts/stress-cache runs the whole library.
    let children: Vec<_> = (0..16)
        .map(|i| {
            let out = tmp.path().join(format!("out{i}"));
            let child = Command::new(BIN)
                .current_dir(repo())
                .args([
                    "generate",
                    "--filter",
                    "softmax_f32",
                    "-j",
                    "1",
                    "--out",
                    out.to_str().unwrap(),
                ])
                .env("TILEGEN_CACHE_DIR", &cache)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    let mut trees = Vec::new();
    for (out, child) in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        trees.push(tree(&out));
    }
    for t in &trees[1..] {
        assert!(
            *t == trees[0],
            "concurrent runs produced different libraries"
        );
    }
    let verify = tilegen(&["cache", "verify"], &cache);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[test]
fn killed_generate_leaves_no_usable_partial_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    for delay_ms in [150, 400, 900] {
        let mut child = Command::new(BIN)
            .current_dir(repo())
            .args([
                "generate",
                "--filter",
                "layernorm",
                "--out",
                out.to_str().unwrap(),
            ])
            .env("TILEGEN_CACHE_DIR", &cache)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Whatever was published is whole: verify finds nothing corrupt.
        let v = tilegen(&["cache", "verify"], &cache);
        assert!(
            v.status.success(),
            "after a kill at {delay_ms} ms: {}",
            String::from_utf8_lossy(&v.stdout)
        );
    }
    let r = generate(&out, &cache, &["--filter", "layernorm"]);
    assert_eq!(r["corrupt_cache_entries"], 0);
    let fresh = tmp.path().join("fresh");
    generate(
        &fresh,
        &tmp.path().join("cache2"),
        &["--filter", "layernorm"],
    );
    assert_eq!(
        tree(&out),
        tree(&fresh),
        "a run after kills gives the same library as a clean one"
    );
}
