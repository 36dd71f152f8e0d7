//! Hostile bundles and paths must not inject code into what tilegen generates: names that
//! become Rust identifiers are checked (a bundle error, exit 7, never a panic), text that
//! lands in comments is escaped, and `generate --bundle` with specs compares every field it
//! emits. Each bundle is built here from a tiny library with fake binaries (no NVRTC, no
//! GPU), then edited, with `bundle.json`'s hashes fixed up so that only the edit is hostile.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tilegen::manifest::{FileRef, Manifest, Target};

const SPEC: &str = "kernels:\n  - name: vadd\n    op: vector_add\n    dtype: f32\n    archs: [sm_80]\n    block: 256\n    items: 4\n";
const INSTANCE: &str = "vadd_f32_b256_i4";
const INJECTED: &str = "x\npub fn injected() -> u32 { std::process::exit(42) }\n//";

fn sha(b: &[u8]) -> String {
    tilegen::hashing::sha256_hex(b)
}

fn tilegen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .args(args)
        .env_remove("TILEGEN_BUNDLE")
        .env_remove("TILEGEN_BUNDLE_PUBKEY")
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The library of `specs` rendered without NVRTC into `dir`, with fake PTX and cubins for
/// the spec's archs and bindings that embed them (what `generate` would write).
fn fake_library(specs: &Path, dir: &Path) {
    let cache = tempfile::tempdir().unwrap();
    let mut o = tilegen::generate::Options::new(specs, dir);
    o.compile = false;
    o.cache_dir = Some(cache.path().to_path_buf());
    tilegen::generate::generate(&o, &|_| {}).expect("renders without NVRTC");
    let mpath = dir.join("manifest.json");
    let mut m = Manifest::from_bytes(&std::fs::read(&mpath).unwrap()).unwrap();
    let mut files = Vec::new();
    for inst in &mut m.instances {
        let arch = "sm_80";
        let ptx = format!(
            "//\n// fake PTX\n.version 8.0\n.target {arch}\n// {}\n",
            inst.name
        );
        let cubin = format!("\x7fELF fake cubin of {} for {arch}", inst.name).into_bytes();
        let fref = |ext: &str, b: &[u8]| FileRef {
            path: format!("kernels/{}.{arch}.{ext}", inst.name),
            sha256: sha(b),
            bytes: b.len() as u64,
        };
        inst.targets.push(Target {
            arch: tilegen::spec::Arch::parse(arch).unwrap(),
            cache_key: sha(arch.as_bytes()),
            ptx: fref("ptx", ptx.as_bytes()),
            cubin: fref("cubin", &cubin),
            resources: Default::default(),
        });
        files.push((
            format!("kernels/{}.{arch}.ptx", inst.name),
            ptx.into_bytes(),
        ));
        files.push((format!("kernels/{}.{arch}.cubin", inst.name), cubin));
    }
    for (rel, bytes) in &files {
        std::fs::write(dir.join(rel), bytes).unwrap();
    }
    m.files.extend(files.into_iter().map(|(p, _)| p));
    m.files.retain(|f| f != "bindings.rs");
    m.files.sort();
    let bindings = tilegen::bindings::generate_in(&m, dir).unwrap();
    std::fs::write(dir.join("bindings.rs"), bindings).unwrap();
    m.files.push("bindings.rs".into());
    m.files.sort();
    std::fs::write(&mpath, m.to_bytes()).unwrap();
}

struct Fixture {
    dir: tempfile::TempDir,
    specs: PathBuf,
    /// The good bundle's members, `bundle.json` first.
    members: Vec<(String, Vec<u8>)>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    std::fs::write(specs.join("k.yaml"), SPEC).unwrap();
    let lib = dir.path().join("lib");
    fake_library(&specs, &lib);
    let good = dir.path().join("good.tar.gz");
    let o = tilegen(&["bundle", "create", "--lib", s(&lib), "--out", s(&good)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&good).unwrap();
    let mut members = Vec::new();
    let gz = flate2::read::GzDecoder::new(bytes.as_slice());
    let mut tar = tar::Archive::new(gz);
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().to_str().unwrap().to_string();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut data).unwrap();
        members.push((path, data));
    }
    assert_eq!(members[0].0, "bundle.json");
    Fixture {
        dir,
        specs,
        members,
    }
}

/// Gzip as tilegen writes it.
fn gz(tar: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(0xff)
        .write(Vec::new(), flate2::Compression::new(6));
    e.write_all(tar).unwrap();
    e.finish().unwrap()
}

/// A tar of `members` with raw header names (no validation by the tar crate), gzipped.
fn archive(members: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        if name.len() < 100 && !name.contains(&0) {
            h.as_old_mut().name[..name.len()].copy_from_slice(name);
        } else {
            // A GNU long name (which may hold a NUL): a `././@LongLink` entry holding the
            // name, then the member.
            let mut l = tar::Header::new_gnu();
            l.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
            l.set_entry_type(tar::EntryType::GNULongName);
            let mut long = name.clone();
            long.push(0);
            l.set_size(long.len() as u64);
            l.set_mode(0o644);
            l.set_mtime(0);
            l.set_cksum();
            b.append(&l, long.as_slice()).unwrap();
            h.as_old_mut().name[..9].copy_from_slice(b"long_name");
        }
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    gz(&b.into_inner().unwrap())
}

impl Fixture {
    /// The good bundle with its `manifest.json` edited by `edit` (as JSON) and `bundle.json`
    /// fixed up to match, written to `name`.
    fn hostile(&self, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
        let mut members = self.members.clone();
        let i = members
            .iter()
            .position(|(p, _)| p == "manifest.json")
            .unwrap();
        let mut m: Value = serde_json::from_slice(&members[i].1).unwrap();
        edit(&mut m);
        let mut bytes = serde_json::to_vec_pretty(&m).unwrap();
        bytes.push(b'\n');
        let mut b: Value = serde_json::from_slice(&members[0].1).unwrap();
        for member in b["members"].as_array_mut().unwrap() {
            if member["path"] == "manifest.json" {
                member["sha256"] = sha(&bytes).into();
                member["bytes"] = bytes.len().into();
            }
        }
        members[i].1 = bytes;
        let mut bj = serde_json::to_vec_pretty(&b).unwrap();
        bj.push(b'\n');
        members[0].1 = bj;
        let raw: Vec<_> = members
            .into_iter()
            .map(|(p, d)| (p.into_bytes(), d))
            .collect();
        let path = self.dir.path().join(name);
        std::fs::write(&path, archive(&raw)).unwrap();
        path
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The first instance of a manifest, as JSON.
fn first(m: &mut Value) -> &mut Value {
    &mut m["instances"][0]
}

fn assert_not_a_panic(o: &Output) {
    assert_ne!(o.status.code(), Some(101), "panicked: {}", stderr(o));
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

/// Names of the top-level items of a Rust file, and of items inside its modules and impls.
fn item_names(file: &syn::File) -> Vec<String> {
    fn walk(items: &[syn::Item], out: &mut Vec<String>) {
        for item in items {
            match item {
                syn::Item::Fn(f) => out.push(f.sig.ident.to_string()),
                syn::Item::Mod(m) => {
                    out.push(m.ident.to_string());
                    if let Some((_, items)) = &m.content {
                        walk(items, out);
                    }
                }
                syn::Item::Impl(i) => {
                    for it in &i.items {
                        if let syn::ImplItem::Fn(f) = it {
                            out.push(f.sig.ident.to_string());
                        }
                    }
                }
                syn::Item::Struct(s) => out.push(s.ident.to_string()),
                syn::Item::Static(s) => out.push(s.ident.to_string()),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(&file.items, &mut out);
    out
}

/// An origin path with a newline and an item after it: the bundle is accepted (a spec path
/// may hold any text the file system allows) and the path is escaped in the bindings'
/// header, so no line of `bindings.rs` is the injected item and it parses to no such item.
#[test]
fn origin_text_cannot_inject_an_item_into_the_bindings() {
    let f = fixture();
    let b = f.hostile("origin.tar.gz", |m| {
        first(m)["origin"]["file"] = INJECTED.into()
    });
    let o = tilegen(&["bundle", "verify", s(&b)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = f.out("G");
    let nowhere = f.out("no-specs");
    let o = tilegen(&[
        "generate",
        "--bundle",
        s(&b),
        "--specs",
        s(&nowhere),
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(out.join("bindings.rs")).unwrap();
    let first_line = text.lines().next().unwrap();
    assert!(
        first_line.starts_with("// @generated by tilegen ")
            && first_line
                .contains(r"from x\npub fn injected() -> u32 { std::process::exit(42) }\n//."),
        "{first_line}"
    );
    for (n, line) in text.lines().enumerate().skip(1) {
        assert!(
            !line.contains("injected"),
            "line {} holds the injected text: {line}",
            n + 1
        );
    }
    let file = syn::parse_file(&text).expect("bindings.rs parses");
    let names = item_names(&file);
    assert!(names.iter().any(|n| n == INSTANCE), "{names:?}");
    assert!(!names.iter().any(|n| n == "injected"), "{names:?}");
}

/// Instance names that are no identifier, or a Rust keyword, and an argument name with a
/// space: `bundle verify` and `generate --bundle` both refuse the bundle with exit code 7,
/// naming the instance and field, and nothing is written.
#[test]
fn names_that_are_not_identifiers_are_a_bundle_error() {
    let f = fixture();
    let cases: Vec<(&str, Box<dyn Fn(&mut Value)>, &str)> = vec![
        (
            "space",
            Box::new(|m| first(m)["name"] = "a b".into()),
            "instance 0 `a b`: `name` is not a plain identifier (it contains a space)",
        ),
        (
            "self",
            Box::new(|m| first(m)["name"] = "self".into()),
            "instance 0 `self`: `name` is not a plain identifier (`self` is a Rust keyword)",
        ),
        (
            "empty",
            Box::new(|m| first(m)["name"] = "".into()),
            "instance 0 ``: `name` is not a plain identifier (it is empty)",
        ),
        (
            "newline",
            Box::new(|m| first(m)["name"] = "a\nb".into()),
            "instance 0 `a\\nb`: `name` is not a plain identifier",
        ),
        (
            "arg",
            Box::new(|m| first(m)["args"][0]["name"] = "a b".into()),
            "instance 0 `vadd_f32_b256_i4`: `args` name `a b` is not a plain identifier (it contains a space)",
        ),
        (
            "reserved",
            Box::new(|m| first(m)["name"] = "load".into()),
            "`name` `load`",
        ),
    ];
    for (tag, edit, expect) in cases {
        let b = f.hostile(&format!("{tag}.tar.gz"), edit);
        let o = tilegen(&["bundle", "verify", s(&b)]);
        assert_not_a_panic(&o);
        assert_eq!(o.status.code(), Some(7), "{tag}: verify: {}", stderr(&o));
        let msg = stderr(&o);
        assert!(msg.contains(expect), "{tag}: expected `{expect}` in: {msg}");
        assert!(
            msg.contains(&format!("{tag}.tar.gz")),
            "{tag}: names the bundle: {msg}"
        );

        let out = f.out(&format!("out-{tag}"));
        let nowhere = f.out("no-specs");
        let o = tilegen(&[
            "generate",
            "--bundle",
            s(&b),
            "--specs",
            s(&nowhere),
            "--out",
            s(&out),
        ]);
        assert_not_a_panic(&o);
        assert_eq!(o.status.code(), Some(7), "{tag}: generate: {}", stderr(&o));
        assert!(stderr(&o).contains(expect), "{tag}: {}", stderr(&o));
        assert!(!out.exists(), "{tag}: nothing written");
    }
}

/// A specs folder whose path holds `\n#error injected\n`: the path is escaped in each
/// `.cu` header (no line of the CUDA C is the directive) and in the bindings' header.
#[test]
fn a_spec_path_cannot_inject_a_directive() {
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    let hostile = specs.join("x\n#error injected\n");
    std::fs::create_dir_all(&hostile).unwrap();
    std::fs::write(hostile.join("k.yaml"), SPEC).unwrap();
    let o = tilegen(&["show", INSTANCE, "--specs", s(&specs)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cu = String::from_utf8(o.stdout).unwrap();
    assert!(
        cu.lines()
            .next()
            .unwrap()
            .contains(r"from x\n#error injected\n/k.yaml:2."),
        "{}",
        cu.lines().next().unwrap()
    );
    for line in cu.lines() {
        assert!(!line.trim_start().starts_with("#error"), "{line}");
    }
    // The whole library, bindings included (rendered, not compiled).
    let lib = dir.path().join("lib");
    fake_library(&specs, &lib);
    let cu = std::fs::read_to_string(lib.join(format!("kernels/{INSTANCE}.cu"))).unwrap();
    assert!(
        !cu.lines().any(|l| l.trim_start().starts_with("#error")),
        "{cu}"
    );
    let rs = std::fs::read_to_string(lib.join("bindings.rs")).unwrap();
    assert!(rs
        .lines()
        .next()
        .unwrap()
        .contains(r"from x\n#error injected\n/k.yaml."));
    assert!(!rs.lines().skip(1).any(|l| l.contains("#error")));
    syn::parse_file(&rs).expect("bindings.rs parses");
}

/// With specs present, `generate --bundle` compares every field it emits: a bundle that
/// says its instance came from another spec file is reported, and the same bundle with
/// the true origin is accepted.
#[test]
fn generate_with_specs_reports_a_changed_origin() {
    let f = fixture();
    let same = f.hostile("same.tar.gz", |_| {});
    let o = tilegen(&[
        "generate",
        "--bundle",
        s(&same),
        "--specs",
        s(&f.specs),
        "--out",
        s(&f.out("ok")),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    for (tag, file) in [("other", "other.yaml"), ("injected", INJECTED)] {
        let b = f.hostile(&format!("{tag}.tar.gz"), |m| {
            first(m)["origin"]["file"] = file.into()
        });
        let out = f.out(&format!("out-{tag}"));
        let o = tilegen(&[
            "generate",
            "--bundle",
            s(&b),
            "--specs",
            s(&f.specs),
            "--out",
            s(&out),
        ]);
        assert_not_a_panic(&o);
        assert_eq!(o.status.code(), Some(1), "{tag}: {}", stderr(&o));
        let msg = stderr(&o);
        let want = format!(
            "origin file: specs \"k.yaml\" vs bundle {}",
            serde_json::to_string(file).unwrap()
        );
        assert!(
            msg.contains(&format!("{INSTANCE} (k.yaml:2)")),
            "{tag}: {msg}"
        );
        assert!(msg.contains(&want), "{tag}: expected `{want}` in: {msg}");
        assert!(!out.exists(), "{tag}: nothing written");
    }
}

/// A NUL (or another control character) in a member name is shown escaped, never raw.
#[test]
fn control_characters_in_member_names_are_escaped_in_messages() {
    let f = fixture();
    for (tag, name) in [
        ("nul", &b"/abs\0olute"[..]),
        ("newline", &b"../a\nb"[..]),
        (
            "long",
            &[&b"/"[..], &"\u{20ac}".repeat(400).into_bytes()].concat()[..],
        ),
    ] {
        let mut raw: Vec<_> = f
            .members
            .iter()
            .map(|(p, d)| (p.clone().into_bytes(), d.clone()))
            .collect();
        raw.push((name.to_vec(), b"x".to_vec()));
        let path = f.out(&format!("{tag}.tar.gz"));
        std::fs::write(&path, archive(&raw)).unwrap();
        let o = tilegen(&["bundle", "verify", s(&path)]);
        assert_not_a_panic(&o);
        assert_eq!(o.status.code(), Some(7), "{tag}: {}", stderr(&o));
        let msg = stderr(&o);
        assert!(!o.stderr.contains(&0), "{tag}: a raw NUL in: {msg:?}");
        let body = msg.trim_end();
        assert!(!body.contains('\n'), "{tag}: a raw newline in: {msg:?}");
        match tag {
            "nul" => assert!(
                msg.contains(r"`/abs\u{0}olute` is an absolute path"),
                "{msg}"
            ),
            "newline" => assert!(msg.contains(r"`../a\nb` has a `..` component"), "{msg}"),
            _ => assert!(
                msg.contains("has a name over 1024 bytes") || msg.contains("absolute"),
                "{msg}"
            ),
        }
    }
}
