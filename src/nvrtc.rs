//! NVRTC through cudarc: finding the library, compiling one instance for one arch to PTX and a
//! cubin, and reading the compiler's resource report.
//!
//! cudarc opens libnvrtc by bare name only and panics when none loads, so tilegen finds the
//! library itself and loads it (and its builtins, which libnvrtc opens by bare name at compile
//! time) with RTLD_GLOBAL first; cudarc's later open of the same soname then finds it loaded.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::model::Arch;

/// The NVRTC release tilegen pins for output that must load on the test machine's driver.
pub const PINNED_WHEEL: &str = "nvidia-cuda-nvrtc==13.0.88";

/// The oldest arch the pinned NVRTC compiles for (CUDA 13 has no Volta).
pub const OLDEST_TARGET_SM: u32 = 75;

/// Options every compile gets. Part of the cache key.
pub const BASE_OPTIONS: &[&str] = &["-std=c++17", "--ptxas-options=-v", "-default-device"];

/// How to get NVRTC, for error messages.
pub const INSTALL_HINT: &str = "run `tilegen nvrtc install` (pip-installs the pinned \
     nvidia-cuda-nvrtc 13.0.88 wheel where every build finds it; the command comes with \
     `cargo install tilegen --features cli`), or point TILEGEN_NVRTC at libnvrtc.so.13 or its \
     folder, or set CUDA_PATH to a CUDA 13 toolkit";

/// A loaded NVRTC.
#[derive(Debug, Clone)]
pub struct Nvrtc {
    pub major: i32,
    pub minor: i32,
    /// The full release (`13.0.88`), read from the header NVRTC writes into PTX: two
    /// releases of one major.minor can emit different code, so the cache key needs it.
    pub release: Option<String>,
    /// Where the library was found (or the bare name the loader resolved).
    pub location: String,
}

impl Nvrtc {
    /// The version recorded in cache keys and manifests: the full release when known.
    pub fn version(&self) -> String {
        self.release
            .clone()
            .unwrap_or_else(|| format!("{}.{}", self.major, self.minor))
    }
}

static LOADED: OnceLock<std::result::Result<Nvrtc, String>> = OnceLock::new();

/// Finds and loads NVRTC once per process.
pub fn load() -> Result<&'static Nvrtc> {
    LOADED
        .get_or_init(locate_and_load)
        .as_ref()
        .map_err(|e| Error::Environment(e.clone()))
}

/// The folder TILEGEN_NVRTC asks for (it names the library or its folder; empty is unset):
/// where it is set, only that NVRTC is used.
pub fn requested_dir() -> Option<PathBuf> {
    let p = crate::env::path("TILEGEN_NVRTC")?;
    Some(if p.is_file() {
        p.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        p
    })
}

/// Places searched, in order, with what each was. Used by `tilegen doctor` too.
pub fn candidate_dirs() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if let Some(dir) = requested_dir() {
        out.push(("TILEGEN_NVRTC".to_string(), dir));
    }
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(p) = crate::env::var_os(var) {
            let p = PathBuf::from(p);
            out.push((var.to_string(), p.join("lib64")));
            out.push((var.to_string(), p.join("lib")));
        }
    }
    out.push((
        "/usr/local/cuda".into(),
        PathBuf::from("/usr/local/cuda/lib64"),
    ));
    if let Some(dir) = crate::provision::default_dir() {
        out.push((
            "tilegen nvrtc install".into(),
            crate::provision::lib_dir(&dir),
        ));
    }
    // The project-local wheel install made by scripts/setup-nvrtc, from here upwards.
    let mut starts = vec![];
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    if let Some(m) = crate::env::var_os("CARGO_MANIFEST_DIR") {
        starts.push(PathBuf::from(m));
    }
    for start in starts {
        for dir in start.ancestors() {
            let cand = dir.join(".nvrtc/nvidia/cu13/lib");
            if cand.is_dir() && !out.iter().any(|(_, d)| d == &cand) {
                out.push(("project .nvrtc".into(), cand));
            }
        }
    }
    out
}

/// Whether the search would find an NVRTC library file (without loading or checking it):
/// only in TILEGEN_NVRTC's folder where that is set.
pub fn findable() -> bool {
    if let Some(dir) = requested_dir() {
        return lib_in(&dir).is_some();
    }
    let on_loader_path =
        std::env::split_paths(&crate::env::var_os("LD_LIBRARY_PATH").unwrap_or_default())
            .any(|d| d.join("libnvrtc.so.13").is_file() || d.join("libnvrtc.so").is_file());
    candidate_dirs().iter().any(|(_, d)| lib_in(d).is_some())
        || on_loader_path
        || python_wheel_dir().is_some_and(|d| lib_in(&d).is_some())
}

fn lib_in(dir: &Path) -> Option<(PathBuf, Option<PathBuf>)> {
    let lib = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())?;
    let builtins = std::fs::read_dir(dir).ok().and_then(|rd| {
        let mut names: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libnvrtc-builtins.so.") && !n.contains(".alt."))
            })
            .collect();
        names.sort();
        names.pop()
    });
    Some((lib, builtins))
}

/// Python's site-packages, where `pip install nvidia-cuda-nvrtc` puts the library.
fn python_wheel_dir() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u; s=u.find_spec('nvidia'); print('\\n'.join(s.submodule_search_locations) if s else '')",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| PathBuf::from(l.trim()).join("cu13/lib"))
        .find(|p| p.is_dir())
}

fn open_global(path: &Path) -> std::result::Result<(), String> {
    // A truncated library would be mapped anyway and crash the process with SIGBUS on first
    // touch, so it is checked before dlopen.
    check_elf(path).map_err(|why| {
        format!(
            "NVRTC is broken: {} is not a usable shared library: {why}\nTo fix: {INSTALL_HINT}",
            path.display()
        )
    })?;
    // SAFETY: loading a shared library runs its initialisers; libnvrtc's are benign. The
    // handle is leaked on purpose so the library stays loaded for cudarc.
    unsafe {
        let lib = libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        std::mem::forget(lib);
    }
    Ok(())
}

/// Checks that `path` is a shared library for this process whose file is as long as its own
/// ELF headers say (every program header's bytes and the section header table lie inside it).
pub fn check_elf(path: &Path) -> std::result::Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = crate::input::open_regular(path)
        .map_err(|e| format!("cannot be read: {e}"))?
        .ok_or("not a regular file")?;
    let len = f
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?
        .len();
    let mut h = [0u8; 64];
    let got = match f.read_exact(&mut h) {
        Ok(()) => 64,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
        Err(e) => return Err(format!("cannot be read: {e}")),
    };
    if got < 64 || h[..4] != *b"\x7fELF" {
        return Err(format!("not an ELF file ({len} bytes)"));
    }
    if h[4] != 2 || !cfg!(target_pointer_width = "64") {
        return Err("not a 64-bit ELF library".into());
    }
    let little = match h[5] {
        1 => true,
        2 => false,
        _ => return Err("bad ELF byte order".into()),
    };
    if little != cfg!(target_endian = "little") {
        return Err("ELF byte order differs from this machine's".into());
    }
    let u16_at = |b: &[u8], o: usize| {
        let v = [b[o], b[o + 1]];
        u64::from(if little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        })
    };
    let u64_at = |b: &[u8], o: usize| {
        let v: [u8; 8] = b[o..o + 8].try_into().expect("8 bytes");
        if little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    };
    if u16_at(&h, 16) != 3 {
        return Err("not a shared library (ELF type is not ET_DYN)".into());
    }
    let (phoff, shoff) = (u64_at(&h, 32), u64_at(&h, 40));
    let (phentsize, phnum) = (u16_at(&h, 54), u16_at(&h, 56));
    let (shentsize, shnum) = (u16_at(&h, 58), u16_at(&h, 60));
    let table_end = |off: u64, n: u64, size: u64| off.checked_add(n.checked_mul(size)?);
    let overflow = || "ELF header offsets overflow".to_string();
    let mut need = table_end(phoff, phnum, phentsize).ok_or_else(overflow)?;
    if shnum > 0 {
        need = need.max(table_end(shoff, shnum, shentsize).ok_or_else(overflow)?);
    }
    let truncated =
        |need: u64| format!("truncated: the file has {len} bytes, its ELF headers describe {need}");
    if len < need {
        return Err(truncated(need));
    }
    if phentsize >= 56 && phnum > 0 {
        let mut ph = vec![0u8; (phnum * phentsize) as usize];
        f.seek(SeekFrom::Start(phoff))
            .and_then(|_| f.read_exact(&mut ph))
            .map_err(|e| format!("cannot read its program headers: {e}"))?;
        for p in ph.chunks_exact(phentsize as usize) {
            let end = u64_at(p, 8)
                .checked_add(u64_at(p, 32))
                .ok_or_else(overflow)?;
            need = need.max(end);
        }
        if len < need {
            return Err(truncated(need));
        }
    }
    Ok(())
}

/// Opens the NVRTC in `dir` (builtins first: libnvrtc opens them by bare name at compile
/// time) and returns its path, or None when `dir` has none.
fn open_in(dir: &Path) -> std::result::Result<Option<PathBuf>, String> {
    let Some((lib, builtins)) = lib_in(dir) else {
        return Ok(None);
    };
    if let Some(b) = &builtins {
        open_global(b)?;
    }
    open_global(&lib)?;
    Ok(Some(lib))
}

fn locate_and_load() -> std::result::Result<Nvrtc, String> {
    let mut tried = Vec::new();
    let mut location = None;
    for (what, dir) in candidate_dirs() {
        if let Some(lib) = open_in(&dir)? {
            location = Some(format!("{} ({what})", lib.display()));
            break;
        }
        // It asks for that NVRTC: another one found elsewhere must not stand in for it.
        if what == "TILEGEN_NVRTC" {
            return Err(format!(
                "TILEGEN_NVRTC asks for the NVRTC in {}, which holds no libnvrtc.so.13, \
                 libnvrtc.so.12 or libnvrtc.so\nTo fix: point it at that folder or one of \
                 those files in it, or unset it",
                crate::escape::shown_path(&dir)
            ));
        }
        tried.push(format!("{} ({what})", dir.display()));
    }
    if location.is_none() {
        // The loader's own search path (LD_LIBRARY_PATH, ldconfig). What LD_LIBRARY_PATH
        // would give is checked first, as open_global does.
        for dir in std::env::split_paths(&crate::env::var_os("LD_LIBRARY_PATH").unwrap_or_default())
        {
            if let Some(lib) = ["libnvrtc.so.13", "libnvrtc.so"]
                .iter()
                .map(|n| dir.join(n))
                .find(|p| p.is_file())
            {
                check_elf(&lib).map_err(|why| {
                    format!(
                        "NVRTC is broken: {} is not a usable shared library: {why}\nTo fix: {INSTALL_HINT}",
                        lib.display()
                    )
                })?;
                break;
            }
        }
        // SAFETY: as in open_global.
        let found = unsafe {
            libloading::Library::new("libnvrtc.so.13")
                .or_else(|_| libloading::Library::new("libnvrtc.so"))
        };
        match found {
            Ok(lib) => {
                std::mem::forget(lib);
                location = Some("libnvrtc.so (loader path)".into());
            }
            Err(_) => tried.push("the loader path (LD_LIBRARY_PATH, ldconfig)".into()),
        }
    }
    if location.is_none() {
        match python_wheel_dir()
            .map(|d| open_in(&d))
            .transpose()?
            .flatten()
        {
            Some(lib) => location = Some(format!("{} (python site-packages)", lib.display())),
            None => tried.push("python3's site-packages (nvidia/cu13/lib)".into()),
        }
    }
    let Some(location) = location else {
        return Err(format!(
            "NVRTC (libnvrtc.so) was not found. Looked in:\n  {}\nTo fix: {INSTALL_HINT}",
            tried.join("\n  ")
        ));
    };
    // SAFETY: probing only opens the library by the names cudarc uses.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(format!(
            "NVRTC at {location} loaded, but cudarc could not open it by name"
        ));
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| format!("nvrtcVersion failed: {e:?}"))?;
    // An NVRTC that loads but cannot compile (its builtins library missing, say) fails
    // here once, as a broken NVRTC, instead of as every kernel failing to compile.
    let ptx = probe_compile().map_err(|why| {
        format!(
            "NVRTC is broken: {location} loaded, but it cannot compile an empty kernel: {why}\n\
             To fix: {INSTALL_HINT}"
        )
    })?;
    Ok(Nvrtc {
        major,
        minor,
        release: release_from_ptx(&String::from_utf8_lossy(&ptx)),
        location,
    })
}

/// Compiles an empty kernel to PTX, whose header comment names the release
/// (`// Cuda compilation tools, release 13.0, V13.0.88`).
fn probe_compile() -> std::result::Result<Vec<u8>, String> {
    use cudarc::nvrtc::result;
    let src = CString::new("extern \"C\" __global__ void tilegen_probe() {}")
        .map_err(|e| e.to_string())?;
    let prog = Program(result::create_program(&src, None).map_err(|e| format!("{e:?}"))?);
    // SAFETY: `prog` is live until the guard drops; the buffers are sized by NVRTC.
    unsafe {
        if let Err(e) = result::compile_program(prog.0, &["--gpu-architecture=compute_80"]) {
            let log = result::get_program_log(prog.0)
                .map(|l| String::from_utf8_lossy(&c_bytes(&l)).trim().to_string())
                .unwrap_or_default();
            return Err(format!("{e:?} {log}").trim().to_string());
        }
        Ok(c_bytes(
            &result::get_ptx(prog.0).map_err(|e| format!("{e:?}"))?,
        ))
    }
}

/// `13.0.88` from a PTX header line `// Cuda compilation tools, release 13.0, V13.0.88`.
fn release_from_ptx(ptx: &str) -> Option<String> {
    let line = ptx.lines().find(|l| l.contains("Cuda compilation tools"))?;
    let v = line.rsplit(", V").next()?.trim();
    let ok = !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    ok.then(|| v.to_string())
}

/// Registers, shared memory and spills of one kernel on one arch, from ptxas' report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: u32,
    /// Static shared memory (dynamic shared memory is in the launch geometry).
    pub shared_bytes: u32,
    pub stack_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

impl Resources {
    /// Parses the `--ptxas-options=-v` lines of a compile log.
    pub fn from_log(log: &str) -> Resources {
        let mut r = Resources::default();
        let num_before = |line: &str, unit: &str| -> Option<u32> {
            let i = line.find(unit)?;
            line[..i].split_whitespace().last()?.parse().ok()
        };
        for line in log.lines() {
            if line.contains("Used") && line.contains("registers") {
                r.registers = num_before(line, " registers").unwrap_or(0);
                r.shared_bytes = num_before(line, " bytes smem").unwrap_or(0);
            }
            if line.contains("stack frame") {
                r.stack_bytes = num_before(line, " bytes stack frame").unwrap_or(0);
                r.spill_store_bytes = num_before(line, " bytes spill stores").unwrap_or(0);
                r.spill_load_bytes = num_before(line, " bytes spill loads").unwrap_or(0);
            }
        }
        r
    }
}

/// ptxas messages that leave an sm_90a kernel correct but far slower than it was written to
/// be: each fails the compile (with `--ptxas-options=-v` ptxas prints them as infos).
pub const SM90A_PTXAS_ERRORS: &[(&str, &str)] = &[
    ("C7504", "setmaxnreg ignored"),
    ("C7508", "wgmma serialized"),
    ("C7511", "wgmma serialized: insufficient register resources"),
    (
        "C7514",
        "wgmma serialized: non-wgmma instructions read accumulator registers mid-pipeline",
    ),
    (
        "C7515",
        "wgmma serialized: non-wgmma instructions define accumulator registers",
    ),
    (
        "C7517",
        "warpgroup.wait injected to read accumulator registers",
    ),
    (
        "C7518",
        "wgmma serialized: a wgmma in a path ptxas cannot prove warp-uniform",
    ),
];

/// ptxas words for serialized wgmma, whatever the code: a message not (yet) in the table above
/// fails the compile too.
const WGMMA_SERIALIZED: &str = "wgmma.mma_async instructions are serialized";

/// What is wrong, by ptxas' report, with a compiled sm_90a kernel: the messages above, spills,
/// a stack frame or local memory (the accumulators of a wgmma kernel must stay in registers),
/// or no report at all (nothing could be checked). Empty when the kernel is sound.
pub fn sm90a_ptxas_problems(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (code, what) in SM90A_PTXAS_ERRORS {
        if let Some(line) = log.lines().find(|l| l.contains(code)) {
            out.push(format!("{code} ({what}): {}", line.trim()));
        }
    }
    let listed = |l: &str| SM90A_PTXAS_ERRORS.iter().any(|(code, _)| l.contains(code));
    if let Some(line) = log
        .lines()
        .find(|l| l.contains(WGMMA_SERIALIZED) && !listed(l))
    {
        out.push(format!("wgmma serialized: {}", line.trim()));
    }
    if !log
        .lines()
        .any(|l| l.contains("Used") && l.contains("registers"))
    {
        out.push("ptxas printed no resource report, so nothing could be checked".into());
        return out;
    }
    let r = Resources::from_log(log);
    if r.spill_store_bytes > 0 || r.spill_load_bytes > 0 {
        out.push(format!(
            "registers spill ({} bytes of spill stores, {} of spill loads, at {} registers a \
             thread)",
            r.spill_store_bytes, r.spill_load_bytes, r.registers
        ));
    }
    if r.stack_bytes > 0 {
        out.push(format!("{} bytes of stack frame", r.stack_bytes));
    }
    let lmem = log.lines().find_map(|l| {
        let i = l.find(" bytes lmem")?;
        l[..i].split_whitespace().last()?.parse::<u64>().ok()
    });
    if let Some(b) = lmem.filter(|&b| b > 0) {
        out.push(format!("{b} bytes of local memory"));
    }
    out
}

/// What one compile produced.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub ptx: Vec<u8>,
    pub cubin: Vec<u8>,
    pub log: String,
    pub resources: Resources,
}

/// The compiler's warnings in a compile log, one trimmed line each (ptxas's resource
/// reports are information, not warnings).
pub fn warnings(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("warning") && !l.starts_with("ptxas info")
        })
        .map(|l| l.trim().to_string())
        .collect()
}

/// The compile options for an arch, in the order given to NVRTC.
pub fn options(arch: Arch) -> Vec<String> {
    let mut o = vec![format!("--gpu-architecture={}", arch.as_str())];
    o.extend(BASE_OPTIONS.iter().map(|s| s.to_string()));
    o
}

/// Why a compile failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum CompileError {
    /// NVRTC rejected the source: its log and the options it was given.
    Rejected { log: String, options: String },
    /// NVRTC itself is missing or broken (no fault of the source).
    Broken(String),
}

/// Compiles `source` for `arch`, producing PTX and a cubin in one pass. On rejection the
/// error carries the NVRTC log and options; the caller adds the path of the rendered source.
pub fn compile(
    name: &str,
    source: &str,
    arch: Arch,
) -> std::result::Result<Compiled, CompileError> {
    use cudarc::nvrtc::{result, sys};
    let nvrtc = load().map_err(|e| CompileError::Broken(e.to_string()))?;
    let opts = options(arch);
    let fail = |what: String| CompileError::Rejected {
        log: what,
        options: opts.join(" "),
    };
    let src = CString::new(source).map_err(|_| CompileError::Rejected {
        log: "source contains a NUL byte".to_string(),
        options: String::new(),
    })?;
    let file = CString::new(format!("{name}.cu")).unwrap_or_default();
    let prog = Program(result::create_program(&src, Some(&file)).map_err(|e| {
        CompileError::Broken(format!(
            "NVRTC at {}: nvrtcCreateProgram: {e:?}",
            nvrtc.location
        ))
    })?);
    // SAFETY: `prog` stays live until the guard drops at the end of this function, on every
    // path; the buffers are sized by NVRTC's own size queries.
    unsafe {
        let compiled = result::compile_program(prog.0, &opts);
        let log = result::get_program_log(prog.0)
            .map(|l| String::from_utf8_lossy(&c_bytes(&l)).into_owned())
            .unwrap_or_default();
        if let Err(e) = compiled {
            // The source is never at fault for these: NVRTC lacks its builtins or memory.
            if matches!(
                e.0,
                sys::nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE
                    | sys::nvrtcResult::NVRTC_ERROR_OUT_OF_MEMORY
            ) {
                return Err(CompileError::Broken(format!(
                    "NVRTC is broken: {} failed to compile {name}: {e:?}\n{}\nTo fix: {INSTALL_HINT}",
                    nvrtc.location,
                    log.trim()
                )));
            }
            return Err(fail(format!("{e:?}\n{log}")));
        }
        let ptx = c_bytes(&result::get_ptx(prog.0).map_err(|e| fail(format!("{e:?}")))?);
        let mut size = 0usize;
        sys::nvrtcGetCUBINSize(prog.0, &mut size)
            .result()
            .map_err(|e| fail(format!("nvrtcGetCUBINSize: {e:?}")))?;
        let mut cubin = vec![0u8; size];
        sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut _)
            .result()
            .map_err(|e| fail(format!("nvrtcGetCUBIN: {e:?}")))?;
        if arch == Arch::Sm90a {
            let problems = sm90a_ptxas_problems(&log);
            if !problems.is_empty() {
                return Err(fail(format!(
                    "ptxas compiled it, but an sm_90a kernel must have none of these: {}\n{log}",
                    problems.join("; ")
                )));
            }
        }
        let resources = Resources::from_log(&log);
        Ok(Compiled {
            ptx,
            cubin,
            log,
            resources,
        })
    }
}

/// Destroys an NVRTC program however `compile` returns.
struct Program(cudarc::nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by create_program and destroyed only here.
        let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
    }
}

/// The bytes of a NUL-terminated C buffer, without the terminator.
fn c_bytes(buf: &[std::ffi::c_char]) -> Vec<u8> {
    buf.iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_release_from_a_ptx_header() {
        let ptx = "//\n// Generated by NVIDIA NVVM Compiler\n//\n// Compiler Build ID: CL-36424714\n\
                   // Cuda compilation tools, release 13.0, V13.0.88\n// Based on NVVM 7.0.1\n.version 9.0\n";
        assert_eq!(release_from_ptx(ptx).as_deref(), Some("13.0.88"));
        assert_eq!(release_from_ptx(".version 9.0\n"), None);
        assert_eq!(
            release_from_ptx("// Cuda compilation tools, release 13.0, Vx\n"),
            None
        );
    }

    /// A minimal ELF64 shared object header: one program header covering `seg` bytes, two
    /// section headers at `shoff`.
    fn elf(seg: u64, shoff: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.max(120)];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = if cfg!(target_endian = "little") { 1 } else { 2 };
        let put16 = |b: &mut Vec<u8>, o: usize, v: u16| {
            let bytes = if b[5] == 1 {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            b[o..o + 2].copy_from_slice(&bytes);
        };
        let put64 = |b: &mut Vec<u8>, o: usize, v: u64| {
            let bytes = if b[5] == 1 {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            b[o..o + 8].copy_from_slice(&bytes);
        };
        put16(&mut b, 16, 3);
        put64(&mut b, 32, 64);
        put64(&mut b, 40, shoff);
        put16(&mut b, 54, 56);
        put16(&mut b, 56, 1);
        put16(&mut b, 58, 64);
        put16(&mut b, 60, 2);
        put64(&mut b, 64 + 32, seg);
        b.truncate(len);
        b
    }

    #[test]
    fn a_library_shorter_than_its_elf_headers_say_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("libnvrtc.so.13");
        let check = |bytes: Vec<u8>| {
            std::fs::write(&p, bytes).unwrap();
            check_elf(&p)
        };
        assert_eq!(check(elf(200, 200, 328)), Ok(()));
        assert!(check(elf(200, 200, 327)).unwrap_err().contains("truncated"));
        assert!(check(elf(1000, 200, 328))
            .unwrap_err()
            .contains("describe 1000"));
        assert!(check(elf(200, u64::MAX, 328)).is_err());
        assert!(check(b"not a library".to_vec())
            .unwrap_err()
            .contains("not an ELF"));
        let mut exe = elf(200, 200, 328);
        exe[16] = 2; // ET_EXEC
        assert!(check(exe).is_err());
    }

    #[test]
    fn sm90a_guard_reads_the_ptxas_report() {
        let clean = "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
                     ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                     ptxas info    : Used 168 registers, used 16 barriers\n";
        assert_eq!(sm90a_ptxas_problems(clean), Vec::<String>::new());
        let spills = clean.replace(
            "0 bytes stack frame, 0 bytes spill stores",
            "8 bytes stack frame, 4 bytes spill stores",
        );
        let p = sm90a_ptxas_problems(&spills).join("\n");
        assert!(
            p.contains("spill") && p.contains("8 bytes of stack frame"),
            "{p}"
        );
        assert!(p.contains("at 168 registers a thread"), "{p}");
        let serial = format!(
            "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized \
             due to non wgmma instructions defining accumulator registers of a wgmma\n{clean}"
        );
        assert!(sm90a_ptxas_problems(&serial)[0].starts_with("C7515"));
        // What the Hopper attention kernel got from a wgmma under a branch on threadIdx.
        let divergent = format!(
            "ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized \
             due to program dependence on compiler-inserted WG.DP in divergent path in the function 'k'\n{clean}"
        );
        assert!(sm90a_ptxas_problems(&divergent)[0].starts_with("C7518"));
        let injected = format!(
            "ptxas info    : (C7517) warpgroup.wait is injected in around line 4449 by compiler to allow use \
             of registers defined by GMMA in function 'k'\n{clean}"
        );
        assert!(sm90a_ptxas_problems(&injected)[0].starts_with("C7517"));
        let unknown = format!(
            "ptxas info    : (C7599) Potential Performance Loss: wgmma.mma_async instructions are serialized \
             for a reason not seen yet\n{clean}"
        );
        let p = sm90a_ptxas_problems(&unknown);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("wgmma serialized: ") && p[0].contains("C7599"),
            "{p:?}"
        );
        let ignored = format!("ptxas warning : (C7504) 'setmaxnreg' ignored\n{clean}");
        assert!(sm90a_ptxas_problems(&ignored)[0].starts_with("C7504"));
        let lmem = clean.replace("16 barriers", "16 barriers, 64 bytes lmem");
        assert!(sm90a_ptxas_problems(&lmem)[0].contains("64 bytes of local memory"));
        assert!(sm90a_ptxas_problems("")[0].contains("no resource report"));
    }

    #[test]
    fn parses_ptxas_report() {
        let log = "ptxas info    : Compiling entry function 'k' for 'sm_90'\n\
                   ptxas info    : Function properties for k\n\
                   ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 40 registers, used 1 barriers, 256 bytes smem\n";
        let r = Resources::from_log(log);
        assert_eq!(
            r,
            Resources {
                registers: 40,
                shared_bytes: 256,
                stack_bytes: 8,
                spill_store_bytes: 4,
                spill_load_bytes: 12
            }
        );
    }
}
