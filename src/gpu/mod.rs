//! Running library kernels on a GPU from the manifest alone: `tilegen verify` and
//! `tilegen bench`. Buffers are untyped bytes; the manifest's signature says what each
//! argument is, and `problem` says how big each buffer must be for a given shape.

pub mod bench;
pub mod cublas;
pub mod data;
pub mod problem;
pub mod reference;
pub mod verify;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};

use crate::error::{Error, IoContext, Result};
use crate::launch_rules::LaunchDims;
use crate::manifest::{InstanceEntry, Manifest};
use crate::spec::model::Arch;

/// A CUDA device with one stream, and the library whose kernels it runs.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub name: String,
    /// Compute capability as major*10+minor.
    pub sm: u32,
    pub sm_count: u32,
    pub l2_bytes: u64,
    pub lib_dir: PathBuf,
    pub manifest: Manifest,
    functions: HashMap<String, CudaFunction>,
}

pub fn gpu_err(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Gpu(format!("{what}: {e:?}"))
}

/// Checks that the CUDA driver library can be opened, without panicking where it is absent.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library by its usual names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The CUDA version the driver supports.
pub fn driver_version() -> Option<crate::loader::Version> {
    if !driver_present() {
        return None;
    }
    let mut v = 0;
    // SAFETY: a plain out-parameter; the library is present.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS)
        .then(|| crate::loader::Version::from_driver(v))
        .flatten()
}

impl Gpu {
    /// Opens device 0 and reads the library at `lib_dir`.
    pub fn open(lib_dir: &Path) -> Result<Gpu> {
        // The library first: a wrong --lib is the user's to fix on any machine.
        let path = lib_dir.join(crate::manifest::FILE_NAME);
        let bytes = std::fs::read(&path).at(&path)?;
        let manifest = Manifest::from_bytes(&bytes).map_err(|e| {
            Error::Usage(format!("{}: not a tilegen manifest: {e}", path.display()))
        })?;
        if !driver_present() {
            return Err(Error::Environment(
                "no CUDA driver (libcuda.so) found: verify and bench need an NVIDIA GPU".into(),
            ));
        }
        let ctx = CudaContext::new(0).map_err(|e| gpu_err("opening GPU 0", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| gpu_err("compute capability", e))?;
        use cudarc::driver::sys::CUdevice_attribute as A;
        let attr = |a| ctx.attribute(a).map_err(|e| gpu_err("device attribute", e));
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let stream = ctx.default_stream();
        Ok(Gpu {
            ctx,
            stream,
            name,
            sm: (major * 10 + minor) as u32,
            sm_count,
            l2_bytes,
            lib_dir: lib_dir.to_path_buf(),
            manifest,
            functions: HashMap::new(),
        })
    }

    /// The binary of an instance that runs here, chosen exactly as the generated bindings
    /// choose (`loader::choose_binary`): the cubin for this arch, else a compatible cubin,
    /// else PTX whose ISA version (its `.version` line) the driver accepts, for the driver to
    /// compile. Returns the arch, the path and whether it is a cubin.
    pub fn pick_binary(&self, inst: &InstanceEntry) -> Result<(Arch, PathBuf, bool)> {
        use crate::loader::{choose_binary, Candidate, NoFit, Sm, Version};
        let driver = driver_version();
        let mut available = Vec::new();
        let mut files = Vec::new();
        for t in &inst.targets {
            let Some(sm) = Sm::parse(t.arch.as_str()) else {
                continue;
            };
            available.push(Candidate::cubin(sm));
            files.push((t.arch, &t.cubin.path, true));
            // Unreadable PTX counts as of unknown ISA here; loading it reports the error.
            let ptx = self.lib_dir.join(&t.ptx.path);
            let isa = std::fs::read(&ptx).ok().and_then(|b| Version::of_ptx(&b));
            available.push(Candidate::ptx(sm, isa));
            files.push((t.arch, &t.ptx.path, false));
        }
        match choose_binary(self.sm / 10, self.sm % 10, driver, &available) {
            Ok(i) => Ok((files[i].0, self.lib_dir.join(files[i].1), files[i].2)),
            Err(needs) => {
                let have: Vec<&str> = inst.targets.iter().map(|t| t.arch.as_str()).collect();
                let why = match needs {
                    NoFit::Arch => format!("add sm_{} to the spec's archs and regenerate", self.sm),
                    NoFit::Driver { needs } => format!(
                        "its PTX needs a driver for CUDA {needs} or newer, and this one supports CUDA {}",
                        driver.map_or("(unknown)".to_string(), |v| v.to_string())
                    ),
                };
                Err(Error::Gpu(format!(
                    "{}: nothing runs on this sm_{} device; the library holds {}: {why}",
                    inst.name,
                    self.sm,
                    have.join(", ")
                )))
            }
        }
    }

    /// Loads (once) the kernel of an instance.
    pub fn function(&mut self, inst: &InstanceEntry) -> Result<CudaFunction> {
        if let Some(f) = self.functions.get(&inst.name) {
            return Ok(f.clone());
        }
        let (_, path, is_cubin) = self.pick_binary(inst)?;
        let bytes = std::fs::read(&path).at(&path)?;
        // The library is only trusted as far as its manifest: check the bytes first.
        let expect = inst.targets.iter().find(|t| {
            self.lib_dir.join(&t.cubin.path) == path || self.lib_dir.join(&t.ptx.path) == path
        });
        if let Some(t) = expect {
            let want = if is_cubin {
                &t.cubin.sha256
            } else {
                &t.ptx.sha256
            };
            if &crate::hashing::sha256_hex(&bytes) != want {
                return Err(Error::Gpu(format!(
                    "{}: does not match the manifest's sha256",
                    path.display()
                )));
            }
        }
        let image = if is_cubin {
            cudarc::nvrtc::Ptx::from_binary(bytes)
        } else {
            cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&bytes).into_owned())
        };
        let module = self
            .ctx
            .load_module(image)
            .map_err(|e| gpu_err(&format!("loading {}", path.display()), e))?;
        let f = module.load_function(&inst.entry_point).map_err(|e| {
            gpu_err(
                &format!("finding {} in {}", inst.entry_point, path.display()),
                e,
            )
        })?;
        // As the bindings' loader does: static and dynamic shared memory together may pass
        // the 48 KiB default, so any dynamic use raises the limit.
        if inst.launch.shared_bytes > 0 {
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                inst.launch.shared_bytes as i32,
            )
            .map_err(|e| gpu_err("raising the dynamic shared memory limit", e))?;
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                100,
            )
            .map_err(|e| gpu_err("asking for the largest shared memory carveout", e))?;
        }
        self.functions.insert(inst.name.clone(), f.clone());
        Ok(f)
    }

    /// Allocates `bytes` of device memory filled with `byte`.
    pub fn alloc_filled(&self, bytes: usize, byte: u8) -> Result<CudaSlice<u8>> {
        let buf = unsafe { self.stream.alloc::<u8>(bytes.max(1)) }
            .map_err(|e| gpu_err("allocating", e))?;
        self.fill(&buf, byte)?;
        Ok(buf)
    }

    pub fn fill(&self, buf: &CudaSlice<u8>, byte: u8) -> Result<()> {
        use cudarc::driver::DevicePtr;
        let (ptr, _sync) = buf.device_ptr(&self.stream);
        // SAFETY: ptr covers buf.len() bytes for as long as `_sync` lives.
        unsafe {
            cudarc::driver::result::memset_d8_async(ptr, byte, buf.len(), self.stream.cu_stream())
        }
        .map_err(|e| gpu_err("memset", e))
    }

    pub fn upload(&self, bytes: &[u8]) -> Result<CudaSlice<u8>> {
        self.stream
            .clone_htod(bytes)
            .map_err(|e| gpu_err("copy to device", e))
    }

    pub fn download(&self, buf: &CudaSlice<u8>) -> Result<Vec<u8>> {
        self.stream
            .clone_dtoh(buf)
            .map_err(|e| gpu_err("copy to host", e))
    }

    pub fn sync(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("kernel failed", e))
    }
}

/// One kernel argument value.
pub enum ArgValue<'a> {
    Buf(&'a CudaSlice<u8>),
    /// Part of a larger allocation (verify's buffers sit between guard zones).
    View(cudarc::driver::CudaView<'a, u8>),
    I64(i64),
    F32(f32),
}

/// The argument list of one call: buffers (one per pointer argument, None for scalars) and
/// the problem's scalars, in the manifest's order.
pub fn call_args<'a>(
    inst: &InstanceEntry,
    p: problem::Problem,
    bufs: &'a [Option<CudaSlice<u8>>],
) -> Vec<ArgValue<'a>> {
    call_args_from(inst, p, inst, bufs).expect("buffers exist for pointer arguments")
}

/// `of`'s argument list, its buffers taken by name from a set laid out for `like`'s
/// arguments (a plain GEMM's a, b and d are its fused partner's); None when one is missing.
pub fn call_args_from<'a>(
    of: &InstanceEntry,
    p: problem::Problem,
    like: &InstanceEntry,
    bufs: &'a [Option<CudaSlice<u8>>],
) -> Option<Vec<ArgValue<'a>>> {
    call_args_with(of, p, |name, kind| {
        let i = like
            .args
            .iter()
            .position(|b| b.name == name && b.kind == kind)?;
        bufs[i].as_ref().map(ArgValue::Buf)
    })
}

/// `of`'s argument list: the problem's scalars, and for each pointer argument what `buffer`
/// gives for its name and kind; None when it gives nothing.
pub fn call_args_with<'a>(
    of: &InstanceEntry,
    p: problem::Problem,
    mut buffer: impl FnMut(&str, crate::ops::ArgKind) -> Option<ArgValue<'a>>,
) -> Option<Vec<ArgValue<'a>>> {
    use crate::ops::ArgKind;
    of.args
        .iter()
        .map(|a| match a.kind {
            ArgKind::Scalar if a.ty == "f32" => {
                Some(ArgValue::F32(problem::scalar(of, &a.name, p) as f32))
            }
            ArgKind::Scalar => Some(ArgValue::I64(problem::scalar(of, &a.name, p) as i64)),
            kind => buffer(&a.name, kind),
        })
        .collect()
}

/// Launches `f` with `args` in order.
pub fn launch(gpu: &Gpu, f: &CudaFunction, dims: LaunchDims, args: &[ArgValue]) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: dims.grid,
        block_dim: dims.block,
        shared_mem_bytes: dims.shared_bytes,
    };
    let mut b = gpu.stream.launch_builder(f);
    for a in args {
        match a {
            ArgValue::Buf(s) => {
                b.arg(*s);
            }
            ArgValue::View(v) => {
                b.arg(v);
            }
            ArgValue::I64(v) => {
                b.arg(v);
            }
            ArgValue::F32(v) => {
                b.arg(v);
            }
        }
    }
    // SAFETY: the argument list follows the manifest's signature of this kernel and every
    // buffer was sized for the problem by `problem::buffer_len`.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(|e| gpu_err("launch", e))
}
