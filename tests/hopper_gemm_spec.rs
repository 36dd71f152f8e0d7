//! The GEMM's `engine: wgmma` (sm_90a): what a spec may ask of it, what one instance's library
//! entry says, and the ptxas guard that fails a generate whose sm_90a kernel spills. Every spec
//! is written here; the instances that compile are single small ones.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// One kernel entry (a GEMM unless `op` is among them) with the given lines (`key: value`).
fn spec(tmp: &Path, extra: &[&str]) -> String {
    let mut y = String::from("kernels:\n  - name: hg\n");
    if !extra.iter().any(|l| l.starts_with("op:")) {
        y += "    op: gemm\n";
    }
    for line in extra {
        y += &format!("    {line}\n");
    }
    let path = tmp.join("hg.yaml");
    fs::write(&path, y).unwrap();
    s(&path).to_string()
}

/// `tilegen check` on the spec: its exit code and stderr.
fn check(tmp: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let specs = spec(tmp, extra);
    let o = tilegen(&["check", "--specs", &specs], tmp);
    (o.status.code(), stderr(&o))
}

#[test]
fn wgmma_spec_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let bad = |extra: &[&str], needles: &[&str]| {
        let (code, err) = check(t, extra);
        assert_eq!(code, Some(3), "{extra:?}: want a spec error, got:\n{err}");
        for n in needles {
            assert!(err.contains(n), "{extra:?}: {n:?} not in:\n{err}");
        }
    };
    // Only sm_90a: given other archs, or none (the defaults are sm_80 and sm_90).
    bad(
        &["dtype: bf16", "engine: wgmma", "archs: [sm_80]"],
        &["hg.yaml:", "engine wgmma", "only sm_90a", "archs: [sm_90a]"],
    );
    bad(
        &["dtype: bf16", "engine: wgmma"],
        &["not sm_80", "not sm_90"],
    );
    bad(
        &["dtype: bf16", "engine: wgmma", "archs: [sm_90a, sm_90]"],
        &["not sm_90"],
    );
    // Inputs, tiles, warp tiles and epilogues it cannot run.
    let w = ["engine: wgmma", "archs: [sm_90a]"];
    let with = |more: &[&'static str]| -> Vec<&'static str> {
        w.iter().copied().chain(more.iter().copied()).collect()
    };
    bad(&with(&["dtype: f32"]), &["f16 or bf16 inputs, not f32"]);
    bad(
        &with(&["dtype: bf16", "tile: [128, 256, 32]"]),
        &["tile [m, n, 64]", "not [128, 256, 32]"],
    );
    // Swap-AB tiles (m 16 or 32) are one or two consumers wide and read A row-major.
    bad(
        &with(&["dtype: bf16", "tile: [16, 192, 64]"]),
        &["m 16 or 32", "n 64 or 128", "not [16, 192, 64]"],
    );
    bad(
        &with(&["dtype: bf16", "tile: [16, 128, 64]", "layout: tn"]),
        &["hg.yaml:", "swap-AB", "layout nn or nt, not tn"],
    );
    bad(
        &with(&["dtype: bf16", "tile: [512, 128, 64]"]),
        &["m one of 64, 128, 256", "not [512, 128, 64]"],
    );
    // Rows below one consumer's 64 (other than swap-AB's 16 and 32) are a spec error, not a
    // panic in the checks that follow (they divide by the tile's count of consumers).
    for tile in [
        "tile: [0, 0, 0]",
        "tile: [8, 256, 64]",
        "tile: [48, 128, 64]",
    ] {
        bad(
            &with(&["dtype: bf16", tile]),
            &["hg.yaml:", "engine wgmma takes tile"],
        );
        bad(
            &with(&["dtype: bf16", tile, "epilogue: [bias, gelu_erf]"]),
            &["engine wgmma takes tile"],
        );
    }
    bad(
        &with(&["dtype: bf16", "warp: [64, 64]"]),
        &["`warp` does not apply to engine wgmma"],
    );
    bad(
        &with(&["dtype: f16", "epilogue: [bias, gelu_erf]"]),
        &[
            "gelu_erf on engine wgmma takes at most 32 accumulators",
            "holds 128",
        ],
    );
    // These passed the checks once and then spilled in ptxas (no bias, 16-bit output).
    for tile in [
        "tile: [64, 128, 64]",
        "tile: [128, 96, 64]",
        "tile: [128, 128, 64]",
    ] {
        bad(
            &with(&["dtype: bf16", tile, "epilogue: [gelu_erf]"]),
            &["gelu_erf on engine wgmma takes at most 32 accumulators"],
        );
    }
    // A swap-AB tile's rows are wgmma's n: split K is not on its path.
    bad(
        &with(&["dtype: f16", "tile: [16, 64, 64]", "split_k: 2"]),
        &["hg.yaml:", "swap-AB", "takes no split_k"],
    );
    // Ping-pong: one consumer holds a whole tile (at most 128 accumulators a thread), never
    // beside a swap, a split or a multicast; the mma.sync engine has no consumers to alternate.
    bad(
        &with(&["dtype: bf16", "pingpong: true"]),
        &[
            "with pingpong",
            "at most 64 × 256 or 128 × 128",
            "not 128 × 256",
        ],
    );
    bad(
        &with(&["dtype: bf16", "tile: [16, 64, 64]", "pingpong: true"]),
        &["pingpong", "not with a swap-AB tile"],
    );
    bad(
        &with(&[
            "dtype: bf16",
            "tile: [128, 128, 64]",
            "split_k: 2",
            "pingpong: true",
        ]),
        &["not with a swap-AB tile (m 16 or 32), split_k or multicast"],
    );
    bad(
        &with(&[
            "dtype: f16",
            "tile: [128, 128, 64]",
            "pingpong: true",
            "epilogue: [bias, gelu_erf]",
        ]),
        &[
            "gelu_erf on engine wgmma takes at most 32 accumulators",
            "holds 128",
        ],
    );
    // 256-row tiles: two slices a consumer, so n 128 at most, and no split or multicast.
    bad(
        &with(&["dtype: bf16", "tile: [256, 256, 64]"]),
        &["tile m 256 gives each consumer warpgroup 2 slices of 64 rows: tile n 128"],
    );
    bad(
        &with(&["dtype: bf16", "tile: [256, 128, 64]", "multicast: 2"]),
        &["tile m 256 takes no split_k or multicast"],
    );
    bad(
        &["dtype: bf16", "archs: [sm_80]", "pingpong: true"],
        &["pingpong needs engine wgmma"],
    );
    bad(
        &with(&["dtype: bf16", "stages: 5"]),
        &["shared memory per block, over sm_90a's limit"],
    );
    bad(
        &["dtype: bf16", "engine: tcgen05", "archs: [sm_90a]"],
        &["unknown engine `tcgen05` (expected one of: mma_sync, wgmma)"],
    );
    bad(
        &["op: softmax", "dtype: bf16", "engine: wgmma"],
        &["`engine` does not apply to op `softmax`"],
    );
    // The same spec is fine on sm_90a, and 64-wide and swap-AB tiles take gelu_erf.
    let (code, err) = check(t, &with(&["dtype: bf16", "out_dtype: f32", "layout: tt"]));
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = check(
        t,
        &with(&[
            "dtype: f16",
            "tile: [128, 64, 64]",
            "epilogue: [scale, bias, residual, gelu_erf]",
        ]),
    );
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = check(
        t,
        &with(&[
            "dtype: bf16",
            "tile: [[64, 64, 64], [32, 128, 64]]",
            "epilogue: [bias, gelu_erf]",
        ]),
    );
    assert_eq!(code, Some(0), "{err}");
}

/// Naming the default engine changes nothing: the same instance name, config and hash as
/// leaving it out (so every existing instance keeps its name, hash and files).
#[test]
fn default_engine_is_not_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let entry = |extra: &[&str], out: &str| -> serde_json::Value {
        let specs = spec(t, extra);
        let out = t.join(out);
        let mut o = tilegen::Options::new(&specs, &out);
        o.compile = false;
        o.jobs = 1;
        o.cache_dir = Some(t.join("cache"));
        tilegen::generate(&o, &|_| {}).expect("generate without compiling");
        let m: serde_json::Value =
            serde_json::from_slice(&fs::read(out.join("manifest.json")).unwrap()).unwrap();
        m["instances"][0].clone()
    };
    let base = ["dtype: bf16", "archs: [sm_80]", "tile: [128, 128, 32]"];
    let plain = entry(&base, "a");
    let named: Vec<&str> = base.iter().copied().chain(["engine: mma_sync"]).collect();
    let named = entry(&named, "b");
    assert_eq!(plain, named);
    assert!(plain["params"].get("engine").is_none(), "{plain}");
    assert!(plain.get("tensor_maps").is_none(), "{plain}");
    assert_eq!(plain["launch"]["grid"]["rule"], "tiles");
}

/// One small sm_90a instance compiles, passes the ptxas guard, and its manifest entry says how
/// to launch it: the tensor maps (with the residual's C), the persistent grid, 384 threads.
#[test]
fn tiny_wgmma_instance_generates_with_tensor_maps() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let specs = spec(
        t,
        &[
            "dtype: bf16",
            "engine: wgmma",
            "archs: [sm_90a]",
            "tile: [128, 64, 64]",
            "layout: tn",
            "epilogue: [bias, residual]",
        ],
    );
    let out = t.join("lib");
    let o = tilegen(&["generate", "--specs", &specs, "--out", s(&out)], t);
    assert!(o.status.success(), "{}", stderr(&o));
    let m: serde_json::Value =
        serde_json::from_slice(&fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let e = &m["instances"][0];
    assert_eq!(e["name"], "hg_bf16_128x64x64_s4_tn_wgmma_bias_residual");
    assert_eq!(e["params"]["engine"], "wgmma");
    assert_eq!(
        e["launch"]["grid"],
        serde_json::json!({"rule": "persistent", "tile_m": 128, "tile_n": 64, "ctas_per_sm": 1})
    );
    assert_eq!(e["launch"]["threads"], 384);
    let maps = e["tensor_maps"].as_array().expect("tensor_maps");
    let names: Vec<&str> = maps.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a_map", "b_map", "c_map", "d_map"]);
    // tn: A stored K x M (m contiguous), B K x N (n contiguous).
    assert_eq!(
        maps[0],
        serde_json::json!({"name": "a_map", "tensor": "a", "dtype": "bf16", "dims": ["m", "k"],
            "strides": ["lda"], "box": [64, 64], "swizzle": "128b", "interleave": "none",
            "l2_promotion": "256b", "l2_promotion_straddling": "128b", "oob_fill": "zero"})
    );
    assert_eq!(maps[1]["dims"], serde_json::json!(["n", "k"]));
    assert_eq!(maps[2]["strides"], serde_json::json!(["ldc"]));
    assert_eq!(maps[3]["tensor"], "d");
    // Same arguments as the mma.sync GEMM.
    let args: Vec<&str> = e["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        ["a", "b", "bias", "c", "d", "m", "n", "k", "lda", "ldb", "ldc", "ldd"]
    );
    let target = &e["targets"][0];
    assert_eq!(target["arch"], "sm_90a");
    assert!(target["resources"]["registers"].as_u64().unwrap() > 0);
    assert_eq!(target["resources"]["spill_store_bytes"], 0);
    assert_eq!(target["resources"]["stack_bytes"], 0);
    let src =
        fs::read_to_string(out.join("kernels/hg_bf16_128x64x64_s4_tn_wgmma_bias_residual.cu"))
            .unwrap();
    for needle in [
        "const __grid_constant__ TgTensorMap a_map",
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
        "setmaxnreg.inc.sync.aligned.u32 232",
        "cp.async.bulk.tensor.2d",
    ] {
        assert!(src.contains(needle), "{needle:?} not in the kernel");
    }
}

/// A kernel that puts an array in local memory (a test-only template override) passes NVRTC
/// but not the sm_90a guard: the generate fails with exit code 4, naming the instance and the
/// stack frame ptxas reported.
#[test]
fn ptxas_guard_fails_a_spilling_sm90a_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let template = tilegen::__internal::render::EMBEDDED
        .iter()
        .find(|(n, _)| *n == "gemm_sm90.cu")
        .unwrap()
        .1;
    let anchor = "extern __shared__ __align__(1024) unsigned char tg_smem_raw[];";
    assert!(template.contains(anchor));
    let spilling = template.replace(
        anchor,
        &format!(
            "{anchor}\n    {{ volatile float tg_local[16]; tg_local[threadIdx.x % 16] = 1.0f; }}"
        ),
    );
    let templates = t.join("templates");
    fs::create_dir_all(&templates).unwrap();
    fs::write(templates.join("gemm_sm90.cu"), spilling).unwrap();
    let specs = spec(
        t,
        &[
            "dtype: f16",
            "engine: wgmma",
            "archs: [sm_90a]",
            "tile: [128, 64, 64]",
        ],
    );
    let out = t.join("lib");
    let o = tilegen(
        &[
            "generate",
            "--specs",
            &specs,
            "--templates",
            s(&templates),
            "--out",
            s(&out),
        ],
        t,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    for needle in [
        "hg_f16_128x64x64_s4_nn_wgmma",
        "sm_90a",
        // The spec entry, since `check` passes what ptxas then refuses.
        "  spec: hg.yaml:2\n",
        "an sm_90a kernel must have none of these",
        "bytes of stack frame",
    ] {
        assert!(err.contains(needle), "{needle:?} not in:\n{err}");
    }
    assert!(!out.join("manifest.json").exists());
}

/// `--arch` replaces every instance's archs, which an sm_90a-only instance cannot take: it is
/// refused by name, unless `--filter` leaves that instance out (the filter applies first, so
/// `generate --filter NAME --arch sm_90` keeps working on a library with wgmma instances).
#[test]
fn arch_override_applies_after_the_filter() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let specs = t.join("two.yaml");
    fs::write(
        &specs,
        "kernels:\n  - name: hm\n    op: gemm\n    dtype: bf16\n    archs: [sm_80]\n\
         \x20 - name: hw\n    op: gemm\n    dtype: bf16\n    engine: wgmma\n    archs: [sm_90a]\n",
    )
    .unwrap();
    let opts = |filter: Option<&str>| {
        let mut o = tilegen::Options::new(&specs, t.join("lib"));
        o.compile = false;
        o.jobs = 1;
        o.cache_dir = Some(t.join("cache"));
        o.archs = Some(vec![tilegen::Arch::Sm90]);
        o.filter = filter.map(str::to_string);
        o
    };
    let err = tilegen::generate(&opts(None), &|_| {}).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let msg = err.to_string();
    assert!(
        msg.contains("--arch does not fit") && msg.contains("hw_bf16_128x256x64_s3_nn_wgmma"),
        "{msg}"
    );
    tilegen::generate(&opts(Some("hm_")), &|_| {}).expect("the mma.sync instance alone");
    // A repeated arch is one target, in the order of archs a spec gives: the same
    // configuration (whose sha256 covers the archs) as the plain list.
    let config_with = |archs: Vec<tilegen::Arch>| {
        let mut o = opts(Some("hm_"));
        o.archs = Some(archs);
        tilegen::generate(&o, &|_| {}).expect("generates");
        let m = fs::read_to_string(t.join("lib/manifest.json")).unwrap();
        let m: serde_json::Value = serde_json::from_str(&m).unwrap();
        m["instances"][0]["config_sha256"]
            .as_str()
            .unwrap()
            .to_string()
    };
    use tilegen::Arch::{Sm80, Sm90};
    assert_eq!(
        config_with(vec![Sm90, Sm80, Sm90]),
        config_with(vec![Sm80, Sm90])
    );
}
