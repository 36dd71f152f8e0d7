//! Hostile and careless spec sets, library folders and filters: sweeps that explode across
//! entries, symlinked specs, a filter that matches nothing, a write that fails part way,
//! temporary files a killed run left, a byte order mark, tagged values, YAML syntax errors at
//! their text, and what `check` reports about templates. Every input is built here; nothing
//! needs NVRTC (libraries are written with `compile: false`, which renders and writes without
//! compiling).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tilegen::__internal::generate;
use tilegen::Error;
use tilegen::Options;

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");

fn tilegen(args: &[&str], tmp: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TILEGEN_CACHE_DIR", tmp.join("cache"))
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("tilegen runs")
}

/// `tilegen check --specs SPECS`: its exit code and what it printed on stderr.
fn check(specs: &Path, tmp: &Path) -> (Option<i32>, String) {
    let o = tilegen(&["check", "--specs", s(specs)], tmp);
    (o.status.code(), stderr(&o))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// One small vector_add kernel per name, one arch.
fn spec(names: &[&str]) -> String {
    let mut y = String::from("kernels:\n");
    for n in names {
        y += &format!("  - name: {n}\n    op: vector_add\n    dtype: f32\n    archs: [sm_80]\n");
    }
    y
}

fn write_specs(dir: &Path, text: &str) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("k.yaml"), text).unwrap();
    dir.to_path_buf()
}

/// Library options that render and write without NVRTC.
fn no_compile(specs: &Path, out: &Path, tmp: &Path) -> Options {
    let mut o = Options::new(specs, out);
    o.compile = false;
    o.jobs = 1;
    o.cache_dir = Some(tmp.join("cache"));
    o
}

/// The issue's reproduction: `defaults` sweeps 3 dtypes x 6 blocks x 5 items x 45 epilogue
/// chains (4050, under the per-kernel limit) and 200 two-line entries inherit it: 810,000
/// instances from 7 KB. `check` and `list` stop with the per-run bound's error, before
/// expanding anything (before the bound they took 20 s and 4 GB).
#[test]
fn sweeps_across_entries_stop_at_the_run_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let steps = ["bias", "relu", "gelu", "gelu_erf", "silu"];
    let mut chains: Vec<String> = steps.iter().map(|a| format!("[{a}]")).collect();
    for a in steps {
        for b in steps.iter().filter(|b| **b != a) {
            chains.push(format!("[{a}, {b}]"));
        }
    }
    'three: for a in steps {
        for b in steps.iter().filter(|b| **b != a) {
            for c in steps.iter().filter(|c| **c != a && *c != b) {
                if chains.len() == 45 {
                    break 'three;
                }
                chains.push(format!("[{a}, {b}, {c}]"));
            }
        }
    }
    assert_eq!(chains.len(), 45);
    let mut y = String::from(
        "defaults:\n  archs: [sm_80]\n  dtype: [f32, f16, bf16]\n  block: [32, 64, 128, 256, 512, 1024]\n  items: [1, 2, 4, 8, 16]\n  epilogue:\n",
    );
    for c in &chains {
        y += &format!("    - {c}\n");
    }
    y += "kernels:\n";
    for i in 0..200 {
        y += &format!("  - name: k{i:03}\n    op: fma\n");
    }
    assert!(y.len() < 8 * 1024, "{} bytes", y.len());
    let specs = write_specs(&tmp.path().join("specs"), &y);
    for cmd in ["check", "list"] {
        let o = tilegen(&[cmd, "--specs", s(&specs)], tmp.path());
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{cmd}: {e}");
        assert!(
            e.contains("the specs sweep to 810000 instances in all (200 kernel entries; ")
                && e.contains("k.yaml: 810000), over the limit of 4096 per run")
                && e.contains("kernel `k000` here, with 4050"),
            "{cmd}: {e}"
        );
        assert!(e.contains("specs/k.yaml:53:5: error: "), "{cmd}: {e}");
        assert!(o.stdout.is_empty(), "{cmd} listed something");
    }
}

/// Other ways a 64 KB spec set could take minutes: many small files each just under the
/// per-file alias limit (the run has one node budget), and one line with tens of thousands
/// of errors (each would copy the line; at most 100 are shown per file).
#[test]
fn small_hostile_spec_sets_stop_early() {
    let tmp = tempfile::tempdir().unwrap();
    let bombs = tmp.path().join("bombs");
    fs::create_dir_all(&bombs).unwrap();
    let mut doc = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
    for (prev, name) in ["a", "b", "c", "d"].iter().zip(["b", "c", "d", "e"]) {
        doc += &format!(
            "{name}: &{name} [{}]\n",
            vec![format!("*{prev}"); 9].join(", ")
        );
    }
    for i in 0..40 {
        fs::write(bombs.join(format!("f{i:02}.yaml")), &doc).unwrap();
    }
    let o = tilegen(&["check", "--specs", s(&bombs)], tmp.path());
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(
        e.contains("the spec files expand to more than 250000 nodes in all by here"),
        "{e}"
    );
    assert_eq!(e.matches("nodes in all").count(), 1, "{e}");

    let line = tmp.path().join("line");
    let ones = vec!["1"; 30_000].join(",");
    write_specs(&line, &format!("kernels: [{ones}]\n"));
    let o = tilegen(&["check", "--specs", s(&line)], tmp.path());
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        e.matches(": error: a kernel must be a mapping").count(),
        100
    );
    assert!(
        e.contains("29900 more errors in this file from here on, not shown"),
        "{}",
        &e[e.len().saturating_sub(400)..]
    );
}

/// Symlinked spec files and folders are followed and named by their path under the specs
/// folder; a link that points nowhere or loops is an error, never skipped.
#[cfg(unix)]
#[test]
fn symlinked_specs_are_followed_and_broken_links_rejected() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let specs = write_specs(&tmp.path().join("specs"), &spec(&["aaa"]));
    write_specs(&tmp.path().join("x"), &spec(&["bbb"]));
    write_specs(&tmp.path().join("y"), &spec(&["ccc"]));
    symlink("../x/k.yaml", specs.join("b.yaml")).unwrap();
    symlink("../y", specs.join("sub")).unwrap();
    let o = tilegen(&["list", "--specs", s(&specs)], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(listed.contains("(b.yaml:2)"), "{listed}");
    assert!(listed.contains("(sub/k.yaml:2)"), "{listed}");
    assert_eq!(listed.lines().count(), 3, "{listed}");

    symlink(".", specs.join("loop")).unwrap();
    let (code, e) = check(&specs, tmp.path());
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("specs/loop: symbolic link loop"), "{e}");
    fs::remove_file(specs.join("loop")).unwrap();

    symlink("../x/gone.yaml", specs.join("gone.yaml")).unwrap();
    let (code, e) = check(&specs, tmp.path());
    assert_eq!(code, Some(5), "{e}");
    assert!(
        e.contains("specs/gone.yaml: symbolic link to a file that does not exist"),
        "{e}"
    );
}

/// A filter that matches nothing is a usage error, from the CLI and from `Builder`, and the
/// library is left as it was (it used to be emptied).
#[test]
fn filter_matching_nothing_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = write_specs(&tmp.path().join("specs"), &spec(&["aaa"]));
    let out = tmp.path().join("out");
    tilegen::generate(&no_compile(&specs, &out, tmp.path()), &|_| {}).unwrap();
    let before = fs::read(out.join("manifest.json")).unwrap();

    let o = tilegen(
        &[
            "generate",
            "--specs",
            s(&specs),
            "--out",
            s(&out),
            "--filter",
            "zzz",
        ],
        tmp.path(),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("filter `zzz` matches none of the 1 instances"),
        "{e}"
    );
    assert_eq!(fs::read(out.join("manifest.json")).unwrap(), before);

    let err = tilegen::Builder::new()
        .specs(&specs)
        .out_dir(&out)
        .cache_dir(tmp.path().join("cache"))
        .filter("zzz")
        .emit_rerun_if_changed(false)
        .try_compile()
        .unwrap_err();
    assert!(matches!(err, Error::Usage(_)), "{err}");
    assert_eq!(fs::read(out.join("manifest.json")).unwrap(), before);
}

/// Kernels are published before `bindings.rs` and `manifest.json`: when writing a kernel
/// fails (here a folder stands where its source goes), the previous bindings and manifest
/// are untouched, so neither names a kernel that is not there.
#[test]
fn failed_kernel_write_leaves_previous_bindings_and_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = tmp.path().join("specs");
    let out = tmp.path().join("out");
    write_specs(&specs, &spec(&["aaa"]));
    tilegen::generate(&no_compile(&specs, &out, tmp.path()), &|_| {}).unwrap();
    let bindings = fs::read(out.join("bindings.rs")).unwrap();
    let manifest = fs::read(out.join("manifest.json")).unwrap();

    write_specs(&specs, &spec(&["aaa", "bbb"]));
    let opts = no_compile(&specs, &out, tmp.path());
    let new = generate::render_all(&opts).unwrap();
    let bbb = new
        .instances
        .iter()
        .find(|i| i.name.starts_with("bbb"))
        .unwrap();
    fs::create_dir_all(out.join(format!("kernels/{}.cu", bbb.name))).unwrap();
    let err = tilegen::generate(&opts, &|_| {}).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert_eq!(fs::read(out.join("bindings.rs")).unwrap(), bindings);
    assert_eq!(fs::read(out.join("manifest.json")).unwrap(), manifest);
}

/// Temporary files a killed run left in the library (`kernels/.tilegen-XXXXXX`) are
/// differences for `--check` and removed by the next generate.
#[test]
fn leftover_temporary_files_are_checked_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = write_specs(&tmp.path().join("specs"), &spec(&["aaa"]));
    let out = tmp.path().join("out");
    let mut opts = no_compile(&specs, &out, tmp.path());
    tilegen::generate(&opts, &|_| {}).unwrap();
    fs::write(out.join("kernels/.tilegen-Ab12Cd"), b"half a cubin").unwrap();
    fs::write(out.join(".tilegen-Zz99Yy"), b"half a manifest").unwrap();

    opts.check = true;
    let err = tilegen::generate(&opts, &|_| {}).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::OutOfDate(_)), "{msg}");
    assert!(
        msg.contains("interrupted run: kernels/.tilegen-Ab12Cd")
            && msg.contains("interrupted run: .tilegen-Zz99Yy"),
        "{msg}"
    );

    opts.check = false;
    let report = tilegen::generate(&opts, &|_| {}).unwrap();
    assert_eq!(report.removed.len(), 2, "{:?}", report.removed);
    assert!(!out.join("kernels/.tilegen-Ab12Cd").exists());
    assert!(!out.join(".tilegen-Zz99Yy").exists());
    opts.check = true;
    tilegen::generate(&opts, &|_| {}).unwrap();
}

/// A UTF-8 byte order mark before a spec is accepted, and positions after it stay right.
#[test]
fn byte_order_mark_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = write_specs(
        &tmp.path().join("specs"),
        &format!("\u{feff}# a comment first\n{}", spec(&["aaa"])),
    );
    let (code, e) = check(&specs, tmp.path());
    assert_eq!(code, Some(0), "{e}");

    write_specs(
        &specs,
        "\u{feff}kernels:\n  - name: aaa\n    op: vector_add\n    dtype: f32\n    block: 300\n",
    );
    let (code, e) = check(&specs, tmp.path());
    assert_eq!(code, Some(3), "{e}");
    assert!(e.contains("specs/k.yaml:5:12: error: "), "{e}");
}

/// Old Mac line endings (a lone CR) are line breaks to YAML: every position agrees with the
/// parser's, and the quoted source line is the right one.
#[test]
fn lone_carriage_returns_end_lines_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = tmp.path().join("specs");
    for (tail, at, quoted) in [
        (
            "256\u{1}",
            "specs/k.yaml:5:15: error: ",
            "5 |     block: 256",
        ),
        ("7", "specs/k.yaml:5:12: error: ", "5 |     block: 7"),
    ] {
        write_specs(
            &specs,
            &format!(
                "kernels:\r  - name: aaa\r    op: vector_add\r    dtype: f32\r    block: {tail}\r"
            ),
        );
        let (code, e) = check(&specs, tmp.path());
        assert_eq!(code, Some(3), "{e}");
        assert!(e.contains(at) && e.contains(quoted), "{e}");
    }
}

/// A kernel whose instances would take a name the bindings keep for themselves is a spec
/// error that `check` reports, at the name, before anything is compiled.
#[test]
fn names_the_bindings_reserve_are_spec_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = write_specs(&tmp.path().join("specs"), &spec(&["run"]));
    let (code, e) = check(&specs, tmp.path());
    assert_eq!(code, Some(3), "{e}");
    assert!(
        e.contains("specs/k.yaml:2:11: error: instance name `run_f32_b256_i4` is reserved"),
        "{e}"
    );
}

/// A spec file's name reaches messages escaped: it cannot forge a line of output or send a
/// terminal escape.
#[test]
fn spec_file_names_are_shown_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = tmp.path().join("specs");
    fs::create_dir_all(&specs).unwrap();
    fs::write(
        specs.join("x\nfake.yaml:1:1: error: forged\u{1b}[31m.yaml"),
        "kernels:\n  - name: aaa\n    op: vector_add\n    dtype: f32\n    block: 7\n",
    )
    .unwrap();
    let (code, e) = check(&specs, tmp.path());
    assert_eq!(code, Some(3), "{e}");
    assert!(
        e.contains("x\\nfake.yaml:1:1: error: forged\\u{1b}[31m.yaml:5:12: error: "),
        "{e}"
    );
    assert!(
        !e.contains('\u{1b}') && !e.lines().any(|l| l.starts_with("fake.yaml")),
        "{e}"
    );
}

/// `!!str 256` is text, as `"256"` is: both are refused where a number goes, at the value.
#[test]
fn tagged_and_quoted_numbers_are_both_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (value, col) in [("!!str 256", 12), ("\"256\"", 12), ("!!int 256", 12)] {
        let specs = write_specs(
            &tmp.path().join("specs"),
            &format!(
                "kernels:\n  - name: aaa\n    op: vector_add\n    dtype: f32\n    block: {value}\n"
            ),
        );
        let (code, e) = check(&specs, tmp.path());
        assert_eq!(code, Some(3), "{value}: {e}");
        assert!(
            e.contains(&format!("specs/k.yaml:5:{col}: error: ")),
            "{value}: {e}"
        );
    }
}

/// `check --templates` counts spec files, not the templates it also read.
#[test]
fn check_counts_spec_files_only() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = write_specs(&tmp.path().join("specs"), &spec(&["aaa"]));
    let templates = tmp.path().join("templates");
    fs::create_dir_all(&templates).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for t in ["elementwise.cu", "prelude.cuh"] {
        fs::copy(root.join("templates").join(t), templates.join(t)).unwrap();
    }
    let o = tilegen(
        &["check", "--specs", s(&specs), "--templates", s(&templates)],
        tmp.path(),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(e.contains("1 spec file(s) OK: 1 instances rendered"), "{e}");
}

/// A template override with a Tera syntax error is named by its path.
#[test]
fn template_syntax_error_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = write_specs(&tmp.path().join("specs"), &spec(&["aaa"]));
    let templates = tmp.path().join("my-templates");
    fs::create_dir_all(&templates).unwrap();
    fs::write(templates.join("softmax.cu"), "{% if x %}\nunclosed\n").unwrap();
    let o = tilegen(
        &["check", "--specs", s(&specs), "--templates", s(&templates)],
        tmp.path(),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{e}");
    assert!(
        e.contains(&format!(
            "template error in {} for every instance: syntax error",
            templates.join("softmax.cu").display()
        )),
        "{e}"
    );
}

/// Specs go through one YAML parser (granit-parser, under serde-saphyr); what it refuses and
/// what the tree builder refuses on top of it are each reported at the offending text.
#[test]
fn one_yaml_parser_reports_each_problem_where_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let head = "kernels:\n  - name: aaa\n    op: vector_add\n";
    let cases: [(String, &str, &str); 8] = [
        (
            format!("{head}    dtype: [f32, !custom f16]\n"),
            "k.yaml:4:18: error: ",
            "YAML tag `!custom` is not supported",
        ),
        (
            format!("{head}    dtype: *nope\n"),
            "k.yaml:4:12: error: ",
            "alias `*nope` refers to no anchor",
        ),
        (
            format!("{head}    dtype: f32\n    dtype: f16\n"),
            "k.yaml:5:5: error: ",
            "duplicate key `dtype` (first given at 4:5)",
        ),
        (
            "kernels:\n  - name: a\u{7}b\n".to_string(),
            "k.yaml:2:12: error: ",
            "control characters are not allowed (found U+0007)",
        ),
        (
            "kernels:\n  - name: aaa\n\top: vector_add\n".to_string(),
            "k.yaml:3:1: error: ",
            "tab character",
        ),
        (
            format!("{head}    dtype: [f32\n"),
            "k.yaml:4:12: error: ",
            "unclosed bracket '['",
        ),
        (
            format!("{head}    dtype: [f32, f16\n    block: 256\n"),
            "k.yaml:5:10: error: ",
            "did not find expected ',' or ']' (while parsing a flow sequence that starts at 4:12)",
        ),
        (
            format!("{head}    dtype: f32\n---\nkernels: []\n"),
            "k.yaml:5:1: error: ",
            "a second YAML document starts here",
        ),
    ];
    for (text, at, what) in cases {
        let specs = write_specs(&tmp.path().join("specs"), &text);
        let (code, e) = check(&specs, tmp.path());
        assert_eq!(code, Some(3), "{text:?}: {e}");
        assert!(
            e.contains(at) && e.contains(what),
            "{text:?}: want {at}{what}, got {e}"
        );
        // The offending line is shown and underlined.
        assert!(e.contains(" | ") && e.contains('^'), "{text:?}: {e}");
    }
}
