//! A bundle's tensor maps and persistent grids are untrusted: the host encodes every map from
//! them and sizes every launch by them. Each hostile edit here (a map over a size argument, a
//! dim that is a pointer, a box the swizzle cannot hold, a dtype that is not its tensor's, a
//! persistent grid with no blocks, maps that are not the ones the configuration derives, ...)
//! must be refused by `bundle verify` and `generate --bundle` with exit code 7, naming the
//! instance and the field, never a panic. Bundles come from a one-instance wgmma library
//! rendered here without NVRTC, with fake binaries.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::FakeLibrary;
use serde_json::{json, Value};

const SPEC: &str = "kernels:\n  - name: gemm\n    op: gemm\n    dtype: bf16\n    engine: wgmma\n    archs: [sm_90a]\n    tile: [128, 256, 64]\n    epilogue: [bias]\n";

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An edit of the first instance of a manifest (as JSON).
type Edit = Box<dyn FnOnce(&mut Value)>;

struct Fixture {
    dir: tempfile::TempDir,
    members: Vec<(String, Vec<u8>)>,
    instance: String,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    std::fs::write(specs.join("k.yaml"), SPEC).unwrap();
    let lib = dir.path().join("lib");
    let m = FakeLibrary {
        specs,
        filter: None,
        targets: &[("sm_90a", "9.0")],
        big_cubin: None,
    }
    .write(&lib);
    assert_eq!(m.instances.len(), 1);
    let inst = &m.instances[0];
    assert_eq!(
        inst.tensor_maps.len(),
        3,
        "a wgmma GEMM takes a, b and d maps"
    );
    let good = dir.path().join("good.tar.gz");
    let o = common::tilegen(
        &["bundle", "create", "--lib", s(&lib), "--out", s(&good)],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let members = common::members(&std::fs::read(&good).unwrap());
    // The good bundle passes: the checks below fail only on the edits.
    let o = common::tilegen(&["bundle", "verify", s(&good)], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    Fixture {
        dir,
        members,
        instance: inst.name.clone(),
    }
}

impl Fixture {
    fn hostile(&self, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
        let mut members = self.members.clone();
        let (_, bytes) = members.iter().find(|(p, _)| p == "manifest.json").unwrap();
        let mut m: Value = serde_json::from_slice(bytes).unwrap();
        edit(&mut m["instances"][0]);
        let mut bytes = serde_json::to_vec_pretty(&m).unwrap();
        bytes.push(b'\n');
        common::replace_member(&mut members, "manifest.json", bytes);
        let path = self.dir.path().join(name);
        std::fs::write(&path, common::raw_archive(&common::files(&members))).unwrap();
        path
    }

    /// Every case: `bundle verify` and `generate --bundle` exit 7 with `want` (and the
    /// instance) in the message, write nothing, never panic.
    fn refuse_all(&self, cases: Vec<(&str, Edit, &str)>) {
        for (tag, edit, want) in cases {
            let b = self.hostile(&format!("{tag}.tar.gz"), edit);
            let o = common::tilegen(&["bundle", "verify", s(&b)], &[]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(7), "{tag}: verify: {err}");
            assert!(!err.contains("panicked"), "{tag}: {err}");
            assert!(
                err.contains(&format!("instance 0 `{}`", self.instance)) && err.contains(want),
                "{tag}: wanted {want:?} in: {err}"
            );
            let out = self.dir.path().join(format!("out-{tag}"));
            let nowhere = self.dir.path().join("no-specs");
            let o = common::tilegen(
                &[
                    "generate",
                    "--bundle",
                    s(&b),
                    "--specs",
                    s(&nowhere),
                    "--out",
                    s(&out),
                ],
                &[],
            );
            assert_eq!(o.status.code(), Some(7), "{tag}: generate: {}", stderr(&o));
            assert!(!out.join("bindings.rs").exists(), "{tag}: wrote bindings");
        }
    }
}

fn map(i: usize, key: &'static str, value: Value) -> Edit {
    Box::new(move |inst: &mut Value| inst["tensor_maps"][i][key] = value)
}

/// Which memory a map covers and which sizes shape it must be the instance's own arguments,
/// of the right kind and type; a dim may also be a plain literal, and `batch` only with a
/// query-tile grid.
#[test]
fn maps_name_the_instances_pointer_and_size_arguments() {
    let f = fixture();
    f.refuse_all(vec![
        (
            "tensor-is-size",
            map(0, "tensor", json!("m")),
            "`tensor_maps[0]` tensor `m` is not a pointer argument",
        ),
        (
            "tensor-unknown",
            map(1, "tensor", json!("z")),
            "`tensor_maps[1]` tensor `z` is not a pointer argument",
        ),
        (
            "dim-is-pointer",
            map(0, "dims", json!(["a", "m"])),
            "`tensor_maps[0]` dims names `a`, which is not a size argument",
        ),
        (
            "dim-batch-not-an-argument",
            map(0, "dims", json!(["k", "batch"])),
            "`tensor_maps[0]` dims names `batch`, which is not a size argument",
        ),
        (
            "dim-signed",
            map(1, "dims", json!(["+64", "n"])),
            "`tensor_maps[1]` dims `+64` is not a plain decimal extent",
        ),
        (
            "dim-zero",
            map(0, "dims", json!(["k", "0"])),
            "`tensor_maps[0]` dims `0` is outside 1..=4294967296",
        ),
        (
            "stride-literal",
            map(2, "strides", json!(["64"])),
            "`tensor_maps[2]` strides names `64`, which is not a size argument",
        ),
        (
            "stride-unknown",
            map(2, "strides", json!(["ldq"])),
            "`tensor_maps[2]` strides names `ldq`, which is not a size argument",
        ),
        (
            "dtype",
            map(0, "dtype", json!("f32")),
            "`tensor_maps[0]` dtype f32 differs from its tensor `a`'s element type bf16",
        ),
        (
            "name-clash",
            map(1, "name", json!("a_map")),
            "`tensor_maps[1]` name `a_map` is used twice",
        ),
        (
            "name-is-arg",
            map(2, "name", json!("bias")),
            "`tensor_maps[2]` name `bias` is used twice",
        ),
        (
            "name-not-ident",
            map(0, "name", json!("a map\n")),
            "`tensor_maps[0]` name `a map\\n` is not a plain identifier",
        ),
        (
            "no-strides",
            map(0, "strides", json!([])),
            "`tensor_maps[0]` has 0 strides for 2 dims",
        ),
        (
            "rank-6",
            map(0, "dims", json!(["k", "m", "n", "k", "m", "n"])),
            "`tensor_maps[0]` has 6 dims (1 to 5)",
        ),
    ]);
}

/// Boxes the driver would refuse, or a swizzle that cannot hold the box's row.
#[test]
fn boxes_fit_the_limits_and_the_swizzle() {
    let f = fixture();
    f.refuse_all(vec![
        (
            "box-zero",
            map(0, "box", json!([64, 0])),
            "`tensor_maps[0]` box extent 0 is outside 1..=256",
        ),
        (
            "box-big",
            map(1, "box", json!([64, 512])),
            "`tensor_maps[1]` box extent 512 is outside 1..=256",
        ),
        (
            "box-rank",
            map(2, "box", json!([64])),
            "`tensor_maps[2]` box has 1 extents for 2 dims",
        ),
        (
            "box-wider-than-swizzle",
            map(0, "box", json!([128, 128])),
            "`tensor_maps[0]` box's inner extent is 256 bytes, wider than the 128b swizzle's 128",
        ),
        (
            "swizzle-narrow",
            map(1, "swizzle", json!("32b")),
            "`tensor_maps[1]` box's inner extent is 128 bytes, wider than the 32b swizzle's 32",
        ),
        (
            "box-not-16-bytes",
            map(2, "box", json!([4, 64])),
            "`tensor_maps[2]` box's inner extent is 8 bytes, not a multiple of 16",
        ),
        (
            "interleave-rank-2",
            map(0, "interleave", json!("16b")),
            "`tensor_maps[0]` interleave 16b needs 3 or more dims, not 2",
        ),
    ]);
}

/// A persistent grid must be sane and go with tensor maps; maps the configuration does not
/// derive (sound on their own) are refused too, since the kernel expects its own boxes.
#[test]
fn persistent_grids_and_derived_maps() {
    let f = fixture();
    let grid = |key: &'static str, value: Value| -> Edit {
        Box::new(move |inst: &mut Value| inst["launch"]["grid"][key] = value)
    };
    f.refuse_all(vec![
        (
            "ctas-zero",
            grid("ctas_per_sm", json!(0)),
            "`launch` persistent ctas_per_sm 0 is outside 1..=32",
        ),
        (
            "tile-zero",
            grid("tile_m", json!(0)),
            "`launch` persistent tile_m 0 is outside 1..=1024",
        ),
        (
            "cluster-zero",
            grid("cluster", json!(0)),
            "`launch` persistent cluster 0 is outside 1..=8",
        ),
        (
            "cluster-big",
            grid("cluster", json!(16)),
            "`launch` persistent cluster 16 is outside 1..=8",
        ),
        // Sound on its own, but this kernel has no cluster dims: a grid of pairs would run
        // two blocks per tile that each write the whole tile.
        (
            "cluster-not-derived",
            grid("cluster", json!(2)),
            "differs from this configuration's",
        ),
        (
            "shared-huge",
            Box::new(|inst: &mut Value| inst["launch"]["shared_bytes"] = json!(1 << 20)),
            "`launch` shared_bytes 1048576 is more than a block can have",
        ),
        (
            "threads",
            Box::new(|inst: &mut Value| inst["launch"]["threads"] = json!(100)),
            "`launch` threads 100 is not a whole number of warps",
        ),
        (
            "maps-dropped",
            Box::new(|inst: &mut Value| {
                inst.as_object_mut().unwrap().remove("tensor_maps");
            }),
            "`launch` has a persistent grid but 0 tensor maps",
        ),
        (
            "tiles-with-maps",
            Box::new(|inst: &mut Value| {
                inst["launch"]["grid"] = json!({"rule": "tiles", "tile_m": 128, "tile_n": 256})
            }),
            "`launch` has a non-persistent grid but 3 tensor maps",
        ),
        (
            "box-not-derived",
            map(0, "box", json!([64, 64])),
            "`tensor_maps` [{\"name\":\"a_map\"",
        ),
        (
            "constant-dim-not-derived",
            map(0, "dims", json!(["64", "m"])),
            "differ from this configuration's",
        ),
        (
            "oob-not-derived",
            map(2, "oob_fill", json!("nan")),
            "differ from this configuration's",
        ),
    ]);
}
