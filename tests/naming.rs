//! Instance names are a function of each instance's own resolved values: writing a default
//! out renames nothing, a sweep that grows keeps the names it had, names stay unique inside
//! a sweep, and every default instance's name is the one the documented rule and defaults
//! give. Everything goes through `tilegen list` (no NVRTC, no compile).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::tilegen_command;
use serde_json::Value;
use tilegen::__internal::spec::Family;
use tilegen::Op;

/// The instances `tilegen list` makes of `specs` (a folder or one file), as JSON objects.
fn list(specs: &Path) -> Vec<Value> {
    let o = tilegen_command(&[
        "list",
        "--message-format",
        "json",
        "--specs",
        specs.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(
        o.status.success(),
        "tilegen list {}: {}{}",
        specs.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The instance names of one spec file's text, in expansion order.
fn names(yaml: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.yaml");
    std::fs::write(
        &path,
        format!("defaults:\n  archs: [sm_90]\nkernels:\n{yaml}"),
    )
    .unwrap();
    list(&path)
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect()
}

/// One kernel entry `- name: k` with `op` and these extra lines.
fn kernel(op: &str, lines: &[&str]) -> String {
    let mut s = format!("  - name: k\n    op: {op}\n");
    for l in lines {
        s += &format!("    {l}\n");
    }
    s
}

#[test]
fn writing_a_default_explicitly_does_not_rename() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        // A row op: variant, block, items, affine.
        (
            "layernorm",
            &["dtype: f16"],
            &[
                "dtype: f16",
                "variant: onepass",
                "block: 256",
                "items: 2",
                "affine: true",
            ],
        ),
        (
            "softmax",
            &["dtype: f32"],
            &["dtype: f32", "variant: onepass"],
        ),
        // A staged ring's depth.
        (
            "rmsnorm",
            &["dtype: bf16", "variant: staged"],
            &["dtype: bf16", "variant: staged", "stages: 1"],
        ),
        // Elementwise.
        (
            "fma",
            &["dtype: f32"],
            &["dtype: f32", "block: 256", "items: 4", "epilogue: []"],
        ),
        // A GEMM on tensor cores (stages 3), on the SIMT path (stages 2), and on wgmma.
        (
            "gemm",
            &["dtype: bf16"],
            &[
                "dtype: bf16",
                "tile: [128, 128, 32]",
                "warp: [64, 64]",
                "stages: 3",
                "layout: nn",
                "tf32: false",
                "engine: mma_sync",
                "out_dtype: bf16",
            ],
        ),
        (
            "gemm",
            &["dtype: f32", "tile: [128, 128, 8]", "warp: [64, 32]"],
            &[
                "dtype: f32",
                "tile: [128, 128, 8]",
                "warp: [64, 32]",
                "stages: 2",
            ],
        ),
        (
            "gemm",
            &["dtype: bf16", "engine: wgmma", "archs: [sm_90a]"],
            &[
                "dtype: bf16",
                "engine: wgmma",
                "archs: [sm_90a]",
                "tile: [128, 256, 64]",
                "stages: 3",
            ],
        ),
        (
            "attention",
            &["dtype: bf16", "head_dim: 128"],
            &[
                "dtype: bf16",
                "head_dim: 128",
                "causal: false",
                "tile_q: 128",
                "tile_kv: 32",
                "block: 128",
                "stages: 2",
            ],
        ),
    ];
    for (op, bare, explicit) in cases {
        let a = names(&kernel(op, bare));
        let b = names(&kernel(op, explicit));
        assert_eq!(a.len(), 1, "{op} {bare:?}: {a:?}");
        assert_eq!(a, b, "{op}: leaving defaults out vs writing them");
    }
    // The values written are the ones used: the staged default is a ring of one row.
    assert_eq!(
        names(&kernel("rmsnorm", &["dtype: bf16", "variant: staged"])),
        ["k_bf16_staged_s1_b256_i2"]
    );
    // A value that is not the default does rename.
    assert_ne!(
        names(&kernel("gemm", &["dtype: bf16"])),
        names(&kernel("gemm", &["dtype: bf16", "stages: 4"]))
    );
}

#[test]
fn a_growing_sweep_keeps_the_names_it_had() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("fma", &["dtype: f32"], &["dtype: [f32, bf16]"]),
        (
            "fma",
            &["dtype: f32", "items: 2"],
            &["dtype: f32", "items: [2, 8]"],
        ),
        (
            "fma",
            &["dtype: f32", "epilogue: [[]]"],
            &["dtype: f32", "epilogue: [[], [relu]]"],
        ),
        (
            "fma",
            &["dtype: f32", "epilogue: [bias, gelu]"],
            &["dtype: f32", "epilogue: [[bias, gelu], [relu], []]"],
        ),
        (
            "gemm",
            &["dtype: bf16", "layout: nn"],
            &["dtype: bf16", "layout: [nn, nt]"],
        ),
        (
            "gemm",
            &["dtype: bf16", "epilogue: [[]]"],
            &["dtype: bf16", "epilogue: [[], [bias, relu]]"],
        ),
        (
            "layernorm",
            &["dtype: f16", "variant: staged"],
            &[
                "dtype: f16",
                "variant: [staged, onepass]",
                "affine: [true, false]",
            ],
        ),
    ];
    for (op, small, grown) in cases {
        let before = names(&kernel(op, small));
        let after = names(&kernel(op, grown));
        assert!(!before.is_empty(), "{op} {small:?}");
        assert!(after.len() > before.len(), "{op} {grown:?}: {after:?}");
        for n in &before {
            assert!(
                after.contains(n),
                "{op}: `{n}` of {small:?} is gone from {grown:?}: {after:?}"
            );
        }
    }
}

#[test]
fn names_stay_unique_inside_a_sweep() {
    let got = names(&kernel(
        "fma",
        &[
            "dtype: [f32, bf16]",
            "items: [2, 4]",
            "epilogue: [[], [relu], [bias, relu]]",
        ],
    ));
    assert_eq!(got.len(), 12, "{got:?}");
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "{got:?}");
    assert!(got.contains(&"k_f32_b256_i2".to_string()), "{got:?}");
    assert!(got.contains(&"k_f32_b256_i2_relu".to_string()), "{got:?}");
    assert!(
        got.contains(&"k_bf16_b256_i4_bias_relu".to_string()),
        "{got:?}"
    );
}

/// The name the README's rule gives from an instance's listed values, with the README's
/// defaults for the values the listing leaves out (stated here again on purpose: this is
/// the check that the code and the documented table agree).
fn documented_name(kernel: &str, x: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap().to_string();
    let p = &x["params"];
    let int = |k: &str, d: u64| p[k].as_u64().unwrap_or(d);
    let dims = |k: &str, d: &[u64]| -> Vec<u64> {
        p[k].as_array()
            .map(|a| a.iter().map(|v| v.as_u64().unwrap()).collect())
            .unwrap_or_else(|| d.to_vec())
    };
    let (dtype, out) = (s(&x["dtype"]), s(&x["out_dtype"]));
    let mut n = format!("{kernel}_{dtype}");
    if out != dtype {
        n += &format!("_to_{out}");
    }
    // The rule is the op family's (every op of a family spells the same fields).
    let op = Op::parse(x["op"].as_str().unwrap()).expect("a listed op parses");
    match op.family() {
        Family::Elements => n += &format!("_b{}_i{}", int("block", 256), int("items", 4)),
        Family::Rows => {
            let v = p["variant"].as_str().unwrap_or("onepass");
            n += &format!("_{v}");
            if v == "staged" {
                n += &format!("_s{}", int("stages", 1));
            }
            n += &format!("_b{}_i{}", int("block", 256), int("items", 2));
            // A ring's rows per block: stored, and spelled, only when not the default.
            if let Some(r) = p["rows_per_block"].as_u64() {
                n += &format!("_r{r}");
            }
        }
        Family::Gemm => {
            let wgmma = p["engine"].as_str() == Some("wgmma");
            let tf32 = p["tf32"].as_bool() == Some(true);
            let t = dims(
                "tile",
                if wgmma {
                    &[128, 256, 64]
                } else {
                    &[128, 128, 32]
                },
            );
            n += &format!("_{}x{}x{}", t[0], t[1], t[2]);
            let stages = if wgmma {
                int("stages", if t[1] > 128 { 3 } else { 4 })
            } else {
                let w = dims("warp", &[64, 64]);
                n += &format!("_w{}x{}", w[0], w[1]);
                int("stages", if dtype != "f32" || tf32 { 3 } else { 2 })
            };
            n += &format!("_s{stages}_{}", p["layout"].as_str().unwrap_or("nn"));
            if tf32 {
                n += "_tf32";
            }
            if wgmma {
                n += "_wgmma";
            }
        }
        Family::Attention => {
            let d = int("head_dim", 0);
            let causal = p["causal"].as_bool() == Some(true);
            let wgmma = p["engine"].as_str() == Some("wgmma");
            let (q, kv) = match (wgmma, d, causal) {
                (true, 64, _) => (192, 128),
                (true, 128, _) => (128, 128),
                (true, _, _) => (128, 64),
                (false, 128, false) => (128, 32),
                (false, 128, true) => (64, 64),
                (false, _, _) => (128, 64),
            };
            let q = int("tile_q", q);
            // The Hopper kernel: one producer warpgroup and one consumer per 64 query rows.
            let threads = if wgmma { 128 * (1 + q / 64) } else { 128 };
            n += &format!(
                "_d{d}{}_q{q}x{}_s{}_b{}",
                if causal { "_causal" } else { "" },
                int("tile_kv", kv),
                int("stages", 2),
                int("block", threads)
            );
            if wgmma {
                n += "_wgmma";
            }
        }
    }
    if p["affine"].as_bool() == Some(false) {
        n += "_noaffine";
    }
    if p["lean"].as_bool() == Some(true) {
        n += "_lean";
    }
    if let Some(k) = p["split_k"].as_u64().filter(|&k| k != 1) {
        n += &format!("_split{k}");
    }
    if let Some(c) = p["multicast"].as_u64().filter(|&c| c != 1) {
        n += &format!("_mc{c}");
    }
    if p["pingpong"].as_bool() == Some(true) {
        n += "_pp";
    }
    for e in x["epilogue"].as_array().unwrap() {
        n += &format!("_{}", e.as_str().unwrap());
    }
    n
}

/// The `name:` of the kernel entry that starts at `origin` (`file:line`) in `specs`.
fn kernel_name(specs: &Path, origin: &str) -> String {
    let (file, line) = origin.rsplit_once(':').unwrap();
    let text = std::fs::read_to_string(specs.join(file)).unwrap();
    // The entry's lines: its first, then those up to the next entry.
    let mut lines = text.lines().skip(line.parse::<usize>().unwrap() - 1);
    let first = lines.next().unwrap();
    let rest = lines.take_while(|l| !l.trim_start().starts_with("- "));
    let l = std::iter::once(first)
        .chain(rest)
        .find(|l| l.trim_start().trim_start_matches("- ").starts_with("name:"))
        .unwrap_or_else(|| panic!("{origin}: no `name:` in the entry"));
    let after = l.split("name:").nth(1).unwrap();
    after.split('#').next().unwrap().trim().to_string()
}

#[test]
fn default_instance_names_follow_the_documented_rule() {
    let specs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("specs");
    let all = list(&specs);
    assert!(all.len() > 100, "{} instances", all.len());
    let mut seen = BTreeSet::new();
    let mut ops = BTreeSet::new();
    for x in &all {
        let name = x["name"].as_str().unwrap();
        let kernel = kernel_name(&specs, x["origin"].as_str().unwrap());
        assert_eq!(name, documented_name(&kernel, x), "{x}");
        assert!(seen.insert(name.to_string()), "`{name}` twice");
        ops.insert(x["op"].as_str().unwrap().to_string());
    }
    // Every op is covered (the default specs have each), so a default that changes in one
    // shows here.
    assert_eq!(ops.len(), Op::ALL.len(), "{ops:?}");
}

/// The instances `tilegen list` makes of one spec file's text (in a file of the same path, so
/// that two texts whose kernel starts on the same line have comparable origins).
fn instances(yaml: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.yaml");
    std::fs::write(
        &path,
        format!("defaults:\n  archs: [sm_90]\nkernels:\n{yaml}"),
    )
    .unwrap();
    list(&path)
}

#[test]
fn writing_a_default_explicitly_keeps_the_config_hash() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "layernorm",
            &["dtype: bf16"],
            &[
                "dtype: bf16",
                "variant: onepass",
                "block: 256",
                "items: 2",
                "affine: true",
            ],
        ),
        (
            "layernorm",
            &["dtype: bf16", "variant: staged"],
            &["dtype: bf16", "variant: staged", "stages: 1"],
        ),
        // A ring: its rows per block and `lean` at their defaults.
        (
            "layernorm",
            &["dtype: bf16", "variant: staged", "stages: 2"],
            &[
                "dtype: bf16",
                "variant: staged",
                "stages: 2",
                "rows_per_block: 8",
                "lean: false",
            ],
        ),
        (
            "softmax",
            &["dtype: f32"],
            &["dtype: f32", "variant: onepass"],
        ),
        (
            "fma",
            &["dtype: f32"],
            &["dtype: f32", "block: 256", "items: 4"],
        ),
        (
            "gemm",
            &["dtype: bf16"],
            &[
                "dtype: bf16",
                "tile: [128, 128, 32]",
                "warp: [64, 64]",
                "stages: 3",
                "layout: nn",
                "tf32: false",
                "engine: mma_sync",
                "out_dtype: bf16",
            ],
        ),
        // The SIMT path's default depth differs from the tensor cores'.
        (
            "gemm",
            &["dtype: f32", "tile: [128, 128, 8]", "warp: [64, 32]"],
            &[
                "dtype: f32",
                "tile: [128, 128, 8]",
                "warp: [64, 32]",
                "stages: 2",
            ],
        ),
        (
            "gemm",
            &["dtype: bf16", "engine: wgmma", "archs: [sm_90a]"],
            &[
                "dtype: bf16",
                "engine: wgmma",
                "archs: [sm_90a]",
                "tile: [128, 256, 64]",
                "stages: 3",
            ],
        ),
        (
            "attention",
            &["dtype: bf16", "head_dim: 128"],
            &[
                "dtype: bf16",
                "head_dim: 128",
                "causal: false",
                "tile_q: 128",
                "tile_kv: 32",
                "block: 128",
                "stages: 2",
                "engine: mma_sync",
            ],
        ),
    ];
    for (op, bare, explicit) in cases {
        let a = instances(&kernel(op, bare));
        let b = instances(&kernel(op, explicit));
        assert_eq!(a.len(), 1, "{op} {bare:?}: {a:?}");
        assert!(
            a[0]["config_sha256"]
                .as_str()
                .is_some_and(|h| h.len() == 64),
            "{}",
            a[0]
        );
        // The whole listing: name, stored params and config hash.
        assert_eq!(a, b, "{op}: leaving defaults out vs writing them");
    }
    // A default written inside a sweep is the same instance as one left out.
    let bare = instances(&kernel("gemm", &["dtype: bf16"]));
    let swept = instances(&kernel("gemm", &["dtype: bf16", "stages: [4, 3]"]));
    assert_eq!(swept.len(), 2, "{swept:?}");
    let (same, other): (Vec<&Value>, Vec<&Value>) =
        swept.iter().partition(|x| x["name"] == bare[0]["name"]);
    assert_eq!(same, [&bare[0]], "{swept:?}");
    // A value that is not the default is another configuration.
    assert_ne!(other[0]["config_sha256"], bare[0]["config_sha256"]);
    let staged = instances(&kernel(
        "rmsnorm",
        &[
            "dtype: bf16",
            "variant: staged",
            "stages: 2",
            "rows_per_block: 4",
        ],
    ));
    assert_ne!(
        staged[0]["config_sha256"],
        instances(&kernel(
            "rmsnorm",
            &["dtype: bf16", "variant: staged", "stages: 2"]
        ))[0]["config_sha256"]
    );
}
