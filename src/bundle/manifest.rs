//! `bundle.json`: what a bundle holds (every member with its sha256 and size) and what it was
//! built with (tilegen and NVRTC versions, archs, PTX ISA versions). It is derived from the
//! library files alone, so verifying a bundle is recomputing it and comparing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::hashing::sha256_hex;
use crate::manifest::{self, FileRef, Manifest};
use crate::output::FileSet;

/// Bumped when `bundle.json` or the archive layout changes incompatibly; a reader refuses
/// any other value.
pub const FORMAT: u32 = 1;
/// The bundle manifest's name inside the archive (and in an unpacked folder).
pub const FILE_NAME: &str = "bundle.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleManifest {
    pub format: u32,
    pub tilegen_version: String,
    pub nvrtc_version: String,
    /// The library manifest's own format (`manifest.json`'s `format`).
    pub library_format: u32,
    /// Every arch some instance has binaries for, sorted.
    pub archs: Vec<String>,
    /// Every `.version X.Y` found in the PTX files, sorted.
    pub ptx_isa: Vec<String>,
    pub instances: usize,
    /// The mtime every archive member carries (`SOURCE_DATE_EPOCH`, else 0).
    pub source_date_epoch: u64,
    /// Every library file (not `bundle.json` itself), sorted by path.
    pub members: Vec<Member>,
    /// The tuning tables the library's manifest carries, one line each (none: omitted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuning: Vec<TunedDevice>,
}

/// One tuning table of a bundled library: the GPU it was measured on and how many entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunedDevice {
    pub device: String,
    pub compute_capability: [u32; 2],
    pub entries: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

/// What describing a library needs of one file: its size, sha256 and the PTX ISA version
/// its head declares, if any. A streamed member leaves only this behind.
#[derive(Debug, Clone)]
pub(crate) struct Digest {
    pub sha256: String,
    pub bytes: u64,
    pub ptx_isa: Option<String>,
}

/// Bytes of a file's start that [`ptx_isa_version`] reads (no further; see
/// [`crate::loader::Version::of_ptx`]).
pub(crate) const HEAD_BYTES: usize = 4096;

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest {
            sha256: sha256_hex(bytes),
            bytes: bytes.len() as u64,
            ptx_isa: ptx_isa_version(&bytes[..bytes.len().min(HEAD_BYTES)]),
        }
    }
}

impl BundleManifest {
    /// Describes a library's files (`manifest.json` among them). Fails, naming the file,
    /// when the files are not exactly the ones the library manifest lists with their hashes.
    pub fn describe(files: &FileSet, source_date_epoch: u64) -> Result<BundleManifest, String> {
        let digests = files
            .iter()
            .map(|(path, bytes)| (path.clone(), Digest::of(bytes)))
            .collect();
        let library_json = files.get(manifest::FILE_NAME).map(Vec::as_slice);
        Self::describe_digests(library_json, &digests, source_date_epoch)
    }

    /// [`BundleManifest::describe`] from each file's [`Digest`] and the bytes of
    /// `manifest.json` alone, which is all a bundle streamed past (and dropped) leaves.
    pub(crate) fn describe_digests(
        library_json: Option<&[u8]>,
        files: &BTreeMap<String, Digest>,
        source_date_epoch: u64,
    ) -> Result<BundleManifest, String> {
        let lib = library_manifest(library_json)?;
        check_library_files(&lib, files)?;
        let mut archs = BTreeSet::new();
        let mut ptx_isa = BTreeSet::new();
        for inst in &lib.instances {
            for t in &inst.targets {
                archs.insert(t.arch.as_str().to_string());
                let v = files[&t.ptx.path]
                    .ptx_isa
                    .clone()
                    .ok_or_else(|| format!("`{}` has no `.version X.Y` line", t.ptx.path))?;
                ptx_isa.insert(v);
            }
        }
        Ok(BundleManifest {
            format: FORMAT,
            tilegen_version: lib.tilegen_version.clone(),
            nvrtc_version: lib.nvrtc_version.clone(),
            library_format: lib.format,
            archs: archs.into_iter().collect(),
            ptx_isa: ptx_isa.into_iter().collect(),
            instances: lib.instances.len(),
            source_date_epoch,
            members: files
                .iter()
                .map(|(path, d)| Member {
                    path: path.clone(),
                    sha256: d.sha256.clone(),
                    bytes: d.bytes,
                })
                .collect(),
            tuning: lib
                .tuning
                .iter()
                .map(|t| TunedDevice {
                    device: t.device.name.clone(),
                    compute_capability: t.device.compute_capability,
                    entries: t.entries.len(),
                })
                .collect(),
        })
    }

    /// Canonical bytes: pretty JSON with a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("bundle manifest serializes");
        v.push(b'\n');
        v
    }

    /// Parses `bundle.json`, checking its format version before anything else so that a
    /// newer bundle gets a clear message rather than a field error.
    pub fn parse(bytes: &[u8]) -> Result<BundleManifest, String> {
        // Only `format` is read first (the rest is skipped, not built as a JSON tree: a
        // hostile file costs its own size in memory, no more).
        #[derive(Deserialize)]
        struct Format {
            format: Option<serde_json::Number>,
        }
        let format = match serde_json::from_slice::<Format>(bytes) {
            Ok(f) => f.format,
            Err(e) if e.is_syntax() || e.is_eof() => {
                return Err(format!("`{FILE_NAME}` is not JSON: {e}"))
            }
            Err(_) => None,
        };
        match format.and_then(|f| f.as_u64()) {
            Some(f) if f == u64::from(FORMAT) => {}
            Some(f) => {
                return Err(format!(
                    "`{FILE_NAME}`: unknown bundle format version {f} (this tilegen {} reads version {FORMAT})",
                    crate::VERSION
                ))
            }
            None => return Err(format!("`{FILE_NAME}` has no numeric `format` field")),
        }
        serde_json::from_slice(bytes).map_err(|e| format!("`{FILE_NAME}` is malformed: {e}"))
    }

    /// A short human summary for `tilegen bundle inspect`.
    pub fn summary(&self) -> String {
        let total: u64 = self.members.iter().map(|m| m.bytes).sum();
        let mut kinds: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
        for m in &self.members {
            let kind = m.path.rsplit('.').next().unwrap_or("");
            let e = kinds.entry(kind).or_default();
            e.0 += 1;
            e.1 += m.bytes;
        }
        let mut s = format!(
            "bundle format {}\ntilegen {}, NVRTC {}, library format {}\ninstances: {}\narchs: {}\nPTX ISA: {}\nSOURCE_DATE_EPOCH: {}\nmembers: {} files, {} bytes\n",
            self.format,
            self.tilegen_version,
            self.nvrtc_version,
            self.library_format,
            self.instances,
            self.archs.join(", "),
            self.ptx_isa.join(", "),
            self.source_date_epoch,
            self.members.len(),
            total
        );
        for (kind, (n, bytes)) in kinds {
            s += &format!("  .{kind}: {n} files, {bytes} bytes\n");
        }
        for t in &self.tuning {
            let [major, minor] = t.compute_capability;
            s += &format!(
                "tuning: {} (sm_{major}{minor}), {} entries\n",
                crate::escape::shown(&t.device),
                t.entries
            );
        }
        s
    }
}

/// The PTX ISA version a PTX file declares (`.version 8.5` → `8.5`).
pub fn ptx_isa_version(ptx: &[u8]) -> Option<String> {
    crate::loader::Version::of_ptx(ptx).map(|v| v.to_string())
}

/// The library's `manifest.json` (its bytes, when there is one), parsed and validated.
pub(crate) fn library_manifest(bytes: Option<&[u8]>) -> Result<Manifest, String> {
    let bytes =
        bytes.ok_or_else(|| format!("no `{}` (not a tilegen library)", manifest::FILE_NAME))?;
    let m = Manifest::from_bytes(bytes)
        .map_err(|e| format!("`{}` is malformed: {e}", manifest::FILE_NAME))?;
    if m.format != manifest::FORMAT {
        return Err(format!(
            "`{}` has library format {} (this tilegen {} reads {})",
            manifest::FILE_NAME,
            m.format,
            crate::VERSION,
            manifest::FORMAT
        ));
    }
    // Checked before anything is emitted from it: names become identifiers, paths become
    // `include_bytes!` arguments, text lands in comments; tensor maps and persistent grids
    // become launches that the driver encodes and sizes.
    let mut problems = tensor_map_problems(&m);
    problems.extend(m.problems());
    if problems.is_empty() {
        // A sound configuration: its maps must be the ones this tilegen derives from it (a
        // box or swizzle the kernel does not expect would make it wait for bytes that never
        // arrive, or write shared memory it did not reserve).
        for (i, inst) in m.instances.iter().enumerate() {
            let derived = crate::ops::tensor_maps(&manifest::spec_instance(inst));
            if inst.tensor_maps != derived {
                let json = |v: &Vec<crate::launch::TensorMap>| {
                    crate::escape::shown_prefix(&serde_json::to_string(v).unwrap_or_default(), 600)
                };
                problems.push(format!(
                    "instance {i} `{}`: `tensor_maps` {} differ from this configuration's, {}",
                    inst.name,
                    json(&inst.tensor_maps),
                    json(&derived)
                ));
            }
        }
    }
    if !problems.is_empty() {
        const SHOWN: usize = 20;
        let mut msg = format!(
            "`{}` is not a valid library manifest ({} problem{}):\n  {}",
            manifest::FILE_NAME,
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            problems[..problems.len().min(SHOWN)].join("\n  ")
        );
        if problems.len() > SHOWN {
            msg += &format!("\n  … and {} more", problems.len() - SHOWN);
        }
        return Err(msg);
    }
    Ok(m)
}

/// Largest persistent tile side, blocks per SM and dynamic shared memory a manifest may give
/// (sm_90: 227 KiB of shared memory per block, at most 32 resident blocks per SM).
const MAX_PERSISTENT_TILE: u32 = 1024;
const MAX_CTAS_PER_SM: u32 = 32;
const MAX_SHARED_BYTES: u32 = 227 * 1024;

/// What is wrong with the tensor maps and persistent grids of a manifest this process did not
/// write, each naming the instance and field: map names are identifiers, unique and no
/// argument's; `tensor` is a pointer argument of the instance and `dtype` its element type;
/// `dims` (1 to 5) are i64 size arguments or canonical literals in 1..=2^32, and `strides`
/// (one per dim after the first) i64 size arguments;
/// `box` has one extent per dim, each 1..=256, its inner row a multiple of 16 bytes and within
/// the swizzle's span; interleave needs 3 or more dims; only GEMMs and attention have maps; a
/// GEMM has a persistent grid exactly when it has maps, and attention a persistent_query_tiles
/// grid exactly when it has maps (else query_tiles), with sane tiles, blocks per SM, threads
/// and shared memory.
pub(crate) fn tensor_map_problems(m: &Manifest) -> Vec<String> {
    use crate::escape::{rust_name_problem, shown_prefix, DERIVED_NAME};
    use crate::launch::tma::{instance_dim, DimSource};
    use crate::launch::{ArgKind, GridRule, Interleave};
    let mut out = Vec::new();
    for (i, inst) in m.instances.iter().enumerate() {
        let at = format!("instance {i} `{}`", shown_prefix(&inst.name, 80));
        let mut bad = |field: &str, msg: String| out.push(format!("{at}: `{field}` {msg}"));
        let persistent = matches!(inst.launch.grid, GridRule::Persistent { .. });
        let persistent_attention =
            matches!(inst.launch.grid, GridRule::PersistentQueryTiles { .. });
        let attention_grid = inst.launch.grid.query_tile().is_some();
        let gemm = inst.op == crate::spec::model::Op::Gemm;
        let mapped = !inst.tensor_maps.is_empty();
        if mapped && !gemm && inst.op != crate::spec::model::Op::Attention {
            bad(
                "tensor_maps",
                format!("are given for op `{}`, which takes none", inst.op),
            );
        }
        // A GEMM's maps and its persistent grid come together; attention may take maps or not.
        if (persistent && !mapped) || (gemm && mapped && !persistent) {
            bad(
                "launch",
                format!(
                    "has {} grid but {} tensor maps (a persistent grid goes with tensor maps, \
                     and a GEMM's tensor maps with a persistent grid)",
                    if persistent {
                        "a persistent"
                    } else {
                        "a non-persistent"
                    },
                    inst.tensor_maps.len()
                ),
            );
        }
        if let GridRule::Persistent {
            tile_m,
            tile_n,
            ctas_per_sm,
            cluster,
        } = inst.launch.grid
        {
            let max = crate::launch::MAX_CLUSTER;
            if !(1..=max).contains(&cluster) {
                bad(
                    "launch",
                    format!("persistent cluster {cluster} is outside 1..={max}"),
                );
            }
            for (what, v) in [("tile_m", tile_m), ("tile_n", tile_n)] {
                if !(1..=MAX_PERSISTENT_TILE).contains(&v) {
                    bad(
                        "launch",
                        format!("persistent {what} {v} is outside 1..={MAX_PERSISTENT_TILE}"),
                    );
                }
            }
            if !(1..=MAX_CTAS_PER_SM).contains(&ctas_per_sm) {
                bad(
                    "launch",
                    format!(
                        "persistent ctas_per_sm {ctas_per_sm} is outside 1..={MAX_CTAS_PER_SM}"
                    ),
                );
            }
        }
        // Attention launches by query tiles, and nothing else does; its persistent grid goes
        // with its tensor maps (the Hopper instances), the other with none.
        let attention = inst.op == crate::spec::model::Op::Attention;
        if attention_grid != attention {
            bad(
                "launch",
                format!(
                    "op `{}` with grid rule {:?} (query_tiles and persistent_query_tiles are attention's, and only its)",
                    inst.op, inst.launch.grid
                ),
            );
        }
        if attention && attention_grid && persistent_attention != mapped {
            bad(
                "launch",
                format!(
                    "attention with grid rule {:?} and {} tensor maps (persistent_query_tiles goes with tensor maps, query_tiles without)",
                    inst.launch.grid,
                    inst.tensor_maps.len()
                ),
            );
        }
        if let Some(tile_q) = inst.launch.grid.query_tile() {
            if !(16..=256).contains(&tile_q) || !tile_q.is_multiple_of(16) {
                bad(
                    "launch",
                    format!("query_tiles tile_q {tile_q} is not a multiple of 16 in 16..=256"),
                );
            }
        }
        if let GridRule::PersistentQueryTiles { ctas_per_sm, .. } = inst.launch.grid {
            if !(1..=MAX_CTAS_PER_SM).contains(&ctas_per_sm) {
                bad(
                    "launch",
                    format!(
                        "persistent_query_tiles ctas_per_sm {ctas_per_sm} is outside 1..={MAX_CTAS_PER_SM}"
                    ),
                );
            }
        }
        // Blocks of the persistent and query-tile rules: whole warps, shared memory a block can have.
        if matches!(
            inst.launch.grid,
            GridRule::Persistent { .. }
                | GridRule::QueryTiles { .. }
                | GridRule::PersistentQueryTiles { .. }
        ) {
            let threads = inst.launch.threads;
            if !(32..=1024).contains(&threads) || !threads.is_multiple_of(32) {
                bad(
                    "launch",
                    format!("threads {threads} is not a whole number of warps up to 1024"),
                );
            }
            if inst.launch.shared_bytes > MAX_SHARED_BYTES {
                bad(
                    "launch",
                    format!(
                        "shared_bytes {} is more than a block can have ({MAX_SHARED_BYTES})",
                        inst.launch.shared_bytes
                    ),
                );
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (j, t) in inst.tensor_maps.iter().enumerate() {
            let field = format!("tensor_maps[{j}]");
            let mut bad = |msg: String| bad(&field, msg);
            if let Some(p) = rust_name_problem(&t.name, DERIVED_NAME) {
                bad(format!(
                    "name `{}` is not a plain identifier ({p})",
                    shown_prefix(&t.name, 80)
                ));
                continue;
            }
            if !names.insert(t.name.as_str()) || inst.args.iter().any(|a| a.name == t.name) {
                bad(format!(
                    "name `{}` is used twice among the kernel's parameters",
                    t.name
                ));
            }
            let arg = |name: &str| inst.args.iter().find(|a| a.name == name);
            match arg(&t.tensor) {
                Some(a) if a.kind != ArgKind::Scalar => {
                    if a.ty != t.dtype.as_str() {
                        bad(format!(
                            "dtype {} differs from its tensor `{}`'s element type {}",
                            t.dtype,
                            t.tensor,
                            shown_prefix(&a.ty, 20)
                        ));
                    }
                }
                _ => bad(format!(
                    "tensor `{}` is not a pointer argument of the instance",
                    shown_prefix(&t.tensor, 80)
                )),
            }
            let size =
                |name: &str| arg(name).is_some_and(|a| a.kind == ArgKind::Scalar && a.ty == "i64");
            let not_size = |what: &str, name: &str| {
                format!(
                    "{what} names `{}`, which is not a size argument of the instance",
                    shown_prefix(name, 80)
                )
            };
            for d in &t.dims {
                match instance_dim(d) {
                    Ok(DimSource::Arg(name)) if !size(name) => bad(not_size("dims", name)),
                    Ok(_) => {}
                    Err(why) => bad(format!("dims {why}")),
                }
            }
            for d in &t.strides {
                if !size(d) {
                    bad(not_size("strides", d));
                }
            }
            let rank = t.dims.len();
            if !(1..=crate::tensor_map::MAX_RANK).contains(&rank) {
                bad(format!(
                    "has {rank} dims (1 to {})",
                    crate::tensor_map::MAX_RANK
                ));
                continue;
            }
            if t.strides.len() + 1 != rank {
                bad(format!(
                    "has {} strides for {rank} dims (one per dim after the first)",
                    t.strides.len()
                ));
            }
            if t.box_dims.len() != rank {
                bad(format!(
                    "box has {} extents for {rank} dims",
                    t.box_dims.len()
                ));
                continue;
            }
            if let Some(b) = t
                .box_dims
                .iter()
                .find(|b| !(1..=crate::tensor_map::MAX_BOX).contains(*b))
            {
                bad(format!(
                    "box extent {b} is outside 1..={}",
                    crate::tensor_map::MAX_BOX
                ));
                continue;
            }
            let inner = t.box_dims[0] as u64 * t.dtype.size() as u64;
            if t.interleave == Interleave::None {
                if !inner.is_multiple_of(16) {
                    bad(format!(
                        "box's inner extent is {inner} bytes, not a multiple of 16"
                    ));
                }
                let span = match t.swizzle {
                    crate::launch::Swizzle::None => None,
                    crate::launch::Swizzle::B32 => Some(32),
                    crate::launch::Swizzle::B64 => Some(64),
                    crate::launch::Swizzle::B128 => Some(128),
                };
                if let Some(span) = span.filter(|&s| inner > s) {
                    bad(format!(
                        "box's inner extent is {inner} bytes, wider than the {} swizzle's {span}",
                        t.swizzle
                    ));
                }
            } else if rank < 3 {
                bad(format!(
                    "interleave {} needs 3 or more dims, not {rank}",
                    t.interleave
                ));
            }
        }
    }
    out
}

/// The files must be exactly `manifest.json` plus the files it lists, each file the manifest
/// describes with a hash must have it.
fn check_library_files(lib: &Manifest, files: &BTreeMap<String, Digest>) -> Result<(), String> {
    let listed: BTreeSet<&str> = lib
        .files
        .iter()
        .map(String::as_str)
        .chain([manifest::FILE_NAME])
        .collect();
    if let Some(missing) = listed.iter().find(|p| !files.contains_key(**p)) {
        return Err(format!(
            "`{missing}` is listed in `{}` but missing",
            manifest::FILE_NAME
        ));
    }
    if let Some(extra) = files.keys().find(|p| !listed.contains(p.as_str())) {
        return Err(format!(
            "`{extra}` is not listed in `{}`",
            manifest::FILE_NAME
        ));
    }
    let check = |r: &FileRef| -> Result<(), String> {
        let d = files.get(&r.path).ok_or_else(|| {
            format!(
                "`{}` is described in `{}` but missing",
                r.path,
                manifest::FILE_NAME
            )
        })?;
        if d.bytes != r.bytes || d.sha256 != r.sha256 {
            return Err(format!(
                "`{}` does not match `{}` (sha256 {}, expected {})",
                r.path,
                manifest::FILE_NAME,
                d.sha256,
                r.sha256
            ));
        }
        Ok(())
    };
    for inst in &lib.instances {
        check(&inst.source)?;
        for t in &inst.targets {
            check(&t.ptx)?;
            check(&t.cubin)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ptx_isa_version() {
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n\n.version 9.0\n.target sm_80\n";
        assert_eq!(ptx_isa_version(ptx).as_deref(), Some("9.0"));
        assert_eq!(ptx_isa_version(b".target sm_80\n"), None);
        assert_eq!(ptx_isa_version(b".version x\n"), None);
        // A file from outside claims no ISA that arithmetic on it could overflow with.
        assert_eq!(ptx_isa_version(b".version 4294967295.9\n"), None);
        assert_eq!(ptx_isa_version(b".version 9.100\n"), None);
    }

    #[test]
    fn unknown_format_is_named() {
        let e = BundleManifest::parse(br#"{"format": 99}"#).unwrap_err();
        assert!(e.contains("unknown bundle format version 99"), "{e}");
    }

    /// An entry as `generate` writes it (no targets), its maps the ones derived for it.
    fn entry(
        op: crate::spec::model::Op,
        params: crate::spec::model::Params,
    ) -> manifest::InstanceEntry {
        use crate::spec::model::{Arch, DType, Instance};
        let mut inst = Instance::for_test(op, DType::Bf16, params);
        inst.archs = vec![Arch::Sm90a];
        manifest::InstanceEntry::for_test(&inst)
    }

    fn problems(e: &manifest::InstanceEntry) -> Vec<String> {
        tensor_map_problems(&Manifest {
            format: manifest::FORMAT,
            tilegen_version: "0.1.0".into(),
            nvrtc_version: "13.0".into(),
            instances: vec![e.clone()],
            files: vec![],
            tuning: vec![],
        })
    }

    fn wgmma_gemm() -> manifest::InstanceEntry {
        use crate::spec::model::{Engine, Op, Params};
        let mut p = Params {
            tile: Some([128, 256, 64]),
            engine: Some(Engine::Wgmma),
            ..Params::default()
        };
        crate::ops::gemm::defaults(&mut p);
        let e = entry(Op::Gemm, p);
        assert_eq!(e.tensor_maps.len(), 3);
        e
    }

    /// K over [head_dim, seq_kv, heads_kv, batch]: a constant and three sizes.
    fn k_map() -> crate::launch::TensorMap {
        use crate::launch::{Interleave, L2Promotion, OobFill, Swizzle, TensorMap};
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        TensorMap {
            name: "k_map".into(),
            tensor: "k".into(),
            dtype: crate::spec::model::DType::Bf16,
            dims: names(&["128", "seq_kv", "heads_kv", "batch"]),
            strides: names(&["k_ss", "k_hs", "k_bs"]),
            box_dims: vec![64, 64, 1, 1],
            swizzle: Swizzle::B128,
            interleave: Interleave::None,
            l2_promotion: L2Promotion::B256,
            l2_promotion_straddling: None,
            oob_fill: OobFill::Zero,
        }
    }

    #[test]
    fn map_dims_are_sizes_or_constants() {
        let gemm = wgmma_gemm();
        assert_eq!(problems(&gemm), Vec::<String>::new());
        let with_dim = |dim: &str, stride: &str| {
            let mut e = gemm.clone();
            e.tensor_maps[0].dims[0] = dim.into();
            e.tensor_maps[0].strides[0] = stride.into();
            problems(&e)
        };
        let stride = gemm.tensor_maps[0].strides[0].clone();
        // A canonical literal is a dim (whether it is this configuration's is checked after).
        assert_eq!(with_dim("64", &stride), Vec::<String>::new());
        assert_eq!(with_dim("4294967296", &stride), Vec::<String>::new());
        let one = |dim: &str, stride: &str, want: &str| {
            let p = with_dim(dim, stride);
            assert!(
                p.len() == 1 && p[0].contains("`tensor_maps[0]`") && p[0].contains(want),
                "{dim:?}, {stride:?}: wanted {want:?} in {p:?}"
            );
        };
        for bad in ["0", "4294967297", "18446744073709551616"] {
            one(
                bad,
                &stride,
                &format!("dims `{bad}` is outside 1..=4294967296"),
            );
        }
        for bad in ["064", "+64", "-1", "6_4", "64 "] {
            one(
                bad,
                &stride,
                &format!("dims `{bad}` is not a plain decimal extent"),
            );
        }
        one(
            "batch",
            &stride,
            "dims names `batch`, which is not a size argument",
        );
        one("d", &stride, "dims names `d`, which is not a size argument");
        // Strides are size arguments only.
        for bad in ["64", "batch"] {
            one(
                "k",
                bad,
                &format!("strides names `{bad}`, which is not a size argument"),
            );
        }
    }

    #[test]
    fn maps_go_with_gemm_and_attention() {
        use crate::launch::GridRule;
        use crate::spec::model::{Engine, Op, Params};
        let mut p = Params {
            head_dim: Some(128),
            engine: Some(Engine::Wgmma),
            ..Params::default()
        };
        crate::ops::attention::defaults(&mut p);
        let mut attention = entry(Op::Attention, p);
        // A Hopper attention instance's persistent grid goes with its maps, both ways.
        let maps = attention.tensor_maps.clone();
        attention.tensor_maps = vec![];
        assert!(problems(&attention)
            .iter()
            .any(|p| p.contains("persistent_query_tiles goes with tensor maps")));
        let mut by_tiles = attention.clone();
        by_tiles.tensor_maps = maps;
        by_tiles.launch.grid = GridRule::QueryTiles { tile_q: 128 };
        assert!(problems(&by_tiles).iter().any(
            |p| p.contains("persistent_query_tiles goes with tensor maps, query_tiles without")
        ));
        let v_map = crate::launch::TensorMap {
            name: "v_map".into(),
            tensor: "v".into(),
            strides: ["v_ss", "v_hs", "v_bs"].map(String::from).to_vec(),
            ..k_map()
        };
        attention.tensor_maps = vec![k_map(), v_map];
        assert_eq!(problems(&attention), Vec::<String>::new());
        // Not on another op; and a GEMM's maps come with its persistent grid, both ways.
        let mut softmax = attention.clone();
        softmax.op = Op::Softmax;
        assert!(problems(&softmax)
            .iter()
            .any(|p| p.contains("`tensor_maps` are given for op `softmax`, which takes none")));
        let mut tiles = wgmma_gemm();
        tiles.launch.grid = GridRule::Tiles {
            tile_m: 128,
            tile_n: 256,
        };
        assert!(problems(&tiles)
            .iter()
            .any(|p| p.contains("`launch` has a non-persistent grid but 3 tensor maps")));
        let mut unmapped = wgmma_gemm();
        unmapped.tensor_maps.clear();
        assert!(problems(&unmapped)
            .iter()
            .any(|p| p.contains("`launch` has a persistent grid but 0 tensor maps")));
    }
}
