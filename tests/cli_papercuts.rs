//! The command line's small promises: `show` suggests a near name and refuses PTX for an arch
//! the instance cannot run on, `check` refuses archs the pinned NVRTC cannot target,
//! `generate --check` counts the files it found unchanged, `doctor` says in fields what it
//! found and fails without NVRTC, the GPU commands refuse a `--kernel-timeout` that is no
//! number of seconds, `verify` a `--repeat` outside 1 to 10000, and `generate
//! --prune-by-tuning` stops, the library untouched, when it finds no tuning folder; a GPU
//! command refuses a library whose manifest is a fifo instead of waiting on it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::tilegen_command;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn spec(dir: &Path, archs: &str) -> PathBuf {
    let p = dir.join("tiny.yaml");
    std::fs::write(
        &p,
        format!(
            "kernels:\n  - name: add\n    op: vector_add\n    dtype: [f32, bf16]\n    archs: {archs}\n"
        ),
    )
    .unwrap();
    p
}

fn run(args: &[&str], dir: &Path) -> Output {
    tilegen_command(args)
        .env("TILEGEN_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap()
}

#[test]
fn show_suggests_a_near_name() {
    let tmp = tempfile::tempdir().unwrap();
    let s = spec(tmp.path(), "[sm_80]");
    let o = run(
        &["show", "add_f23_b256_i4", "--specs", s.to_str().unwrap()],
        tmp.path(),
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("did you mean `add_f32_b256_i4`?"), "{t}");
    let o = run(
        &["show", "zzzz", "--specs", s.to_str().unwrap()],
        tmp.path(),
    );
    assert!(!text(&o).contains("did you mean"), "{}", text(&o));
}

#[test]
fn show_ptx_applies_the_arch_checks_of_generate() {
    let tmp = tempfile::tempdir().unwrap();
    let s = spec(tmp.path(), "[sm_80]");
    // bf16 needs sm_80: no PTX for sm_75, and no compile is attempted.
    let o = run(
        &[
            "show",
            "add_bf16_b256_i4",
            "--ptx",
            "sm_75",
            "--specs",
            s.to_str().unwrap(),
        ],
        tmp.path(),
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("bf16 needs sm_80+"), "{t}");
    assert!(!tmp.path().join("cache").exists(), "nothing compiled: {t}");
}

#[test]
fn check_refuses_archs_the_pinned_nvrtc_cannot_target() {
    let tmp = tempfile::tempdir().unwrap();
    let s = spec(tmp.path(), "[sm_70, sm_80]");
    let o = run(&["check", "--specs", s.to_str().unwrap()], tmp.path());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("sm_70 is not a target of NVRTC 13.0.88"), "{t}");
    assert!(t.contains("tiny.yaml:"), "names the file: {t}");
}

#[test]
fn generate_check_counts_unchanged_files() {
    let tmp = tempfile::tempdir().unwrap();
    let s = spec(tmp.path(), "[sm_80]");
    let out = tmp.path().join("lib");
    let (s, out_s) = (s.to_str().unwrap(), out.to_str().unwrap());
    let generate = [
        "generate", "--specs", s, "--out", out_s, "--filter", "add_f32",
    ];
    let o = run(&generate, tmp.path());
    assert!(o.status.success(), "{}", text(&o));
    let files = walk(&out);
    let o = run(&[&generate[..], &["--check"]].concat(), tmp.path());
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains(&format!("{files} unchanged")),
        "{files} files: {t}"
    );
}

fn walk(dir: &Path) -> usize {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter(|e| e.as_ref().unwrap().file_type().is_file())
        .count()
}

#[test]
fn doctor_reports_fields_and_fails_without_nvrtc() {
    let tmp = tempfile::tempdir().unwrap();
    // A usable NVRTC: exit 0 (no GPU is required without --gpu), fields in JSON.
    let o = run(&["--message-format", "json", "doctor"], tmp.path());
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["event"], "doctor");
    assert_eq!(v["nvrtc"]["found"], true, "{t}");
    assert!(
        v["nvrtc"]["version"].as_str().unwrap().starts_with("13.0"),
        "{t}"
    );
    assert!(
        v["cache"]["path"].as_str().unwrap().ends_with("cache"),
        "{t}"
    );
    assert!(v["gpu"]["driver"].is_boolean(), "{t}");
    // No GPU here means `--gpu` fails; with one it passes.
    let o = run(&["doctor", "--gpu"], tmp.path());
    assert_eq!(
        o.status.success(),
        v["gpu"]["device"].is_object(),
        "{}",
        text(&o)
    );

    // An NVRTC that is not a library: exit 6, and the JSON says why.
    let bad = tmp.path().join("libnvrtc.so.13");
    std::fs::write(&bad, b"not a library").unwrap();
    let v = doctor_json_failing_with_nvrtc(bad.as_os_str());
    assert_eq!(v["nvrtc"]["found"], false);
    assert!(v["nvrtc"]["error"]
        .as_str()
        .unwrap()
        .contains("not an ELF file"));

    // A TILEGEN_NVRTC that holds no NVRTC asks for one that is not there: exit 6, rather
    // than another NVRTC found elsewhere standing in for it. Empty, it is unset.
    let nowhere = tmp.path().join("no-nvrtc-here");
    let v = doctor_json_failing_with_nvrtc(nowhere.as_os_str());
    let error = v["nvrtc"]["error"].as_str().unwrap();
    assert!(
        error.contains("TILEGEN_NVRTC") && error.contains(nowhere.to_str().unwrap()),
        "{error}"
    );
    // Nor does an install elsewhere stand in for it: refused before pip runs.
    let o = tilegen_command(&["nvrtc", "install", "--if-missing", "--dir"])
        .arg(tmp.path().join("installed"))
        .env("TILEGEN_NVRTC", &nowhere)
        .env("TILEGEN_PYTHON", tmp.path().join("no-python"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(text(&o).contains("TILEGEN_NVRTC asks for"), "{}", text(&o));
    assert!(!tmp.path().join("installed").exists());
    let unset = doctor_json(None);
    let empty = doctor_json(Some("".as_ref()));
    assert_eq!(empty.status.code(), unset.status.code(), "{}", text(&empty));
}

/// `tilegen doctor` in JSON with TILEGEN_NVRTC set to `nvrtc`, or unset.
fn doctor_json(nvrtc: Option<&std::ffi::OsStr>) -> Output {
    let mut c = tilegen_command(&["--message-format", "json", "doctor"]);
    match nvrtc {
        Some(v) => c.env("TILEGEN_NVRTC", v),
        None => c.env_remove("TILEGEN_NVRTC"),
    };
    c.output().unwrap()
}

/// `tilegen doctor`'s JSON with TILEGEN_NVRTC set to `nvrtc`, which must fail it with exit 6
/// (no usable NVRTC).
fn doctor_json_failing_with_nvrtc(nvrtc: &std::ffi::OsStr) -> serde_json::Value {
    let o = doctor_json(Some(nvrtc));
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A fifo as a library's manifest for the GPU commands (read before any GPU is looked for)
/// is refused, not opened to wait for a writer.
#[test]
fn a_fifo_as_a_librarys_manifest_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let lib = tmp.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    std::os::unix::fs::symlink(&fifo, lib.join("manifest.json")).unwrap();
    let mut verify = tilegen_command(&["verify", "--lib", lib.to_str().unwrap()]);
    verify.stderr(std::process::Stdio::piped());
    let o = common::finish(
        verify.spawn().unwrap(),
        "verify of a library whose manifest is a fifo",
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("not a regular file"), "{}", text(&o));
}

#[test]
fn a_kernel_timeout_that_is_no_number_of_seconds_is_a_usage_error() {
    for (cmd, value) in [
        ("verify", "-1"),
        ("bench", "soon"),
        ("tune", "2000000"),
        ("verify", "NaN"),
    ] {
        let flag = format!("--kernel-timeout={value}");
        let o = tilegen_command(&[cmd, "--lib", "no-such-library", &flag])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{cmd} {value}: {}", text(&o));
        let t = text(&o);
        assert!(t.contains("--kernel-timeout"), "{t}");
        assert!(t.contains("give seconds from 0 (no limit)"), "{t}");
    }
}

#[test]
fn verify_repeat_outside_one_to_ten_thousand_is_a_usage_error() {
    for value in ["0", "10001", "twice", "-3"] {
        let flag = format!("--repeat={value}");
        let o = tilegen_command(&["verify", "--lib", "no-such-library", &flag])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{value}: {}", text(&o));
        assert!(text(&o).contains("--repeat"), "{value}: {}", text(&o));
    }
    // In range, it gets past the arguments to the library, which does not exist.
    let o = tilegen_command(&["verify", "--lib", "no-such-library", "--repeat", "50"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no-such-library"), "{}", text(&o));
}

#[test]
fn bench_rounds_outside_one_to_a_hundred_or_with_dispatch_are_usage_errors() {
    for args in [
        &["--rounds", "0"][..],
        &["--rounds", "101"],
        &["--rounds", "two"],
        &["--rounds", "3", "--dispatch"],
    ] {
        let mut all = vec!["bench", "--lib", "no-such-library"];
        all.extend_from_slice(args);
        let o = tilegen_command(&all).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("--rounds"), "{args:?}: {}", text(&o));
    }
    // In range, it gets past the arguments to the library, which does not exist.
    let o = tilegen_command(&["bench", "--lib", "no-such-library", "--rounds", "3"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn bench_ld_align_off_a_multiple_of_eight_or_with_dispatch_is_a_usage_error() {
    for args in [
        &["--ld-align", "0"][..],
        &["--ld-align", "12"],
        &["--ld-align", "131072"],
        &["--ld-align=-64"],
        &["--ld-align", "64", "--dispatch"],
    ] {
        let mut all = vec!["bench", "--lib", "no-such-library"];
        all.extend_from_slice(args);
        let o = tilegen_command(&all).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("--ld-align"), "{args:?}: {}", text(&o));
    }
    let o = tilegen_command(&["bench", "--lib", "no-such-library", "--ld-align", "64"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no-such-library"), "{}", text(&o));
}

#[test]
fn bench_dispatch_takes_shapes_and_reads_them_before_the_gpu() {
    // `--dispatch` times at the given shapes: a shapes file that is not there is named
    // (a usage error, before any library or GPU is opened), not refused as a conflict.
    let o = tilegen_command(&[
        "bench",
        "--lib",
        "no-such-library",
        "--dispatch",
        "--shapes",
        "no-such-shapes.json",
    ])
    .output()
    .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("cannot be used with"), "{}", text(&o));
    assert!(text(&o).contains("no-such-shapes.json"), "{}", text(&o));
}

#[test]
fn prune_by_tuning_without_a_table_is_an_error_and_keeps_the_library() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("cand.yaml");
    std::fs::write(
        &p,
        "kernels:\n  - name: add\n    op: vector_add\n    dtype: f32\n    archs: [sm_80]\n    tuning: candidates\n",
    )
    .unwrap();
    let out = tmp.path().join("lib");
    let (s, out_s) = (p.to_str().unwrap(), out.to_str().unwrap());
    let o = run(&["generate", "--specs", s, "--out", out_s], tmp.path());
    assert!(o.status.success(), "{}", text(&o));
    let files = walk(&out);
    // No `tuning` folder beside the spec: every candidate would go.
    let o = run(
        &[
            "generate",
            "--specs",
            s,
            "--out",
            out_s,
            "--prune-by-tuning",
        ],
        tmp.path(),
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("no table was found"), "{t}");
    assert_eq!(walk(&out), files, "the library stays as it was");
}
