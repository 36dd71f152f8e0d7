//! Hostile bundles and paths must not inject code into what tilegen generates: names that
//! become Rust identifiers are checked (a bundle error, exit 7, never a panic), text that
//! lands in comments is escaped, and `generate --bundle` with specs compares every field it
//! emits. Each bundle is built here from a tiny library with fake binaries (no NVRTC, no
//! GPU), then edited, with `bundle.json`'s hashes fixed up so that only the edit is hostile.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::FakeLibrary;
use serde_json::Value;

const SPEC: &str = "kernels:\n  - name: vadd\n    op: vector_add\n    dtype: f32\n    archs: [sm_80]\n    block: 256\n    items: 4\n";
const INSTANCE: &str = "vadd_f32_b256_i4";
const INJECTED: &str = "x\npub fn injected() -> u32 { std::process::exit(42) }\n//";

fn tilegen(args: &[&str]) -> Output {
    common::tilegen(args, &[])
}

/// `generate --bundle BUNDLE --specs SPECS --out OUT`.
fn generate_from(bundle: &Path, specs: &Path, out: &Path) -> Output {
    tilegen(&[
        "generate",
        "--bundle",
        s(bundle),
        "--specs",
        s(specs),
        "--out",
        s(out),
    ])
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The library of `specs` rendered without NVRTC into `dir`, with fake PTX and cubins for
/// sm_80 and bindings that embed them (what `generate` would write).
fn fake_library(specs: &Path, dir: &Path) {
    FakeLibrary {
        specs: specs.to_path_buf(),
        filter: None,
        targets: &[("sm_80", "8.0")],
        big_cubin: None,
    }
    .write(dir);
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
    let members = common::members(&std::fs::read(&good).unwrap());
    assert_eq!(members[0].0, "bundle.json");
    Fixture {
        dir,
        specs,
        members,
    }
}

impl Fixture {
    /// The good bundle with its `manifest.json` edited by `edit` (as JSON) and `bundle.json`
    /// fixed up to match, written to `name`.
    fn hostile(&self, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
        let mut members = self.members.clone();
        let (_, json) = members.iter().find(|(p, _)| p == "manifest.json").unwrap();
        let mut m: Value = serde_json::from_slice(json).unwrap();
        edit(&mut m);
        let mut bytes = serde_json::to_vec_pretty(&m).unwrap();
        bytes.push(b'\n');
        common::replace_member(&mut members, "manifest.json", bytes);
        self.write(name, &common::files(&members))
    }

    /// Writes an archive of `entries` to `name`.
    fn write(&self, name: &str, entries: &[common::Raw]) -> PathBuf {
        let path = self.out(name);
        std::fs::write(&path, common::raw_archive(entries)).unwrap();
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
    let o = generate_from(&b, &nowhere, &out);
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
    // (tag, the field edited in the first instance, its new value, the expected message)
    let name = "/name";
    let cases = [
        (
            "space",
            name,
            "a b",
            "instance 0 `a b`: `name` is not a plain identifier (it contains a space)",
        ),
        (
            "self",
            name,
            "self",
            "instance 0 `self`: `name` is not a plain identifier (`self` is a Rust keyword)",
        ),
        (
            "empty",
            name,
            "",
            "instance 0 ``: `name` is not a plain identifier (it is empty)",
        ),
        (
            "newline",
            name,
            "a\nb",
            "instance 0 `a\\nb`: `name` is not a plain identifier",
        ),
        (
            "arg",
            "/args/0/name",
            "a b",
            "instance 0 `vadd_f32_b256_i4`: `args` name `a b` is not a plain identifier (it contains a space)",
        ),
        ("reserved", name, "load", "`name` `load`"),
    ];
    for (tag, field, value, expect) in cases {
        let b = f.hostile(&format!("{tag}.tar.gz"), |m| {
            *first(m).pointer_mut(field).unwrap() = value.into()
        });
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
        let o = generate_from(&b, &nowhere, &out);
        assert_not_a_panic(&o);
        assert_eq!(o.status.code(), Some(7), "{tag}: generate: {}", stderr(&o));
        assert!(stderr(&o).contains(expect), "{tag}: {}", stderr(&o));
        assert!(!out.exists(), "{tag}: nothing written");
    }
}

/// Sizes past the ceilings a spec's YAML is held to: refused by name, before any size derived
/// from them (threads, shared memory) is computed, which could overflow.
#[test]
fn sizes_past_the_spec_ceilings_are_a_bundle_error() {
    let f = fixture();
    let b = f.hostile("huge.tar.gz", |m| {
        *first(m).pointer_mut("/params/block").unwrap() = 2_147_483_648u64.into()
    });
    let o = tilegen(&["bundle", "verify", s(&b)]);
    assert_not_a_panic(&o);
    assert_eq!(o.status.code(), Some(7), "verify: {}", stderr(&o));
    assert!(
        stderr(&o).contains("`block` value 2147483648 is out of range (at most 4096)"),
        "{}",
        stderr(&o)
    );
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
    let o = generate_from(&same, &f.specs, &f.out("ok"));
    assert!(o.status.success(), "{}", stderr(&o));

    for (tag, file) in [("other", "other.yaml"), ("injected", INJECTED)] {
        let b = f.hostile(&format!("{tag}.tar.gz"), |m| {
            first(m)["origin"]["file"] = file.into()
        });
        let out = f.out(&format!("out-{tag}"));
        let o = generate_from(&b, &f.specs, &out);
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

/// `tilegen ARGS`, failing the test (not hanging it) if it runs past a minute.
fn tilegen_bounded(args: &[&str], what: &str) -> Output {
    let child = common::tilegen_command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::finish(child, what)
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

/// A fifo, or a link to an endless device, where tilegen expects a file (the bundle, a
/// library's manifest, a file it is about to replace) is refused or replaced, never opened
/// for a read that waits for a writer or never ends.
#[test]
fn fifos_and_devices_where_files_belong_never_hang_a_run() {
    let f = fixture();
    let good = f.out("good.tar.gz");

    let fifo = f.out("fifo.tar.gz");
    mkfifo(&fifo);
    let o = tilegen_bounded(&["bundle", "verify", s(&fifo)], "bundle verify of a fifo");
    assert_not_a_panic(&o);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));

    let out = f.out("out");
    std::fs::create_dir(&out).unwrap();
    mkfifo(&out.join("manifest.json"));
    std::os::unix::fs::symlink("/dev/zero", out.join("bindings.rs")).unwrap();
    let args = [
        "generate",
        "--bundle",
        s(&good),
        "--specs",
        s(&f.specs),
        "--out",
        s(&out),
    ];
    let check = [&args[..], &["--check"]].concat();
    let o = tilegen_bounded(&check, "generate --check over a fifo");
    assert_not_a_panic(&o);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = tilegen_bounded(&args, "generate over a fifo");
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["manifest.json", "bindings.rs"] {
        let meta = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(meta.is_file(), "{name} replaced by the library's own");
        // Not the mode of what the link pointed at (/dev/zero is 0666).
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o644, "{name}");
    }

    // A socket cannot even be opened: refused the same way.
    let socket = f.out("socket.tar.gz");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let o = tilegen_bounded(
        &["bundle", "verify", s(&socket)],
        "bundle verify of a socket",
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));

    let lib = f.out("lib");
    std::fs::remove_file(lib.join("manifest.json")).unwrap();
    mkfifo(&lib.join("manifest.json"));
    let o = tilegen_bounded(
        &[
            "bundle",
            "create",
            "--lib",
            s(&lib),
            "--out",
            s(&f.out("x.tar.gz")),
        ],
        "bundle create from a fifo",
    );
    assert_not_a_panic(&o);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
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
        let mut entries = common::files(&f.members);
        entries.push(common::file(name, b"x"));
        let path = f.write(&format!("{tag}.tar.gz"), &entries);
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
                msg.contains("has a name over 1024 bytes")
                    || msg.contains("names are at most 1024 bytes")
                    || msg.contains("absolute"),
                "{msg}"
            ),
        }
    }
}
