//! The generated items, as tokens: the kernel table, the `Kernels` type with one typed method
//! per group and per instance, and the `plan` module of pure checks those methods run first.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

use crate::error::Result;
use crate::launch::ArgKind;
use crate::loader::Version;
use crate::manifest::{InstanceEntry, Manifest};
use crate::spec::model::DType;
use crate::tokens::{self, doc_lines, ident, u32_lit, u64_lit, usize_lit};

use super::docs;
use crate::ops::calls::{self, role, Emitter, GenericCalls, Group, Role};

/// An argument's element type (a type that is not a dtype's name is f32, as scalars are).
fn elem_type(ty: &str) -> TokenStream {
    DType::parse(ty).map_or(quote!(f32), tokens::elem_type)
}

/// The table of every kernel and its embedded binaries, in manifest order. `ptx_isa` gives
/// the PTX ISA version of a PTX file (by its manifest path), recorded beside it for the
/// loader's choice.
pub fn kernel_table(
    m: &Manifest,
    ptx_isa: &dyn Fn(&str) -> Result<Version>,
) -> Result<TokenStream> {
    let mut entries = Vec::new();
    for inst in &m.instances {
        let name = &inst.name;
        let entry = &inst.entry_point;
        let shared = u32_lit(inst.launch.shared_bytes);
        let cluster = u32_lit(inst.launch.grid.cluster());
        let mut binaries = Vec::new();
        for t in &inst.targets {
            let arch = t.arch.as_str();
            let (cubin, ptx) = (&t.cubin.path, &t.ptx.path);
            let isa = ptx_isa(ptx)?;
            let (isa_major, isa_minor) = (u32_lit(isa.major), u32_lit(isa.minor));
            binaries.push(quote!(loader::Binary {
                arch: #arch, kind: loader::BinaryKind::Cubin, ptx_isa: None, bytes: include_bytes!(#cubin)
            }));
            binaries.push(quote!(loader::Binary {
                arch: #arch,
                kind: loader::BinaryKind::Ptx,
                ptx_isa: Some(loader::Version::new(#isa_major, #isa_minor)),
                bytes: include_bytes!(#ptx)
            }));
        }
        entries.push(quote!(loader::KernelInfo { name: #name, entry_point: #entry, shared_bytes: #shared, cluster: #cluster, binaries: &[#(#binaries),*] }));
    }
    let maps = tensor_maps_table(m)?;
    Ok(quote! {
        /// Every kernel of the library with its embedded binaries, in manifest order.
        /// [`Plan::kernel`] indexes it.
        #[allow(dead_code)]
        pub static KERNELS: &[loader::KernelInfo] = &[#(#entries),*];
        #maps
    })
}

/// Whether any kernel of the library takes tensor maps.
pub fn has_tensor_maps(m: &Manifest) -> bool {
    m.instances.iter().any(|i| !i.tensor_maps.is_empty())
}

/// Index of argument `name` of `inst` (a pointer argument when `pointer`, else an i64 size),
/// for a tensor map's rule. The manifest was checked before bindings are generated; this
/// refuses anything else instead of emitting a rule that indexes the wrong argument.
fn map_arg(inst: &InstanceEntry, map: &str, name: &str, pointer: bool) -> Result<TokenStream> {
    let found = inst.args.iter().position(|a| {
        a.name == name
            && if pointer {
                a.kind != ArgKind::Scalar
            } else {
                a.kind == ArgKind::Scalar && a.ty == "i64"
            }
    });
    match found {
        Some(i) => {
            let i = usize_lit(i);
            Ok(quote!(tensor_map::SizeArg { arg: #i, name: #name }))
        }
        None => Err(crate::error::Error::internal(format!(
            "bindings: tensor map `{}` of `{}` names `{}`, which is not a {} argument of it",
            crate::escape::shown(map),
            inst.name,
            crate::escape::shown(name),
            if pointer { "pointer" } else { "size" }
        ))),
    }
}

/// One dim of a tensor map's rule ([`crate::launch::tma::instance_dim`]): a size argument
/// ([`map_arg`]) or a constant extent. Refuses anything else, as [`map_arg`] does.
fn map_dim(inst: &InstanceEntry, map: &str, dim: &str) -> Result<TokenStream> {
    use crate::launch::tma::{instance_dim, DimSource};
    let source = instance_dim(dim).map_err(|why| {
        crate::error::Error::internal(format!(
            "bindings: tensor map `{}` of `{}`: dims {why}",
            crate::escape::shown(map),
            inst.name,
        ))
    })?;
    Ok(match source {
        DimSource::Arg(name) => {
            let arg = map_arg(inst, map, name, false)?;
            quote!(tensor_map::MapDim::Arg(#arg))
        }
        DimSource::Const(v) => {
            let v = u64_lit(v);
            quote!(tensor_map::MapDim::Const(#v))
        }
    })
}

/// `TENSOR_MAPS`: how to encode each tensor-map parameter of the kernels that take them,
/// from the call's arguments. Nothing for a library without such kernels (its bindings stay
/// as they were).
fn tensor_maps_table(m: &Manifest) -> Result<Option<TokenStream>> {
    use crate::launch::{Interleave, L2Promotion, OobFill, Swizzle};
    if !has_tensor_maps(m) {
        return Ok(None);
    }
    let mut kernels = Vec::new();
    for (index, inst) in m.instances.iter().enumerate() {
        if inst.tensor_maps.is_empty() {
            continue;
        }
        let mut rules = Vec::new();
        for t in &inst.tensor_maps {
            let name = &t.name;
            let tensor = map_arg(inst, name, &t.tensor, true)?;
            let dims = t
                .dims
                .iter()
                .map(|d| map_dim(inst, name, d))
                .collect::<Result<Vec<_>>>()?;
            let strides = t
                .strides
                .iter()
                .map(|d| map_arg(inst, name, d, false))
                .collect::<Result<Vec<_>>>()?;
            let boxes = t.box_dims.iter().map(|&b| u32_lit(b));
            let dtype = match t.dtype {
                DType::F16 => quote!(F16),
                DType::Bf16 => quote!(Bf16),
                DType::F32 => quote!(F32),
            };
            let swizzle = match t.swizzle {
                Swizzle::None => quote!(None),
                Swizzle::B32 => quote!(B32),
                Swizzle::B64 => quote!(B64),
                Swizzle::B128 => quote!(B128),
            };
            let interleave = match t.interleave {
                Interleave::None => quote!(None),
                Interleave::B16 => quote!(B16),
                Interleave::B32 => quote!(B32),
            };
            let promotion = |p: L2Promotion| match p {
                L2Promotion::None => quote!(None),
                L2Promotion::B64 => quote!(B64),
                L2Promotion::B128 => quote!(B128),
                L2Promotion::B256 => quote!(B256),
            };
            let l2 = promotion(t.l2_promotion);
            let l2_straddling = match t.l2_promotion_straddling.map(promotion) {
                None => quote!(None),
                Some(p) => quote!(Some(tensor_map::L2Promotion::#p)),
            };
            let oob = match t.oob_fill {
                OobFill::Zero => quote!(Zero),
                OobFill::Nan => quote!(Nan),
            };
            rules.push(quote!(tensor_map::TensorMapRule {
                name: #name,
                tensor: #tensor,
                dtype: tensor_map::MapDtype::#dtype,
                dims: &[#(#dims),*],
                strides: &[#(#strides),*],
                box_dims: &[#(#boxes),*],
                swizzle: tensor_map::Swizzle::#swizzle,
                interleave: tensor_map::Interleave::#interleave,
                l2_promotion: tensor_map::L2Promotion::#l2,
                l2_promotion_straddling: #l2_straddling,
                oob_fill: tensor_map::OobFill::#oob,
            }));
        }
        let index = usize_lit(index);
        kernels.push(quote!(tensor_map::KernelMaps { kernel: #index, maps: &[#(#rules),*] }));
    }
    Ok(Some(quote! {
        #[allow(unused_imports)]
        pub use ::tilegen_runtime::tensor_map;
        /// The tensor-map (TMA descriptor) parameters of the kernels that take them: how the
        /// launcher encodes each from the call's arguments, before the kernel's own arguments.
        #[allow(dead_code)]
        pub static TENSOR_MAPS: &[tensor_map::KernelMaps] = &[#(#kernels),*];
    }))
}

/// The `Kernels` type and its fixed methods.
pub fn kernels_type(m: &Manifest) -> TokenStream {
    let new_loader = if has_tensor_maps(m) {
        quote!(loader::Loader::new(ctx, KERNELS)?.with_tensor_maps(TENSOR_MAPS))
    } else {
        quote!(loader::Loader::new(ctx, KERNELS)?)
    };
    let summary = format!(
        " The library's {} kernels in one CUDA context: typed launchers that check every call",
        m.instances.len()
    );
    quote! {
        #[doc = #summary]
        /// before launching, over modules loaded on first use. `Kernels` is `Send + Sync`.
        #[allow(dead_code)]
        #[derive(Debug)]
        pub struct Kernels {
            loader: loader::Loader,
        }

        #[allow(dead_code)]
        impl Kernels {
            /// Prepares the kernels for `ctx`'s device: reads its architecture and loads
            /// nothing yet (each kernel's module loads on its first call).
            pub fn load(ctx: &::std::sync::Arc<::cudarc::driver::CudaContext>) -> Result<Self, Error> {
                Ok(Kernels { loader: #new_loader })
            }

            /// The context the kernels load into.
            pub fn context(&self) -> &::std::sync::Arc<::cudarc::driver::CudaContext> {
                self.loader.context()
            }

            /// The device's architecture and SM count, as read at [`Kernels::load`].
            pub fn device(&self) -> loader::Device {
                self.loader.device()
            }

            /// Loads every kernel now, so that a missing binary or a driver problem shows at
            /// start-up instead of at the first call.
            pub fn load_all(&self) -> Result<(), Error> {
                self.loader.load_all()
            }

            /// The binary the kernel named `kernel` (an instance name) loads on this device,
            /// or None when the library has no such kernel.
            pub fn binary(&self, kernel: &str) -> Option<Result<&'static loader::Binary, Error>> {
                KERNELS.iter().position(|k| k.name == kernel).map(|i| self.loader.binary(i))
            }

            /// Every kernel of the library.
            pub fn kernels() -> &'static [loader::KernelInfo] {
                KERNELS
            }
        }
    }
}

/// A plan function's parameters after `device`: buffers and sizes in kernel order.
fn plan_params(first: &InstanceEntry) -> Result<(Vec<TokenStream>, Vec<Ident>)> {
    let mut decls = Vec::new();
    let mut names = Vec::new();
    for a in &first.args {
        let name = ident(&a.name)?;
        match role(first, a)? {
            Role::Value => continue,
            Role::Size => decls.push(quote!(#name: usize)),
            _ => decls.push(quote!(#name: Buf)),
        }
        names.push(name);
    }
    Ok((decls, names))
}

/// The checks of one instance, as a plan function's body: its family's checks, then its
/// tensor maps'.
fn instance_plan_body(m: &Manifest, index: usize, generic: &GenericCalls) -> Result<TokenStream> {
    let inst = &m.instances[index];
    let kernel = usize_lit(index);
    let dims = (generic.plan_checks)(inst)?;
    // Tensor maps: every map the launcher will encode must be one the driver takes (no
    // empty dim, aligned, strides in range), checked here so the call is refused before it
    // launches, and a group's dispatch moves on to an instance that takes it. (The geometry
    // keeps the name `dims` inside: a short one could hide an argument, such as GEMM's `d`.)
    let maps = (!inst.tensor_maps.is_empty()).then(|| {
        let values = map_values(inst);
        quote! {
            if dims.is_some() {
                ::tilegen_runtime::tensor_map::resolve_all(
                    ::tilegen_runtime::tensor_map::maps_of(super::TENSOR_MAPS, #kernel),
                    &[#(#values),*],
                )?;
            }
        }
    });
    Ok(quote! {
        #dims
        #maps
        Ok(Plan { kernel: #kernel, dims })
    })
}

/// Every argument of `inst` as the `u64` a tensor map's rule reads, in the plan: buffers'
/// addresses, sizes, 0 for scalars that are not sizes.
fn map_values(inst: &InstanceEntry) -> Vec<TokenStream> {
    inst.args
        .iter()
        .map(|a| {
            let name = Ident::new(&a.name, Span::call_site());
            match (a.kind, a.ty.as_str()) {
                (ArgKind::Scalar, "i64") => quote!(#name as u64),
                (ArgKind::Scalar, _) => quote!(0u64),
                _ => quote!(#name.address),
            }
        })
        .collect()
}

/// How a group's plan function picks its instance and calls that instance's plan.
fn group_plan_body(
    m: &Manifest,
    g: &Group,
    args: &[Ident],
    generic: &GenericCalls,
) -> Result<TokenStream> {
    let call = |i: usize| -> Result<TokenStream> {
        let f = ident(&m.instances[i].name)?;
        Ok(quote!(#f(device, #(#args),*)))
    };
    if g.members.len() == 1 {
        return call(g.members[0]);
    }
    let arms = |calls: Vec<TokenStream>| {
        let last = calls.len() - 1;
        let arms = calls.into_iter().enumerate().map(|(i, c)| {
            if i == last {
                quote!(_ => #c,)
            } else {
                let i = usize_lit(i);
                quote!(#i => #c,)
            }
        });
        quote!(#(#arms)*)
    };
    let calls: Vec<TokenStream> = g.members.iter().map(|&i| call(i)).collect::<Result<_>>()?;
    let tuned = super::tuning::tuned_first(m, g, &calls)?;
    let rules = (generic.pick)(m, g, arms(calls))?;
    Ok(quote!(#tuned #rules))
}

/// The `plan` module: one pure function per group and per instance.
pub fn plan_module(m: &Manifest, groups: &[Group]) -> Result<TokenStream> {
    let mut fns = Vec::new();
    for g in groups {
        let generic = match &calls::of(g.first(m)).emitter {
            Emitter::Own(own) => {
                fns.push((own.plan_fns)(m, g)?);
                continue;
            }
            Emitter::Generic(generic) => generic,
        };
        let (decls, names) = plan_params(g.first(m))?;
        let sole = g.members.len() == 1 && m.instances[g.members[0]].name == g.method;
        if !sole {
            let f = ident(&g.method)?;
            let body = group_plan_body(m, g, &names, generic)?;
            let doc = format!(
                " Checks a [`super::Kernels::{}`] call and picks its instance.",
                g.method
            );
            fns.push(quote! {
                #[doc = #doc]
                pub fn #f(device: &Device, #(#decls),*) -> Result<Plan, ArgError> { #body }
            });
        }
        for &i in &g.members {
            let f = ident(&m.instances[i].name)?;
            let body = instance_plan_body(m, i, generic)?;
            let doc = format!(
                " Checks a [`super::Kernels::{}`] call.",
                m.instances[i].name
            );
            let device = if (generic.plan_uses_device)(&m.instances[i]) {
                quote!(device)
            } else {
                quote!(_device)
            };
            fns.push(quote! {
                #[doc = #doc]
                pub fn #f(#device: &Device, #(#decls),*) -> Result<Plan, ArgError> { #body }
            });
        }
    }
    Ok(quote! {
        /// The checks every method runs before it launches, as pure functions of lengths,
        /// device addresses and sizes (no GPU needed): which kernel a call would launch with
        /// which geometry, or why it is refused. `device` is what [`super::Kernels::device`]
        /// reads (compute capability, SM count, driver version): tests pass made-up ones.
        #[allow(dead_code, unused_imports, clippy::too_many_arguments)]
        pub mod plan {
            use ::tilegen_runtime::call_checks::{self, Buf, GemmCall, GemmNeeds, Matrix, Plan};
            use ::tilegen_runtime::launch_rules::{ArgError, LaunchDims};
            use ::tilegen_runtime::loader::Device;
            #(#fns)*
        }
    })
}

/// The typed methods of one group: the dispatching one, one per instance, and the shared
/// launcher they call. (`//` comments inside `quote!` never reach the output, so the
/// reasoning the generated code needs is in its doc comments.)
pub fn group_methods(m: &Manifest, g: &Group) -> Result<TokenStream> {
    let first = g.first(m);
    let run = format_ident!("run_{}", g.method);
    // Method parameters, plan arguments and launch arguments, in kernel order.
    let mut params = Vec::new();
    let mut forward = Vec::new();
    let mut checks = Vec::new();
    let mut lens = Vec::new();
    let mut ptrs = Vec::new();
    let mut plan_types = Vec::new();
    let mut plan_args = Vec::new();
    let mut launch_args = Vec::new();
    let mut to_i64 = Vec::new();
    let mut map_values = Vec::new();
    for a in &first.args {
        let name = ident(&a.name)?;
        forward.push(quote!(#name));
        let r = role(first, a)?;
        match r {
            Role::Size => {
                params.push(quote!(#name: usize));
                plan_types.push(quote!(usize));
                plan_args.push(quote!(#name));
                to_i64.push(quote!(let #name = #name as i64;));
                launch_args.push(quote!(loader::Arg::of(&#name)));
                map_values.push(quote!(#name as u64));
            }
            Role::Value => {
                params.push(quote!(#name: f32));
                launch_args.push(quote!(loader::Arg::of(&#name)));
                map_values.push(quote!(0u64));
            }
            _ => {
                let t = elem_type(&a.ty);
                let arg_name = &a.name;
                let len = format_ident!("{}_len", a.name);
                let ptr = format_ident!("{}_ptr", a.name);
                let sync = format_ident!("_{}_sync", a.name);
                if a.kind == ArgKind::Out {
                    params.push(quote!(#name: &mut impl ::cudarc::driver::DevicePtrMut<#t>));
                    ptrs.push(quote!(let (#ptr, #sync) = #name.device_ptr_mut(stream);));
                } else {
                    params.push(quote!(#name: &impl ::cudarc::driver::DevicePtr<#t>));
                    ptrs.push(quote!(let (#ptr, #sync) = #name.device_ptr(stream);));
                }
                checks
                    .push(quote!(self.loader.same_context(#arg_name, #name.stream().context())?;));
                lens.push(quote!(let #len = #name.len();));
                plan_types.push(quote!(Buf));
                plan_args.push(quote!(call_checks::Buf::of::<#t>(#arg_name, #len, #ptr)));
                launch_args.push(quote!(loader::Arg::of(&#ptr)));
                map_values.push(quote!(#ptr));
            }
        }
    }

    // A family with tensor-map instances launches through `launch_mapped`, which encodes the
    // chosen kernel's maps from the arguments' values (and launches others as before).
    let mapped = g
        .members
        .iter()
        .any(|&i| !m.instances[i].tensor_maps.is_empty());
    let launch = if mapped {
        quote! {
            let values = [#(#map_values),*];
            #(#to_i64)*
            unsafe { self.loader.launch_mapped(plan.kernel, stream, dims, &values, &[#(#launch_args),*]) }?;
        }
    } else {
        quote! {
            #(#to_i64)*
            unsafe { self.loader.launch(plan.kernel, stream, dims, &[#(#launch_args),*]) }?;
        }
    };
    let mut methods = Vec::new();
    let what = docs::what(first);

    // A method named `name` documented by `what`, `niche`, the requirements and the errors,
    // checked by the plan function of the same name.
    let method = |name: &str, niche: Vec<String>, req: String| -> Result<TokenStream> {
        let f = ident(name)?;
        let mut lines = vec![what.clone(), String::new()];
        lines.extend(niche);
        lines.push(String::new());
        lines.push(req);
        lines.extend(calls::ERRORS_DOC.iter().map(|s| s.to_string()));
        let doc = doc_lines(&lines);
        Ok(quote! {
            #doc
            pub fn #f(&self, stream: &::cudarc::driver::CudaStream, #(#params),*) -> Result<(), Error> {
                self.#run(plan::#f, stream, #(#forward),*)
            }
        })
    };
    let sole = g.members.len() == 1 && m.instances[g.members[0]].name == g.method;
    if !sole {
        methods.push(method(
            &g.method,
            docs::dispatch(g, m),
            docs::requirements(first),
        )?);
    }
    for &i in &g.members {
        let inst = &m.instances[i];
        let niche = if sole {
            format!("Instance `{}`: {}.", inst.name, docs::niche(inst))
        } else {
            format!(
                "Always runs instance `{}` ({}); [`Self::{}`] picks among its family by shape.",
                inst.name,
                docs::niche(inst),
                g.method
            )
        };
        methods.push(method(&inst.name, vec![niche], docs::requirements(inst))?);
    }

    Ok(quote! {
        #[allow(dead_code, clippy::too_many_arguments, clippy::type_complexity)]
        impl Kernels {
            #(#methods)*

            /// The launcher behind this family's methods. It launches only after `checks`
            /// (a `plan` function) accepted the call: every buffer holds what the kernel reads
            /// and writes for these sizes and is aligned as its vector accesses need, and every
            /// size fits the kernel's i64. The arguments follow the kernel's signature,
            /// generated from the same manifest, and the `_sync` guards record the accesses for
            /// cudarc's stream ordering: that is what makes the `unsafe` launch sound.
            fn #run(
                &self,
                checks: fn(&loader::Device, #(#plan_types),*) -> Result<Plan, ArgError>,
                stream: &::cudarc::driver::CudaStream,
                #(#params),*
            ) -> Result<(), Error> {
                self.loader.same_context("stream", stream.context())?;
                #(#checks)*
                #(#lens)*
                #(#ptrs)*
                let plan = checks(&self.loader.device(), #(#plan_args),*)?;
                let Some(dims) = plan.dims else {
                    return Ok(());
                };
                #launch
                Ok(())
            }
        }
    })
}
