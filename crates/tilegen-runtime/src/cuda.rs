//! The part of [`crate::loader`] that talks to the CUDA driver (feature `cuda`): the error type
//! of the generated bindings, loading each kernel's chosen binary as a module, and launching.
//! Only cudarc's driver API is used: modules load from the embedded images with
//! `cuModuleLoadData`, so neither NVRTC nor cudarc's `nvrtc` feature is needed.

use std::ffi::{c_void, CString};
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, sys, CudaContext, CudaStream, DeviceRepr, DriverError, LaunchConfig};

use crate::launch_rules::{ArgError, LaunchDims};
use crate::loader::{Binary, BinaryKind, Device, DeviceName, KernelInfo, NoFit, Version};
use crate::tensor_map::{
    self, Interleave, KernelMaps, L2Promotion, MapDtype, OobFill, Swizzle, TiledMap,
};

/// Why a call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The arguments would read or write out of bounds, or break a kernel's assumptions;
    /// nothing was launched.
    Arg(ArgError),
    /// The CUDA driver failed (loading a module, setting an attribute, launching).
    Driver(DriverError),
    /// No binary of this kernel runs on the device with its driver.
    NoBinary {
        kernel: &'static str,
        /// The device's architecture, e.g. `sm_86`.
        device: String,
        /// The CUDA version the driver supports, when known.
        driver: Option<Version>,
        /// What the library holds for this kernel, e.g. `sm_80 cubin`, `sm_90 PTX (ISA 9.0)`.
        available: Vec<String>,
        /// What would make one run.
        needs: NoFit,
    },
    /// A buffer or stream belongs to another CUDA context than the kernels were loaded into.
    WrongContext { arg: &'static str },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Arg(e) => write!(f, "{e}"),
            Error::Driver(e) => write!(f, "CUDA driver error: {e}"),
            Error::NoBinary { kernel, device, available, .. } if available.is_empty() => write!(
                f,
                "kernel `{kernel}` has no binaries: the library was generated without compiling kernels \
                 (as under DOCS_RS), so it cannot run on this {device} device"
            ),
            Error::NoBinary { kernel, device, driver, available, needs: NoFit::Driver { needs } } => {
                let driver = match driver {
                    Some(v) => format!("supports CUDA {v}"),
                    None => "version is unknown".to_string(),
                };
                write!(
                    f,
                    "no binary of kernel `{kernel}` runs on this {device} device: the library holds {} \
                     and no cubin for it; the PTX that could be JIT-compiled for it needs a driver for \
                     CUDA {needs} or newer, but this driver {driver}. Update the NVIDIA driver, or \
                     regenerate the library with an NVRTC no newer than the driver's CUDA version",
                    available.join(", ")
                )
            }
            Error::NoBinary { kernel, device, available, .. } => write!(
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

/// A loaded module; unloaded in its context when the last [`Function`] of it is dropped.
#[derive(Debug)]
struct Module {
    handle: sys::CUmodule,
    ctx: Arc<CudaContext>,
}

// SAFETY: a module handle is a driver object that any thread may use once the module's
// context is current there; every use below binds it first, as cudarc's own module does.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // A failure here has no caller to go to; cudarc keeps it in the context's error state.
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: the handle came from cuModuleLoadData and is unloaded once, here.
        self.ctx
            .record_err(unsafe { result::module::unload(self.handle) });
    }
}

/// One kernel's function in its loaded module (which it keeps alive).
#[derive(Debug)]
pub struct Function {
    handle: sys::CUfunction,
    _module: Arc<Module>,
    /// How many of its clusters the device runs at once (kernels with clusters; 0 when the
    /// driver did not say), asked on first launch.
    held_clusters: OnceLock<u32>,
}

// SAFETY: as for `Module`: a function handle is usable from any thread in its context.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

impl Function {
    /// Loads `binary` into `ctx` as a module and looks up `info`'s entry point, opting in to
    /// the dynamic shared memory it uses.
    fn load(ctx: &Arc<CudaContext>, info: &KernelInfo, binary: &Binary) -> Result<Function, Error> {
        let mut image = binary.bytes.to_vec();
        if binary.kind == BinaryKind::Ptx && image.last() != Some(&0) {
            // The driver reads PTX as a NUL-terminated string.
            image.push(0);
        }
        ctx.bind_to_thread()?;
        // SAFETY: `image` is a whole cubin, or PTX text ending in NUL, that outlives the call
        // (the driver copies what it keeps).
        let handle = unsafe { result::module::load_data(image.as_ptr().cast()) }?;
        let module = Arc::new(Module {
            handle,
            ctx: ctx.clone(),
        });
        // Entry points are C identifiers; one with a NUL could name no function.
        let name = CString::new(info.entry_point)
            .map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_NOT_FOUND))?;
        // SAFETY: the module was loaded above and is kept alive by `module`.
        let handle = unsafe { result::module::get_function(module.handle, name) }?;
        // Above 48 KiB a kernel must opt in to its dynamic shared memory; opting in whenever
        // it uses any also covers static + dynamic crossing 48 KiB together.
        if info.shared_bytes > 0 {
            use sys::CUfunction_attribute::*;
            // SAFETY: `handle` is a function of the live module.
            unsafe {
                result::function::set_function_attribute(
                    handle,
                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    info.shared_bytes as i32,
                )?;
                // Ask for the largest shared-memory carveout, so that as many blocks fit per
                // SM as the kernel was sized for (persistent row grids count on it); the
                // default lets the driver keep more L1 instead.
                result::function::set_function_attribute(
                    handle,
                    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                    100,
                )?;
            }
        }
        Ok(Function {
            handle,
            _module: module,
            held_clusters: OnceLock::new(),
        })
    }

    /// How many clusters of `cluster` blocks of `block` threads and `shared_bytes` of dynamic
    /// shared memory the device runs at once (cuOccupancyMaxActiveClusters; the cluster shape
    /// is the one compiled into the kernel). Asked once; 0 when the driver does not say.
    fn held_clusters(&self, cluster: u32, block: (u32, u32, u32), shared_bytes: u32) -> u32 {
        *self.held_clusters.get_or_init(|| {
            let config = sys::CUlaunchConfig {
                gridDimX: cluster,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: block.0,
                blockDimY: block.1,
                blockDimZ: block.2,
                sharedMemBytes: shared_bytes,
                hStream: std::ptr::null_mut(),
                attrs: std::ptr::null_mut(),
                numAttrs: 0,
            };
            let mut clusters: std::ffi::c_int = 0;
            // SAFETY: plain out-parameter and a config that lives across the call; `handle`
            // is a function of the live module.
            match unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, self.handle, &config) }
            {
                sys::CUresult::CUDA_SUCCESS => clusters.max(0) as u32,
                _ => 0,
            }
        })
    }

    /// The driver's handle, valid while this `Function` lives.
    pub fn cu_function(&self) -> sys::CUfunction {
        self.handle
    }
}

/// One kernel parameter for [`Loader::launch`]: the address of its value, which the driver
/// copies when the launch is enqueued.
#[derive(Debug, Clone, Copy)]
pub struct Arg<'a> {
    value: *const c_void,
    _borrow: PhantomData<&'a ()>,
}

impl<'a> Arg<'a> {
    /// A parameter passed by value, as the kernel declares it (a device address as `u64`, a
    /// size as `i64`, a scalar as `f32`).
    pub fn of<T: DeviceRepr>(value: &'a T) -> Arg<'a> {
        Arg {
            value: (value as *const T).cast(),
            _borrow: PhantomData,
        }
    }
}

impl Arg<'_> {
    fn tensor_map(map: &TensorMap) -> Arg<'_> {
        Arg {
            value: (map as *const TensorMap).cast(),
            _borrow: PhantomData,
        }
    }
}

/// An encoded tensor map (`CUtensorMap`): 128 opaque bytes the kernel takes by value.
/// 128-byte aligned, as CUDA 13 declares it (64 before 13.0; 128 satisfies both), whatever
/// CUDA version cudarc was built for.
#[repr(C, align(128))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorMap(pub [u64; 16]);

// SAFETY: plain bytes with no pointers into host memory, passed to kernels by value.
unsafe impl DeviceRepr for TensorMap {}

/// Encodes a checked map ([`crate::tensor_map::TensorMapRule::resolve`]) with
/// `cuTensorMapEncodeTiled`. The driver must support CUDA 12.0 or newer
/// ([`crate::tensor_map::driver_encodes`]): older ones lack the function.
pub fn encode_tensor_map(map: &TiledMap) -> Result<TensorMap, Error> {
    use sys::CUtensorMapDataType as T;
    let dtype = match map.dtype {
        MapDtype::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        MapDtype::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        MapDtype::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    use sys::CUtensorMapSwizzle as S;
    let swizzle = match map.swizzle {
        Swizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    use sys::CUtensorMapInterleave as I;
    let interleave = match map.interleave {
        Interleave::None => I::CU_TENSOR_MAP_INTERLEAVE_NONE,
        Interleave::B16 => I::CU_TENSOR_MAP_INTERLEAVE_16B,
        Interleave::B32 => I::CU_TENSOR_MAP_INTERLEAVE_32B,
    };
    use sys::CUtensorMapL2promotion as L;
    let l2 = match map.l2_promotion {
        L2Promotion::None => L::CU_TENSOR_MAP_L2_PROMOTION_NONE,
        L2Promotion::B64 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        L2Promotion::B128 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        L2Promotion::B256 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    };
    use sys::CUtensorMapFloatOOBfill as F;
    let oob = match map.oob_fill {
        OobFill::Zero => F::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        OobFill::Nan => F::CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
    };
    let element_strides = [1u32; tensor_map::MAX_RANK];
    let mut raw = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: every array holds at least `rank` entries (`strides` rank - 1), `raw` is a
    // writable CUtensorMap; the address is only recorded, never dereferenced here.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            raw.as_mut_ptr(),
            dtype,
            map.rank as u32,
            map.address as *mut c_void,
            map.dims.as_ptr(),
            map.strides.as_ptr(),
            map.box_dims.as_ptr(),
            element_strides.as_ptr(),
            interleave,
            swizzle,
            l2,
            oob,
        )
        .result()?;
        Ok(TensorMap(raw.assume_init().opaque))
    }
}

/// A library's kernels in one CUDA context, each module loaded on first use and kept.
#[derive(Debug)]
pub struct Loader {
    ctx: Arc<CudaContext>,
    device: Device,
    table: &'static [KernelInfo],
    /// The tensor-map parameters of the kernels that take them.
    maps: &'static [KernelMaps],
    loaded: Vec<OnceLock<Function>>,
}

impl Loader {
    /// Reads the device's architecture and the driver's CUDA version; loads nothing yet.
    pub fn new(ctx: &Arc<CudaContext>, table: &'static [KernelInfo]) -> Result<Loader, Error> {
        let (major, minor) = ctx.compute_capability()?;
        let sm_count =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let mut version = 0;
        // SAFETY: a plain out-parameter; the driver is loaded, since `ctx` exists.
        let driver = match unsafe { sys::cuDriverGetVersion(&mut version) } {
            sys::CUresult::CUDA_SUCCESS => Version::from_driver(version),
            _ => None,
        };
        // The name only keys tuning tables: a device that does not say is simply untuned.
        let name = ctx.name().unwrap_or_default();
        Ok(Loader {
            ctx: ctx.clone(),
            device: Device {
                major: major as u32,
                minor: minor as u32,
                sm_count: sm_count.max(1) as u32,
                driver,
                name: DeviceName::new(&name),
            },
            table,
            maps: &[],
            loaded: (0..table.len()).map(|_| OnceLock::new()).collect(),
        })
    }

    /// The tensor-map parameters of the table's kernels that take them (bindings of a library
    /// with TMA kernels pass their `TENSOR_MAPS`); [`Loader::launch_mapped`] encodes them.
    pub fn with_tensor_maps(mut self, maps: &'static [KernelMaps]) -> Loader {
        self.maps = maps;
        self
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

    /// The binary kernel `index` loads on this device with this driver, or why none fits.
    pub fn binary(&self, index: usize) -> Result<&'static Binary, Error> {
        let info = &self.table[index];
        let d = self.device;
        info.binary_for(d.major, d.minor, d.driver)
            .map_err(|needs| Error::NoBinary {
                kernel: info.name,
                device: d.arch(),
                driver: d.driver,
                available: info.binaries.iter().map(Binary::describe).collect(),
                needs,
            })
    }

    /// Kernel `index`'s function, loading its module on first use.
    pub fn function(&self, index: usize) -> Result<&Function, Error> {
        if let Some(f) = self.loaded[index].get() {
            return Ok(f);
        }
        let function = Function::load(&self.ctx, &self.table[index], self.binary(index)?)?;
        // Two threads may race to load; both modules work and one is kept.
        Ok(self.loaded[index].get_or_init(|| function))
    }

    /// Loads every kernel now, so that a missing binary shows at start-up. Tensor-map
    /// kernels that cannot run on this device are skipped: they are an arch-specific fast
    /// path (sm_90a) that dispatch passes over elsewhere.
    pub fn load_all(&self) -> Result<(), Error> {
        (0..self.table.len())
            .filter(|&i| {
                tensor_map::maps_of(self.maps, i).is_empty()
                    || self.table[i].runs_on(&self.device, true)
            })
            .try_for_each(|i| self.function(i).map(|_| ()))
    }

    /// Checks that a buffer or stream (named `arg`) lives in this loader's context.
    pub fn same_context(&self, arg: &'static str, ctx: &CudaContext) -> Result<(), Error> {
        if *ctx != *self.ctx {
            return Err(Error::WrongContext { arg });
        }
        Ok(())
    }

    /// Launches kernel `index` (loading it on first use) on `stream` with geometry `dims` and
    /// parameters `args`. Buffers' stream ordering is the caller's: the generated methods hold
    /// cudarc's `device_ptr` guards across this call, which record the accesses on `stream`.
    ///
    /// # Safety
    ///
    /// `args` must be the kernel's parameters, in order and each of its type, and every device
    /// address among them must stay valid for all the kernel reads and writes with these
    /// arguments until it completes. The generated methods launch only after their checks
    /// showed that every buffer holds what the kernel touches.
    pub unsafe fn launch(
        &self,
        index: usize,
        stream: &CudaStream,
        dims: LaunchDims,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        self.same_context("stream", stream.context())?;
        let function = self.function(index)?;
        self.ctx.bind_to_thread()?;
        let cluster = self.table[index].cluster;
        let dims = if cluster > 1 {
            let held = function.held_clusters(cluster, dims.block, dims.shared_bytes);
            crate::launch_rules::hold_clusters(dims, cluster, held)
        } else {
            dims
        };
        let mut params: Vec<*mut c_void> = args.iter().map(|a| a.value as *mut c_void).collect();
        // SAFETY: the caller's contract; the driver only reads the parameter values.
        unsafe {
            result::launch_kernel(
                function.handle,
                dims.grid,
                dims.block,
                dims.shared_bytes,
                stream.cu_stream(),
                &mut params,
            )
        }?;
        Ok(())
    }
}

impl Loader {
    /// [`Loader::launch`] for a kernel that may take tensor maps: encodes each of its maps
    /// from the call's argument values (`values`: every argument of `args` as a `u64`, device
    /// addresses and sizes; others 0), and passes them before `args`. A kernel without maps is launched as by [`Loader::launch`]. Maps are
    /// encoded anew for every launch: about a microsecond each on the host, and nothing to
    /// keep in step with the buffers.
    ///
    /// # Safety
    ///
    /// As for [`Loader::launch`]; the maps cover exactly the memory the kernel's own pointer
    /// arguments and sizes describe, which the plan checked.
    pub unsafe fn launch_mapped(
        &self,
        index: usize,
        stream: &CudaStream,
        dims: LaunchDims,
        values: &[u64],
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let rules = tensor_map::maps_of(self.maps, index);
        if rules.is_empty() {
            // SAFETY: the caller's contract.
            return unsafe { self.launch(index, stream, dims, args) };
        }
        if !tensor_map::driver_encodes(&self.device) {
            return Err(Error::Driver(DriverError(
                sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
            )));
        }
        let maps = tensor_map::resolve_all(rules, values)?
            .iter()
            .map(encode_tensor_map)
            .collect::<Result<Vec<TensorMap>, Error>>()?;
        let all: Vec<Arg<'_>> = maps
            .iter()
            .map(Arg::tensor_map)
            .chain(args.iter().copied())
            .collect();
        // SAFETY: the caller's contract; `maps` outlives the launch call, which copies them.
        unsafe { self.launch(index, stream, dims, &all) }
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
