//! Elementwise calls: `n` elements in every buffer but the bias, a row of `cols` broadcast
//! over them; a grid of `elems_per_block` elements per block; the method picks the instance
//! with the most elements per block that still fills the device.

use proc_macro2::TokenStream;
use quote::quote;

use crate::error::Result;
use crate::launch::{Arg, GridRule};
use crate::manifest::{InstanceEntry, Manifest};
use crate::ops::calls::{self, Emitter, FamilyCalls, GenericCalls, Group, Role};
use crate::tokens::u32_lit;

pub static CALLS: FamilyCalls = FamilyCalls {
    requirements,
    niche: calls::generic_niche,
    dispatch_rule: |_, _| {
        "Picks the instance with the most elements per block that still gives every SM two blocks, else the one with the fewest:"
    },
    dispatch_rank,
    emitter: Emitter::Generic(GenericCalls {
        tensor_role,
        shape: &["n"],
        extra_sizes,
        plan_checks,
        pick,
        plan_uses_device: |_| false,
    }),
};

fn tensor_role(arg: &Arg) -> Option<Role> {
    Some(match arg.name.as_str() {
        "bias" => Role::PerCol,
        _ => Role::Full,
    })
}

/// A broadcast bias comes with its row length.
fn extra_sizes(inst: &InstanceEntry) -> Vec<&'static str> {
    let bias = inst.args.iter().any(|a| a.name == "bias");
    bias.then_some("cols").into_iter().collect()
}

fn requirements(inst: &InstanceEntry) -> String {
    let pointers = calls::quoted_buffers(inst);
    let full: Vec<&str> = pointers
        .iter()
        .map(String::as_str)
        .filter(|p| *p != "`bias`")
        .collect();
    let mut s = format!(
        "{} must hold at least `n` elements and start 16-byte aligned (a view at an offset that is not a multiple of 16 bytes is refused).",
        full.join(", ")
    );
    if pointers.iter().any(|p| p == "`bias`") {
        s += " `cols` ≥ 1 must divide `n`, and `bias` hold at least `cols` elements.";
    }
    s
}

/// Fewest elements per block first.
fn dispatch_rank(inst: &InstanceEntry) -> (u64, u32) {
    (inst.launch.grid.elems_per_block() as u64, 0)
}

fn plan_checks(inst: &InstanceEntry) -> Result<TokenStream> {
    let GridRule::Elements { elems_per_block } = inst.launch.grid else {
        return Err(calls::foreign_rule(inst));
    };
    let (full, per_col) = calls::full_and_per_col(inst)?;
    let epb = u32_lit(elems_per_block);
    let threads = u32_lit(inst.launch.threads);
    let row = per_col
        .first()
        .map(|b| quote!(call_checks::broadcast_row(n, cols, &#b)?;));
    let shared = calls::with_shared(inst);
    Ok(quote! {
        #row
        let dims = call_checks::elements(n, &[#(#full),*], #epb, #threads)?;
        #shared
    })
}

fn pick(m: &Manifest, g: &Group, arms: TokenStream) -> Result<TokenStream> {
    let epb = g
        .members
        .iter()
        .map(|&i| u32_lit(m.instances[i].launch.grid.elems_per_block()));
    Ok(quote!(match call_checks::pick_elements(n, device.sm_count, &[#(#epb),*]) { #arms }))
}
