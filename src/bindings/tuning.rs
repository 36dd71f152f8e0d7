//! Measured dispatch in the bindings: a method with tuning entries asks
//! `tilegen_runtime::tuning::pick` (a GEMM method `pick_tiled`, with its members' tilings) for
//! its instance before its fixed rules, and falls back to them when no entry fits the device
//! and shape, or when the instance picked refuses the call.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use crate::error::Result;
use crate::manifest::{InstanceEntry, Manifest};
use crate::tuning::{dispatch_of, shape_args, tilings_of};

use super::group::Group;

/// Statements that return the tuned instance's plan when the table picks one that accepts the
/// call; empty when the method has no entries. `calls` are the members' plan calls, in order.
pub fn tuned_first(m: &Manifest, g: &Group, calls: &[TokenStream]) -> Result<TokenStream> {
    let Some(args) = shape_args(g.family) else {
        return Ok(TokenStream::new());
    };
    let members: Vec<&InstanceEntry> = g.members.iter().map(|&i| &m.instances[i]).collect();
    let entries = dispatch_of(&m.tuning, &g.method, &members);
    if entries.is_empty() {
        return Ok(TokenStream::new());
    }
    let rows = entries.iter().map(|d| {
        // A string literal: the name is checked text, and quoting escapes it regardless.
        let device = Literal::string(d.device);
        let [major, minor] = d.compute_capability.map(Literal::u32_unsuffixed);
        let sm_count = Literal::u32_unsuffixed(d.sm_count);
        let shape = d.shape.iter().map(|&v| Literal::u64_unsuffixed(v));
        let timed = d.timed.iter().map(|&(member, us)| {
            let member = Literal::usize_unsuffixed(member);
            // Checked finite and not negative when the table was read.
            let us = Literal::f64_unsuffixed(us);
            quote!((#member, #us))
        });
        quote! {
            ::tilegen_runtime::tuning::Tuned {
                device: #device, major: #major, minor: #minor, sm_count: #sm_count,
                shape: &[#(#shape),*], timed: &[#(#timed),*],
            },
        }
    });
    let sizes = args.iter().map(|a| {
        let a = format_ident!("{a}");
        quote!(#a as u64)
    });
    // Only an instance that runs here: the table may come from a GPU with another driver.
    let arms = calls
        .iter()
        .zip(&g.members)
        .enumerate()
        .map(|(i, (c, &k))| {
            let maps = !m.instances[k].tensor_maps.is_empty();
            let i = Literal::usize_unsuffixed(i);
            let k = Literal::usize_unsuffixed(k);
            quote!(#i if super::KERNELS[#k].runs_on(device, #maps) => #c,)
        });
    let pick = match tilings_of(&members) {
        Some(tilings) => {
            let tilings = tilings.iter().map(|t| {
                let [tile_m, tile_n, per_tile, per_sm] =
                    [t.tile_m, t.tile_n, t.blocks_per_tile, t.blocks_per_sm]
                        .map(Literal::u32_unsuffixed);
                quote! {
                    ::tilegen_runtime::tuning::Tiling {
                        tile_m: #tile_m, tile_n: #tile_n, blocks_per_tile: #per_tile, blocks_per_sm: #per_sm,
                    },
                }
            });
            // Whether the fixed rules rank these members by their cost model: a tensor-map
            // member they may pick runs here (`call_checks::gemm_order`).
            let ranked: Vec<Literal> = g
                .members
                .iter()
                .filter(|&&k| m.instances[k].ranked_by_cost())
                .map(|&k| Literal::usize_unsuffixed(k))
                .collect();
            let rules_model = if ranked.is_empty() {
                quote!(false)
            } else {
                quote!([#(#ranked),*].iter().any(|&k: &usize| super::KERNELS[k].runs_on(device, true)))
            };
            quote! {
                const TILINGS: &[::tilegen_runtime::tuning::Tiling] = &[#(#tilings)*];
                let rules_model = #rules_model;
                ::tilegen_runtime::tuning::pick_tiled(device, TUNED, &[#(#sizes),*], TILINGS, rules_model)
            }
        }
        None => quote!(::tilegen_runtime::tuning::pick(device, TUNED, &[#(#sizes),*])),
    };
    Ok(quote! {
        const TUNED: &[::tilegen_runtime::tuning::Tuned<'static>] = &[#(#rows)*];
        let picked = { #pick };
        if let Some(i) = picked {
            let tuned = match i {
                #(#arms)*
                _ => Err(ArgError::NoInstance { op: "tuned", reason: "does not run here" }),
            };
            if let Ok(plan) = tuned {
                return Ok(plan);
            }
        }
    })
}
