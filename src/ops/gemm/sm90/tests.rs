use super::*;
use crate::launch::L2Promotion;
use crate::ops::Field;
use crate::spec::model::{Engine, Op};

fn inst(dtype: DType, out: DType, tile_n: u32, layout: Layout) -> Instance {
    let mut params = Params {
        tile: Some([TILE_M, tile_n, TILE_K]),
        layout: Some(layout),
        engine: Some(Engine::Wgmma),
        ..Default::default()
    };
    defaults(&mut params);
    let mut i = Instance::for_test(Op::Gemm, dtype, params);
    i.out_dtype = out;
    i.archs = vec![Arch::Sm90a];
    i
}

#[test]
fn pingpong_plan() {
    // Two consumers on whole 128x128 tiles: the stages of the cooperative 128x128 tile, one
    // 64x128 staging buffer per consumer (each stages its two slices in turn), 18 barriers.
    let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
    i.params.pingpong = Some(true);
    i.params.stages = Some(6);
    assert!(crate::ops::check(&i).is_empty());
    let l = launch(&i);
    assert_eq!(l.threads, 384);
    assert_eq!(l.shared_bytes, 1024 + 6 * 32768 + 2 * 16384 + 8 * 18);
    let v: std::collections::HashMap<_, _> = template_values(&i).into_iter().collect();
    assert_eq!(v["units"], 2);
    assert_eq!(v["acc_regs"], 64);
    assert_eq!(v["a_slice"], "0");
    assert!(crate::ops::name_suffix(&i).ends_with("_nn_wgmma_pp"));
    // 64 rows: one slice of 128 accumulators, as a cooperative 128x256 consumer holds.
    let mut w = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    w.params.tile = Some([64, 256, TILE_K]);
    w.params.pingpong = Some(true);
    let v: std::collections::HashMap<_, _> = template_values(&w).into_iter().collect();
    assert_eq!(
        (v["units"].clone(), v["consumers"].clone()),
        (1.into(), 2.into())
    );
}

#[test]
fn residual_c_load_halfway_only_for_two_consumer_tiles() {
    let c_mid_loop = |tile: [u32; 3], split_k: Option<u32>, pingpong: Option<bool>| {
        let mut i = inst(DType::Bf16, DType::Bf16, tile[1], Layout::Nn);
        i.params.tile = Some(tile);
        i.params.split_k = split_k;
        i.params.pingpong = pingpong;
        i.epilogue = vec![Epilogue::Scale, Epilogue::Bias, Epilogue::Residual];
        assert!(crate::ops::check(&i).is_empty(), "{tile:?}");
        let v: std::collections::HashMap<_, _> = template_values(&i).into_iter().collect();
        v["c_mid_loop"] == serde_json::Value::Bool(true)
    };
    assert!(c_mid_loop([128, 256, TILE_K], None, None));
    assert!(c_mid_loop([128, 96, TILE_K], None, None));
    assert!(!c_mid_loop([64, 192, TILE_K], None, None));
    assert!(!c_mid_loop([16, 64, TILE_K], None, None));
    assert!(!c_mid_loop([128, 64, TILE_K], Some(2), None));
    assert!(!c_mid_loop([128, 128, TILE_K], None, Some(true)));
    // Without a residual there is no C to load.
    let plain = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    let v: std::collections::HashMap<_, _> = template_values(&plain).into_iter().collect();
    assert_eq!(v["c_mid_loop"], serde_json::Value::Bool(false));
}

#[test]
fn tile_256_rows() {
    // Two consumers of two slices each; a stage holds 32 KiB of A beside 16 of B.
    let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
    i.params.tile = Some([256, 128, TILE_K]);
    i.params.stages = Some(4);
    assert!(crate::ops::check(&i).is_empty());
    assert_eq!(
        launch(&i).shared_bytes,
        1024 + 4 * 49152 + 2 * 16384 + 8 * 14
    );
    let v: std::collections::HashMap<_, _> = template_values(&i).into_iter().collect();
    assert_eq!(
        (v["consumers"].clone(), v["units"].clone()),
        (2.into(), 2.into())
    );
    assert_eq!(
        (v["a_slice"].clone(), v["a_slice1"].clone()),
        ("(2 * cw)".into(), "(2 * cw + 1)".into())
    );
    assert_eq!(v["a_loads"], 1); // K-major A: one 256-row box
}

#[test]
fn plan_and_shared_memory() {
    // bf16 128x256, 3 stages of 16 + 32 KiB, two 64x256 bf16 staging buffers, 12 barriers.
    let i = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    let l = launch(&i);
    assert_eq!(l.threads, 384);
    assert_eq!(l.shared_bytes, 1024 + 3 * 49152 + 2 * 32768 + 8 * 12);
    // A bias adds two slots of 256 f32 columns.
    let mut b = i.clone();
    b.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
    assert_eq!(launch(&b).shared_bytes, l.shared_bytes + 2 * 1024);
    assert!(crate::ops::check(&b).is_empty());
    assert_eq!(
        l.grid,
        GridRule::Persistent {
            tile_m: 128,
            tile_n: 256,
            ctas_per_sm: 1,
            cluster: 1
        }
    );
    assert!(check(&i).is_empty());
    assert_eq!(crate::ops::check(&i), vec![]);
    // f32 output stages half the tile per round: the same 64 KiB.
    let f = inst(DType::Bf16, DType::F32, 256, Layout::Nn);
    let pf = Plan::new(&f);
    assert_eq!((pf.epi_rounds, pf.epi_cols, pf.d_box_cols), (2, 128, 32));
    assert_eq!(launch(&f).shared_bytes, launch(&i).shared_bytes);
    assert!(crate::ops::check(&f).is_empty());
    // 128-wide tiles get 4 stages by default; f32 out then fits in one round.
    let n = inst(DType::F16, DType::F32, 128, Layout::Nt);
    let pn = Plan::new(&n);
    assert_eq!((pn.stages, pn.epi_rounds), (4, 1));
    assert!(crate::ops::check(&n).is_empty());
    // 192 wide with f32 out: 64x192x4 = 48 KiB, two rounds of 96 columns (3 boxes).
    let w = inst(DType::Bf16, DType::F32, 192, Layout::Nn);
    let pw = Plan::new(&w);
    assert_eq!((pw.epi_rounds, pw.epi_cols), (2, 96));
    // Too deep a ring for sm_90's 227 KiB is refused at `stages`.
    let mut deep = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    deep.params.stages = Some(4);
    let p = crate::ops::check(&deep);
    assert!(
        p.iter()
            .any(|(f, m)| *f == Field::Stages && m.contains("shared memory")),
        "{p:?}"
    );
}

#[test]
fn wide_split_tiles_keep_partials_in_the_staging_region() {
    // 128x192 split 2, 3 stages: separate 2 x 48 KiB partial tiles beside the ring and
    // the staging buffers would need 273 KB; in the staging region they fit.
    let mut w = inst(DType::Bf16, DType::Bf16, 192, Layout::Nn);
    w.params.stages = Some(3);
    w.params.split_k = Some(2);
    w.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
    let p = Plan::new(&w);
    assert!(p.partial_in_staging);
    assert_eq!(p.partial_offset(), p.staging_offset());
    assert_eq!(p.staging_region_bytes(), 2 * 64 * 192 * 4);
    assert!(p.staging_region_bytes() >= 2 * p.staging_bytes());
    // The bias slots follow the shared region, the barriers the bias slots.
    assert_eq!(p.bias_offset(), p.staging_offset() + 2 * 64 * 192 * 4);
    assert_eq!(p.barrier_offset(), p.bias_offset() + 2 * 192 * 4);
    assert_eq!(
        launch(&w).shared_bytes,
        1024 + 3 * (16384 + 24576) + 2 * 49152 + 2 * 768 + 8 * 16
    );
    assert_eq!(crate::ops::check(&w), vec![]);
    // A split whose separate buffers fit keeps them (the verified layout).
    let mut narrow = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
    narrow.params.stages = Some(7);
    narrow.params.split_k = Some(2);
    let pn = Plan::new(&narrow);
    assert!(!pn.partial_in_staging);
    assert_eq!(pn.partial_offset(), pn.bias_offset());
    // No split, no sharing.
    assert!(!Plan::new(&inst(DType::Bf16, DType::Bf16, 192, Layout::Nn)).partial_in_staging);
}

#[test]
fn split_k_clusters() {
    let mut i = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
    i.params.stages = Some(7);
    i.params.split_k = Some(2);
    assert_eq!(crate::ops::check(&i), vec![]);
    // 7 stages of 16 + 8 KiB, two 64x64 bf16 staging buffers, two 64x64 f32 partial
    // tiles, 7 * 2 + 6 + 4 barriers.
    let l = launch(&i);
    assert_eq!(
        l.shared_bytes,
        1024 + 7 * 24576 + 2 * 8192 + 2 * 16384 + 8 * 24
    );
    assert_eq!(
        l.grid,
        GridRule::Persistent {
            tile_m: 128,
            tile_n: 64,
            ctas_per_sm: 1,
            cluster: 2
        }
    );
    // K-major A comes in 32-row boxes (only those that reach into M); M-major A as before.
    assert_eq!(tensor_maps(&i)[0].box_dims, vec![64, 32]);
    let mut t = i.clone();
    t.params.layout = Some(Layout::Tn);
    assert_eq!(tensor_maps(&t)[0].box_dims, vec![64, 64]);
    assert!(crate::ops::name_suffix(&i).ends_with("_s7_nn_wgmma_split2"));
    // The manifest spells the cluster only when there is one.
    let json = |g: &GridRule| serde_json::to_string(g).unwrap();
    assert!(json(&l.grid).contains("\"cluster\":2"));
    let unsplit = launch(&inst(DType::Bf16, DType::Bf16, 64, Layout::Nn)).grid;
    assert!(!json(&unsplit).contains("cluster"));
    assert_eq!(
        serde_json::from_str::<GridRule>(&json(&unsplit)).unwrap(),
        unsplit
    );
    // split_k 1 is no split: same instance as leaving it out.
    let mut one = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
    one.params.split_k = Some(1);
    assert_eq!(
        crate::ops::canonical(&one),
        inst(DType::Bf16, DType::Bf16, 64, Layout::Nn).params
    );
    // Out of range; and the mma_sync engine has no clusters.
    let has = |i: &Instance, needle: &str| has_problem(i, Field::SplitK, needle);
    for bad in [0, 9] {
        let mut b = i.clone();
        b.params.split_k = Some(bad);
        has(&b, "from 1 to 8");
    }
    has(
        &mma_sync(Params {
            split_k: Some(2),
            ..Default::default()
        }),
        "needs engine wgmma",
    );
}

/// `check` reports a problem with `field` whose message contains `needle`.
fn has_problem(i: &Instance, field: Field, needle: &str) {
    let p = crate::ops::check(i);
    assert!(
        p.iter().any(|(f, m)| *f == field && m.contains(needle)),
        "{needle:?} not in {p:?}"
    );
}

/// A GEMM instance with `params` on the default (mma_sync) engine.
fn mma_sync(params: Params) -> Instance {
    let mut m = Instance::for_test(crate::spec::model::Op::Gemm, DType::Bf16, params);
    crate::ops::apply_defaults(crate::spec::model::Op::Gemm, &mut m.params);
    m
}

#[test]
fn multicast_clusters() {
    // Swap-AB 16x128 tiles in clusters of 2 sharing the activations' stages: the cluster
    // in the grid rule and the name, shared memory as without it.
    let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
    i.params.tile = Some([16, 128, TILE_K]);
    i.params.stages = Some(12);
    let plain = launch(&i);
    i.params.multicast = Some(2);
    assert_eq!(crate::ops::check(&i), vec![]);
    let l = launch(&i);
    assert_eq!(l.shared_bytes, plain.shared_bytes);
    assert_eq!(
        l.grid,
        GridRule::Persistent {
            tile_m: 16,
            tile_n: 128,
            ctas_per_sm: 1,
            cluster: 2
        }
    );
    assert!(crate::ops::name_suffix(&i).ends_with("_s12_nn_wgmma_mc2"));
    assert!(runtime_requirements(&i)
        .iter()
        .any(|r| r.contains("cuOccupancyMaxActiveClusters") && r.contains("multicast")));
    // multicast 1 is none: the same instance as leaving it out.
    let mut one = i.clone();
    one.params.multicast = Some(1);
    let mut none = i.clone();
    none.params.multicast = None;
    assert_eq!(crate::ops::canonical(&one), crate::ops::canonical(&none));
    let has = |i: &Instance, needle: &str| has_problem(i, Field::Multicast, needle);
    for bad in [0, 9] {
        let mut b = i.clone();
        b.params.multicast = Some(bad);
        has(&b, "from 1 to 8");
    }
    // Any tile may share A's rows; a cluster either splits K or multicasts.
    let mut wide = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    wide.params.multicast = Some(2);
    assert_eq!(crate::ops::check(&wide), vec![]);
    assert_eq!(launch(&wide).grid.cluster(), 2);
    let mut both = i.clone();
    both.params.split_k = Some(2);
    has(&both, "give one of them");
    has(
        &mma_sync(Params {
            multicast: Some(2),
            ..Default::default()
        }),
        "needs engine wgmma",
    );
}

#[test]
fn one_consumer_tiles() {
    // 64x64 split 2, 12 stages of 8 + 8 KiB: one consumer's staging buffer (64x64 bf16)
    // and partial tile (64x64 f32), the barriers of two; 256 threads.
    let mut i = inst(DType::Bf16, DType::Bf16, 64, Layout::Nn);
    i.params.tile = Some([64, 64, TILE_K]);
    i.params.stages = Some(12);
    i.params.split_k = Some(2);
    assert_eq!(crate::ops::check(&i), vec![]);
    let l = launch(&i);
    assert_eq!(l.threads, 256);
    assert_eq!(
        l.shared_bytes,
        1024 + 12 * 16384 + 8192 + 16384 + 8 * (2 * 12 + 10)
    );
    assert_eq!(
        l.grid,
        GridRule::Persistent {
            tile_m: 64,
            tile_n: 64,
            ctas_per_sm: 1,
            cluster: 2
        }
    );
    // K-major A: two 32-row boxes per stage when split, one 64-row box when not; M-major
    // A one 64-row box.
    let p = Plan::new(&i);
    assert_eq!((p.a_box_outer, p.a_loads(), p.consumers()), (32, 2, 1));
    i.params.split_k = None;
    let p = Plan::new(&i);
    assert_eq!((p.a_box_outer, p.a_loads()), (64, 1));
    assert_eq!(tensor_maps(&i)[0].box_dims, vec![64, 64]);
    i.params.layout = Some(Layout::Tt);
    assert_eq!(Plan::new(&i).a_loads(), 1);
    assert!(runtime_requirements(&i)
        .iter()
        .any(|r| r.contains("ceil(M / 64)") && r.contains("block = (256, 1, 1)")));
    // 13 stages fit only with the partial tile in the staging region; 14 not at all.
    i.params.split_k = Some(2);
    i.params.layout = Some(Layout::Nn);
    i.params.stages = Some(13);
    assert!(Plan::new(&i).partial_in_staging);
    assert_eq!(crate::ops::check(&i), vec![]);
    i.params.stages = Some(14);
    assert!(crate::ops::check(&i)
        .iter()
        .any(|(f, m)| *f == Field::Stages && m.contains("shared memory")));
}

#[test]
fn swap_ab_tiles() {
    // 16x128: wgmma's tile is 128 weight rows (two consumers) by 16 tokens; 12 stages of
    // 16 KiB of B beside 2 KiB of A, two staging buffers of 16 rows x 64 bf16 columns.
    let mut i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
    i.params.tile = Some([16, 128, TILE_K]);
    i.params.stages = Some(12);
    assert_eq!(crate::ops::check(&i), vec![]);
    let p = Plan::new(&i);
    assert!(p.swap);
    assert_eq!((p.tile_m, p.tile_n, p.consumers()), (128, 16, 2));
    // nn: B (K x N, row-major) is wgmma's M-major A, A's rows its K-major B.
    assert_eq!((p.a_k_major, p.b_k_major), (false, true));
    assert_eq!((p.b_box_rows(), p.b_loads(), p.a_loads()), (16, 1, 2));
    let l = launch(&i);
    assert_eq!(l.threads, 384);
    assert_eq!(
        l.shared_bytes,
        1024 + 12 * (16384 + 2048) + 2 * 2048 + 8 * 30
    );
    // The grid rule speaks of D: 16-row, 128-column tiles.
    assert_eq!(
        l.grid,
        GridRule::Persistent {
            tile_m: 16,
            tile_n: 128,
            ctas_per_sm: 1,
            cluster: 1
        }
    );
    let dims = |m: &TensorMap| (m.name.clone(), m.dims.join(","), m.box_dims.clone());
    let maps: Vec<_> = tensor_maps(&i).iter().map(dims).collect();
    assert_eq!(
        maps,
        [
            ("a_map".into(), "k,m".into(), vec![64, 16]),
            ("b_map".into(), "n,k".into(), vec![64, 64]),
            ("d_map".into(), "n,m".into(), vec![64, 16]),
        ]
    );
    let promotion: Vec<_> = tensor_maps(&i).iter().map(|m| m.l2_promotion).collect();
    assert_eq!(
        promotion,
        [L2Promotion::B128, L2Promotion::B128, L2Promotion::B256]
    );
    // The ring's depth in use follows the grid (the bytes in flight it aims at); the
    // two-consumer tiles of 64 rows and more fill their whole ring.
    let budget = |i: &Instance| {
        let v: std::collections::HashMap<_, _> = template_values(i).into_iter().collect();
        (v["inflight_budget"].clone(), v["min_depth"].clone())
    };
    let wide = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    assert_eq!(budget(&i), (INFLIGHT_BUDGET_BYTES.into(), 6.into()));
    assert_eq!(budget(&wide).0, 0);
    assert_eq!(
        (p.ring_end(), Plan::new(&wide).ring_end()),
        ("depth", "STAGES")
    );
    // The kernel hands wgmma B's map and N first.
    let args = template_values(&i)
        .into_iter()
        .find(|(k, _)| *k == "sm90_args")
        .unwrap()
        .1;
    assert!(
        args.as_str()
            .unwrap()
            .starts_with("b_map, a_map, d_map, d_map, nullptr, n, m, k"),
        "{args}"
    );
    // nt: B stored N x K is wgmma's K-major A, one box of the tile's 128 rows; f32 output
    // stages 32-column boxes; a bias slot holds the tile's 128 columns of D.
    let mut t = i.clone();
    t.params.layout = Some(Layout::Nt);
    t.out_dtype = DType::F32;
    t.epilogue = vec![Epilogue::Bias, Epilogue::Relu];
    assert_eq!(crate::ops::check(&t), vec![]);
    let pt = Plan::new(&t);
    assert_eq!((pt.a_k_major, pt.a_box_outer, pt.a_loads()), (true, 128, 1));
    assert_eq!(pt.bias_slot_bytes(), 128 * 4);
    let maps: Vec<_> = tensor_maps(&t).iter().map(dims).collect();
    assert_eq!(maps[1], ("b_map".into(), "k,n".into(), vec![64, 128]));
    assert_eq!(maps[2], ("d_map".into(), "n,m".into(), vec![32, 16]));
    // No split: the template's K-less path selects outputs rather than zeroing the
    // accumulators that partial tiles would add up (it refuses SPLIT_K > 1 at compile time,
    // so the checks refuse it first, at the spec).
    let mut s = i.clone();
    s.params.tile = Some([16, 64, TILE_K]);
    s.params.layout = Some(Layout::Nt);
    s.params.split_k = Some(2);
    s.params.stages = Some(16);
    assert!(
        crate::ops::check(&s)
            .iter()
            .any(|(f, m)| *f == Field::SplitK && m.contains("swap-AB")),
        "{:?}",
        crate::ops::check(&s)
    );
    // A stored K x M cannot sit on wgmma's n; widths other than 64 and 128 are refused.
    let has = |i: &Instance, field: Field, needle: &str| {
        let p = crate::ops::check(i);
        assert!(
            p.iter().any(|(f, m)| *f == field && m.contains(needle)),
            "{needle:?} at {field:?} not in {p:?}"
        );
    };
    let mut tn = i.clone();
    tn.params.layout = Some(Layout::Tn);
    has(&tn, Field::Layout, "swap-AB");
    let mut wide = i.clone();
    wide.params.tile = Some([16, 256, TILE_K]);
    has(&wide, Field::Tile, "m 16 or 32");
}

#[test]
fn tensor_maps_per_layout() {
    let dims = |m: &TensorMap| (m.dims.join(","), m.strides.join(","), m.box_dims.clone());
    for (layout, a, b) in [
        (
            Layout::Nn,
            ("k,m", "lda", vec![64, 128]),
            ("n,k", "ldb", vec![64, 64]),
        ),
        (
            Layout::Nt,
            ("k,m", "lda", vec![64, 128]),
            ("k,n", "ldb", vec![64, 64]),
        ),
        (
            Layout::Tn,
            ("m,k", "lda", vec![64, 64]),
            ("n,k", "ldb", vec![64, 64]),
        ),
        (
            Layout::Tt,
            ("m,k", "lda", vec![64, 64]),
            ("k,n", "ldb", vec![64, 64]),
        ),
    ] {
        let i = inst(DType::F16, DType::F32, 256, layout);
        let maps = tensor_maps(&i);
        let names: Vec<&str> = maps.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a_map", "b_map", "d_map"]);
        assert_eq!(
            dims(&maps[0]),
            (a.0.to_string(), a.1.to_string(), a.2),
            "{layout} A"
        );
        assert_eq!(
            dims(&maps[1]),
            (b.0.to_string(), b.1.to_string(), b.2),
            "{layout} B"
        );
        // D: f32 boxes are 32 columns (128 bytes) by one consumer's 64 rows.
        assert_eq!(
            dims(&maps[2]),
            ("n,m".to_string(), "ldd".to_string(), vec![32, 64])
        );
        assert_eq!(
            (maps[0].dtype, maps[1].dtype, maps[2].dtype),
            (DType::F16, DType::F16, DType::F32)
        );
        // Every box is one 128-byte swizzle span wide and at most 256 per dim.
        for m in &maps {
            assert_eq!(m.box_dims[0] * m.dtype.size(), 128, "{}", m.name);
            assert!(m.box_dims.iter().all(|&b| b <= 256));
            assert_eq!(m.swizzle, Swizzle::B128);
            assert_eq!(m.l2_promotion, L2Promotion::B256, "{}", m.name);
        }
    }
    // A bf16 output box is 64 columns.
    let i = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
    assert_eq!(tensor_maps(&i)[2].box_dims, vec![64, 64]);
    // One consumer's 64 rows: the operands' L2 promotion is 128 bytes, D's stays 256.
    let mut skinny = i.clone();
    skinny.params.tile = Some([64, 192, TILE_K]);
    skinny.params.stages = Some(6);
    assert_eq!(crate::ops::check(&skinny), vec![]);
    let promotion: Vec<_> = tensor_maps(&skinny)
        .iter()
        .map(|m| m.l2_promotion)
        .collect();
    assert_eq!(
        promotion,
        [L2Promotion::B128, L2Promotion::B128, L2Promotion::B256]
    );
    // Rows off whole 128-byte lines: every two-consumer tile's operands drop to 128 bytes,
    // D keeps its own; tiles already at 128 (one consumer) keep theirs.
    let straddling = |i: &Instance| -> Vec<_> {
        tensor_maps(i)
            .iter()
            .map(|m| m.l2_promotion_straddling)
            .collect()
    };
    for tile_n in [128, 192, 256] {
        assert_eq!(
            straddling(&inst(DType::Bf16, DType::Bf16, tile_n, Layout::Nt)),
            [Some(L2Promotion::B128), Some(L2Promotion::B128), None],
            "128x{tile_n}"
        );
    }
    assert_eq!(straddling(&skinny), [None, None, None]);
}

#[test]
fn rejects_what_the_engine_lacks() {
    let has = |i: &Instance, field: Field, needle: &str| {
        let p = crate::ops::check(i);
        assert!(
            p.iter().any(|(f, m)| *f == field && m.contains(needle)),
            "{needle:?} at {field:?} not in {p:?}"
        );
    };
    let mut f32_in = inst(DType::F32, DType::F32, 256, Layout::Nn);
    has(&f32_in, Field::Engine, "f16 or bf16 inputs");
    f32_in.params.tf32 = Some(true);
    has(&f32_in, Field::Tf32, "not to engine wgmma");
    let mut t = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    t.params.tile = Some([128, 256, 32]);
    has(&t, Field::Tile, "tile [m, n, 64] with m one of 64, 128");
    t.params.tile = Some([128, 176, 64]);
    has(&t, Field::Tile, "not [128, 176, 64]");
    t.params.tile = Some([192, 256, 64]);
    has(&t, Field::Tile, "not [192, 256, 64]");
    let mut w = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    w.params.warp = Some([64, 64]);
    has(&w, Field::Warp, "does not apply");
    let mut s = inst(DType::Bf16, DType::Bf16, 128, Layout::Nn);
    s.params.stages = Some(1);
    has(&s, Field::Stages, "from 2 to 16");
    // Only sm_90a.
    let mut a = inst(DType::Bf16, DType::Bf16, 256, Layout::Nn);
    a.archs = vec![Arch::Sm80, Arch::Sm90, Arch::Sm90a];
    let archs: Vec<Arch> = crate::ops::arch_problems(&a)
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    assert_eq!(archs, [Arch::Sm80, Arch::Sm90]);
}

#[test]
fn same_arguments_as_the_mma_sync_engine() {
    for epi in [
        vec![],
        vec![Epilogue::Bias, Epilogue::Gelu],
        vec![Epilogue::Scale, Epilogue::Bias, Epilogue::Residual],
    ] {
        let mut w = inst(DType::Bf16, DType::Bf16, 256, Layout::Nt);
        w.epilogue = epi.clone();
        let mut m = w.clone();
        m.params = Params {
            layout: Some(Layout::Nt),
            ..Default::default()
        };
        crate::ops::apply_defaults(Op::Gemm, &mut m.params);
        assert_eq!(crate::ops::signature(&w), crate::ops::signature(&m));
    }
}

#[test]
fn narrow_tile_boxes_and_maps() {
    let map =
        |i: &Instance, name: &str| tensor_maps(i).into_iter().find(|m| m.name == name).unwrap();
    // K-major B (nt): one box of the tile's 96 rows in 128-byte swizzle; 16-bit D in boxes
    // of 32 columns (64-byte rows, 64-byte swizzle), one round through the staging buffer.
    let nt = inst(DType::Bf16, DType::Bf16, 96, Layout::Nt);
    let p = Plan::new(&nt);
    assert!(p.narrow());
    assert_eq!(
        (p.b_box_rows(), p.b_loads(), p.b_stage_bytes()),
        (96, 1, 12288)
    );
    assert_eq!(
        (p.d_box_cols, p.epi_rounds, p.epi_cols, p.d_span()),
        (32, 1, 96, 64)
    );
    let b = map(&nt, "b_map");
    assert_eq!(
        (b.box_dims.to_vec(), b.swizzle),
        (vec![64, 96], Swizzle::B128)
    );
    let d = map(&nt, "d_map");
    assert_eq!(
        (d.box_dims.to_vec(), d.swizzle),
        (vec![32, 64], Swizzle::B64)
    );
    // N-major B (nn): three boxes of 32 columns by 64 k rows, 64-byte swizzle.
    let nn = inst(DType::F16, DType::F16, 96, Layout::Nn);
    let p = Plan::new(&nn);
    assert!(!p.b_tail());
    assert_eq!(
        (p.b_box_rows(), p.b_loads(), p.b_swizzle()),
        (32, 3, Swizzle::B64)
    );
    let b = map(&nn, "b_map");
    assert_eq!(
        (b.box_dims.to_vec(), b.swizzle),
        (vec![32, 64], Swizzle::B64)
    );
    assert_eq!(tensor_maps(&nn).len(), 3);
    // f32 D: 32 columns are 128 bytes, so the usual swizzle.
    let f32_out = inst(DType::Bf16, DType::F32, 96, Layout::Nt);
    let d = map(&f32_out, "d_map");
    assert_eq!(
        (d.box_dims.to_vec(), d.swizzle),
        (vec![32, 64], Swizzle::B128)
    );
    // The other tiles keep their boxes (their binaries must not change).
    let wide = inst(DType::Bf16, DType::Bf16, 192, Layout::Nn);
    let p = Plan::new(&wide);
    assert!(!p.narrow() && !p.b_tail());
    assert_eq!(
        (p.b_box_rows(), p.b_swizzle(), p.d_swizzle()),
        (64, Swizzle::B128, Swizzle::B128)
    );
    assert_eq!(map(&wide, "b_map").box_dims.to_vec(), vec![64, 64]);
    assert_eq!(tensor_maps(&wide).len(), 3);
    // 128x96 with 6 stages fits beside its staging and bias slots.
    let mut s6 = inst(DType::Bf16, DType::Bf16, 96, Layout::Nt);
    s6.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
    s6.params.stages = Some(6);
    assert!(check(&s6).is_empty());
    assert!(Plan::new(&s6).shared_bytes() <= Arch::Sm90a.max_shared_per_block());
}

#[test]
fn narrow_tile_refuses_other_schedules() {
    for (tile_m, pingpong, split_k, multicast) in [
        (256, None, None, None),
        (128, Some(true), None, None),
        (128, None, Some(2), None),
        (64, None, None, Some(2)),
    ] {
        let mut i = inst(DType::Bf16, DType::Bf16, 96, Layout::Nt);
        i.params.tile = Some([tile_m, 96, TILE_K]);
        i.params.pingpong = pingpong;
        i.params.split_k = split_k;
        i.params.multicast = multicast;
        let problems = check(&i);
        assert!(
            problems.iter().any(|(f, m)| *f == Field::Tile
                && m.contains("tile n 96 (not a multiple of 64) takes tile m 64 or 128")),
            "{problems:?}"
        );
    }
    let mut ok = inst(DType::Bf16, DType::Bf16, 96, Layout::Nn);
    ok.params.tile = Some([64, 96, TILE_K]);
    assert!(check(&ok).is_empty());
    let mut wide_pingpong = inst(DType::Bf16, DType::Bf16, 224, Layout::Nn);
    wide_pingpong.params.pingpong = Some(true);
    assert!(check(&wide_pingpong)
        .iter()
        .any(|(f, m)| *f == Field::Tile && m.contains("tile n 224 (not a multiple of 64)")));
    // 160 and 224 were verified with 128 rows only.
    let mut short = inst(DType::Bf16, DType::Bf16, 160, Layout::Nt);
    short.params.tile = Some([64, 160, TILE_K]);
    assert!(check(&short).iter().any(|(f, m)| *f == Field::Tile
        && m.contains("tile n 160 (not a multiple of 64) takes tile m 128 ")));
}

#[test]
fn wider_narrow_tiles_take_a_tail_or_32_column_boxes() {
    let map =
        |i: &Instance, name: &str| tensor_maps(i).into_iter().find(|m| m.name == name).unwrap();
    for (tile_n, stages) in [(160, 5), (224, 3)] {
        let mut nn = inst(DType::Bf16, DType::Bf16, tile_n, Layout::Nn);
        nn.params.stages = Some(stages);
        nn.epilogue = vec![Epilogue::Bias, Epilogue::Gelu];
        let p = Plan::new(&nn);
        assert!(p.narrow());
        let names: Vec<String> = tensor_maps(&nn).into_iter().map(|m| m.name).collect();
        if tile_n == 160 {
            // N-major B: two boxes of 64 columns in 128-byte swizzle, then the last 32
            // columns through the tail map (64-byte swizzle), passed after B's.
            assert!(p.b_tail());
            assert_eq!(
                (
                    p.b_box_rows(),
                    p.b_loads(),
                    p.b_swizzle(),
                    p.b_stage_bytes()
                ),
                (64, 2, Swizzle::B128, 160 * 128)
            );
            assert_eq!(map(&nn, "b_map").box_dims.to_vec(), vec![64, 64]);
            let tail = map(&nn, "b_tail_map");
            assert_eq!(
                (tail.box_dims.to_vec(), tail.swizzle, tail.tensor.as_str()),
                (vec![32, 64], Swizzle::B64, "b")
            );
            assert_eq!(names, ["a_map", "b_map", "b_tail_map", "d_map"]);
        } else {
            // N-major B: tile_n / 32 boxes of 32 columns by 64 k rows, 64-byte swizzle.
            assert!(!p.b_tail());
            assert_eq!(
                (p.b_box_rows(), p.b_loads(), p.b_swizzle()),
                (32, tile_n / 32, Swizzle::B64)
            );
            assert_eq!(map(&nn, "b_map").box_dims.to_vec(), vec![32, 64]);
            assert_eq!(names, ["a_map", "b_map", "d_map"]);
        }
        // 16-bit D: one round of tile_n / 32 boxes of 32 columns.
        assert_eq!(
            (p.d_box_cols, p.epi_rounds, p.epi_cols, p.d_swizzle()),
            (32, 1, tile_n, Swizzle::B64)
        );
        // K-major B: one box of all the tile's rows.
        let nt = inst(DType::Bf16, DType::Bf16, tile_n, Layout::Nt);
        let p = Plan::new(&nt);
        assert_eq!((p.b_box_rows(), p.b_loads()), (tile_n, 1));
        assert_eq!(map(&nt, "b_map").box_dims.to_vec(), vec![64, tile_n]);
        // The deepest ring that fits.
        assert!(check(&nn).is_empty(), "{:?}", check(&nn));
        assert!(Plan::new(&nn).shared_bytes() <= Arch::Sm90a.max_shared_per_block());
        nn.params.stages = Some(stages + 1);
        assert!(Plan::new(&nn).shared_bytes() > Arch::Sm90a.max_shared_per_block());
    }
    // Widths that are not multiples of 32 stay refused.
    let odd = inst(DType::Bf16, DType::Bf16, 144, Layout::Nt);
    assert!(check(&odd).iter().any(|(f, _)| *f == Field::Tile));
}
