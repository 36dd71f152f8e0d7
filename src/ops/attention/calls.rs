//! Attention's typed methods and plan functions. Its calls do not fit the generic emitter:
//! optional outputs and inputs (`lse`, `cu_seqlens`), a shape and per-tensor strides instead
//! of one size per argument, and a dispatch by mask, device and sequence length. The checks
//! themselves live in the runtime (`tilegen_runtime::attention`); this emits the calls.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use crate::error::{Error, Result};
use crate::launch::{Arg, GridRule};
use crate::manifest::{InstanceEntry, Manifest};
use crate::ops;
use crate::ops::calls::{self, Emitter, FamilyCalls, Group, OwnCalls};
use crate::tokens::{doc_lines, elem_type, ident};

pub static CALLS: FamilyCalls = FamilyCalls {
    requirements: |_| requirements(),
    niche,
    dispatch_rule: |_, _| DISPATCH_RULE,
    // Smallest query tile first.
    dispatch_rank: |inst| (inst.launch.grid.query_tile().unwrap_or(0) as u64, 0),
    emitter: Emitter::Own(OwnCalls {
        check_signature,
        methods: group_methods,
        plan_fns,
    }),
};

const DISPATCH_RULE: &str = "Picks an instance with the call's mask that runs on the device: the largest query tile that `seq_q` fills, else the smallest:";

/// The arguments every attention instance takes, in kernel order (`ops::attention::signature`).
fn expected_args(inst: &InstanceEntry) -> Vec<Arg> {
    let spec = crate::manifest::spec_instance(inst);
    ops::attention::signature(&spec)
}

/// Refuses an attention instance whose arguments are not the ones the emitted launcher
/// passes (a bundle's manifest is checked the same way; this keeps the launcher sound).
pub fn check_signature(inst: &InstanceEntry) -> Result<()> {
    if inst.args != expected_args(inst) {
        return Err(Error::internal(format!(
            "bindings: `{}` does not take attention's arguments (q, k, v, o, lse, cu_seqlens_q, cu_seqlens_kv, batch and the other sizes, strides, scale)",
            inst.name
        )));
    }
    // Hopper instances (with tensor maps) are persistent, the portable ones are not.
    let fits = match inst.launch.grid {
        GridRule::QueryTiles { .. } => inst.tensor_maps.is_empty(),
        GridRule::PersistentQueryTiles { .. } => !inst.tensor_maps.is_empty(),
        _ => false,
    };
    if !fits {
        return Err(Error::internal(format!(
            "bindings: `{}` (attention) has launch rule {:?}, not query_tiles (or persistent_query_tiles with tensor maps)",
            inst.name, inst.launch.grid
        )));
    }
    Ok(())
}

fn head_dim(inst: &InstanceEntry) -> u32 {
    inst.params.head_dim.unwrap_or(128)
}

/// One instance, for dispatch lists.
pub fn niche(inst: &InstanceEntry) -> String {
    let p = &inst.params;
    format!(
        "{}{}, {}x{} tiles, {} stages, {} threads",
        if p.causal == Some(true) {
            "causal"
        } else {
            "no mask"
        },
        if ops::attention::wgmma(p) {
            ", Hopper (wgmma, sm_90a only; K/V by TMA; preferred where it runs and seq_kv > 0)"
        } else {
            ""
        },
        p.tile_q.unwrap_or(0),
        p.tile_kv.unwrap_or(0),
        p.stages.unwrap_or(0),
        inst.launch.threads
    )
}

const REQUIREMENTS: &[&str] = &[
    "`q` is [batch, seq_q, heads_q, head_dim], `k` and `v` [batch, seq_kv, heads_kv, head_dim], `o` like `q`, each through its own `strides` (elements; the last dimension contiguous), 16-byte aligned, every stride a multiple of 8 elements; `heads_q` a multiple of `heads_kv` (GQA; MQA with one K/V head); `batch` and `heads_q` at most 65535; any `seq_q`, `seq_kv` below 2^31 (a causal mask is bottom-right aligned: query row r sees keys 0 ..= r + seq_kv - seq_q).",
    "`o` and `lse` overlap no input, and no two of their elements share memory; every element the strides address lies inside its buffer. `lse` (f32) is at `lse[b·lse_batch + h·lse_head + row]` ([batch, heads_q, seq_q] with `AttnStrides::dense`).",
    "`cu_seqlens`: `batch + 1` int32 offsets of each sequence in packed tensors (batch strides 0, `seq_q`/`seq_kv` the longest lengths, `AttnStrides::packed`); with `cu_seqlens_host` (host copies of the same offsets) they are checked (nondecreasing, lengths within `seq_q`/`seq_kv`, rows inside the tensors), without it every tensor must hold `batch * seq_q` (`batch * seq_kv`) rows, inside which the kernel clamps each sequence (wrong offsets give wrong rows, never an access outside the buffers). `scale` defaults to 1/√head_dim.",
];

/// The requirements, as one paragraph.
pub fn requirements() -> String {
    REQUIREMENTS.join(" ")
}

/// The instance as the runtime's checks see it.
fn kernel_lit(inst: &InstanceEntry) -> TokenStream {
    let d = Literal::u32_unsuffixed(head_dim(inst));
    let causal = inst.params.causal == Some(true);
    let tq = Literal::u32_unsuffixed(inst.launch.grid.query_tile().unwrap_or(1));
    let threads = Literal::u32_unsuffixed(inst.launch.threads);
    let shared = Literal::u32_unsuffixed(inst.launch.shared_bytes);
    let grid = match inst.launch.grid {
        GridRule::PersistentQueryTiles {
            pairs, ctas_per_sm, ..
        } => {
            let per_sm = Literal::u32_unsuffixed(ctas_per_sm);
            quote!(::tilegen_runtime::attention::AttnGrid::Persistent { pairs: #pairs, ctas_per_sm: #per_sm })
        }
        _ => quote!(::tilegen_runtime::attention::AttnGrid::QueryTiles),
    };
    quote!(::tilegen_runtime::attention::AttnKernel { head_dim: #d, causal: #causal, tile_q: #tq, threads: #threads, shared_bytes: #shared, grid: #grid })
}

/// The plan functions of a group: the dispatching one (by mask, device and `seq_q`) and one
/// per instance.
pub fn plan_fns(m: &Manifest, g: &Group) -> Result<TokenStream> {
    let params = quote! {
        q: Buf, k: Buf, v: Buf, o: Buf, lse: Option<Buf>,
        varlen: Option<::tilegen_runtime::attention::Varlen<'_>>, shape: &::tilegen_runtime::attention::AttnShape,
        strides: &::tilegen_runtime::attention::AttnStrides, scale: f32
    };
    let mut fns = Vec::new();
    let mut options = Vec::new();
    let mut arms = Vec::new();
    for (pos, &i) in g.members.iter().enumerate() {
        let inst = &m.instances[i];
        let f = ident(&inst.name)?;
        let kernel = kernel_lit(inst);
        let index = Literal::usize_unsuffixed(i);
        let doc = format!(" Checks a [`super::Kernels::{}`] call.", inst.name);
        let maps = if inst.tensor_maps.is_empty() {
            quote!(&[])
        } else {
            quote!(::tilegen_runtime::tensor_map::maps_of(super::TENSOR_MAPS, #index))
        };
        fns.push(quote! {
            #[doc = #doc]
            pub fn #f(device: &Device, #params) -> Result<Plan, ArgError> {
                ::tilegen_runtime::attention::plan(device, #index, &#kernel, #maps, shape, strides, q, k, v, o, lse, varlen, scale)
            }
        });
        let causal = inst.params.causal == Some(true);
        let tq = Literal::u32_unsuffixed(inst.launch.grid.query_tile().unwrap_or(1));
        let hopper = ops::attention::wgmma(&inst.params);
        let maps = !inst.tensor_maps.is_empty();
        let tkv = Literal::u32_unsuffixed(ops::attention::Plan::new(&inst.params).tile_kv);
        options.push(quote!(::tilegen_runtime::attention::AttnOption {
            causal: #causal,
            tile_q: #tq,
            tile_kv: #tkv,
            runs: super::KERNELS[#index].runs_on(device, #maps),
            hopper: #hopper,
        }));
        let pos = Literal::usize_unsuffixed(pos);
        arms.push(quote!(#pos => #f(device, q, k, v, o, lse, varlen, shape, strides, scale),));
    }
    let f = ident(&g.method)?;
    let doc = format!(
        " Checks a [`super::Kernels::{}`] call and picks its instance.",
        g.method
    );
    Ok(quote! {
        #[doc = #doc]
        pub fn #f(device: &Device, #params, causal: bool) -> Result<Plan, ArgError> {
            let options = [#(#options),*];
            match ::tilegen_runtime::attention::pick(causal, shape.seq_q, shape.seq_kv, &options)? {
                #(#arms)*
                _ => Err(ArgError::NoInstance { op: "attention", reason: "for this call" }),
            }
        }
        #(#fns)*
    })
}

/// The typed methods of a group: the dispatching one, one per instance, and the launcher.
pub fn group_methods(m: &Manifest, g: &Group) -> Result<TokenStream> {
    let first = g.first(m);
    check_signature(first)?;
    let t = elem_type(first.dtype);
    let d = Literal::u32_unsuffixed(head_dim(first));
    let run = format_ident!("run_{}", g.method);
    let method = ident(&g.method)?;
    let doc_of = |niche: Vec<String>| {
        let mut lines = vec![(ops::info(first.op).what)(&first.kernel), String::new()];
        lines.extend(niche);
        lines.push(String::new());
        lines.extend(REQUIREMENTS.iter().map(|s| s.to_string()));
        lines.extend(calls::ERRORS_DOC.iter().map(|s| s.to_string()));
        doc_lines(&lines)
    };
    let params = quote! {
        q: &impl ::cudarc::driver::DevicePtr<#t>,
        k: &impl ::cudarc::driver::DevicePtr<#t>,
        v: &impl ::cudarc::driver::DevicePtr<#t>,
        o: &mut impl ::cudarc::driver::DevicePtrMut<#t>,
        lse: Option<&mut ::cudarc::driver::CudaViewMut<'_, f32>>,
        cu_seqlens: Option<(&::cudarc::driver::CudaView<'_, i32>, &::cudarc::driver::CudaView<'_, i32>)>,
        cu_seqlens_host: Option<(&[i32], &[i32])>,
        shape: ::tilegen_runtime::attention::AttnShape,
        strides: &::tilegen_runtime::attention::AttnStrides,
        scale: Option<f32>
    };
    let forward = quote!(
        q,
        k,
        v,
        o,
        lse,
        cu_seqlens,
        cu_seqlens_host,
        shape,
        strides,
        scale
    );
    let mut dispatch = vec![DISPATCH_RULE.to_string()];
    for &i in &g.members {
        let inst = &m.instances[i];
        dispatch.push(format!("- [`Self::{}`]: {}", inst.name, niche(inst)));
    }
    let group_doc = doc_of(dispatch);
    let mut methods = vec![quote! {
        #group_doc
        pub fn #method(&self, stream: &::cudarc::driver::CudaStream, #params, causal: bool) -> Result<(), Error> {
            let device = self.loader.device();
            self.#run(stream, |q, k, v, o, lse, varlen, shape, strides, scale| {
                plan::#method(&device, q, k, v, o, lse, varlen, shape, strides, scale, causal)
            }, #forward)
        }
    }];
    for &i in &g.members {
        let inst = &m.instances[i];
        let f = ident(&inst.name)?;
        let doc = doc_of(vec![format!(
            "Always runs instance `{}` ({}); [`Self::{}`] picks among its family by mask and length.",
            inst.name,
            niche(inst),
            g.method
        )]);
        methods.push(quote! {
            #doc
            pub fn #f(&self, stream: &::cudarc::driver::CudaStream, #params) -> Result<(), Error> {
                let device = self.loader.device();
                self.#run(stream, |q, k, v, o, lse, varlen, shape, strides, scale| {
                    plan::#f(&device, q, k, v, o, lse, varlen, shape, strides, scale)
                }, #forward)
            }
        });
    }
    Ok(quote! {
        #[allow(dead_code, clippy::too_many_arguments, clippy::type_complexity)]
        impl Kernels {
            #(#methods)*

            /// The launcher behind this family's methods. It launches only after `checks` (a
            /// `plan` function) accepted the call: every tensor's strides address elements
            /// inside its buffer, aligned for the kernel's 16-byte accesses, outputs share no
            /// memory with inputs, and the sizes fit the kernel's integers. Absent `lse` and
            /// `cu_seqlens` are passed as null pointers, which the kernel tests. The `_sync`
            /// guards record the accesses for cudarc's stream ordering.
            fn #run(
                &self,
                stream: &::cudarc::driver::CudaStream,
                checks: impl FnOnce(Buf, Buf, Buf, Buf, Option<Buf>, Option<::tilegen_runtime::attention::Varlen<'_>>, &::tilegen_runtime::attention::AttnShape, &::tilegen_runtime::attention::AttnStrides, f32) -> Result<Plan, ArgError>,
                #params
            ) -> Result<(), Error> {
                use ::cudarc::driver::{DevicePtr, DevicePtrMut, DeviceSlice};
                self.loader.same_context("stream", stream.context())?;
                self.loader.same_context("q", q.stream().context())?;
                self.loader.same_context("k", k.stream().context())?;
                self.loader.same_context("v", v.stream().context())?;
                self.loader.same_context("o", o.stream().context())?;
                if let Some(l) = &lse {
                    self.loader.same_context("lse", l.stream().context())?;
                }
                if let Some((cq, ckv)) = &cu_seqlens {
                    self.loader.same_context("cu_seqlens_q", cq.stream().context())?;
                    self.loader.same_context("cu_seqlens_kv", ckv.stream().context())?;
                }
                let scale = scale.unwrap_or_else(|| ::tilegen_runtime::attention::default_scale(#d));
                let (q_len, k_len, v_len, o_len) = (q.len(), k.len(), v.len(), o.len());
                let lse_len = lse.as_ref().map(|l| l.len());
                let (q_ptr, _q_sync) = q.device_ptr(stream);
                let (k_ptr, _k_sync) = k.device_ptr(stream);
                let (v_ptr, _v_sync) = v.device_ptr(stream);
                let (o_ptr, _o_sync) = o.device_ptr_mut(stream);
                let lse_guard = lse.map(|l| l.device_ptr_mut(stream));
                let lse_ptr: u64 = lse_guard.as_ref().map_or(0, |g| g.0);
                let cu_guard = cu_seqlens.map(|(cq, ckv)| (cq.len(), ckv.len(), cq.device_ptr(stream), ckv.device_ptr(stream)));
                let (cu_q_ptr, cu_kv_ptr): (u64, u64) = cu_guard.as_ref().map_or((0, 0), |g| (g.2 .0, g.3 .0));
                let varlen = cu_guard.as_ref().map(|g| ::tilegen_runtime::attention::Varlen {
                    cu_q: call_checks::Buf::of::<i32>("cu_seqlens_q", g.0, g.2 .0),
                    cu_kv: call_checks::Buf::of::<i32>("cu_seqlens_kv", g.1, g.3 .0),
                    host: cu_seqlens_host,
                });
                if cu_guard.is_none() && cu_seqlens_host.is_some() {
                    return Err(Error::Arg(ArgError::NoInstance { op: "attention", reason: "for host cu_seqlens without device cu_seqlens" }));
                }
                let plan = checks(
                    call_checks::Buf::of::<#t>("q", q_len, q_ptr),
                    call_checks::Buf::of::<#t>("k", k_len, k_ptr),
                    call_checks::Buf::of::<#t>("v", v_len, v_ptr),
                    call_checks::Buf::of::<#t>("o", o_len, o_ptr),
                    lse_len.map(|n| call_checks::Buf::of::<f32>("lse", n, lse_ptr)),
                    varlen,
                    &shape,
                    strides,
                    scale,
                )?;
                let Some(dims) = plan.dims else {
                    return Ok(());
                };
                // Every argument as a u64, in the signature's order: the sizes and strides
                // passed as i64, and what a tensor map's rule reads.
                let values = ::tilegen_runtime::attention::arg_values(
                    [q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_kv_ptr],
                    &shape,
                    strides,
                );
                let ints: [i64; 19] = ::core::array::from_fn(|i| values[7 + i] as i64);
                let mut args = vec![
                    loader::Arg::of(&q_ptr), loader::Arg::of(&k_ptr), loader::Arg::of(&v_ptr),
                    loader::Arg::of(&o_ptr), loader::Arg::of(&lse_ptr),
                    loader::Arg::of(&cu_q_ptr), loader::Arg::of(&cu_kv_ptr),
                ];
                args.extend(ints.iter().map(loader::Arg::of));
                args.push(loader::Arg::of(&scale));
                // SAFETY: `plan` checked every buffer against what the kernel touches; a kernel
                // with tensor maps gets them encoded from the same values.
                unsafe { self.loader.launch_mapped(plan.kernel, stream, dims, &values, &args) }?;
                Ok(())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::ArgKind;
    use crate::spec::model::DType;

    #[test]
    fn the_launcher_passes_the_signature_in_order() {
        // The emitted argument list above is written out by hand: it must stay the kernel's.
        let inst = crate::spec::model::Instance {
            kernel: crate::spec::model::KernelConfig {
                name: "attention_bf16".into(),
                op: crate::spec::model::Op::Attention,
                dtype: DType::Bf16,
                out_dtype: DType::Bf16,
                params: crate::spec::model::Params {
                    head_dim: Some(64),
                    ..Default::default()
                },
                epilogue: vec![],
            },
            archs: vec![crate::spec::model::Arch::Sm80],
            origin: crate::spec::model::Origin {
                file: "t.yaml".into(),
                line: 1,
            },
            tuning_candidate: false,
            table_only: false,
        };
        let names: Vec<String> = ops::attention::signature(&inst)
            .into_iter()
            .map(|a| a.name)
            .collect();
        let mut want = vec!["q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_kv"];
        want.extend(["batch", "heads_q", "heads_kv", "seq_q", "seq_kv"]);
        want.extend(ops::attention::STRIDES);
        want.push("scale");
        assert_eq!(names, want);
        let kinds: Vec<ArgKind> = ops::attention::signature(&inst)
            .into_iter()
            .map(|a| a.kind)
            .collect();
        assert_eq!(kinds[4], ArgKind::Out);
        assert_eq!(kinds[6], ArgKind::In);
    }
}
