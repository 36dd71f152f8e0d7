//! Loading a kernel library's embedded binaries into a CUDA context: which binary runs on the
//! device (a pure choice, testable without a GPU), one module per kernel loaded on first use,
//! and the error type of the generated bindings. Compiled into tilegen as a module (so it is
//! type-checked and tested here) and emitted verbatim into every generated `bindings.rs`,
//! beside `launch_rules`. Depends only on `std` and `cudarc`.

use std::fmt;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{sys, CudaContext, CudaFunction, DriverError, LaunchConfig};

use super::launch_rules::{ArgError, LaunchDims};

/// How a kernel binary is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BinaryKind {
    /// Machine code for one architecture (and compatible ones of the same major version).
    Cubin,
    /// PTX, compiled for the device by the driver's JIT when loaded.
    Ptx,
}

/// A GPU architecture as `sm_XY` (or `sm_XYa`, arch-specific) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sm {
    pub major: u32,
    pub minor: u32,
    /// `sm_90a` and the like: runs only on exactly that architecture.
    pub arch_specific: bool,
}

impl Sm {
    /// Parses `sm_80`, `sm_90a`, `sm_100`, `sm_120a`.
    pub fn parse(name: &str) -> Option<Sm> {
        let digits = name.strip_prefix("sm_")?;
        let (digits, arch_specific) = match digits.strip_suffix('a') {
            Some(d) => (d, true),
            None => (digits, false),
        };
        if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        Some(Sm {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
            arch_specific,
        })
    }
}

impl fmt::Display for Sm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sm_{}{}{}",
            self.major,
            self.minor,
            if self.arch_specific { "a" } else { "" }
        )
    }
}

/// Which of the `available` binaries (architecture, kind) runs best on a device of compute
/// capability `major.minor`, as an index into `available`:
/// 1. a cubin for exactly this architecture (the arch-specific `a` one first);
/// 2. else a cubin of the same major version and a lower minor (sm_80 code runs on sm_86;
///    arch-specific cubins never run elsewhere), the highest minor first;
/// 3. else PTX for the highest architecture not above the device's, compiled by the
///    driver's JIT (arch-specific PTX only on exactly its architecture);
/// 4. else None.
pub fn choose_binary(major: u32, minor: u32, available: &[(Sm, BinaryKind)]) -> Option<usize> {
    let exact = |s: &Sm| s.major == major && s.minor == minor;
    let best = |ok: &dyn Fn(&Sm, BinaryKind) -> bool| {
        available
            .iter()
            .enumerate()
            .filter(|(_, (s, k))| ok(s, *k))
            // Highest (major, minor), arch-specific before generic; first listed on ties.
            .max_by_key(|&(i, (s, _))| (s.major, s.minor, s.arch_specific, core::cmp::Reverse(i)))
            .map(|(i, _)| i)
    };
    best(&|s, k| k == BinaryKind::Cubin && exact(s))
        .or_else(|| {
            best(&|s, k| {
                k == BinaryKind::Cubin && s.major == major && s.minor < minor && !s.arch_specific
            })
        })
        .or_else(|| {
            best(&|s, k| {
                k == BinaryKind::Ptx
                    && (s.major, s.minor) <= (major, minor)
                    && (!s.arch_specific || exact(s))
            })
        })
}

/// One embedded kernel binary.
#[derive(Debug, Clone, Copy)]
pub struct Binary {
    /// Architecture it was built for, e.g. `sm_90`.
    pub arch: &'static str,
    pub kind: BinaryKind,
    pub bytes: &'static [u8],
}

/// One kernel of the library: its instance name, entry point, dynamic shared memory and
/// binaries.
#[derive(Debug, Clone, Copy)]
pub struct KernelInfo {
    pub name: &'static str,
    pub entry_point: &'static str,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    pub binaries: &'static [Binary],
}

impl KernelInfo {
    /// The binary [`choose_binary`] picks for a device of compute capability `major.minor`.
    pub fn binary_for(&self, major: u32, minor: u32) -> Option<&'static Binary> {
        // Binaries whose arch does not parse are never chosen.
        let parsed: Vec<(&'static Binary, Sm)> = self
            .binaries
            .iter()
            .filter_map(|b| Sm::parse(b.arch).map(|s| (b, s)))
            .collect();
        let available: Vec<(Sm, BinaryKind)> = parsed.iter().map(|(b, s)| (*s, b.kind)).collect();
        choose_binary(major, minor, &available).map(|i| parsed[i].0)
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum Error {
    /// The arguments would read or write out of bounds, or break a kernel's assumptions;
    /// nothing was launched.
    Arg(ArgError),
    /// The CUDA driver failed (loading a module, setting an attribute, launching).
    Driver(DriverError),
    /// No binary of this kernel runs on the device.
    NoBinary {
        kernel: &'static str,
        /// The device's architecture, e.g. `sm_86`.
        device: String,
        /// What the library holds for this kernel, e.g. `sm_80 cubin`.
        available: Vec<String>,
    },
    /// A buffer or stream belongs to another CUDA context than the kernels were loaded into.
    WrongContext { arg: &'static str },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Arg(e) => write!(f, "{e}"),
            Error::Driver(e) => write!(f, "CUDA driver error: {e}"),
            Error::NoBinary { kernel, device, available } if available.is_empty() => write!(
                f,
                "kernel `{kernel}` has no binaries: the library was generated without compiling kernels \
                 (as under DOCS_RS), so it cannot run on this {device} device"
            ),
            Error::NoBinary { kernel, device, available } => write!(
                f,
                "no binary of kernel `{kernel}` runs on this {device} device; the library holds {}. \
                 Add {device} to the spec's archs and regenerate",
                available.join(", ")
            ),
            Error::WrongContext { arg } => write!(
                f,
                "`{arg}` belongs to another CUDA context than the one the kernels were loaded into"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Arg(e) => Some(e),
            Error::Driver(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ArgError> for Error {
    fn from(e: ArgError) -> Self {
        Error::Arg(e)
    }
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

/// What the loader read off the device once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub major: u32,
    pub minor: u32,
    /// Streaming multiprocessors, for choosing among instances by problem size.
    pub sm_count: u32,
}

impl Device {
    /// The device's architecture, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }
}

/// A library's kernels in one CUDA context, each module loaded on first use and kept.
#[derive(Debug)]
pub struct Loader {
    ctx: Arc<CudaContext>,
    device: Device,
    table: &'static [KernelInfo],
    loaded: Vec<OnceLock<CudaFunction>>,
}

impl Loader {
    /// Reads the device's architecture; loads nothing yet.
    pub fn new(ctx: &Arc<CudaContext>, table: &'static [KernelInfo]) -> Result<Loader, Error> {
        let (major, minor) = ctx.compute_capability()?;
        let sm_count =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(Loader {
            ctx: ctx.clone(),
            device: Device {
                major: major as u32,
                minor: minor as u32,
                sm_count: sm_count.max(1) as u32,
            },
            table,
            loaded: (0..table.len()).map(|_| OnceLock::new()).collect(),
        })
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn table(&self) -> &'static [KernelInfo] {
        self.table
    }

    /// The binary kernel `index` loads on this device, or why none fits.
    pub fn binary(&self, index: usize) -> Result<&'static Binary, Error> {
        let info = &self.table[index];
        info.binary_for(self.device.major, self.device.minor)
            .ok_or_else(|| Error::NoBinary {
                kernel: info.name,
                device: self.device.arch(),
                available: info
                    .binaries
                    .iter()
                    .map(|b| format!("{} {}", b.arch, kind_name(b.kind)))
                    .collect(),
            })
    }

    /// Kernel `index`'s function, loading its module on first use.
    pub fn function(&self, index: usize) -> Result<&CudaFunction, Error> {
        if let Some(f) = self.loaded[index].get() {
            return Ok(f);
        }
        let info = &self.table[index];
        let binary = self.binary(index)?;
        let mut image = binary.bytes.to_vec();
        if binary.kind == BinaryKind::Ptx && image.last() != Some(&0) {
            // The driver reads PTX as a NUL-terminated string.
            image.push(0);
        }
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(image))?;
        let function = module.load_function(info.entry_point)?;
        // Above 48 KiB a kernel must opt in to its dynamic shared memory; opting in whenever
        // it uses any also covers static + dynamic crossing 48 KiB together.
        if info.shared_bytes > 0 {
            function.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                info.shared_bytes as i32,
            )?;
        }
        // Two threads may race to load; both modules work and one is kept.
        Ok(self.loaded[index].get_or_init(|| function))
    }

    /// Loads every kernel now, so that a missing binary shows at start-up.
    pub fn load_all(&self) -> Result<(), Error> {
        (0..self.table.len()).try_for_each(|i| self.function(i).map(|_| ()))
    }

    /// Checks that a buffer or stream (named `arg`) lives in this loader's context.
    pub fn same_context(&self, arg: &'static str, ctx: &CudaContext) -> Result<(), Error> {
        if *ctx != *self.ctx {
            return Err(Error::WrongContext { arg });
        }
        Ok(())
    }
}

fn kind_name(kind: BinaryKind) -> &'static str {
    match kind {
        BinaryKind::Cubin => "cubin",
        BinaryKind::Ptx => "PTX",
    }
}

/// cudarc's launch configuration for launch geometry.
pub fn launch_config(dims: LaunchDims) -> LaunchConfig {
    LaunchConfig {
        grid_dim: dims.grid,
        block_dim: dims.block,
        shared_mem_bytes: dims.shared_bytes,
    }
}
