//! `tilegen nvrtc install`: pip is asked for exactly the pinned wheel with its hashes, a wheel
//! that gives no usable library is refused without publishing anything, an install is found
//! by later runs, and a second install fetches nothing. pip is replaced by a script through
//! TILEGEN_PYTHON, so these tests need no network; the real pip path runs in `.ci/run`
//! (scripts/setup-nvrtc on a clean clone).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::tilegen_command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn real_lib_dir() -> PathBuf {
    repo().join(".nvrtc/nvidia/cu13/lib")
}

/// A stand-in for `python3 -m pip install … --target DIR -r REQ`: records its arguments and
/// the requirements file under `log`, then runs `body` with $TARGET set.
fn fake_python(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("fake-python");
    let log = dir.join("pip.log");
    let script = format!(
        r#"#!/bin/sh
echo "$@" >> '{log}'
TARGET=""
REQ=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) TARGET="$2"; shift;;
    -r) REQ="$2"; shift;;
  esac
  shift
done
cat "$REQ" >> '{log}'
{body}
"#,
        log = log.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn install(python: &Path, dir: &Path, home: &Path) -> Output {
    tilegen_command(&["nvrtc", "install", "--dir", dir.to_str().unwrap()])
        .env("TILEGEN_PYTHON", python)
        .env("XDG_CACHE_HOME", home)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn leftovers(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tilegen-nvrtc-install-"))
        .collect()
}

#[test]
fn installs_the_pinned_wheel_with_its_hashes_and_publishes_it_once() {
    let tmp = tempfile::tempdir().unwrap();
    let real = real_lib_dir();
    assert!(
        real.join("libnvrtc.so.13").is_file(),
        "scripts/setup-nvrtc installs NVRTC into .nvrtc"
    );
    // The wheel's layout, with links to the real library instead of a download.
    let python = fake_python(
        tmp.path(),
        &format!(
            "mkdir -p \"$TARGET/nvidia/cu13/lib\" && for f in '{real}'/*; do ln -s \"$f\" \"$TARGET/nvidia/cu13/lib/\"; done",
            real = real.display()
        ),
    );
    let dir = tmp.path().join("nvrtc/13.0.88");
    let o = install(&python, &dir, tmp.path());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("installed"), "{}", text(&o));
    assert!(dir.join("nvidia/cu13/lib/libnvrtc.so.13").exists());
    let log = std::fs::read_to_string(tmp.path().join("pip.log")).unwrap();
    assert!(log.contains("-m pip install"), "{log}");
    assert!(log.contains("--require-hashes"), "{log}");
    assert!(log.contains("--no-deps"), "{log}");
    assert!(log.contains("nvidia-cuda-nvrtc==13.0.88"), "{log}");
    for h in tilegen::__internal::provision::WHEEL_SHA256 {
        assert!(log.contains(&format!("--hash=sha256:{h}")), "{log}");
    }
    assert!(leftovers(dir.parent().unwrap()).is_empty());

    // The installed library loads (TILEGEN_NVRTC naming its folder).
    let o = tilegen_command(&["nvrtc", "path"])
        .env("TILEGEN_NVRTC", dir.join("nvidia/cu13/lib"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("13.0"), "{}", text(&o));

    // A second install fetches nothing: pip is not run again.
    std::fs::remove_file(tmp.path().join("pip.log")).unwrap();
    let o = install(&python, &dir, tmp.path());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already installed"), "{}", text(&o));
    assert!(!tmp.path().join("pip.log").exists());
}

#[test]
fn the_default_folder_is_searched_by_later_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let real = real_lib_dir();
    let lib = tmp.path().join("tilegen-nvrtc/13.0.88/nvidia/cu13/lib");
    std::fs::create_dir_all(&lib).unwrap();
    for f in std::fs::read_dir(&real).unwrap() {
        let f = f.unwrap().path();
        std::os::unix::fs::symlink(&f, lib.join(f.file_name().unwrap())).unwrap();
    }
    // Run from a folder with no ./.nvrtc above it, with the user cache folder at `tmp`.
    let o = tilegen_command(&["nvrtc", "path"])
        .current_dir(tmp.path())
        .env("XDG_CACHE_HOME", tmp.path())
        .env_remove("TILEGEN_NVRTC")
        .env_remove("CUDA_PATH")
        .env_remove("CUDA_HOME")
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .unwrap();
    let t = text(&o);
    if std::path::Path::new("/usr/local/cuda/lib64/libnvrtc.so.13").exists() {
        return; // a toolkit comes first in the search; nothing to show here
    }
    assert!(o.status.success(), "{t}");
    assert!(t.contains("tilegen nvrtc install"), "{t}");
    assert!(t.contains(&lib.display().to_string()), "{t}");
}

#[test]
fn a_wheel_without_a_usable_library_is_refused_and_nothing_is_published() {
    let tmp = tempfile::tempdir().unwrap();
    for (what, body) in [
        (
            "truncated library",
            "mkdir -p \"$TARGET/nvidia/cu13/lib\" && printf '\\177ELF' > \"$TARGET/nvidia/cu13/lib/libnvrtc.so.13\"",
        ),
        ("no library", "mkdir -p \"$TARGET/nvidia\""),
    ] {
        let python = fake_python(tmp.path(), body);
        let dir = tmp.path().join(what.replace(' ', "-"));
        let o = install(&python, &dir, tmp.path());
        let t = text(&o);
        assert_eq!(o.status.code(), Some(6), "{what}: {t}");
        assert!(t.contains("no usable NVRTC"), "{what}: {t}");
        assert!(!dir.exists(), "{what}: nothing published");
        assert!(leftovers(tmp.path()).is_empty(), "{what}: staging removed");
    }
}

#[test]
fn pip_failures_are_reported_with_pips_words() {
    let tmp = tempfile::tempdir().unwrap();
    let python = fake_python(
        tmp.path(),
        "echo 'ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.' >&2; exit 1",
    );
    let dir = tmp.path().join("nvrtc");
    let o = install(&python, &dir, tmp.path());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(6), "{t}");
    assert!(t.contains("DO NOT MATCH THE HASHES"), "{t}");
    assert!(!dir.exists());

    // No Python at all.
    let o = install(&tmp.path().join("no-such-python"), &dir, tmp.path());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(6), "{t}");
    assert!(t.contains("TILEGEN_PYTHON"), "{t}");
}

#[test]
fn a_folder_in_the_way_is_not_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let python = fake_python(tmp.path(), "exit 1");
    let dir = tmp.path().join("taken");
    std::fs::create_dir_all(dir.join("nvidia")).unwrap();
    std::fs::write(dir.join("keep.txt"), b"mine").unwrap();
    let o = install(&python, &dir, tmp.path());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(6), "{t}");
    assert!(t.contains("remove it and run again"), "{t}");
    assert_eq!(std::fs::read(dir.join("keep.txt")).unwrap(), b"mine");
    assert!(!tmp.path().join("pip.log").exists(), "pip was not run");
}
