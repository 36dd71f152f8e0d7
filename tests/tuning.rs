//! Tuning tables as `generate` reads them (no GPU, no NVRTC: the library is generated without
//! compiling): stale entries dropped with a warning, bad tables refused with their position
//! and nothing written, device names escaped into the bindings, and a bundle's tables held to
//! its instances. The dispatch the tables produce is exercised in `tests/golden.rs`
//! (`tuned_dispatch_by_device_and_shape`) and `tests/bindings.rs`.

use std::path::Path;
use std::sync::Mutex;

use tilegen::Manifest;
use tilegen::{DeviceKey, TuningEntry, TuningTable};
use tilegen::{Event, Options};

const SPEC: &str = "\
kernels:
  - name: softmax
    op: softmax
    dtype: f32
    archs: [sm_90]
    block: [128, 512]
    items: 2
";

/// Generates `dir/out` from `dir/specs` without compiling; returns the warnings.
fn generate(dir: &Path) -> tilegen::Result<Vec<String>> {
    let mut opts = Options::new(dir.join("specs"), dir.join("out"));
    opts.compile = false;
    opts.cache_dir = Some(dir.join("cache"));
    let warnings = Mutex::new(Vec::new());
    tilegen::generate(&opts, &|e| {
        if let Event::TuningDropped { message } = e {
            warnings.lock().unwrap().push(message.clone());
        }
    })?;
    Ok(warnings.into_inner().unwrap())
}

fn manifest(dir: &Path) -> Manifest {
    Manifest::from_bytes(&std::fs::read(dir.join("out/manifest.json")).unwrap()).unwrap()
}

fn setup() -> (tempfile::TempDir, Manifest) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/softmax.yaml"), SPEC).unwrap();
    generate(dir.path()).unwrap();
    let m = manifest(dir.path());
    assert_eq!(m.instances.len(), 2);
    (dir, m)
}

fn entry(m: &Manifest, instance: &str, shape: &[u64]) -> TuningEntry {
    let inst = m.instance(instance).unwrap();
    TuningEntry {
        method: "softmax_f32".into(),
        shape: shape.to_vec(),
        instance: instance.into(),
        config_sha256: inst.config_sha256.clone(),
        median_us: 70.0,
        runner_up: None,
        runner_up_us: None,
        rule: instance.into(),
        rule_us: 70.0,
    }
}

fn table(name: &str, entries: Vec<TuningEntry>) -> TuningTable {
    TuningTable {
        format: tilegen::__internal::tuning::FORMAT,
        device: DeviceKey {
            name: name.into(),
            compute_capability: [9, 0],
            sm_count: 132,
            driver: "13.0".into(),
        },
        tilegen_version: "0.1.0".into(),
        nvrtc_version: "13.0.88".into(),
        entries,
    }
}

/// [`setup`]'s library generated again with one good entry in `tuning/h200.json`.
fn tuned_library() -> (tempfile::TempDir, Manifest) {
    let (dir, m) = setup();
    write_table(
        dir.path(),
        "h200.json",
        &table(
            "NVIDIA H200",
            vec![entry(&m, "softmax_f32_onepass_b512_i2", &[32768, 1000])],
        ),
    );
    generate(dir.path()).unwrap();
    (dir, m)
}

fn write_table(dir: &Path, file: &str, t: &TuningTable) {
    std::fs::create_dir_all(dir.join("tuning")).unwrap();
    std::fs::write(
        dir.join("tuning").join(file),
        serde_json::to_vec_pretty(t).unwrap(),
    )
    .unwrap();
}

#[test]
fn entries_that_no_longer_match_are_dropped_with_a_warning() {
    let (dir, m) = setup();
    let good = entry(&m, "softmax_f32_onepass_b512_i2", &[32768, 1000]);
    let mut changed = entry(&m, "softmax_f32_onepass_b128_i2", &[65536, 500]);
    changed.config_sha256 = "ab".repeat(32);
    let mut gone = entry(&m, "softmax_f32_onepass_b128_i2", &[4096, 100]);
    gone.instance = "softmax_f32_onepass_b1024_i2".into();
    let mut other_method = entry(&m, "softmax_f32_onepass_b128_i2", &[4096, 200]);
    other_method.method = "layernorm_f32".into();
    write_table(
        dir.path(),
        "h200.json",
        &table(
            "NVIDIA H200",
            vec![good.clone(), changed, gone, other_method],
        ),
    );
    let warnings = generate(dir.path()).unwrap();
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(
        warnings[0].contains("has changed since it was measured"),
        "{}",
        warnings[0]
    );
    assert!(warnings[1].contains("not a member"), "{}", warnings[1]);
    assert!(
        warnings[2].contains("not in the library"),
        "{}",
        warnings[2]
    );
    let m = manifest(dir.path());
    assert_eq!(m.tuning.len(), 1);
    assert_eq!(m.tuning[0].entries, vec![good]);
    let bindings = std::fs::read_to_string(dir.path().join("out/bindings.rs")).unwrap();
    assert!(
        bindings.contains("shape: &[32768, 1000]"),
        "the entry is baked in"
    );
    // A table whose every entry is stale leaves no table and no dispatch code.
    let mut stale = entry(&m, "softmax_f32_onepass_b512_i2", &[32768, 1000]);
    stale.config_sha256 = "cd".repeat(32);
    write_table(dir.path(), "h200.json", &table("NVIDIA H200", vec![stale]));
    assert_eq!(generate(dir.path()).unwrap().len(), 1);
    assert!(manifest(dir.path()).tuning.is_empty());
    let bindings = std::fs::read_to_string(dir.path().join("out/bindings.rs")).unwrap();
    assert!(!bindings.contains("TUNED"));
}

/// A table keys its entries by the instance's configuration, not by where the specs write
/// it: a comment above the kernel moves its line (the headers and manifest say so) and keeps
/// the measurements, while a changed configuration still drops them.
#[test]
fn moving_a_kernel_within_the_specs_keeps_its_entries() {
    let (dir, m) = tuned_library();
    assert_eq!(manifest(dir.path()).tuning.len(), 1);
    let spec = dir.path().join("specs/softmax.yaml");
    std::fs::write(&spec, format!("# rows of attention scores\n\n{SPEC}")).unwrap();
    let warnings = generate(dir.path()).unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    let moved = manifest(dir.path());
    let before = m.instance("softmax_f32_onepass_b512_i2").unwrap();
    let after = moved.instance("softmax_f32_onepass_b512_i2").unwrap();
    assert_eq!(after.origin.line, before.origin.line + 2);
    assert_eq!(after.config_sha256, before.config_sha256);
    assert_eq!(moved.tuning.len(), 1, "the entry survives the move");
    assert_eq!(moved.tuning[0].entries.len(), 1);

    std::fs::write(&spec, SPEC.replace("[sm_90]", "[sm_80, sm_90]")).unwrap();
    let warnings = generate(dir.path()).unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("has changed since it was measured"),
        "{}",
        warnings[0]
    );
    assert!(manifest(dir.path()).tuning.is_empty());
}

/// A filter or a smaller spec set leaves most of a table's methods out: one line counts those
/// entries instead of one line each, while a few stale entries keep theirs.
#[test]
fn many_entries_dropped_for_one_reason_make_one_warning() {
    let (dir, m) = setup();
    let mut entries = vec![entry(&m, "softmax_f32_onepass_b512_i2", &[32768, 1000])];
    for (i, method) in ["layernorm_f32", "rmsnorm_f32", "gemm_nn_bf16"]
        .iter()
        .enumerate()
    {
        for rows in 1..=5u64 {
            let mut e = entry(
                &m,
                "softmax_f32_onepass_b128_i2",
                &[rows * 1024, 100 + i as u64],
            );
            e.method = method.to_string();
            entries.push(e);
        }
    }
    let mut changed = entry(&m, "softmax_f32_onepass_b128_i2", &[65536, 500]);
    changed.config_sha256 = "ab".repeat(32);
    entries.push(changed);
    write_table(dir.path(), "h200.json", &table("NVIDIA H200", entries));
    let warnings = generate(dir.path()).unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].contains("has changed since it was measured"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1]
            .contains("NVIDIA H200: 15 entries dropped: their methods are not in the library")
            && warnings[1].contains("(gemm_nn_bf16, layernorm_f32, rmsnorm_f32)"),
        "{}",
        warnings[1]
    );
    assert_eq!(manifest(dir.path()).tuning[0].entries.len(), 1);
}

#[test]
fn a_bad_table_is_refused_with_its_position_and_nothing_is_written() {
    let (dir, m) = tuned_library();
    let before = std::fs::read(dir.path().join("out/manifest.json")).unwrap();
    let path = dir.path().join("tuning/h200.json");
    let text = std::fs::read_to_string(&path).unwrap();
    // Not JSON at line 3.
    std::fs::write(&path, text.replacen("\"device\"", "device", 1)).unwrap();
    let e = generate(dir.path()).unwrap_err().to_string();
    assert!(e.contains("h200.json:3:"), "{e}");
    // JSON, but not sound: a control character in the name, a zero size, a bad hash.
    let mut bad = table(
        "NVIDIA\u{7}H200",
        vec![entry(&m, "softmax_f32_onepass_b512_i2", &[0, 1000])],
    );
    bad.entries[0].config_sha256 = "not hex".into();
    write_table(dir.path(), "h200.json", &bad);
    let e = generate(dir.path()).unwrap_err().to_string();
    for what in [
        "device name",
        "shape [0, 1000]",
        "`config_sha256` is not a sha256",
    ] {
        assert!(e.contains(what), "{what}: {e}");
    }
    // A field this tilegen does not know is refused rather than ignored.
    std::fs::write(
        &path,
        text.replacen("\"format\"", "\"extra\": 1, \"format\"", 1),
    )
    .unwrap();
    assert!(generate(dir.path())
        .unwrap_err()
        .to_string()
        .contains("unknown field"));
    assert_eq!(
        std::fs::read(dir.path().join("out/manifest.json")).unwrap(),
        before
    );
}

/// The bindings generated with one table, measured on a device of this name.
fn bindings_for_device(name: &str) -> String {
    let (dir, m) = setup();
    write_table(
        dir.path(),
        "odd.json",
        &table(
            name,
            vec![entry(&m, "softmax_f32_onepass_b512_i2", &[32768, 1000])],
        ),
    );
    generate(dir.path()).unwrap();
    std::fs::read_to_string(dir.path().join("out/bindings.rs")).unwrap()
}

#[test]
fn device_names_reach_the_bindings_as_escaped_literals() {
    let bindings = bindings_for_device("GPU \"x\" \\ }; fn evil() {} //");
    assert!(
        bindings.contains(r#"device: "GPU \"x\" \\ }; fn evil() {} //","#),
        "{bindings}"
    );
    assert!(!bindings.contains("fn evil() {}\n"));
}

#[test]
fn two_tables_give_one_order_whatever_their_file_names() {
    let (dir, m) = setup();
    let a = table(
        "NVIDIA A100",
        vec![entry(&m, "softmax_f32_onepass_b128_i2", &[32768, 1000])],
    );
    let h = table(
        "NVIDIA H200",
        vec![entry(&m, "softmax_f32_onepass_b512_i2", &[32768, 1000])],
    );
    write_table(dir.path(), "1.json", &h);
    write_table(dir.path(), "2.json", &a);
    generate(dir.path()).unwrap();
    let first = std::fs::read(dir.path().join("out/bindings.rs")).unwrap();
    std::fs::remove_dir_all(dir.path().join("tuning")).unwrap();
    write_table(dir.path(), "1.json", &a);
    write_table(dir.path(), "2.json", &h);
    generate(dir.path()).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("out/bindings.rs")).unwrap(),
        first
    );
    let names: Vec<String> = manifest(dir.path())
        .tuning
        .iter()
        .map(|t| t.device.name.clone())
        .collect();
    assert_eq!(names, ["NVIDIA A100", "NVIDIA H200"]);
}

/// A bundle's manifest is untrusted: its tables must name members of its methods with the
/// hashes they have, as `generate` left them.
#[test]
fn a_manifest_with_foreign_tuning_entries_is_refused() {
    let (dir, _) = tuned_library();
    let sound = manifest(dir.path());
    assert_eq!(
        tilegen::__internal::tuning::manifest_problems(&sound),
        Vec::<String>::new()
    );
    let mut m = sound.clone();
    m.tuning[0].entries[0].instance = "softmax_f32_onepass_b1024_i2".into();
    assert!(tilegen::__internal::tuning::manifest_problems(&m)[0].contains("not a member"));
    let mut m = sound.clone();
    m.tuning[0].entries[0].config_sha256 = "00".repeat(32);
    assert!(tilegen::__internal::tuning::manifest_problems(&m)[0].contains("has changed"));
    let mut m = sound.clone();
    m.tuning[0].device.name = "x".repeat(200);
    assert!(tilegen::__internal::tuning::manifest_problems(&m)[0].contains("device name"));
    // Fields a table's own checks refuse are not matched against the library (where a
    // multi-byte hash once split a character and panicked); the table's problems are named.
    for bad in ["a\u{e9}".to_string() + &"\u{e9}".repeat(6), "A".repeat(64)] {
        let mut m = sound.clone();
        m.tuning[0].entries[0].config_sha256 = bad;
        let p = tilegen::__internal::tuning::manifest_problems(&m);
        assert!(p.len() == 1 && p[0].contains("is not a sha256"), "{p:?}");
    }
    let mut m = sound.clone();
    m.tuning[0].entries[0].median_us = -0.0;
    m.tuning[0].device.sm_count = 0;
    let p = tilegen::__internal::tuning::manifest_problems(&m);
    assert!(
        p.iter().any(|p| p.contains("not negative")) && p.iter().any(|p| p.contains("sm_count")),
        "{p:?}"
    );
    // A method repeated at one shape is named escaped: it cannot forge a line of output.
    let mut m = sound;
    let mut twice = m.tuning[0].entries[0].clone();
    twice.method = "x\n\u{1b}[31mFAKE".into();
    m.tuning[0].entries = vec![twice.clone(), twice];
    let p = tilegen::__internal::tuning::manifest_problems(&m).join("\n");
    assert!(p.contains("appears twice") && !p.contains('\u{1b}'), "{p}");
}

/// A device name is plain text in the bindings' documentation: Markdown and HTML in it are
/// escaped, and characters that show nothing are written as escapes.
#[test]
fn device_names_reach_the_docs_as_plain_text() {
    let bindings =
        bindings_for_device("<img src=x onerror=alert(1)> `code` [link](x) H200\u{e0068}\u{ad}");
    let doc = bindings
        .lines()
        .find(|l| l.contains("a tuning table measured on"))
        .expect("the dispatch docs name the device");
    assert!(
        doc.contains(
            r"&#60;img src=x onerror=alert(1)&#62; &#96;code&#96; &#91;link&#93;(x) H200\u{e0068}\u{ad}"
        ),
        "{doc}"
    );
}

/// `tuning: candidates` marks instances that only measurements justify: generated as usual
/// (so `tune` can time them), left out by `--prune-by-tuning` unless a table names them.
#[test]
fn pruning_keeps_rule_instances_and_winning_candidates_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("specs")).unwrap();
    let spec = format!(
        "{SPEC}  - name: softmax\n    op: softmax\n    dtype: f32\n    archs: [sm_90]\n    block: [64, 256]\n    items: 4\n    tuning: candidates\n"
    );
    std::fs::write(dir.path().join("specs/softmax.yaml"), &spec).unwrap();
    generate(dir.path()).unwrap();
    let all = manifest(dir.path());
    assert_eq!(all.instances.len(), 4);
    let winner = "softmax_f32_onepass_b256_i4";
    write_table(
        dir.path(),
        "h200.json",
        &table("NVIDIA H200", vec![entry(&all, winner, &[32768, 4000])]),
    );
    let mut opts = Options::new(dir.path().join("specs"), dir.path().join("out"));
    opts.compile = false;
    opts.cache_dir = Some(dir.path().join("cache"));
    opts.prune_by_tuning = true;
    tilegen::generate(&opts, &|_| {}).unwrap();
    let names: Vec<String> = manifest(dir.path())
        .instances
        .iter()
        .map(|i| i.name.clone())
        .collect();
    assert_eq!(
        names,
        [
            "softmax_f32_onepass_b128_i2",
            "softmax_f32_onepass_b256_i4",
            "softmax_f32_onepass_b512_i2"
        ]
    );
    // The kept instances are the same instances as before: same hashes.
    for i in &manifest(dir.path()).instances {
        assert_eq!(
            all.instance(&i.name).unwrap().config_sha256,
            i.config_sha256
        );
    }
    // A value other than `candidates` is a spec error at its position.
    std::fs::write(
        dir.path().join("specs/softmax.yaml"),
        spec.replace("tuning: candidates", "tuning: maybe"),
    )
    .unwrap();
    let e = generate(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("softmax.yaml:14:") && e.contains("`tuning` takes `candidates`"),
        "{e}"
    );
}

/// `tuning: table_only` (GEMM): candidates that the bindings' fixed rules skip too, so that
/// only a tuning table dispatches to them; the manifest says so for hosts in other languages.
#[test]
fn table_only_gemm_instances_are_left_to_the_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("specs")).unwrap();
    let gemm = |tile: &str, stages: u32, extra: &str| {
        format!(
            "  - name: hg\n    op: gemm\n    engine: wgmma\n    archs: [sm_90a]\n    dtype: bf16\n    \
             tile: {tile}\n    stages: {stages}\n{extra}"
        )
    };
    let spec = format!(
        "kernels:\n{}{}",
        gemm("[128, 256, 64]", 3, ""),
        gemm("[128, 192, 64]", 4, "    tuning: table_only\n")
    );
    std::fs::write(dir.path().join("specs/hg.yaml"), &spec).unwrap();
    generate(dir.path()).unwrap();
    let m = manifest(dir.path());
    let marks: Vec<(&str, bool)> = m
        .instances
        .iter()
        .map(|i| (i.name.as_str(), i.table_only))
        .collect();
    assert_eq!(
        marks,
        [
            ("hg_bf16_128x192x64_s4_nn_wgmma", true),
            ("hg_bf16_128x256x64_s3_nn_wgmma", false)
        ]
    );
    // In the manifest only where set, and not part of the instance's configuration.
    let json = std::fs::read_to_string(dir.path().join("out/manifest.json")).unwrap();
    assert_eq!(json.matches("\"table_only\": true").count(), 1, "{json}");
    assert!(!json.contains("\"table_only\": false"));
    let alone = dir.path().join("alone");
    std::fs::create_dir_all(alone.join("specs")).unwrap();
    std::fs::write(
        alone.join("specs/hg.yaml"),
        spec.replace("    tuning: table_only\n", ""),
    )
    .unwrap();
    generate(&alone).unwrap();
    let hash = |m: &Manifest| {
        m.instance("hg_bf16_128x192x64_s4_nn_wgmma")
            .unwrap()
            .config_sha256
            .clone()
    };
    assert_eq!(hash(&manifest(&alone)), hash(&m));
    // The rules' options list the table-only member as one that does not run; the table's
    // arms (none here) and the member's own method are untouched.
    let bindings = std::fs::read_to_string(dir.path().join("out/bindings.rs")).unwrap();
    assert_eq!(bindings.matches("runs: false").count(), 1, "{bindings}");
    assert!(
        bindings.contains("s4_nn_wgmma`]: tile 128x192x64") && bindings.contains("; table-only")
    );
    assert!(bindings.contains("rules pass over the table-only members"));
    // Pruned like a candidate: without a table naming it, a pruned library leaves it out.
    // (A tuning folder that holds no table: with none at all, pruning is refused.)
    let mut opts = Options::new(dir.path().join("specs"), dir.path().join("pruned"));
    opts.compile = false;
    opts.cache_dir = Some(dir.path().join("cache"));
    opts.prune_by_tuning = true;
    assert!(tilegen::generate(&opts, &|_| {}).is_err());
    std::fs::create_dir_all(dir.path().join("no-tables")).unwrap();
    opts.tuning = Some(dir.path().join("no-tables"));
    tilegen::generate(&opts, &|_| {}).unwrap();
    let pruned =
        Manifest::from_bytes(&std::fs::read(dir.path().join("pruned/manifest.json")).unwrap())
            .unwrap();
    let names: Vec<&str> = pruned.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["hg_bf16_128x256x64_s3_nn_wgmma"]);
    // Only GEMM dispatch has the mode: elsewhere it is a spec error at its position.
    std::fs::write(
        dir.path().join("specs/hg.yaml"),
        format!("{SPEC}    tuning: table_only\n"),
    )
    .unwrap();
    let e = generate(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("hg.yaml:8:") && e.contains("is for GEMM kernels"),
        "{e}"
    );
    // A manifest (a bundle's, say) that marks another op's instance is refused for it alone.
    let (_softmax, mut m) = setup();
    assert!(m.problems().is_empty());
    m.instances[0].table_only = true;
    let problems = m.problems();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("table_only") && problems[0].contains("op `softmax`"),
        "{problems:?}"
    );
}
