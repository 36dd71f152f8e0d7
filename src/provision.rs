//! Installing the pinned NVRTC without a CUDA toolkit: the PyPI wheel, fetched by the user's
//! own `pip` into a versioned folder that the NVRTC search then finds from any crate.
//!
//! pip checks the wheel against the sha256 pinned here (`--require-hashes`), so a mirror or a
//! proxy cannot substitute another library. The wheel is installed into a staging folder
//! beside the target and published with one rename, so concurrent installers and a crash
//! mid-download never leave a half-installed NVRTC where the search would find it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};
use crate::nvrtc::PINNED_WHEEL;

/// sha256 of each published file of [`PINNED_WHEEL`] (x86-64 and aarch64 Linux).
pub const WHEEL_SHA256: &[&str] = &[
    "ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575",
    "d27f20a0ca67a4bb34268a5e951033496c5b74870b868bacd046b1b8e0c3267b",
];

/// Where the wheel puts the library, under an install folder.
const LIB_SUBDIR: &str = "nvidia/cu13/lib";
const LIB_NAME: &str = "libnvrtc.so.13";

/// The release the pin names, e.g. `13.0.88`.
pub fn pinned_release() -> &'static str {
    PINNED_WHEEL.rsplit("==").next().unwrap_or(PINNED_WHEEL)
}

/// The folder `tilegen nvrtc install` uses when given none:
/// `<user cache folder>/tilegen-nvrtc/<release>` (beside the kernel cache, not inside it,
/// so cleaning the kernel cache keeps NVRTC).
pub fn default_dir() -> Option<PathBuf> {
    crate::cache::user_cache_dir().map(|d| d.join("tilegen-nvrtc").join(pinned_release()))
}

/// The library folder inside an install folder.
pub fn lib_dir(install_dir: &Path) -> PathBuf {
    install_dir.join(LIB_SUBDIR)
}

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The installed `libnvrtc.so.13`.
    pub lib: PathBuf,
    /// True when a usable install was already there and nothing was fetched.
    pub already: bool,
}

/// The Python that runs pip: `TILEGEN_PYTHON` when set, else `python3`.
fn python() -> OsString {
    crate::env::var_os("TILEGEN_PYTHON").unwrap_or_else(|| "python3".into())
}

fn usable(install_dir: &Path) -> std::result::Result<PathBuf, String> {
    let lib = lib_dir(install_dir).join(LIB_NAME);
    crate::nvrtc::check_elf(&lib).map_err(|why| format!("{}: {why}", lib.display()))?;
    Ok(lib)
}

/// Installs the pinned NVRTC into `install_dir` (see [`default_dir`]), unless a usable one is
/// already there. Needs `pip` and network access to PyPI (or the index pip is configured
/// with); nothing is written at `install_dir` unless the whole install succeeded.
pub fn install(install_dir: &Path) -> Result<Installed> {
    if let Ok(lib) = usable(install_dir) {
        return Ok(Installed { lib, already: true });
    }
    let io = |what: &str, path: &Path, e: std::io::Error| {
        Error::Environment(format!(
            "nvrtc install: cannot {what} {}: {e}",
            path.display()
        ))
    };
    let parent = install_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
    // A broken or partial folder left by something else is never overwritten in place.
    if install_dir.symlink_metadata().is_ok() {
        return Err(Error::Environment(format!(
            "nvrtc install: {} exists but holds no usable NVRTC ({}); remove it and run again",
            install_dir.display(),
            usable(install_dir).err().unwrap_or_default()
        )));
    }
    let staging = tempfile::Builder::new()
        .prefix(".tilegen-nvrtc-install-")
        .tempdir_in(parent)
        .map_err(|e| io("create a staging folder in", parent, e))?;
    let requirements = staging.path().join("requirements.txt");
    let hashes: String = WHEEL_SHA256
        .iter()
        .map(|h| format!(" --hash=sha256:{h}"))
        .collect();
    std::fs::write(&requirements, format!("{PINNED_WHEEL}{hashes}\n"))
        .map_err(|e| io("write", &requirements, e))?;
    let root = staging.path().join("root");
    let python = python();
    let output = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(["--no-deps", "--only-binary=:all:", "--require-hashes", "--target"])
        .arg(&root)
        .arg("-r")
        .arg(&requirements)
        .output()
        .map_err(|e| {
            Error::Environment(format!(
                "nvrtc install: cannot run `{} -m pip`: {e} (set TILEGEN_PYTHON to a Python with pip)",
                python.to_string_lossy()
            ))
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // pip's last lines name the cause (no network, no matching wheel, a hash mismatch).
        let lines: Vec<&str> = stderr.lines().collect();
        let tail: Vec<String> = lines[lines.len().saturating_sub(12)..]
            .iter()
            .map(|l| format!("  {}", crate::escape::shown(l)))
            .collect();
        return Err(Error::Environment(format!(
            "nvrtc install: `{} -m pip install {PINNED_WHEEL}` failed ({}):\n{}",
            crate::escape::shown_path(python.as_ref()),
            output.status,
            tail.join("\n")
        )));
    }
    usable(&root).map_err(|why| {
        Error::Environment(format!(
            "nvrtc install: pip succeeded but the wheel gave no usable NVRTC: {why}"
        ))
    })?;
    match std::fs::rename(&root, install_dir) {
        Ok(()) => {}
        // Another installer published first: theirs is used if it is whole.
        Err(_) if usable(install_dir).is_ok() => {}
        Err(e) => return Err(io("publish the install at", install_dir, e)),
    }
    let lib = usable(install_dir).map_err(Error::Environment)?;
    Ok(Installed {
        lib,
        already: false,
    })
}
