//! tilegen: CUDA tile kernels from YAML specs.
//!
//! Specs (`specs/*.yaml`) name an op, dtypes, tile sizes and fused epilogues; tilegen expands
//! them through Tera templates into CUDA C, compiles each instance with NVRTC (through cudarc)
//! to PTX and cubins per target arch, caches the results by content, and writes a kernel
//! library: the CUDA C, PTX, cubins, a JSON manifest and typed Rust bindings.
//!
//! The command-line tool and the build-script [`Builder`] run the same core,
//! [`generate()`] (given [`Options`], it reports [`Event`]s); a [`bundle`] packs the library
//! folder that core writes, and [`Manifest`] reads its `manifest.json`.
//!
//! # From a build script
//!
//! The whole cycle, as `examples/demo` does it. `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! tilegen-runtime = "0.1"   # what the generated bindings import
//! cudarc = { version = "0.19", default-features = false, features = ["std", "driver", "f16", "cuda-13000"] }
//! half = "2"                # when a kernel takes f16 or bf16
//!
//! [build-dependencies]
//! tilegen = "0.1"           # default features: no command line, no GPU code, no signing
//! ```
//!
//! The bindings need only cudarc's driver API (`driver`, and `f16` for 16-bit kernels), a CUDA
//! version (`cuda-13000`, …, or `cuda-version-from-build-system`) and one way of finding the
//! driver, which the crate that owns the build chooses, once:
//!
//! - `dynamic-loading` (or none: `tilegen-runtime` asks for cudarc's
//!   `fallback-dynamic-loading`): `libcuda` is opened at run time, so the crate builds on a
//!   machine without CUDA;
//! - `dynamic-linking`: `libcuda` is linked at build time, as candle does. Do not add
//!   `dynamic-loading` beside it: cudarc refuses to build with both.
//!
//! tilegen's own cudarc (NVRTC, loaded at run time) is a build dependency, whose features stay
//! apart from the normal dependencies' under cargo's feature resolver 2 (the default since
//! edition 2021; a workspace on resolver 1 would merge them).
//!
//! `build.rs` generates the library of `specs/` into `$OUT_DIR/tilegen` (NVRTC is needed, a
//! GPU is not; compiled kernels come from the shared cache when they were compiled before):
//!
//! ```no_run
//! fn main() {
//!     tilegen::compile_specs("specs");
//!     // or, with settings: tilegen::Builder::new().specs("specs").archs(["sm_90"]).compile();
//! }
//! ```
//!
//! `src/main.rs` includes the bindings, which embed every kernel binary (nothing is read from
//! disk and NVRTC is not needed at run time), and calls the typed methods:
//!
//! ```ignore
//! mod kernels {
//!     include!(concat!(env!("OUT_DIR"), "/tilegen/bindings.rs"));
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let ctx = cudarc::driver::CudaContext::new(0)?;
//!     let stream = ctx.default_stream();
//!     let k = kernels::Kernels::load(&ctx)?; // picks each kernel's binary for this GPU
//!     let (rows, cols) = (4096, 1000);
//!     let x = stream.clone_htod(&vec![1.0f32; rows * cols])?;
//!     let mut y = stream.alloc_zeros::<f32>(rows * cols)?;
//!     // Checks lengths, alignment and limits, picks the instance for `cols`, launches.
//!     k.softmax_f32(&stream, &x, &mut y, rows, cols)?;
//!     Ok(())
//! }
//! ```
//!
//! A bad call (a short buffer, a misaligned view, rows longer than any instance takes)
//! returns `kernels::Error::Arg` and launches nothing; `kernels::plan` holds the same checks
//! as pure functions. Under `DOCS_RS` the build script compiles nothing and the bindings
//! still compile (their kernels fail at load time).
//!
//! A checked-in library (`tilegen generate` writes `generated/`) is used the same way:
//! `include!("../generated/bindings.rs")`.
//!
//! # Layout under `OUT_DIR`
//!
//! ```text
//! $OUT_DIR/tilegen/            the library (Builder::out_dir changes it)
//!     bindings.rs              include! this
//!     manifest.json            every instance, its signature, launch rule and files
//!     kernels/<name>.cu        rendered CUDA C
//!     kernels/<name>.<arch>.ptx, kernels/<name>.<arch>.cubin
//! ```
//!
//! Compiled kernels are also kept in the shared compile cache (`TILEGEN_CACHE_DIR`, else the
//! user cache folder), so a clean build recompiles nothing that was compiled before.
//! [`Manifest`] reads `manifest.json`; [`bundle`] packs and verifies a library folder.
//!
//! # Cargo conventions
//!
//! - What deserves a human's eye is printed as `cargo:warning=`, one line each, each once: a
//!   corrupt cache entry that was rebuilt, a cache that cannot be used, NVRTC warnings, and
//!   kernels that spill registers to local memory.
//! - `TILEGEN_ARCHS` (`sm_80,sm_90`) replaces the archs of the specs and of
//!   [`Builder::archs`], like `CUDA_COMPUTE_CAP` for other CUDA build crates.
//! - Parallel compiles take cargo's jobserver tokens: one compile runs on the build script's
//!   own token, one more for each token free when compiling starts (up to `NUM_JOBS`), so a
//!   workspace build does not run more jobs than `cargo -j` allows.
//!
//! # The generated bindings
//!
//! `bindings.rs` is one module text generated from the manifest: a header (`@generated`,
//! tilegen's version, a hash of the text), re-exports of the runtime, a compile-time check
//! that the runtime can run these bindings, `KERNELS` (each kernel's binaries through
//! `include_bytes!("kernels/…")`, paths relative to `bindings.rs`), `Kernels` with one method
//! per op and dtype (dispatching by shape) and one per instance, and `plan`, the pure checks
//! those methods run before launching. Everything else comes from the `tilegen-runtime`
//! crate ([`launch_rules`], [`call_checks`], [`loader`] here), so two generated libraries
//! can live in one crate. The bindings have no inner attributes: they can be `include!`d
//! inside a module.

// The examples are build scripts, whose `fn main` is the point.
#![allow(clippy::needless_doctest_main)]

// Every module is private: the API is the `pub use` list below (and the `bundle` module),
// chosen for build scripts and for programs that read libraries and bundles. The `tilegen`
// binary and this repository's tests also reach the internals; rather than fold the command
// line into the library (and its clap types into every build script's docs), they go through
// one hidden module, `__internal`, which mirrors the private modules and is no API.
mod bindings;
mod builder;
pub mod bundle;
mod cache;
mod diagnostics;
mod env;
mod error;
mod escape;
mod generate;
#[cfg(feature = "gpu")]
mod gpu;
mod hashing;
mod input;
mod launch;
mod manifest;
mod nvrtc;
mod ops;
mod output;
mod provision;
mod render;
mod spec;
mod tokens;
mod tuning;

// Build scripts.
pub use builder::{compile_specs, Builder};

// Errors.
pub use diagnostics::{Diagnostic, Diagnostics, Mark};
pub use error::{Error, Result};

// The generator core, which `Builder` and `tilegen generate` run.
pub use generate::{generate, Event, Options, Report, Source as CompileSource};

// A library's `manifest.json` and what its entries are made of.
pub use launch::{
    Arg, ArgKind, GridRule, Interleave, L2Promotion, Launch, OobFill, Swizzle, TensorMap,
};
pub use manifest::{FileRef, InstanceEntry, Manifest, Target};
pub use nvrtc::Resources;
pub use tuning::{DeviceKey, TuningEntry, TuningTable};

// The spec vocabulary (what a manifest entry records of its spec).
pub use spec::{
    Arch, DType, Engine, Epilogue, KernelConfig, Layout, Op, Origin, Params, RowVariant,
};

/// The generated bindings' runtime (the `tilegen-runtime` crate): tilegen chooses binaries and
/// reads PTX versions with the same code the bindings run.
pub use tilegen_runtime::{call_checks, launch_rules, loader, tensor_map};

/// Unstable internals for the `tilegen` binary and this repository's tests: not part of the
/// API, not covered by semver, changed in any release. Each module re-exports the public items
/// of the private module of the same name.
#[doc(hidden)]
pub mod __internal {
    pub mod bindings {
        pub use crate::bindings::*;
    }
    pub mod builder {
        pub use crate::builder::*;
    }
    pub mod bundle {
        pub use crate::bundle::*;
        pub mod archive {
            pub use crate::bundle::archive::*;
        }
        pub mod manifest {
            pub use crate::bundle::manifest::*;
        }
        pub mod sign {
            pub use crate::bundle::sign::*;
        }
        pub mod stage {
            pub use crate::bundle::stage::*;
        }
        pub mod unpack {
            pub use crate::bundle::unpack::*;
        }
        pub mod verify {
            pub use crate::bundle::verify::*;
        }
    }
    pub mod cache {
        pub use crate::cache::*;
    }
    pub mod diagnostics {
        pub use crate::diagnostics::*;
    }
    pub mod env {
        pub use crate::env::*;
    }
    pub mod error {
        pub use crate::error::*;
    }
    pub mod escape {
        pub use crate::escape::*;
    }
    pub mod generate {
        pub use crate::generate::*;
    }
    #[cfg(feature = "gpu")]
    pub mod gpu {
        pub use crate::gpu::*;
    }
    pub mod hashing {
        pub use crate::hashing::*;
    }
    pub mod launch {
        pub use crate::launch::*;
    }
    pub mod manifest {
        pub use crate::manifest::*;
    }
    pub mod nvrtc {
        pub use crate::nvrtc::*;
    }
    pub mod ops {
        pub use crate::ops::*;
    }
    pub mod output {
        pub use crate::output::*;
    }
    pub mod provision {
        pub use crate::provision::*;
    }
    pub mod render {
        pub use crate::render::*;
    }
    pub mod spec {
        pub use crate::spec::*;
    }
    pub mod tuning {
        pub use crate::tuning::*;
    }
}

/// tilegen's version, recorded in every generated file and in every cache key.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
