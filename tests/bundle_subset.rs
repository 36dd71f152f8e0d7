//! One bundle for many crates: with specs present, `generate --bundle` (and `Builder`) takes
//! only the instances the specs name from a larger bundle, checked by config sha256, and
//! writes exactly the library a compile of those specs writes. Anything the bundle lacks or
//! holds in another configuration is listed in one error, and nothing is written. Tiny
//! specs (vector_add, f32, sm_80) compiled with the NVRTC `scripts/setup-nvrtc` installs,
//! into a private cache.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tilegen::{generate, Options};

const KERNEL: &str =
    "    op: vector_add\n    dtype: f32\n    archs: [sm_80]\n    block: 128\n    items: 1\n";

/// A spec file holding kernels `names` (each one entry), after `pad` comment lines.
fn spec_text(names: &[&str], pad: usize) -> String {
    let mut s = "# padding\n".repeat(pad);
    s.push_str("kernels:\n");
    for n in names {
        s.push_str(&format!("  - name: {n}\n{KERNEL}"));
    }
    s
}

fn write_specs(dir: &Path, file: &str, text: &str) -> PathBuf {
    let specs = dir.join(format!("specs-{}", file.trim_end_matches(".yaml")));
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::write(specs.join(file), text).unwrap();
    specs
}

fn options(specs: &Path, out: &Path, cache: &Path) -> Options {
    let mut o = Options::new(specs, out);
    o.cache_dir = Some(cache.to_path_buf());
    o
}

/// Every file under `dir` (relative path → bytes).
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn assert_same_tree(got: &Path, want: &Path) {
    let (g, w) = (tree(got), tree(want));
    assert_eq!(
        g.keys().collect::<Vec<_>>(),
        w.keys().collect::<Vec<_>>(),
        "file lists differ"
    );
    for (k, v) in &g {
        assert!(v == &w[k], "{k} differs from a compile of the same specs");
    }
}

/// A bundle of three instances (`one`, `two`, `three`), compiled for real.
struct Fixture {
    dir: tempfile::TempDir,
    cache: PathBuf,
    bundle: PathBuf,
    lib: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let specs = write_specs(
        dir.path(),
        "all.yaml",
        &spec_text(&["one", "two", "three"], 0),
    );
    let lib = dir.path().join("all");
    let r = generate(&options(&specs, &lib, &cache), &|_| {}).expect("compiles the tiny specs");
    assert_eq!(r.instances, 3);
    let bundle = dir.path().join("all.tar.gz");
    tilegen::bundle::create(&lib, &bundle).unwrap();
    Fixture {
        dir,
        cache,
        bundle,
        lib,
    }
}

/// Two of the three, in another file at other lines (so the headers name other origins):
/// the library taken from the bundle is byte for byte the one a compile writes, from the
/// CLI's path and from `Builder`.
#[test]
fn a_subset_of_a_bundle_equals_a_compile_of_the_subset() {
    let f = fixture();
    let d = f.dir.path();
    let specs = write_specs(d, "mine.yaml", &spec_text(&["two", "one"], 3));

    let compiled = d.join("compiled");
    generate(&options(&specs, &compiled, &f.cache), &|_| {}).unwrap();

    let from_bundle = d.join("from-bundle");
    let mut o = options(&specs, &from_bundle, &d.join("unused-cache"));
    o.bundle = Some(f.bundle.clone());
    let r = generate(&o, &|_| {}).expect("takes two instances from the bundle");
    assert_eq!((r.instances, r.compiled), (2, 0));
    assert_same_tree(&from_bundle, &compiled);
    let m =
        tilegen::Manifest::from_bytes(&std::fs::read(from_bundle.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(m.instances.len(), 2);
    assert!(m.instances.iter().all(|i| i.origin.file == "mine.yaml"));
    // --check agrees with what was written.
    o.check = true;
    generate(&o, &|_| {}).unwrap();
    // --filter narrows the specs' instances, as in a compile.
    let mut narrow = options(&specs, &d.join("narrow"), &d.join("unused-cache"));
    narrow.bundle = Some(f.bundle.clone());
    narrow.filter = Some("one_".into());
    assert_eq!(generate(&narrow, &|_| {}).unwrap().instances, 1);

    let built = d.join("builder");
    tilegen::Builder::new()
        .specs(&specs)
        .bundle(&f.bundle)
        .out_dir(&built)
        .emit_rerun_if_changed(false)
        .try_compile()
        .expect("Builder takes the subset too");
    assert_same_tree(&built, &compiled);
}

/// Instances the bundle lacks are all listed, the CLI exits 1 (as for any difference from
/// the bundle), and the library already in the folder is left as it was.
#[test]
fn instances_not_in_the_bundle_are_listed_and_nothing_is_written() {
    let f = fixture();
    let d = f.dir.path();
    let out = d.join("out");
    let mut o = options(&d.join("no-specs"), &out, &f.cache);
    o.bundle = Some(f.bundle.clone());
    generate(&o, &|_| {}).expect("the whole bundle");
    let before = tree(&out);

    let specs = write_specs(d, "more.yaml", &spec_text(&["one", "four", "five"], 0));
    let o = common::tilegen(
        &[
            "generate",
            "--bundle",
            f.bundle.to_str().unwrap(),
            "--specs",
            specs.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[("TILEGEN_CACHE_DIR", &f.cache)],
    );
    let msg = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{msg}");
    assert!(msg.contains("2 of their 3 instances"), "{msg}");
    for name in ["four_f32", "five_f32"] {
        assert!(
            msg.contains(&format!("{name}_b128_i1 (more.yaml:"))
                && msg.contains(": in the specs but not in the bundle"),
            "{name} not listed: {msg}"
        );
    }
    assert!(
        !msg.contains("one_f32"),
        "a found instance is not listed: {msg}"
    );
    assert_eq!(tree(&out), before, "the previous library is untouched");
}

/// Same name, other configuration (archs are not in the name): both config hashes named.
#[test]
fn a_config_hash_mismatch_names_both_hashes() {
    let f = fixture();
    let d = f.dir.path();
    let text = spec_text(&["two"], 0).replace("[sm_80]", "[sm_90]");
    let specs = write_specs(d, "other.yaml", &text);
    let (_, insts) = tilegen::__internal::spec::load_dir(&specs).unwrap();
    let ours = tilegen::__internal::render::config_hash(&insts[0]);
    let lib = tilegen::Manifest::from_bytes(&std::fs::read(f.lib.join("manifest.json")).unwrap())
        .unwrap();
    let theirs = &lib.instance(&insts[0].name).unwrap().config_sha256;
    assert_ne!(&ours, theirs);

    let out = d.join("out");
    let mut o = options(&specs, &out, &f.cache);
    o.bundle = Some(f.bundle.clone());
    let e = generate(&o, &|_| {}).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.exit_code(), 1, "{msg}");
    assert!(
        msg.contains(&format!(
            "config sha256 {ours} in the specs, {theirs} in the bundle"
        )),
        "{msg}"
    );
    assert!(
        msg.contains(r#"archs: specs ["sm_90"] vs bundle ["sm_80"]"#),
        "{msg}"
    );
    assert!(!out.exists(), "nothing written");
}
