//! `tilegen tune` and `tilegen bench --dispatch`: every instance of a bindings method that
//! can run a shape, verified first, then timed turn about with the others (the same timing
//! code as `bench`), beside what the fixed dispatch rules pick and what the library's own
//! tuning tables pick. `tune` writes the winners as a tuning table ([`crate::TuningTable`]).

use std::collections::{BTreeMap, BTreeSet};

use cudarc::driver::CudaSlice;
use serde::Serialize;

use super::bench::{random_buffer, time_interleaved};
use super::problem::{self, Problem};
use super::{call_args, launch, with_tensor_maps, Gpu};
use crate::bindings::method_name;
use crate::error::{Error, Result};
use crate::launch::ArgKind;
use crate::manifest::InstanceEntry;
use crate::spec::model::Op;
use crate::tuning::{round2, shape_args, DeviceKey, TuningEntry, TuningTable, NOISE};

/// One method at one shape: every candidate's median time, fastest first, and the picks.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub method: String,
    pub problem: Problem,
    pub shape: Vec<u64>,
    /// (instance, median µs), fastest first.
    pub times: Vec<(String, f64)>,
    /// What the fixed rules pick here (None: they pick nothing that runs the shape).
    pub rule: Option<String>,
    /// What the library's tuning tables pick here, for this device.
    pub tuned: Option<String>,
    /// Members left out because they failed verification.
    pub unverified: Vec<String>,
}

impl Measured {
    pub fn time_of(&self, instance: &str) -> Option<f64> {
        self.times
            .iter()
            .find(|(n, _)| n == instance)
            .map(|(_, t)| *t)
    }
}

/// Shapes to measure, per op, overriding the defaults. A JSON object from op name to a list
/// of shapes, each the method's size arguments in order (`[n]`, `[rows, cols]`, `[m, n, k]`).
pub type Shapes = BTreeMap<Op, Vec<Vec<u64>>>;

/// The longest shapes file read (a list of a few hundred shapes is a few KiB).
const MAX_SHAPES_FILE_BYTES: u64 = 1 << 20;

/// A shapes file's object with its keys in file order, repeats kept (serde's maps keep the
/// last of a repeated key, which would drop shapes without a word).
struct ShapesObject(Vec<(String, Vec<Vec<u64>>)>);

impl<'de> serde::Deserialize<'de> for ShapesObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = ShapesObject;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object from op name to lists of sizes")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<ShapesObject, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(ShapesObject(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// Reads a shapes file (see [`Shapes`]), as untrusted input: a regular file of at most
/// 1 MiB, each op once, each with at least one shape and no shape twice.
pub fn read_shapes(path: &std::path::Path) -> Result<Shapes> {
    let shown = crate::escape::shown_path(path);
    let bad = |m: String| Error::input(path, format!("{shown}: {m}"));
    let bytes = crate::input::read_limited(path, MAX_SHAPES_FILE_BYTES, &bad)?;
    let raw: ShapesObject = serde_json::from_slice(&bytes).map_err(|e| {
        Error::input(
            path,
            format!(
                "{shown}:{}:{}: not a shapes file (an object from op name to lists of sizes): {e}",
                e.line(),
                e.column()
            ),
        )
    })?;
    let mut out = Shapes::new();
    for (op, shapes) in raw.0 {
        let op_shown = crate::escape::shown(&op);
        let parsed = Op::parse(&op)
            .ok_or_else(|| bad(format!("`{op_shown}` is not an op ({})", Op::choices())))?;
        let want = shape_args(parsed.family()).ok_or_else(|| {
            bad(format!(
                "{op_shown} is not tuned by shape (it dispatches by head size)"
            ))
        })?;
        if shapes.is_empty() {
            return Err(bad(format!(
                "{op_shown} has no shapes (leave it out to measure its defaults)"
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for s in &shapes {
            if s.len() != want.len() || s.iter().any(|&d| d == 0 || d > 1 << 40) {
                return Err(bad(format!(
                    "{op_shown} shape {:?}: give ({}), each 1 to 2^40",
                    &s[..s.len().min(4)],
                    want.join(", ")
                )));
            }
            if !seen.insert(s) {
                return Err(bad(format!("{op_shown} shape {s:?} appears twice")));
            }
        }
        if out.insert(parsed, shapes).is_some() {
            return Err(bad(format!("{op_shown} appears twice")));
        }
    }
    Ok(out)
}

/// The problem of a shape for an op; None when the sizes do not fit the op's family.
fn problem_of(inst: &InstanceEntry, shape: &[u64]) -> Option<Problem> {
    (crate::ops::family(inst.op).cases.problem_of)(inst, shape)
}

fn shape_of(p: Problem) -> Vec<u64> {
    match p {
        Problem::Elements { n, .. } => vec![n],
        Problem::Rows { rows, cols } => vec![rows, cols],
        Problem::Gemm { m, n, k } => vec![m, n, k],
    }
}

/// An instance's problems at a shapes file's shapes for its op; None when the file has none
/// for it (`bench --shapes`).
pub fn shape_problems(inst: &InstanceEntry, shapes: &Shapes) -> Option<Vec<Problem>> {
    let list = shapes.get(&inst.op)?;
    Some(list.iter().filter_map(|s| problem_of(inst, s)).collect())
}

/// The shapes a method is measured at: the shapes file's for its op, else the bench's goal
/// shapes of any member, and for elementwise ops two smaller sizes too (their rule depends on
/// the size against the SM count).
fn shapes_for(members: &[InstanceEntry], shapes: &Shapes) -> Vec<Problem> {
    let first = &members[0];
    if let Some(given) = shape_problems(first, shapes) {
        return given;
    }
    let mut out: Vec<Problem> = Vec::new();
    for inst in members {
        // Unfiltered by `fits`: a shape some member cannot run is still a shape of the method.
        for p in problem::bench_cases(inst) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    for size in crate::ops::family(first.op).cases.tune_sizes {
        out.extend(problem_of(first, size));
    }
    out
}

/// The device as the bindings' loader reads it, for the runtime's rules.
fn device_of(gpu: &Gpu) -> crate::loader::Device {
    crate::loader::Device {
        major: gpu.sm / 10,
        minor: gpu.sm % 10,
        sm_count: gpu.sm_count,
        driver: super::driver_version(),
        name: crate::loader::DeviceName::new(&gpu.name),
    }
}

/// Whether an instance runs here: a binary for this device, and for tensor maps a driver that
/// encodes them (as `KernelInfo::runs_on` decides in the bindings).
fn runs_here(gpu: &Gpu, device: &crate::loader::Device, inst: &InstanceEntry) -> bool {
    gpu.pick_binary(inst).is_ok()
        && (inst.tensor_maps.is_empty() || crate::tensor_map::driver_encodes(device))
}

/// The member the fixed rules run for `p`, as the bindings' plan function decides; `runs`
/// says which members run on `device`.
fn rule_pick(
    device: &crate::loader::Device,
    members: &[InstanceEntry],
    runs: &[bool],
    p: Problem,
) -> Option<usize> {
    use crate::call_checks::{gemm_order, pick_elements, pick_rows, GemmOption, RowPitches};
    let pick = match p {
        Problem::Elements { n, .. } => {
            let epb: Vec<u32> = members
                .iter()
                .map(|i| i.launch.grid.elems_per_block())
                .collect();
            Some(pick_elements(n as usize, device.sm_count, &epb))
        }
        Problem::Rows { cols, .. } => {
            let max: Vec<Option<u32>> = members.iter().map(|i| i.launch.grid.max_cols()).collect();
            pick_rows(cols as usize, &max).ok()
        }
        Problem::Gemm { m, n, k, .. } => {
            let options: Vec<GemmOption> = members
                .iter()
                .zip(runs)
                .map(|(i, &runs)| GemmOption {
                    tile: i.launch.grid.output_tile(),
                    tensor_maps: !i.tensor_maps.is_empty(),
                    // As the bindings: a table-only member is never the rules' pick.
                    runs: runs && !i.table_only,
                    split_k: i.launch.grid.cluster(),
                })
                .collect();
            // The bindings try in this order and take the first that accepts the call, for
            // the matrices as `tune` stores them (rows `ld` elements apart).
            let first = members.first()?;
            let (lda, ldb, _) = problem::gemm_ld(first, m, n, k);
            let elem = u64::from(first.dtype.size());
            let pitches = RowPitches {
                a: lda.saturating_mul(elem),
                b: ldb.saturating_mul(elem),
            };
            gemm_order(
                m as usize, n as usize, k as usize, pitches, device, &options,
            )
            .into_iter()
            .find(|&i| problem::fits(&members[i], p))
        }
    };
    pick.filter(|&i| problem::fits(&members[i], p))
}

/// The member the library's tuning tables pick for `p` on this device, as the bindings do;
/// `runs` says which members run here.
fn tuned_pick(
    gpu: &Gpu,
    device: &crate::loader::Device,
    method: &str,
    members: &[InstanceEntry],
    runs: &[bool],
    p: Problem,
) -> Option<usize> {
    let refs: Vec<&InstanceEntry> = members.iter().collect();
    let tables = &gpu.manifest.tuning;
    crate::tuning::table_pick(tables, method, &refs, runs, device, &shape_of(p))
        .filter(|&i| problem::fits(&members[i], p))
}

/// The library's methods that have a choice to make: two or more members, dispatched by shape.
/// Members in manifest order (the bindings' order); `filter` keeps methods whose name holds it.
pub fn methods(gpu: &Gpu, filter: Option<&str>) -> Vec<(String, Vec<InstanceEntry>)> {
    let mut by: BTreeMap<String, Vec<InstanceEntry>> = BTreeMap::new();
    for inst in &gpu.manifest.instances {
        by.entry(method_name(inst)).or_default().push(inst.clone());
    }
    by.into_iter()
        .filter(|(name, members)| {
            members.len() > 1
                && shape_args(members[0].op.family()).is_some()
                && filter.is_none_or(|f| name.contains(f))
        })
        .collect()
}

/// Verifies each instance once (the cases `verify` runs, up to `max_elements` outputs);
/// returns those that failed.
fn verify_members(
    gpu: &mut Gpu,
    members: &[InstanceEntry],
    done: &mut BTreeMap<String, bool>,
    rng: &mut rand::rngs::StdRng,
    max_elements: u64,
) -> BTreeSet<String> {
    let mut failed = BTreeSet::new();
    for inst in members {
        let passed = *done.entry(inst.name.clone()).or_insert_with(|| {
            problem::verify_cases(inst)
                .into_iter()
                .filter(|c| problem::output_len(c.problem) <= max_elements)
                .all(|c| super::verify::run_case(gpu, inst, c, rng).passed)
        });
        if !passed {
            failed.insert(inst.name.clone());
        }
    }
    failed
}

/// Times every verified member that runs `p`, turn about.
fn time_members(gpu: &mut Gpu, members: &[&InstanceEntry], p: Problem) -> Result<Vec<f64>> {
    let first = members[0];
    let bytes: u64 = super::bench::traffic(first, p).0;
    let sets = ((4 * gpu.l2_bytes).div_ceil(bytes.max(1)) as usize).clamp(1, 8);
    // Members share one signature, so one set of buffers serves them all.
    let mut buffers: Vec<Vec<Option<CudaSlice<u8>>>> = Vec::new();
    for s in 0..sets {
        let mut set = Vec::new();
        for (i, a) in first.args.iter().enumerate() {
            let dtype = super::data::dtype_of(&a.ty);
            let len = problem::buffer_len(&a.name, p) as usize * dtype.size() as usize;
            set.push(match a.kind {
                ArgKind::In => Some(random_buffer(gpu, len, dtype, (s * 64 + i) as u64)?),
                ArgKind::Out => Some(gpu.alloc_filled(len, 0xFF)?),
                ArgKind::Scalar => None,
            });
        }
        buffers.push(set);
    }
    let mut kernels = Vec::new();
    for inst in members {
        let f = gpu.function(inst)?;
        let dims = gpu.dims(inst, p)?;
        let mut args = Vec::with_capacity(sets);
        for set in &buffers {
            let call = call_args(inst, p, set);
            args.push(with_tensor_maps(gpu, inst, call)?);
        }
        kernels.push((f, dims, args));
    }
    let gpu = &*gpu;
    let mut bodies: Vec<Box<dyn FnMut(usize) -> Result<()> + '_>> = kernels
        .iter()
        .map(|(f, dims, args)| {
            Box::new(move |run: usize| launch(gpu, f, *dims, &args[run % args.len()]))
                as Box<dyn FnMut(usize) -> Result<()>>
        })
        .collect();
    let mut refs: Vec<&mut dyn FnMut(usize) -> Result<()>> =
        bodies.iter_mut().map(|b| b.as_mut() as _).collect();
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    Ok(time_interleaved(gpu, &names, &mut refs)?
        .into_iter()
        .map(|(median_ms, _)| median_ms * 1e3)
        .collect())
}

/// Measures `method` at every shape: verify, then time. `on_result` sees each shape's result
/// as soon as it is measured.
#[allow(clippy::too_many_arguments)]
pub fn measure_method(
    gpu: &mut Gpu,
    method: &str,
    members: &[InstanceEntry],
    shapes: &Shapes,
    verified: &mut BTreeMap<String, bool>,
    rng: &mut rand::rngs::StdRng,
    max_elements: u64,
    on_result: &mut dyn FnMut(&Measured),
) -> Result<Vec<Measured>> {
    let failed = verify_members(gpu, members, verified, rng, max_elements);
    // Once per method: which binary runs is a file read per instance.
    let device = device_of(gpu);
    let runs: Vec<bool> = members.iter().map(|i| runs_here(gpu, &device, i)).collect();
    let mut out = Vec::new();
    for p in shapes_for(members, shapes) {
        let runnable: Vec<&InstanceEntry> = members
            .iter()
            .zip(&runs)
            .filter(|(i, &r)| r && !failed.contains(&i.name) && problem::fits(i, p))
            .map(|(i, _)| i)
            .collect();
        if runnable.is_empty() {
            continue;
        }
        gpu.doing(format!("timing {method} at {p}"));
        let micros = time_members(gpu, &runnable, p)?;
        let mut times: Vec<(String, f64)> = runnable
            .iter()
            .zip(micros)
            .map(|(i, t)| (i.name.clone(), t))
            .collect();
        // Fastest first; equal times keep manifest order.
        times.sort_by(|a, b| a.1.total_cmp(&b.1));
        let name = |i: Option<usize>| i.map(|i| members[i].name.clone());
        let measured = Measured {
            method: method.to_string(),
            problem: p,
            shape: shape_of(p),
            times,
            rule: name(rule_pick(&device, members, &runs, p)),
            tuned: name(tuned_pick(gpu, &device, method, members, &runs, p)),
            unverified: failed.iter().cloned().collect(),
        };
        on_result(&measured);
        out.push(measured);
    }
    Ok(out)
}

/// The tuning table of these measurements: the winner of each (method, shape), its time, the
/// runner-up's and the rule's. The fixed rules' pick stays the winner unless the fastest beats
/// it by more than [`NOISE`], so a table changes dispatch only where the gain is real.
pub fn table(gpu: &Gpu, measured: &[Measured]) -> TuningTable {
    let mut entries: Vec<TuningEntry> = measured
        .iter()
        .filter_map(|m| {
            let (fastest, best_us) = m.times.first()?;
            let rule = m.rule.as_deref().unwrap_or(fastest);
            let rule_us = m.time_of(rule).unwrap_or(*best_us);
            let winner = match rule_us <= best_us * (1.0 + NOISE) {
                true => rule,
                false => fastest.as_str(),
            };
            let inst = gpu.manifest.instance(winner)?;
            let runner = m.times.iter().find(|(n, _)| n != winner);
            Some(TuningEntry {
                method: m.method.clone(),
                shape: m.shape.clone(),
                instance: winner.to_string(),
                config_sha256: inst.config_sha256.clone(),
                median_us: round2(m.time_of(winner).unwrap_or(*best_us)),
                runner_up: runner.map(|r| r.0.clone()),
                runner_up_us: runner.map(|r| round2(r.1)),
                rule: rule.to_string(),
                rule_us: round2(rule_us),
            })
        })
        .collect();
    entries.sort_by(|a, b| (&a.method, &a.shape).cmp(&(&b.method, &b.shape)));
    TuningTable {
        format: crate::tuning::FORMAT,
        device: device_key(gpu),
        tilegen_version: gpu.manifest.tilegen_version.clone(),
        nvrtc_version: gpu.manifest.nvrtc_version.clone(),
        entries,
    }
}

/// How a table names this GPU.
pub fn device_key(gpu: &Gpu) -> DeviceKey {
    DeviceKey {
        name: gpu.name.clone(),
        compute_capability: [gpu.sm / 10, gpu.sm % 10],
        sm_count: gpu.sm_count,
        driver: super::driver_version().map_or("unknown".into(), |v| v.to_string()),
    }
}

/// A file name for a device's table: its name in lower case, runs of anything but letters and
/// digits as one `-` (`NVIDIA H200` → `nvidia-h200.json`).
pub fn file_name(device: &str) -> String {
    let mut out = String::new();
    for c in device.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-');
    format!("{}.json", if out.is_empty() { "device" } else { out })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::{Arch, DType, Engine, Instance, Op, Params};

    /// A wgmma GEMM entry as `generate` writes it (no binaries: `rule_pick` reads none).
    fn wgmma(tile: [u32; 3], stages: u32, table_only: bool) -> InstanceEntry {
        let params = Params {
            tile: Some(tile),
            stages: Some(stages),
            engine: Some(Engine::Wgmma),
            ..Default::default()
        };
        let mut inst = Instance::for_test(Op::Gemm, DType::Bf16, params);
        inst.archs = vec![Arch::Sm90a];
        crate::ops::apply_defaults(Op::Gemm, &mut inst.params);
        InstanceEntry {
            table_only,
            ..InstanceEntry::for_test(&inst)
        }
    }

    /// A shapes file is untrusted input: every op once, each with shapes, none twice, and a
    /// regular file of bounded size (not a fifo that never ends).
    #[test]
    fn shapes_files_are_read_as_untrusted_input() {
        let dir = tempfile::tempdir().unwrap();
        let read = |text: &str| {
            let path = dir.path().join("shapes.json");
            std::fs::write(&path, text).unwrap();
            read_shapes(&path).map_err(|e| e.to_string())
        };
        let ok = read(r#"{"vector_add": [[1048576], [4096]], "gemm": [[16, 4096, 4096]]}"#);
        assert_eq!(ok.unwrap().len(), 2);
        for (text, why) in [
            (r#"{"vector_add": [[1048576], [1048576]]}"#, "appears twice"),
            (
                r#"{"vector_add": [[1048576]], "vector_add": [[5]]}"#,
                "appears twice",
            ),
            (r#"{"vector_add": []}"#, "has no shapes"),
            (r#"{"vector_add": [[0]]}"#, "each 1 to 2^40"),
            (r#"{"x\u001b[31m": [[1]]}"#, "is not an op"),
        ] {
            let e = read(text).unwrap_err();
            assert!(e.contains(why) && !e.contains('\u{1b}'), "{text}: {e}");
        }
        let fifo = dir.path().join("fifo.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_shapes(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    /// The rules' pick that `tune` and `bench --dispatch` report is the bindings' one: a
    /// table-only member is passed over even where the rules would otherwise take it first.
    #[test]
    fn the_rules_pick_passes_over_table_only_members() {
        let device = crate::loader::Device {
            major: 9,
            minor: 0,
            sm_count: 132,
            driver: None,
            name: crate::loader::DeviceName::new("NVIDIA H200"),
        };
        // At 256x11008x4096 both tiles make one round (86 and 116 tiles), and the smaller
        // 128x192 costs less in the rules' model.
        let p = Problem::Gemm {
            m: 256,
            n: 11008,
            k: 4096,
        };
        let pick = |table_only: bool| {
            let members = [
                wgmma([128, 256, 64], 3, false),
                wgmma([128, 192, 64], 4, table_only),
            ];
            rule_pick(&device, &members, &[true, true], p)
        };
        assert_eq!(pick(false), Some(1));
        assert_eq!(pick(true), Some(0));
    }
}
