//! Running library kernels on a GPU from the manifest alone: `tilegen verify` and
//! `tilegen bench`. Buffers are untyped bytes; the manifest's signature says what each
//! argument is, and `problem` says how big each buffer must be for a given shape.

pub mod attention;
pub mod bench;
pub mod cublas;
pub mod data;
pub mod problem;
pub mod reference;
pub mod tune;
pub mod verify;
pub mod watchdog;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};

use crate::error::{Error, Result};
use crate::launch_rules::LaunchDims;
use crate::manifest::{InstanceEntry, Manifest};
use crate::spec::model::Arch;

/// The first 4 KiB of a regular file (a PTX file's `.version` line is among its first lines).
fn ptx_head(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = crate::input::open_regular(path).ok()??;
    let mut head = Vec::new();
    f.take(4096).read_to_end(&mut head).ok()?;
    Some(head)
}

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
    /// Per instance with clusters: how many of its clusters the device runs at once.
    held_clusters: HashMap<String, u32>,
    map_rules: HashMap<String, &'static [crate::tensor_map::TensorMapRule]>,
    /// The limit on each wait for the GPU, where one is set ([`Gpu::limit_waits`]).
    watchdog: Option<watchdog::Watchdog>,
    /// What the GPU is running, for the watchdog's message ([`Gpu::doing`]).
    activity: std::sync::Mutex<String>,
    /// How long timing runs a turn's launches before it measures them, so that the clock
    /// reaches what the chip holds under sustained load (zero: from a brief warm-up, where a
    /// power-limited GPU still runs at its boost clock).
    pub settle: std::time::Duration,
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
        let bytes = crate::input::read_file(&path, crate::manifest::MAX_FILE_BYTES)?;
        let manifest = Manifest::from_bytes(&bytes).map_err(|e| {
            Error::input(
                &path,
                format!("{}: not a tilegen manifest: {e}", path.display()),
            )
        })?;
        // Checked as a bundle's would be: its file paths are joined to `lib_dir` and read,
        // and its launch geometry goes to the GPU.
        let problems = manifest.problems();
        if !problems.is_empty() {
            let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
            return Err(Error::input(
                &path,
                format!(
                    "{}: not a library tilegen would write ({} problem{}):\n  {}",
                    path.display(),
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" },
                    shown.join("\n  ")
                ),
            ));
        }
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
            held_clusters: HashMap::new(),
            map_rules: HashMap::new(),
            watchdog: None,
            activity: std::sync::Mutex::new(String::new()),
            settle: std::time::Duration::ZERO,
        })
    }

    /// An instance's tensor-map rules ([`tensor_map_rules`]), made once.
    pub fn map_rules(
        &mut self,
        inst: &InstanceEntry,
    ) -> Result<&'static [crate::tensor_map::TensorMapRule]> {
        if let Some(r) = self.map_rules.get(&inst.name) {
            return Ok(r);
        }
        let r = tensor_map_rules(inst)?;
        self.map_rules.insert(inst.name.clone(), r);
        Ok(r)
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
            let sm = Sm::from(t.arch);
            available.push(Candidate::cubin(sm));
            files.push((t.arch, &t.cubin.path, true));
            // Unreadable PTX, or anything but a regular file, counts as of unknown ISA here;
            // loading it reports the error. Its `.version` line is in the first few lines.
            let ptx = self.lib_dir.join(&t.ptx.path);
            let isa = ptx_head(&ptx).and_then(|b| Version::of_ptx(&b));
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
        let max = crate::bundle::Limits::default().max_member_bytes;
        let bytes = crate::input::read_file(&path, max)?;
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

    /// Launch geometry for problem `p`: the instance's rule on this device's SMs, a grid in
    /// clusters held to the clusters the device runs at once, as the bindings' loader does.
    pub fn dims(&mut self, inst: &InstanceEntry, p: problem::Problem) -> Result<LaunchDims> {
        let dims = problem::dims(inst, p, self.sm_count).map_err(|e| Error::Gpu(e.to_string()))?;
        let cluster = inst.launch.grid.cluster();
        if cluster <= 1 {
            return Ok(dims);
        }
        let held = match self.held_clusters.get(&inst.name) {
            Some(&h) => h,
            None => {
                let f = self.function(inst)?;
                let config = LaunchConfig {
                    grid_dim: (cluster, 1, 1),
                    block_dim: dims.block,
                    shared_mem_bytes: dims.shared_bytes,
                };
                // An unanswered query leaves the rule's grid (0 = unknown).
                let h = f
                    .occupancy_max_active_clusters(config, &self.stream)
                    .unwrap_or(0);
                self.held_clusters.insert(inst.name.clone(), h);
                h
            }
        };
        Ok(crate::launch_rules::hold_clusters(dims, cluster, held))
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
        self.wait(|| self.stream.clone_htod(bytes))
            .map_err(|e| gpu_err("copy to device", e))
    }

    pub fn download(&self, buf: &CudaSlice<u8>) -> Result<Vec<u8>> {
        self.wait(|| self.stream.clone_dtoh(buf))
            .map_err(|e| gpu_err("copy to host", e))
    }

    pub fn sync(&self) -> Result<()> {
        self.wait(|| self.stream.synchronize())
            .map_err(|e| gpu_err("kernel failed", e))
    }

    /// From now on, every wait for the GPU (`sync`, `upload`, `download`) that lasts longer
    /// than `limit` calls `on_expiry` with what [`Gpu::doing`] last named.
    pub fn limit_waits(
        &mut self,
        limit: std::time::Duration,
        on_expiry: watchdog::OnExpiry,
    ) -> Result<()> {
        let dog = watchdog::Watchdog::start(limit, on_expiry)
            .map_err(|e| gpu_err("starting the thread that limits GPU waits", e))?;
        self.watchdog = Some(dog);
        Ok(())
    }

    /// Names the work that the next waits are for (an instance and its case or shape).
    pub fn doing(&self, what: impl Into<String>) {
        *self.activity.lock().unwrap_or_else(|e| e.into_inner()) = what.into();
    }

    /// Waits until the work queued before `event` has finished. Should the wait outlive the
    /// limit, the error names `launch` (the launch just before the event) within the activity:
    /// work queued ahead of it has finished, so that launch is the one still running.
    pub fn wait_event(&self, event: &cudarc::driver::CudaEvent, launch: &str) -> Result<()> {
        self.wait_naming(Some(launch), || event.synchronize())
            .map_err(|e| gpu_err("kernel failed", e))
    }

    fn wait<T>(&self, call: impl FnOnce() -> T) -> T {
        self.wait_naming(None, call)
    }

    fn wait_naming<T>(&self, launch: Option<&str>, call: impl FnOnce() -> T) -> T {
        match &self.watchdog {
            None => call(),
            Some(dog) => {
                let mut what = self
                    .activity
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                if let Some(launch) = launch {
                    what = format!("{what}; still running: {launch}");
                }
                dog.guard(what, call)
            }
        }
    }
}

/// One kernel argument value.
pub enum ArgValue<'a> {
    Buf(&'a CudaSlice<u8>),
    /// Part of a larger allocation (verify's buffers sit between guard zones).
    View(cudarc::driver::CudaView<'a, u8>),
    I64(i64),
    F32(f32),
    /// An encoded tensor map (TMA descriptor), passed by value.
    Map(Box<crate::loader::TensorMap>),
}

impl ArgValue<'_> {
    /// The value a tensor map's rule reads: a buffer's device address, a size; 0 otherwise.
    fn map_value(&self, gpu: &Gpu) -> u64 {
        use cudarc::driver::DevicePtr;
        match self {
            ArgValue::Buf(s) => s.device_ptr(&gpu.stream).0,
            ArgValue::View(v) => v.device_ptr(&gpu.stream).0,
            ArgValue::I64(v) => *v as u64,
            ArgValue::F32(_) | ArgValue::Map(_) => 0,
        }
    }
}

/// The runtime's rules for an instance's tensor maps, from its manifest entry, with argument
/// names resolved to indices into its `args` and dims read as the bindings read them
/// (`batch` only for a query-tile grid): what the generated bindings' table holds.
/// Leaked once per instance (a verify or bench process holds a bounded number of them).
pub fn tensor_map_rules(
    inst: &InstanceEntry,
) -> Result<&'static [crate::tensor_map::TensorMapRule]> {
    use crate::launch::{Interleave as I, L2Promotion as L, OobFill as O, Swizzle as S};
    use crate::tensor_map as tm;
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    let arg = |map: &str, name: &str, pointer: bool| -> Result<tm::SizeArg> {
        inst.args
            .iter()
            .position(|a| {
                a.name == name
                    && (a.kind != crate::launch::ArgKind::Scalar) == pointer
                    && (pointer || a.ty == "i64")
            })
            .map(|i| tm::SizeArg {
                arg: i,
                name: leak(name),
            })
            .ok_or_else(|| {
                Error::Gpu(format!(
                    "{}: tensor map `{map}` names `{name}`, which is not a {} argument",
                    inst.name,
                    if pointer { "pointer" } else { "size" }
                ))
            })
    };
    let dim = |map: &str, dim: &str| -> Result<tm::MapDim> {
        use crate::launch::tma::{instance_dim, DimSource};
        let source = instance_dim(dim)
            .map_err(|why| Error::Gpu(format!("{}: tensor map `{map}`: dims {why}", inst.name)))?;
        Ok(match source {
            DimSource::Arg(name) => tm::MapDim::Arg(arg(map, name, false)?),
            DimSource::Const(v) => tm::MapDim::Const(v),
        })
    };
    let promotion = |p: L| match p {
        L::None => tm::L2Promotion::None,
        L::B64 => tm::L2Promotion::B64,
        L::B128 => tm::L2Promotion::B128,
        L::B256 => tm::L2Promotion::B256,
    };
    let mut rules = Vec::new();
    for t in &inst.tensor_maps {
        let sizes = |names: &[String]| -> Result<&'static [tm::SizeArg]> {
            let v = names
                .iter()
                .map(|n| arg(&t.name, n, false))
                .collect::<Result<Vec<_>>>()?;
            Ok(Box::leak(v.into_boxed_slice()))
        };
        let dims = t
            .dims
            .iter()
            .map(|d| dim(&t.name, d))
            .collect::<Result<Vec<_>>>()?;
        rules.push(tm::TensorMapRule {
            name: leak(&t.name),
            tensor: arg(&t.name, &t.tensor, true)?,
            dtype: match t.dtype {
                crate::spec::model::DType::F16 => tm::MapDtype::F16,
                crate::spec::model::DType::Bf16 => tm::MapDtype::Bf16,
                crate::spec::model::DType::F32 => tm::MapDtype::F32,
            },
            dims: Box::leak(dims.into_boxed_slice()),
            strides: sizes(&t.strides)?,
            box_dims: Box::leak(t.box_dims.clone().into_boxed_slice()),
            swizzle: match t.swizzle {
                S::None => tm::Swizzle::None,
                S::B32 => tm::Swizzle::B32,
                S::B64 => tm::Swizzle::B64,
                S::B128 => tm::Swizzle::B128,
            },
            interleave: match t.interleave {
                I::None => tm::Interleave::None,
                I::B16 => tm::Interleave::B16,
                I::B32 => tm::Interleave::B32,
            },
            l2_promotion: promotion(t.l2_promotion),
            l2_promotion_straddling: t.l2_promotion_straddling.map(promotion),
            oob_fill: match t.oob_fill {
                O::Zero => tm::OobFill::Zero,
                O::Nan => tm::OobFill::Nan,
            },
        });
    }
    Ok(Box::leak(rules.into_boxed_slice()))
}

/// `args` (an instance's arguments in manifest order) with its tensor maps, encoded from
/// those arguments' values as the manifest describes, in front: the kernel's whole parameter
/// list. Unchanged for an instance without maps.
pub fn with_tensor_maps<'a>(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    args: Vec<ArgValue<'a>>,
) -> Result<Vec<ArgValue<'a>>> {
    if inst.tensor_maps.is_empty() {
        return Ok(args);
    }
    // An older driver lacks cuTensorMapEncodeTiled (cudarc would panic looking it up).
    if driver_version().is_none_or(|v| v < crate::tensor_map::MIN_DRIVER) {
        return Err(Error::Gpu(format!(
            "{}: its tensor maps need a driver for CUDA {} or newer",
            inst.name,
            crate::tensor_map::MIN_DRIVER
        )));
    }
    let rules = gpu.map_rules(inst)?;
    let values = map_values(gpu, &args);
    let mut out: Vec<ArgValue<'a>> = encode_maps(inst, rules, &values)?
        .into_iter()
        .map(|m| ArgValue::Map(Box::new(m)))
        .collect();
    out.extend(args);
    Ok(out)
}

/// Every argument's value as a tensor map's rule reads it.
pub fn map_values(gpu: &Gpu, args: &[ArgValue]) -> Vec<u64> {
    args.iter().map(|a| a.map_value(gpu)).collect()
}

/// Checks and encodes `rules` for a call whose argument values are `values`: what the
/// bindings' launcher does on every launch.
pub fn encode_maps(
    inst: &InstanceEntry,
    rules: &[crate::tensor_map::TensorMapRule],
    values: &[u64],
) -> Result<Vec<crate::loader::TensorMap>> {
    rules
        .iter()
        .map(|r| {
            let tiled = r
                .resolve(values)
                .map_err(|e| Error::Gpu(format!("{}: tensor map `{}`: {e}", inst.name, r.name)))?;
            crate::loader::encode_tensor_map(&tiled).map_err(|e| {
                gpu_err(
                    &format!("{}: encoding tensor map `{}`", inst.name, r.name),
                    e,
                )
            })
        })
        .collect()
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
    mut buffer: impl FnMut(&str, crate::launch::ArgKind) -> Option<ArgValue<'a>>,
) -> Option<Vec<ArgValue<'a>>> {
    use crate::launch::ArgKind;
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
            ArgValue::Map(m) => {
                b.arg(m.as_ref());
            }
        }
    }
    // SAFETY: the argument list follows the manifest's signature of this kernel and every
    // buffer was sized for the problem by `problem::buffer_len`.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(|e| gpu_err("launch", e))
}
