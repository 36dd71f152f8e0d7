//! The runtime of the Rust bindings that [tilegen](https://crates.io/crates/tilegen) generates
//! for a kernel library: which embedded binary runs on the device and loading it
//! ([`loader`]), the checks every call passes before it launches ([`call_checks`]) and the
//! launch geometry of each kind of kernel ([`launch_rules`]), and the tensor maps (TMA
//! descriptors) of the kernels that take them ([`tensor_map`]).
//!
//! A generated `bindings.rs` holds only what is particular to its library (the kernel table
//! with the binaries embedded, typed methods, their `plan` checks) and imports everything else
//! from here, so the rules exist once, are tested here, and two generated libraries in one
//! crate share the same [`loader::Error`], [`call_checks::Buf`] and the rest. tilegen compiles
//! the same modules (without the `cuda` feature) for `tilegen verify` and `bench`.
//!
//! # Using it
//!
//! A crate that includes generated bindings depends on this crate, `cudarc` and `half`:
//!
//! ```toml
//! [dependencies]
//! tilegen-runtime = "0.1"
//! cudarc = { version = "0.19", default-features = false, features = ["std", "driver", "f16", "cuda-13000"] }
//! half = "2"
//!
//! [build-dependencies]
//! tilegen = "0.1"
//! ```
//!
//! Only cudarc's driver API is used (no NVRTC at run time: the kernels are compiled). cudarc
//! needs two choices made somewhere in the build, and this crate makes neither for you:
//!
//! - **how the driver is found**: with no loading feature anywhere, cudarc loads `libcuda` when
//!   it is first used (this crate turns on cudarc's `fallback-dynamic-loading`, which only
//!   applies when nothing else chose). The two valid choices are `dynamic-loading` (a binary
//!   that starts without a driver and reports its absence as an error) or `dynamic-linking`
//!   (linked against `libcuda` at build time, as candle does). Never both: cudarc refuses to
//!   build with both, so follow whatever the rest of your dependency graph already uses.
//! - **the CUDA version of its bindings**: one `cuda-XXXXX` feature (e.g. `cuda-13000`,
//!   `cuda-12080`), or `cuda-version-from-build-system` to ask the installed toolkit, or the
//!   `CUDARC_CUDA_VERSION` variable. It sets which driver functions cudarc declares, not which
//!   drivers the kernels run on: the loader picks each kernel's binary for the driver it finds
//!   (a cubin for the device, else PTX whose ISA version that driver accepts).
//!
//! # Versions
//!
//! Generated bindings check at compile time that this crate can run them
//! (`const _: () = assert!(tilegen_runtime::compatible(tilegen_runtime::VERSION, "…"))` with
//! the version of the tilegen that generated them): a mismatch stops the build with a message
//! naming both, instead of a confusing type error or a wrong launch. [`compatible`] states the
//! rule: the same `MAJOR.MINOR` (the same `MAJOR` from 1.0 on) and a runtime no older than the
//! generator. Keep `tilegen-runtime` in `[dependencies]` at the version of `tilegen` in
//! `[build-dependencies]`.
//!
//! They also start with `tilegen_runtime::check_build!()`, which stops the build with one
//! message naming the working dependency line when the crate's `cudarc` is not the one this
//! crate uses (another version: the types would not match) or this crate's `cuda` feature is
//! off. The cudarc features the bindings need (`std`, `driver`, `f16`) are turned on here,
//! and cargo unifies features, so they cannot be missing from a cudarc 0.19.
//!
//! # Features
//!
//! - `cuda` (default): [`loader::Loader`], [`loader::Error`] and launching, through cudarc's
//!   driver API. Without it the crate is the pure rules only and needs no cudarc.

pub mod attention;
pub mod call_checks;
#[cfg(feature = "cuda")]
mod cuda;
pub mod launch_rules;
pub mod loader;
pub mod tensor_map;
pub mod tuning;

/// This crate's version. Generated bindings compare it with the version of the tilegen that
/// generated them ([`compatible`]).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Generated bindings start with `tilegen_runtime::check_build!();`, which stops a build
/// that cannot run them with one message naming the dependency line that works, before the
/// errors that would follow. This crate turns on the cudarc features the bindings need
/// (`std`, `driver`, `f16`), and cargo unifies features, so a cudarc of the same version in
/// the user's crate always has them; what can still go wrong is a `cudarc` of another
/// version (two cudarc crates, whose types do not mix) and this crate without its `cuda`
/// feature. cudarc without a CUDA version feature fails in cudarc's own build, before any
/// bindings are compiled, with cudarc's message.
#[cfg(feature = "cuda")]
#[doc(hidden)]
#[macro_export]
macro_rules! check_build {
    () => {
        const _: () = $crate::build_check::same_cudarc::<::cudarc::driver::CudaStream>();
    };
}

#[cfg(not(feature = "cuda"))]
#[doc(hidden)]
#[macro_export]
macro_rules! check_build {
    () => {
        ::core::compile_error!(
            "tilegen bindings launch kernels through tilegen-runtime's `cuda` feature, which is off: \
             in [dependencies] write `tilegen-runtime = \"0.1\"` (its default features) and \
             `cudarc = { version = \"0.19\", default-features = false, features = [\"std\", \"driver\", \"f16\", \"cuda-13000\"] }`"
        );
    };
}

/// The type check behind [`crate::check_build!`]: the crate's `cudarc` must be the one this crate
/// is built with.
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub mod build_check {
    #[diagnostic::on_unimplemented(
        message = "this crate's `cudarc` is not the cudarc 0.19 that tilegen-runtime uses, so the bindings' types would not match",
        label = "from another cudarc version",
        note = "in [dependencies] write `cudarc = {{ version = \"0.19\", default-features = false, features = [\"std\", \"driver\", \"f16\", \"cuda-13000\"] }}` (any `cuda-XXXXX` version feature works)"
    )]
    pub trait SameCudarc {}
    impl SameCudarc for cudarc::driver::CudaStream {}
    pub const fn same_cudarc<T: SameCudarc>() {}
}

/// Whether a runtime of version `runtime` runs bindings generated by tilegen `bindings`:
/// the same major version, the same minor version while the major is 0 (semver's breaking
/// positions), and `runtime` at least `bindings` (newer bindings may use what an older
/// runtime lacks). Versions with a pre-release or build part, or that do not parse, must be
/// equal. A `const fn`, so bindings assert it at compile time.
pub const fn compatible(runtime: &str, bindings: &str) -> bool {
    match (parse_version(runtime), parse_version(bindings)) {
        (Some(r), Some(b)) => {
            r[0] == b[0]
                && (r[0] > 0 || r[1] == b[1])
                && (r[1] > b[1] || (r[1] == b[1] && r[2] >= b[2]))
        }
        _ => bytes_equal(runtime.as_bytes(), bindings.as_bytes()),
    }
}

/// `MAJOR.MINOR.PATCH`, plain decimal numbers only.
const fn parse_version(v: &str) -> Option<[u64; 3]> {
    let b = v.as_bytes();
    let mut parts = [0u64; 3];
    let (mut part, mut digits, mut i) = (0, 0, 0);
    while i < b.len() {
        let c = b[i];
        if c == b'.' {
            if digits == 0 || part == 2 {
                return None;
            }
            part += 1;
            digits = 0;
        } else if c.is_ascii_digit() {
            // Leading zeros are not semver; 20 digits would overflow.
            if (digits > 0 && parts[part] == 0) || digits == 19 {
                return None;
            }
            parts[part] = parts[part] * 10 + (c - b'0') as u64;
            digits += 1;
        } else {
            return None;
        }
        i += 1;
    }
    if part != 2 || digits == 0 {
        return None;
    }
    Some(parts)
}

const fn bytes_equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compatible_by_semver() {
        // Same version; a newer patch runs older bindings of its minor version.
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.3", "0.1.0"));
        // An older runtime may lack what newer bindings use.
        assert!(!compatible("0.1.0", "0.1.1"));
        // Before 1.0 the minor version breaks; from 1.0 the major does.
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("0.1.0", "0.2.0"));
        assert!(compatible("1.4.0", "1.2.7"));
        assert!(!compatible("1.2.0", "1.4.0"));
        assert!(!compatible("2.0.0", "1.9.9"));
        // Pre-releases and anything else must match exactly.
        assert!(compatible("0.2.0-alpha.1", "0.2.0-alpha.1"));
        assert!(!compatible("0.2.0-alpha.2", "0.2.0-alpha.1"));
        assert!(!compatible("0.1.0", "0.1.0-rc.1"));
        for bad in [
            "",
            "0.1",
            "0.1.0.0",
            "01.1.0",
            "0..1",
            "x.y.z",
            "0.1.",
            "99999999999999999999.0.0",
        ] {
            assert_eq!(parse_version(bad), None, "{bad:?}");
            assert!(!compatible("0.1.0", bad), "{bad:?}");
        }
        assert_eq!(parse_version("10.20.30"), Some([10, 20, 30]));
        assert!(compatible(VERSION, VERSION));
    }

    // What the bindings do, evaluated by the compiler.
    const _: () = assert!(compatible(VERSION, VERSION));
}
