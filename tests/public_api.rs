//! The library's public surface, as a build script and a program reading libraries and
//! bundles use it: every item here is named through its public path (never `__internal`), so
//! removing or renaming one fails this file's build. No NVRTC: libraries are generated
//! without compiling.

use std::path::{Path, PathBuf};

use tilegen::bundle::{self, Bundle, BundleManifest, Limits, Member, SignaturePolicy, Signed};
use tilegen::{
    Arch, Arg, ArgKind, Builder, CompileSource, DType, Diagnostic, Diagnostics, Error, Event,
    FileRef, InstanceEntry, Launch, Manifest, Mark, Op, Options, Report, Resources, Target,
};

/// `tilegen::generate`'s signature: options, an event callback shared by compile threads.
type GenerateFn = fn(&Options, &(dyn Fn(&Event) + Sync)) -> tilegen::Result<Report>;

/// Names every public item a user reaches for, with the types its signature promises; never
/// run (the closures are only type-checked).
#[test]
fn the_surface_has_the_items_and_signatures_users_rely_on() {
    // Build scripts.
    let _ = |specs: &Path| -> PathBuf { tilegen::compile_specs(specs) };
    let _ = |b: &mut Builder| -> (tilegen::Result<PathBuf>, PathBuf) {
        b.specs("specs")
            .templates("templates")
            .archs(["sm_80", "sm_90"])
            .out_dir("out")
            .jobs(2)
            .cache_dir("cache")
            .remote_cache("redis://localhost")
            .filter("softmax")
            .bundle("kernels.tar.gz")
            .bundle_pubkey("tilegen.pub")
            .tuning("tuning")
            .prune_by_tuning(true)
            .install_nvrtc(false)
            .emit_rerun_if_changed(false);
        (b.try_compile(), b.compile())
    };
    let _: Builder = Builder::default();

    // The generator core and its options, events and report.
    let _: GenerateFn = tilegen::generate;
    let mut o = Options::new("specs", "out");
    o.templates = Some(PathBuf::from("templates"));
    o.jobs = 1;
    o.archs = Some(vec![Arch::Sm90]);
    o.check = false;
    o.cache_dir = None;
    o.bindings = true;
    o.compile = false;
    o.filter = None;
    o.bundle = None;
    o.bundle_pubkey = None;
    o.remote_cache = None;
    o.tuning = None;
    o.prune_by_tuning = false;
    let _ = |e: &Event| -> String {
        match e {
            Event::Planned {
                instances,
                compiles,
            } => format!("{instances} {compiles}"),
            Event::Compiled {
                instance,
                arch,
                cached,
                source,
                millis,
                warnings,
            } => {
                let from = match source {
                    CompileSource::Local | CompileSource::Remote => "cache",
                    CompileSource::Compiled => "nvrtc",
                };
                format!("{instance} {arch} {cached} {from} {millis} {warnings:?}")
            }
            Event::CacheCorrupt { message }
            | Event::CacheWarning { message }
            | Event::TuningDropped { message } => message.clone(),
            _ => String::new(),
        }
    };
    let _ = |r: &Report| {
        (
            r.instances,
            r.compiled,
            r.cache_hits,
            r.remote_hits,
            r.corrupt_cache_entries,
            r.written.len() + r.removed.len() + r.unchanged + r.inputs.len(),
            r.millis,
        )
    };

    // Bundles: creating, reading and verifying (signed or not).
    let _: fn(&Path, &Path) -> tilegen::Result<BundleManifest> = bundle::create;
    let _: fn(&Path, &Limits) -> tilegen::Result<Bundle> = bundle::open;
    let _: fn(&[u8], &Limits) -> Result<Bundle, String> = bundle::verify_bytes;
    let _: fn(&Path, &Path, &Limits) -> tilegen::Result<BundleManifest> = bundle::unpack;
    let _ = |p: &Path, l: &Limits, pol: Option<SignaturePolicy>| {
        let _: tilegen::Result<(Bundle, Option<Signed>)> = bundle::open_signed(p, l, pol);
        let _: tilegen::Result<(BundleManifest, Option<Signed>)> = bundle::check_signed(p, l, pol);
        let _: tilegen::Result<(BundleManifest, Option<Signed>)> =
            bundle::unpack_signed(p, Path::new("dest"), l, pol);
        let _: tilegen::Result<(bundle::Staged, Option<Signed>)> = bundle::stage_signed(p, l, pol);
    };
    let _ = |key: &str| -> tilegen::Result<()> {
        let pubkey: bundle::PublicKey = bundle::read_public_key(key)?;
        let policy = SignaturePolicy {
            pubkey: &pubkey,
            required: true,
        };
        let (_, signed) =
            bundle::check_signed(Path::new("b.tar.gz"), &Limits::default(), Some(policy))?;
        match signed {
            Some(Signed::Yes { key_id, comment }) => drop((key_id, comment)),
            Some(Signed::Unsigned) | None => {}
        }
        Ok(())
    };
    let l = Limits::default();
    let _ = (
        l.max_archive_bytes,
        l.max_unpacked_bytes,
        l.max_member_bytes,
        l.max_entries,
        l.max_ratio,
    );

    // The runtime the bindings use, re-exported, and the version stamped into every file.
    let _: Option<tilegen::launch_rules::ArgError> = None;
    let _: &str = tilegen::VERSION;
}

/// What each error carries, matched the way a caller tells failures apart (`Error` is
/// `#[non_exhaustive]`: the last arm is required).
fn describe(e: &Error) -> String {
    match e {
        Error::Usage(m) | Error::Environment(m) | Error::OutOfDate(m) | Error::Gpu(m) => m.clone(),
        Error::Spec(Diagnostics(all)) => all
            .iter()
            .map(|d: &Diagnostic| {
                let Mark { line, col } = d.mark;
                format!(
                    "{}:{line}:{col}: {} ({})",
                    d.file.display(),
                    d.message,
                    d.width
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Error::Template {
            template,
            instance,
            message,
        } => format!("{template} {instance} {message}"),
        Error::Compile {
            instance,
            arch,
            source_path,
            options,
            log,
        } => format!(
            "{instance} {arch} {} {options} {log}",
            source_path.display()
        ),
        Error::Io { path, source } => format!("{}: {source}", path.display()),
        Error::Bundle { path, message } => format!("{}: {message}", path.display()),
        _ => e.to_string(),
    }
}

fn tiny_specs(dir: &Path) -> PathBuf {
    let specs = dir.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::write(
        specs.join("k.yaml"),
        "kernels:\n  - name: add\n    op: vector_add\n    dtype: f32\n    archs: [sm_90]\n",
    )
    .unwrap();
    specs
}

/// A library generated, its manifest read, packed into a bundle and verified, all through the
/// public API; hostile input comes back as the documented error kinds.
#[test]
fn a_library_and_its_bundle_through_the_public_api() {
    let t = tempfile::tempdir().unwrap();
    let specs = tiny_specs(t.path());
    let lib = t.path().join("lib");
    let mut o = Options::new(&specs, &lib);
    o.compile = false;
    o.cache_dir = Some(t.path().join("cache"));
    let report: Report = tilegen::generate(&o, &|_| {}).expect("renders without NVRTC");
    assert_eq!(report.instances, 1);
    assert!(report.inputs.iter().any(|p| p.ends_with("k.yaml")));

    let m = Manifest::from_bytes(&std::fs::read(lib.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m.tilegen_version, tilegen::VERSION);
    let e: &InstanceEntry = &m.instances[0];
    assert!(e.name.starts_with("add"), "{}", e.name);
    assert_eq!(
        (e.op, e.dtype, e.out_dtype),
        (Op::VectorAdd, DType::F32, DType::F32)
    );
    let kinds: Vec<ArgKind> = e.args.iter().map(|a: &Arg| a.kind).collect();
    assert_eq!(
        kinds,
        [ArgKind::In, ArgKind::In, ArgKind::Out, ArgKind::Scalar]
    );
    let _: &Launch = &e.launch;
    let FileRef {
        path,
        sha256,
        bytes,
    } = &e.source;
    assert!(path.ends_with(".cu") && sha256.len() == 64 && *bytes > 0);
    // Not compiled: the library lists no binaries.
    let targets: &[Target] = &e.targets;
    assert!(targets.iter().all(|t| t.resources == Resources::default()));
    assert_eq!(m.instance(&e.name), Some(e));

    let archive = t.path().join("k.tar.gz");
    let created: BundleManifest = bundle::create(&lib, &archive).expect("packs the library");
    let opened: Bundle = bundle::open(&archive, &Limits::default()).expect("verifies");
    assert_eq!(opened.manifest, created);
    assert!(created
        .members
        .iter()
        .any(|m: &Member| m.path == "manifest.json"));
    assert!(opened.files.contains_key("bindings.rs"));

    let mut bytes = std::fs::read(&archive).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    assert!(bundle::verify_bytes(&bytes, &Limits::default()).is_err());
    std::fs::write(&archive, b"not a bundle").unwrap();
    let err = bundle::open(&archive, &Limits::default()).unwrap_err();
    assert!(matches!(err, Error::Bundle { .. }), "{}", describe(&err));
    assert_eq!(err.exit_code(), 7);

    // A spec error carries every diagnostic with its position.
    std::fs::write(
        specs.join("k.yaml"),
        "kernels:\n  - name: add\n    op: vector_ad\n    dtype: f32\n",
    )
    .unwrap();
    let err = tilegen::generate(&o, &|_| {}).unwrap_err();
    assert!(matches!(err, Error::Spec(_)), "{}", describe(&err));
    assert_eq!(err.exit_code(), 3);
    assert!(describe(&err).contains("k.yaml:3:"), "{}", describe(&err));
}

/// Set in the child process of [`a_relative_out_dir_needs_out_dir`].
const CHILD: &str = "TILEGEN_PUBLIC_API_CHILD";

/// A build script without OUT_DIR and without an absolute out_dir is told so. Cargo sets
/// OUT_DIR for this crate's own tests (the crate has a build script), so the call runs in a
/// child process of this test binary, started without it.
#[test]
#[allow(clippy::disallowed_methods)] // this process's own environment, not a build script's
fn a_relative_out_dir_needs_out_dir() {
    if std::env::var_os(CHILD).is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "a_relative_out_dir_needs_out_dir", "--nocapture"])
            .env_remove("OUT_DIR")
            .env(CHILD, "1")
            .status()
            .unwrap();
        assert!(status.success(), "the child process failed: {status}");
        return;
    }
    assert!(std::env::var_os("OUT_DIR").is_none());
    let t = tempfile::tempdir().unwrap();
    let err = Builder::new()
        .specs(tiny_specs(t.path()))
        .out_dir("relative")
        .emit_rerun_if_changed(false)
        .try_compile()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Usage(m) if m.contains("OUT_DIR")),
        "{}",
        describe(&err)
    );
    assert_eq!(err.exit_code(), 2);
}
