//! What the bindings ask an op family about its calls: the role each argument plays in the
//! checks, the sizes every instance takes, the sentences of the generated docs (what a call
//! must pass, how a method picks its instance, each instance's niche), the checks an
//! instance's plan function runs and how a group's plan picks its instance. Each family fills
//! in one [`FamilyCalls`] in its `calls` module; the emitter in `bindings/` asks for it
//! through [`super::OpFamily::calls`].

use proc_macro2::{Ident, TokenStream};

use crate::error::{Error, Result};
use crate::launch::{Arg, ArgKind, GridRule};
use crate::manifest::{InstanceEntry, Manifest};
use crate::spec::model::Family;

/// One typed method and the instances it dispatches among.
#[derive(Debug)]
pub struct Group {
    /// Method name, e.g. `softmax_f32` or `fma_bias_gelu_bf16`.
    pub method: String,
    pub family: Family,
    /// Indices into the manifest's instances (the kernel table), in dispatch order.
    pub members: Vec<usize>,
}

impl Group {
    pub fn first<'a>(&self, m: &'a Manifest) -> &'a InstanceEntry {
        &m.instances[self.members[0]]
    }
}

/// What an argument is to the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A buffer covering the whole problem (`n` elements, or `rows * cols`).
    Full,
    /// A row vector of `cols` (row ops) or of the broadcast row (fma bias).
    PerCol,
    /// A GEMM matrix, with the name of its leading dimension.
    Matrix(&'static str),
    /// The GEMM bias, `n` elements.
    GemmBias,
    /// A size passed as i64 (usize in the bindings).
    Size,
    /// A floating-point scalar passed through (eps, alpha).
    Value,
}

/// The errors section every generated method's docs end with.
pub const ERRORS_DOC: [&str; 5] = [
    "",
    "# Errors",
    "[`Error::Arg`] before anything launches when the call breaks a requirement above;",
    "[`Error::WrongContext`] when a buffer or the stream belongs to another context;",
    "[`Error::NoBinary`] or [`Error::Driver`] when the kernel cannot load or launch.",
];

/// A family's answers about its calls.
pub struct FamilyCalls {
    /// What a call must pass, beyond the types, as the docs say it.
    pub requirements: fn(&InstanceEntry) -> String,
    /// One instance's niche, for dispatch lists.
    pub niche: fn(&InstanceEntry) -> String,
    /// The sentence that opens a group method's dispatch list.
    pub dispatch_rule: fn(&Manifest, &Group) -> &'static str,
    /// Where an instance sits in its group's dispatch order (smallest first; ties by name).
    pub dispatch_rank: fn(&InstanceEntry) -> (u64, u32),
    pub emitter: Emitter,
}

/// How a family's methods and plan functions are emitted.
pub enum Emitter {
    /// The generic emitter: a method takes each argument of the kernel in order (buffers and
    /// sizes), and the family supplies the checks.
    Generic(GenericCalls),
    /// Methods and plan functions of the family's own (attention: optional tensors, a shape
    /// and strides instead of one size per argument).
    Own(OwnCalls),
}

pub struct GenericCalls {
    /// The role of a tensor argument, by name (scalars: see [`role`]); None for a name the
    /// family does not know, which fails generation.
    pub tensor_role: fn(&Arg) -> Option<Role>,
    /// The sizes that make a call's shape, which dispatch and tuning tables key on.
    pub shape: &'static [&'static str],
    /// Size arguments an instance takes beyond the shape.
    pub extra_sizes: fn(&InstanceEntry) -> Vec<&'static str>,
    /// The checks of one instance's plan function: tokens that bind `dims` (the launch
    /// geometry, or None when there is nothing to do), dynamic shared memory included.
    pub plan_checks: fn(&InstanceEntry) -> Result<TokenStream>,
    /// A group plan's choice among its members: `arms` maps each member's position to the
    /// call of its plan function (the last as `_`).
    pub pick: fn(&Manifest, &Group, TokenStream) -> Result<TokenStream>,
    /// Whether an instance's plan function reads the device (persistent grids size by its SMs).
    pub plan_uses_device: fn(&InstanceEntry) -> bool,
}

pub struct OwnCalls {
    /// Refuses an instance whose arguments are not the ones the emitted launcher passes.
    pub check_signature: fn(&InstanceEntry) -> Result<()>,
    /// The `Kernels` methods of a group.
    pub methods: fn(&Manifest, &Group) -> Result<TokenStream>,
    /// The group's plan functions.
    pub plan_fns: fn(&Manifest, &Group) -> Result<TokenStream>,
}

/// The family's answers for an instance.
pub fn of(inst: &InstanceEntry) -> &'static FamilyCalls {
    super::family(inst.op).calls
}

/// The sizes that make a call's shape in a family; None for a family that dispatches by
/// other means (attention: by mask and sequence length through its own checks).
pub fn shape_args(family: Family) -> Option<&'static [&'static str]> {
    match &super::of_family(family).calls.emitter {
        Emitter::Generic(g) => Some(g.shape),
        Emitter::Own(_) => None,
    }
}

/// Each argument's role: scalars by type, tensors by the family. Unknown names fail
/// generation, so that a new argument can never be launched unchecked.
pub fn role(inst: &InstanceEntry, arg: &Arg) -> Result<Role> {
    let r = match (arg.kind, &of(inst).emitter) {
        (ArgKind::Scalar, _) if arg.ty == "i64" => Some(Role::Size),
        (ArgKind::Scalar, _) if arg.ty == "f32" => Some(Role::Value),
        (ArgKind::Scalar, _) => None,
        (_, Emitter::Generic(g)) => (g.tensor_role)(arg),
        (_, Emitter::Own(_)) => None,
    };
    r.ok_or_else(|| {
        Error::internal(format!(
            "bindings: argument `{}` ({:?} {}) of `{}` has no known role for op {}; teach its family's `calls` module about it",
            arg.name,
            arg.kind,
            crate::escape::shown(&arg.ty),
            inst.name,
            inst.op
        ))
    })
}

/// Refuses an instance whose arguments its family's emitted checks do not handle: a role for
/// every argument, a leading dimension for every matrix, every size the family takes.
pub fn check_signature(inst: &InstanceEntry) -> Result<()> {
    let generic = match &of(inst).emitter {
        Emitter::Own(own) => return (own.check_signature)(inst),
        Emitter::Generic(g) => g,
    };
    let names: Vec<&str> = inst.args.iter().map(|a| a.name.as_str()).collect();
    for a in &inst.args {
        if let Role::Matrix(ld) = role(inst, a)? {
            if !names.contains(&ld) {
                return Err(Error::internal(format!(
                    "bindings: `{}` takes matrix `{}` but no `{ld}`",
                    inst.name, a.name
                )));
            }
        }
    }
    for r in generic
        .shape
        .iter()
        .copied()
        .chain((generic.extra_sizes)(inst))
    {
        if !names.contains(&r) {
            return Err(Error::internal(format!(
                "bindings: `{}` lacks the size argument `{r}`",
                inst.name
            )));
        }
    }
    Ok(())
}

/// The niche of an instance of a family with one size per argument: its variant, ring,
/// tile, block and items, and what its launch rule says about the sizes it takes.
pub fn generic_niche(inst: &InstanceEntry) -> String {
    let p = &inst.params;
    let mut how = Vec::new();
    if let Some(v) = p.variant {
        how.push(v.as_str().to_string());
    }
    if let (Some(st), None) = (p.stages, p.tile) {
        how.push(format!("ring of {st} rows"));
    }
    if let Some([m, n, k]) = p.tile {
        how.push(format!("tile {m}x{n}x{k}"));
    }
    if let Some(b) = p.block {
        how.push(format!("block {b}"));
    }
    if let Some(i) = p.items {
        how.push(format!("items {i}"));
    }
    match &inst.launch.grid {
        GridRule::Rows {
            max_cols: Some(c), ..
        } => how.push(format!("cols ≤ {c}")),
        GridRule::Rows { max_cols: None, .. } => how.push("any cols".into()),
        GridRule::Elements { elems_per_block } => {
            how.push(format!("{elems_per_block} elements per block"))
        }
        GridRule::Tiles { .. } => {}
        GridRule::QueryTiles { tile_q } => how.push(format!("{tile_q} query rows per block")),
        GridRule::PersistentQueryTiles {
            tile_q,
            pairs,
            ctas_per_sm,
        } => {
            how.push(format!(
            "{tile_q} query rows per work unit{}, persistent grid of {ctas_per_sm} block{} per SM",
            if *pairs { " (causal: two per unit)" } else { "" },
            if *ctas_per_sm == 1 { "" } else { "s" }
        ))
        }
        GridRule::Persistent {
            ctas_per_sm,
            cluster,
            ..
        } => {
            how.push(format!(
                "wgmma fed by TMA, persistent grid of {ctas_per_sm} block{} per SM; runs only on sm_90",
                if *ctas_per_sm == 1 { "" } else { "s" }
            ));
            if *cluster > 1 {
                how.push(format!(
                    "clusters of {cluster} blocks that split K and sum their partial tiles"
                ));
            }
        }
    }
    how.join(", ")
}

/// The instance's whole-problem buffers and its per-column ones, as identifiers.
pub fn full_and_per_col(inst: &InstanceEntry) -> Result<(Vec<Ident>, Vec<Ident>)> {
    let mut full = Vec::new();
    let mut per_col = Vec::new();
    for a in &inst.args {
        match role(inst, a)? {
            Role::Full => full.push(crate::tokens::ident(&a.name)?),
            Role::PerCol => per_col.push(crate::tokens::ident(&a.name)?),
            _ => {}
        }
    }
    Ok((full, per_col))
}

/// The names of an instance's buffers (not scalars), quoted for docs.
pub fn quoted_buffers(inst: &InstanceEntry) -> Vec<String> {
    inst.args
        .iter()
        .filter(|a| a.kind != ArgKind::Scalar)
        .map(|a| format!("`{}`", a.name))
        .collect()
}

/// Dynamic shared memory riding along a plan's geometry, for families whose runtime check
/// does not set it itself.
pub fn with_shared(inst: &InstanceEntry) -> Option<TokenStream> {
    let shared = inst.launch.shared_bytes;
    (shared > 0).then(|| {
        let s = crate::tokens::u32_lit(shared);
        quote::quote!(let dims = dims.map(|d| LaunchDims { shared_bytes: #s, ..d });)
    })
}

/// The error for an instance whose launch rule its family does not use.
pub fn foreign_rule(inst: &InstanceEntry) -> Error {
    Error::internal(format!(
        "bindings: `{}` ({}) has launch rule {:?}, which its op family does not use",
        inst.name, inst.op, inst.launch.grid
    ))
}
