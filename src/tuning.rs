//! Tuning tables: which instance of each bindings method ran fastest at which shape on which
//! GPU, as `tilegen tune` measured it. `generate` reads them from a `tuning` folder (beside the
//! specs, or [`crate::generate::Options::tuning`]), keeps the entries that still name an
//! instance of the library with the same configuration hash, and stores them in the manifest;
//! the bindings turn them into dispatch tables (`tilegen_runtime::tuning`, which states the
//! matching rule), and bundles carry them with the manifest.
//!
//! A table is one JSON file per device: [`TuningTable`]. Everything in it is untrusted: it is
//! checked before use ([`TuningTable::problems`]), and the only values that reach generated
//! code are numbers and the device name, emitted as an escaped string literal.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bindings::method_name;
use crate::error::{Error, Result};
use crate::manifest::{InstanceEntry, Manifest};

/// Bumped when a table's shape changes incompatibly.
pub const FORMAT: u32 = 1;
/// The folder `generate` reads tables from when it sits beside the specs.
pub const DIR_NAME: &str = "tuning";
/// Larger table files are refused (the default library's is a few tens of KiB).
const MAX_FILE_BYTES: u64 = 8 << 20;
/// A device name longer than this is cut by the runtime (`DeviceName::CAPACITY`).
const MAX_DEVICE_NAME: usize = 96;
/// Shapes beyond this in any dimension are not measurements.
const MAX_DIM: u64 = 1 << 40;
/// Entries in one table (a table file's 8 MiB holds about 40000; a bundle's manifest could
/// otherwise carry far more, and generating bindings from them takes time per entry).
const MAX_ENTRIES: usize = 50_000;

/// The measurements of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningTable {
    pub format: u32,
    pub device: DeviceKey,
    /// The tilegen and NVRTC that built the library that was measured.
    pub tilegen_version: String,
    pub nvrtc_version: String,
    /// Sorted by method, then shape.
    pub entries: Vec<TuningEntry>,
}

/// The GPU a table was measured on. The bindings match `name` exactly first, then
/// `compute_capability`; the SM count and driver are recorded for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceKey {
    pub name: String,
    pub compute_capability: [u32; 2],
    pub sm_count: u32,
    /// The CUDA version the driver supports, e.g. `13.0`.
    pub driver: String,
}

/// The fastest instance of a method at one shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningEntry {
    /// The bindings method (e.g. `layernorm_bf16`): op, layout, epilogue and dtypes.
    pub method: String,
    /// The method's size arguments, in order (`n`; `rows, cols`; `m, n, k`).
    pub shape: Vec<u64>,
    /// The winner, and the configuration hash it had when measured.
    pub instance: String,
    pub config_sha256: String,
    /// Its median time (two significant digits).
    pub median_us: f64,
    /// The second fastest and its time, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up_us: Option<f64>,
    /// What the fixed rules pick at this shape, and its time: the gain of tuning.
    pub rule: String,
    pub rule_us: f64,
}

/// The size arguments that key a method's entries, by family; None for families that
/// dispatch by other means (attention: by mask and sequence length).
pub use crate::ops::calls::shape_args;

/// Rounds to two significant digits, so that a table does not carry timer noise and a
/// re-tune that finds the same winners mostly leaves the file as it was.
pub fn round2(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let scale = 10f64.powi(1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// Differences in median time below this fraction are noise between runs: a winner must beat
/// the fixed rules' pick by more to replace it.
pub const NOISE: f64 = 0.01;

/// The folder `generate` reads tables from: `explicit` when given, else `tuning` beside the
/// specs folder (or beside the spec file) when it exists.
pub fn dir(explicit: Option<&Path>, specs: &Path) -> Option<PathBuf> {
    if let Some(d) = explicit {
        return Some(d.to_path_buf());
    }
    let dir = specs.parent()?.join(DIR_NAME);
    dir.is_dir().then_some(dir)
}

/// Reads every `*.json` in `dir` (not below), in name order, each checked as untrusted input.
/// Returns the tables and the files read (for `cargo:rerun-if-changed`).
pub fn load_dir(dir: &Path) -> Result<(Vec<TuningTable>, Vec<PathBuf>)> {
    let mut paths = Vec::new();
    let read = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in read {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    let mut tables = Vec::new();
    for path in &paths {
        tables.push(load_file(path)?);
    }
    Ok((tables, paths))
}

/// Canonical bytes of a table: pretty JSON with a final newline.
pub fn table_bytes(t: &TuningTable) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(t).expect("a tuning table serializes");
    v.push(b'\n');
    v
}

/// Writes `t` at `path` whole or not at all: a table half written would fail the next
/// generate. The temporary file is named after this process, so two writers do not share it
/// (the last rename wins).
pub fn write_file(path: &Path, t: &TuningTable) -> Result<()> {
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, table_bytes(t)).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// Reads one table file, checked as untrusted input ([`TuningTable::problems`]).
pub fn load_file(path: &Path) -> Result<TuningTable> {
    let shown = crate::escape::shown_path(path);
    let bad = |m: String| Error::input(path, format!("tuning table {shown}: {m}"));
    let bytes = crate::input::read_limited(path, MAX_FILE_BYTES, &bad)?;
    let table: TuningTable = serde_json::from_slice(&bytes).map_err(|e| {
        Error::input(
            path,
            format!(
                "{shown}:{}:{}: not a tuning table: {e}",
                e.line(),
                e.column()
            ),
        )
    })?;
    let problems = table.problems();
    if !problems.is_empty() {
        return Err(bad(problems.join("; ")));
    }
    Ok(table)
}

fn plain_text(v: &str, max: usize) -> bool {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_');
    !v.is_empty() && v.len() <= max && v.chars().all(plain)
}

impl TuningTable {
    /// What is wrong with the table on its own (not against a library): empty when sound.
    pub fn problems(&self) -> Vec<String> {
        use crate::escape::{rust_name_problem, shown_prefix, DERIVED_NAME};
        let mut out = Vec::new();
        if self.format != FORMAT {
            out.push(format!(
                "format {} (this tilegen reads format {FORMAT})",
                self.format
            ));
        }
        let name = &self.device.name;
        if name.is_empty() || name.len() > MAX_DEVICE_NAME || name.chars().any(|c| c.is_control()) {
            out.push(format!(
                "device name `{}` must be 1 to {MAX_DEVICE_NAME} bytes without control characters",
                shown_prefix(name, 40)
            ));
        }
        let [major, minor] = self.device.compute_capability;
        if !(1..=99).contains(&major) || minor > 9 {
            out.push(format!("compute capability {major}.{minor} is not one"));
        }
        for (key, v) in [
            ("tilegen_version", &self.tilegen_version),
            ("nvrtc_version", &self.nvrtc_version),
            ("device.driver", &self.device.driver),
        ] {
            if !plain_text(v, 64) {
                out.push(format!(
                    "`{key}` `{}` is not a version (ASCII letters, digits, `.-+_`, at most 64)",
                    shown_prefix(v, 64)
                ));
            }
        }
        if self.device.sm_count == 0 {
            out.push("`device.sm_count` is 0: a GPU has SMs".into());
        }
        if self.entries.len() > MAX_ENTRIES {
            out.push(format!(
                "{} entries, more than the {MAX_ENTRIES} a table may have",
                self.entries.len()
            ));
            return out;
        }
        let mut seen = BTreeSet::new();
        for (i, e) in self.entries.iter().enumerate() {
            let at = format!("entry {i}");
            let names = [
                Some(&e.method),
                Some(&e.instance),
                e.runner_up.as_ref(),
                Some(&e.rule),
            ];
            for n in names.into_iter().flatten() {
                if let Some(p) = rust_name_problem(n, DERIVED_NAME) {
                    out.push(format!(
                        "{at}: `{}` is not a name ({p})",
                        shown_prefix(n, 80)
                    ));
                }
            }
            if e.shape.is_empty()
                || e.shape.len() > 3
                || e.shape.iter().any(|&d| d == 0 || d > MAX_DIM)
            {
                out.push(format!(
                    "{at}: shape {:?} must be 1 to 3 sizes, each 1 to 2^40",
                    &e.shape[..e.shape.len().min(4)]
                ));
            }
            // Lower case, as manifests write it: the lookup compares the text.
            let hex =
                |s: &str| s.len() == 64 && s.bytes().all(|b| b"0123456789abcdef".contains(&b));
            if !hex(&e.config_sha256) {
                out.push(format!(
                    "{at}: `config_sha256` is not a sha256 (64 lowercase hex digits)"
                ));
            }
            let times = [Some(e.median_us), e.runner_up_us, Some(e.rule_us)];
            if times
                .into_iter()
                .flatten()
                .any(|t| !t.is_finite() || t.is_sign_negative())
            {
                out.push(format!("{at}: times must be finite and not negative"));
            }
            if e.runner_up.is_some() != e.runner_up_us.is_some() {
                out.push(format!("{at}: `runner_up` and `runner_up_us` go together"));
            }
            if !seen.insert((&e.method, &e.shape)) {
                out.push(format!(
                    "{at}: `{}` at {:?} appears twice",
                    shown_prefix(&e.method, 80),
                    e.shape
                ));
            }
        }
        out
    }
}

/// What [`merge`] did to the earlier table's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MergeCounts {
    /// Entries of a method and shape the earlier table had too.
    pub replaced: usize,
    /// Entries it did not have.
    pub added: usize,
    /// Its entries that the new table does not measure, kept as they were.
    pub kept: usize,
}

/// Why measurements on `new` may not join a table of `earlier`: a different GPU.
pub fn other_device(earlier: &DeviceKey, new: &DeviceKey) -> Option<String> {
    let sm = |d: &DeviceKey| format!("sm_{}{}", d.compute_capability[0], d.compute_capability[1]);
    (earlier.name != new.name || earlier.compute_capability != new.compute_capability).then(|| {
        format!(
            "the table there was measured on {} ({}), this run on {} ({})",
            earlier.name,
            sm(earlier),
            new.name,
            sm(new)
        )
    })
}

/// `new` laid over `earlier`, a table of the same device: an entry of the same method and shape
/// replaces the earlier one, the earlier table's other entries stay, so that tuning a few
/// methods or shapes does not drop the rest. The header (device details, versions) is `new`'s.
/// Refused when the two name different devices ([`other_device`]).
pub fn merge(
    earlier: &TuningTable,
    new: TuningTable,
) -> std::result::Result<(TuningTable, MergeCounts), String> {
    if let Some(why) = other_device(&earlier.device, &new.device) {
        return Err(why);
    }
    let mut by_key: BTreeMap<(String, Vec<u64>), TuningEntry> = earlier
        .entries
        .iter()
        .map(|e| ((e.method.clone(), e.shape.clone()), e.clone()))
        .collect();
    let mut counts = MergeCounts::default();
    for e in &new.entries {
        match by_key.insert((e.method.clone(), e.shape.clone()), e.clone()) {
            Some(_) => counts.replaced += 1,
            None => counts.added += 1,
        }
    }
    counts.kept = by_key.len() - counts.replaced - counts.added;
    Ok((
        TuningTable {
            entries: by_key.into_values().collect(),
            ..new
        },
        counts,
    ))
}

/// A method of the library and its instances, in manifest order (the bindings' members).
fn methods(m: &Manifest) -> BTreeMap<String, Vec<&InstanceEntry>> {
    let mut out: BTreeMap<String, Vec<&InstanceEntry>> = BTreeMap::new();
    for inst in &m.instances {
        out.entry(method_name(inst)).or_default().push(inst);
    }
    out
}

/// Why an entry cannot steer a library's bindings, as the plural of a count of entries.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Dropped {
    Changed,
    NotMember,
    NoMethod,
    NotByShape,
    ShapeArgs,
    OneInstance,
}

impl Dropped {
    fn plural(self) -> &'static str {
        match self {
            Dropped::Changed => "their instances have changed since they were measured",
            Dropped::NotMember => "their instances are not members of their methods",
            Dropped::NoMethod => "their methods are not in the library",
            Dropped::NotByShape => "their methods are not dispatched by shape",
            Dropped::ShapeArgs => "their shapes do not match their methods' arguments",
            Dropped::OneInstance => "their methods have one instance",
        }
    }
}

/// Why `e` cannot steer `m`'s bindings, if it cannot.
fn mismatch(
    e: &TuningEntry,
    methods: &BTreeMap<String, Vec<&InstanceEntry>>,
) -> Option<(Dropped, String)> {
    let Some(members) = methods.get(&e.method) else {
        return Some((
            Dropped::NoMethod,
            format!("method `{}` is not in the library", e.method),
        ));
    };
    let Some(inst) = members.iter().find(|i| i.name == e.instance) else {
        return Some((
            Dropped::NotMember,
            format!(
                "instance `{}` is not a member of `{}`",
                e.instance, e.method
            ),
        ));
    };
    if inst.config_sha256 != e.config_sha256 {
        let short =
            |s: &str| crate::escape::shown(&s.chars().take(12).collect::<String>()).into_owned();
        return Some((
            Dropped::Changed,
            format!(
                "instance `{}` has changed since it was measured (configuration {} then, {} now)",
                e.instance,
                short(&e.config_sha256),
                short(&inst.config_sha256)
            ),
        ));
    }
    let family = inst.op.family();
    match shape_args(family) {
        None => Some((
            Dropped::NotByShape,
            format!("`{}` is not dispatched by shape", e.method),
        )),
        Some(args) if args.len() != e.shape.len() => Some((
            Dropped::ShapeArgs,
            format!("shape {:?} is not ({})", e.shape, args.join(", ")),
        )),
        // A method of one instance has nothing to choose.
        _ if members.len() < 2 => Some((
            Dropped::OneInstance,
            format!("`{}` has one instance", e.method),
        )),
        _ => None,
    }
}

/// Entries of one table dropped for one reason that get a warning each; past this many, one
/// line counts them and names their methods (a `--filter` or a smaller spec set drops most of
/// a table, and a line per entry buried everything else).
const DROPPED_SHOWN: usize = 3;

/// The tables as they apply to library `m`: entries that no longer match it (an instance
/// renamed, removed, or changed since it was measured, or left out by a filter) are dropped
/// with a warning, many for one reason with one; tables left empty are dropped. Sorted by
/// device name, entries by method and shape, so the manifest does not depend on file names.
pub fn attach(tables: Vec<TuningTable>, m: &Manifest) -> (Vec<TuningTable>, Vec<String>) {
    let methods = methods(m);
    let mut warnings = Vec::new();
    let mut out = Vec::new();
    for mut t in tables {
        let device = crate::escape::shown(&t.device.name);
        // Per reason: the dropped entries' methods and their warnings, in table order.
        let mut dropped: BTreeMap<Dropped, Vec<(String, String)>> = BTreeMap::new();
        t.entries.retain(|e| match mismatch(e, &methods) {
            None => true,
            Some((why, text)) => {
                dropped.entry(why).or_default().push((
                    e.method.clone(),
                    format!(
                        "tuning table for {device}: entry {} at {:?} dropped: {text}",
                        e.method, e.shape
                    ),
                ));
                false
            }
        });
        for (why, entries) in dropped {
            if entries.len() <= DROPPED_SHOWN {
                warnings.extend(entries.into_iter().map(|(_, w)| w));
                continue;
            }
            let mut names: Vec<&str> = entries.iter().map(|(m, _)| m.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            let more = names.len().saturating_sub(DROPPED_SHOWN);
            warnings.push(format!(
                "tuning table for {device}: {} entries dropped: {} ({}{})",
                entries.len(),
                why.plural(),
                names[..names.len().min(DROPPED_SHOWN)].join(", "),
                if more > 0 {
                    format!(" and {more} more methods")
                } else {
                    String::new()
                }
            ));
        }
        t.entries
            .sort_by(|a, b| (&a.method, &a.shape).cmp(&(&b.method, &b.shape)));
        if !t.entries.is_empty() {
            out.push(t);
        }
    }
    out.sort_by(|a, b| a.device.name.cmp(&b.device.name));
    for pair in out.windows(2) {
        if pair[0].device.name == pair[1].device.name {
            warnings.push(format!(
                "two tuning tables for {}: the first in name order wins where both have an entry",
                crate::escape::shown(&pair[0].device.name)
            ));
        }
    }
    (out, warnings)
}

/// What is wrong with a manifest's tuning tables (a bundle's): each table sound on its own,
/// and every entry naming a member of a method of that manifest with its configuration hash.
pub fn manifest_problems(m: &Manifest) -> Vec<String> {
    let methods = methods(m);
    let mut out = Vec::new();
    for (i, t) in m.tuning.iter().enumerate() {
        let problems = t.problems();
        if !problems.is_empty() {
            // Its entries are not matched against the library: their fields are not sound.
            out.extend(
                problems
                    .into_iter()
                    .map(|p| format!("tuning table {i}: {p}")),
            );
            continue;
        }
        for (j, e) in t.entries.iter().enumerate() {
            if let Some((_, why)) = mismatch(e, &methods) {
                out.push(format!("tuning table {i}, entry {j}: {why}"));
            }
        }
    }
    out
}

/// One dispatch entry of a method, as the bindings hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch<'a> {
    pub device: &'a str,
    pub compute_capability: [u32; 2],
    pub sm_count: u32,
    pub shape: &'a [u64],
    /// The members timed at this shape, as (index among the method's members in manifest
    /// order, median µs): the winner first, then the runner-up and the rules' pick where they
    /// are other members.
    pub timed: Vec<(usize, f64)>,
}

impl Dispatch<'_> {
    /// The entry as the runtime's matchers take it (`tilegen_runtime::tuning`).
    pub fn tuned(&self) -> tilegen_runtime::tuning::Tuned<'_> {
        tilegen_runtime::tuning::Tuned {
            device: self.device,
            major: self.compute_capability[0],
            minor: self.compute_capability[1],
            sm_count: self.sm_count,
            shape: self.shape,
            timed: &self.timed,
        }
    }
}

/// The members' tilings when every one has a tiled grid (a GEMM method), for
/// `tilegen_runtime::tuning::pick_tiled`; None otherwise.
pub fn tilings_of(members: &[&InstanceEntry]) -> Option<Vec<tilegen_runtime::tuning::Tiling>> {
    members.iter().map(|i| i.launch.grid.tiling()).collect()
}

/// The member `tables` pick for a call of `method` at `shape` on `device`, as the bindings
/// decide it (`pick_tiled` for a GEMM method, `pick` for the others); None where the fixed
/// rules decide. `runs` says which members run on `device` (the rules rank by cost where a
/// tensor-map one that they may pick does). Whether the member accepts the call is the
/// caller's to check.
pub fn table_pick(
    tables: &[TuningTable],
    method: &str,
    members: &[&InstanceEntry],
    runs: &[bool],
    device: &tilegen_runtime::loader::Device,
    shape: &[u64],
) -> Option<usize> {
    use tilegen_runtime::tuning::{pick, pick_tiled};
    let entries = dispatch_of(tables, method, members);
    let table: Vec<_> = entries.iter().map(|d| d.tuned()).collect();
    match tilings_of(members) {
        Some(tilings) => {
            let rules_model = members
                .iter()
                .zip(runs)
                .any(|(i, &runs)| runs && i.ranked_by_cost());
            pick_tiled(device, &table, shape, &tilings, rules_model)
        }
        None => pick(device, &table, shape),
    }
}

/// The dispatch entries of `method`, whose members are `members` (manifest order), over all
/// `tables` in order. A shape measured twice for one device keeps its first entry.
pub fn dispatch_of<'a>(
    tables: &'a [TuningTable],
    method: &str,
    members: &[&InstanceEntry],
) -> Vec<Dispatch<'a>> {
    let mut out: Vec<Dispatch<'a>> = Vec::new();
    let mut taken: BTreeSet<(&str, &[u64])> = BTreeSet::new();
    for t in tables {
        for e in t.entries.iter().filter(|e| e.method == method) {
            let member_of = |name: &str| members.iter().position(|i| i.name == name);
            let Some(winner) = member_of(&e.instance) else {
                continue;
            };
            let mut timed = vec![(winner, e.median_us)];
            let others = [
                e.runner_up.as_deref().zip(e.runner_up_us),
                Some((e.rule.as_str(), e.rule_us)),
            ];
            for (name, us) in others.into_iter().flatten() {
                if let Some(m) = member_of(name).filter(|m| timed.iter().all(|t| t.0 != *m)) {
                    timed.push((m, us));
                }
            }
            let d = Dispatch {
                device: &t.device.name,
                compute_capability: t.device.compute_capability,
                sm_count: t.device.sm_count,
                shape: &e.shape,
                timed,
            };
            if taken.insert((d.device, d.shape)) {
                out.push(d);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(method: &str, shape: &[u64], instance: &str, us: f64) -> TuningEntry {
        TuningEntry {
            method: method.into(),
            shape: shape.to_vec(),
            instance: instance.into(),
            config_sha256: "a".repeat(64),
            median_us: us,
            runner_up: None,
            runner_up_us: None,
            rule: instance.into(),
            rule_us: us,
        }
    }

    fn table(driver: &str, entries: Vec<TuningEntry>) -> TuningTable {
        TuningTable {
            format: FORMAT,
            device: DeviceKey {
                name: "NVIDIA H200".into(),
                compute_capability: [9, 0],
                sm_count: 132,
                driver: driver.into(),
            },
            tilegen_version: "0.1.0".into(),
            nvrtc_version: "13.0.88".into(),
            entries,
        }
    }

    #[test]
    fn a_partial_tune_replaces_its_entries_and_keeps_the_rest() {
        let earlier = table(
            "12.8",
            vec![
                entry("gemm_nn_bf16", &[16, 4096, 4096], "old_a", 14.0),
                entry("gemm_nn_bf16", &[4096, 4096, 4096], "big", 170.0),
                entry("softmax_bf16", &[32768, 4096], "soft", 260.0),
            ],
        );
        let new = table(
            "13.0",
            vec![
                entry("gemm_nn_bf16", &[1, 4096, 4096], "new_b", 13.0),
                entry("gemm_nn_bf16", &[16, 4096, 4096], "new_a", 13.0),
            ],
        );
        let (merged, counts) = merge(&earlier, new).unwrap();
        assert_eq!(
            counts,
            MergeCounts {
                replaced: 1,
                added: 1,
                kept: 2
            }
        );
        let got: Vec<_> = merged
            .entries
            .iter()
            .map(|e| (e.method.as_str(), e.shape.clone(), e.instance.as_str()))
            .collect();
        // Sorted by method, then shape, as every table is.
        assert_eq!(
            got,
            [
                ("gemm_nn_bf16", vec![1, 4096, 4096], "new_b"),
                ("gemm_nn_bf16", vec![16, 4096, 4096], "new_a"),
                ("gemm_nn_bf16", vec![4096, 4096, 4096], "big"),
                ("softmax_bf16", vec![32768, 4096], "soft"),
            ]
        );
        assert_eq!(merged.device.driver, "13.0", "the header is the new run's");
        assert!(merged.problems().is_empty());
    }

    #[test]
    fn a_written_table_reads_back_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvidia-h200.json");
        let t = table(
            "13.0",
            vec![entry("gemm_nn_bf16", &[16, 4096, 4096], "a", 14.0)],
        );
        write_file(&path, &t).unwrap();
        write_file(&path, &t).unwrap(); // over an existing file too
        assert_eq!(load_file(&path).unwrap(), t);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["nvidia-h200.json"]);
        // An unsound file there is an error naming it, not a table to write over.
        std::fs::write(&path, b"{ \"format\": 1 }").unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(e.contains("nvidia-h200.json"), "{e}");
    }

    #[test]
    fn tables_of_other_devices_do_not_merge() {
        let earlier = table("13.0", vec![entry("m", &[1], "a", 1.0)]);
        let mut other = table("13.0", vec![]);
        other.device.name = "NVIDIA H100 80GB HBM3".into();
        assert!(merge(&earlier, other.clone()).unwrap_err().contains("H100"));
        other.device.name = earlier.device.name.clone();
        other.device.compute_capability = [8, 0];
        assert!(merge(&earlier, other).is_err());
    }

    #[test]
    fn two_significant_digits() {
        assert_eq!(round2(123.456), 120.0);
        assert_eq!(round2(0.0123456), 0.012);
        assert_eq!(round2(98765.0), 99000.0);
        assert_eq!(round2(4.06), 4.1);
        assert_eq!(round2(0.0), 0.0);
    }
}
