//! Which instances share one typed method: those that compute the same thing on the same
//! types (op, dtypes, epilogue chain, affine, layout, tf32) and differ only in how (block,
//! items, variant, tiles), so that a call can be routed to any of them by shape.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::manifest::{InstanceEntry, Manifest};
use crate::ops::calls;
pub use crate::ops::calls::Group;
pub use crate::spec::model::Family;

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
        calls::check_signature(first)?;
        let mut members = members;
        members.sort_by_key(|&i| {
            let inst = &m.instances[i];
            ((calls::of(inst).dispatch_rank)(inst), inst.name.clone())
        });
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
