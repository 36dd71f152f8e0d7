//! The CPU reference of an instance for a problem: the op's own (`ops::verification`, each
//! family module gives its ops theirs), asked with the instance's block size.

use crate::manifest::InstanceEntry;
pub use crate::ops::verification::{apply_epilogue as epilogue, Expected, Inputs};
use crate::ops::{self, verification::Call};

use super::problem::Problem;

/// The reference output of an instance for a problem, or an error naming what it does not
/// handle (a reference that silently returned nothing would pass anything).
pub fn compute(inst: &InstanceEntry, p: Problem, inp: &Inputs) -> Result<Expected, String> {
    let Some(v) = &ops::info(inst.op).verification else {
        return Err(format!(
            "{}: {} has no reference for a {p} problem",
            inst.name, inst.op
        ));
    };
    (v.reference)(&Call {
        kernel: &inst.kernel,
        threads: inst.launch.threads,
        problem: p,
        inputs: inp,
    })
}
