//! GEMM calls: matrices with leading dimensions, an optional residual `c` and `bias`; a grid
//! of one block per output tile, or a persistent grid on sm_90; the method tries instances
//! that run on the device in `call_checks::gemm_order`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::error::Result;
use crate::launch::{Arg, ArgKind, GridRule};
use crate::manifest::{InstanceEntry, Manifest};
use crate::ops::calls::{self, Emitter, FamilyCalls, GenericCalls, Group, Role};
use crate::spec::model::Layout;
use crate::tokens::{u32_lit, u64_lit, usize_lit};

use super::CallNeeds;

pub static CALLS: FamilyCalls = FamilyCalls {
    requirements,
    niche: calls::generic_niche,
    dispatch_rule,
    dispatch_rank: |inst| {
        let (tm, tn) = inst.launch.grid.output_tile();
        (tm as u64 * tn as u64, 0)
    },
    emitter: Emitter::Generic(GenericCalls {
        tensor_role,
        shape: &["m", "n", "k"],
        extra_sizes: |_| Vec::new(),
        plan_checks,
        pick,
        plan_uses_device: |inst| matches!(inst.launch.grid, GridRule::Persistent { .. }),
    }),
};

fn tensor_role(arg: &Arg) -> Option<Role> {
    match arg.name.as_str() {
        "a" => Some(Role::Matrix("lda")),
        "b" => Some(Role::Matrix("ldb")),
        "c" => Some(Role::Matrix("ldc")),
        "d" => Some(Role::Matrix("ldd")),
        "bias" => Some(Role::GemmBias),
        _ => None,
    }
}

/// The instance's [`CallNeeds`] (a tensor-map instance is a wgmma one).
fn needs(inst: &InstanceEntry) -> CallNeeds {
    super::call_needs(inst.dtype, inst.out_dtype, !inst.tensor_maps.is_empty())
}

fn requirements(inst: &InstanceEntry) -> String {
    let n = needs(inst);
    let bias = if inst.args.iter().any(|a| a.name == "bias") {
        "; `bias` holds `n` elements"
    } else {
        ""
    };
    let matrices = format!(
        "Every matrix holds `(rows - 1) * ld + row length` elements for its leading dimension (≥ its row length) and starts {}-byte aligned; `lda`/`ldb` are multiples of {} and `ldc`/`ldd` of {} (16 bytes of elements){bias}.",
        n.align, n.ld_in_multiple, n.ld_out_multiple,
    );
    if inst.tensor_maps.is_empty() {
        format!("`m`, `n`, `k` ≤ 2^31 - 1 (any values: edges are masked; `k` = 0 writes `epilogue(0)`). {matrices}")
    } else {
        format!(
            "Runs only on sm_90 (compute capability 9.0, H100/H200) with a driver for CUDA 12.0 or newer. `m` ≤ 2^31 - 1, `n` ≤ 2^31 - 1 a multiple of {} (16 bytes of output: the TMA stores write whole 16-byte chunks), 1 ≤ `k` ≤ 2^31 - 1 (edges are zero-filled by the tensor maps; `k` = 0 or a ragged `n` is refused and the family's method runs another instance). {matrices} For speed, keep rows whole 128-byte lines apart (leading dimensions multiples of {} elements, padding the rows if need be): at other pitches TMA reads two lines for most rows of a box, which is much slower.",
            n.n_multiple,
            128 / inst.dtype.size()
        )
    }
}

fn dispatch_rule(m: &Manifest, g: &Group) -> &'static str {
    if g.members
        .iter()
        .any(|&i| !m.instances[i].tensor_maps.is_empty())
    {
        "Tries only instances that run on the device: on sm_90 the tensor-map (wgmma) instances first (but a 16-row mma.sync tile before them for outputs of at most 16 rows that no swap-AB tile covers), cheapest first by `tilegen_runtime::call_checks::wgmma_cost` (the rounds of tiles each SM runs, times what a tile loads and computes, an operand's loads counted twice where its rows are not whole 128-byte lines apart); elsewhere only the others, the largest tile that still gives every SM a tile first, then smaller ones; runs the first whose requirements the call meets:"
    } else {
        "Tries the largest tile that still gives every SM a tile first, then smaller ones, and runs the first whose requirements the call meets:"
    }
}

/// A GEMM instance's checks: the call's operands, then its grid (one block per tile, or a
/// persistent grid of `ctas_per_sm` blocks per SM of the device in clusters of `cluster`).
fn plan_checks(inst: &InstanceEntry) -> Result<TokenStream> {
    let (tile_m, tile_n, persistent) = match inst.launch.grid {
        GridRule::Tiles { tile_m, tile_n } => (tile_m, tile_n, None),
        GridRule::Persistent {
            tile_m,
            tile_n,
            ctas_per_sm,
            cluster,
        } => (tile_m, tile_n, Some((ctas_per_sm, cluster))),
        _ => return Err(calls::foreign_rule(inst)),
    };
    let layout = inst.params.layout.unwrap_or(Layout::Nn);
    let (at, bt) = (layout.a_transposed(), layout.b_transposed());
    let has = |n: &str| {
        inst.args
            .iter()
            .any(|a| a.name == n && a.kind != ArgKind::Scalar)
    };
    let c = if has("c") {
        quote!(Some(Matrix {
            buf: c,
            ld: ldc,
            transposed: false
        }))
    } else {
        quote!(None)
    };
    let bias = if has("bias") {
        quote!(Some(bias))
    } else {
        quote!(None)
    };
    let n = needs(inst);
    let [align, ld_in, ld_out, mm, nm, km] = [
        n.align,
        n.ld_in_multiple,
        n.ld_out_multiple,
        1,
        n.n_multiple,
        1,
    ]
    .map(u64_lit);
    let (tm, tn) = (u32_lit(tile_m), u32_lit(tile_n));
    let threads = u32_lit(inst.launch.threads);
    let shared = u32_lit(inst.launch.shared_bytes);
    let grid = match persistent {
        None => {
            quote!(let dims = call_checks::gemm(&call, &needs, (#tm, #tn), #threads, #shared)?;)
        }
        Some((ctas, cluster)) => {
            let (ctas, cluster) = (u32_lit(ctas), u32_lit(cluster));
            quote!(let dims = call_checks::gemm_persistent(&call, &needs, (#tm, #tn), #ctas, #cluster, device.sm_count, #threads, #shared)?;)
        }
    };
    Ok(quote! {
        let call = GemmCall {
            m, n, k,
            a: Matrix { buf: a, ld: lda, transposed: #at },
            b: Matrix { buf: b, ld: ldb, transposed: #bt },
            c: #c,
            d: Matrix { buf: d, ld: ldd, transposed: false },
            bias: #bias,
        };
        let needs = GemmNeeds {
            align: #align,
            ld_in_multiple: #ld_in,
            ld_out_multiple: #ld_out,
            m_multiple: #mm,
            n_multiple: #nm,
            k_multiple: #km,
        };
        #grid
    })
}

/// Tries the members in `call_checks::gemm_order` and runs the first that takes the call.
fn pick(m: &Manifest, g: &Group, arms: TokenStream) -> Result<TokenStream> {
    let options = g.members.iter().map(|&i| {
        let inst = &m.instances[i];
        let (tm, tn) = inst.launch.grid.output_tile();
        let (tm, tn) = (u32_lit(tm), u32_lit(tn));
        let maps = !inst.tensor_maps.is_empty();
        let index = usize_lit(i);
        // A table-only member is left to the tuning table (`tuned_first`, before the rules).
        let runs = if inst.table_only {
            quote!(false)
        } else {
            quote!(super::KERNELS[#index].runs_on(device, #maps))
        };
        let split_k = u32_lit(inst.launch.grid.cluster());
        quote!(call_checks::GemmOption {
            tile: (#tm, #tn),
            tensor_maps: #maps,
            runs: #runs,
            split_k: #split_k,
        })
    });
    Ok(quote! {
        let mut refused = None;
        let pitches = call_checks::RowPitches::of(&a, lda, &b, ldb);
        for i in call_checks::gemm_order(m, n, k, pitches, device, &[#(#options),*]) {
            match match i { #arms } {
                Ok(plan) => return Ok(plan),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        Err(refused.unwrap_or(ArgError::NoInstance { op: "gemm", reason: "for this call" }))
    })
}
