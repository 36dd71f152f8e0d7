//! tilegen from a build script, end to end: `build.rs` generates the kernel library of
//! `specs/` into `$OUT_DIR/tilegen`, this file `include!`s its bindings, and `main` runs
//! vector add, fused bias+GELU, softmax, layer norm and attention on the GPU with fresh random data,
//! outputs poisoned with NaN before each launch, and checks every result against a CPU
//! reference in f64. It also shows that bad calls are refused before anything launches.
//!
//! Exit status: 0 when every check passes, 1 when one fails, 2 when the GPU cannot be used.
//! `DEMO_SEED=<n>` replays a run's data.

mod host;

mod kernels {
    include!(concat!(env!("OUT_DIR"), "/tilegen/bindings.rs"));
}

use std::process::ExitCode;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use half::bf16;

use host::{Comparison, Elem, Rng};
use kernels::{ArgError, Error, Kernels};

/// The typed methods the demo calls, per element type.
trait Ops: Elem {
    fn vector_add(
        k: &Kernels,
        s: &CudaStream,
        a: &CudaSlice<Self>,
        b: &CudaSlice<Self>,
        out: &mut CudaSlice<Self>,
        n: usize,
    ) -> Result<(), Error>;
    #[allow(clippy::too_many_arguments)]
    fn bias_gelu(
        k: &Kernels,
        s: &CudaStream,
        x: &CudaSlice<Self>,
        w: &CudaSlice<Self>,
        b: &CudaSlice<Self>,
        bias: &CudaSlice<Self>,
        out: &mut CudaSlice<Self>,
        n: usize,
        cols: usize,
    ) -> Result<(), Error>;
    fn softmax(
        k: &Kernels,
        s: &CudaStream,
        x: &CudaSlice<Self>,
        out: &mut CudaSlice<Self>,
        rows: usize,
        cols: usize,
    ) -> Result<(), Error>;
    #[allow(clippy::too_many_arguments)]
    fn layernorm(
        k: &Kernels,
        s: &CudaStream,
        x: &CudaSlice<Self>,
        weight: &CudaSlice<Self>,
        bias: &CudaSlice<Self>,
        out: &mut CudaSlice<Self>,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<(), Error>;
}

macro_rules! ops {
    ($t:ty, $add:ident, $gelu:ident, $softmax:ident, $layernorm:ident) => {
        impl Ops for $t {
            fn vector_add(
                k: &Kernels,
                s: &CudaStream,
                a: &CudaSlice<$t>,
                b: &CudaSlice<$t>,
                out: &mut CudaSlice<$t>,
                n: usize,
            ) -> Result<(), Error> {
                k.$add(s, a, b, out, n)
            }
            fn bias_gelu(
                k: &Kernels,
                s: &CudaStream,
                x: &CudaSlice<$t>,
                w: &CudaSlice<$t>,
                b: &CudaSlice<$t>,
                bias: &CudaSlice<$t>,
                out: &mut CudaSlice<$t>,
                n: usize,
                cols: usize,
            ) -> Result<(), Error> {
                k.$gelu(s, x, w, b, bias, out, n, cols)
            }
            fn softmax(
                k: &Kernels,
                s: &CudaStream,
                x: &CudaSlice<$t>,
                out: &mut CudaSlice<$t>,
                rows: usize,
                cols: usize,
            ) -> Result<(), Error> {
                k.$softmax(s, x, out, rows, cols)
            }
            fn layernorm(
                k: &Kernels,
                s: &CudaStream,
                x: &CudaSlice<$t>,
                weight: &CudaSlice<$t>,
                bias: &CudaSlice<$t>,
                out: &mut CudaSlice<$t>,
                rows: usize,
                cols: usize,
                eps: f32,
            ) -> Result<(), Error> {
                k.$layernorm(s, x, weight, bias, out, rows, cols, eps)
            }
        }
    };
}

ops!(
    f32,
    vector_add_f32,
    fma_bias_gelu_f32,
    softmax_f32,
    layernorm_f32
);
ops!(
    bf16,
    vector_add_bf16,
    fma_bias_gelu_bf16,
    softmax_bf16,
    layernorm_bf16
);

struct Demo {
    stream: Arc<CudaStream>,
    kernels: Kernels,
    rng: Rng,
    failures: usize,
}

impl Demo {
    fn upload<T: Elem>(&self, host: &[T]) -> Result<CudaSlice<T>, Error> {
        Ok(self.stream.clone_htod(host)?)
    }

    /// `len` NaNs: an output the kernel fails to write shows up as not finite.
    fn poisoned<T: Elem>(&self, len: usize) -> Result<CudaSlice<T>, Error> {
        self.upload(&vec![T::from_f64(f64::NAN); len])
    }

    fn random<T: Elem>(
        &mut self,
        len: usize,
        lo: f64,
        hi: f64,
    ) -> Result<(CudaSlice<T>, Vec<f64>), Error> {
        let (v, f) = host::random::<T>(&mut self.rng, len, lo, hi);
        Ok((self.upload(&v)?, f))
    }

    fn check<T: Elem>(
        &mut self,
        what: &str,
        out: &CudaSlice<T>,
        reference: &[f64],
    ) -> Result<(), Error> {
        let host: Vec<T> = self.stream.clone_dtoh(out)?;
        let c = Comparison::new(&host, reference);
        let ok = c.passes(T::BOUND);
        println!(
            "{}  {what:<40} rel L2 {:.2e}  max |err| {:.2e}  not finite {}  (bound {:.0e})",
            if ok { "ok  " } else { "FAIL" },
            c.rel_l2,
            c.max_abs,
            c.not_finite,
            T::BOUND
        );
        self.failures += usize::from(!ok);
        Ok(())
    }
}

fn vector_add<T: Ops>(d: &mut Demo, n: usize) -> Result<(), Error> {
    let (a, af) = d.random::<T>(n, -1.0, 1.0)?;
    let (b, bf) = d.random::<T>(n, -1.0, 1.0)?;
    let mut out = d.poisoned::<T>(n)?;
    T::vector_add(&d.kernels, &d.stream, &a, &b, &mut out, n)?;
    let reference: Vec<f64> = af.iter().zip(&bf).map(|(x, y)| x + y).collect();
    d.check(&format!("vector_add {} n={n}", T::NAME), &out, &reference)
}

fn bias_gelu<T: Ops>(d: &mut Demo, rows: usize, cols: usize) -> Result<(), Error> {
    let n = rows * cols;
    let (x, xf) = d.random::<T>(n, -3.0, 3.0)?;
    let (w, wf) = d.random::<T>(n, -1.0, 1.0)?;
    let (b, bf) = d.random::<T>(n, -1.0, 1.0)?;
    let (bias, biasf) = d.random::<T>(cols, -1.0, 1.0)?;
    let mut out = d.poisoned::<T>(n)?;
    T::bias_gelu(&d.kernels, &d.stream, &x, &w, &b, &bias, &mut out, n, cols)?;
    let reference: Vec<f64> = (0..n)
        .map(|i| host::gelu(xf[i] * wf[i] + bf[i] + biasf[i % cols]))
        .collect();
    d.check(
        &format!("bias+gelu {} {rows}x{cols}", T::NAME),
        &out,
        &reference,
    )
}

fn softmax<T: Ops>(d: &mut Demo, rows: usize, cols: usize) -> Result<(), Error> {
    let (x, xf) = d.random::<T>(rows * cols, -8.0, 8.0)?;
    let mut out = d.poisoned::<T>(rows * cols)?;
    T::softmax(&d.kernels, &d.stream, &x, &mut out, rows, cols)?;
    d.check(
        &format!("softmax {} {rows}x{cols}", T::NAME),
        &out,
        &host::softmax_rows(&xf, rows, cols),
    )
}

fn layernorm<T: Ops>(d: &mut Demo, rows: usize, cols: usize) -> Result<(), Error> {
    let eps = 1e-5f32;
    // Rows off zero mean, so the mean subtraction matters.
    let (x, xf) = d.random::<T>(rows * cols, -1.0, 3.0)?;
    let (w, wf) = d.random::<T>(cols, 0.5, 1.5)?;
    let (b, bf) = d.random::<T>(cols, -0.5, 0.5)?;
    let mut out = d.poisoned::<T>(rows * cols)?;
    T::layernorm(&d.kernels, &d.stream, &x, &w, &b, &mut out, rows, cols, eps)?;
    let reference = host::layernorm_rows(&xf, &wf, &bf, rows, cols, eps as f64);
    d.check(
        &format!("layernorm {} {rows}x{cols}", T::NAME),
        &out,
        &reference,
    )
}

/// Attention over bf16 [batch, seq, heads, 128] tensors with grouped K/V heads: on an sm_90
/// device the Hopper instance runs (its K/V tensor maps encoded by the bindings for the call).
fn attention(
    d: &mut Demo,
    (batch, heads_q, heads_kv, seq_q, seq_kv): (usize, usize, usize, usize, usize),
    causal: bool,
) -> Result<(), Error> {
    use tilegen_runtime::attention::{AttnShape, AttnStrides};
    let hd = 128;
    let (q, qf) = d.random::<bf16>(batch * seq_q * heads_q * hd, -2.0, 2.0)?;
    let (k, kf) = d.random::<bf16>(batch * seq_kv * heads_kv * hd, -2.0, 2.0)?;
    let (v, vf) = d.random::<bf16>(batch * seq_kv * heads_kv * hd, -1.0, 1.0)?;
    let mut o = d.poisoned::<bf16>(batch * seq_q * heads_q * hd)?;
    let mut lse = d.poisoned::<f32>(batch * heads_q * seq_q)?;
    let shape = AttnShape {
        batch,
        heads_q,
        heads_kv,
        seq_q,
        seq_kv,
    };
    let strides = AttnStrides::dense(&shape, hd);
    d.kernels.attention_d128_bf16(
        &d.stream,
        &q,
        &k,
        &v,
        &mut o,
        Some(&mut lse.slice_mut(..)),
        None,
        None,
        shape,
        &strides,
        None,
        causal,
    )?;
    let dims = (batch, heads_q, heads_kv, seq_q, seq_kv, hd);
    let scale = 1.0 / (hd as f64).sqrt();
    let (o_ref, lse_ref) = host::attention(&qf, &kf, &vf, dims, causal, scale);
    let what = format!(
        "attention bf16 {batch}x{heads_q}/{heads_kv}x{seq_q}/{seq_kv}{}",
        if causal { " causal" } else { "" }
    );
    d.check(&what, &o, &o_ref)?;
    d.check(&format!("{what} lse"), &lse, &lse_ref)
}

/// Bad calls come back as errors, and nothing runs: the poisoned output stays NaN.
fn refusals(d: &mut Demo) -> Result<(), Error> {
    let n = 4096;
    let (a, _) = d.random::<f32>(n, -1.0, 1.0)?;
    let (b, _) = d.random::<f32>(n, -1.0, 1.0)?;
    let mut out = d.poisoned::<f32>(n)?;
    let (k, s) = (&d.kernels, &d.stream);
    // Each call in its own statement: a view borrows `out` until the statement ends.
    let misaligned = k.vector_add_f32(
        s,
        &a.slice(1..),
        &b.slice(1..),
        &mut out.slice_mut(1..),
        n - 1,
    );
    let too_long = k.vector_add_f32(s, &a, &b, &mut out, n + 1);
    let wide_rows = k.layernorm_f32(
        s,
        &a,
        &b.slice(..2048),
        &b.slice(2048..),
        &mut out,
        1,
        4096 + 4,
        1e-5,
    );
    type Attempt = (&'static str, Result<(), Error>, fn(&ArgError) -> bool);
    let attempts: [Attempt; 3] = [
        ("a view one element in (misaligned)", misaligned, |e| {
            matches!(e, ArgError::Misaligned { .. })
        }),
        ("n past the buffers", too_long, |e| {
            matches!(e, ArgError::TooShort { .. })
        }),
        ("layernorm rows longer than any instance", wide_rows, |e| {
            matches!(e, ArgError::OutOfRange { .. })
        }),
    ];
    for (what, result, expected) in attempts {
        let ok = matches!(&result, Err(Error::Arg(e)) if expected(e));
        let how = match &result {
            Ok(()) => "accepted".to_string(),
            Err(e) => e.to_string(),
        };
        println!(
            "{}  refuses {what:<42} {how}",
            if ok { "ok  " } else { "FAIL" }
        );
        d.failures += usize::from(!ok);
    }
    let host: Vec<f32> = d.stream.clone_dtoh(&out)?;
    let untouched = host.iter().all(|v| v.is_nan());
    println!(
        "{}  refused calls launched nothing (output still all NaN)",
        if untouched { "ok  " } else { "FAIL" }
    );
    d.failures += usize::from(!untouched);
    Ok(())
}

fn run(seed: u64) -> Result<usize, Error> {
    // cudarc panics when it cannot open the driver library; ask first.
    // SAFETY: only tries to open the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Driver(cudarc::driver::DriverError(
            cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE,
        )));
    }
    let ctx = CudaContext::new(0)?;
    let kernels = Kernels::load(&ctx)?;
    let dev = kernels.device();
    println!(
        "device 0: {} ({}, {} SMs); seed {seed}",
        // As the loader read it: the name tuning tables are matched by.
        dev.name.as_str(),
        dev.arch(),
        dev.sm_count
    );
    // Load every kernel now, and say which binary each runs.
    kernels.load_all()?;
    for info in Kernels::kernels() {
        if let Some(Ok(b)) = kernels.binary(info.name) {
            println!("      {:<34} {} {:?}", info.name, b.arch, b.kind);
        }
    }
    let mut d = Demo {
        stream: ctx.default_stream(),
        kernels,
        rng: Rng::new(seed),
        failures: 0,
    };

    vector_add::<f32>(&mut d, (1 << 24) + 3)?;
    vector_add::<bf16>(&mut d, (1 << 24) + 3)?;
    bias_gelu::<f32>(&mut d, 4097, 3072)?;
    bias_gelu::<bf16>(&mut d, 4097, 3072)?;
    // One-pass rows, then rows long enough for the online instance.
    softmax::<f32>(&mut d, 4093, 1000)?;
    softmax::<bf16>(&mut d, 4093, 1000)?;
    softmax::<f32>(&mut d, 37, 50_001)?;
    softmax::<bf16>(&mut d, 37, 50_001)?;
    // A vector-path shape and a ragged, scalar-path one.
    layernorm::<f32>(&mut d, 4096, 1024)?;
    layernorm::<bf16>(&mut d, 4096, 1024)?;
    layernorm::<f32>(&mut d, 77, 4095)?;
    layernorm::<bf16>(&mut d, 77, 4095)?;
    // Off the tiles, grouped heads; causal with fewer queries than keys (bottom-right).
    attention(&mut d, (2, 8, 2, 300, 300), false)?;
    attention(&mut d, (2, 8, 2, 200, 333), true)?;
    refusals(&mut d)?;
    Ok(d.failures)
}

fn main() -> ExitCode {
    // A program, not a build script: tilegen's rule of reading variables through
    // `tilegen::env` (for cargo's rerun list) does not apply.
    #[allow(clippy::disallowed_methods)]
    let seed = std::env::var("DEMO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
        });
    match run(seed) {
        Ok(0) => {
            println!("all checks passed");
            ExitCode::SUCCESS
        }
        Ok(n) => {
            eprintln!("{n} checks failed (replay with DEMO_SEED={seed})");
            ExitCode::from(1)
        }
        Err(Error::Driver(e)) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => {
            eprintln!("error: no CUDA driver or GPU here (libcuda.so was not found, or it found no device)");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
