//! The default library's checked-in bindings (`generated/bindings.rs`) compile, refuse bad
//! calls before launching, pick instances by shape and choose binaries per device: all
//! without a GPU, through the pure functions the bindings' methods run first.

mod lib {
    include!("../generated/bindings.rs");
}

use lib::launch_rules::MAX_COLS;
use lib::loader::min_cuda_for_ptx;
use lib::{
    choose_binary, plan, ArgError, BinaryKind, Buf, Candidate, Device, Error, NoFit, Plan, Sm,
    Version, KERNELS,
};

/// An H200 as the loader reads it: the choice among elementwise instances depends on its SM
/// count, the GEMM's on its compute capability too.
const SMS: &Device = &device(9, 0, 132);

const fn device(major: u32, minor: u32, sm_count: u32) -> Device {
    Device {
        major,
        minor,
        sm_count,
        driver: Some(Version::new(13, 0)),
        name: lib::DeviceName::unknown(),
    }
}
const BASE: u64 = 0x7f00_0000_0000;

fn f32s(arg: &'static str, len: usize) -> Buf {
    Buf::of::<f32>(arg, len, BASE)
}

fn bf16s(arg: &'static str, len: usize) -> Buf {
    Buf::of::<half::bf16>(arg, len, BASE)
}

#[test]
fn vector_add_accepts_a_good_call_and_sizes_the_grid() {
    let p = plan::vector_add_f32(
        SMS,
        f32s("a", 1000),
        f32s("b", 1000),
        f32s("out", 1000),
        1000,
    )
    .unwrap();
    assert!(KERNELS[p.kernel].name.starts_with("vector_add_f32_"));
    let dims = p.dims.unwrap();
    assert_eq!(dims.grid.0, 1);
    // Longer buffers than needed are fine.
    assert!(plan::vector_add_f32(
        SMS,
        f32s("a", 2000),
        f32s("b", 1000),
        f32s("out", 1500),
        1000
    )
    .is_ok());
}

#[test]
fn vector_add_refuses_a_short_buffer() {
    let e = plan::vector_add_f32(
        SMS,
        f32s("a", 1000),
        f32s("b", 1000),
        f32s("out", 999),
        1000,
    )
    .unwrap_err();
    assert_eq!(
        e,
        ArgError::TooShort {
            arg: "out",
            needed: 1000,
            len: 999
        }
    );
    assert!(
        e.to_string()
            .contains("`out` holds 999 elements but the call needs 1000"),
        "{e}"
    );
}

#[test]
fn vector_add_refuses_a_misaligned_view() {
    // A view starting one f32 into an allocation: 4-byte aligned, not 16.
    let a = Buf::of::<f32>("a", 1000, BASE + 4);
    let e = plan::vector_add_f32(SMS, a, f32s("b", 1000), f32s("out", 1000), 1000).unwrap_err();
    assert_eq!(
        e,
        ArgError::Misaligned {
            arg: "a",
            address: BASE + 4,
            align: 16
        }
    );
    // Each instance refuses it too, not only the dispatching method.
    type ElementsPlan = fn(&Device, Buf, Buf, Buf, usize) -> Result<Plan, ArgError>;
    for f in [
        plan::vector_add_bf16_b256_i4 as ElementsPlan,
        plan::vector_add_bf16_b512_i4,
    ] {
        let out = Buf::of::<half::bf16>("out", 64, BASE + 2);
        assert!(matches!(
            f(SMS, bf16s("a", 64), bf16s("b", 64), out, 64),
            Err(ArgError::Misaligned { arg: "out", .. })
        ));
    }
}

#[test]
fn an_empty_problem_launches_nothing() {
    let p = plan::vector_add_f32(SMS, f32s("a", 0), f32s("b", 0), f32s("out", 0), 0).unwrap();
    assert_eq!(p.dims, None);
    let p = plan::softmax_f32(SMS, f32s("x", 0), f32s("out", 0), 0, 100).unwrap();
    assert_eq!(p.dims, None);
}

#[test]
fn bias_gelu_checks_the_broadcast_row() {
    let n = 4 * 768;
    let call = |cols: usize, bias_len: usize| {
        plan::fma_bias_gelu_bf16(
            SMS,
            bf16s("x", n),
            bf16s("w", n),
            bf16s("b", n),
            bf16s("bias", bias_len),
            bf16s("out", n),
            n,
            cols,
        )
    };
    assert!(call(768, 768).is_ok());
    assert!(matches!(
        call(0, 768),
        Err(ArgError::OutOfRange { what: "cols", .. })
    ));
    assert!(matches!(
        call(700, 768),
        Err(ArgError::NotMultiple { of: 700, .. })
    ));
    assert_eq!(
        call(768, 767),
        Err(ArgError::TooShort {
            arg: "bias",
            needed: 768,
            len: 767
        })
    );
    // The bias is read element by element: 2-byte alignment is enough.
    let odd_bias = Buf::of::<half::bf16>("bias", 768, BASE + 2);
    assert!(plan::fma_bias_gelu_bf16(
        SMS,
        bf16s("x", n),
        bf16s("w", n),
        bf16s("b", n),
        odd_bias,
        bf16s("out", n),
        n,
        768
    )
    .is_ok());
}

#[test]
fn row_ops_refuse_rows_too_long_or_too_large() {
    // Layer norm has no any-length instance: rows longer than its longest one-pass
    // instance are refused, naming that limit.
    let cols = 1 << 20;
    let e = plan::layernorm_f32(
        SMS,
        f32s("x", cols),
        f32s("weight", cols),
        f32s("bias", cols),
        f32s("out", cols),
        1,
        cols,
    )
    .unwrap_err();
    assert!(
        matches!(e, ArgError::OutOfRange { value: 1048576, max, .. } if max < 1 << 20),
        "{e:?}"
    );
    assert!(
        plan::layernorm_noaffine_f32(SMS, f32s("x", cols), f32s("out", cols), 1, cols).is_err()
    );
    // Softmax streams rows of any length through its online instance.
    let p = plan::softmax_f32(SMS, f32s("x", cols), f32s("out", cols), 1, cols).unwrap();
    assert!(
        KERNELS[p.kernel].name.contains("online"),
        "{}",
        KERNELS[p.kernel].name
    );
    // Even the streaming softmax stops below MAX_COLS.
    let huge = MAX_COLS as usize;
    assert!(matches!(
        plan::softmax_f32(SMS, f32s("x", huge), f32s("out", huge), 1, huge),
        Err(ArgError::OutOfRange { what: "cols", .. })
    ));
    // rows * cols overflowing 64 bits is refused, not wrapped.
    assert!(matches!(
        plan::softmax_f32(
            SMS,
            f32s("x", usize::MAX),
            f32s("out", usize::MAX),
            usize::MAX / 2,
            1000
        ),
        Err(ArgError::OutOfRange { .. })
    ));
    // And a size beyond what the kernel's i64 takes.
    assert!(matches!(
        plan::vector_add_f32(
            SMS,
            f32s("a", usize::MAX),
            f32s("b", usize::MAX),
            f32s("out", usize::MAX),
            usize::MAX
        ),
        Err(ArgError::OutOfRange { what: "n", .. })
    ));
}

#[test]
fn row_ops_check_lengths_and_alignment() {
    let (rows, cols) = (8, 1024);
    let e = plan::rmsnorm_f32(
        SMS,
        f32s("x", rows * cols - 1),
        f32s("weight", cols),
        f32s("out", rows * cols),
        rows,
        cols,
    )
    .unwrap_err();
    assert_eq!(
        e,
        ArgError::TooShort {
            arg: "x",
            needed: 8192,
            len: 8191
        }
    );
    let e = plan::rmsnorm_f32(
        SMS,
        f32s("x", rows * cols),
        f32s("weight", cols - 1),
        f32s("out", rows * cols),
        rows,
        cols,
    )
    .unwrap_err();
    assert_eq!(
        e,
        ArgError::TooShort {
            arg: "weight",
            needed: 1024,
            len: 1023
        }
    );
    // Vector path (cols a multiple of 4 f32): 16-byte alignment needed.
    let x = Buf::of::<f32>("x", rows * cols, BASE + 4);
    assert!(matches!(
        plan::softmax_f32(SMS, x, f32s("out", rows * cols), rows, cols),
        Err(ArgError::Misaligned {
            arg: "x",
            align: 16,
            ..
        })
    ));
    // Scalar path (cols not a multiple of 4): element alignment is enough.
    let cols = 1001;
    let x = Buf::of::<f32>("x", rows * cols, BASE + 4);
    assert!(plan::softmax_f32(SMS, x, f32s("out", rows * cols), rows, cols).is_ok());
    // But never below the element.
    let x = Buf::of::<f32>("x", rows * cols, BASE + 2);
    assert!(matches!(
        plan::softmax_f32(SMS, x, f32s("out", rows * cols), rows, cols),
        Err(ArgError::Misaligned { align: 4, .. })
    ));
}

fn sm(name: &str) -> Sm {
    Sm::parse(name).unwrap()
}

fn cubin(arch: &str) -> Candidate {
    Candidate::cubin(sm(arch))
}

/// PTX of ISA 9.0, as NVRTC 13.0 writes it.
fn ptx(arch: &str) -> Candidate {
    Candidate::ptx(sm(arch), Some(Version::new(9, 0)))
}

const CUDA_13: Option<Version> = Some(Version::new(13, 0));
const CUDA_12_8: Option<Version> = Some(Version::new(12, 8));

#[test]
fn loader_prefers_the_exact_cubin() {
    let avail = [cubin("sm_80"), ptx("sm_80"), cubin("sm_90"), ptx("sm_90")];
    assert_eq!(choose_binary(9, 0, CUDA_13, &avail), Ok(2));
    assert_eq!(choose_binary(8, 0, CUDA_13, &avail), Ok(0));
    // The arch-specific cubin first on its own arch.
    let with_a = [cubin("sm_90"), cubin("sm_90a")];
    assert_eq!(choose_binary(9, 0, CUDA_13, &with_a), Ok(1));
}

#[test]
fn loader_runs_a_lower_minor_cubin_of_the_same_major() {
    let avail = [cubin("sm_80"), ptx("sm_80"), cubin("sm_90a"), ptx("sm_90")];
    // sm_86 and sm_89 run sm_80 cubins rather than JIT-compiling.
    assert_eq!(choose_binary(8, 6, CUDA_13, &avail), Ok(0));
    assert_eq!(choose_binary(8, 9, CUDA_12_8, &avail), Ok(0));
    // An sm_86 cubin does not run on sm_80.
    assert_eq!(
        choose_binary(8, 0, CUDA_13, &[cubin("sm_86")]),
        Err(NoFit::Arch)
    );
    // Arch-specific cubins only on their arch: sm_90a never stands in for a later minor.
    assert_eq!(
        choose_binary(9, 1, CUDA_13, &[cubin("sm_90a")]),
        Err(NoFit::Arch)
    );
}

#[test]
fn loader_falls_back_to_ptx_for_newer_devices() {
    let avail = [
        cubin("sm_80"),
        ptx("sm_80"),
        cubin("sm_90"),
        ptx("sm_90"),
        ptx("sm_90a"),
    ];
    // Blackwell (10.0, 12.0): no cubin of that major; the highest generic PTX below it.
    assert_eq!(choose_binary(10, 0, CUDA_13, &avail), Ok(3));
    assert_eq!(choose_binary(12, 0, CUDA_13, &avail), Ok(3));
    // A later minor of a known major also takes PTX when it lacks a cubin of that major.
    assert_eq!(
        choose_binary(9, 1, CUDA_13, &[cubin("sm_80"), ptx("sm_90")]),
        Ok(1)
    );
}

#[test]
fn loader_refuses_ptx_too_new_for_the_driver() {
    let avail = [cubin("sm_80"), ptx("sm_80"), cubin("sm_90"), ptx("sm_90")];
    // ISA 9.0 needs a CUDA 13.0 driver; a 12.8 one would fail at launch
    // (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), so nothing is chosen and the error says why.
    assert_eq!(
        choose_binary(12, 0, CUDA_12_8, &avail),
        Err(NoFit::Driver {
            needs: Version::new(13, 0)
        })
    );
    // Cubins are unaffected.
    assert_eq!(choose_binary(9, 0, CUDA_12_8, &avail), Ok(2));
}

#[test]
fn loader_reports_when_nothing_fits() {
    let avail = [cubin("sm_80"), ptx("sm_80")];
    assert_eq!(choose_binary(7, 5, CUDA_13, &avail), Err(NoFit::Arch));
    assert_eq!(choose_binary(9, 0, CUDA_13, &[]), Err(NoFit::Arch));
    let e = Error::NoBinary {
        kernel: "softmax_f32_online_b512_i2",
        device: "sm_75".into(),
        driver: CUDA_13,
        available: vec!["sm_80 cubin".into(), "sm_80 PTX (ISA 9.0)".into()],
        needs: NoFit::Arch,
    };
    let msg = e.to_string();
    assert!(
        msg.contains("sm_75")
            && msg.contains("sm_80 cubin, sm_80 PTX (ISA 9.0)")
            && msg.contains("softmax_f32_online_b512_i2"),
        "{msg}"
    );
}

#[test]
fn every_kernel_has_a_binary_for_the_h200() {
    for k in KERNELS {
        // The H200 (sm_90) runs a cubin: no JIT at start-up, whatever the driver.
        for driver in [CUDA_13, CUDA_12_8, None] {
            let b = k
                .binary_for(9, 0, driver)
                .unwrap_or_else(|e| panic!("{} has nothing for sm_90: {e:?}", k.name));
            assert!(
                b.kind == BinaryKind::Cubin && b.arch.starts_with("sm_90"),
                "{}: {b:?}",
                k.name
            );
            assert!(b.bytes.len() > 100, "{}: embedded cubin is empty", k.name);
        }
        // sm_86 runs the sm_80 cubin where the library has one.
        if k.binaries.iter().any(|b| b.arch == "sm_80") {
            let b = k.binary_for(8, 6, CUDA_13).unwrap();
            assert_eq!((b.arch, b.kind), ("sm_80", BinaryKind::Cubin), "{}", k.name);
        }
        // Every PTX records the ISA version of its `.version` line.
        for b in k.binaries.iter().filter(|b| b.kind == BinaryKind::Ptx) {
            let isa = b
                .ptx_isa
                .unwrap_or_else(|| panic!("{}: PTX without ISA", k.name));
            assert_eq!(Version::of_ptx(b.bytes), Some(isa), "{}", k.name);
        }
        // A newer major version gets PTX, when there is generic PTX and the driver takes it.
        if let Ok(b) = k.binary_for(12, 0, None) {
            assert_eq!(b.kind, BinaryKind::Ptx, "{}", k.name);
            let needs = min_cuda_for_ptx(b.ptx_isa.unwrap());
            let old = Version::new(needs.major - 1, 0);
            assert_eq!(
                k.binary_for(12, 0, Some(old)).map(|b| b.arch),
                Err(NoFit::Driver { needs }),
                "{}",
                k.name
            );
        }
        assert_eq!(
            k.binary_for(7, 5, CUDA_13).map(|b| b.arch),
            Err(NoFit::Arch)
        );
    }
}

#[test]
fn kernels_can_be_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<lib::Kernels>();
    send_sync::<Error>();
}

#[test]
fn arch_names_parse() {
    assert_eq!(
        sm("sm_86"),
        Sm {
            major: 8,
            minor: 6,
            arch_specific: false
        }
    );
    assert_eq!(
        sm("sm_90a"),
        Sm {
            major: 9,
            minor: 0,
            arch_specific: true
        }
    );
    assert_eq!(
        sm("sm_120a"),
        Sm {
            major: 12,
            minor: 0,
            arch_specific: true
        }
    );
    assert_eq!(sm("sm_100").to_string(), "sm_100");
    for bad in ["sm_", "sm_9", "compute_90", "sm_9x"] {
        assert!(Sm::parse(bad).is_none(), "{bad}");
    }
}

type Gemm =
    fn(&Device, Buf, Buf, Buf, usize, usize, usize, usize, usize, usize) -> Result<Plan, ArgError>;
type GemmBias = fn(
    &Device,
    Buf,
    Buf,
    Buf,
    Buf,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
) -> Result<Plan, ArgError>;
type GemmResidual = fn(
    &Device,
    Buf,
    Buf,
    Buf,
    Buf,
    Buf,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
) -> Result<Plan, ArgError>;

/// Every 16-bit GEMM method of the library called on a made-up device, each with its
/// layout's leading dimensions (packed) and buffers 16-byte but not 128-byte aligned: the
/// instance each picks, or why none.
fn gemm_plans(
    d: &Device,
    m: usize,
    n: usize,
    k: usize,
) -> Vec<(&'static str, Result<Plan, ArgError>)> {
    let at = 0x7f00_0000_0010;
    let b = |arg, len| Buf::of::<half::bf16>(arg, len, at);
    let f32s = |arg, len| Buf::of::<f32>(arg, len, at);
    // (layout, A's and B's leading dimensions)
    let ld = |layout: &str| match layout {
        "nn" => (k, n),
        "nt" => (k, k),
        "tn" => (m, n),
        _ => (m, k),
    };
    let plain: [(&str, &str, Gemm); 10] = [
        ("gemm_nn_bf16", "nn", plan::gemm_nn_bf16),
        ("gemm_nt_bf16", "nt", plan::gemm_nt_bf16),
        ("gemm_tn_bf16", "tn", plan::gemm_tn_bf16),
        ("gemm_tt_bf16", "tt", plan::gemm_tt_bf16),
        ("gemm_nn_f16", "nn", plan::gemm_nn_f16),
        ("gemm_nt_f16", "nt", plan::gemm_nt_f16),
        ("gemm_nn_bf16_f32", "nn", plan::gemm_nn_bf16_f32),
        ("gemm_nt_bf16_f32", "nt", plan::gemm_nt_bf16_f32),
        ("gemm_nn_f16_f32", "nn", plan::gemm_nn_f16_f32),
        ("gemm_nt_f16_f32", "nt", plan::gemm_nt_f16_f32),
    ];
    let bias: [(&str, &str, GemmBias); 12] = [
        ("gemm_nn_bias_bf16", "nn", plan::gemm_nn_bias_bf16),
        ("gemm_nt_bias_bf16", "nt", plan::gemm_nt_bias_bf16),
        ("gemm_nn_bias_f16", "nn", plan::gemm_nn_bias_f16),
        ("gemm_nt_bias_f16", "nt", plan::gemm_nt_bias_f16),
        ("gemm_nn_bias_gelu_bf16", "nn", plan::gemm_nn_bias_gelu_bf16),
        ("gemm_nt_bias_gelu_bf16", "nt", plan::gemm_nt_bias_gelu_bf16),
        ("gemm_nn_bias_relu_bf16", "nn", plan::gemm_nn_bias_relu_bf16),
        ("gemm_nt_bias_relu_bf16", "nt", plan::gemm_nt_bias_relu_bf16),
        ("gemm_nn_bias_gelu_f16", "nn", plan::gemm_nn_bias_gelu_f16),
        ("gemm_nt_bias_gelu_f16", "nt", plan::gemm_nt_bias_gelu_f16),
        ("gemm_nn_bias_relu_f16", "nn", plan::gemm_nn_bias_relu_f16),
        ("gemm_nt_bias_relu_f16", "nt", plan::gemm_nt_bias_relu_f16),
    ];
    let mut out = Vec::new();
    for (name, layout, f) in plain {
        let (lda, ldb) = ld(layout);
        let dbuf = if name.ends_with("_f32") {
            f32s("d", m * n)
        } else {
            b("d", m * n)
        };
        out.push((
            name,
            f(d, b("a", m * k), b("b", k * n), dbuf, m, n, k, lda, ldb, n),
        ));
    }
    for (name, layout, f) in bias {
        let (lda, ldb) = ld(layout);
        let p = f(
            d,
            b("a", m * k),
            b("b", k * n),
            b("bias", n),
            b("d", m * n),
            m,
            n,
            k,
            lda,
            ldb,
            n,
        );
        out.push((name, p));
    }
    let residual: [(&str, &str, GemmResidual); 4] = [
        (
            "gemm_nn_scale_bias_residual_bf16",
            "nn",
            plan::gemm_nn_scale_bias_residual_bf16,
        ),
        (
            "gemm_nt_scale_bias_residual_bf16",
            "nt",
            plan::gemm_nt_scale_bias_residual_bf16,
        ),
        (
            "gemm_nn_scale_bias_residual_f16",
            "nn",
            plan::gemm_nn_scale_bias_residual_f16,
        ),
        (
            "gemm_nt_scale_bias_residual_f16",
            "nt",
            plan::gemm_nt_scale_bias_residual_f16,
        ),
    ];
    for (name, layout, f) in residual {
        let (lda, ldb) = ld(layout);
        let p = f(
            d,
            b("a", m * k),
            b("b", k * n),
            b("bias", n),
            b("c", m * n),
            b("d", m * n),
            m,
            n,
            k,
            lda,
            ldb,
            n,
            n,
        );
        out.push((name, p));
    }
    out
}

fn picked(p: &Result<Plan, ArgError>) -> &'static str {
    KERNELS[p.as_ref().unwrap().kernel].name
}

fn default_manifest() -> &'static tilegen::Manifest {
    static MANIFEST: std::sync::OnceLock<tilegen::Manifest> = std::sync::OnceLock::new();
    MANIFEST.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/generated/manifest.json");
        tilegen::Manifest::from_bytes(&std::fs::read(path).unwrap()).unwrap()
    })
}

/// The default library's instances of `method`, in the bindings' order.
fn method_members(method: &str) -> Vec<&'static tilegen::InstanceEntry> {
    default_manifest()
        .instances
        .iter()
        .filter(|i| tilegen::__internal::bindings::method_name(i) == method)
        .collect()
}

/// What the library's tuning tables (`tuning/` baked into `generated/`) pick for `method` at
/// `shape` on `d`, computed from the manifest as the bindings' tables were; None where no
/// entry applies and the fixed rules decide.
fn tuned(d: &Device, method: &str, shape: &[u64]) -> Option<String> {
    let m = default_manifest();
    let members = method_members(method);
    let runs: Vec<bool> = members
        .iter()
        .map(|i| {
            let maps = !i.tensor_maps.is_empty();
            KERNELS
                .iter()
                .find(|k| k.name == i.name)
                .is_some_and(|k| k.runs_on(d, maps))
        })
        .collect();
    tilegen::__internal::tuning::table_pick(&m.tuning, method, &members, &runs, d, shape)
        .map(|i| members[i].name.clone())
}

/// `gemm_plans` calls every 16-bit GEMM method of the default library, so that a method added
/// to the specs is covered by the dispatch tests below or fails here.
#[test]
fn gemm_plans_cover_every_16_bit_gemm_method() {
    let listed: std::collections::BTreeSet<String> = gemm_plans(SMS, 128, 128, 128)
        .into_iter()
        .map(|(name, _)| name.to_string())
        .collect();
    let in_library: std::collections::BTreeSet<String> = default_manifest()
        .instances
        .iter()
        .map(tilegen::__internal::bindings::method_name)
        .filter(|m| m.starts_with("gemm_") && m.contains("f16"))
        .collect();
    assert_eq!(listed, in_library);
}

/// On sm_90 every 16-bit GEMM method picks what the H200 tuning table predicts fastest from
/// its entries near the shape (`table_pick`), and where no entry applies its wgmma (tensor-map) instance (for at most 16 rows a
/// swap-AB one, where the method has one, even beside a 16-row mma.sync tile); it falls back to mma.sync where a tensor map
/// cannot describe the call (k = 0) or the driver cannot encode one, tuned or not; on sm_80,
/// sm_86 and sm_89 (no table for them) the wgmma instances (sm_90a binaries only) are never
/// chosen and every method still plans an instance that runs there.
#[test]
fn gemm_dispatch_follows_the_device() {
    let wgmma = |name: &str| name.contains("_wgmma");
    for (m, n, k) in [
        (4096, 4096, 4096),
        (16, 4096, 4096),
        (128, 11008, 4096),
        (136, 264, 72),
        (16, 256, 256), // no table entry near: the fixed rules decide
    ] {
        for (method, p) in gemm_plans(SMS, m, n, k) {
            let shape = [m as u64, n as u64, k as u64];
            if let Some(t) = tuned(SMS, method, &shape) {
                assert_eq!(picked(&p), t, "{method} {m}x{n}x{k}: the table's pick");
            } else {
                assert!(
                    wgmma(picked(&p)),
                    "{method} {m}x{n}x{k} on sm_90: {}",
                    picked(&p)
                );
                // A 16-row output takes a swap-AB tile (16 rows) where the method has one.
                let swap_ab = |name: &str| wgmma(name) && name.contains("_16x");
                if m <= 16 && method_members(method).iter().any(|i| swap_ab(&i.name)) {
                    assert!(swap_ab(picked(&p)), "{method} {m}x{n}x{k}: {}", picked(&p));
                }
            }
        }
        for d in [device(8, 0, 108), device(8, 6, 84), device(8, 9, 128)] {
            for (method, p) in gemm_plans(&d, m, n, k) {
                let p = p.unwrap_or_else(|e| panic!("{method} {m}x{n}x{k} on {d:?}: {e}"));
                let name = KERNELS[p.kernel].name;
                assert!(!wgmma(name), "{method}: {name} on {d:?}");
                assert!(
                    KERNELS[p.kernel].runs_on(&d, false),
                    "{method}: {name} on {d:?}"
                );
            }
        }
        let old = Device {
            driver: Some(Version::new(11, 8)),
            ..*SMS
        };
        for (method, p) in gemm_plans(&old, m, n, k) {
            assert!(
                !wgmma(picked(&p)),
                "{method} {m}x{n}x{k} with an 11.8 driver"
            );
        }
    }
    for (method, p) in gemm_plans(SMS, 136, 264, 0) {
        assert!(
            !wgmma(picked(&p)),
            "{method}: k = 0 needs an mma.sync instance"
        );
        assert!(p.unwrap().dims.is_some());
    }
    // n not in whole 16-byte vectors of output (ld = 264 > n): the wgmma stores would write
    // whole chunks past it, so an mma.sync instance runs (its stores are masked).
    let at = 0x7f00_0000_0010;
    let b = |arg, len| Buf::of::<half::bf16>(arg, len, at);
    let p = plan::gemm_nn_bf16(
        SMS,
        b("a", 129 * 72),
        b("b", 72 * 264),
        b("d", 129 * 264),
        129,
        263,
        72,
        72,
        264,
        264,
    );
    assert!(!wgmma(picked(&p)), "{}", picked(&p));
    // A persistent grid: one block per SM at most, whatever the SM count.
    for sms in [132, 114] {
        let (_, p) = gemm_plans(&device(9, 0, sms), 8192, 8192, 8192).remove(0);
        assert_eq!(p.unwrap().dims.unwrap().grid, (sms, 1, 1));
    }
}

/// On sm_90 the table decides only near its entries; between them the fixed rules' cost model
/// does (`tilegen_runtime::tuning::NEAR_DISTANCE`). gemm_nn_bf16 has an entry at
/// 128×4096×4096 and none within 0.25 of 160×4096×4096, where the model's cheapest tile is
/// 64×128 (96 tiles, one round).
#[test]
fn between_entries_the_rules_cost_model_decides() {
    let pick = |m: usize| {
        let plans = gemm_plans(SMS, m, 4096, 4096);
        let (_, p) = plans
            .iter()
            .find(|(name, _)| *name == "gemm_nn_bf16")
            .unwrap();
        picked(p).to_string()
    };
    let at_entry = tuned(SMS, "gemm_nn_bf16", &[128, 4096, 4096]).unwrap();
    assert_eq!(pick(128), at_entry);
    assert_eq!(tuned(SMS, "gemm_nn_bf16", &[160, 4096, 4096]), None);
    assert_eq!(pick(160), "gemm_bf16_64x128x64_s8_nn_wgmma");
    // Where no tensor-map member runs (a driver that cannot encode maps), the table keeps
    // its whole reach: its pick at 160 rows is predicted from the 128-row entry.
    let old = Device {
        driver: Some(Version::new(11, 8)),
        ..*SMS
    };
    let old_pick = tuned(&old, "gemm_nn_bf16", &[160, 4096, 4096]);
    assert!(old_pick.is_some());
}
