//! Building a library from a bundle instead of compiling: the bundle is verified, its
//! binaries and manifest are written to the output folder and the bindings are generated
//! from its manifest by this tilegen. NVRTC is never loaded. When the specs are present
//! they are rendered (no NVRTC needed for that) and only their instances are taken from the
//! bundle, which may hold more: each is found by name and checked (config sha256, every
//! field, its CUDA C), and its cache keys are this tilegen's own; anything missing or
//! different is an error listing them all, and nothing is written.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use super::{file_ref, render_all, write_or_check, Event, Options, Rendered, Report};
use crate::bundle::{sign, stage, Limits, Staged};
use crate::error::{Error, Result};
use crate::escape::{shown, shown_prefix};
use crate::hashing::{cache_key, KeyInputs};
use crate::manifest::Manifest;
use crate::output::{Content, FileSet};
use crate::render::config_hash;

/// Why a spec instance cannot be taken from a bundle entry of the same name (empty when it
/// can). The bundle's entry must carry the specs' config sha256 (same tilegen, configuration
/// and archs; the origin, the spec file and line the headers name, is free: a bundle serves
/// crates whose specs lie elsewhere), every field the library emits must agree, and its CUDA
/// C must be what this tilegen renders for it from the bundle's origin, so its binaries are
/// exactly those a compile of the specs' instance makes (NVRTC's output does not depend on
/// the header comment that names the origin).
fn entry_problems(
    inst: &crate::spec::Instance,
    entry: &crate::manifest::InstanceEntry,
    bundle_source: Option<&[u8]>,
    renderer: &crate::render::Renderer,
) -> Result<Vec<String>> {
    let at_bundle_origin = crate::spec::Instance {
        origin: entry.origin.clone(),
        ..inst.clone()
    };
    let fields = config_fields(inst, entry);
    let config_only: Vec<&String> = fields
        .iter()
        .filter(|f| !f.starts_with("origin "))
        .collect();
    if config_hash(inst) != entry.config_sha256 || !config_only.is_empty() {
        let fields = if fields.is_empty() {
            format!(
                "no field differs, so the bundle was made by another tilegen or its hash is wrong (this is tilegen {})",
                crate::VERSION
            )
        } else {
            fields.join("; ")
        };
        return Ok(vec![format!(
            "configuration differs (config sha256 {} in the specs, {} in the bundle): {fields}",
            config_hash(inst),
            shown(&entry.config_sha256),
        )]);
    }
    let source = renderer.render(&at_bundle_origin)?;
    if bundle_source != Some(source.as_bytes()) {
        // Only the origin may differ here; its header names it, so an origin the manifest
        // altered shows up as another source.
        let why = if fields.is_empty() {
            "other templates?".to_string()
        } else {
            format!("other templates, or {}?", fields.join("; "))
        };
        return Ok(vec![format!(
            "its CUDA C `{}` is not what this tilegen renders for it from the bundle's origin ({why})",
            shown(&entry.source.path)
        )]);
    }
    Ok(Vec::new())
}

/// The instances the specs name, taken from a (possibly larger) staged bundle whose
/// `manifest.json` is `lib`: their binaries as the bundle holds them (already checked
/// against its manifest's sha256), their CUDA C rendered from the specs (so the headers
/// name the specs' own file and line), a manifest listing exactly them and bindings for
/// them: the library a compile of the specs writes. Fails listing every instance the
/// bundle lacks or holds in another configuration.
pub fn subset_files<'a>(
    staged: &'a Staged,
    lib: &Manifest,
    rendered: &Rendered,
    opts: &Options,
    bundle_path: &Path,
    on_event: &(dyn Fn(&Event) + Sync),
) -> Result<StagedLibrary<'a>> {
    let renderer = crate::render::Renderer::new(opts.templates.as_deref())?;
    let mut problems = Vec::new();
    let mut entries = Vec::new();
    for (inst, source) in rendered.instances.iter().zip(&rendered.sources) {
        let at = format!(
            "{} ({}:{})",
            inst.name,
            shown(&inst.origin.file),
            inst.origin.line
        );
        let Some(entry) = lib.instance(&inst.name) else {
            problems.push(format!("{at}: in the specs but not in the bundle"));
            continue;
        };
        let bundle_source = staged.read(&entry.source.path).ok();
        let found = entry_problems(inst, entry, bundle_source.as_deref(), &renderer)?;
        if !found.is_empty() {
            problems.extend(found.into_iter().map(|p| format!("{at}: {p}")));
            continue;
        }
        // What a compile of the specs would record: their origin, hence another header
        // (the cache key leaves it out), and the same binaries. The keys are this tilegen's
        // own, not the bundle's word.
        let mut e = entry.clone();
        e.origin = inst.origin.clone();
        e.source = file_ref(e.source.path.clone(), source.as_bytes());
        for t in &mut e.targets {
            t.cache_key = cache_key(&KeyInputs {
                source,
                nvrtc_version: &lib.nvrtc_version,
                options: &crate::nvrtc::options(t.arch),
                arch: t.arch,
                tilegen_version: crate::VERSION,
            });
        }
        entries.push((e, source));
    }
    if !problems.is_empty() {
        return Err(Error::OutOfDate(format!(
            "bundle {} cannot serve the specs in {}: {} of their {} instances are missing or differ (the bundle holds {}); rebuild the bundle with them or change the specs:\n  {}",
            bundle_path.display(),
            opts.specs.display(),
            problems.len(),
            rendered.instances.len(),
            lib.instances.len(),
            problems.join("\n  ")
        )));
    }
    let mut kept = Vec::new();
    let mut generated = FileSet::new();
    for (e, source) in &entries {
        generated.insert(e.source.path.clone(), source.as_bytes().to_vec());
        for t in &e.targets {
            kept.push(t.ptx.path.clone());
            kept.push(t.cubin.path.clone());
        }
    }
    kept.sort();
    let mut manifest = Manifest {
        instances: entries.into_iter().map(|(e, _)| e).collect(),
        files: Vec::new(),
        ..lib.clone()
    };
    // The crate's own tuning tables first (they win where both measured a shape), then the
    // bundle's; entries for instances the specs do not take are dropped quietly, a crate
    // table's stale entries with a warning as in a compile.
    let (tuning, dropped) = crate::tuning::attach(rendered.tuning.clone(), &manifest);
    for message in dropped {
        on_event(&Event::TuningDropped { message });
    }
    let (from_bundle, _) = crate::tuning::attach(std::mem::take(&mut manifest.tuning), &manifest);
    manifest.tuning = tuning;
    manifest.tuning.extend(from_bundle);
    // Stable: of two tables for one device, the crate's stays first.
    manifest
        .tuning
        .sort_by(|a, b| a.device.name.cmp(&b.device.name));
    let mut files: Vec<String> = kept.iter().chain(generated.keys()).cloned().collect();
    files.sort();
    manifest.files = files;
    finish_staged(staged, kept, generated, manifest, opts.bindings)
}

/// Adds `bindings.rs` when wanted (generated by this tilegen over `manifest`, embedding files
/// from `generated` or the staged bundle's `kept` ones) and then `manifest.json`, which lists
/// it: the files of a library taken from a bundle.
fn finish_staged(
    staged: &Staged,
    kept: Vec<String>,
    mut generated: FileSet,
    mut manifest: Manifest,
    bindings: bool,
) -> Result<StagedLibrary<'_>> {
    if bindings {
        let text = crate::bindings::generate(&manifest, &|p| match generated.get(p) {
            Some(b) => Some(b.clone()),
            None if kept.iter().any(|k| k == p) => staged.read(p).ok(),
            None => None,
        })?;
        generated.insert(crate::bindings::FILE_NAME.into(), text.into_bytes());
        manifest.files.push(crate::bindings::FILE_NAME.into());
        manifest.files.sort();
    }
    generated.insert(crate::manifest::FILE_NAME.into(), manifest.to_bytes());
    Ok(StagedLibrary {
        staged,
        kept,
        generated,
    })
}

/// The configuration fields in which a spec instance and a bundle entry differ.
fn config_fields(
    inst: &crate::spec::Instance,
    entry: &crate::manifest::InstanceEntry,
) -> Vec<String> {
    fn field<T: serde::Serialize + PartialEq>(
        out: &mut Vec<String>,
        name: &str,
        specs: &T,
        bundle: &T,
    ) {
        if specs != bundle {
            // JSON escapes control characters; long values are cut.
            let j = |v: &T| shown_prefix(&serde_json::to_string(v).unwrap_or_default(), 300);
            out.push(format!(
                "{name}: specs {} vs bundle {}",
                j(specs),
                j(bundle)
            ));
        }
    }
    let mut out = Vec::new();
    field(&mut out, "op", &inst.op, &entry.op);
    field(&mut out, "dtype", &inst.dtype, &entry.dtype);
    field(&mut out, "out_dtype", &inst.out_dtype, &entry.out_dtype);
    field(&mut out, "params", &inst.params, &entry.params);
    field(&mut out, "epilogue", &inst.epilogue, &entry.epilogue);
    if !entry.targets.is_empty() {
        let archs: Vec<_> = entry.targets.iter().map(|t| t.arch).collect();
        field(&mut out, "archs", &inst.archs, &archs);
    }
    field(
        &mut out,
        "arguments",
        &crate::ops::signature(inst),
        &entry.args,
    );
    field(&mut out, "launch", &crate::ops::launch(inst), &entry.launch);
    field(
        &mut out,
        "entry_point",
        &inst.entry_point(),
        &entry.entry_point,
    );
    field(
        &mut out,
        "origin file",
        &inst.origin.file,
        &entry.origin.file,
    );
    field(
        &mut out,
        "origin line",
        &inst.origin.line,
        &entry.origin.line,
    );
    out
}

/// The library a staged bundle makes: its files, which stay in the staging folder until
/// written, but `manifest.json` and `bindings.rs`, which are generated.
pub struct StagedLibrary<'a> {
    staged: &'a Staged,
    /// Library paths taken from the bundle, sorted.
    kept: Vec<String>,
    /// `bindings.rs` (when wanted) and `manifest.json`, generated.
    generated: FileSet,
}

impl StagedLibrary<'_> {
    /// Every file of the library and where its bytes are, for [`crate::output`]'s writer.
    pub fn contents(&self) -> Result<BTreeMap<String, Content<'_>>> {
        let mut out = BTreeMap::new();
        for rel in &self.kept {
            out.insert(rel.clone(), self.staged.content(rel)?);
        }
        for (rel, bytes) in &self.generated {
            out.insert(rel.clone(), Content::Bytes(bytes));
        }
        Ok(out)
    }
}

/// The library files to write for a verified, staged bundle (`lib` is its `manifest.json`):
/// its files, with `bindings.rs` generated by this tilegen (or left out, and unlisted, when
/// `bindings` is false) and `manifest.json` listing them. Reads one PTX file at a time.
pub fn library_files(
    staged: &Staged,
    mut lib: Manifest,
    bindings: bool,
) -> Result<StagedLibrary<'_>> {
    let kept: Vec<String> = staged
        .paths()
        .filter(|p| *p != crate::manifest::FILE_NAME && *p != crate::bindings::FILE_NAME)
        .map(str::to_string)
        .collect();
    lib.files = kept.clone();
    finish_staged(staged, kept, FileSet::new(), lib, bindings)
}

/// `generate` with `opts.bundle` set: verify the bundle, take the specs' instances from it
/// when specs exist (else all of it), then write (or `--check`) the library.
pub fn generate_from_bundle(
    opts: &Options,
    bundle_path: &Path,
    on_event: &(dyn Fn(&Event) + Sync),
) -> Result<Report> {
    let start = Instant::now();
    // They choose among the specs' instances; without specs the bundle is used whole.
    if (opts.filter.is_some() || opts.archs.is_some()) && !opts.specs.exists() {
        return Err(Error::Usage(format!(
            "without specs ({} does not exist) a bundle is used whole: --filter and --arch need specs to apply to",
            opts.specs.display()
        )));
    }
    // A key makes the signature mandatory: a build that names a key never takes an unsigned
    // or differently signed bundle.
    let key = opts
        .bundle_pubkey
        .as_deref()
        .map(sign::read_public_key)
        .transpose()?;
    let policy = key.as_ref().map(|pubkey| sign::SignaturePolicy {
        pubkey,
        required: true,
    });
    let (bundle, _) = stage::stage_signed(bundle_path, &Limits::default(), policy)?;
    let lib = bundle.library_manifest().map_err(|m| Error::Bundle {
        path: bundle_path.to_path_buf(),
        message: m,
    })?;
    let mut inputs = vec![bundle_path.to_path_buf()];
    if key.is_some() {
        inputs.push(sign::signature_path(bundle_path));
    }
    let (files, instances) = if opts.specs.exists() {
        let rendered = render_all(opts)?;
        let files = subset_files(&bundle, &lib, &rendered, opts, bundle_path, on_event)?;
        inputs.extend(rendered.inputs);
        (files, rendered.instances.len())
    } else {
        let n = lib.instances.len();
        (library_files(&bundle, lib, opts.bindings)?, n)
    };
    on_event(&Event::Planned {
        instances,
        compiles: 0,
    });
    let mut report = Report {
        instances,
        inputs,
        ..Default::default()
    };
    write_or_check(
        opts,
        &files.contents()?,
        &format!("bundle {}", bundle_path.display()),
        &mut report,
    )?;
    report.millis = start.elapsed().as_millis() as u64;
    Ok(report)
}
