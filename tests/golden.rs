//! Golden bindings. `tests/golden/` is a small blessed library (specs in `specs/`, its
//! manifest, kernels and `bindings.rs`): the bindings generated from the blessed manifest must
//! equal the blessed `bindings.rs` byte for byte, the manifest must still describe the specs,
//! and the golden bindings are compiled here (`mod golden` below) and exercised without a GPU.
//!
//! Bless after an intended change (needs NVRTC, no GPU):
//!     TILEGEN_BLESS=1 cargo test --release --test golden
//! then run the tests again, since this binary compiled the old golden file.

use std::path::{Path, PathBuf};

use tilegen::__internal::generate;
use tilegen::Manifest;
use tilegen::Options;

#[allow(clippy::all)]
mod golden {
    include!("golden/bindings.rs");
}

/// A second generated library in the same crate (here the same file again): both import one
/// runtime, so this compiles, and their types are the same types.
#[allow(clippy::all)]
mod golden_again {
    include!("golden/bindings.rs");
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn bless() -> bool {
    tilegen::__internal::env::var_os("TILEGEN_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Under TILEGEN_BLESS, regenerates the whole golden library once, before any test reads it,
/// through the same core as `tilegen generate`.
fn bless_once() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        if bless() {
            let opts = Options::new(dir().join("specs"), dir());
            tilegen::generate(&opts, &|_| {}).expect("blessing regenerates the golden library");
        }
    });
}

fn blessed_manifest() -> Manifest {
    bless_once();
    let path = dir().join("manifest.json");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Manifest::from_bytes(&bytes).unwrap()
}

#[test]
fn bindings_match_the_golden_file() {
    let text = tilegen::__internal::bindings::generate_in(&blessed_manifest(), &dir()).unwrap();
    let path = dir().join("bindings.rs");
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    if text != golden {
        let line = text
            .lines()
            .zip(golden.lines())
            .position(|(a, b)| a != b)
            .map_or(0, |i| i + 1);
        panic!(
            "{} differs from the generated bindings (first at line {line}); if the change is intended, bless it:\n    TILEGEN_BLESS=1 cargo test --release --test golden",
            path.display()
        );
    }
}

/// Every golden file (CUDA C, PTX, cubins, manifest, bindings) is what the specs and the
/// templates make now: a template change that alters a kernel fails here until it is blessed,
/// which configuration hashes alone (they cover the specs, not the templates) would miss.
#[test]
fn every_golden_file_is_what_the_templates_make_now() {
    bless_once();
    let mut opts = Options::new(dir().join("specs"), dir());
    opts.check = true;
    match tilegen::generate(&opts, &|_| {}) {
        Ok(_) => {}
        Err(e) => panic!(
            "{e}\nif the change is intended, bless it:\n    TILEGEN_BLESS=1 cargo test --release --test golden"
        ),
    }
}

#[test]
fn golden_manifest_still_describes_its_specs() {
    // Needs no NVRTC: render the specs and compare each instance's configuration hash.
    let rendered = generate::render_all(&Options::new(dir().join("specs"), dir())).unwrap();
    let now: Vec<(String, String)> = rendered
        .instances
        .iter()
        .map(|i| (i.name.clone(), tilegen::__internal::render::config_hash(i)))
        .collect();
    let blessed: Vec<(String, String)> = blessed_manifest()
        .instances
        .iter()
        .map(|i| (i.name.clone(), i.config_sha256.clone()))
        .collect();
    assert_eq!(
        now, blessed,
        "tests/golden/specs changed since the golden library was blessed (TILEGEN_BLESS=1)"
    );
}

#[test]
fn generation_is_deterministic() {
    let m = blessed_manifest();
    let first = tilegen::__internal::bindings::generate_in(&m, &dir()).unwrap();
    for _ in 0..3 {
        assert_eq!(
            tilegen::__internal::bindings::generate_in(&m.clone(), &dir()).unwrap(),
            first
        );
    }
}

#[test]
fn bindings_without_binaries_parse_and_embed_nothing() {
    // What a DOCS_RS build gets: instances without targets.
    let mut m = blessed_manifest();
    for inst in &mut m.instances {
        inst.targets.clear();
    }
    // Nothing to read: no target lists a PTX file.
    let text = tilegen::__internal::bindings::generate(&m, &|_| None).unwrap();
    assert!(!text.contains("include_bytes!"));
    syn::parse_file(&text).expect("bindings parse");
}

#[test]
fn header_says_what_made_it() {
    bless_once();
    let text = std::fs::read_to_string(dir().join("bindings.rs")).unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "// @generated by tilegen {} from golden.yaml.",
            tilegen::VERSION
        )
    );
}

/// Two generated libraries in one crate share the runtime's types instead of each carrying
/// its own copy of them (and of the runtime's tests).
#[test]
fn two_libraries_live_in_one_crate() {
    use tilegen_runtime::{call_checks, launch_rules, loader};
    // The same types: a value of one library's type is a value of the other's.
    let buf: golden::Buf = golden_again::Buf::of::<f32>("x", 5000, 0x7f00_0000_0000);
    let plan: golden_again::Plan = golden::plan::softmax_f32(
        &golden_again::Device {
            major: 9,
            minor: 0,
            sm_count: 132,
            driver: None,
            name: tilegen_runtime::loader::DeviceName::unknown(),
        },
        buf,
        golden_again::Buf { arg: "out", ..buf },
        1,
        5000,
    )
    .unwrap();
    let err: golden::Error = golden_again::Error::Arg(golden_again::ArgError::NoInstance {
        op: "softmax",
        reason: "for this test",
    });
    let _: (call_checks::Plan, loader::Error, launch_rules::ArgError) = (
        plan,
        err,
        launch_rules::ArgError::NoInstance {
            op: "softmax",
            reason: "for this test",
        },
    );
    fn same<T>(_: T, _: T) {}
    same(golden::KERNELS, golden_again::KERNELS);
    // Each library keeps its own tables and methods.
    assert_eq!(golden::KERNELS.len(), golden_again::KERNELS.len());
    assert_eq!(
        golden::KERNELS[plan.kernel].name,
        golden_again::KERNELS[plan.kernel].name
    );

    // Nothing of the runtime is copied into the bindings: no modules, no tests.
    let text = std::fs::read_to_string(dir().join("bindings.rs")).unwrap();
    for copied in [
        "#[test]",
        "#[cfg(test)]",
        "mod loader",
        "mod call_checks",
        "fn choose_binary",
    ] {
        assert!(
            !text.contains(copied),
            "the golden bindings contain `{copied}`"
        );
    }
    assert!(text.contains("pub use ::tilegen_runtime::{call_checks, launch_rules, loader};"));
}

/// The bindings assert at compile time that the runtime they are built with runs code of the
/// tilegen that generated them, with a message that says what to change.
#[test]
fn bindings_check_the_runtime_version_at_compile_time() {
    let text = tilegen::__internal::bindings::generate_in(&blessed_manifest(), &dir()).unwrap();
    let check = format!(
        "const _: () = ::core::assert!(\n    ::tilegen_runtime::compatible(::tilegen_runtime::VERSION, \"{}\"),",
        tilegen::VERSION
    );
    assert!(
        text.contains(&check),
        "no version check at the top of:\n{}",
        text.lines().take(30).collect::<Vec<_>>().join("\n")
    );
    assert!(text.contains(&format!(
        "these bindings were generated by tilegen {} and need tilegen-runtime",
        tilegen::VERSION
    )));
    // The rule the assert evaluates: this runtime runs this generator's bindings, and
    // refuses those of an incompatible one (a compile error in the including crate).
    const _: () = assert!(tilegen_runtime::compatible(
        tilegen_runtime::VERSION,
        tilegen::VERSION
    ));
    assert!(!tilegen_runtime::compatible(
        tilegen_runtime::VERSION,
        "0.0.1"
    ));
    assert!(!tilegen_runtime::compatible(
        tilegen_runtime::VERSION,
        "99.0.0"
    ));
}

mod compiled {
    //! The golden bindings, compiled: their checks and tables, with no GPU.
    use super::golden::{
        call_checks, plan, ArgError, BinaryKind, Buf, Device, NoFit, Plan, Version, KERNELS,
    };

    /// An H200 as the loader reads it (plan functions take the device).
    const SMS: &Device = &Device {
        major: 9,
        minor: 0,
        sm_count: 132,
        driver: Some(Version::new(13, 0)),
        name: tilegen_runtime::loader::DeviceName::unknown(),
    };
    const BASE: u64 = 0x7f00_0000_0000;

    fn bf16s(arg: &'static str, len: usize) -> Buf {
        Buf::of::<half::bf16>(arg, len, BASE)
    }

    fn name(p: Result<Plan, ArgError>) -> &'static str {
        KERNELS[p.unwrap().kernel].name
    }

    /// `d = a · b` with a m×k, b k×n, d m×n, all row-major and packed.
    fn gemm(m: usize, n: usize, k: usize) -> Result<Plan, ArgError> {
        plan::gemm_nn_bf16(
            SMS,
            bf16s("a", m * k),
            bf16s("b", k * n),
            bf16s("d", m * n),
            m,
            n,
            k,
            k,
            n,
            n,
        )
    }

    #[test]
    fn gemm_picks_tiles_by_size() {
        // 4096² makes 1024 tiles of 128²: plenty for 132 SMs, so the larger tile.
        assert_eq!(
            name(gemm(4096, 4096, 4096)),
            "gemm_bf16_128x128x32_w32x32_s3_nn"
        );
        // 512² makes only 16 such tiles: the 64² tile spreads wider.
        assert_eq!(name(gemm(512, 512, 512)), "gemm_bf16_64x64x32_w32x32_s3_nn");
        assert_eq!(
            call_checks::tile_order(512, 512, SMS.sm_count, &[(64, 64), (128, 128)]),
            vec![0, 1]
        );
        assert_eq!(
            call_checks::tile_order(4096, 4096, SMS.sm_count, &[(64, 64), (128, 128)]),
            vec![1, 0]
        );
    }

    #[test]
    fn gemm_geometry_and_shared_memory() {
        let p = gemm(4096, 4096, 4096).unwrap();
        let d = p.dims.unwrap();
        assert_eq!(d.grid.0, 32 * 32);
        // Over 48 KiB of dynamic shared memory: the loader opts in (KernelInfo::shared_bytes).
        assert!(d.shared_bytes > 48 * 1024);
        assert_eq!(KERNELS[p.kernel].shared_bytes, d.shared_bytes);
        assert_eq!(gemm(0, 4096, 4096).unwrap().dims, None);
    }

    #[test]
    fn gemm_refuses_bad_calls() {
        let (m, n, k) = (256, 256, 256);
        // a too short for m×k.
        let e = plan::gemm_nn_bf16(
            SMS,
            bf16s("a", m * k - 1),
            bf16s("b", k * n),
            bf16s("d", m * n),
            m,
            n,
            k,
            k,
            n,
            n,
        )
        .unwrap_err();
        assert_eq!(
            e,
            ArgError::TooShort {
                arg: "a",
                needed: (m * k) as u64,
                len: (m * k - 1) as u64
            }
        );
        // A leading dimension below the row length.
        let e = plan::gemm_nn_bf16(
            SMS,
            bf16s("a", m * k),
            bf16s("b", k * n),
            bf16s("d", m * n),
            m,
            n,
            k,
            k - 8,
            n,
            n,
        )
        .unwrap_err();
        assert!(
            matches!(e, ArgError::OutOfRange { what: "lda", .. }),
            "{e:?}"
        );
        // A padded leading dimension needs the longer buffer.
        let e = plan::gemm_nn_bf16(
            SMS,
            bf16s("a", m * k),
            bf16s("b", k * n),
            bf16s("d", m * n),
            m,
            n,
            k,
            k + 8,
            n,
            n,
        )
        .unwrap_err();
        assert!(matches!(e, ArgError::TooShort { arg: "a", .. }), "{e:?}");
        // Any k (edges are masked), but lda must be a whole 16-byte vector of bf16.
        let k = 250;
        assert!(plan::gemm_nn_bf16(
            SMS,
            bf16s("a", m * 256),
            bf16s("b", k * n),
            bf16s("d", m * n),
            m,
            n,
            k,
            256,
            n,
            n
        )
        .is_ok());
        let e = plan::gemm_nn_bf16(
            SMS,
            bf16s("a", m * k),
            bf16s("b", k * n),
            bf16s("d", m * n),
            m,
            n,
            k,
            k,
            n,
            n,
        )
        .unwrap_err();
        assert_eq!(
            e,
            ArgError::NotMultiple {
                what: "lda",
                value: 250,
                of: 8
            }
        );
        // k = 0 is a valid call (d = epilogue(0)); sizes past 2^31 - 1 are not.
        assert!(gemm(64, 64, 0).unwrap().dims.is_some());
        assert!(matches!(
            gemm(1 << 31, 8, 8),
            Err(ArgError::OutOfRange { what: "m", .. })
        ));
        // A misaligned operand.
        let b = Buf::of::<half::bf16>("b", 256 * 256, BASE + 2);
        let e = plan::gemm_nn_bf16(
            SMS,
            bf16s("a", 256 * 256),
            b,
            bf16s("d", 256 * 256),
            256,
            256,
            256,
            256,
            256,
            256,
        )
        .unwrap_err();
        assert!(matches!(e, ArgError::Misaligned { arg: "b", .. }), "{e:?}");
    }

    #[test]
    fn gemm_epilogue_operands_are_checked() {
        let (m, n, k) = (128, 256, 64);
        let fused = |bias: usize, c: usize| {
            plan::gemm_nn_scale_bias_gelu_residual_bf16(
                SMS,
                bf16s("a", m * k),
                bf16s("b", k * n),
                bf16s("bias", bias),
                bf16s("c", c),
                bf16s("d", m * n),
                m,
                n,
                k,
                k,
                n,
                n,
                n,
            )
        };
        assert!(fused(n, m * n).is_ok());
        assert_eq!(
            fused(n - 1, m * n).unwrap_err(),
            ArgError::TooShort {
                arg: "bias",
                needed: n as u64,
                len: n as u64 - 1
            }
        );
        assert!(matches!(
            fused(n, m * n - 1),
            Err(ArgError::TooShort { arg: "c", .. })
        ));
    }

    fn f32s(arg: &'static str, len: usize) -> Buf {
        Buf::of::<f32>(arg, len, BASE)
    }

    #[test]
    fn elementwise_dispatch_follows_the_documented_rule() {
        // Small n: the instance with the fewest elements per block; large n: the most.
        let add = |n| {
            name(plan::vector_add_f32(
                SMS,
                f32s("a", n),
                f32s("b", n),
                f32s("out", n),
                n,
            ))
        };
        assert_eq!(add(10), "vector_add_f32_b256_i4");
        assert_eq!(add(1 << 28), "vector_add_f32_b512_i4");
        // The threshold: two blocks per SM of the larger instance (8192 f32 per block).
        assert_eq!(add(2 * 132 * 8192), "vector_add_f32_b512_i4");
        assert_eq!(add(2 * 132 * 8192 - 1), "vector_add_f32_b256_i4");
        assert_eq!(
            call_checks::pick_elements(0, SMS.sm_count, &[4096, 8192]),
            0
        );
    }

    /// The golden library carries `tuning/nvidia-h200.json` (hand-written entries that
    /// disagree with the rules on purpose): the GPU it names, or one of its compute capability,
    /// follows it near its shapes; any other GPU, or a shape far from every entry, follows the
    /// rules; an entry whose instance refuses the call falls back to the rules.
    #[test]
    fn tuned_dispatch_by_device_and_shape() {
        let named = |name: &str, major, minor| Device {
            name: tilegen_runtime::loader::DeviceName::new(name),
            major,
            minor,
            ..*SMS
        };
        let h200 = named("NVIDIA H200", 9, 0);
        let gh200 = named("NVIDIA GH200 480GB", 9, 0);
        let a100 = named("NVIDIA A100-SXM4-80GB", 8, 0);
        let softmax = |d: &Device, rows: usize, cols: usize| {
            name(plan::softmax_f32(
                d,
                f32s("x", rows * cols),
                f32s("out", rows * cols),
                rows,
                cols,
            ))
        };
        // At and near the measured shape: the table's winner, not the rule's pick.
        assert_eq!(softmax(&h200, 32768, 1000), "softmax_f32_onepass_b512_i2");
        assert_eq!(softmax(&h200, 20000, 800), "softmax_f32_onepass_b512_i2");
        assert_eq!(softmax(&gh200, 32768, 1000), "softmax_f32_onepass_b512_i2");
        // Another compute capability, or a shape more than 4x away: the rules.
        assert_eq!(softmax(&a100, 32768, 1000), "softmax_f32_onepass_b128_i2");
        assert_eq!(softmax(&h200, 4, 1000), "softmax_f32_onepass_b128_i2");
        // The entry at 4000 columns names an instance that takes at most 1024: the rules.
        assert_eq!(softmax(&h200, 32768, 4000), "softmax_f32_onepass_b512_i2");
        let add = |d: &Device, n| {
            name(plan::vector_add_f32(
                d,
                f32s("a", n),
                f32s("b", n),
                f32s("out", n),
                n,
            ))
        };
        assert_eq!(add(&h200, 16384), "vector_add_f32_b512_i4");
        assert_eq!(add(&a100, 16384), "vector_add_f32_b256_i4");
        let gemm = |d: &Device, m: usize, n: usize, k: usize| {
            let bf16 = |arg, len| Buf::of::<half::bf16>(arg, len, BASE);
            name(plan::gemm_nn_bf16(
                d,
                bf16("a", m * k),
                bf16("b", k * n),
                bf16("d", m * n),
                m,
                n,
                k,
                k,
                n,
                n,
            ))
        };
        assert_eq!(
            gemm(&h200, 16, 8192, 8192),
            "gemm_bf16_128x128x32_w32x32_s3_nn"
        );
        assert_eq!(
            gemm(&a100, 16, 8192, 8192),
            "gemm_bf16_64x64x32_w32x32_s3_nn"
        );
        // The table's entries, as the manifest holds them.
        let m = super::blessed_manifest();
        assert_eq!(m.tuning.len(), 1);
        assert_eq!(m.tuning[0].entries.len(), 4);
    }

    #[test]
    fn softmax_picks_the_smallest_one_pass_instance_that_fits() {
        let pick = |cols: usize| {
            name(plan::softmax_f32(
                SMS,
                f32s("x", 4 * cols),
                f32s("out", 4 * cols),
                4,
                cols,
            ))
        };
        assert_eq!(pick(1), "softmax_f32_onepass_b128_i2");
        assert_eq!(pick(1024), "softmax_f32_onepass_b128_i2");
        assert_eq!(pick(1025), "softmax_f32_onepass_b512_i2");
        assert_eq!(pick(4096), "softmax_f32_onepass_b512_i2");
        assert_eq!(pick(4097), "softmax_f32_online_b256_i2");
        assert_eq!(pick(1_000_000), "softmax_f32_online_b256_i2");
    }

    #[test]
    fn each_instance_checks_its_own_limits() {
        // Called directly, an instance refuses rows beyond its own limit even when its
        // family has an instance that would take them.
        let e = plan::softmax_f32_onepass_b128_i2(
            SMS,
            f32s("x", 2 * 2000),
            f32s("out", 2 * 2000),
            2,
            2000,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                ArgError::OutOfRange {
                    what: "cols",
                    max: 1024,
                    ..
                }
            ),
            "{e:?}"
        );
        let h = |arg, len| Buf::of::<half::f16>(arg, len, BASE);
        let e = plan::layernorm_f16_onepass_b256_i2(
            SMS,
            h("x", 2 * 64),
            h("weight", 64),
            h("bias", 64),
            h("out", 1),
            2,
            64,
        )
        .unwrap_err();
        assert!(matches!(e, ArgError::TooShort { arg: "out", .. }), "{e:?}");
        // A family of one instance refuses rows beyond that instance's limit.
        let e = plan::layernorm_f16(
            SMS,
            h("x", 5000),
            h("weight", 5000),
            h("bias", 5000),
            h("out", 5000),
            1,
            5000,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                ArgError::OutOfRange {
                    value: 5000,
                    max: 4096,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn row_and_elementwise_families_are_all_here() {
        let f16s = |arg, len| Buf::of::<half::f16>(arg, len, BASE);
        assert!(plan::layernorm_f16(
            SMS,
            f16s("x", 8 * 512),
            f16s("weight", 512),
            f16s("bias", 512),
            f16s("out", 8 * 512),
            8,
            512
        )
        .is_ok());
        assert!(plan::layernorm_noaffine_f16(
            SMS,
            f16s("x", 8 * 512),
            f16s("out", 8 * 512),
            8,
            512
        )
        .is_ok());
        let f32s = |arg, len| Buf::of::<f32>(arg, len, BASE);
        assert_eq!(
            name(plan::softmax_f32(
                SMS,
                f32s("x", 5000),
                f32s("out", 5000),
                1,
                5000
            )),
            "softmax_f32_online_b256_i2"
        );
    }

    #[test]
    fn gemm_binaries_exist_only_for_sm_90() {
        let k = KERNELS
            .iter()
            .find(|k| k.name.starts_with("gemm_"))
            .unwrap();
        assert_eq!(
            k.binary_for(9, 0, None).map(|b| (b.arch, b.kind)),
            Ok(("sm_90", BinaryKind::Cubin))
        );
        assert_eq!(k.binary_for(8, 6, None).map(|b| b.arch), Err(NoFit::Arch));
    }
}
