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
//! cudarc = { version = "0.19", default-features = false, features = ["std", "driver", "nvrtc", "dynamic-loading", "cuda-13000", "f16"] }
//! half = "2"
//!
//! [build-dependencies]
//! tilegen = "0.1"
//! ```
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

pub mod bindings;
pub mod builder;
pub mod bundle;
pub mod cache;
pub mod call_checks;
pub mod diagnostics;
pub mod env;
pub mod error;
pub mod escape;
pub mod generate;
pub mod gpu;
pub mod hashing;
pub mod launch_rules;
pub mod loader;
pub mod manifest;
pub mod nvrtc;
pub mod ops;
pub mod output;
pub mod render;
pub mod spec;

pub use builder::{compile_specs, Builder};
pub use error::{Error, Result};

/// tilegen's version, recorded in every generated file and in every cache key.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
