//! Which of a kernel's embedded binaries runs on a device (a pure choice, testable without a
//! GPU), the tables the generated bindings fill in, and, with the `cuda` feature, loading them
//! into a CUDA context ([`Loader`]) and the error type of the generated bindings ([`Error`]).
//! tilegen's `verify` and `bench` choose binaries with the same [`choose_binary`].

use std::fmt;

#[cfg(feature = "cuda")]
pub use crate::cuda::{encode_tensor_map, launch_config, Arg, Error, Function, Loader, TensorMap};

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

/// A CUDA version (what a driver supports, e.g. 12.4) or a PTX ISA version (what a PTX
/// file's `.version` line declares, e.g. 9.0), as major.minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32) -> Version {
        Version { major, minor }
    }

    /// Parses `9.0`, `12.4`.
    pub fn parse(text: &str) -> Option<Version> {
        let (major, minor) = text.trim().split_once('.')?;
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        Some(Version::new(number(major)?, number(minor)?))
    }

    /// The version `cuDriverGetVersion` reports as 1000 * major + 10 * minor (12040 is 12.4).
    pub fn from_driver(v: i32) -> Option<Version> {
        (v > 0).then(|| Version::new(v as u32 / 1000, (v as u32 % 1000) / 10))
    }

    /// The PTX ISA version a PTX file declares in its `.version X.Y` line.
    pub fn of_ptx(ptx: &[u8]) -> Option<Version> {
        // The directive comes first after comments; a prefix is enough and avoids
        // requiring the whole file to be UTF-8.
        let head = &ptx[..ptx.len().min(4096)];
        let text = match std::str::from_utf8(head) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
        };
        // Major and minor under 100: what PTX has ever had, and what arithmetic on them
        // (the CUDA release a newer ISA needs) may assume of a file from outside.
        text.lines()
            .find_map(|l| Version::parse(l.trim().strip_prefix(".version")?))
            .filter(|v| v.major < 100 && v.minor < 100)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The first CUDA version of each PTX ISA version: a driver for that CUDA version (or newer)
/// JIT-compiles PTX of that ISA version; an older one fails with
/// CUDA_ERROR_UNSUPPORTED_PTX_VERSION. From the PTX ISA release history table, "Release
/// Notes" of the PTX ISA manual:
/// <https://docs.nvidia.com/cuda/parallel-thread-execution/#release-notes-ptx-release-history>
/// (note the step at 8.6, which came with CUDA 12.7); cuda-python's
/// `cuda.bindings.utils.get_minimal_required_cuda_ver_from_ptx_ver` has the same table.
/// This is the only copy of the mapping in tilegen and the bindings: add rows as CUDA
/// releases add ISA versions; ISA versions past the table are extrapolated by
/// [`min_cuda_for_ptx`].
pub const PTX_ISA_CUDA: &[(Version, Version)] = &[
    (Version::new(1, 0), Version::new(1, 0)),
    (Version::new(1, 1), Version::new(1, 1)),
    (Version::new(1, 2), Version::new(2, 0)),
    (Version::new(1, 3), Version::new(2, 1)),
    (Version::new(1, 4), Version::new(2, 2)),
    (Version::new(2, 0), Version::new(3, 0)),
    (Version::new(2, 1), Version::new(3, 1)),
    (Version::new(2, 2), Version::new(3, 2)),
    (Version::new(2, 3), Version::new(4, 0)),
    (Version::new(3, 0), Version::new(4, 1)),
    (Version::new(3, 1), Version::new(5, 0)),
    (Version::new(3, 2), Version::new(5, 5)),
    (Version::new(4, 0), Version::new(6, 0)),
    (Version::new(4, 1), Version::new(6, 5)),
    (Version::new(4, 2), Version::new(7, 0)),
    (Version::new(4, 3), Version::new(7, 5)),
    (Version::new(5, 0), Version::new(8, 0)),
    (Version::new(6, 0), Version::new(9, 0)),
    (Version::new(6, 1), Version::new(9, 1)),
    (Version::new(6, 2), Version::new(9, 2)),
    (Version::new(6, 3), Version::new(10, 0)),
    (Version::new(6, 4), Version::new(10, 1)),
    (Version::new(6, 5), Version::new(10, 2)),
    (Version::new(7, 0), Version::new(11, 0)),
    (Version::new(7, 1), Version::new(11, 1)),
    (Version::new(7, 2), Version::new(11, 2)),
    (Version::new(7, 3), Version::new(11, 3)),
    (Version::new(7, 4), Version::new(11, 4)),
    (Version::new(7, 5), Version::new(11, 5)),
    (Version::new(7, 6), Version::new(11, 6)),
    (Version::new(7, 7), Version::new(11, 7)),
    (Version::new(7, 8), Version::new(11, 8)),
    (Version::new(8, 0), Version::new(12, 0)),
    (Version::new(8, 1), Version::new(12, 1)),
    (Version::new(8, 2), Version::new(12, 2)),
    (Version::new(8, 3), Version::new(12, 3)),
    (Version::new(8, 4), Version::new(12, 4)),
    (Version::new(8, 5), Version::new(12, 5)),
    (Version::new(8, 6), Version::new(12, 7)),
    (Version::new(8, 7), Version::new(12, 8)),
    (Version::new(8, 8), Version::new(12, 9)),
    (Version::new(9, 0), Version::new(13, 0)),
    (Version::new(9, 1), Version::new(13, 1)),
];

/// The oldest CUDA version whose driver accepts PTX of ISA version `isa` ([`PTX_ISA_CUDA`]).
/// ISA versions newer than the table's last are taken to need CUDA (major + 4).minor, and
/// never less than the last row: the pattern since ISA 7.0.
pub fn min_cuda_for_ptx(isa: Version) -> Version {
    let (first, last) = (PTX_ISA_CUDA[0], PTX_ISA_CUDA[PTX_ISA_CUDA.len() - 1]);
    if isa < first.0 {
        return first.1;
    }
    if let Some((_, cuda)) = PTX_ISA_CUDA.iter().find(|(i, _)| *i == isa) {
        return *cuda;
    }
    if isa > last.0 {
        return Version::new(isa.major.saturating_add(4), isa.minor).max(last.1);
    }
    // A gap inside the table (an ISA version that was never released): the next row's.
    PTX_ISA_CUDA
        .iter()
        .find(|(i, _)| *i > isa)
        .map_or(last.1, |(_, cuda)| *cuda)
}

/// One binary [`choose_binary`] can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub sm: Sm,
    pub kind: BinaryKind,
    /// For PTX, the ISA version of its `.version` line; None when unknown (the driver then
    /// decides when loading).
    pub ptx_isa: Option<Version>,
}

impl Candidate {
    pub fn cubin(sm: Sm) -> Candidate {
        Candidate {
            sm,
            kind: BinaryKind::Cubin,
            ptx_isa: None,
        }
    }

    pub fn ptx(sm: Sm, isa: Option<Version>) -> Candidate {
        Candidate {
            sm,
            kind: BinaryKind::Ptx,
            ptx_isa: isa,
        }
    }
}

/// Why [`choose_binary`] found nothing, and so what the device needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoFit {
    /// Nothing was built for this architecture: no cubin that runs on it and no PTX for it or
    /// an earlier architecture.
    Arch,
    /// PTX for this architecture exists but its ISA version is too new for the driver: the
    /// driver must support at least CUDA `needs` (the least any such PTX needs).
    Driver { needs: Version },
}

/// Which of the `available` binaries runs best on a device of compute capability
/// `major.minor` whose driver supports CUDA `driver` (None: unknown), as an index into
/// `available`:
/// 1. a cubin for exactly this architecture (the arch-specific `a` one first);
/// 2. else a cubin of the same major version and a lower minor (sm_80 code runs on sm_86;
///    arch-specific cubins never run elsewhere), the highest minor first;
/// 3. else PTX for the highest architecture not above the device's whose ISA version the
///    driver accepts ([`min_cuda_for_ptx`]), compiled by the driver's JIT (arch-specific PTX
///    only on exactly its architecture; PTX of unknown ISA, or under an unknown driver
///    version, is left to the driver);
/// 4. else why nothing fits.
pub fn choose_binary(
    major: u32,
    minor: u32,
    driver: Option<Version>,
    available: &[Candidate],
) -> Result<usize, NoFit> {
    let exact = |s: &Sm| s.major == major && s.minor == minor;
    let best = |ok: &dyn Fn(&Candidate) -> bool| {
        available
            .iter()
            .enumerate()
            .filter(|(_, c)| ok(c))
            // Highest (major, minor), arch-specific before generic; first listed on ties.
            .max_by_key(|&(i, c)| {
                let s = c.sm;
                (s.major, s.minor, s.arch_specific, core::cmp::Reverse(i))
            })
            .map(|(i, _)| i)
    };
    let ptx_fits_arch = |c: &Candidate| {
        let s = &c.sm;
        c.kind == BinaryKind::Ptx
            && (s.major, s.minor) <= (major, minor)
            && (!s.arch_specific || exact(s))
    };
    let driver_takes = |c: &Candidate| match (c.ptx_isa, driver) {
        (Some(isa), Some(driver)) => min_cuda_for_ptx(isa) <= driver,
        _ => true,
    };
    let chosen = best(&|c| c.kind == BinaryKind::Cubin && exact(&c.sm))
        .or_else(|| {
            best(&|c| {
                let s = &c.sm;
                c.kind == BinaryKind::Cubin
                    && s.major == major
                    && s.minor < minor
                    && !s.arch_specific
            })
        })
        .or_else(|| best(&|c| ptx_fits_arch(c) && driver_takes(c)));
    chosen.ok_or_else(|| {
        available
            .iter()
            .filter(|c| ptx_fits_arch(c))
            .filter_map(|c| c.ptx_isa.map(min_cuda_for_ptx))
            .min()
            .map_or(NoFit::Arch, |needs| NoFit::Driver { needs })
    })
}

/// One embedded kernel binary.
#[derive(Debug, Clone, Copy)]
pub struct Binary {
    /// Architecture it was built for, e.g. `sm_90`.
    pub arch: &'static str,
    pub kind: BinaryKind,
    /// For PTX, the ISA version of its `.version` line, read by the generator; None for cubins.
    pub ptx_isa: Option<Version>,
    pub bytes: &'static [u8],
}

impl Binary {
    /// What [`choose_binary`] sees of it; None when its arch does not parse.
    pub fn candidate(&self) -> Option<Candidate> {
        Some(Candidate {
            sm: Sm::parse(self.arch)?,
            kind: self.kind,
            ptx_isa: self.ptx_isa,
        })
    }

    /// e.g. `sm_80 cubin`, `sm_90 PTX (ISA 9.0)`.
    pub fn describe(&self) -> String {
        match self.ptx_isa {
            Some(isa) => format!("{} {} (ISA {isa})", self.arch, kind_name(self.kind)),
            None => format!("{} {}", self.arch, kind_name(self.kind)),
        }
    }
}

/// One kernel of the library: its instance name, entry point, dynamic shared memory, cluster
/// shape and binaries.
#[derive(Debug, Clone, Copy)]
pub struct KernelInfo {
    pub name: &'static str,
    pub entry_point: &'static str,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// Blocks per cluster, compiled into the kernel (1: no clusters). Kernels with clusters
    /// have persistent grids, which the loader holds to the clusters the device runs at once
    /// ([`crate::launch_rules::hold_clusters`]).
    pub cluster: u32,
    pub binaries: &'static [Binary],
}

impl KernelInfo {
    /// The binary [`choose_binary`] picks for a device of compute capability `major.minor`
    /// whose driver supports CUDA `driver` (None: unknown, any PTX ISA is tried).
    pub fn binary_for(
        &self,
        major: u32,
        minor: u32,
        driver: Option<Version>,
    ) -> Result<&'static Binary, NoFit> {
        // Binaries whose arch does not parse are never chosen.
        let parsed: Vec<(&'static Binary, Candidate)> = self
            .binaries
            .iter()
            .filter_map(|b| b.candidate().map(|c| (b, c)))
            .collect();
        let available: Vec<Candidate> = parsed.iter().map(|(_, c)| *c).collect();
        choose_binary(major, minor, driver, &available).map(|i| parsed[i].0)
    }
}

impl KernelInfo {
    /// Whether the kernel can run on `device`: a binary of it loads there
    /// ([`KernelInfo::binary_for`]) and, for a kernel that takes tensor maps (`tensor_maps`),
    /// the driver can encode them ([`crate::tensor_map::driver_encodes`]).
    pub fn runs_on(&self, device: &Device, tensor_maps: bool) -> bool {
        self.binary_for(device.major, device.minor, device.driver)
            .is_ok()
            && (!tensor_maps || crate::tensor_map::driver_encodes(device))
    }
}

/// What the loader read off the device once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub major: u32,
    pub minor: u32,
    /// Streaming multiprocessors, for choosing among instances by problem size.
    pub sm_count: u32,
    /// The CUDA version the driver supports (`cuDriverGetVersion`), when it says.
    pub driver: Option<Version>,
    /// The device's name (`cuDeviceGetName`, e.g. `NVIDIA H200`); tuning tables are keyed by
    /// it. Empty when unknown.
    pub name: DeviceName,
}

impl Device {
    /// The device's architecture, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }
}

/// A device name held inline, so that [`Device`] stays `Copy` and can be a `const`: up to
/// [`DeviceName::CAPACITY`] bytes, longer names cut at a character boundary.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DeviceName {
    bytes: [u8; DeviceName::CAPACITY],
    len: u8,
}

impl DeviceName {
    pub const CAPACITY: usize = 96;

    /// No name (a device that did not say, or a made-up one in tests).
    pub const fn unknown() -> DeviceName {
        DeviceName {
            bytes: [0; DeviceName::CAPACITY],
            len: 0,
        }
    }

    /// `name`, cut to [`DeviceName::CAPACITY`] bytes at a character boundary.
    pub const fn new(name: &str) -> DeviceName {
        let b = name.as_bytes();
        let mut len = if b.len() < Self::CAPACITY {
            b.len()
        } else {
            Self::CAPACITY
        };
        // Back up over continuation bytes so the cut leaves whole UTF-8 characters.
        while len < b.len() && len > 0 && (b[len] & 0xC0) == 0x80 {
            len -= 1;
        }
        let mut bytes = [0; DeviceName::CAPACITY];
        let mut i = 0;
        while i < len {
            bytes[i] = b[i];
            i += 1;
        }
        DeviceName {
            bytes,
            len: len as u8,
        }
    }

    pub fn as_str(&self) -> &str {
        // Built from a `&str` cut at a character boundary, so always valid.
        core::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl core::fmt::Debug for DeviceName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

fn kind_name(kind: BinaryKind) -> &'static str {
    match kind {
        BinaryKind::Cubin => "cubin",
        BinaryKind::Ptx => "PTX",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm(name: &str) -> Sm {
        Sm::parse(name).unwrap()
    }

    fn v(major: u32, minor: u32) -> Option<Version> {
        Some(Version::new(major, minor))
    }

    fn cubin(arch: &str) -> Candidate {
        Candidate::cubin(sm(arch))
    }

    fn ptx(arch: &str, isa: (u32, u32)) -> Candidate {
        Candidate::ptx(sm(arch), v(isa.0, isa.1))
    }

    /// What NVRTC 13.0 gives: sm_80 and sm_90 cubins and PTX of ISA 9.0.
    fn library() -> Vec<Candidate> {
        vec![
            cubin("sm_80"),
            ptx("sm_80", (9, 0)),
            cubin("sm_90"),
            ptx("sm_90", (9, 0)),
        ]
    }

    #[test]
    fn exact_cubin() {
        let lib = library();
        assert_eq!(choose_binary(9, 0, v(13, 0), &lib), Ok(2));
        assert_eq!(choose_binary(8, 0, v(13, 0), &lib), Ok(0));
        // A cubin does not go through the PTX JIT: an old driver, or none known, changes nothing.
        assert_eq!(choose_binary(9, 0, v(12, 2), &lib), Ok(2));
        assert_eq!(choose_binary(9, 0, None, &lib), Ok(2));
        // sm_90a first on sm_90, and only there.
        let with_a = [cubin("sm_90"), cubin("sm_90a"), ptx("sm_90a", (9, 0))];
        assert_eq!(choose_binary(9, 0, v(13, 0), &with_a), Ok(1));
        // Elsewhere the generic one, and neither `a` binary.
        assert_eq!(choose_binary(9, 1, v(13, 0), &with_a), Ok(0));
        assert_eq!(choose_binary(10, 0, v(13, 0), &with_a), Err(NoFit::Arch));
    }

    #[test]
    fn compatible_minor_cubin() {
        let lib = library();
        // sm_86 and sm_89 run the sm_80 cubin, before any PTX, whatever the driver.
        assert_eq!(choose_binary(8, 6, v(13, 0), &lib), Ok(0));
        assert_eq!(choose_binary(8, 9, v(12, 0), &lib), Ok(0));
        // The highest lower minor; never a higher one.
        let eights = [cubin("sm_80"), cubin("sm_86"), cubin("sm_89")];
        assert_eq!(choose_binary(8, 7, None, &eights), Ok(1));
        assert_eq!(
            choose_binary(8, 0, None, &[cubin("sm_86")]),
            Err(NoFit::Arch)
        );
        // Arch-specific cubins never stand in for another minor.
        assert_eq!(
            choose_binary(9, 1, None, &[cubin("sm_90a")]),
            Err(NoFit::Arch)
        );
    }

    #[test]
    fn ptx_fallback() {
        let lib = library();
        // Blackwell (10.0, 12.0): no cubin of that major; the highest PTX below it that the
        // driver accepts.
        assert_eq!(choose_binary(10, 0, v(13, 0), &lib), Ok(3));
        assert_eq!(choose_binary(12, 0, v(13, 2), &lib), Ok(3));
        // An unknown driver version leaves it to the driver.
        assert_eq!(choose_binary(12, 0, None, &lib), Ok(3));
        // PTX of unknown ISA too.
        let unknown = [Candidate::ptx(sm("sm_90"), None)];
        assert_eq!(choose_binary(12, 0, v(12, 0), &unknown), Ok(0));
        // Arch-specific PTX only on its own architecture.
        let a_only = [ptx("sm_90a", (9, 0))];
        assert_eq!(choose_binary(9, 0, v(13, 0), &a_only), Ok(0));
        assert_eq!(choose_binary(10, 0, v(13, 0), &a_only), Err(NoFit::Arch));
    }

    #[test]
    fn ptx_too_new_for_the_driver() {
        let lib = library();
        // ISA 9.0 needs CUDA 13.0: a 12.x driver cannot JIT it, and says so.
        for driver in [v(12, 9), v(12, 4), v(11, 8)] {
            assert_eq!(
                choose_binary(10, 0, driver, &lib),
                Err(NoFit::Driver {
                    needs: Version::new(13, 0)
                })
            );
        }
        // Older PTX that the driver accepts is taken instead of the newest arch's.
        let mixed = [
            ptx("sm_80", (8, 0)),
            ptx("sm_90", (9, 0)),
            ptx("sm_86", (8, 7)),
        ];
        assert_eq!(choose_binary(10, 0, v(12, 8), &mixed), Ok(2));
        assert_eq!(choose_binary(10, 0, v(12, 4), &mixed), Ok(0));
        assert_eq!(choose_binary(10, 0, v(13, 0), &mixed), Ok(1));
        // What is needed is the least of what the fitting PTX needs.
        assert_eq!(
            choose_binary(10, 0, v(11, 8), &mixed),
            Err(NoFit::Driver {
                needs: Version::new(12, 0)
            })
        );
    }

    #[test]
    fn no_fit_at_all() {
        let lib = library();
        // Turing: nothing for sm_75 or below, whatever the driver.
        assert_eq!(choose_binary(7, 5, v(13, 0), &lib), Err(NoFit::Arch));
        assert_eq!(choose_binary(7, 5, v(11, 0), &lib), Err(NoFit::Arch));
        assert_eq!(choose_binary(9, 0, v(13, 0), &[]), Err(NoFit::Arch));
    }

    #[test]
    fn ptx_isa_to_cuda() {
        assert_eq!(min_cuda_for_ptx(Version::new(9, 0)), Version::new(13, 0));
        assert_eq!(min_cuda_for_ptx(Version::new(8, 5)), Version::new(12, 5));
        // No ISA 8.6 until CUDA 12.7.
        assert_eq!(min_cuda_for_ptx(Version::new(8, 6)), Version::new(12, 7));
        assert_eq!(min_cuda_for_ptx(Version::new(8, 8)), Version::new(12, 9));
        assert_eq!(min_cuda_for_ptx(Version::new(7, 0)), Version::new(11, 0));
        // Past the table: the pattern, never below the last row.
        assert_eq!(min_cuda_for_ptx(Version::new(9, 3)), Version::new(13, 3));
        assert_eq!(min_cuda_for_ptx(Version::new(10, 0)), Version::new(14, 0));
        // Whatever a caller passes, no overflow.
        assert_eq!(
            min_cuda_for_ptx(Version::new(u32::MAX, 9)),
            Version::new(u32::MAX, 9)
        );
        // Between rows (never released): the next row's.
        assert_eq!(min_cuda_for_ptx(Version::new(8, 9)), Version::new(13, 0));
        // The table is sorted both ways.
        assert!(PTX_ISA_CUDA
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    }

    #[test]
    fn versions_parse() {
        assert_eq!(Version::parse("9.0"), v(9, 0));
        assert_eq!(Version::parse(" 12.4 "), v(12, 4));
        for bad in ["9", "9.", ".0", "9.0.1", "x.y", "-1.0"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
        assert_eq!(Version::from_driver(13000), v(13, 0));
        assert_eq!(Version::from_driver(12040), v(12, 4));
        assert_eq!(Version::from_driver(0), None);
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n\n.version 9.0\n.target sm_80\n";
        assert_eq!(Version::of_ptx(ptx), v(9, 0));
        assert_eq!(Version::of_ptx(b".target sm_80\n"), None);
        assert_eq!(Version::of_ptx(b".version x\n"), None);
        assert_eq!(Version::of_ptx(b"\xff\xfe"), None);
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn no_binary_says_what_the_device_needs() {
        let e = Error::NoBinary {
            kernel: "softmax_f32_online_b512_i2",
            device: "sm_120".into(),
            driver: v(12, 4),
            available: vec!["sm_90 cubin".into(), "sm_90 PTX (ISA 9.0)".into()],
            needs: NoFit::Driver {
                needs: Version::new(13, 0),
            },
        };
        let msg = e.to_string();
        assert!(
            msg.contains("CUDA 13.0 or newer")
                && msg.contains("supports CUDA 12.4")
                && msg.contains("sm_120")
                && msg.contains("softmax_f32_online_b512_i2"),
            "{msg}"
        );
        let e = Error::NoBinary {
            kernel: "k",
            device: "sm_75".into(),
            driver: v(13, 0),
            available: vec!["sm_80 cubin".into()],
            needs: NoFit::Arch,
        };
        let msg = e.to_string();
        assert!(
            msg.contains("Add sm_75 to the spec's archs") && msg.contains("sm_80 cubin"),
            "{msg}"
        );
    }
}
