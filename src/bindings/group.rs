//! Which instances share one typed method: those that compute the same thing on the same
//! types (op, dtypes, epilogue chain, affine, layout, tf32) and differ only in how (block,
//! items, variant, tiles), so that a call can be routed to any of them by shape.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::launch::{Arg, ArgKind, GridRule};
use crate::manifest::{InstanceEntry, Manifest};
pub use crate::spec::model::Family;
use crate::spec::model::RowVariant;

/// One typed method and the instances it dispatches among.
#[derive(Debug)]
pub struct Group {
    /// Method name, e.g. `softmax_f32` or `fma_bias_gelu_bf16`.
    pub method: String,
    pub family: Family,
    /// Indices into the manifest's instances (the kernel table), in manifest order.
    pub members: Vec<usize>,
}

impl Group {
    pub fn first<'a>(&self, m: &'a Manifest) -> &'a InstanceEntry {
        &m.instances[self.members[0]]
    }
}

/// The method name of an instance's group: what it computes, then the types.
pub fn method_name(inst: &InstanceEntry) -> String {
    let mut parts: Vec<&str> = vec![inst.op.as_str()];
    let head_dim = inst.params.head_dim.map(|d| format!("d{d}"));
    parts.extend(head_dim.as_deref());
    if let Some(layout) = inst.params.layout {
        parts.push(layout.as_str());
    }
    parts.extend(inst.epilogue.iter().map(|e| e.as_str()));
    if inst.params.affine == Some(false) {
        parts.push("noaffine");
    }
    if inst.params.tf32 == Some(true) {
        parts.push("tf32");
    }
    parts.push(inst.dtype.as_str());
    if inst.out_dtype != inst.dtype {
        parts.push(inst.out_dtype.as_str());
    }
    parts.join("_")
}

/// Names the generated `Kernels` type uses for itself.
const RESERVED: &[&str] = &[
    "load", "context", "device", "load_all", "binary", "kernels", "new",
];

/// Whether the bindings keep `name` for themselves (a method of `Kernels` or a launcher).
pub fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name) || name.starts_with("run_")
}

/// Groups the manifest's instances, sorted by method name. Fails when two instances of a
/// group disagree on their signature, or when a method name collides with another.
pub fn groups(m: &Manifest) -> Result<Vec<Group>> {
    let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, inst) in m.instances.iter().enumerate() {
        by_name.entry(method_name(inst)).or_default().push(i);
    }
    let instance_names: BTreeMap<&str, usize> = m
        .instances
        .iter()
        .enumerate()
        .map(|(i, x)| (x.name.as_str(), i))
        .collect();
    let mut out = Vec::new();
    for (method, members) in by_name {
        let first = &m.instances[members[0]];
        for &i in &members[1..] {
            let other = &m.instances[i];
            if other.args != first.args {
                return Err(Error::internal(format!(
                    "bindings: instances `{}` and `{}` both map to method `{method}` but take different arguments",
                    first.name, other.name
                )));
            }
        }
        // A group method named like an instance would shadow that instance's own method,
        // unless the group is exactly that one instance.
        if let Some(&i) = instance_names.get(method.as_str()) {
            if members != [i] {
                return Err(Error::Usage(format!(
                    "bindings: method `{method}` of {} instances has the name of instance `{}`; rename the spec",
                    members.len(),
                    m.instances[i].name
                )));
            }
        }
        if RESERVED.contains(&method.as_str()) || method.starts_with("run_") {
            return Err(Error::Usage(format!(
                "bindings: method name `{method}` is reserved; rename the spec"
            )));
        }
        check_roles(first)?;
        let mut members = members;
        members.sort_by_key(|&i| (dispatch_rank(&m.instances[i]), m.instances[i].name.clone()));
        out.push(Group {
            method,
            family: first.op.family(),
            members,
        });
    }
    for inst in &m.instances {
        if RESERVED.contains(&inst.name.as_str()) || inst.name.starts_with("run_") {
            return Err(Error::Usage(format!(
                "bindings: instance name `{}` is reserved; rename the spec",
                inst.name
            )));
        }
    }
    Ok(out)
}

/// Order of a group's instances in its dispatch table and docs: shortest rows first (any
/// length last), fewest elements per block first, smallest tiles first. Among row instances
/// of the same length, the first listed is the one dispatch picks: a ring of staged rows,
/// then a staged row, then a row in registers (the order of their speed on the H200,
/// bench/notes-memory.md).
fn dispatch_rank(inst: &InstanceEntry) -> (u64, u32) {
    match inst.launch.grid {
        GridRule::Rows {
            max_cols: Some(c), ..
        } => {
            let form = match (inst.params.variant, inst.params.stages.unwrap_or(1)) {
                (Some(RowVariant::Staged), s) if s > 1 => 0,
                (Some(RowVariant::Staged), _) => 1,
                _ => 2,
            };
            (c as u64, form)
        }
        GridRule::Rows { max_cols: None, .. } => (u64::MAX, 0),
        GridRule::Elements { elems_per_block } => (elems_per_block as u64, 0),
        GridRule::Tiles { tile_m, tile_n } | GridRule::Persistent { tile_m, tile_n, .. } => {
            (tile_m as u64 * tile_n as u64, 0)
        }
        GridRule::QueryTiles { tile_q } => (tile_q as u64, 0),
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

/// Each argument's role, from the op family and the argument's name. Unknown names fail
/// generation, so that a new argument can never be launched unchecked.
pub fn role(inst: &InstanceEntry, arg: &Arg) -> Result<Role> {
    let fam = inst.op.family();
    let r = match (arg.kind, fam, arg.name.as_str()) {
        (ArgKind::Scalar, _, _) if arg.ty == "i64" => Some(Role::Size),
        (ArgKind::Scalar, _, _) if arg.ty == "f32" => Some(Role::Value),
        (ArgKind::Scalar, _, _) => None,
        (_, Family::Elements, "bias") => Some(Role::PerCol),
        (_, Family::Elements, _) => Some(Role::Full),
        (_, Family::Rows, "weight" | "bias") => Some(Role::PerCol),
        // Any other tensor of a row op is row-shaped (a per-column one under another name
        // would be checked for more than it needs, never less).
        (_, Family::Rows, _) => Some(Role::Full),
        (_, Family::Gemm, "a") => Some(Role::Matrix("lda")),
        (_, Family::Gemm, "b") => Some(Role::Matrix("ldb")),
        (_, Family::Gemm, "c") => Some(Role::Matrix("ldc")),
        (_, Family::Gemm, "d") => Some(Role::Matrix("ldd")),
        (_, Family::Gemm, "bias") => Some(Role::GemmBias),
        _ => None,
    };
    r.ok_or_else(|| {
        Error::internal(format!(
            "bindings: argument `{}` ({:?} {}) of `{}` has no known role for op {}; teach src/bindings/group.rs about it",
            arg.name,
            arg.kind,
            crate::escape::shown(&arg.ty),
            inst.name,
            inst.op
        ))
    })
}

fn check_roles(inst: &InstanceEntry) -> Result<()> {
    if inst.op.family() == Family::Attention {
        return super::attention::check_signature(inst);
    }
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
    let required: &[&str] = match inst.op.family() {
        Family::Elements => &["n"],
        Family::Rows => &["rows", "cols"],
        Family::Gemm => &["m", "n", "k"],
        Family::Attention => &[],
    };
    let needs_cols = inst.op.family() == Family::Elements && names.contains(&"bias");
    for r in required.iter().chain(needs_cols.then_some(&"cols")) {
        if !names.contains(r) {
            return Err(Error::internal(format!(
                "bindings: `{}` lacks the size argument `{r}`",
                inst.name
            )));
        }
    }
    Ok(())
}
