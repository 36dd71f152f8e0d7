//! Building a library from a bundle instead of compiling: the bundle is verified, its
//! binaries and manifest are written to the output folder and the bindings are generated
//! from its manifest by this tilegen. NVRTC is never loaded. When the specs are present
//! they are rendered (no NVRTC needed for that) and every instance is compared with the
//! bundle's, field by field; any difference is an error listing them all.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::escape::{shown, shown_prefix};
use crate::generate::{self, Event, Options, Report};
use crate::manifest::Manifest;
use crate::output::{Content, FileSet};
use crate::render::config_hash;

use super::{Limits, Staged};

/// Differences between the specs' instances and the bundle's, one line each (empty when
/// they agree). Every field the library emits from an entry is compared with what the specs
/// give, each differing field named: the configuration, the archs, the arguments, the launch
/// geometry, the entry point and the origin (file and line, which the headers name). Only
/// `config_sha256` may differ, as it also covers the tilegen version.
pub fn spec_differences(rendered: &generate::Rendered, lib: &Manifest) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut in_specs = std::collections::BTreeSet::new();
    for inst in &rendered.instances {
        in_specs.insert(inst.name.as_str());
        let at = format!(
            "{} ({}:{})",
            inst.name,
            shown(&inst.origin.file),
            inst.origin.line
        );
        match lib.instance(&inst.name) {
            None => diffs.push(format!("{at}: in the specs but not in the bundle")),
            Some(entry) => {
                let fields = config_fields(inst, entry);
                if !fields.is_empty() {
                    diffs.push(format!(
                        "{at}: configuration differs (config sha256 {} in the specs, {} in the bundle): {}",
                        config_hash(inst),
                        shown(&entry.config_sha256),
                        fields.join("; ")
                    ));
                }
            }
        }
    }
    for entry in &lib.instances {
        if !in_specs.contains(entry.name.as_str()) {
            diffs.push(format!(
                "{}: in the bundle but not in the specs",
                shown(&entry.name)
            ));
        }
    }
    diffs
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
    let mut generated = FileSet::new();
    if bindings {
        let text = crate::bindings::generate(&lib, &|p| {
            if kept.iter().any(|k| k == p) {
                staged.read(p).ok()
            } else {
                None
            }
        })?;
        generated.insert(crate::bindings::FILE_NAME.into(), text.into_bytes());
        lib.files.push(crate::bindings::FILE_NAME.into());
        lib.files.sort();
    }
    generated.insert(crate::manifest::FILE_NAME.into(), lib.to_bytes());
    Ok(StagedLibrary {
        staged,
        kept,
        generated,
    })
}

/// `generate` with `opts.bundle` set: verify the bundle, compare it with the specs when they
/// exist, then write (or `--check`) the library.
pub fn generate_from_bundle(
    opts: &Options,
    bundle_path: &Path,
    on_event: &(dyn Fn(&Event) + Sync),
) -> Result<Report> {
    let start = Instant::now();
    if opts.filter.is_some() || opts.archs.is_some() {
        return Err(Error::Usage(
            "a bundle is used whole: --filter and --arch cannot be combined with --bundle".into(),
        ));
    }
    // A key makes the signature mandatory: a build that names a key never takes an unsigned
    // or differently signed bundle.
    let key = opts
        .bundle_pubkey
        .as_deref()
        .map(super::sign::read_public_key)
        .transpose()?;
    let policy = key.as_ref().map(|pubkey| super::sign::SignaturePolicy {
        pubkey,
        required: true,
    });
    let (bundle, _) = super::stage::stage_signed(bundle_path, &Limits::default(), policy)?;
    let lib = bundle.library_manifest().map_err(|m| Error::Bundle {
        path: bundle_path.to_path_buf(),
        message: m,
    })?;
    let mut inputs = vec![bundle_path.to_path_buf()];
    if key.is_some() {
        inputs.push(super::sign::signature_path(bundle_path));
    }
    if opts.specs.exists() {
        let rendered = generate::render_all(opts)?;
        let diffs = spec_differences(&rendered, &lib);
        if !diffs.is_empty() {
            return Err(Error::OutOfDate(format!(
                "bundle {} does not match the specs in {} ({} differences); rebuild the bundle or remove the specs:\n  {}",
                bundle_path.display(),
                opts.specs.display(),
                diffs.len(),
                diffs.join("\n  ")
            )));
        }
        inputs.extend(rendered.inputs);
    }
    on_event(&Event::Planned {
        instances: lib.instances.len(),
        compiles: 0,
    });
    let instances = lib.instances.len();
    let files = library_files(&bundle, lib, opts.bindings)?;
    let mut report = Report {
        instances,
        inputs,
        ..Default::default()
    };
    generate::write_or_check(
        opts,
        &files.contents()?,
        &format!("bundle {}", bundle_path.display()),
        &mut report,
    )?;
    report.millis = start.elapsed().as_millis() as u64;
    Ok(report)
}
