//! `tilegen verify` and `tilegen bench` for attention instances. Their calls do not fit
//! [`super::problem::Problem`]: per-tensor strides, views of one fused QKV buffer, packed
//! variable-length batches and optional outputs. Each case runs through the runtime's checks
//! (`tilegen_runtime::attention::check`, what the bindings run) for its grid, against a CPU
//! f64 reference (every row, or a sample of rows per head on large shapes), with outputs
//! NaN-poisoned inside wider buffers (the gaps must stay NaN), every buffer between guard
//! zones and inputs checked unchanged.

use std::time::Instant;

use rand::Rng;
use rayon::prelude::*;
use tilegen_runtime::attention::{self as rt, AttnShape, AttnStrides, TensorStrides};
use tilegen_runtime::call_checks::Buf;

use super::{data, launch, ArgValue, Gpu};
use crate::error::{Error, Result};
use crate::manifest::InstanceEntry;
use crate::spec::model::DType;

/// How a case stores q, k and v.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Three dense [batch, seq, heads, head_dim] tensors.
    Separate,
    /// Views of one [batch, seq, heads_q + 2·heads_kv, head_dim] buffer (a fused projection).
    Fused,
    /// Packed [total, heads, head_dim] tensors with `cu_seqlens`.
    Varlen,
}

/// One verify case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttnCase {
    pub name: String,
    pub layout: Layout,
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    /// The longest sequences (every one, unless varlen).
    pub seq_q: usize,
    pub seq_kv: usize,
    /// Varlen: each sequence's length.
    pub lens_q: Vec<usize>,
    pub lens_kv: Vec<usize>,
    pub lse: bool,
    /// Bytes past a 256-byte boundary where every buffer starts (16: aligned for the kernel's
    /// vectors, not for anything wider).
    pub offset: usize,
    /// Query rows checked per (batch, head); None: all.
    pub sample_rows: Option<usize>,
}

impl AttnCase {
    fn dense(name: &str, batch: usize, sq: usize, skv: usize, hq: usize, hkv: usize) -> AttnCase {
        AttnCase {
            name: name.into(),
            layout: Layout::Separate,
            batch,
            heads_q: hq,
            heads_kv: hkv,
            seq_q: sq,
            seq_kv: skv,
            lens_q: vec![],
            lens_kv: vec![],
            lse: true,
            offset: 0,
            sample_rows: None,
        }
    }
    fn lens(&self) -> (Vec<usize>, Vec<usize>) {
        match self.layout {
            Layout::Varlen => (self.lens_q.clone(), self.lens_kv.clone()),
            _ => (vec![self.seq_q; self.batch], vec![self.seq_kv; self.batch]),
        }
    }
    /// Output elements (o), for `--max-elements`.
    pub fn output_len(&self, head_dim: usize) -> u64 {
        let (lq, _) = self.lens();
        (lq.iter().sum::<usize>() * self.heads_q * head_dim) as u64
    }
}

impl std::fmt::Display for AttnCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layout {
            Layout::Varlen => write!(
                f,
                "{} h{}/{} q{:?} kv{:?}",
                self.name, self.heads_q, self.heads_kv, self.lens_q, self.lens_kv
            ),
            _ => write!(
                f,
                "{} b{} h{}/{} {}x{}",
                self.name, self.batch, self.heads_q, self.heads_kv, self.seq_q, self.seq_kv
            ),
        }
    }
}

/// The verify cases of an instance with query tiles of `tile_q` rows and key tiles of
/// `tile_kv`: lengths of 1, 17, the tiles ± 1, primes both ways (causal with seq_q < seq_kv
/// and seq_q > seq_kv), rows that see no key, GQA 4 and 8, MQA, views of a fused QKV buffer,
/// a long K/V, varlen with empty query and key sequences, one case without LSE, and a large
/// shape checked on a sample of rows.
pub fn cases(tile_q: usize, tile_kv: usize) -> Vec<AttnCase> {
    let d = AttnCase::dense;
    let mut out = vec![
        d("s1", 1, 1, 1, 2, 2),
        d("s17", 2, 17, 17, 2, 1),
        d("tq-1/tkv+1", 1, tile_q - 1, tile_kv + 1, 2, 2),
        d("tq+1/tkv-1", 1, tile_q + 1, tile_kv - 1, 2, 2),
        d("primes q<kv", 1, 131, 257, 2, 2),
        AttnCase {
            offset: 16,
            ..d("primes q>kv", 2, 257, 131, 2, 2)
        },
        d("q>>kv", 1, 300, 7, 2, 2),
        d("gqa4", 2, 100, 300, 8, 2),
        d("gqa8", 1, 77, 93, 16, 2),
        d("mqa", 1, 64, 200, 4, 1),
        AttnCase {
            layout: Layout::Fused,
            ..d("fused qkv", 2, 190, 190, 4, 2)
        },
        d("mid", 1, 1000, 1000, 4, 4),
        d("long kv", 1, 333, 2049, 2, 1),
        AttnCase {
            layout: Layout::Varlen,
            lens_q: vec![5, 0, 130, 1, 64, 257],
            lens_kv: vec![7, 3, 130, 200, 0, 129],
            batch: 6,
            seq_q: 257,
            seq_kv: 200,
            ..d("varlen", 6, 0, 0, 4, 2)
        },
        AttnCase {
            lse: false,
            ..d("no lse", 2, 257, 131, 2, 2)
        },
        AttnCase {
            sample_rows: Some(24),
            ..d("large, sampled rows", 2, 4096, 4096, 8, 2)
        },
    ];
    out.retain(|c| c.seq_q > 0 || c.layout == Layout::Varlen);
    out
}

/// The outcome of one case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttnResult {
    pub instance: String,
    pub case: String,
    pub passed: bool,
    pub max_abs: f64,
    pub rel_l2: f64,
    pub lse_err: f64,
    pub rows_checked: usize,
    pub error: Option<String>,
    pub millis: u64,
}

/// Output bounds per dtype (f32 accumulation; P is rounded to the dtype before P·V, as in
/// FlashAttention-2): max |err| and ‖err‖/‖ref‖; the LSE's max |err|.
fn bounds(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::Bf16 => (2.5e-2, 1.2e-2),
        _ => (4e-3, 2.5e-3),
    }
}
const LSE_BOUND: f64 = 2e-3;

const GUARD: u8 = 0xA5;
const POISON: u8 = 0xFF;
const GUARD_BYTES: usize = 64 << 10;
/// Extra elements of each output row (the gap that must stay NaN).
const O_PAD: usize = 8;

/// A device allocation: guard, `offset` bytes, the buffer, guard.
struct Guarded {
    whole: cudarc::driver::CudaSlice<u8>,
    head: usize,
    len: usize,
    before: Vec<u8>,
    input: bool,
}

impl Guarded {
    fn new(gpu: &Gpu, data: Option<&[u8]>, len: usize, offset: usize) -> Result<Guarded> {
        let head = GUARD_BYTES + offset;
        let mut bytes = vec![GUARD; head];
        match data {
            Some(d) => bytes.extend_from_slice(d),
            None => bytes.resize(head + len, POISON),
        }
        bytes.resize(head + len + GUARD_BYTES, GUARD);
        Ok(Guarded {
            whole: gpu.upload(&bytes)?,
            head,
            len,
            before: bytes,
            input: data.is_some(),
        })
    }
    fn address(&self, gpu: &Gpu) -> u64 {
        use cudarc::driver::DevicePtr;
        self.whole.device_ptr(&gpu.stream).0 + self.head as u64
    }
    fn view(&self, from: usize, to: usize) -> ArgValue<'_> {
        ArgValue::View(self.whole.slice(self.head + from..self.head + to.max(from)))
    }
    /// The buffer's bytes after the run, or what was written where it must not be.
    fn check(&self, gpu: &Gpu, name: &str) -> std::result::Result<Vec<u8>, String> {
        let after = gpu.download(&self.whole).map_err(|e| e.to_string())?;
        if self.input {
            if let Some(i) = self.before.iter().zip(&after).position(|(a, b)| a != b) {
                return Err(format!(
                    "input `{name}` changed at byte {}",
                    i as i64 - self.head as i64
                ));
            }
        }
        if let Some(i) = after[..self.head].iter().rposition(|&b| b != GUARD) {
            return Err(format!(
                "`{name}` written {} bytes before its start",
                self.head - i
            ));
        }
        let tail = &after[self.head + self.len..];
        if let Some(i) = tail.iter().position(|&b| b != GUARD) {
            return Err(format!("`{name}` written {i} bytes past its end"));
        }
        Ok(after[self.head..self.head + self.len].to_vec())
    }
}

/// Where a tensor's elements sit in its buffer, in elements.
#[derive(Debug, Clone, Copy)]
struct Place {
    base: usize,
    st: TensorStrides,
}

impl Place {
    fn at(&self, b: usize, s: usize, h: usize) -> usize {
        self.base + b * self.st.batch + s * self.st.seq + h * self.st.head
    }
}

/// A case laid out: buffer sizes and each tensor's place, in elements.
struct Layout2 {
    /// Element counts of the q, k, v buffers (one buffer for all three when fused).
    q_len: usize,
    k_len: usize,
    v_len: usize,
    o_len: usize,
    lse_len: usize,
    q: Place,
    k: Place,
    v: Place,
    o: Place,
    lse_batch: usize,
    lse_head: usize,
    /// Packed row where each sequence starts (0 for dense tensors).
    start_q: Vec<usize>,
    start_kv: Vec<usize>,
}

fn layout(c: &AttnCase, d: usize) -> Layout2 {
    let (lq, lkv) = c.lens();
    let (hq, hkv) = (c.heads_q, c.heads_kv);
    let dense = |seq: usize, heads: usize, width: usize| TensorStrides {
        batch: seq * heads * width,
        seq: heads * width,
        head: width,
    };
    let cum = |l: &[usize]| {
        let mut s = vec![0];
        for x in l {
            s.push(s.last().unwrap() + x);
        }
        s
    };
    match c.layout {
        Layout::Separate | Layout::Fused => {
            let (b, sq, skv) = (c.batch, c.seq_q, c.seq_kv);
            let o = Place {
                base: 0,
                st: dense(sq, hq, d + O_PAD),
            };
            let (q, k, v, q_len, k_len, v_len) = if c.layout == Layout::Fused {
                // One projection output [b, s, hq + 2 hkv, d]; seq_q == seq_kv.
                let st = dense(sq, hq + 2 * hkv, d);
                let all = b * sq * (hq + 2 * hkv) * d;
                (
                    Place { base: 0, st },
                    Place { base: hq * d, st },
                    Place {
                        base: (hq + hkv) * d,
                        st,
                    },
                    all,
                    0,
                    0,
                )
            } else {
                (
                    Place {
                        base: 0,
                        st: dense(sq, hq, d),
                    },
                    Place {
                        base: 0,
                        st: dense(skv, hkv, d),
                    },
                    Place {
                        base: 0,
                        st: dense(skv, hkv, d),
                    },
                    b * sq * hq * d,
                    b * skv * hkv * d,
                    b * skv * hkv * d,
                )
            };
            Layout2 {
                q_len,
                k_len,
                v_len,
                o_len: b * sq * hq * (d + O_PAD),
                lse_len: b * hq * sq,
                q,
                k,
                v,
                o,
                lse_batch: hq * sq,
                lse_head: sq,
                start_q: vec![0; b],
                start_kv: vec![0; b],
            }
        }
        Layout::Varlen => {
            let (cq, ckv) = (cum(&lq), cum(&lkv));
            let (tq, tkv) = (*cq.last().unwrap(), *ckv.last().unwrap());
            let packed = |heads: usize, width: usize| TensorStrides {
                batch: 0,
                seq: heads * width,
                head: width,
            };
            Layout2 {
                q_len: tq * hq * d,
                k_len: tkv * hkv * d,
                v_len: tkv * hkv * d,
                o_len: tq * hq * (d + O_PAD),
                lse_len: hq * tq,
                q: Place {
                    base: 0,
                    st: packed(hq, d),
                },
                k: Place {
                    base: 0,
                    st: packed(hkv, d),
                },
                v: Place {
                    base: 0,
                    st: packed(hkv, d),
                },
                o: Place {
                    base: 0,
                    st: packed(hq, d + O_PAD),
                },
                lse_batch: 0,
                lse_head: tq,
                start_q: cq[..c.batch].to_vec(),
                start_kv: ckv[..c.batch].to_vec(),
            }
        }
    }
}

/// The query rows checked for sequence `b` of length `sq`: all, or a sample that keeps the
/// first and last rows and both sides of a tile edge.
fn rows_checked(sq: usize, sample: Option<usize>, tile_q: usize, rng: &mut impl Rng) -> Vec<usize> {
    match sample {
        None => (0..sq).collect(),
        Some(n) if n < sq => {
            let mut r: Vec<usize> = vec![0, sq - 1, tile_q.min(sq - 1), (tile_q - 1).min(sq - 1)];
            while r.len() < n {
                r.push(rng.random_range(0..sq));
            }
            r.sort_unstable();
            r.dedup();
            r
        }
        Some(_) => (0..sq).collect(),
    }
}

/// One row of the f64 reference: o (head_dim values) and the LSE. A row that sees no key has
/// o = 0 and LSE = -inf.
#[allow(clippy::too_many_arguments)]
fn reference_row(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    qrow: usize,
    krows: &dyn Fn(usize) -> usize,
    vrows: &dyn Fn(usize) -> usize,
    visible: usize,
    d: usize,
    scale: f64,
) -> (Vec<f64>, f64) {
    if visible == 0 {
        return (vec![0.0; d], f64::NEG_INFINITY);
    }
    let qv = &q[qrow..qrow + d];
    let s: Vec<f64> = (0..visible)
        .map(|j| {
            let kv = &k[krows(j)..krows(j) + d];
            scale * qv.iter().zip(kv).map(|(a, b)| a * b).sum::<f64>()
        })
        .collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mut o = vec![0.0; d];
    let mut l = 0.0;
    for (j, sj) in s.iter().enumerate() {
        let e = (sj - m).exp();
        l += e;
        let vv = &v[vrows(j)..vrows(j) + d];
        for (x, y) in o.iter_mut().zip(vv) {
            *x += e * y;
        }
    }
    o.iter_mut().for_each(|x| *x /= l);
    (o, m + l.ln())
}

/// The instance's attention parameters: (head_dim, causal, tile_q, tile_kv).
fn params_of(inst: &InstanceEntry) -> (usize, bool, usize, usize) {
    let p = &inst.params;
    (
        p.head_dim.unwrap_or(128) as usize,
        p.causal == Some(true),
        p.tile_q.unwrap_or(64) as usize,
        p.tile_kv.unwrap_or(64) as usize,
    )
}

/// The runtime's view of the instance.
fn kernel_of(inst: &InstanceEntry) -> rt::AttnKernel {
    let (d, causal, tile_q, _) = params_of(inst);
    rt::AttnKernel {
        head_dim: d as u32,
        causal,
        tile_q: inst.launch.grid.query_tile().unwrap_or(tile_q as u32),
        threads: inst.launch.threads,
        shared_bytes: inst.launch.shared_bytes,
        grid: crate::ops::attention::runtime_grid(&inst.launch.grid),
    }
}

/// Refuses a manifest entry whose arguments are not attention's (the launch below passes
/// them by position).
fn check_signature(inst: &InstanceEntry) -> Result<()> {
    let want = crate::ops::attention::signature(&crate::manifest::spec_instance(inst));
    if inst.args != want {
        return Err(Error::Gpu(format!(
            "{}: its arguments are not attention's",
            inst.name
        )));
    }
    Ok(())
}

/// Every verify case of the instance (those with at most `max_elements` output elements).
pub fn verify_cases(inst: &InstanceEntry, max_elements: Option<u64>) -> Vec<AttnCase> {
    let (d, _, tq, tkv) = params_of(inst);
    cases(tq, tkv)
        .into_iter()
        .filter(|c| max_elements.is_none_or(|m| c.output_len(d) <= m))
        .collect()
}

/// Runs one case; errors become failed results.
pub fn run_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    case: &AttnCase,
    rng: &mut impl Rng,
) -> AttnResult {
    let start = Instant::now();
    gpu.doing(format!("verifying {} on case {case}", inst.name));
    let mut r = AttnResult {
        instance: inst.name.clone(),
        case: case.to_string(),
        passed: false,
        max_abs: f64::NAN,
        rel_l2: f64::NAN,
        lse_err: f64::NAN,
        rows_checked: 0,
        error: None,
        millis: 0,
    };
    match try_case(gpu, inst, case, rng) {
        Ok((max_abs, rel, lse_err, rows, problems)) => {
            r.max_abs = max_abs;
            r.rel_l2 = rel;
            r.lse_err = lse_err;
            r.rows_checked = rows;
            r.passed = problems.is_empty();
            if !problems.is_empty() {
                r.error = Some(problems.join("; "));
            }
        }
        Err(e) => r.error = Some(e),
    }
    r.millis = start.elapsed().as_millis() as u64;
    r
}

type Outcome = (f64, f64, f64, usize, Vec<String>);

/// The four sizes and 14 strides of the signature, as the runtime lists them.
fn size_args<'a>(shape: &AttnShape, strides: &AttnStrides) -> impl Iterator<Item = ArgValue<'a>> {
    rt::arg_values([0; 7], shape, strides)
        .into_iter()
        .skip(7)
        .take(19)
        .map(|x| ArgValue::I64(x as i64))
}

fn try_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    c: &AttnCase,
    rng: &mut impl Rng,
) -> std::result::Result<Outcome, String> {
    check_signature(inst).map_err(|e| e.to_string())?;
    let f = gpu.function(inst).map_err(|e| e.to_string())?;
    let (d, causal, tile_q, _) = params_of(inst);
    let dtype = inst.dtype;
    let es = dtype.size() as usize;
    let lay = layout(c, d);
    let (lq, lkv) = c.lens();
    let mut values = |n: usize| {
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.73f32..1.73)).collect();
        data::from_values(dtype, &v)
    };
    let tq = values(lay.q_len);
    let tk = values(lay.k_len);
    let tv = values(lay.v_len);
    let err = |e: Error| e.to_string();
    let gq = Guarded::new(gpu, Some(&tq.bytes), tq.bytes.len(), c.offset).map_err(err)?;
    let gk = Guarded::new(gpu, Some(&tk.bytes), tk.bytes.len(), c.offset).map_err(err)?;
    let gv = Guarded::new(gpu, Some(&tv.bytes), tv.bytes.len(), c.offset).map_err(err)?;
    let go = Guarded::new(gpu, None, lay.o_len * es, c.offset).map_err(err)?;
    let gl = Guarded::new(gpu, None, lay.lse_len * 4, c.offset).map_err(err)?;
    let cu = |starts: &[usize], lens: &[usize]| -> Vec<i32> {
        let mut v: Vec<i32> = starts.iter().map(|&s| s as i32).collect();
        v.push((starts.last().copied().unwrap_or(0) + lens.last().copied().unwrap_or(0)) as i32);
        v
    };
    let varlen = c.layout == Layout::Varlen;
    let (cu_q, cu_kv) = (cu(&lay.start_q, &lq), cu(&lay.start_kv, &lkv));
    let i32_bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let gcq = Guarded::new(gpu, Some(&i32_bytes(&cu_q)), cu_q.len() * 4, 0).map_err(err)?;
    let gckv = Guarded::new(gpu, Some(&i32_bytes(&cu_kv)), cu_kv.len() * 4, 0).map_err(err)?;

    // Fused: q, k and v are views of the q buffer.
    let (kbuf, vbuf) = match c.layout {
        Layout::Fused => (&gq, &gq),
        _ => (&gk, &gv),
    };
    let (k_elems, v_elems) = match c.layout {
        Layout::Fused => (lay.q_len - lay.k.base, lay.q_len - lay.v.base),
        _ => (lay.k_len, lay.v_len),
    };
    let shape = AttnShape {
        batch: c.batch,
        heads_q: c.heads_q,
        heads_kv: c.heads_kv,
        seq_q: c.seq_q,
        seq_kv: c.seq_kv,
    };
    let strides = AttnStrides {
        q: lay.q.st,
        k: lay.k.st,
        v: lay.v.st,
        o: lay.o.st,
        lse_batch: lay.lse_batch,
        lse_head: lay.lse_head,
    };
    let scale = rt::default_scale(d as u32);
    let buf = |arg: &'static str, g: &Guarded, base: usize, elems: usize, eb: usize| Buf {
        arg,
        len: elems,
        elem_bytes: eb as u64,
        address: g.address(gpu) + (base * eb) as u64,
    };
    let dims = rt::check(
        &kernel_of(inst),
        gpu.sm_count,
        &shape,
        &strides,
        buf("q", &gq, 0, lay.q_len, es),
        buf("k", kbuf, lay.k.base, k_elems, es),
        buf("v", vbuf, lay.v.base, v_elems, es),
        buf("o", &go, 0, lay.o_len, es),
        c.lse.then(|| buf("lse", &gl, 0, lay.lse_len, 4)),
        varlen.then(|| rt::Varlen {
            cu_q: buf("cu_seqlens_q", &gcq, 0, cu_q.len(), 4),
            cu_kv: buf("cu_seqlens_kv", &gckv, 0, cu_kv.len(), 4),
            host: Some((&cu_q, &cu_kv)),
        }),
        scale,
    )
    .map_err(|e| format!("the runtime's checks refuse the case: {e}"))?;
    let (bk, bv) = (lay.k.base * es, lay.v.base * es);
    let q_end = if c.layout == Layout::Fused {
        lay.q_len * es
    } else {
        tq.bytes.len()
    };
    let mut args = vec![
        gq.view(0, q_end),
        kbuf.view(bk, bk + k_elems * es),
        vbuf.view(bv, bv + v_elems * es),
        go.view(0, lay.o_len * es),
        if c.lse {
            gl.view(0, lay.lse_len * 4)
        } else {
            ArgValue::I64(0)
        },
    ];
    if varlen {
        args.push(gcq.view(0, cu_q.len() * 4));
        args.push(gckv.view(0, cu_kv.len() * 4));
    } else {
        args.push(ArgValue::I64(0));
        args.push(ArgValue::I64(0));
    }
    args.extend(size_args(&shape, &strides));
    args.push(ArgValue::F32(scale));
    if let Some(dims) = dims {
        // A Hopper instance's K/V maps, encoded from these arguments as the manifest says.
        let args = super::with_tensor_maps(gpu, inst, args).map_err(err)?;
        launch(gpu, &f, dims, &args).map_err(err)?;
    }
    gpu.sync().map_err(err)?;
    for (g, name) in [
        (&gq, "q"),
        (&gk, "k"),
        (&gv, "v"),
        (&gcq, "cu_seqlens_q"),
        (&gckv, "cu_seqlens_kv"),
    ] {
        g.check(gpu, name)?;
    }
    let o_bytes = go.check(gpu, "o")?;
    let lse_bytes = gl.check(gpu, "lse")?;
    let o = data::decode(dtype, &o_bytes);
    let lse: Vec<f64> = data::decode(DType::F32, &lse_bytes);

    // Which output elements the kernel must write; every other one must keep its NaN.
    let mut o_written = vec![false; lay.o_len];
    let mut l_written = vec![false; lay.lse_len];
    for b in 0..c.batch {
        for row in 0..lq[b] {
            for h in 0..c.heads_q {
                let at = lay.o.at(b, lay.start_q[b] + row, h);
                o_written[at..at + d].iter_mut().for_each(|w| *w = true);
                if c.lse {
                    l_written[b * lay.lse_batch + h * lay.lse_head + lay.start_q[b] + row] = true;
                }
            }
        }
    }
    let mut problems = Vec::new();
    let poison_o = o_bytes
        .chunks_exact(es)
        .zip(&o_written)
        .position(|(e, &w)| !w && e.iter().any(|&x| x != POISON));
    if let Some(i) = poison_o {
        problems.push(format!("o written outside its view at element {i}"));
    }
    let poison_l = lse_bytes
        .chunks_exact(4)
        .zip(&l_written)
        .position(|(e, &w)| !w && e.iter().any(|&x| x != POISON));
    if let Some(i) = poison_l {
        problems.push(format!("lse written where it must not be, element {i}"));
    }

    // The reference on the checked rows, in parallel over (batch, head).
    let group = c.heads_q / c.heads_kv;
    let (qv, kv, vv) = match c.layout {
        Layout::Fused => (&tq.values, &tq.values, &tq.values),
        _ => (&tq.values, &tk.values, &tv.values),
    };
    let mut jobs = Vec::new();
    for (b, &n) in lq.iter().enumerate() {
        let rows = rows_checked(n, c.sample_rows, tile_q, rng);
        for h in 0..c.heads_q {
            jobs.push((b, h, rows.clone()));
        }
    }
    let scale64 = scale as f64;
    let per_job: Vec<(f64, f64, f64, f64, usize, Vec<String>)> = jobs
        .par_iter()
        .map(|(b, h, rows)| {
            let (b, h) = (*b, *h);
            let hk = h / group;
            let (sq, skv) = (lq[b], lkv[b]);
            let krow = |j: usize| lay.k.at(b, lay.start_kv[b] + j, hk);
            let vrow = |j: usize| lay.v.at(b, lay.start_kv[b] + j, hk);
            let (mut max_abs, mut e2, mut r2, mut lse_err) = (0.0f64, 0.0, 0.0, 0.0f64);
            let mut bad = Vec::new();
            for &row in rows {
                let visible = if causal {
                    (row as i64 + skv as i64 - sq as i64 + 1).clamp(0, skv as i64) as usize
                } else {
                    skv
                };
                let (want, want_lse) = reference_row(
                    qv,
                    kv,
                    vv,
                    lay.q.at(b, lay.start_q[b] + row, h),
                    &krow,
                    &vrow,
                    visible,
                    d,
                    scale64,
                );
                let at = lay.o.at(b, lay.start_q[b] + row, h);
                for (x, y) in o[at..at + d].iter().zip(&want) {
                    let e = (x - y).abs();
                    if !e.is_finite() {
                        max_abs = f64::INFINITY;
                    } else {
                        max_abs = max_abs.max(e);
                        e2 += e * e;
                    }
                    r2 += y * y;
                }
                if c.lse {
                    let got = lse[b * lay.lse_batch + h * lay.lse_head + lay.start_q[b] + row];
                    if want_lse == f64::NEG_INFINITY || got == f64::NEG_INFINITY {
                        if got != want_lse && bad.len() < 3 {
                            bad.push(format!(
                                "lse[b{b} h{h} row{row}] = {got}, expected {want_lse}"
                            ));
                        }
                    } else {
                        let e = (got - want_lse).abs();
                        lse_err = if e.is_finite() {
                            lse_err.max(e)
                        } else {
                            f64::INFINITY
                        };
                    }
                }
            }
            (max_abs, e2, r2, lse_err, rows.len(), bad)
        })
        .collect();
    let (mut max_abs, mut e2, mut r2, mut lse_err, mut rows) = (0.0f64, 0.0, 0.0, 0.0f64, 0);
    for (m, e, r, l, n, bad) in per_job {
        max_abs = max_abs.max(m);
        e2 += e;
        r2 += r;
        lse_err = lse_err.max(l);
        rows += n;
        problems.extend(bad);
    }
    let rel = if r2 > 0.0 {
        (e2 / r2).sqrt()
    } else {
        e2.sqrt()
    };
    let (max_bound, rel_bound) = bounds(dtype);
    if max_abs.is_nan() || max_abs > max_bound {
        problems.push(format!("max |o - ref| {max_abs:.3e} over {max_bound:.1e}"));
    }
    if rel.is_nan() || rel > rel_bound {
        problems.push(format!("relative L2 error {rel:.3e} over {rel_bound:.1e}"));
    }
    if lse_err.is_nan() || lse_err > LSE_BOUND {
        problems.push(format!(
            "max |lse - ref| {lse_err:.3e} over {LSE_BOUND:.1e}"
        ));
    }
    Ok((max_abs, rel, lse_err, rows, problems))
}

/// Verifies every case of an instance, printing a line per failed case (every case with
/// `verbose`) or, with `json`, emitting one event per case: (passed, failed). `run_of`, where
/// `verify --repeat` runs the cases more than once: which run this is, of how many (on the
/// failure lines and as the events' `run`).
pub fn verify_instance(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    max_elements: Option<u64>,
    rng: &mut impl Rng,
    verbose: bool,
    json: Option<&dyn Fn(serde_json::Value)>,
    run_of: super::verify::RunOf,
) -> (usize, usize) {
    let (mut passed, mut failed) = (0, 0);
    for case in verify_cases(inst, max_elements) {
        let r = run_case(gpu, inst, &case, rng);
        if r.passed {
            passed += 1;
        } else {
            failed += 1;
        }
        match json {
            Some(emit) => emit(super::verify::case_event(&r, run_of)),
            None if !r.passed || verbose => println!(
                "{:<44} {:<34} max {:>8.2e} rel {:>8.2e} lse {:>8.2e} rows {:>6}  {}",
                r.instance,
                r.case,
                r.max_abs,
                r.rel_l2,
                r.lse_err,
                r.rows_checked,
                match &r.error {
                    None => "ok".to_string(),
                    Some(e) => format!("{}{e}", super::verify::fail_prefix(run_of)),
                }
            ),
            None => {}
        }
    }
    (passed, failed)
}

/// Benches an instance on its shapes, printing a line each (nothing with `json`): the
/// results, and how many shapes failed to run.
pub fn bench_instance(gpu: &mut Gpu, inst: &InstanceEntry, json: bool) -> (Vec<AttnBench>, usize) {
    let (d, ..) = params_of(inst);
    let mut out = Vec::new();
    let mut failures = 0;
    for shape in bench_shapes(d) {
        match bench_case(gpu, inst, shape) {
            Ok(r) => {
                if !json {
                    println!("{}", bench_line(&r));
                }
                out.push(r);
            }
            Err(e) => {
                failures += 1;
                eprintln!("{}: {shape:?}: {e}", inst.name);
            }
        }
    }
    (out, failures)
}

/// A measurement's line in the human report.
pub fn bench_line(r: &AttnBench) -> String {
    format!(
        "{:<44} b{} h{}/{} s{} d{}{} {:>10.4} ms {:>8.1} TFLOP/s",
        r.instance,
        r.batch,
        r.heads_q,
        r.heads_kv,
        r.seq,
        r.head_dim,
        if r.causal { " causal" } else { "" },
        r.median_ms,
        r.tflop_per_s
    )
}

/// One shape's measurements over several rounds (`tilegen bench --rounds`) as one: the median
/// of their medians, the lowest minimum. None for no rounds.
pub fn combine_rounds(rounds: &[AttnBench]) -> Option<AttnBench> {
    let first = rounds.first()?;
    let median_ms = super::bench::median(rounds.iter().map(|r| r.median_ms).collect());
    Some(AttnBench {
        median_ms,
        min_ms: rounds
            .iter()
            .map(|r| r.min_ms)
            .fold(f64::INFINITY, f64::min),
        // The same flops over the combined time.
        tflop_per_s: first.tflop_per_s * first.median_ms / median_ms,
        ..first.clone()
    })
}

/// One bench measurement.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttnBench {
    pub instance: String,
    pub dtype: DType,
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub seq: usize,
    pub head_dim: usize,
    pub causal: bool,
    pub median_ms: f64,
    pub min_ms: f64,
    /// 4·batch·heads_q·seq²·head_dim (halved for causal) over the median.
    pub tflop_per_s: f64,
}

/// (batch, heads_q, heads_kv, seq) timed per head_dim: the shapes the goals name.
pub fn bench_shapes(head_dim: usize) -> Vec<(usize, usize, usize, usize)> {
    match head_dim {
        64 => vec![(16, 16, 16, 2048), (8, 16, 16, 1024), (4, 16, 16, 8192)],
        256 => vec![(4, 16, 16, 4096), (2, 32, 8, 8192)],
        _ => vec![(8, 16, 16, 4096), (4, 32, 32, 8192), (4, 32, 8, 8192)],
    }
}

/// Times the instance on one dense shape (fresh random inputs, LSE written).
pub fn bench_case(
    gpu: &mut Gpu,
    inst: &InstanceEntry,
    (batch, hq, hkv, seq): (usize, usize, usize, usize),
) -> Result<AttnBench> {
    check_signature(inst)?;
    gpu.doing(format!(
        "timing {} at batch {batch}, heads {hq}/{hkv}, seq {seq}",
        inst.name
    ));
    let f = gpu.function(inst)?;
    let (d, causal, _, _) = params_of(inst);
    let dt = inst.dtype;
    let es = dt.size() as usize;
    let shape = AttnShape {
        batch,
        heads_q: hq,
        heads_kv: hkv,
        seq_q: seq,
        seq_kv: seq,
    };
    let strides = AttnStrides::dense(&shape, d);
    let (nq, nkv) = (batch * seq * hq * d, batch * seq * hkv * d);
    let q = super::bench::random_buffer(gpu, nq * es, dt, 1)?;
    let k = super::bench::random_buffer(gpu, nkv * es, dt, 2)?;
    let v = super::bench::random_buffer(gpu, nkv * es, dt, 3)?;
    let o = gpu.alloc_filled(nq * es, POISON)?;
    let lse = gpu.alloc_filled(batch * hq * seq * 4, POISON)?;
    let addr = |s: &cudarc::driver::CudaSlice<u8>| {
        use cudarc::driver::DevicePtr;
        s.device_ptr(&gpu.stream).0
    };
    let scale = rt::default_scale(d as u32);
    let dims = rt::check(
        &kernel_of(inst),
        gpu.sm_count,
        &shape,
        &strides,
        Buf {
            arg: "q",
            len: nq,
            elem_bytes: es as u64,
            address: addr(&q),
        },
        Buf {
            arg: "k",
            len: nkv,
            elem_bytes: es as u64,
            address: addr(&k),
        },
        Buf {
            arg: "v",
            len: nkv,
            elem_bytes: es as u64,
            address: addr(&v),
        },
        Buf {
            arg: "o",
            len: nq,
            elem_bytes: es as u64,
            address: addr(&o),
        },
        Some(Buf {
            arg: "lse",
            len: batch * hq * seq,
            elem_bytes: 4,
            address: addr(&lse),
        }),
        None,
        scale,
    )
    .map_err(|e| Error::Gpu(format!("{}: {e}", inst.name)))?
    .ok_or_else(|| Error::Gpu(format!("{}: empty bench shape", inst.name)))?;
    let s = strides;
    let mut args = vec![
        ArgValue::Buf(&q),
        ArgValue::Buf(&k),
        ArgValue::Buf(&v),
        ArgValue::Buf(&o),
        ArgValue::Buf(&lse),
        ArgValue::I64(0),
        ArgValue::I64(0),
    ];
    args.extend(size_args(&shape, &s));
    args.push(ArgValue::F32(scale));
    let args = super::with_tensor_maps(gpu, inst, args)?;
    let gpu = &*gpu;
    let (median_ms, min_ms) =
        super::bench::time_ms(gpu, &inst.name, |_| launch(gpu, &f, dims, &args))?;
    let flops =
        4.0 * (batch * hq) as f64 * (seq * seq) as f64 * d as f64 * if causal { 0.5 } else { 1.0 };
    Ok(AttnBench {
        instance: inst.name.clone(),
        dtype: dt,
        batch,
        heads_q: hq,
        heads_kv: hkv,
        seq,
        head_dim: d,
        causal,
        median_ms,
        min_ms,
        tflop_per_s: flops / (median_ms * 1e-3) / 1e12,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_cover_the_ragged_shapes() {
        let c = cases(128, 32);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        for want in [
            "s1",
            "primes q<kv",
            "primes q>kv",
            "gqa4",
            "gqa8",
            "mqa",
            "fused qkv",
            "varlen",
            "no lse",
        ] {
            assert!(names.contains(&want), "{want}");
        }
        let v = c.iter().find(|c| c.layout == Layout::Varlen).unwrap();
        assert!(v.lens_q.contains(&0) && v.lens_kv.contains(&0));
        assert_eq!(v.seq_q, *v.lens_q.iter().max().unwrap());
        assert_eq!(v.seq_kv, *v.lens_kv.iter().max().unwrap());
        assert!(c.iter().any(|c| c.seq_q == 127 && c.seq_kv == 33));
    }

    #[test]
    fn the_reference_masks_and_normalizes() {
        // Two keys, one query, d = 1: o is the softmax-weighted mean of v.
        let q = [1.0];
        let k = [0.0, 2.0f64.ln()];
        let v = [3.0, 6.0];
        let (o, lse) = reference_row(&q, &k, &v, 0, &|j| j, &|j| j, 2, 1, 1.0);
        // weights 1 and 2: (3 + 12) / 3
        assert!((o[0] - 5.0).abs() < 1e-12);
        assert!((lse - 3.0f64.ln()).abs() < 1e-12);
        let (o, lse) = reference_row(&q, &k, &v, 0, &|j| j, &|j| j, 1, 1, 1.0);
        assert_eq!(o[0], 3.0);
        assert_eq!(lse, 0.0);
        let (o, lse) = reference_row(&q, &k, &v, 0, &|j| j, &|j| j, 0, 1, 1.0);
        assert_eq!((o[0], lse), (0.0, f64::NEG_INFINITY));
    }

    #[test]
    fn layouts_address_inside_their_buffers() {
        for c in cases(64, 64) {
            let lay = layout(&c, 128);
            let (lq, lkv) = c.lens();
            for b in 0..c.batch {
                if lq[b] > 0 {
                    let last = lay.o.at(b, lay.start_q[b] + lq[b] - 1, c.heads_q - 1) + 128;
                    assert!(last <= lay.o_len, "{c}");
                }
                if lkv[b] > 0 && c.layout != Layout::Fused {
                    let last = lay.k.at(b, lay.start_kv[b] + lkv[b] - 1, c.heads_kv - 1) + 128;
                    assert!(last <= lay.k_len, "{c}");
                }
            }
        }
    }
}
