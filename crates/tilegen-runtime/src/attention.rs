//! Attention calls (`O = softmax(scale·Q·Kᵀ + mask)·V`): the shape and strides a call passes,
//! the checks it must pass before it launches, the grid rule and the choice among a family's
//! instances. Pure functions over lengths, device addresses and sizes: tests call them with
//! no GPU. Standard library only.
//!
//! Q is [batch, seq_q, heads_q, head_dim], K and V [batch, seq_kv, heads_kv, head_dim], O like
//! Q, each through its own (batch, seq, head) strides in elements, the last dimension
//! contiguous. The optional f32 log-sum-exp sits at `lse[b·lse_batch + h·lse_head + row]`.
//! Variable-length batches pass `cu_seqlens_q/kv`: `batch + 1` int32 offsets of each sequence
//! in packed tensors (batch strides then 0), `seq_q`/`seq_kv` the longest lengths.

use crate::call_checks::{Buf, Plan};
use crate::launch_rules::{self, ArgError, LaunchDims};
use crate::loader::Device;
use crate::tensor_map::{resolve_all, TensorMapRule};

/// The launch grid's y and z limit (heads and batch).
pub const MAX_GRID_YZ: u64 = 65_535;
/// Sequence lengths and heads are `int` in the kernel.
pub const MAX_SEQ: u64 = i32::MAX as u64;

/// The sizes of an attention call. With `cu_seqlens`, `seq_q` and `seq_kv` are the longest
/// sequences of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub seq_q: usize,
    pub seq_kv: usize,
}

/// Strides of one tensor, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TensorStrides {
    pub batch: usize,
    pub seq: usize,
    pub head: usize,
}

/// Strides of every tensor of a call, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttnStrides {
    pub q: TensorStrides,
    pub k: TensorStrides,
    pub v: TensorStrides,
    pub o: TensorStrides,
    pub lse_batch: usize,
    pub lse_head: usize,
}

impl AttnStrides {
    /// Contiguous [batch, seq, heads, head_dim] tensors and a [batch, heads_q, seq_q] LSE.
    pub fn dense(shape: &AttnShape, head_dim: usize) -> AttnStrides {
        let t = |seq: usize, heads: usize| TensorStrides {
            batch: seq * heads * head_dim,
            seq: heads * head_dim,
            head: head_dim,
        };
        let (q, kv) = (
            t(shape.seq_q, shape.heads_q),
            t(shape.seq_kv, shape.heads_kv),
        );
        AttnStrides {
            q,
            k: kv,
            v: kv,
            o: q,
            lse_batch: shape.heads_q * shape.seq_q,
            lse_head: shape.seq_q,
        }
    }
    /// Packed [total, heads, head_dim] tensors of a variable-length batch (batch strides 0) and
    /// a [heads_q, total_q] LSE, as flash-attn lays them out.
    pub fn packed(heads_q: usize, heads_kv: usize, total_q: usize, head_dim: usize) -> AttnStrides {
        let t = |heads: usize| TensorStrides {
            batch: 0,
            seq: heads * head_dim,
            head: head_dim,
        };
        AttnStrides {
            q: t(heads_q),
            k: t(heads_kv),
            v: t(heads_kv),
            o: t(heads_q),
            lse_batch: 0,
            lse_head: total_q,
        }
    }
}

/// The `cu_seqlens` of a variable-length call: the device buffers the kernel reads and,
/// when the caller has them, host copies of the same offsets, which are then checked
/// (nondecreasing, each length within `seq_q`/`seq_kv`, every row inside its tensor).
/// Without host copies the offsets are not checked; the tensors must then hold `batch * seq_q`
/// (`batch * seq_kv`) rows, within which the kernel clamps every sequence, so that wrong
/// offsets give wrong rows but no access outside the buffers. With host copies the device
/// offsets must equal them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Varlen<'a> {
    pub cu_q: Buf,
    pub cu_kv: Buf,
    pub host: Option<(&'a [i32], &'a [i32])>,
}

/// What an attention instance is, for the checks and for dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnKernel {
    pub head_dim: u32,
    pub causal: bool,
    pub tile_q: u32,
    pub threads: u32,
    pub shared_bytes: u32,
    pub grid: AttnGrid,
}

/// How an attention instance's grid is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnGrid {
    /// One block per query tile, head and batch entry ([`query_tiles_dims`]).
    QueryTiles,
    /// Blocks that loop over the work units ([`persistent_query_tiles_dims`]).
    Persistent { pairs: bool, ctas_per_sm: u32 },
}

/// The kernel's unit index is an `int`.
pub const MAX_UNITS: u64 = i32::MAX as u64;

/// Persistent attention: the work units are query tiles, or with `pairs` (causal) pairs of
/// one (batch, head)'s query tiles (the i-th longest with the i-th shortest, the middle one of
/// an odd count alone): `per_head = pairs ? ceil(tiles / 2) : tiles` per (batch, head), with
/// `tiles = ceil(seq_q / tile_q)`. Grid `(x, 1, 1)`: `x = min(units, sm_count * ctas_per_sm)`,
/// with `pairs` lowered to the largest such count coprime to `per_head`, so that every block
/// strides over every kind of unit (their lengths differ by a partial last tile and the odd
/// middle one). Any `x >= 1` computes the same result; this is the one that balances the work.
/// None for an empty problem.
#[allow(clippy::too_many_arguments)]
pub fn persistent_query_tiles_dims(
    seq_q: u64,
    heads_q: u64,
    batch: u64,
    tile_q: u32,
    pairs: bool,
    ctas_per_sm: u32,
    sm_count: u32,
    threads: u32,
    shared_bytes: u32,
) -> Result<Option<LaunchDims>, ArgError> {
    launch_rules::check_range("seq_q", seq_q, 0, MAX_SEQ)?;
    if seq_q == 0 || batch == 0 {
        return Ok(None);
    }
    let tiles = seq_q.div_ceil(tile_q.max(1) as u64);
    let per_head = if pairs { tiles.div_ceil(2) } else { tiles };
    let units = per_head.saturating_mul(heads_q).saturating_mul(batch);
    launch_rules::check_range(
        "work units (query tiles x heads_q x batch)",
        units,
        1,
        MAX_UNITS,
    )?;
    let resident = u64::from(sm_count.max(1)).saturating_mul(u64::from(ctas_per_sm.max(1)));
    let mut x = units.min(resident).min(launch_rules::MAX_GRID_X);
    if pairs {
        while x > 1 && gcd(x, per_head) > 1 {
            x -= 1;
        }
    }
    Ok(Some(LaunchDims {
        grid: (x as u32, 1, 1),
        block: (threads, 1, 1),
        shared_bytes,
    }))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Grid `(ceil(seq_q / tile_q), heads_q, batch)`; None for an empty problem.
pub fn query_tiles_dims(
    seq_q: u64,
    heads_q: u64,
    batch: u64,
    tile_q: u32,
    threads: u32,
    shared_bytes: u32,
) -> Result<Option<LaunchDims>, ArgError> {
    launch_rules::check_range("batch", batch, 0, MAX_GRID_YZ)?;
    launch_rules::check_range("heads_q", heads_q, 1, MAX_GRID_YZ)?;
    launch_rules::check_range("seq_q", seq_q, 0, MAX_SEQ)?;
    if seq_q == 0 || batch == 0 {
        return Ok(None);
    }
    let x = seq_q.div_ceil(tile_q.max(1) as u64);
    launch_rules::check_range("query tiles", x, 1, launch_rules::MAX_GRID_X)?;
    Ok(Some(LaunchDims {
        grid: (x as u32, heads_q as u32, batch as u32),
        block: (threads, 1, 1),
        shared_bytes,
    }))
}

fn overflow(what: &'static str) -> ArgError {
    ArgError::OutOfRange {
        what,
        value: u64::MAX,
        min: 0,
        max: i64::MAX as u64,
    }
}

/// One dimension of a strided tensor: (stride, extent), in elements.
type Dim = (u128, u128);

/// Elements from the first to one past the last element a strided tensor addresses
/// (0 when any extent is 0).
fn span(dims: &[Dim]) -> u128 {
    if dims.iter().any(|&(_, n)| n == 0) {
        return 0;
    }
    dims.iter().map(|&(s, n)| s * (n - 1)).sum::<u128>() + 1
}

/// Whether no two index tuples of a strided tensor address the same element: sorted by
/// stride, each dimension's stride passes the span of the smaller ones (the written tensors,
/// o and lse, must not have two blocks write one element).
fn distinct(dims: &[Dim]) -> bool {
    if dims.iter().any(|&(_, n)| n == 0) {
        return true;
    }
    let mut d: Vec<Dim> = dims.iter().copied().filter(|&(_, n)| n > 1).collect();
    d.sort();
    let mut covered = 0u128;
    for (s, n) in d {
        if s < covered.max(1) {
            return false;
        }
        covered += s * (n - 1);
        covered = covered.max(s * (n - 1) + 1);
    }
    true
}

/// Byte range of `elems` elements of `b`.
fn bytes(b: &Buf, elems: u128) -> (u128, u128) {
    let start = b.address as u128;
    (start, start + elems * b.elem_bytes as u128)
}

fn overlaps(a: (u128, u128), b: (u128, u128)) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

fn need(b: &Buf, elems: u128) -> Result<(), ArgError> {
    let needed = u64::try_from(elems).map_err(|_| overflow(b.arg))?;
    launch_rules::check_len(b.arg, b.len, needed)
}

/// Rows each tensor's sequence dimension must cover, as (entries, rows per entry): for a dense
/// call `seq` rows per batch entry; for a packed one the whole packed length from the host
/// offsets, or without them `batch * seq` rows, all the kernel can reach (it clamps every
/// sequence there), so that offsets nobody checked cannot take it outside the buffers.
fn extent_rows(varlen: bool, cu: Option<&[i32]>, batch: u128, seq: u128) -> (u128, u128) {
    match (varlen, cu) {
        (true, Some(cu)) => (1, cu.last().map_or(0, |&c| c.max(0) as u128)),
        (true, None) => (1, batch * seq),
        (false, _) => (batch, seq),
    }
}

fn check_offsets(
    what: &'static str,
    cu: &[i32],
    batch: usize,
    longest: u64,
) -> Result<(), ArgError> {
    launch_rules::check_len(what, cu.len(), batch as u64 + 1)?;
    if cu[0] < 0 {
        return Err(ArgError::OutOfRange {
            what,
            value: 0,
            min: 0,
            max: MAX_SEQ,
        });
    }
    for w in cu[..=batch].windows(2) {
        if w[1] < w[0] {
            // A decreasing offset: a negative length.
            return Err(ArgError::OutOfRange {
                what,
                value: 0,
                min: w[0] as u64,
                max: MAX_SEQ,
            });
        }
        launch_rules::check_range(what, (w[1] - w[0]) as u64, 0, longest)?;
    }
    Ok(())
}

/// Checks one attention call against instance `kernel` and returns its launch geometry (None:
/// nothing to compute) on a device of `sm_count` SMs. `q`, `k`, `v`, `o` are 16-bit tensors of
/// `kernel.head_dim` columns; `lse` an optional f32 output; `scale` the softmax scale (> 0,
/// finite).
#[allow(clippy::too_many_arguments)]
pub fn check(
    kernel: &AttnKernel,
    sm_count: u32,
    shape: &AttnShape,
    strides: &AttnStrides,
    q: Buf,
    k: Buf,
    v: Buf,
    o: Buf,
    lse: Option<Buf>,
    varlen: Option<Varlen<'_>>,
    scale: f32,
) -> Result<Option<LaunchDims>, ArgError> {
    let s = shape;
    launch_rules::check_range("batch", s.batch as u64, 0, MAX_GRID_YZ)?;
    launch_rules::check_range("heads_q", s.heads_q as u64, 1, MAX_GRID_YZ)?;
    launch_rules::check_range("heads_kv", s.heads_kv as u64, 1, MAX_GRID_YZ)?;
    launch_rules::check_multiple(
        "heads_q (a multiple of heads_kv)",
        s.heads_q as u64,
        s.heads_kv as u64,
    )?;
    launch_rules::check_range("seq_q", s.seq_q as u64, 0, MAX_SEQ)?;
    launch_rules::check_range("seq_kv", s.seq_kv as u64, 0, MAX_SEQ)?;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(ArgError::OutOfRange {
            what: "scale (finite, > 0)",
            value: 0,
            min: 1,
            max: u64::MAX,
        });
    }
    let d = kernel.head_dim as u128;
    // 16-byte vectors (cp.async, paired stores): pointers and strides.
    for (b, t, what) in [
        (&q, strides.q, "a stride of q (elements)"),
        (&k, strides.k, "a stride of k (elements)"),
        (&v, strides.v, "a stride of v (elements)"),
        (&o, strides.o, "a stride of o (elements)"),
    ] {
        launch_rules::check_aligned(b.arg, b.address, 16)?;
        let per = (16 / b.elem_bytes.max(1)).max(1);
        for st in [t.batch, t.seq, t.head] {
            launch_rules::check_multiple(what, st as u64, per)?;
            launch_rules::check_range(what, st as u64, 0, i64::MAX as u64)?;
        }
    }
    for st in [strides.lse_batch, strides.lse_head] {
        launch_rules::check_range("a stride of lse (elements)", st as u64, 0, i64::MAX as u64)?;
    }
    if let Some(l) = &lse {
        launch_rules::check_aligned(l.arg, l.address, l.elem_bytes)?;
    }
    let (host_q, host_kv) = match &varlen {
        Some(vl) => {
            for t in [strides.q, strides.k, strides.v, strides.o] {
                launch_rules::check_range(
                    "batch stride of a packed (cu_seqlens) tensor",
                    t.batch as u64,
                    0,
                    0,
                )?;
            }
            launch_rules::check_range(
                "lse batch stride with cu_seqlens",
                strides.lse_batch as u64,
                0,
                0,
            )?;
            for c in [&vl.cu_q, &vl.cu_kv] {
                launch_rules::check_len(c.arg, c.len, s.batch as u64 + 1)?;
                launch_rules::check_aligned(c.arg, c.address, 4)?;
            }
            match vl.host {
                Some((hq, hkv)) => {
                    check_offsets("cu_seqlens_q", hq, s.batch, s.seq_q as u64)?;
                    check_offsets("cu_seqlens_kv", hkv, s.batch, s.seq_kv as u64)?;
                    (Some(&hq[..=s.batch]), Some(&hkv[..=s.batch]))
                }
                None => (None, None),
            }
        }
        None => (None, None),
    };
    let batch = s.batch as u128;
    let (bq, rq) = extent_rows(varlen.is_some(), host_q, batch, s.seq_q as u128);
    let (bkv, rkv) = extent_rows(varlen.is_some(), host_kv, batch, s.seq_kv as u128);
    let dims = |t: TensorStrides, b: u128, rows: u128, heads: usize| -> [Dim; 4] {
        [
            (t.batch as u128, b),
            (t.seq as u128, rows),
            (t.head as u128, heads as u128),
            (1, d),
        ]
    };
    let qd = dims(strides.q, bq, rq, s.heads_q);
    let kd = dims(strides.k, bkv, rkv, s.heads_kv);
    let vd = dims(strides.v, bkv, rkv, s.heads_kv);
    let od = dims(strides.o, bq, rq, s.heads_q);
    // The key/value rows are only read when there are queries to answer.
    let live = s.batch > 0 && s.seq_q > 0;
    need(&q, if live { span(&qd) } else { 0 })?;
    need(&o, if live { span(&od) } else { 0 })?;
    let kv_live = live && s.seq_kv > 0;
    need(&k, if kv_live { span(&kd) } else { 0 })?;
    need(&v, if kv_live { span(&vd) } else { 0 })?;
    if !distinct(&od) {
        return Err(ArgError::Overlap {
            arg: o.arg,
            other: o.arg,
        });
    }
    let o_bytes = bytes(&o, if live { span(&od) } else { 0 });
    for b in [&q, &k, &v] {
        let n = if b.arg == q.arg {
            span(&qd)
        } else {
            span(&kd).max(span(&vd))
        };
        if live && overlaps(o_bytes, bytes(b, n)) {
            return Err(ArgError::Overlap {
                arg: o.arg,
                other: b.arg,
            });
        }
    }
    if let Some(l) = &lse {
        let ld = [
            (strides.lse_batch as u128, bq),
            (strides.lse_head as u128, s.heads_q as u128),
            (1, rq),
        ];
        let n = if live { span(&ld) } else { 0 };
        need(l, n)?;
        if !distinct(&ld) {
            return Err(ArgError::Overlap {
                arg: l.arg,
                other: l.arg,
            });
        }
        for b in [&q, &k, &v, &o] {
            let m = if b.arg == q.arg {
                span(&qd)
            } else if b.arg == o.arg {
                span(&od)
            } else {
                span(&kd).max(span(&vd))
            };
            if live && overlaps(bytes(l, n), bytes(b, m)) {
                return Err(ArgError::Overlap {
                    arg: l.arg,
                    other: b.arg,
                });
            }
        }
    }
    match kernel.grid {
        AttnGrid::QueryTiles => query_tiles_dims(
            s.seq_q as u64,
            s.heads_q as u64,
            s.batch as u64,
            kernel.tile_q,
            kernel.threads,
            kernel.shared_bytes,
        ),
        AttnGrid::Persistent { pairs, ctas_per_sm } => persistent_query_tiles_dims(
            s.seq_q as u64,
            s.heads_q as u64,
            s.batch as u64,
            kernel.tile_q,
            pairs,
            ctas_per_sm,
            sm_count,
            kernel.threads,
            kernel.shared_bytes,
        ),
    }
}

/// One instance of a family, for [`pick`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnOption {
    pub causal: bool,
    pub tile_q: u32,
    /// Keys per K/V tile: between instances of one query tile the larger wins (fewer barriers
    /// and softmax rescales per key; on the H200, 128×64 beats 128×32 at head_dim 128).
    pub tile_kv: u32,
    /// Whether it runs on the device ([`crate::loader::KernelInfo::runs_on`]).
    pub runs: bool,
    /// A Hopper (wgmma) instance: where it runs it is preferred to the portable ones. It takes
    /// tensor maps over K and V, which cannot describe an empty `seq_kv`.
    pub hopper: bool,
}

/// The instance a call runs: one with the call's mask that runs on the device (and, for a
/// Hopper instance, `seq_kv` ≥ 1); among those a Hopper instance first, then the largest query
/// tile that `seq_q` fills at least once, else the smallest tile (least wasted work on short
/// sequences); between equal query tiles the larger key tile, then the first in `options` (the
/// family's table order).
pub fn pick(
    causal: bool,
    seq_q: usize,
    seq_kv: usize,
    options: &[AttnOption],
) -> Result<usize, ArgError> {
    let fit = |o: &AttnOption| o.causal == causal && o.runs && (seq_kv > 0 || !o.hopper);
    let filled = options
        .iter()
        .enumerate()
        .filter(|(_, o)| fit(o) && seq_q as u64 >= o.tile_q as u64)
        .max_by_key(|(i, o)| (o.hopper, o.tile_q, o.tile_kv, usize::MAX - i));
    let smallest = || {
        options
            .iter()
            .enumerate()
            .filter(|(_, o)| fit(o))
            .min_by_key(|(i, o)| (o.tile_q, std::cmp::Reverse(o.tile_kv), *i))
    };
    filled
        .or_else(smallest)
        .map(|(i, _)| i)
        .ok_or(ArgError::NoInstance {
            op: "attention",
            reason: match (causal, seq_kv) {
                (_, 0) if options.iter().any(|o| o.hopper) => {
                    "that runs on this device with seq_kv 0 (the Hopper instances need keys)"
                }
                (true, _) => "with a causal mask that runs on this device",
                (false, _) => "without a mask that runs on this device",
            },
        })
}

/// Every kernel argument as the `u64` a tensor-map rule reads, in the signature's order: the
/// seven addresses (`q`, `k`, `v`, `o`, `lse`, `cu_seqlens_q`, `cu_seqlens_kv`; 0 for a null
/// one), the five sizes (`batch`, `heads_q`, `heads_kv`, `seq_q`, `seq_kv`), the 14 strides,
/// and 0 for `scale`.
pub fn arg_values(addresses: [u64; 7], shape: &AttnShape, strides: &AttnStrides) -> [u64; 27] {
    let s = strides;
    let mut out = [0u64; 27];
    let sizes = [
        shape.batch,
        shape.heads_q,
        shape.heads_kv,
        shape.seq_q,
        shape.seq_kv,
    ];
    let st = [
        s.q.batch,
        s.q.seq,
        s.q.head,
        s.k.batch,
        s.k.seq,
        s.k.head,
        s.v.batch,
        s.v.seq,
        s.v.head,
        s.o.batch,
        s.o.seq,
        s.o.head,
        s.lse_batch,
        s.lse_head,
    ];
    out[..7].copy_from_slice(&addresses);
    for (o, x) in out[7..26].iter_mut().zip(sizes.iter().chain(st.iter())) {
        *o = *x as u64;
    }
    out
}

/// A whole checked call: [`check`] for `kernel` at index `index` of the library's table on
/// `device`, and, for a kernel with tensor maps (`maps`, its rules), every map resolved as the
/// launcher will encode it, so that a call the driver would refuse is refused here.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    device: &Device,
    index: usize,
    kernel: &AttnKernel,
    maps: &[TensorMapRule],
    shape: &AttnShape,
    strides: &AttnStrides,
    q: Buf,
    k: Buf,
    v: Buf,
    o: Buf,
    lse: Option<Buf>,
    varlen: Option<Varlen<'_>>,
    scale: f32,
) -> Result<Plan, ArgError> {
    let dims = check(
        kernel,
        device.sm_count,
        shape,
        strides,
        q,
        k,
        v,
        o,
        lse,
        varlen,
        scale,
    )?;
    if let (Some(_), false) = (dims, maps.is_empty()) {
        let addresses = [
            q.address,
            k.address,
            v.address,
            o.address,
            lse.map_or(0, |b| b.address),
            varlen.map_or(0, |vl| vl.cu_q.address),
            varlen.map_or(0, |vl| vl.cu_kv.address),
        ];
        resolve_all(maps, &arg_values(addresses, shape, strides))?;
    }
    Ok(Plan {
        kernel: index,
        dims,
    })
}

/// The default softmax scale, 1/√head_dim.
pub fn default_scale(head_dim: u32) -> f32 {
    1.0 / (head_dim as f32).sqrt()
}

/// Whether `device` can run the portable kernels at all (cp.async, ldmatrix, mma.sync: sm_80+).
pub fn device_supported(device: &Device) -> bool {
    device.major >= 8
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: AttnKernel = AttnKernel {
        head_dim: 64,
        causal: false,
        tile_q: 128,
        threads: 128,
        shared_bytes: 49_152,
        grid: AttnGrid::QueryTiles,
    };

    fn buf(arg: &'static str, len: usize, address: u64, elem: u64) -> Buf {
        Buf {
            arg,
            len,
            elem_bytes: elem,
            address,
        }
    }

    fn shape(b: usize, hq: usize, hkv: usize, sq: usize, skv: usize) -> AttnShape {
        AttnShape {
            batch: b,
            heads_q: hq,
            heads_kv: hkv,
            seq_q: sq,
            seq_kv: skv,
        }
    }

    fn dense_call(s: &AttnShape) -> Result<Option<LaunchDims>, ArgError> {
        let st = AttnStrides::dense(s, 64);
        let nq = s.batch * s.seq_q * s.heads_q * 64;
        let nkv = s.batch * s.seq_kv * s.heads_kv * 64;
        check(
            &K,
            132,
            s,
            &st,
            buf("q", nq, 0x10_0000, 2),
            buf("k", nkv, 0x100_0000, 2),
            buf("v", nkv, 0x200_0000, 2),
            buf("o", nq, 0x300_0000, 2),
            Some(buf("lse", s.batch * s.heads_q * s.seq_q, 0x400_0000, 4)),
            None,
            0.125,
        )
    }

    #[test]
    fn dense_calls_get_the_query_tile_grid() {
        let d = dense_call(&shape(2, 8, 2, 300, 7)).unwrap().unwrap();
        assert_eq!(d.grid, (3, 8, 2));
        assert_eq!(d.shared_bytes, 49_152);
        assert_eq!(dense_call(&shape(2, 8, 2, 0, 7)).unwrap(), None);
        assert_eq!(dense_call(&shape(0, 8, 2, 5, 7)).unwrap(), None);
        assert!(dense_call(&shape(1, 8, 2, 5, 0)).unwrap().is_some());
    }

    #[test]
    fn persistent_grids_cover_the_sms_and_balance_causal_units() {
        let p = |seq_q, heads, batch, pairs, sms| {
            persistent_query_tiles_dims(seq_q, heads, batch, 128, pairs, 1, sms, 384, 1 << 17)
                .unwrap()
                .map(|d| d.grid)
        };
        // 32 tiles x 128 (batch, head) pairs: one block per SM.
        assert_eq!(p(4096, 16, 8, false, 132), Some((132, 1, 1)));
        // Fewer units than SMs: one block each.
        assert_eq!(p(300, 2, 1, false, 132), Some((6, 1, 1)));
        // Causal pairs: 16 units per head; 132 shares a factor with 16, 131 does not.
        assert_eq!(p(4096, 16, 8, true, 132), Some((131, 1, 1)));
        // 2048 rows of 192-row tiles are 11 tiles, 6 units per head: 131 again.
        assert_eq!(
            persistent_query_tiles_dims(2048, 16, 16, 192, true, 1, 132, 512, 1 << 17)
                .unwrap()
                .map(|d| d.grid.0),
            Some(131)
        );
        // One unit per head: any count is coprime to 1.
        assert_eq!(p(100, 16, 8, true, 132), Some((128, 1, 1)));
        assert_eq!(p(0, 16, 8, true, 132), None);
        assert_eq!(p(4096, 16, 0, true, 132), None);
        // The unit index is an int in the kernel.
        assert!(
            persistent_query_tiles_dims(1 << 30, 65_535, 65_535, 64, false, 1, 132, 384, 0)
                .is_err()
        );
    }

    #[test]
    fn bad_heads_and_scale_are_refused() {
        assert!(matches!(
            dense_call(&shape(1, 6, 4, 5, 5)),
            Err(ArgError::NotMultiple { .. })
        ));
        assert!(dense_call(&shape(1, 0, 1, 5, 5)).is_err());
        assert!(dense_call(&shape(70_000, 1, 1, 5, 5)).is_err());
    }

    #[test]
    fn strided_output_overlap_is_refused() {
        assert!(distinct(&[(0, 1), (128, 10), (64, 2), (1, 64)]));
        // Heads at stride 32 of 64-wide rows: two heads share elements.
        assert!(!distinct(&[(0, 1), (128, 10), (32, 2), (1, 64)]));
        assert!(!distinct(&[(0, 3), (128, 10), (64, 2), (1, 64)]));
    }

    #[test]
    fn arg_values_follow_the_signature() {
        let s = shape(3, 8, 2, 100, 200);
        let st = AttnStrides::dense(&s, 64);
        let v = arg_values([1, 2, 3, 4, 5, 6, 7], &s, &st);
        assert_eq!(&v[..7], &[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(&v[7..12], &[3, 8, 2, 100, 200]);
        // q, k, v, o as (batch, seq, head), then lse's batch and head strides; scale last, 0.
        let (q, kv) = (100 * 8 * 64, 200 * 2 * 64);
        assert_eq!(
            &v[12..],
            &[
                q,
                8 * 64,
                64,
                kv,
                2 * 64,
                64,
                kv,
                2 * 64,
                64,
                q,
                8 * 64,
                64,
                8 * 100,
                100,
                0
            ]
        );
    }

    #[test]
    fn pick_prefers_the_mask_then_the_filled_tile() {
        let o = |causal, tile_q| AttnOption {
            causal,
            tile_q,
            tile_kv: 64,
            runs: true,
            hopper: false,
        };
        let opts = [o(false, 64), o(false, 128), o(true, 64)];
        assert_eq!(pick(false, 1000, 1000, &opts), Ok(1));
        assert_eq!(pick(false, 100, 100, &opts), Ok(0));
        assert_eq!(pick(false, 10, 10, &opts), Ok(0));
        assert_eq!(pick(true, 10, 10, &opts), Ok(2));
        assert!(pick(true, 10, 10, &[o(false, 64)]).is_err());
    }

    #[test]
    fn pick_takes_the_larger_key_tile_between_equal_query_tiles() {
        let o = |tile_kv, runs| AttnOption {
            causal: false,
            tile_q: 128,
            tile_kv,
            runs,
            hopper: false,
        };
        // The default library at head_dim 128: 128x32 for every arch, 128x64 for sm_90 only.
        let on_h200 = [o(32, true), o(64, true)];
        assert_eq!(pick(false, 4096, 4096, &on_h200), Ok(1));
        assert_eq!(pick(false, 10, 10, &on_h200), Ok(1));
        let on_a100 = [o(32, true), o(64, false)];
        assert_eq!(pick(false, 4096, 4096, &on_a100), Ok(0));
        assert_eq!(pick(false, 10, 10, &on_a100), Ok(0));
    }

    #[test]
    fn pick_prefers_hopper_instances_where_they_run() {
        let o = |tile_q, runs, hopper| AttnOption {
            causal: false,
            tile_q,
            tile_kv: 128,
            runs,
            hopper,
        };
        // An sm_90 device: the Hopper instance wins over a larger portable tile.
        let on_h100 = [o(128, true, false), o(192, true, false), o(128, true, true)];
        assert_eq!(pick(false, 4096, 4096, &on_h100), Ok(2));
        // No keys: the maps cannot be encoded, so the portable instances run it.
        assert_eq!(pick(false, 4096, 0, &on_h100), Ok(1));
        assert!(pick(false, 4096, 0, &[o(128, true, true)]).is_err());
        // Too short to fill it: the smallest tile, portable or not.
        let short = [o(64, true, false), o(128, true, true)];
        assert_eq!(pick(false, 10, 10, &short), Ok(0));
        // Elsewhere the Hopper binary does not run: the portable instances decide.
        let on_a100 = [o(128, true, false), o(128, false, true)];
        assert_eq!(pick(false, 4096, 4096, &on_a100), Ok(0));
        assert!(pick(false, 10, 10, &[o(128, false, true)]).is_err());
    }
}
