//! GEMM: D = epilogue(A·B), A M×K and B K×N, f32 accumulation. f16/bf16 run on the
//! tensor-core path (cp.async multistage pipeline, ldmatrix, mma.sync.m16n8k16); f32 runs on
//! a register-tiled SIMT path, or TF32 tensor cores when `tf32: true`.

use super::{is_pow2_in, Arg, Field, GridRule, Launch, OpInfo};
use crate::spec::model::{Arch, DType, Epilogue, Instance, Layout, Params};

pub static GEMM: OpInfo = OpInfo {
    template: "gemm.cu",
    dtypes: &[DType::F32, DType::F16, DType::Bf16],
    fields: &[
        Field::Tile,
        Field::Warp,
        Field::Stages,
        Field::Layout,
        Field::Tf32,
        Field::OutDtype,
        Field::Epilogue,
    ],
    epilogues: &[
        Epilogue::Scale,
        Epilogue::Bias,
        Epilogue::Relu,
        Epilogue::Gelu,
        Epilogue::GeluErf,
        Epilogue::Silu,
        Epilogue::Residual,
    ],
};

pub fn defaults(p: &mut Params) {
    p.tile.get_or_insert([128, 128, 32]);
    p.warp.get_or_insert([64, 64]);
    p.stages.get_or_insert(3);
    p.layout.get_or_insert(Layout::Nn);
    p.tf32.get_or_insert(false);
}

/// True when the instance runs on tensor cores.
pub fn tensor_cores(inst: &Instance) -> bool {
    inst.dtype != DType::F32 || inst.params.tf32 == Some(true)
}

fn tiles(inst: &Instance) -> ([u32; 3], [u32; 2]) {
    (
        inst.params.tile.unwrap_or([128, 128, 32]),
        inst.params.warp.unwrap_or([64, 64]),
    )
}

fn threads(inst: &Instance) -> u32 {
    let ([tm, tn, _], [wm, wn]) = tiles(inst);
    (tm / wm.max(1)).max(1) * (tn / wn.max(1)).max(1) * 32
}

/// Shared memory per pipeline stage: an A tile and a B tile, each row padded by 16 bytes so
/// that ldmatrix and cp.async touch distinct banks.
fn shared_bytes(inst: &Instance) -> u32 {
    let ([tm, tn, tk], _) = tiles(inst);
    let stages = inst.params.stages.unwrap_or(3);
    let e = inst.dtype.size();
    let pad = 16 / e;
    let a = tm * (tk + pad);
    let b = tk * (tn + pad);
    stages * (a + b) * e
}

pub fn check(inst: &Instance) -> Vec<(Field, String)> {
    let mut out = Vec::new();
    let ([tm, tn, tk], [wm, wn]) = tiles(inst);
    for (v, what) in [(tm, "tile m"), (tn, "tile n")] {
        if !is_pow2_in(v, 16, 256) {
            out.push((Field::Tile, format!("{what} must be a power of two from 16 to 256, not {v}")));
        }
    }
    if !is_pow2_in(tk, 8, 128) {
        out.push((Field::Tile, format!("tile k must be a power of two from 8 to 128, not {tk}")));
    }
    let (min_wm, min_wn) = if tensor_cores(inst) { (16, 8) } else { (8, 8) };
    if !is_pow2_in(wm, min_wm, 128) || !is_pow2_in(wn, min_wn, 128) {
        out.push((
            Field::Warp,
            format!("warp tile must be powers of two, m from {min_wm} and n from {min_wn} to 128, not {wm}x{wn}"),
        ));
    } else if wm > tm || wn > tn {
        out.push((Field::Warp, format!("warp tile {wm}x{wn} does not fit in block tile {tm}x{tn}")));
    } else {
        let warps = (tm / wm) * (tn / wn);
        if !(1..=16).contains(&warps) {
            out.push((Field::Warp, format!("{tm}x{tn} tile over {wm}x{wn} warp tiles makes {warps} warps; 1 to 16 work")));
        }
        let acc = wm * wn / 32;
        if acc > 128 {
            out.push((
                Field::Warp,
                format!("warp tile {wm}x{wn} needs {acc} f32 accumulators per thread, over 128 (it would spill)"),
            ));
        }
    }
    if tensor_cores(inst) && tk < 16 {
        out.push((Field::Tile, format!("tensor-core tiles need k of at least 16, not {tk}")));
    }
    if let Some(s) = inst.params.stages {
        if !(2..=8).contains(&s) {
            out.push((Field::Stages, format!("stages must be from 2 to 8, not {s}")));
        }
    }
    if inst.dtype == DType::F32 && inst.out_dtype != DType::F32 {
        out.push((Field::OutDtype, "an f32 GEMM writes f32".to_string()));
    }
    if inst.dtype != DType::F32 && inst.params.tf32 == Some(true) {
        out.push((Field::Tf32, format!("tf32 applies to f32 inputs, not {}", inst.dtype)));
    }
    out
}

pub fn arch_problem(inst: &Instance, arch: Arch) -> Option<String> {
    (inst.op == crate::spec::model::Op::Gemm && arch.sm() < 80)
        .then(|| format!("gemm uses cp.async and mma.sync m16n8k16, which need sm_80+; {arch} lacks them"))
}

pub fn signature(inst: &Instance) -> Vec<Arg> {
    let (t, o) = (inst.dtype, inst.out_dtype);
    let mut args = vec![Arg::input("a", t), Arg::input("b", t)];
    if inst.has_epilogue(Epilogue::Bias) {
        args.push(Arg::input("bias", o));
    }
    if inst.has_epilogue(Epilogue::Residual) {
        args.push(Arg::input("c", o));
    }
    args.push(Arg::output("d", o));
    for s in ["m", "n", "k", "lda", "ldb"] {
        args.push(Arg::scalar(s, "i64"));
    }
    if inst.has_epilogue(Epilogue::Residual) {
        args.push(Arg::scalar("ldc", "i64"));
    }
    args.push(Arg::scalar("ldd", "i64"));
    if inst.has_epilogue(Epilogue::Scale) {
        args.push(Arg::scalar("alpha", "f32"));
    }
    args
}

pub fn launch(inst: &Instance) -> Launch {
    let ([tm, tn, _], _) = tiles(inst);
    Launch {
        threads: threads(inst),
        grid: GridRule::Tiles { tile_m: tm, tile_n: tn },
        shared_bytes: shared_bytes(inst),
    }
}

pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    let ([tm, tn, tk], [wm, wn]) = tiles(inst);
    let layout = inst.params.layout.unwrap_or(Layout::Nn);
    let s = layout.as_str().as_bytes();
    vec![
        ("tile_m", tm.into()),
        ("tile_n", tn.into()),
        ("tile_k", tk.into()),
        ("warp_m", wm.into()),
        ("warp_n", wn.into()),
        ("warps_m", (tm / wm.max(1)).into()),
        ("warps_n", (tn / wn.max(1)).into()),
        ("stages", inst.params.stages.unwrap_or(3).into()),
        ("a_row_major", (s[0] == b'n').into()),
        ("b_row_major", (s[1] == b'n').into()),
        ("tensor_cores", tensor_cores(inst).into()),
        ("shared_bytes", shared_bytes(inst).into()),
    ]
}
