//! The library manifest: a sorted JSON description of every instance, its arguments, launch
//! geometry, resources and files. Bindings, `verify`, `bench` and bundles all read it.

use serde::{Deserialize, Serialize};

use crate::launch::{Arg, Launch, TensorMap};
use crate::nvrtc::Resources;
use crate::spec::model::{Arch, KernelConfig, Origin};

/// Bumped when the manifest's shape changes incompatibly.
pub const FORMAT: u32 = 1;
pub const FILE_NAME: &str = "manifest.json";
/// The most of a `manifest.json` (or a bundle's `bundle.json`) tilegen reads, whole, from
/// outside: the default library's manifest is 2.5 MiB for 405 instances, so this is room
/// for about 10000.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub tilegen_version: String,
    pub nvrtc_version: String,
    pub instances: Vec<InstanceEntry>,
    /// Every file of the library other than the manifest, sorted; `generate` removes files
    /// listed by an older manifest that are no longer produced.
    pub files: Vec<String>,
    /// Measured dispatch per device (`tilegen tune`), as it applies to these instances
    /// (none: omitted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuning: Vec<crate::tuning::TuningTable>,
}

/// One instance of the library: its configuration (read through `Deref`: `entry.name`,
/// `entry.op`, ...), where it came from, and what `generate` derived and compiled from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceEntry {
    #[serde(flatten)]
    pub kernel: KernelConfig,
    pub origin: Origin,
    pub entry_point: String,
    pub args: Vec<Arg>,
    /// TMA descriptors the kernel takes before `args`, in parameter order (none: omitted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_maps: Vec<TensorMap>,
    pub launch: Launch,
    /// GEMM only: the bindings' fixed dispatch rules never pick this instance; only a tuning
    /// table that names it does (`tuning: table_only` in its spec). Omitted when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub table_only: bool,
    pub config_sha256: String,
    /// Rendered CUDA C, relative to the library folder.
    pub source: FileRef,
    pub targets: Vec<Target>,
}

impl InstanceEntry {
    /// The entry `generate` writes for `inst`, without binaries or a real hash (unit tests).
    #[cfg(test)]
    pub(crate) fn for_test(inst: &crate::spec::model::Instance) -> InstanceEntry {
        InstanceEntry {
            kernel: inst.kernel.clone(),
            origin: inst.origin.clone(),
            entry_point: inst.entry_point(),
            args: crate::ops::signature(inst),
            tensor_maps: crate::ops::tensor_maps(inst),
            launch: crate::ops::launch(inst),
            table_only: false,
            config_sha256: "0".repeat(64),
            source: FileRef {
                path: "kernels/t.cu".into(),
                sha256: "0".repeat(64),
                bytes: 1,
            },
            targets: vec![],
        }
    }

    /// Whether the bindings' fixed GEMM rules rank this instance by
    /// `tilegen_runtime::call_checks::wgmma_cost` where it runs: a tensor-map instance that
    /// they may pick (not table-only).
    pub fn ranked_by_cost(&self) -> bool {
        !self.tensor_maps.is_empty() && !self.table_only
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub arch: Arch,
    pub cache_key: String,
    pub ptx: FileRef,
    pub cubin: FileRef,
    pub resources: Resources,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

impl std::ops::Deref for InstanceEntry {
    type Target = KernelConfig;
    fn deref(&self) -> &KernelConfig {
        &self.kernel
    }
}

// Entries were plain structs: their configuration stays assignable (`entry.params = ...`).
impl std::ops::DerefMut for InstanceEntry {
    fn deref_mut(&mut self) -> &mut KernelConfig {
        &mut self.kernel
    }
}

impl Manifest {
    /// Canonical bytes: pretty JSON with a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("manifest serializes");
        v.push(b'\n');
        v
    }

    pub fn from_bytes(bytes: &[u8]) -> serde_json::Result<Manifest> {
        serde_json::from_slice(bytes)
    }

    pub fn instance(&self, name: &str) -> Option<&InstanceEntry> {
        self.instances.iter().find(|i| i.name == name)
    }
}

/// Longest origin path a manifest may give (a spec's path relative to its folder).
const MAX_ORIGIN_BYTES: usize = 4096;

impl Manifest {
    /// Everything wrong with a manifest that this process did not write (a bundle's), each
    /// naming the instance and field, checked as strictly as a spec before anything is
    /// emitted from it: names are identifiers by the spec rule and no Rust keyword; the
    /// configuration is one a spec could give (dtypes, fields, epilogues, sizes and archs the
    /// op takes, its defaults filled in); arguments, launch geometry and entry point are the
    /// ones this tilegen derives from that configuration; file names are the ones `generate`
    /// writes; hashes are hex; versions are plain. Free text (the origin path) is only
    /// bounded: it is escaped wherever it is emitted. Empty when the manifest is sound.
    pub fn problems(&self) -> Vec<String> {
        use crate::escape::{rust_name_problem, shown, DERIVED_NAME};
        let mut out = Vec::new();
        for (key, v) in [
            ("tilegen_version", &self.tilegen_version),
            ("nvrtc_version", &self.nvrtc_version),
        ] {
            let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_');
            if v.is_empty() || v.len() > 64 || !v.chars().all(plain) {
                out.push(format!(
                    "`{key}` `{}` is not a version (ASCII letters, digits, `.-+_`, at most 64)",
                    crate::escape::shown_prefix(v, 64)
                ));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        let mut paths = std::collections::BTreeSet::new();
        // An instance with a bad name names no files; the file list is then not checked.
        let mut skipped = false;
        for (i, inst) in self.instances.iter().enumerate() {
            let at = format!(
                "instance {i} `{}`",
                crate::escape::shown_prefix(&inst.name, 80)
            );
            let mut bad = |field: &str, m: String| out.push(format!("{at}: `{field}` {m}"));
            if let Some(p) = rust_name_problem(&inst.name, DERIVED_NAME) {
                bad(
                    "name",
                    format!(
                        "is not a plain identifier ({p}): {}",
                        crate::escape::name_rule_text(DERIVED_NAME)
                    ),
                );
                // Every other check names files after the instance; one report is enough.
                skipped = true;
                continue;
            }
            if crate::bindings::is_reserved(&inst.name) {
                bad(
                    "name",
                    format!("`{}` is reserved by the bindings' own methods", inst.name),
                );
                skipped = true;
                continue;
            }
            if !names.insert(inst.name.as_str()) {
                bad("name", "appears twice".into());
            }
            for p in instance_problems(inst) {
                let (field, m) = p;
                bad(field, m);
            }
            let mut refs = vec![(
                "source".to_string(),
                &inst.source,
                format!("kernels/{}.cu", inst.name),
            )];
            let mut archs = std::collections::BTreeSet::new();
            for t in &inst.targets {
                if !archs.insert(t.arch) {
                    bad("targets", format!("lists {} twice", t.arch));
                }
                if !is_sha256(&t.cache_key) {
                    bad(
                        "targets",
                        format!(
                            "{}: cache_key `{}` is not a sha256",
                            t.arch,
                            crate::escape::shown_prefix(&t.cache_key, 80)
                        ),
                    );
                }
                for (kind, r) in [("ptx", &t.ptx), ("cubin", &t.cubin)] {
                    refs.push((
                        format!("targets {} {kind}", t.arch),
                        r,
                        format!("kernels/{}.{}.{kind}", inst.name, t.arch),
                    ));
                }
            }
            for (what, r, want) in refs {
                if r.path != want {
                    bad(
                        "path",
                        format!(
                            "of {what} is `{}`, expected `{want}`",
                            crate::escape::shown_prefix(&r.path, 200)
                        ),
                    );
                }
                if !is_sha256(&r.sha256) {
                    bad(
                        "sha256",
                        format!(
                            "of {what} `{}` is not a sha256",
                            crate::escape::shown_prefix(&r.sha256, 80)
                        ),
                    );
                }
                paths.insert(want);
            }
        }
        // `files` lists exactly what the instances name, plus the bindings, sorted.
        let mut listed = std::collections::BTreeSet::new();
        for f in self.files.iter().filter(|_| !skipped) {
            if f.as_str() != crate::bindings::FILE_NAME && !paths.contains(f) {
                out.push(format!(
                    "`files` lists `{}`, which no instance names",
                    crate::escape::shown_prefix(f, 200)
                ));
            }
            if !listed.insert(f.as_str()) {
                out.push(format!("`files` lists `{}` twice", shown(f)));
            }
        }
        if !skipped {
            if !self.files.windows(2).all(|w| w[0] < w[1]) && listed.len() == self.files.len() {
                out.push("`files` is not sorted".into());
            }
            if let Some(missing) = paths.iter().find(|p| !listed.contains(p.as_str())) {
                out.push(format!("`files` does not list `{missing}`"));
            }
        }
        // Method names, collisions and argument roles, as the bindings will need them.
        if out.is_empty() {
            if let Err(e) = crate::bindings::check(self) {
                out.push(e.to_string());
            }
        }
        // Tuning entries must name members of this library's methods, as generate left them.
        if out.is_empty() {
            out.extend(crate::tuning::manifest_problems(self));
        }
        out
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The instance an entry describes, as a spec would have resolved it.
pub fn spec_instance(e: &InstanceEntry) -> crate::spec::model::Instance {
    crate::spec::model::Instance {
        kernel: e.kernel.clone(),
        archs: e.targets.iter().map(|t| t.arch).collect(),
        origin: e.origin.clone(),
        // Whether it came from a candidates kernel does not reach the library; whether the
        // fixed rules may pick it does.
        tuning_candidate: false,
        table_only: e.table_only,
    }
}

/// What a spec would have refused in an entry's configuration, and where its derived
/// fields differ from what this tilegen derives: (field, problem).
fn instance_problems(e: &InstanceEntry) -> Vec<(&'static str, String)> {
    use crate::ops::{self, Field};
    let mut out = Vec::new();
    let info = ops::info(e.op);
    if e.entry_point != e.kernel.entry_point() {
        out.push((
            "entry_point",
            format!(
                "is `{}`, expected `{}`",
                crate::escape::shown_prefix(&e.entry_point, 200),
                e.kernel.entry_point()
            ),
        ));
    }
    if e.origin.file.is_empty()
        || e.origin.file.len() > MAX_ORIGIN_BYTES
        || e.origin.file.contains('\0')
    {
        out.push((
            "origin",
            format!(
                "file `{}` is not a spec path (non-empty, no NUL, at most {MAX_ORIGIN_BYTES} bytes)",
                crate::escape::shown_prefix(&e.origin.file, 200)
            ),
        ));
    }
    for a in &e.args {
        if let Some(p) = crate::escape::rust_name_problem(&a.name, crate::escape::DERIVED_NAME) {
            out.push((
                "args",
                format!(
                    "name `{}` is not a plain identifier ({p})",
                    crate::escape::shown_prefix(&a.name, 80)
                ),
            ));
        }
    }
    if e.origin.line == 0 {
        out.push(("origin", "line is 0 (lines count from 1)".into()));
    }
    if e.table_only && e.op != crate::spec::model::Op::Gemm {
        out.push((
            "table_only",
            format!(
                "is set on op `{}`: only GEMM dispatch leaves instances to a tuning table",
                e.op
            ),
        ));
    }
    for (field, d) in [("dtype", e.dtype), ("out_dtype", e.out_dtype)] {
        if !info.dtypes.contains(&d) {
            out.push((field, format!("{d} is not a dtype of op `{}`", e.op)));
        }
    }
    if e.out_dtype != e.dtype && !info.fields.contains(&Field::OutDtype) {
        out.push(("out_dtype", format!("op `{}` has no out_dtype", e.op)));
    }
    let p = &e.params;
    let set = [
        (Field::Block, p.block.is_some()),
        (Field::Items, p.items.is_some()),
        (Field::Variant, p.variant.is_some()),
        (Field::Affine, p.affine.is_some()),
        (Field::Tile, p.tile.is_some()),
        (Field::Warp, p.warp.is_some()),
        (Field::Stages, p.stages.is_some()),
        (Field::Layout, p.layout.is_some()),
        (Field::Tf32, p.tf32.is_some()),
        (Field::HeadDim, p.head_dim.is_some()),
        (Field::Causal, p.causal.is_some()),
        (Field::TileQ, p.tile_q.is_some()),
        (Field::TileKv, p.tile_kv.is_some()),
        (Field::RowsPerBlock, p.rows_per_block.is_some()),
        (Field::Lean, p.lean.is_some()),
        (Field::SplitK, p.split_k.is_some()),
        (Field::Multicast, p.multicast.is_some()),
        (Field::Pingpong, p.pingpong.is_some()),
    ];
    for (f, is_set) in set {
        if is_set && !info.fields.contains(&f) {
            out.push((
                "params",
                format!("`{}` does not apply to op `{}`", f.key(), e.op),
            ));
        }
    }
    let mut steps = Vec::new();
    for s in &e.epilogue {
        if !info.epilogues.contains(s) {
            out.push(("epilogue", format!("op `{}` does not support `{s}`", e.op)));
        } else if steps.contains(s) {
            out.push(("epilogue", format!("`{s}` appears twice in the chain")));
        }
        steps.push(*s);
    }
    // The ceilings a spec's values meet when read from YAML: below them the sizes the ops
    // derive (threads, shared memory) cannot overflow, above them they could.
    for (key, values) in p.integers() {
        let ceiling = crate::spec::integer_ceiling(key);
        if let Some(v) = values.iter().find(|&&v| v > ceiling) {
            out.push((
                "params",
                format!("`{key}` value {v} is out of range (at most {ceiling})"),
            ));
        }
    }
    if !out.is_empty() {
        // The derived checks below assume a configuration of the op's shape.
        return out;
    }
    let mut defaulted = p.clone();
    ops::apply_defaults(e.op, &mut defaulted);
    if &defaulted != p {
        out.push((
            "params",
            format!(
                "{} lack the op's defaults ({} with them)",
                json(p),
                json(&defaulted)
            ),
        ));
        return out;
    }
    let inst = spec_instance(e);
    for (field, m) in ops::check(&inst) {
        out.push(("params", format!("{}: {m}", field.key())));
    }
    for (arch, m) in ops::arch_problems(&inst) {
        out.push(("targets", format!("{arch}: {m}")));
    }
    if !out.is_empty() {
        return out;
    }
    let args = ops::signature(&inst);
    if e.args != args {
        out.push((
            "args",
            format!(
                "{} differ from the signature of this configuration, {}",
                json(&e.args),
                json(&args)
            ),
        ));
    }
    let launch = ops::launch(&inst);
    if e.launch != launch {
        out.push((
            "launch",
            format!(
                "{} differs from this configuration's, {}",
                json(&e.launch),
                json(&launch)
            ),
        ));
    }
    if !is_sha256(&e.config_sha256) {
        out.push((
            "config_sha256",
            format!(
                "`{}` is not a sha256",
                crate::escape::shown_prefix(&e.config_sha256, 80)
            ),
        ));
    }
    out
}

/// A value from the manifest for a message: JSON (escaped by serde_json), cut to a
/// readable length.
fn json<T: Serialize>(v: &T) -> String {
    let s = serde_json::to_string(v).unwrap_or_default();
    crate::escape::shown_prefix(&s, 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry embeds its configuration flattened: reading a manifest and writing it again
    /// gives its bytes back, key order included.
    #[test]
    fn a_manifest_reads_and_writes_back_byte_for_byte() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/generated/manifest.json");
        let bytes = std::fs::read(path).unwrap();
        let m = Manifest::from_bytes(&bytes).unwrap();
        assert!(m.instances.iter().any(|e| !e.tensor_maps.is_empty()));
        assert_eq!(
            m.instances[0].entry_point,
            m.instances[0].kernel.entry_point()
        );
        assert!(m.to_bytes() == bytes, "{path} changed on a round trip");
    }
}
