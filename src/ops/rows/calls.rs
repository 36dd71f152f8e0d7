//! Row-op calls: `rows * cols` elements in every row-shaped buffer, `cols` in the weight and
//! bias; one pass per row (or a ring of rows) per block; the method picks the one-pass
//! instance with the smallest row limit that fits `cols`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::error::Result;
use crate::launch::{Arg, ArgKind, GridRule};
use crate::manifest::{InstanceEntry, Manifest};
use crate::ops::calls::{self, Emitter, FamilyCalls, GenericCalls, Group, Role};
use crate::spec::model::RowVariant;
use crate::tokens::{ident, u32_lit};

pub static CALLS: FamilyCalls = FamilyCalls {
    requirements,
    niche: calls::generic_niche,
    dispatch_rule: |_, _| {
        "Picks the one-pass instance with the smallest row limit that fits `cols`, else one that takes any length:"
    },
    dispatch_rank,
    emitter: Emitter::Generic(GenericCalls {
        tensor_role,
        shape: &["rows", "cols"],
        extra_sizes: |_| Vec::new(),
        plan_checks,
        pick,
        plan_uses_device: |_| false,
    }),
};

fn tensor_role(arg: &Arg) -> Option<Role> {
    Some(match arg.name.as_str() {
        "weight" | "bias" => Role::PerCol,
        // Any other tensor of a row op is row-shaped (a per-column one under another name
        // would be checked for more than it needs, never less).
        _ => Role::Full,
    })
}

fn requirements(inst: &InstanceEntry) -> String {
    let pointers = calls::quoted_buffers(inst);
    let per_col: Vec<&str> = pointers
        .iter()
        .map(String::as_str)
        .filter(|p| *p == "`weight`" || *p == "`bias`")
        .collect();
    let full: Vec<&str> = pointers
        .iter()
        .map(String::as_str)
        .filter(|p| !per_col.contains(p))
        .collect();
    let full = match full.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => full.concat(),
    };
    let outputs: Vec<String> = inst
        .args
        .iter()
        .filter(|a| a.kind == ArgKind::Out)
        .map(|a| format!("`{}`", a.name))
        .collect();
    format!(
        "{full} must hold at least `rows * cols` elements{}; `cols` must be below 2^31 - 2^21. When `cols` is a multiple of {} (one 16-byte vector), every pointer must start 16-byte aligned.{}",
        if per_col.is_empty() {
            String::new()
        } else {
            format!(" and {} at least `cols`", per_col.join(" and "))
        },
        inst.dtype.per_16_bytes(),
        if outputs.len() > 1 {
            format!(" {} must not overlap each other or any input.", outputs.join(" and "))
        } else {
            String::new()
        }
    )
}

/// Shortest rows first (any length last). Among instances of the same length, the first
/// listed is the one dispatch picks: a ring of staged rows, then a staged row, then a row in
/// registers (the order of their speed on the H200, bench/notes-memory.md).
fn dispatch_rank(inst: &InstanceEntry) -> (u64, u32) {
    match inst.launch.grid.max_cols() {
        Some(c) => {
            let form = match (inst.params.variant, inst.params.stages.unwrap_or(1)) {
                (Some(RowVariant::Staged), s) if s > 1 => 0,
                (Some(RowVariant::Staged), _) => 1,
                _ => 2,
            };
            (c as u64, form)
        }
        None => (u64::MAX, 0),
    }
}

fn plan_checks(inst: &InstanceEntry) -> Result<TokenStream> {
    let GridRule::Rows {
        rows_per_block,
        max_cols,
    } = inst.launch.grid
    else {
        return Err(calls::foreign_rule(inst));
    };
    let (full, per_col) = calls::full_and_per_col(inst)?;
    let threads = u32_lit(inst.launch.threads);
    let rpb = u32_lit(rows_per_block);
    let max = match max_cols {
        Some(c) => {
            let c = u32_lit(c);
            quote!(Some(#c))
        }
        None => quote!(None),
    };
    let vec = u32_lit(inst.dtype.per_16_bytes());
    // Several outputs (add_rmsnorm): none may share memory with another or an input.
    let (outs, ins): (Vec<_>, Vec<_>) = inst
        .args
        .iter()
        .filter(|a| calls::role(inst, a).ok() == Some(Role::Full))
        .partition(|a| a.kind == ArgKind::Out);
    let disjoint = if outs.len() > 1 {
        let outs = outs
            .iter()
            .map(|a| ident(&a.name))
            .collect::<Result<Vec<_>>>()?;
        let ins = ins
            .iter()
            .map(|a| ident(&a.name))
            .collect::<Result<Vec<_>>>()?;
        Some(
            quote!(call_checks::rows_disjoint(rows, cols, &[#(#outs),*], &[#(#ins),*], &[#(#per_col),*])?;),
        )
    } else {
        None
    };
    let shared = calls::with_shared(inst);
    Ok(quote! {
        let dims = call_checks::rows(rows, cols, #max, #vec, &[#(#full),*], &[#(#per_col),*], #rpb, #threads)?;
        #disjoint
        #shared
    })
}

fn pick(m: &Manifest, g: &Group, arms: TokenStream) -> Result<TokenStream> {
    let max = g
        .members
        .iter()
        .map(|&i| match m.instances[i].launch.grid.max_cols() {
            Some(c) => {
                let c = u32_lit(c);
                quote!(Some(#c))
            }
            None => quote!(None),
        });
    Ok(quote!(match call_checks::pick_rows(cols, &[#(#max),*])? { #arms }))
}
