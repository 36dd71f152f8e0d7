//! UI tests for bad specs: each case under `tests/ui/` is one spec file `<case>.yaml` (or a
//! folder `<case>/` of spec files) beside `<case>.stderr`, the exact diagnostics tilegen
//! must print for it.
//!
//! For every case, `tilegen generate` runs against a copy of a "previous" library and must
//! exit with the input-error code, print exactly the expected diagnostics (first line
//! `file:line:col: error: ...`), never panic, and leave the previous library untouched.
//! Validation fails before NVRTC is loaded, so these tests need no CUDA.
//!
//! `TILEGEN_BLESS=1 cargo test --test ui` rewrites the `.stderr` files from the actual output;
//! review the diff before committing.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

/// `Error::Spec`'s exit code (see src/error.rs).
const INPUT_ERROR: i32 = 3;
/// The acceptance bar for the number of distinct bad specs.
const MIN_CASES: usize = 25;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn bless() -> bool {
    tilegen::__internal::env::var("TILEGEN_BLESS")
        .unwrap()
        .is_some_and(|v| !v.is_empty() && v != "0")
}

/// One bad-spec case.
struct Case {
    name: String,
    /// What `--specs` gets, relative to the crate root (so messages name `tests/ui/...`).
    specs: String,
    /// The expected stderr, relative to the crate root.
    expected: PathBuf,
}

/// Every `tests/ui/<case>.yaml` and `tests/ui/<case>/`, sorted by name.
fn cases() -> Vec<Case> {
    let dir = root().join("tests/ui");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).expect("tests/ui exists") {
        let path = entry.expect("readable tests/ui entry").path();
        let file_name = path.file_name().unwrap().to_string_lossy().into_owned();
        let name = if path.is_dir() {
            file_name.clone()
        } else if let Some(stem) = file_name.strip_suffix(".yaml") {
            stem.to_string()
        } else {
            continue;
        };
        out.push(Case {
            specs: format!("tests/ui/{file_name}"),
            expected: PathBuf::from(format!("tests/ui/{name}.stderr")),
            name,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A file tree's contents: relative path → (bytes, modification time); folders map to
/// empty contents. Anything that changes any of it counts as touching the library.
type Snapshot = BTreeMap<PathBuf, (Vec<u8>, Option<SystemTime>)>;

fn snapshot(dir: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                out.insert(rel, (Vec::new(), None));
                stack.push(path);
            } else {
                out.insert(rel, (fs::read(&path).unwrap(), meta.modified().ok()));
            }
        }
    }
    out
}

/// A previous kernel library: a manifest, sources, PTX, a binary cubin and a stray file.
fn previous_library(dir: &Path) {
    fs::create_dir_all(dir.join("kernels")).unwrap();
    fs::write(
        dir.join("manifest.json"),
        "{\n  \"tilegen\": \"0.0.0-sentinel\",\n  \"instances\": []\n}\n",
    )
    .unwrap();
    fs::write(dir.join("kernels/sentinel_f32.cu"), "// previous output\n").unwrap();
    fs::write(dir.join("kernels/sentinel_f32.sm_80.ptx"), "// ptx\n").unwrap();
    fs::write(
        dir.join("kernels/sentinel_f32.sm_80.cubin"),
        [0x7f, b'E', b'L', b'F', 0, 0xff],
    )
    .unwrap();
    fs::write(dir.join("NOT_OURS.txt"), "left by the user\n").unwrap();
}

fn run_tilegen(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .args(args)
        .current_dir(root())
        .env("TILEGEN_CACHE_DIR", cache)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("tilegen runs")
}

/// True for `path:line:col: error: ...` (the `^[^:]+:\d+:\d+: error: ` shape).
fn is_diagnostic_header(line: &str) -> bool {
    let Some((location, _)) = line.split_once(": error: ") else {
        return false;
    };
    let mut parts = location.rsplitn(3, ':');
    let col = parts.next().unwrap_or("");
    let line_no = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("");
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    !path.is_empty() && !path.contains(':') && number(line_no) && number(col)
}

/// A line diff of expected against actual, `-` for expected lines and `+` for actual ones.
fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    // Longest common subsequence table, from the ends.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out += &format!("  {}\n", a[i]);
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out += &format!("- {}\n", a[i]);
            i += 1;
        } else {
            out += &format!("+ {}\n", b[j]);
            j += 1;
        }
    }
    out
}

/// Runs one case; returns what is wrong with it, if anything.
fn check_case(case: &Case, bless: bool) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("generated");
    previous_library(&out_dir);
    let before = snapshot(&out_dir);

    let out_arg = out_dir.to_str().expect("UTF-8 temp path");
    let output = run_tilegen(
        &["generate", "--specs", &case.specs, "--out", out_arg],
        &tmp.path().join("cache"),
    );
    let stderr = String::from_utf8_lossy(&output.stderr).replace("\r\n", "\n");
    let mut problems = Vec::new();

    if stderr.contains("panicked") {
        problems.push("tilegen panicked".to_string());
    }
    if output.status.code() != Some(INPUT_ERROR) {
        problems.push(format!(
            "exit status {:?}, expected the input-error code {INPUT_ERROR}",
            output.status.code()
        ));
    }
    let first = stderr.lines().next().unwrap_or("");
    if !is_diagnostic_header(first) {
        problems.push(format!(
            "first line is not `file:line:col: error: ...`: {first:?}"
        ));
    }
    for header in stderr.lines().filter(|l| l.contains(": error: ")) {
        if !header.starts_with(&case.specs) || !is_diagnostic_header(header) {
            problems.push(format!(
                "diagnostic does not name a file of the case: {header:?}"
            ));
        }
    }
    if snapshot(&out_dir) != before {
        problems.push("the previous library in --out was modified".to_string());
    }

    let expected_path = root().join(&case.expected);
    let expected = fs::read_to_string(&expected_path).ok();
    if bless {
        if expected.as_deref() != Some(stderr.as_str()) {
            fs::write(&expected_path, stderr.as_bytes()).unwrap();
        }
    } else {
        match expected {
            None => problems.push(format!(
                "{} is missing; run `TILEGEN_BLESS=1 cargo test --test ui` and review it. Actual:\n{stderr}",
                case.expected.display()
            )),
            Some(e) if e != stderr => problems.push(format!(
                "stderr differs from {} (- expected, + actual):\n{}",
                case.expected.display(),
                diff(&e, &stderr)
            )),
            Some(_) => {}
        }
    }
    problems
}

#[test]
fn bad_specs_are_reported_and_change_nothing() {
    let cases = cases();
    assert!(
        cases.len() >= MIN_CASES,
        "only {} UI cases, want at least {MIN_CASES}",
        cases.len()
    );
    let bless = bless();

    // Expected output nobody produces any more is a leftover from a renamed case.
    let mut problems: Vec<String> = Vec::new();
    for entry in fs::read_dir(root().join("tests/ui")).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .strip_suffix(".stderr")
        else {
            continue;
        };
        if !cases.iter().any(|c| c.name == stem) {
            if bless {
                fs::remove_file(&path).unwrap();
            } else {
                problems.push(format!("{}: no case `{stem}` uses it", path.display()));
            }
        }
    }

    // The cases are independent processes: run them side by side.
    let results: Vec<(String, Vec<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .map(|case| s.spawn(move || (case.name.clone(), check_case(case, bless))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (name, case_problems) in results {
        for p in case_problems {
            problems.push(format!("case `{name}`: {p}"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} UI problem(s):\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

/// The other side: good specs pass `tilegen check` (no NVRTC needed), both the default
/// library's and a small one that uses defaults, sweeps and comments.
#[test]
fn good_specs_pass_check() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");

    let output = run_tilegen(&["check", "--specs", "specs"], &cache);
    assert_eq!(
        output.status.code(),
        Some(0),
        "tilegen check --specs specs failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let specs = tmp.path().join("specs");
    fs::create_dir_all(&specs).unwrap();
    fs::write(
        specs.join("small.yaml"),
        "# A small, valid spec.\n\
         defaults:\n  archs: [sm_80, sm_90]\n\
         kernels:\n\
         \x20 - name: add\n    op: vector_add\n    dtype: [f32, bf16]\n    block: [128, 256]\n\
         \x20 - name: act\n    op: fma\n    dtype: f16\n    epilogue: [[], [bias, gelu]]\n\
         \x20 - name: norm   # trailing comment\n    op: rmsnorm\n    dtype: f32\n    affine: false\n",
    )
    .unwrap();
    let output = run_tilegen(&["check", "--specs", specs.to_str().unwrap()], &cache);
    assert_eq!(
        output.status.code(),
        Some(0),
        "tilegen check of a small valid spec failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A specs folder with no spec files is a usage error (most likely a wrong path), and must
/// not be taken as "generate an empty library", which would delete the previous one.
#[test]
fn empty_specs_folder_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = tmp.path().join("specs");
    fs::create_dir_all(&specs).unwrap();
    fs::write(specs.join("README.md"), "not a spec\n").unwrap();
    let out_dir = tmp.path().join("generated");
    previous_library(&out_dir);
    let before = snapshot(&out_dir);
    let output = run_tilegen(
        &[
            "generate",
            "--specs",
            specs.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ],
        &tmp.path().join("cache"),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no spec files"), "{stderr}");
    assert!(
        snapshot(&out_dir) == before,
        "the previous library was modified"
    );
}
