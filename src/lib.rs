//! tilegen: CUDA tile kernels from YAML specs.
//!
//! Specs (`specs/*.yaml`) name an op, dtypes, tile sizes and fused epilogues; tilegen expands
//! them through Tera templates into CUDA C, compiles each instance with NVRTC (through cudarc)
//! to PTX and cubins per target arch, caches the results by content, and writes a kernel
//! library: the CUDA C, PTX, cubins, a JSON manifest and typed Rust bindings.
//!
//! The command-line tool and the build-script [`Builder`] run the same core,
//! [`generate::generate`]; a bundle packs the library folder that core writes.
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
//! still compile (their kernels fail at load time). See [`builder`] for the layout under
//! `OUT_DIR` and [`bindings`] for what the generated module holds.
//!
//! A checked-in library (`tilegen generate` writes `generated/`) is used the same way:
//! `include!("../generated/bindings.rs")`.

// The examples are build scripts, whose `fn main` is the point.
#![allow(clippy::needless_doctest_main)]

pub mod bindings;
pub mod builder;
pub mod bundle;
pub mod cache;
pub mod diagnostics;
pub mod env;
pub mod error;
pub mod escape;
pub mod generate;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod hashing;
pub mod manifest;
pub mod nvrtc;
pub mod ops;
pub mod output;
pub mod provision;
pub mod render;
pub mod spec;
pub mod tuning;

pub use builder::{compile_specs, Builder};
pub use error::{Error, Result};
/// The generated bindings' runtime (the `tilegen-runtime` crate): tilegen chooses binaries and
/// reads PTX versions with the same code the bindings run.
pub use tilegen_runtime::{call_checks, launch_rules, loader, tensor_map};

/// tilegen's version, recorded in every generated file and in every cache key.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
