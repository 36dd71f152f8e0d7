//! The row ops' ring options without a GPU: `rows_per_block` (rows each block of a staged
//! ring owns) and layernorm's `lean` ring path. Each is accepted where it applies, named only
//! when it is not the default (so existing instances keep their names, hashes and bytes),
//! reaches the launch rule or the kernel, and is refused elsewhere with the spec's
//! file:line:col. Libraries are rendered without NVRTC.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tilegen::{InstanceEntry, Manifest};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");

fn write_spec(dir: &Path, text: &str) -> PathBuf {
    let specs = dir.join("specs");
    fs::create_dir_all(&specs).unwrap();
    fs::write(specs.join("k.yaml"), text).unwrap();
    specs
}

/// The spec's library rendered and written without compiling: its manifest and folder.
fn render(dir: &Path, text: &str) -> (Manifest, PathBuf) {
    let specs = write_spec(dir, text);
    let out = dir.join("lib");
    let mut o = tilegen::Options::new(&specs, &out);
    o.compile = false;
    o.jobs = 1;
    o.cache_dir = Some(dir.join("cache"));
    tilegen::generate(&o, &|_| {}).expect("the spec renders");
    let m = Manifest::from_bytes(&fs::read(out.join("manifest.json")).unwrap()).unwrap();
    (m, out)
}

fn instance<'a>(m: &'a Manifest, name: &str) -> &'a InstanceEntry {
    m.instances
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", names(m)))
}

fn names(m: &Manifest) -> Vec<&str> {
    m.instances.iter().map(|i| i.name.as_str()).collect()
}

fn rows_per_block(i: &InstanceEntry) -> u32 {
    match i.launch.grid {
        tilegen::GridRule::Rows { rows_per_block, .. } => rows_per_block,
        ref g => panic!("{}: not a row grid: {g:?}", i.name),
    }
}

fn source(out: &Path, name: &str) -> String {
    fs::read_to_string(out.join(format!("kernels/{name}.cu"))).unwrap()
}

/// `tilegen check` on one spec: its exit code and stderr.
fn check(dir: &Path, text: &str) -> (Option<i32>, String) {
    let specs = write_spec(dir, text);
    let o = Command::new(BIN)
        .args(["check", "--specs", specs.to_str().unwrap()])
        .env("TILEGEN_CACHE_DIR", dir.join("cache"))
        .output()
        .expect("tilegen runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const RING: &str = "\
kernels:
  - name: layernorm
    op: layernorm
    dtype: bf16
    archs: [sm_90]
    variant: staged
    stages: 3
    block: 64
    items: 2
    rows_per_block: [1, 4, 8]
  - name: softmax
    op: softmax
    dtype: f16
    archs: [sm_90]
    variant: staged
    stages: 2
    block: 64
    items: 2
    rows_per_block: 2
";

#[test]
fn rows_per_block_sets_the_ring_grid_and_is_named_only_off_its_default() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, out) = render(tmp.path(), RING);
    let r1 = instance(&m, "layernorm_bf16_staged_s3_b64_i2_r1");
    let r4 = instance(&m, "layernorm_bf16_staged_s3_b64_i2_r4");
    // The default written out is the default: same name, nothing stored, and the same hash
    // and kernel as the spec without the field (what every existing instance is).
    let r8 = instance(&m, "layernorm_bf16_staged_s3_b64_i2");
    assert_eq!(r8.params.rows_per_block, None);
    let without = RING.replace("    rows_per_block: [1, 4, 8]\n", "");
    let (m0, out0) = render(&tmp.path().join("without"), &without);
    let r8_0 = instance(&m0, "layernorm_bf16_staged_s3_b64_i2");
    assert_eq!(r8.config_sha256, r8_0.config_sha256);
    assert_eq!(r8.launch, r8_0.launch);
    assert_eq!(
        source(&out, "layernorm_bf16_staged_s3_b64_i2"),
        source(&out0, "layernorm_bf16_staged_s3_b64_i2")
    );
    assert_eq!(r4.params.rows_per_block, Some(4));
    assert_eq!(
        [rows_per_block(r1), rows_per_block(r4), rows_per_block(r8)],
        [1, 4, 8]
    );
    let softmax = instance(&m, "softmax_f16_staged_s2_b64_i2_r2");
    assert_eq!(rows_per_block(softmax), 2);
    // One row per block hands rows out in order, so it warms L2 ahead as one-row blocks do;
    // blocks of several rows (far apart) do not.
    let warms = |name: &str| {
        let cu = source(&out, name);
        assert!(cu.contains("#define TG_L2_AHEAD_BYTES "), "{name}");
        !cu.contains("#define TG_L2_AHEAD_BYTES 0u")
    };
    assert!(warms("layernorm_bf16_staged_s3_b64_i2_r1"));
    assert!(!warms("layernorm_bf16_staged_s3_b64_i2_r4"));
    assert!(!warms("layernorm_bf16_staged_s3_b64_i2"));
    // The kernel itself strides over rows: only the launch (and the header) changes.
    let body = |name: &str| -> String {
        source(&out, name)
            .lines()
            .filter(|l| !l.starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace(name, "K")
    };
    assert_eq!(
        body("layernorm_bf16_staged_s3_b64_i2_r4"),
        body("layernorm_bf16_staged_s3_b64_i2")
    );
}

#[test]
fn rows_per_block_is_refused_off_a_ring_and_out_of_range() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = "\
kernels:
  - name: a
    op: layernorm
    dtype: bf16
    block: 64
    rows_per_block: 4
  - name: b
    op: rmsnorm
    dtype: bf16
    variant: staged
    rows_per_block: 2
  - name: c
    op: layernorm
    dtype: bf16
    variant: staged
    stages: 3
    rows_per_block: [0, 65]
  - name: d
    op: vector_add
    dtype: f32
    rows_per_block: 4
";
    let (code, e) = check(tmp.path(), spec);
    assert_eq!(code, Some(3), "{e}");
    for (at, msg) in [
        (
            "k.yaml:6:21: error: ",
            "rows_per_block is how many rows each block of a staged ring owns",
        ),
        (
            "k.yaml:11:21: error: ",
            "set `variant: staged` and `stages` 2 or more",
        ),
        (
            "k.yaml:17:22: error: ",
            "rows_per_block must be from 1 to 64, not 0",
        ),
        (
            "k.yaml:17:25: error: ",
            "rows_per_block must be from 1 to 64, not 65",
        ),
        (
            "k.yaml:21:5: error: ",
            "`rows_per_block` does not apply to op `vector_add`",
        ),
    ] {
        assert!(
            e.lines().any(|l| l.contains(at) && l.contains(msg)),
            "{at} {msg}: {e}"
        );
    }
    assert!(e.contains("5 errors in the specs"), "{e}");
}

#[test]
fn lean_renders_the_full_row_path_and_is_refused_off_a_layernorm_ring() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, out) = render(
        tmp.path(),
        "\
kernels:
  - name: layernorm
    op: layernorm
    dtype: [bf16, f16]
    archs: [sm_90]
    variant: staged
    stages: 2
    block: 64
    items: 2
    lean: [false, true]
",
    );
    assert_eq!(
        names(&m),
        [
            "layernorm_bf16_staged_s2_b64_i2",
            "layernorm_bf16_staged_s2_b64_i2_lean",
            "layernorm_f16_staged_s2_b64_i2",
            "layernorm_f16_staged_s2_b64_i2_lean"
        ]
    );
    // `lean: false` is the default and not stored; `true` is.
    assert_eq!(
        instance(&m, "layernorm_bf16_staged_s2_b64_i2").params.lean,
        None
    );
    assert_eq!(
        instance(&m, "layernorm_bf16_staged_s2_b64_i2_lean")
            .params
            .lean,
        Some(true)
    );
    let lean = source(&out, "layernorm_bf16_staged_s2_b64_i2_lean");
    let plain = source(&out, "layernorm_bf16_staged_s2_b64_i2");
    // The instance's parameter block turns the full-row path on; the path itself is plain
    // code that only a lean instance compiles in (`if constexpr`).
    assert!(lean.contains("#define TG_LEAN true"));
    assert!(plain.contains("#define TG_LEAN false"));
    for piece in [
        "if constexpr (LEAN) full = vec_ok && ncols == TG_THREADS * TG_ITEMS * TG_VEC;",
        "if constexpr (LEAN) tg_block_sum2_few<TG_THREADS>(s1, s2, scratch);",
        "tg_store16(yr + tg_col(j), t);",
    ] {
        assert!(lean.contains(piece), "{piece}");
    }

    let (code, e) = check(
        tmp.path(),
        "\
kernels:
  - name: a
    op: rmsnorm
    dtype: bf16
    variant: staged
    stages: 2
    lean: true
  - name: b
    op: layernorm
    dtype: bf16
    variant: staged
    lean: true
  - name: c
    op: layernorm
    dtype: bf16
    lean: yes
",
    );
    assert_eq!(code, Some(3), "{e}");
    for (at, msg) in [
        (
            "k.yaml:7:5: error: ",
            "`lean` does not apply to op `rmsnorm`",
        ),
        (
            "k.yaml:12:11: error: ",
            "lean trims the per-row work of a staged ring",
        ),
        ("k.yaml:16:11: error: ", "lean"),
    ] {
        assert!(
            e.lines().any(|l| l.contains(at) && l.contains(msg)),
            "{at} {msg}: {e}"
        );
    }
}
