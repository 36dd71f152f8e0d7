//! tilegen: CUDA tile kernels from YAML specs.
//!
//! Specs (`specs/*.yaml`) name an op, dtypes, tile sizes and fused epilogues; tilegen expands
//! them through Tera templates into CUDA C, compiles each instance with NVRTC (through cudarc)
//! to PTX and cubins per target arch, caches the results by content, and writes a kernel
//! library: the CUDA C, PTX, cubins, a JSON manifest and typed Rust bindings.
//!
//! The command-line tool, the build-script [`Builder`] and bundle creation all run the same
//! core, [`generate::generate`].

pub mod bindings;
pub mod cache;
pub mod diagnostics;
pub mod env;
pub mod error;
pub mod generate;
pub mod hashing;
pub mod manifest;
pub mod nvrtc;
pub mod ops;
pub mod output;
pub mod render;
pub mod spec;

pub use error::{Error, Result};

/// tilegen's version, recorded in every generated file and in every cache key.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
