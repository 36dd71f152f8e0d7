//! Failures are told apart by kind: command-line misuse (`Usage`), a malformed input file
//! other than a spec or bundle (`Input`, naming the file), and a broken invariant of tilegen
//! itself (`Internal`, exit code 8). Messages and exit codes of user-facing failures are the
//! ones documented in the README.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::tilegen_command;
use tilegen::{Builder, Error, Manifest};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `root/specs/tiny.yaml`: one small instance, one arch.
fn specs(root: &Path) -> PathBuf {
    let dir = root.join("specs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tiny.yaml"),
        "kernels:\n  - name: add\n    op: vector_add\n    dtype: [f32]\n    archs: [sm_80]\n",
    )
    .unwrap();
    dir
}

fn builder(root: &Path, specs: &Path) -> Builder {
    let mut b = Builder::new();
    b.specs(specs)
        .out_dir(root.join("out"))
        .cache_dir(root.join("cache"))
        .emit_rerun_if_changed(false);
    b
}

/// A truncated tuning table beside the specs is an `Input` error naming that file; the
/// command line still exits 2 with the message it always gave, and compiles nothing.
#[test]
fn malformed_tuning_table_is_an_input_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let specs = specs(tmp.path());
    let tuning = tmp.path().join("tuning");
    std::fs::create_dir_all(&tuning).unwrap();
    let bad = tuning.join("nvidia-h200.json");
    std::fs::write(&bad, b"{\"format\": 1, \"device\": ").unwrap();

    let err = builder(tmp.path(), &specs).try_compile().unwrap_err();
    match &err {
        Error::Input { path, message } => {
            assert_eq!(path, &bad);
            assert!(
                message.starts_with(&format!("{}:1:", bad.display())),
                "{message}"
            );
            assert!(message.contains("not a tuning table"), "{message}");
        }
        other => panic!("expected Error::Input, got {other:?}"),
    }
    assert_eq!(err.exit_code(), 2);
    assert!(!tmp.path().join("cache").exists(), "nothing compiled");

    let o = tilegen_command(&["check", "--specs", specs.to_str().unwrap()])
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains(&format!("{}:1:", bad.display())), "{t}");
    assert!(t.contains("not a tuning table"), "{t}");
    assert!(!t.contains("internal error"), "{t}");
}

/// A library whose `manifest.json` lists a file outside the folder is refused when packed,
/// as an `Input` error naming the manifest, before anything is read or written.
#[test]
fn hostile_library_manifest_is_an_input_error() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(tmp.path().join("secret.txt"), b"not for the bundle").unwrap();
    let manifest = lib.join("manifest.json");
    std::fs::write(
        &manifest,
        r#"{"format": 1, "tilegen_version": "0.1.0", "nvrtc_version": "12.4",
            "instances": [], "files": ["../secret.txt"]}"#,
    )
    .unwrap();
    let out = tmp.path().join("lib.tar.gz");

    let err = tilegen::bundle::create(&lib, &out).unwrap_err();
    match &err {
        Error::Input { path, message } => {
            assert_eq!(path, &manifest);
            assert!(
                message.starts_with(&format!("{}:", manifest.display())),
                "{message}"
            );
            assert!(message.contains("`..` component"), "{message}");
        }
        other => panic!("expected Error::Input, got {other:?}"),
    }
    assert_eq!(err.exit_code(), 2);
    assert!(!out.exists());

    let o = tilegen_command(&[
        "bundle",
        "create",
        "--lib",
        lib.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("`..` component (it would escape the folder)"),
        "{t}"
    );
    assert!(!out.exists());

    // Not a manifest at all: the same kind, naming the file.
    std::fs::write(&manifest, b"[1, 2").unwrap();
    let err = tilegen::bundle::create(&lib, &out).unwrap_err();
    assert!(
        matches!(&err, Error::Input { path, message }
            if path == &manifest && message.contains("not a tilegen library manifest")),
        "{err:?}"
    );
    let o = tilegen_command(&["verify", "--lib", lib.to_str().unwrap()])
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{}: not a tilegen manifest", manifest.display())),
        "{t}"
    );
}

/// The bindings' own invariants (every argument tilegen derives has a role) fail as
/// `Internal`, exit code 8, asking for a report, not as a usage error.
#[test]
fn broken_generator_invariant_is_an_internal_error() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/manifest.json");
    let mut m = Manifest::from_bytes(&std::fs::read(&path).unwrap()).unwrap();
    m.instances.retain(|i| i.op.as_str() == "gemm");
    m.instances.truncate(1);
    assert_eq!(m.instances.len(), 1, "the golden library has a gemm");
    let a = m.instances[0]
        .args
        .iter_mut()
        .find(|a| a.name == "a")
        .expect("gemm takes a");
    a.name = "zzz".into();

    let err = tilegen::__internal::bindings::generate(&m, &|_| None).unwrap_err();
    assert!(matches!(err, Error::Internal(_)), "{err:?}");
    assert_eq!(err.exit_code(), 8);
    let t = err.to_string();
    assert!(t.starts_with("internal error (a bug in tilegen"), "{t}");
    assert!(t.contains("please report it"), "{t}");
    assert!(t.contains("argument `zzz`"), "{t}");
}

/// Command-line misuse stays a usage error with exit code 2 and its message.
#[test]
fn usage_error_keeps_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-specs-here");
    let err = builder(tmp.path(), &missing).try_compile().unwrap_err();
    assert!(
        matches!(&err, Error::Usage(m) if m.ends_with("does not exist")),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 2);

    let o = tilegen_command(&["check", "--specs", missing.to_str().unwrap()])
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!(
            "specs folder {} does not exist",
            missing.display()
        )),
        "{t}"
    );
}
