//! The op families, one folder each (`elementwise/`, `rows/`, `gemm/`, `attention/`): what a
//! family accepts, how it is checked, its kernels' arguments and launch, how its calls are
//! checked and documented in the bindings (`calls`), and which shapes verify and bench run
//! (`cases`). [`family`] is the registry the spec layer, the renderer, the manifest, the
//! bindings and `gpu/` ask.

pub mod attention;
pub mod calls;
mod elementwise;
pub mod epilogue;
pub mod gemm;
mod rows;
#[cfg(feature = "gpu")]
pub mod verification;

use crate::launch::{Arg, Launch, TensorMap};
use crate::spec::model::{
    Arch, DType, Engine, Epilogue, Family, Instance, KernelConfig, Op, Params,
};

/// What an op family knows about its kernels: what the spec layer, the renderer, the manifest
/// and the bindings ask for. Each family module fills in one table (`FAMILY`) from its own
/// functions; [`family`] is the registry. The `no_*` and `op_template` entries fit families
/// without tensor maps, arch limits or a name head of their own.
pub struct OpFamily {
    /// The static description of each op of the family.
    pub info: fn(Op) -> &'static OpInfo,
    /// Fills in the defaults of the parameters a spec left out.
    pub defaults: fn(Op, &mut Params),
    /// Problems with a resolved instance, each attributed to the field that causes it (the
    /// limits every kernel shares, threads and shared memory, are checked by [`check`]).
    pub check: fn(&Instance) -> Vec<(Field, String)>,
    /// Every parameter the kernel uses, with the value it uses (see [`resolved`]).
    pub resolved: fn(&Instance) -> Params,
    /// The kernel's arguments, in call order.
    pub signature: fn(&Instance) -> Vec<Arg>,
    /// Threads, grid rule and dynamic shared memory.
    pub launch: fn(&Instance) -> Launch,
    /// The template (under `templates/`) that renders the instance.
    pub template: fn(&Instance) -> &'static str,
    /// Tensor-map parameters, in kernel-parameter order (before the `signature` arguments).
    pub tensor_maps: fn(&Instance) -> Vec<TensorMap>,
    /// Op-specific values for the template, beyond the common ones.
    pub template_values: fn(&Instance) -> Vec<(&'static str, serde_json::Value)>,
    /// Why the instance cannot run on an arch, beyond the dtype and NVRTC limits.
    pub arch_problem: fn(&Instance, Arch) -> Option<String>,
    /// The field a spec changes to need less shared memory.
    pub shared_memory_field: Field,
    /// Where `verify` and `bench` take the family's shapes from.
    #[cfg(feature = "gpu")]
    pub cases: &'static verification::FamilyCases,
    /// What the bindings ask about the family's calls: argument roles, checks, docs.
    pub calls: &'static calls::FamilyCalls,
    /// The part of the instance name before the common sizes, from the resolved parameters
    /// (attention's head size, mask and tiles).
    pub name_head: fn(&Params) -> String,
}

/// The registry: the table of an op's family.
pub fn family(op: Op) -> &'static OpFamily {
    of_family(op.family())
}

/// The table of a family.
pub fn of_family(family: Family) -> &'static OpFamily {
    match family {
        Family::Elements => &elementwise::FAMILY,
        Family::Rows => &rows::FAMILY,
        Family::Gemm => &gemm::FAMILY,
        Family::Attention => &attention::FAMILY,
    }
}

/// The op's own template (`OpInfo::template`).
pub(crate) fn op_template(inst: &Instance) -> &'static str {
    info(inst.op).template
}
pub(crate) fn no_tensor_maps(_: &Instance) -> Vec<TensorMap> {
    Vec::new()
}
pub(crate) fn no_arch_problem(_: &Instance, _: Arch) -> Option<String> {
    None
}
pub(crate) fn no_name_head(_: &Params) -> String {
    String::new()
}

/// Kernel fields a spec may give (besides name, op, dtype, archs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    Block,
    Items,
    Variant,
    Affine,
    Tile,
    Warp,
    Stages,
    Layout,
    Tf32,
    OutDtype,
    Epilogue,
    Engine,
    HeadDim,
    Causal,
    TileQ,
    TileKv,
    RowsPerBlock,
    Lean,
    SplitK,
    Multicast,
    Pingpong,
}

impl Field {
    pub const ALL: &'static [Field] = &[
        Field::Block,
        Field::Items,
        Field::Variant,
        Field::Affine,
        Field::Tile,
        Field::Warp,
        Field::Stages,
        Field::Layout,
        Field::Tf32,
        Field::OutDtype,
        Field::Epilogue,
        Field::Engine,
        Field::HeadDim,
        Field::Causal,
        Field::TileQ,
        Field::TileKv,
        Field::RowsPerBlock,
        Field::Lean,
        Field::SplitK,
        Field::Multicast,
        Field::Pingpong,
    ];
    pub fn key(self) -> &'static str {
        match self {
            Field::Block => "block",
            Field::Items => "items",
            Field::Variant => "variant",
            Field::Affine => "affine",
            Field::Tile => "tile",
            Field::Warp => "warp",
            Field::Stages => "stages",
            Field::Layout => "layout",
            Field::Tf32 => "tf32",
            Field::OutDtype => "out_dtype",
            Field::Epilogue => "epilogue",
            Field::Engine => "engine",
            Field::HeadDim => "head_dim",
            Field::Causal => "causal",
            Field::TileQ => "tile_q",
            Field::TileKv => "tile_kv",
            Field::RowsPerBlock => "rows_per_block",
            Field::Lean => "lean",
            Field::SplitK => "split_k",
            Field::Multicast => "multicast",
            Field::Pingpong => "pingpong",
        }
    }
    pub fn from_key(key: &str) -> Option<Field> {
        Field::ALL.iter().copied().find(|f| f.key() == key)
    }
}

/// Static description of one op: what a spec may ask of it, what it computes, and how
/// `verify` checks it.
pub struct OpInfo {
    /// Template file (under `templates/`) that renders the kernel.
    pub template: &'static str,
    pub dtypes: &'static [DType],
    pub fields: &'static [Field],
    pub epilogues: &'static [Epilogue],
    /// What a kernel computes, as the first sentence of its generated method's docs.
    pub what: fn(&KernelConfig) -> String,
    /// The CPU reference and the inputs that test the op; `None` for an op whose cases,
    /// strides and reference are its own (attention: `gpu::attention`).
    #[cfg(feature = "gpu")]
    pub verification: Option<verification::Verification>,
}

pub fn info(op: Op) -> &'static OpInfo {
    (family(op).info)(op)
}

/// Fills in the defaults of an op's parameters that a spec left out.
pub fn apply_defaults(op: Op, params: &mut Params) {
    (family(op).defaults)(op, params)
}

/// Problems with a resolved instance, each attributed to the field that causes it, checked
/// before anything is rendered or compiled.
pub fn check(inst: &Instance) -> Vec<(Field, String)> {
    let mut problems = (family(inst.op).check)(inst);
    if !problems.is_empty() {
        // The launch is derived from values the op has just refused; computed from them it
        // could overflow (a debug build, a build script's, would panic) and tell nothing more.
        return problems;
    }
    let threads = launch(inst).threads;
    if threads > 1024 {
        problems.push((
            Field::Block,
            format!("{threads} threads per block is over the limit of 1024"),
        ));
    }
    let smem = launch(inst).shared_bytes;
    for arch in &inst.archs {
        if smem > arch.max_shared_per_block() {
            problems.push((
                family(inst.op).shared_memory_field,
                format!(
                    "needs {smem} bytes of shared memory per block, over {arch}'s limit of {}",
                    arch.max_shared_per_block()
                ),
            ));
        }
    }
    problems
}

/// Every parameter the instance's kernel uses, each with the value the template and the launch
/// use (the op's default where the spec gave none), and none that it does not use. Names are
/// spelled from this, so writing a default explicitly or leaving it out gives one name.
pub fn resolved(inst: &Instance) -> Params {
    (family(inst.op).resolved)(inst)
}

/// The parameters an instance stores (and its config hash covers): the spec's values with
/// every one dropped whose absence resolves to the same kernel, then the op's defaults. So a
/// default written out and a default left out give one instance: same name, same params,
/// same hash. Fields the op's defaults fill in stay set; the rest are unset at their default
/// (as for a spec that omits them), so templates and launch read what they always read.
/// For a checked instance only: a field that `check` rejects is not dropped silently here.
pub fn canonical(inst: &Instance) -> Params {
    let target = resolved(inst);
    let mut probe = inst.clone();
    apply_defaults(inst.op, &mut probe.params);
    for &field in Field::ALL {
        let mut without = probe.params.clone();
        if !unset(&mut without, field) {
            continue;
        }
        apply_defaults(inst.op, &mut without);
        let kept = std::mem::replace(&mut probe.params, without);
        // A field the op requires (attention's head_dim) stays, though the plan has a default.
        if resolved(&probe) != target || !check(&probe).is_empty() {
            probe.params = kept;
        }
    }
    probe.kernel.params
}

/// Clears one field of the parameters; false when it was not set (or is not a parameter).
fn unset(p: &mut Params, field: Field) -> bool {
    // Exhaustive: a new parameter does not compile until it is cleared below as well.
    let Params {
        block: _,
        items: _,
        variant: _,
        affine: _,
        tile: _,
        warp: _,
        stages: _,
        layout: _,
        tf32: _,
        engine: _,
        head_dim: _,
        causal: _,
        tile_q: _,
        tile_kv: _,
        rows_per_block: _,
        lean: _,
        split_k: _,
        multicast: _,
        pingpong: _,
    } = p;
    match field {
        Field::Block => p.block.take().is_some(),
        Field::Items => p.items.take().is_some(),
        Field::Variant => p.variant.take().is_some(),
        Field::Affine => p.affine.take().is_some(),
        Field::Tile => p.tile.take().is_some(),
        Field::Warp => p.warp.take().is_some(),
        Field::Stages => p.stages.take().is_some(),
        Field::Layout => p.layout.take().is_some(),
        Field::Tf32 => p.tf32.take().is_some(),
        Field::Engine => p.engine.take().is_some(),
        Field::HeadDim => p.head_dim.take().is_some(),
        Field::Causal => p.causal.take().is_some(),
        Field::TileQ => p.tile_q.take().is_some(),
        Field::TileKv => p.tile_kv.take().is_some(),
        Field::RowsPerBlock => p.rows_per_block.take().is_some(),
        Field::Lean => p.lean.take().is_some(),
        Field::SplitK => p.split_k.take().is_some(),
        Field::Multicast => p.multicast.take().is_some(),
        Field::Pingpong => p.pingpong.take().is_some(),
        // Not parameters: the instance holds them.
        Field::OutDtype | Field::Epilogue => false,
    }
}

/// Suffix appended to `NAME_DTYPE[_to_OUT]` to make the instance name, e.g. `_b256_i4`: every
/// resolved size and shape in a fixed order, then the flags that are not their default.
/// A pure function of the instance's own resolved values, so a sweep that grows renames nothing.
pub fn name_suffix(inst: &Instance) -> String {
    let p = resolved(inst);
    let mut s = (family(inst.op).name_head)(&p);
    if let Some(v) = p.variant {
        s += &format!("_{v}");
    }
    if let Some([m, n, k]) = p.tile {
        s += &format!("_{m}x{n}x{k}");
    }
    if let Some([m, n]) = p.warp {
        s += &format!("_w{m}x{n}");
    }
    if let Some(st) = p.stages {
        s += &format!("_s{st}");
    }
    if let Some(l) = p.layout {
        s += &format!("_{l}");
    }
    if let Some(b) = p.block {
        s += &format!("_b{b}");
    }
    if let Some(i) = p.items {
        s += &format!("_i{i}");
    }
    // Only when not the default (rows::resolved leaves the default unset).
    if let Some(r) = p.rows_per_block {
        s += &format!("_r{r}");
    }
    if p.tf32 == Some(true) {
        s += "_tf32";
    }
    if let Some(e) = p.engine.filter(|&e| e != Engine::MmaSync) {
        s += &format!("_{e}");
    }
    if p.affine == Some(false) {
        s += "_noaffine";
    }
    if p.lean == Some(true) {
        s += "_lean";
    }
    // Only above 1 (gemm::resolved leaves 1 unset).
    if let Some(k) = p.split_k {
        s += &format!("_split{k}");
    }
    // Only above 1, likewise.
    if let Some(c) = p.multicast {
        s += &format!("_mc{c}");
    }
    if p.pingpong == Some(true) {
        s += "_pp";
    }
    for e in &inst.epilogue {
        s += "_";
        s += e.as_str();
    }
    s
}

/// The template (under `templates/`) that renders the instance.
pub fn template(inst: &Instance) -> &'static str {
    (family(inst.op).template)(inst)
}

pub fn signature(inst: &Instance) -> Vec<Arg> {
    (family(inst.op).signature)(inst)
}

pub fn launch(inst: &Instance) -> Launch {
    (family(inst.op).launch)(inst)
}

/// The instance's tensor-map parameters, in kernel-parameter order (they come before the
/// `signature` arguments); empty for kernels without TMA.
pub fn tensor_maps(inst: &Instance) -> Vec<TensorMap> {
    (family(inst.op).tensor_maps)(inst)
}

/// The kernel's own parameters passed on to the device function a template's kernel calls, in
/// that function's order: each `(name, stand-in)` by name where the kernel has a parameter of
/// that name (an argument or a tensor map), else its stand-in (null, 0, 1, another map), so a
/// template names operands its instance lacks without Tera branches.
pub(crate) fn forward_args(inst: &Instance, order: &[(&str, &str)]) -> String {
    let (args, maps) = (signature(inst), tensor_maps(inst));
    let has =
        |name: &str| args.iter().any(|a| a.name == name) || maps.iter().any(|m| m.name == name);
    order
        .iter()
        .map(|&(name, stand_in)| if has(name) { name } else { stand_in })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line naming a tensor map for the rendered kernel's header: element type, tensor, dims,
/// strides and box.
pub fn map_summary(m: &TensorMap) -> String {
    let list = |v: &[String]| v.join(", ");
    let boxes: Vec<String> = m.box_dims.iter().map(|b| b.to_string()).collect();
    format!(
        "{}: {} over {}, dims [{}], strides [{}], box [{}]",
        m.name,
        m.dtype,
        m.tensor,
        list(&m.dims),
        list(&m.strides),
        list(&boxes)
    )
}

/// The instance's epilogue chain as CUDA statements for its template (empty for ops without
/// a chain; a template may still define the chain's function).
pub fn epilogue_code(inst: &Instance) -> Vec<String> {
    epilogue::Chain::of(inst.op)
        .map(|chain| {
            let halved = inst.op == Op::Gemm && gemm::halves_bias(inst);
            epilogue::cuda_lines(&inst.epilogue, chain, inst.out_dtype, halved)
        })
        .unwrap_or_default()
}

/// Op-specific values for the template, beyond the common ones.
pub fn template_values(inst: &Instance) -> Vec<(&'static str, serde_json::Value)> {
    (family(inst.op).template_values)(inst)
}

pub(crate) fn is_pow2_in(v: u32, lo: u32, hi: u32) -> bool {
    v.is_power_of_two() && (lo..=hi).contains(&v)
}

/// The problem with a field whose value `v` must be a power of two from `lo` to `hi`.
pub(crate) fn pow2_problem(field: Field, v: u32, lo: u32, hi: u32) -> Option<(Field, String)> {
    (!is_pow2_in(v, lo, hi)).then(|| {
        let key = field.key();
        (
            field,
            format!("{key} must be a power of two from {lo} to {hi}, not {v}"),
        )
    })
}

/// Archs of the instance that lack something it needs, with the reason.
pub fn arch_problems(inst: &Instance) -> Vec<(Arch, String)> {
    let mut out = Vec::new();
    for &arch in &inst.archs {
        if arch.sm() < crate::nvrtc::OLDEST_TARGET_SM {
            out.push((
                arch,
                format!(
                    "{arch} is not a target of NVRTC {} (the release tilegen pins; CUDA 13 dropped \
                     Volta): use sm_{} or newer",
                    crate::provision::pinned_release(),
                    crate::nvrtc::OLDEST_TARGET_SM
                ),
            ));
            continue;
        }
        for dt in [inst.dtype, inst.out_dtype] {
            if arch.sm() < dt.min_sm() {
                out.push((
                    arch,
                    format!("{dt} needs sm_{}+, and {arch} lacks it", dt.min_sm()),
                ));
            }
        }
        if let Some(reason) = (family(inst.op).arch_problem)(inst, arch) {
            out.push((arch, reason));
        }
    }
    out.dedup();
    out
}
