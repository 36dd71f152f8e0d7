//! Prebuilt bundles: reproducible archives, round trips, building a library from a bundle
//! with no NVRTC, and a corpus of hostile archives that must be refused with a clear
//! message and nothing written. No GPU and no NVRTC needed: the library is generated from
//! the golden specs without compiling, then given fake PTX and cubins.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{file, golden_specs, raw_archive, sha, tilegen, FakeLibrary, Raw};
use tilegen::__internal::output::FileSet;
use tilegen::bundle::{self, Limits};
use tilegen::Error;

/// Compares two file sets by name and hash (no giant byte dumps on failure).
fn assert_same(got: &FileSet, want: &FileSet) {
    let names = |f: &FileSet| {
        f.iter()
            .map(|(k, v)| format!("{k} {}", sha(v)))
            .collect::<Vec<_>>()
    };
    let (g, w) = (names(got), names(want));
    let only_got: Vec<_> = g.iter().filter(|x| !w.contains(x)).collect();
    let only_want: Vec<_> = w.iter().filter(|x| !g.contains(x)).collect();
    assert!(
        only_got.is_empty() && only_want.is_empty(),
        "differ: got {only_got:?}, want {only_want:?}"
    );
}

/// A small library (golden specs, no NVRTC) with fake binaries for sm_80 and sm_90, written
/// into `dir`. The specs' default archs become those two, so that each instance's config
/// sha256 covers the archs it has binaries for, as in a real library.
fn fake_library(dir: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let specs = tmp.path().to_path_buf();
    let text = std::fs::read_to_string(golden_specs().join("golden.yaml")).unwrap();
    std::fs::write(specs.join("golden.yaml"), both_archs(&text)).unwrap();
    let m = FakeLibrary {
        specs,
        filter: Some("_f32"),
        targets: &[("sm_80", "8.0"), ("sm_90", "8.7")],
        big_cubin: None,
    }
    .write(dir);
    assert!(
        m.instances.len() >= 2,
        "the golden specs hold several f32 instances"
    );
}

struct Fixture {
    _dir: tempfile::TempDir,
    lib: PathBuf,
    bundle: PathBuf,
    bytes: Vec<u8>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    fake_library(&lib);
    let bundle = dir.path().join("kernels.tar.gz");
    bundle::create(&lib, &bundle).expect("creates");
    let bytes = std::fs::read(&bundle).unwrap();
    Fixture {
        _dir: dir,
        lib,
        bundle,
        bytes,
    }
}

fn good_entries(f: &Fixture) -> Vec<Raw> {
    common::files(&common::members(&f.bytes))
}

/// Unpacking `bytes` fails with an `Error::Bundle` whose message holds `expect`, and
/// nothing is written: no DEST, no temporary folder.
fn assert_rejected_with(bytes: &[u8], limits: &Limits, expect: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.tar.gz");
    std::fs::write(&path, bytes).unwrap();
    let dest = dir.path().join("dest");
    let e = bundle::unpack(&path, &dest, limits).expect_err("a hostile bundle must be refused");
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Bundle { .. }),
        "not a bundle error: {msg}"
    );
    assert_eq!(e.exit_code(), 7);
    assert!(msg.contains(expect), "expected `{expect}` in: {msg}");
    assert!(
        msg.contains("hostile.tar.gz"),
        "the message names the bundle: {msg}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("hostile.tar.gz")],
        "nothing may be written"
    );
    assert!(bundle::verify_bytes(bytes, limits).is_err());
    msg
}

fn assert_rejected(bytes: &[u8], expect: &str) -> String {
    assert_rejected_with(bytes, &Limits::default(), expect)
}

#[test]
fn two_creates_in_different_folders_are_byte_identical() {
    let a = fixture();
    let b = fixture();
    assert_ne!(a.lib, b.lib);
    assert_eq!(a.bytes, b.bytes, "bundles of the same library differ");
    // Unpacked and packed again: still the same bytes.
    let dest = a._dir.path().join("unpacked");
    bundle::unpack(&a.bundle, &dest, &Limits::default()).unwrap();
    let again = a._dir.path().join("again.tar.gz");
    bundle::create(&dest, &again).unwrap();
    assert_eq!(std::fs::read(again).unwrap(), a.bytes);
}

#[test]
fn archive_is_canonical_and_honours_source_date_epoch() {
    let f = fixture();
    let files = bundle::load_library(&f.lib).unwrap();
    let (b0, _) = bundle::pack(&files, 0).unwrap();
    assert_eq!(b0, f.bytes);
    let (b1, m1) = bundle::pack(&files, 1_700_000_000).unwrap();
    assert_ne!(b0, b1);
    assert_eq!(m1.source_date_epoch, 1_700_000_000);
    let dec = flate2::read::GzDecoder::new(b1.as_slice());
    let mut ar = tar::Archive::new(dec);
    let mut names = Vec::new();
    for e in ar.entries().unwrap() {
        let e = e.unwrap();
        let h = e.header();
        assert_eq!(h.mtime().unwrap(), 1_700_000_000);
        assert_eq!(
            (h.uid().unwrap(), h.gid().unwrap(), h.mode().unwrap()),
            (0, 0, 0o644)
        );
        assert_eq!(h.username().unwrap().unwrap_or(""), "");
        assert_eq!(h.groupname().unwrap().unwrap_or(""), "");
        names.push(e.path().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(names[0], "bundle.json");
    let mut sorted = names[1..].to_vec();
    sorted.sort();
    assert_eq!(names[1..], sorted[..], "library members are sorted");
}

#[test]
fn bundle_manifest_lists_versions_archs_isa_and_members() {
    let f = fixture();
    let b = bundle::open(&f.bundle, &Limits::default()).unwrap();
    let m = &b.manifest;
    assert_eq!(m.format, tilegen::__internal::bundle::manifest::FORMAT);
    assert_eq!(m.tilegen_version, tilegen::VERSION);
    assert_eq!(m.nvrtc_version, "none");
    assert_eq!(m.archs, vec!["sm_80", "sm_90"]);
    assert_eq!(m.ptx_isa, vec!["8.0", "8.7"]);
    let files = bundle::load_library(&f.lib).unwrap();
    assert_eq!(m.members.len(), files.len());
    for mem in &m.members {
        assert_eq!(mem.sha256, sha(&files[&mem.path]), "{}", mem.path);
    }
    assert!(m.summary().contains("archs: sm_80, sm_90"));
}

#[test]
fn round_trip_unpacks_the_library_exactly() {
    let f = fixture();
    let dest = f._dir.path().join("out/lib");
    bundle::unpack(&f.bundle, &dest, &Limits::default()).unwrap();
    let lib = bundle::load_library(&f.lib).unwrap();
    let got = bundle::load_library(&dest).unwrap();
    assert_same(&got, &lib);
    assert!(dest.join("bundle.json").is_file());
    // A second unpack into a full folder is refused and changes nothing.
    let e = bundle::unpack(&f.bundle, &dest, &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("not an empty folder"), "{e}");
    // An empty folder is replaced.
    let empty = f._dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    bundle::unpack(&f.bundle, &empty, &Limits::default()).unwrap();
    assert_same(&bundle::load_library(&empty).unwrap(), &lib);
}

#[test]
fn leftovers_of_a_killed_unpack_are_not_dest_and_are_cleaned() {
    let f = fixture();
    let dest = f._dir.path().join("dest");
    // What a kill midway leaves: a temporary folder beside DEST, never DEST. Without an
    // owner lock (an older tilegen's, or one killed as it was made) it is a leftover once it
    // is ten minutes old; younger, it may be one in the making.
    let stale = f._dir.path().join(".dest.tilegen-unpack-abc123");
    std::fs::create_dir_all(stale.join("kernels")).unwrap();
    std::fs::write(stale.join("kernels/half.ptx"), b"half").unwrap();
    assert_eq!(
        tilegen::__internal::bundle::unpack::leftovers(&dest).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::open(&stale)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    assert_eq!(
        tilegen::__internal::bundle::unpack::leftovers(&dest).unwrap(),
        vec![stale.clone()]
    );
    // The temporary folder of an unpack still running (its pid is alive: this process's)
    // is not a leftover, so concurrent unpacks do not delete each other's work.
    let running = f
        ._dir
        .path()
        .join(format!(".dest.tilegen-unpack-{}-xyz", std::process::id()));
    std::fs::create_dir_all(&running).unwrap();
    std::fs::File::open(&running)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    // A folder whose owner lock is held belongs to a live run, whatever its pid says (one
    // in another PID namespace, or on another host); one whose lock is free is a leftover,
    // even where its pid is alive.
    let locked = f._dir.path().join(".dest.tilegen-unpack-999999-locked");
    std::fs::create_dir_all(&locked).unwrap();
    let lock = std::fs::File::create(locked.join("owner.lock")).unwrap();
    lock.try_lock().unwrap();
    let released = f._dir.path().join(format!(
        ".dest.tilegen-unpack-{}-released",
        std::process::id()
    ));
    std::fs::create_dir_all(&released).unwrap();
    std::fs::write(released.join("owner.lock"), b"").unwrap();
    // A file that merely has a leftover's name is not one, and must not fail the unpack; nor
    // may a fifo planted as an owner lock hang it.
    let stray = f._dir.path().join(".dest.tilegen-unpack-999999-junk");
    std::fs::write(&stray, b"not ours").unwrap();
    let planted = f._dir.path().join(".dest.tilegen-unpack-999999-fifo");
    std::fs::create_dir_all(&planted).unwrap();
    let fifo = planted.join("owner.lock");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    bundle::unpack(&f.bundle, &dest, &Limits::default()).unwrap();
    assert!(!stale.exists(), "the next unpack removes leftovers");
    assert!(running.exists(), "a live unpack's folder is left alone");
    assert!(locked.exists(), "a folder whose lock is held is left alone");
    assert!(!released.exists(), "a folder whose lock is free is removed");
    assert!(stray.exists(), "a file is not removed as a leftover folder");
    assert!(
        fifo.exists(),
        "a folder whose owner lock is not a file is left alone"
    );
    assert_eq!(
        tilegen::__internal::bundle::unpack::leftovers(&dest).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    // Once its owner is gone (the system frees the lock), it is a leftover.
    drop(lock);
    assert_eq!(
        tilegen::__internal::bundle::unpack::leftovers(&dest).unwrap(),
        vec![locked]
    );
}

/// A staging folder's owner holds its lock for as long as the folder lives, so no cleanup
/// takes it for a leftover, whatever its age or pid; dropped, it is gone.
#[test]
fn a_live_staging_folder_holds_its_owner_lock() {
    let f = fixture();
    let (staged, _) = bundle::stage_signed(&f.bundle, &Limits::default(), None).unwrap();
    let dir = staged.dir().to_path_buf();
    let owner = std::fs::File::open(dir.join("owner.lock")).unwrap();
    assert!(matches!(
        owner.try_lock_shared(),
        Err(std::fs::TryLockError::WouldBlock)
    ));
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::open(&dir)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let found = tilegen::__internal::bundle::unpack::leftovers_with_prefix(
        &std::env::temp_dir(),
        "tilegen-bundle-",
    );
    assert!(!found.contains(&dir), "{found:?}");
    drop(staged);
    assert!(!dir.exists());
}

#[test]
fn hostile_names_and_entry_types_are_refused() {
    let f = fixture();
    let with = |extra: Raw| {
        let mut e = good_entries(&f);
        e.push(extra);
        raw_archive(&e)
    };
    assert_rejected(
        &with(file("/tmp/evil", b"x")),
        "`/tmp/evil` is an absolute path",
    );
    assert_rejected(
        &with(file("../evil", b"x")),
        "`../evil` has a `..` component",
    );
    assert_rejected(
        &with(file("kernels/../../evil", b"x")),
        "has a `..` component",
    );
    let link = |kind, target| Raw {
        name: b"kernels/link".to_vec(),
        kind,
        data: vec![],
        link: Some(target),
    };
    assert_rejected(
        &with(link(tar::EntryType::Symlink, "/etc/passwd")),
        "`kernels/link` is a symbolic link",
    );
    assert_rejected(
        &with(link(tar::EntryType::Link, "manifest.json")),
        "`kernels/link` is a hard link",
    );
    let special = |kind| Raw {
        name: b"dev".to_vec(),
        kind,
        data: vec![],
        link: None,
    };
    assert_rejected(
        &with(special(tar::EntryType::Char)),
        "`dev` is a device file",
    );
    assert_rejected(
        &with(special(tar::EntryType::Block)),
        "`dev` is a device file",
    );
    assert_rejected(&with(special(tar::EntryType::Fifo)), "`dev` is a fifo");
    assert_rejected(
        &with(special(tar::EntryType::Directory)),
        "`dev` is a directory entry",
    );
    assert_rejected(&with(file("a\\b", b"x")), "which bundle names never hold");
}

#[test]
fn duplicate_and_case_colliding_names_are_refused() {
    let f = fixture();
    let mut e = good_entries(&f);
    e.push(file("manifest.json", b"{}"));
    assert_rejected(&raw_archive(&e), "`manifest.json` appears twice");
    let mut e = good_entries(&f);
    e.push(file("Manifest.json", b"{}"));
    assert_rejected(
        &raw_archive(&e),
        "`manifest.json` and `Manifest.json` differ only in case",
    );
}

#[test]
fn unknown_manifest_version_is_refused() {
    let f = fixture();
    let mut e = good_entries(&f);
    let text = String::from_utf8(e[0].data.clone()).unwrap();
    assert!(text.contains("\"format\": 1,"));
    e[0].data = text
        .replacen("\"format\": 1,", "\"format\": 2,", 1)
        .into_bytes();
    assert_rejected(&raw_archive(&e), "unknown bundle format version 2");
    e.remove(0);
    assert_rejected(&raw_archive(&e), "no `bundle.json` in the archive");
}

#[test]
fn members_that_disagree_with_the_manifest_are_refused() {
    let f = fixture();
    let mut e = good_entries(&f);
    let i = e
        .iter()
        .position(|r| r.name.ends_with(b".sm_90.cubin"))
        .unwrap();
    let name = String::from_utf8(e[i].name.clone()).unwrap();
    e[i].data[5] ^= 1;
    assert_rejected(&raw_archive(&e), &format!("`{name}` has sha256"));
    e[i].data.push(0);
    assert_rejected(
        &raw_archive(&e),
        &format!(
            "`{name}` is {} bytes, but `bundle.json` says",
            e[i].data.len()
        ),
    );
    // Missing and extra members.
    let mut e = good_entries(&f);
    let gone = e.remove(i);
    assert_rejected(
        &raw_archive(&e),
        "is listed in `bundle.json` but missing from the archive",
    );
    e.push(gone);
    e.push(file("kernels/extra.ptx", b".version 8.0\n"));
    assert_rejected(
        &raw_archive(&e),
        "`kernels/extra.ptx` is in the archive but not listed",
    );
}

#[test]
fn truncated_archives_are_refused() {
    let f = fixture();
    for len in [
        0,
        5,
        20,
        f.bytes.len() / 3,
        f.bytes.len() / 2,
        f.bytes.len() - 9,
        f.bytes.len() - 1,
    ] {
        let msg = assert_rejected(&f.bytes[..len], "");
        assert!(
            msg.contains("truncat") || msg.contains("corrupt") || msg.contains("not a gzip"),
            "{len}: {msg}"
        );
    }
    let mut trailing = f.bytes.clone();
    trailing.extend_from_slice(&f.bytes);
    assert_rejected(&trailing, "trailing data after the compressed stream");
}

/// Tar readers that go on past the end marker (`tar -i`) must find no member that was never
/// checked; zeros (more padding) may follow it.
#[test]
fn nothing_but_zeros_may_follow_the_tar_end_marker() {
    use std::io::Read;
    let f = fixture();
    let tar_of = |gz: &[u8]| {
        let mut t = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut t)
            .unwrap();
        t
    };
    let mut hidden = tar_of(&f.bytes);
    hidden.extend(tar_of(&raw_archive(&[file("evil.sh", b"#!/bin/sh\n")])));
    assert_rejected(&common::gz(&hidden), "data after the archive's end marker");
    let mut padded = tar_of(&f.bytes);
    padded.extend(vec![0u8; 10240]);
    bundle::verify_bytes(&common::gz(&padded), &Limits::default())
        .expect("zero padding after the end marker is accepted");
}

#[test]
fn every_bit_flipped_archive_is_refused() {
    let f = fixture();
    let lib = bundle::load_library(&f.lib).unwrap();
    let mut accepted = Vec::new();
    for i in 0..f.bytes.len() {
        let mut b = f.bytes.clone();
        b[i] ^= 1 << (i % 8);
        match bundle::verify_bytes(&b, &Limits::default()) {
            Err(_) => {}
            // Deflate ignores the padding bits after a stored block's header and at the
            // end: such a flip changes no content, so it may pass, but only with exactly
            // the original files.
            Ok(got) => {
                assert!(
                    got.files == lib,
                    "a flip at byte {i} changed content and was accepted"
                );
                accepted.push(i);
            }
        }
    }
    assert!(
        accepted.len() * 1000 < f.bytes.len(),
        "flips accepted at {accepted:?}"
    );
    // And through unpack: refused, nothing written.
    let mut b = f.bytes.clone();
    let mid = b.len() / 2;
    b[mid] ^= 0x10;
    assert_rejected(&b, "");
}

#[test]
fn too_many_entries_are_refused() {
    let f = fixture();
    let limits = Limits {
        max_entries: 3,
        ..Limits::default()
    };
    assert_rejected_with(&f.bytes, &limits, "more than 3 entries");
    // And with the default limit.
    let many: Vec<Raw> = (0..100_001).map(|i| file(format!("k/{i}"), b"")).collect();
    assert_rejected(&raw_archive(&many), "more than 100000 entries");
}

#[test]
fn size_and_ratio_limits_stop_decompression_bombs() {
    let bomb = raw_archive(&[file("kernels/zeros.cubin", &vec![0u8; 64 << 20])]);
    assert!(bomb.len() < 1 << 20);
    assert_rejected(&bomb, "compressed bytes it took");
    // Incompressible bytes after the stream do not dilute the ratio: it is judged on the
    // compressed bytes the output came from, while decompressing.
    let mut diluted = bomb.clone();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    diluted.extend((0..4 << 20).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    assert_rejected(&diluted, "compressed bytes it took");
    // The JSON files are held whole, so their size is refused from the member's header,
    // before any of it is read.
    let big_json = raw_archive(&[file("bundle.json", &vec![b' '; (64 << 20) + 1])]);
    assert_rejected(&big_json, "for the JSON files a bundle holds in memory");
    let f = fixture();
    let small = Limits {
        max_archive_bytes: 100,
        ..Limits::default()
    };
    assert_rejected_with(&f.bytes, &small, "over the limit of 100");
    let small = Limits {
        max_member_bytes: 10,
        ..Limits::default()
    };
    assert_rejected_with(&f.bytes, &small, "over the member limit of 10");
    let small = Limits {
        max_unpacked_bytes: 4096,
        ..Limits::default()
    };
    assert_rejected_with(&f.bytes, &small, "unpacks to more than 4096 bytes");
}

#[test]
fn generate_from_a_bundle_needs_no_nvrtc_and_checks_the_specs() {
    let f = fixture();
    let out = tempfile::tempdir().unwrap();
    // No specs present: the bundle is taken as it is.
    let mut o = tilegen::Options::new(out.path().join("no-specs"), out.path().join("lib"));
    o.bundle = Some(f.bundle.clone());
    let r = tilegen::generate(&o, &|_| {}).expect("builds from the bundle");
    assert_eq!(r.compiled, 0);
    assert_eq!(r.inputs, vec![f.bundle.clone()]);
    let want = bundle::load_library(&f.lib).unwrap();
    let got = bundle::load_library(&out.path().join("lib")).unwrap();
    assert_same(&got, &want);
    // A second run writes nothing; --check agrees.
    let r = tilegen::generate(&o, &|_| {}).unwrap();
    assert!(r.written.is_empty());
    o.check = true;
    tilegen::generate(&o, &|_| {}).unwrap();

    // Matching specs: fine. (The fixture used `--filter _f32`; a spec file with only those.)
    let specs = out.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    let text = std::fs::read_to_string(golden_specs().join("golden.yaml")).unwrap();
    let mut o = tilegen::Options::new(&specs, out.path().join("lib2"));
    o.bundle = Some(f.bundle.clone());
    std::fs::write(specs.join("golden.yaml"), &text).unwrap();
    let e = tilegen::generate(&o, &|_| {}).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::OutOfDate(_)), "{msg}");
    assert!(
        msg.contains("in the specs") && msg.contains("but not in the bundle"),
        "{msg}"
    );
    assert!(
        !out.path().join("lib2").exists(),
        "nothing written on a mismatch"
    );

    // The specs the fixture was made from, line for line: fine.
    let only_f32 = f32_only_spec(&text);
    std::fs::write(specs.join("golden.yaml"), &only_f32).unwrap();
    tilegen::generate(&o, &|_| {}).expect("specs that match the bundle");
    // One configuration changed: named, with the field.
    let changed = only_f32.replacen("    archs: [sm_80, sm_90]", "    archs: [sm_90]", 1);
    assert_ne!(changed, only_f32);
    std::fs::write(specs.join("golden.yaml"), &changed).unwrap();
    let msg = tilegen::generate(&o, &|_| {}).unwrap_err().to_string();
    assert!(
        msg.contains("vector_add_f32_b256_i4 (golden.yaml:"),
        "{msg}"
    );
    assert!(msg.contains("configuration differs"), "{msg}");
    assert!(
        msg.contains(r#"archs: specs ["sm_90"] vs bundle ["sm_80","sm_90"]"#),
        "{msg}"
    );
    // A spec edit that moves its lines: the same kernels, whose headers now name the new
    // lines (as a compile would write them).
    std::fs::write(specs.join("golden.yaml"), format!("# moved\n{only_f32}")).unwrap();
    tilegen::generate(&o, &|_| {}).expect("moved lines are the same kernels");
    let cu =
        std::fs::read_to_string(out.path().join("lib2/kernels/vector_add_f32_b256_i4.cu")).unwrap();
    assert!(
        cu.contains("golden.yaml:10."),
        "{}",
        cu.lines().next().unwrap()
    );
    // A changed tile size renames the instance: both sides are named.
    let renamed = only_f32.replacen("items: 4", "items: 2", 1);
    std::fs::write(specs.join("golden.yaml"), &renamed).unwrap();
    let msg = tilegen::generate(&o, &|_| {}).unwrap_err().to_string();
    assert!(
        msg.contains("vector_add_f32_b256_i2 (golden.yaml:"),
        "{msg}"
    );
    assert!(msg.contains("in the specs but not in the bundle"), "{msg}");
    // The bundle may hold more than the specs name: those are simply not taken.
    assert!(!msg.contains("vector_add_f32_b256_i4"), "{msg}");
}

#[test]
fn builder_takes_a_bundle() {
    let f = fixture();
    let out = tempfile::tempdir().unwrap();
    let mut b = tilegen::Builder::new();
    b.specs(out.path().join("no-specs"))
        .bundle(&f.bundle)
        .out_dir(out.path())
        .emit_rerun_if_changed(false);
    let bindings = b.try_compile().expect("builds from the bundle");
    assert_eq!(bindings, out.path().join("bindings.rs"));
    assert_same(
        &bundle::load_library(out.path()).unwrap(),
        &bundle::load_library(&f.lib).unwrap(),
    );
}

#[test]
fn cli_create_verify_inspect_unpack_and_generate() {
    let f = fixture();
    let d = f._dir.path();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let out = d.join("cli.tar.gz");
    let o = tilegen(
        &["bundle", "create", "--lib", &s(&f.lib), "--out", &s(&out)],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), f.bytes);
    let o = tilegen(&["bundle", "verify", &s(&out)], &[]);
    assert!(o.status.success());
    let o = tilegen(&["bundle", "inspect", &s(&out)], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("PTX ISA: 8.0, 8.7"), "{text}");
    let o = tilegen(
        &["bundle", "unpack", &s(&out), "--to", &s(&d.join("u"))],
        &[],
    );
    assert!(o.status.success());
    // TILEGEN_BUNDLE drives `generate`.
    let lib = d.join("from-env");
    let o = tilegen(
        &[
            "generate",
            "--specs",
            &s(&d.join("no-specs")),
            "--out",
            &s(&lib),
        ],
        &[
            ("TILEGEN_BUNDLE", &out),
            ("TILEGEN_CACHE_DIR", &d.join("cache")),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_same(
        &bundle::load_library(&lib).unwrap(),
        &bundle::load_library(&f.lib).unwrap(),
    );
    // A hostile bundle: exit 7, the member and the problem named.
    let mut e = good_entries(&f);
    e.push(file("../evil", b"x"));
    let bad = d.join("bad.tar.gz");
    std::fs::write(&bad, raw_archive(&e)).unwrap();
    let o = tilegen(
        &["bundle", "unpack", &s(&bad), "--to", &s(&d.join("v"))],
        &[],
    );
    assert_eq!(o.status.code(), Some(7));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad bundle: `../evil` has a `..` component"),
        "{err}"
    );
    assert!(!d.join("v").exists());
}

// Detached signatures (minisign): `bundle keygen`, `bundle sign`, and `--pubkey` /
// `--require-signed` on verify and unpack, checked before anything in the archive is read.

/// A fixture with a key pair in `keys/` and the bundle signed by it.
fn signed_fixture() -> (Fixture, PathBuf, PathBuf) {
    let f = fixture();
    let (pk, sk) =
        tilegen::__internal::bundle::sign::keygen(&f._dir.path().join("keys")).expect("keygen");
    let sig = tilegen::__internal::bundle::sign::sign(&f.bundle, &sk).expect("signs");
    assert_eq!(
        sig,
        tilegen::__internal::bundle::sign::signature_path(&f.bundle)
    );
    assert!(sig.to_str().unwrap().ends_with("kernels.tar.gz.minisig"));
    (f, pk, sk)
}

fn pubkey(path: &Path) -> bundle::PublicKey {
    bundle::read_public_key(path.to_str().unwrap()).unwrap()
}

fn policy(key: &bundle::PublicKey, required: bool) -> Option<bundle::SignaturePolicy<'_>> {
    Some(bundle::SignaturePolicy {
        pubkey: key,
        required,
    })
}

/// Nothing but `keep` in `dir`.
fn assert_only(dir: &Path, keep: &[&str]) {
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut keep: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
    keep.sort();
    assert_eq!(left, keep, "something was written");
}

/// Signing writes through a private temporary file: a link planted where a fixed temporary
/// name would be is neither followed nor left as the signature.
#[test]
fn signing_never_writes_through_a_planted_link() {
    let f = fixture();
    let (pk, sk) =
        tilegen::__internal::bundle::sign::keygen(&f._dir.path().join("keys")).expect("keygen");
    let victim = f._dir.path().join("victim.txt");
    std::fs::write(&victim, b"keep me").unwrap();
    let sig = tilegen::__internal::bundle::sign::signature_path(&f.bundle);
    let mut planted = sig.clone().into_os_string();
    planted.push(".tmp");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    tilegen::__internal::bundle::sign::sign(&f.bundle, &sk).expect("signs");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(std::fs::symlink_metadata(&sig).unwrap().is_file());
    let key = pubkey(&pk);
    assert!(bundle::open_signed(&f.bundle, &Limits::default(), policy(&key, true)).is_ok());
}

/// A signature "file" that is a folder, or far longer than any signature, is a bad
/// signature (exit code 7), read no further than a signature's length.
#[test]
fn a_signature_that_is_a_folder_or_too_long_is_a_bad_bundle() {
    let (f, pk, _) = signed_fixture();
    let key = pubkey(&pk);
    let sig = tilegen::__internal::bundle::sign::signature_path(&f.bundle);
    std::fs::remove_file(&sig).unwrap();
    std::fs::create_dir(&sig).unwrap();
    let e = bundle::open_signed(&f.bundle, &Limits::default(), policy(&key, true)).unwrap_err();
    assert_eq!(e.exit_code(), 7, "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
    std::fs::remove_dir(&sig).unwrap();
    std::fs::write(&sig, vec![b'#'; 1 << 20]).unwrap();
    let e = bundle::open_signed(&f.bundle, &Limits::default(), policy(&key, true)).unwrap_err();
    assert_eq!(e.exit_code(), 7, "{e}");
    assert!(e.to_string().contains("longer than"), "{e}");
}

#[test]
fn a_signed_bundle_verifies_and_unpacks() {
    let (f, pk, _) = signed_fixture();
    let key = pubkey(&pk);
    let (b, signed) =
        bundle::open_signed(&f.bundle, &Limits::default(), policy(&key, true)).expect("verifies");
    assert_eq!(
        b.files,
        bundle::open(&f.bundle, &Limits::default()).unwrap().files
    );
    match signed {
        Some(bundle::Signed::Yes { key_id, comment }) => {
            assert_eq!(key_id.len(), 16);
            assert!(comment.contains("file:kernels.tar.gz"), "{comment}");
        }
        other => panic!("not verified: {other:?}"),
    }
    // The key may also be given as its base64 line, as `minisign -P` takes it.
    let line = std::fs::read_to_string(&pk).unwrap();
    let line = line.lines().last().unwrap();
    assert!(line.starts_with("RW"));
    let key2 = bundle::read_public_key(line).unwrap();
    assert!(bundle::open_signed(&f.bundle, &Limits::default(), policy(&key2, true)).is_ok());
    let dest = f._dir.path().join("dest");
    bundle::unpack_signed(&f.bundle, &dest, &Limits::default(), policy(&key, true))
        .expect("unpacks");
    assert_same(
        &bundle::load_library(&dest).unwrap(),
        &bundle::load_library(&f.lib).unwrap(),
    );
}

#[test]
fn a_tampered_bundle_fails_the_signature_check_and_writes_nothing() {
    let (f, pk, _) = signed_fixture();
    let key = pubkey(&pk);
    // One flipped bit in the gzip trailer's CRC: caught by the signature before the archive
    // is even decompressed.
    let mut bytes = f.bytes.clone();
    let n = bytes.len();
    bytes[n - 6] ^= 1;
    std::fs::write(&f.bundle, &bytes).unwrap();
    let dest = f._dir.path().join("dest");
    let e = bundle::unpack_signed(&f.bundle, &dest, &Limits::default(), policy(&key, true))
        .expect_err("tampered");
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Bundle { .. }) && e.exit_code() == 7,
        "{msg}"
    );
    assert!(
        msg.contains("kernels.tar.gz") && msg.contains("signature check failed"),
        "{msg}"
    );
    assert_only(
        f._dir.path(),
        &["keys", "lib", "kernels.tar.gz", "kernels.tar.gz.minisig"],
    );
    // A tampered signature (its trusted comment edited) fails too.
    std::fs::write(&f.bundle, &f.bytes).unwrap();
    let sig_path = tilegen::__internal::bundle::sign::signature_path(&f.bundle);
    let sig = std::fs::read_to_string(&sig_path).unwrap();
    std::fs::write(&sig_path, sig.replace("file:kernels", "file:other")).unwrap();
    let e = bundle::open_signed(&f.bundle, &Limits::default(), policy(&key, true))
        .expect_err("edited trusted comment");
    assert!(e.to_string().contains("signature check failed"), "{e}");
    // A signature that is not one at all.
    std::fs::write(&sig_path, "not a signature\n").unwrap();
    let e = bundle::open_signed(&f.bundle, &Limits::default(), policy(&key, false))
        .expect_err("garbage signature");
    assert!(e.to_string().contains("not a minisign signature"), "{e}");
}

#[test]
fn the_wrong_key_fails_with_both_key_ids() {
    let (f, _, _) = signed_fixture();
    let (other, _) =
        tilegen::__internal::bundle::sign::keygen(&f._dir.path().join("other")).unwrap();
    let key = pubkey(&other);
    let e = bundle::open_signed(&f.bundle, &Limits::default(), policy(&key, false))
        .expect_err("wrong key");
    let msg = e.to_string();
    assert!(
        msg.contains("signature check failed: it was signed with key")
            && msg.contains("not with the given public key"),
        "{msg}"
    );
}

#[test]
fn require_signed_refuses_an_unsigned_bundle_and_writes_nothing() {
    let f = fixture();
    let (pk, _) = tilegen::__internal::bundle::sign::keygen(&f._dir.path().join("keys")).unwrap();
    let key = pubkey(&pk);
    let dest = f._dir.path().join("dest");
    let e = bundle::unpack_signed(&f.bundle, &dest, &Limits::default(), policy(&key, true))
        .expect_err("unsigned");
    let msg = e.to_string();
    assert!(
        msg.contains("unsigned: there is no") && msg.contains("kernels.tar.gz.minisig"),
        "{msg}"
    );
    assert_eq!(e.exit_code(), 7);
    assert_only(f._dir.path(), &["keys", "lib", "kernels.tar.gz"]);
    // Without --require-signed, an unsigned bundle is taken, and said to be unsigned.
    let (_, signed) =
        bundle::unpack_signed(&f.bundle, &dest, &Limits::default(), policy(&key, false)).unwrap();
    assert_eq!(signed, Some(bundle::Signed::Unsigned));
}

#[test]
fn keygen_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let (pk, sk) = tilegen::__internal::bundle::sign::keygen(dir.path()).unwrap();
    let before = (std::fs::read(&pk).unwrap(), std::fs::read(&sk).unwrap());
    let e = tilegen::__internal::bundle::sign::keygen(dir.path()).expect_err("keys exist");
    assert!(e.to_string().contains("never overwrites"), "{e}");
    assert_eq!(
        (std::fs::read(&pk).unwrap(), std::fs::read(&sk).unwrap()),
        before
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&sk).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the secret key is private");
    }
}

#[test]
fn cli_keygen_sign_verify_and_require_signed() {
    let f = fixture();
    let d = f._dir.path();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let keys = d.join("keys");
    let o = tilegen(&["bundle", "keygen", "--out", &s(&keys)], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (pk, sk) = (keys.join("tilegen.pub"), keys.join("tilegen.key"));
    // Unsigned, required: exit 7, nothing unpacked.
    let dest = d.join("dest");
    let o = tilegen(
        &[
            "bundle",
            "unpack",
            &s(&f.bundle),
            "--to",
            &s(&dest),
            "--pubkey",
            &s(&pk),
            "--require-signed",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(7));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("a signature is required"), "{err}");
    assert!(!dest.exists());
    // --require-signed needs a key to check with.
    let o = tilegen(
        &["bundle", "verify", &s(&f.bundle), "--require-signed"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    // Sign, then verify and unpack.
    let o = tilegen(&["bundle", "sign", &s(&f.bundle), "--key", &s(&sk)], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(tilegen::__internal::bundle::sign::signature_path(&f.bundle).is_file());
    let o = tilegen(
        &["bundle", "verify", &s(&f.bundle), "--pubkey", &s(&pk)],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("signature: signed by key"));
    let o = tilegen(
        &[
            "bundle",
            "unpack",
            &s(&f.bundle),
            "--to",
            &s(&dest),
            "--pubkey",
            &s(&pk),
            "--require-signed",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dest.join("manifest.json").is_file());
    // Tampered: exit 7 with the reason.
    let mut bytes = f.bytes.clone();
    bytes[20] ^= 0x40;
    std::fs::write(&f.bundle, &bytes).unwrap();
    let o = tilegen(
        &["bundle", "verify", &s(&f.bundle), "--pubkey", &s(&pk)],
        &[],
    );
    assert_eq!(o.status.code(), Some(7));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("signature check failed"), "{err}");
}

/// The acceptance case "a crate builds from a bundle on a machine with no NVRTC": the CLI
/// (the same core the build-script `Builder` calls) runs where NVRTC cannot be found — proven
/// first by a plain generate failing with the environment error — and still writes the
/// library, bindings included, from the bundle.
#[test]
fn generate_from_a_bundle_where_nvrtc_is_hidden() {
    let f = fixture();
    let work = tempfile::tempdir().unwrap();
    let specs = work.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    std::fs::write(
        specs.join("k.yaml"),
        "kernels:\n  - name: add\n    op: vector_add\n    dtype: f32\n",
    )
    .unwrap();
    let hidden = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tilegen"));
        // Nothing that points at an NVRTC: no project folder above the working directory,
        // no manifest dir, no CUDA variables, an empty loader path and a python that finds nothing.
        c.current_dir(work.path())
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", work.path())
            .env("TILEGEN_CACHE_DIR", work.path().join("cache"))
            .env("PYTHONNOUSERSITE", "1")
            .env("PYTHONPATH", work.path());
        c.output().unwrap()
    };
    let plain = hidden(&["generate", "--specs", "specs", "--out", "lib-from-specs"]);
    assert_eq!(
        plain.status.code(),
        Some(6),
        "NVRTC should be unreachable here: {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let bundle = f.bundle.to_str().unwrap();
    let out = hidden(&[
        "generate", "--bundle", bundle, "--specs", "no-specs", "--out", "lib",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = work.path().join("lib");
    assert!(lib.join("bindings.rs").is_file() && lib.join("manifest.json").is_file());
    assert_same(
        &bundle::load_library(&lib).unwrap(),
        &bundle::load_library(&f.lib).unwrap(),
    );
}

/// "Killing `bundle unpack` midway leaves nothing half-installed": unpack the checked-in
/// library's bundle in processes killed at delays spread over one whole unpack's time;
/// afterwards the destination is either absent or the whole library, at least one kill landed
/// while files were being written (its temporary folder is left beside the destination), and
/// a last unpack still succeeds.
#[test]
fn killed_unpack_leaves_nothing_half_installed() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("generated.tar.gz");
    bundle::create(&repo.join("generated"), &archive).expect("bundles generated/");
    let want = bundle::load_library(&repo.join("generated")).unwrap();
    let dest = work.path().join("kernels");
    let unpack = || {
        Command::new(env!("CARGO_BIN_EXE_tilegen"))
            .args(["bundle", "unpack", archive.to_str().unwrap(), "--to"])
            .arg(&dest)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // Temporary folders of unpacks into `dest` (named after it, beside it).
    let temp_folders = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(work.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with(".kernels.") && e.path().is_dir()
            })
            .map(|e| e.path())
            .collect()
    };
    let leftovers = || temp_folders().len();
    let start = std::time::Instant::now();
    assert!(unpack().wait().unwrap().success());
    let whole_run = start.elapsed();
    std::fs::remove_dir_all(&dest).unwrap();
    let (mut whole, mut mid_write) = (0, 0);
    for step in 0..24u32 {
        let before = leftovers();
        let mut child = unpack();
        std::thread::sleep(whole_run * step / 20);
        let _ = child.kill();
        let _ = child.wait();
        if leftovers() > before {
            mid_write += 1;
        }
        if dest.exists() {
            // Renamed into place only when complete: then it is the whole library.
            assert_same(&bundle::load_library(&dest).unwrap(), &want);
            whole += 1;
            std::fs::remove_dir_all(&dest).unwrap();
        }
    }
    assert!(
        mid_write > 0,
        "no kill landed while files were written (one unpack takes {whole_run:?})"
    );
    // Leftover temporary folders never stand in for the destination, and a new unpack
    // (which clears them) succeeds.
    assert!(!dest.exists());
    let status = unpack().wait().unwrap();
    assert!(status.success());
    assert_same(&bundle::load_library(&dest).unwrap(), &want);
    // The last unpack removes every leftover whose owner lock is free. A kill that landed
    // between making a folder and locking its owner file leaves one without a lock, which a
    // cleanup must take for a live run's folder in the making for a while (its pid may be
    // another namespace's): such a folder holds nothing staged yet.
    for left in temp_folders() {
        assert!(
            !left.join("owner.lock").exists() && !left.join("staged").exists(),
            "the last unpack removes the leftovers: {} remains",
            left.display()
        );
    }
    eprintln!("24 kills over {whole_run:?}: {mid_write} mid-write, {whole} after the rename");
}

/// Building from a bundle with a public key demands a signature that verifies with it: an
/// unsigned bundle, or one signed with another key, is refused before anything is written.
#[test]
fn generate_from_a_bundle_with_a_key_requires_its_signature() {
    let f = fixture();
    let keys = f._dir.path();
    let (pk, sk) = tilegen::__internal::bundle::sign::keygen(&keys.join("keys")).unwrap();
    let (other_pk, _) = tilegen::__internal::bundle::sign::keygen(&keys.join("other")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = |key: &Path, lib: &str| {
        let mut o = tilegen::Options::new(out.path().join("no-specs"), out.path().join(lib));
        o.bundle = Some(f.bundle.clone());
        o.bundle_pubkey = Some(key.to_str().unwrap().to_string());
        tilegen::generate(&o, &|_| {})
    };
    let e = run(&pk, "unsigned").expect_err("an unsigned bundle is refused");
    assert!(matches!(e, Error::Bundle { .. }), "{e}");
    assert!(!out.path().join("unsigned").exists());
    tilegen::__internal::bundle::sign::sign(&f.bundle, &sk).unwrap();
    let e = run(&other_pk, "wrong-key").expect_err("another key is refused");
    assert!(matches!(e, Error::Bundle { .. }), "{e}");
    assert!(!out.path().join("wrong-key").exists());
    let r = run(&pk, "signed").expect("a bundle signed with the key is used");
    assert!(r
        .inputs
        .iter()
        .any(|p| p.to_string_lossy().ends_with(".minisig")));
    assert_same(
        &bundle::load_library(&out.path().join("signed")).unwrap(),
        &bundle::load_library(&f.lib).unwrap(),
    );
}

/// The golden spec file with only the kernels whose instances are the fixture's (`_f32`) and
/// the fixture's archs, line for line: every other kernel entry's lines become comments, so
/// each instance keeps the origin line the fixture recorded.
/// The golden specs with default archs sm_80 and sm_90 (the fixture's binaries).
fn both_archs(text: &str) -> String {
    text.replacen("  archs: [sm_90]", "  archs: [sm_80, sm_90]", 1)
}

fn f32_only_spec(text: &str) -> String {
    // The fixture gives every instance binaries for sm_80 and sm_90.
    let text = both_archs(text);
    let (head, kernels) = text.split_once("kernels:\n").unwrap();
    let mut out = format!("{head}kernels:\n");
    let mut entries: Vec<Vec<&str>> = Vec::new();
    for line in kernels.lines() {
        if line.starts_with("  - ") || entries.is_empty() {
            entries.push(Vec::new());
        }
        entries.last_mut().unwrap().push(line);
    }
    for entry in entries {
        let keep = entry.iter().any(|l| l.trim() == "dtype: f32");
        for line in entry {
            if keep || line.trim().is_empty() || line.trim_start().starts_with('#') {
                out += line;
            } else {
                out += "#";
            }
            out += "\n";
        }
    }
    out
}
