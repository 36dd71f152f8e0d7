//! The `attention` op family without a GPU: specs it accepts and refuses, what its library
//! entry says (the query-tile grid rule), the bundle check of that entry, the runtime's call
//! checks (strides, GQA ratio, overlapping outputs, cu_seqlens) and the generated bindings'
//! dispatch on made-up devices.

mod common;

use std::path::Path;
use std::process::Command;

use tilegen::call_checks::Buf;
use tilegen::launch_rules::ArgError;
use tilegen::GridRule;
use tilegen::Manifest;
use tilegen_runtime::attention::{self as rt, AttnShape, AttnStrides, TensorStrides, Varlen};

mod lib {
    include!("../generated/bindings.rs");
}

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");

/// The shipped spec's tiles, two instances: one per mask.
const SPEC: &str = "\
kernels:
  - name: attention
    op: attention
    dtype: bf16
    head_dim: 128
    causal: [false, true]
    tile_q: 64
    tile_kv: 64
    block: 128
    stages: 2
";

/// The spec rendered without NVRTC into `dir/lib`: its manifest and one kernel's CUDA C.
fn render(dir: &Path, spec: &str) -> (Manifest, String) {
    let (m, out) = common::render_spec(dir, spec);
    let cu =
        std::fs::read_to_string(out.join("kernels/attention_bf16_d128_causal_q64x64_s2_b128.cu"))
            .unwrap();
    (m, cu)
}

#[test]
fn spec_is_accepted_with_the_query_tile_grid() {
    let dir = tempfile::tempdir().unwrap();
    let (m, cu) = render(dir.path(), SPEC);
    let names: Vec<&str> = m.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "attention_bf16_d128_causal_q64x64_s2_b128",
            "attention_bf16_d128_q64x64_s2_b128"
        ]
    );
    let inst = &m.instances[0];
    assert_eq!(inst.launch.grid, GridRule::QueryTiles { tile_q: 64 });
    assert_eq!(inst.launch.threads, 128);
    assert_eq!(inst.launch.shared_bytes, (64 + 2 * 2 * 64) * 128 * 2);
    let json = String::from_utf8(m.to_bytes()).unwrap();
    assert!(json.contains("\"rule\": \"query_tiles\""), "{json}");
    assert!(cu.contains("#define TG_CAUSAL 1") && cu.contains("#define TG_HEAD_DIM 128"));
    assert!(cu.contains("grid = (ceil(seq_q / 64), heads_q, batch)"));
    // The manifest this tilegen wrote passes its own bundle check.
    assert_eq!(m.problems(), Vec::<String>::new());
}

#[test]
fn bad_specs_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let check = |lines: &[&str], needles: &[&str]| {
        let mut y = String::from("kernels:\n  - name: at\n    op: attention\n");
        for l in lines {
            y += &format!("    {l}\n");
        }
        let path = dir.path().join("at.yaml");
        std::fs::write(&path, &y).unwrap();
        let o = Command::new(BIN)
            .args(["check", "--specs", path.to_str().unwrap()])
            .env("TILEGEN_CACHE_DIR", dir.path().join("cache"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{y}: {err}");
        for n in needles {
            assert!(err.contains(n), "{y}: {n:?} not in:\n{err}");
        }
    };
    check(&["dtype: bf16"], &["needs `head_dim`"]);
    check(
        &["dtype: bf16", "head_dim: 96"],
        &["head_dim must be 64 or 128"],
    );
    check(
        &["dtype: f32", "head_dim: 64"],
        &["does not support dtype `f32`"],
    );
    check(
        &["dtype: bf16", "head_dim: 128", "tile_q: 48"],
        &["tile_q must be"],
    );
    check(
        &["dtype: bf16", "head_dim: 128", "tile_q: 64", "tile_kv: 128"],
        &["would spill"],
    );
    check(
        &["dtype: f16", "head_dim: 64", "archs: [sm_75]"],
        &["need sm_80+"],
    );
    check(&["dtype: bf16", "head_dim: 64", "items: 2"], &["items"]);
    check(
        &["dtype: bf16", "head_dim: 64", "causal: maybe"],
        &["causal"],
    );
    // A field of attention on another op.
    let path = dir.path().join("at.yaml");
    std::fs::write(
        &path,
        "kernels:\n  - name: s\n    op: softmax\n    dtype: f32\n    head_dim: 64\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["check", "--specs", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("head_dim"));
}

#[test]
fn bundle_check_refuses_a_tampered_attention_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = render(dir.path(), SPEC);
    let mut bad = m.clone();
    bad.instances[0].launch.grid = GridRule::QueryTiles { tile_q: 128 };
    let p = bad.problems().join("\n");
    assert!(p.contains("`launch`"), "{p}");
    let mut bad = m.clone();
    bad.instances[0].params.head_dim = Some(96);
    assert!(bad.problems().join("\n").contains("head_dim"));
    let mut bad = m.clone();
    bad.instances[0].args.swap(0, 1);
    assert!(bad.problems().join("\n").contains("`args`"));
}

const BASE: u64 = 0x7f00_0000_0000;
const MIB: u64 = 1 << 20;

fn bf16s(arg: &'static str, len: usize, at: u64) -> Buf {
    Buf::of::<half::bf16>(arg, len, BASE + at)
}

const KERNEL: rt::AttnKernel = rt::AttnKernel {
    head_dim: 128,
    causal: false,
    tile_q: 128,
    threads: 128,
    shared_bytes: 65_536,
    grid: rt::AttnGrid::QueryTiles,
};

fn shape(b: usize, hq: usize, hkv: usize, sq: usize, skv: usize) -> AttnShape {
    AttnShape {
        batch: b,
        heads_q: hq,
        heads_kv: hkv,
        seq_q: sq,
        seq_kv: skv,
    }
}

/// A dense call of `s` with buffers sized to fit, 64 MiB apart, through `strides`.
fn call(
    s: &AttnShape,
    st: &AttnStrides,
    lse: bool,
) -> Result<Option<tilegen::launch_rules::LaunchDims>, ArgError> {
    let nq = s.batch * s.seq_q * s.heads_q * 128;
    let nkv = s.batch * s.seq_kv * s.heads_kv * 128;
    rt::check(
        &KERNEL,
        132,
        s,
        st,
        bf16s("q", nq, 0),
        bf16s("k", nkv, 64 * MIB),
        bf16s("v", nkv, 128 * MIB),
        bf16s("o", nq, 192 * MIB),
        lse.then(|| Buf::of::<f32>("lse", s.batch * s.heads_q * s.seq_q, BASE + 256 * MIB)),
        None,
        0.088,
    )
}

#[test]
fn plan_checks_refuse_bad_strides_heads_and_overlap() {
    let s = shape(2, 8, 2, 300, 500);
    let dense = AttnStrides::dense(&s, 128);
    let d = call(&s, &dense, true).unwrap().unwrap();
    assert_eq!(d.grid, (3, 8, 2));
    assert_eq!(d.block, (128, 1, 1));
    // A stride that is not a multiple of 8 elements (16 bytes).
    let mut st = dense;
    st.k.seq += 4;
    assert!(matches!(
        call(&s, &st, true),
        Err(ArgError::NotMultiple { .. })
    ));
    // Strides that reach past the buffer.
    let mut st = dense;
    st.q.head *= 2;
    assert!(matches!(
        call(&s, &st, true),
        Err(ArgError::TooShort { arg: "q", .. })
    ));
    // GQA ratio: heads_q a multiple of heads_kv.
    let g = shape(2, 6, 4, 300, 500);
    assert!(matches!(
        call(&g, &AttnStrides::dense(&g, 128), true),
        Err(ArgError::NotMultiple { .. })
    ));
    // Output heads that share memory: two blocks would write one element.
    let mut st = dense;
    st.o.head = 64;
    assert!(matches!(
        call(&s, &st, false),
        Err(ArgError::Overlap { arg: "o", .. })
    ));
    // An output that overlaps an input.
    let nq = 2 * 300 * 8 * 128;
    let r = rt::check(
        &KERNEL,
        132,
        &s,
        &dense,
        bf16s("q", nq, 0),
        bf16s("k", nq, 64 * MIB),
        bf16s("v", nq, 128 * MIB),
        bf16s("o", nq, 64 * MIB + 4096),
        None,
        None,
        0.088,
    );
    assert_eq!(
        r,
        Err(ArgError::Overlap {
            arg: "o",
            other: "k"
        })
    );
    // Misaligned view, non-finite scale, grid limits.
    let r = rt::check(
        &KERNEL,
        132,
        &s,
        &dense,
        bf16s("q", nq, 8),
        bf16s("k", nq, 64 * MIB),
        bf16s("v", nq, 128 * MIB),
        bf16s("o", nq, 192 * MIB),
        None,
        None,
        0.088,
    );
    assert!(matches!(r, Err(ArgError::Misaligned { arg: "q", .. })));
    let big = shape(70_000, 1, 1, 1, 1);
    assert!(call(&big, &AttnStrides::dense(&big, 128), false).is_err());
}

#[test]
fn cu_seqlens_are_checked_when_the_host_has_them() {
    let lens = [5usize, 0, 130, 1];
    let cu: Vec<i32> = std::iter::once(0)
        .chain(lens.iter().scan(0, |a, &l| {
            *a += l as i32;
            Some(*a)
        }))
        .collect();
    let total = *cu.last().unwrap() as usize;
    let s = shape(4, 4, 2, 130, 130);
    let st = AttnStrides::packed(4, 2, total, 128);
    let run = |host: Option<(&[i32], &[i32])>, st: &AttnStrides, q_rows: usize| {
        rt::check(
            &KERNEL,
            132,
            &s,
            st,
            bf16s("q", q_rows * 4 * 128, 0),
            bf16s("k", total * 2 * 128, 64 * MIB),
            bf16s("v", total * 2 * 128, 128 * MIB),
            bf16s("o", total * 4 * 128, 192 * MIB),
            Some(Buf::of::<f32>("lse", 4 * total, BASE + 256 * MIB)),
            Some(Varlen {
                cu_q: Buf::of::<i32>("cu_seqlens_q", 5, BASE + 300 * MIB),
                cu_kv: Buf::of::<i32>("cu_seqlens_kv", 5, BASE + 301 * MIB),
                host,
            }),
            0.088,
        )
    };
    assert!(run(Some((&cu, &cu)), &st, total).unwrap().is_some());
    // Decreasing offsets, a sequence longer than seq_q, too few offsets.
    let bad = [0, 5, 3, 133, 136];
    assert!(run(Some((&bad, &cu)), &st, total).is_err());
    let long = [0, 5, 5, 200, 201];
    assert!(run(Some((&long, &cu)), &st, 201).is_err());
    assert!(matches!(
        run(Some((&cu[..3], &cu)), &st, total),
        Err(ArgError::TooShort { .. })
    ));
    // Packed rows past q's buffer (known from the host offsets).
    assert!(matches!(
        run(Some((&cu, &cu)), &st, total - 1),
        Err(ArgError::TooShort { arg: "q", .. })
    ));
    // A batch stride on a packed tensor.
    let mut st2 = st;
    st2.q = TensorStrides { batch: 8, ..st.q };
    assert!(run(Some((&cu, &cu)), &st2, total).is_err());

    // Offsets on the device only: nothing bounds them, so every tensor must hold all the rows
    // the kernel clamps sequences into, batch * seq (4 * 130 here).
    assert!(matches!(
        run(None, &st, total),
        Err(ArgError::TooShort { .. })
    ));
    let rows = 4 * 130;
    let st_all = AttnStrides::packed(4, 2, rows, 128);
    let device_only = rt::check(
        &KERNEL,
        132,
        &s,
        &st_all,
        bf16s("q", rows * 4 * 128, 0),
        bf16s("k", rows * 2 * 128, 64 * MIB),
        bf16s("v", rows * 2 * 128, 128 * MIB),
        bf16s("o", rows * 4 * 128, 192 * MIB),
        Some(Buf::of::<f32>("lse", 4 * rows, BASE + 256 * MIB)),
        Some(Varlen {
            cu_q: Buf::of::<i32>("cu_seqlens_q", 5, BASE + 300 * MIB),
            cu_kv: Buf::of::<i32>("cu_seqlens_kv", 5, BASE + 301 * MIB),
            host: None,
        }),
        0.088,
    );
    assert!(device_only.unwrap().is_some());
}

fn device(major: u32, minor: u32) -> lib::Device {
    lib::Device {
        major,
        minor,
        sm_count: 132,
        driver: Some(lib::Version::new(13, 0)),
        name: lib::DeviceName::unknown(),
    }
}

#[test]
fn bindings_dispatch_by_mask_and_device() {
    let s = shape(2, 16, 16, 1000, 1000);
    let st = AttnStrides::dense(&s, 128);
    let n = 2 * 1000 * 16 * 128;
    let plan = |dev: &lib::Device, causal: bool| {
        lib::plan::attention_d128_bf16(
            dev,
            bf16s("q", n, 0),
            bf16s("k", n, 64 * MIB),
            bf16s("v", n, 128 * MIB),
            bf16s("o", n, 192 * MIB),
            None,
            None,
            &s,
            &st,
            0.088,
            causal,
        )
    };
    let name = |p: &lib::Plan| lib::KERNELS[p.kernel].name;
    let h200 = device(9, 0);
    let masked = plan(&h200, true).unwrap();
    let plain = plan(&h200, false).unwrap();
    assert!(name(&masked).contains("_causal_"), "{}", name(&masked));
    assert!(!name(&plain).contains("_causal_"), "{}", name(&plain));
    assert_ne!(masked.dims, None);
    // An sm_90 device runs the Hopper (wgmma) instances; an A100 the portable ones (sm_80
    // cubins), with the same mask; a Turing card has nothing to run.
    assert!(name(&masked).ends_with("_wgmma"), "{}", name(&masked));
    assert!(name(&plain).ends_with("_wgmma"), "{}", name(&plain));
    let a100 = plan(&device(8, 0), true).unwrap();
    assert!(
        name(&a100).contains("_causal_") && !name(&a100).ends_with("_wgmma"),
        "{}",
        name(&a100)
    );
    assert!(matches!(
        plan(&device(7, 5), false),
        Err(ArgError::NoInstance {
            op: "attention",
            ..
        })
    ));
    // The Hopper instances are persistent: one block per SM while there are more work units
    // (query tiles x heads x batch; causal: pairs of tiles) than SMs; the causal count is
    // coprime to the units per head.
    let GridRule::PersistentQueryTiles { tile_q, .. } = tilegen_grid(name(&plain)) else {
        panic!("not a persistent query-tile instance");
    };
    assert!(1000u32.div_ceil(tile_q) * 16 * 2 >= 132);
    assert_eq!(plain.dims.unwrap().grid, (132, 1, 1));
    let GridRule::PersistentQueryTiles { tile_q, pairs, .. } = tilegen_grid(name(&masked)) else {
        panic!("not a persistent query-tile instance");
    };
    assert!(pairs);
    let per_head = 1000u32.div_ceil(tile_q).div_ceil(2);
    let limit = (per_head * 16 * 2).min(132);
    let x = masked.dims.unwrap().grid.0;
    assert!(
        x <= limit && (x + 1..=limit).all(|y| gcd(y, per_head) > 1) && gcd(x, per_head) == 1,
        "{x} blocks for {per_head} units per head"
    );
    // The portable instances keep one block per query tile, head and batch entry.
    let GridRule::QueryTiles { tile_q } = tilegen_grid(name(&a100)) else {
        panic!("not a query-tile instance");
    };
    assert_eq!(a100.dims.unwrap().grid, (1000u32.div_ceil(tile_q), 16, 2));
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The launch rule of a shipped instance, read from the checked-in manifest.
fn tilegen_grid(name: &str) -> GridRule {
    let m = Manifest::from_bytes(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/generated/manifest.json"
        ))
        .unwrap(),
    )
    .unwrap();
    m.instance(name).unwrap().launch.grid.clone()
}
