//! The checks one kernel call must pass before it launches, and the choice among an op's
//! instances: what every generated method runs first, and what its `plan` functions expose.
//! Pure functions over lengths, device addresses and sizes: tests call them with no GPU.
//! Standard library only.

use crate::launch_rules::{self, ArgError, LaunchDims};
use crate::loader::Device;

/// Bytes of one vector access in every tilegen kernel.
pub const VECTOR_BYTES: u64 = 16;

/// A device buffer as a call passes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buf {
    /// The argument's name, for messages.
    pub arg: &'static str,
    /// Length in elements.
    pub len: usize,
    /// Bytes per element.
    pub elem_bytes: u64,
    /// Device address of the first element.
    pub address: u64,
}

impl Buf {
    /// A buffer of `len` elements of `T` at `address`.
    pub fn of<T>(arg: &'static str, len: usize, address: u64) -> Buf {
        Buf {
            arg,
            len,
            elem_bytes: core::mem::size_of::<T>() as u64,
            address,
        }
    }
}

/// What a checked call launches: which kernel (an index into the library's kernel table) and
/// with which geometry; `dims` is None when the problem is empty and nothing need run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Index of the instance in the library's kernel table.
    pub kernel: usize,
    /// Launch geometry, or None for an empty problem.
    pub dims: Option<LaunchDims>,
}

/// Kernels take sizes as signed 64-bit integers.
fn size(what: &'static str, value: usize) -> Result<u64, ArgError> {
    launch_rules::check_range(what, value as u64, 0, i64::MAX as u64)?;
    Ok(value as u64)
}

/// Every buffer must be aligned to its element; `vectors` adds the 16-byte alignment of
/// vector accesses.
fn aligned(b: &Buf, vectors: bool) -> Result<(), ArgError> {
    let align = if vectors {
        VECTOR_BYTES.max(b.elem_bytes)
    } else {
        b.elem_bytes
    };
    launch_rules::check_aligned(b.arg, b.address, align)
}

/// Elementwise kernels (`vector_add`, `fma`): each buffer of `full` holds at least `n`
/// elements and is 16-byte aligned (the kernels use vector accesses, with a scalar tail).
pub fn elements(
    n: usize,
    full: &[Buf],
    elems_per_block: u32,
    threads: u32,
) -> Result<Option<LaunchDims>, ArgError> {
    let n = size("n", n)?;
    for b in full {
        launch_rules::check_len(b.arg, b.len, n)?;
        aligned(b, true)?;
    }
    Ok((n > 0).then(|| launch_rules::elements_dims(n, elems_per_block, threads)))
}

/// A row vector of `cols` elements broadcast over the `n / cols` rows of an elementwise call
/// (the `bias` of `fma` with a bias epilogue): `cols` ≥ 1 divides `n`, the row holds `cols`.
pub fn broadcast_row(n: usize, cols: usize, row: &Buf) -> Result<(), ArgError> {
    let cols = size("cols", cols)?;
    launch_rules::check_range("cols", cols, 1, i64::MAX as u64)?;
    launch_rules::check_multiple("n (whole rows of `cols` elements)", n as u64, cols)?;
    launch_rules::check_len(row.arg, row.len, cols)?;
    aligned(row, false)
}

/// Row kernels (softmax, layernorm, rmsnorm) over a `rows`×`cols` row-major tensor: `full`
/// buffers hold `rows * cols` elements, `per_col` buffers (weight, bias) hold `cols`.
/// `max_cols` is the longest row the instance handles (None: any length below
/// `MAX_COLS`). The kernels use 16-byte vectors when `cols` is a multiple of `vec`, and then
/// every pointer must be 16-byte aligned; otherwise they fall back to scalar accesses.
#[allow(clippy::too_many_arguments)]
pub fn rows(
    rows: usize,
    cols: usize,
    max_cols: Option<u32>,
    vec: u32,
    full: &[Buf],
    per_col: &[Buf],
    rows_per_block: u32,
    threads: u32,
) -> Result<Option<LaunchDims>, ArgError> {
    let rows = size("rows", rows)?;
    let cols = cols as u64;
    let limit = max_cols.map_or(launch_rules::MAX_COLS - 1, |m| {
        (m as u64).min(launch_rules::MAX_COLS - 1)
    });
    launch_rules::check_range("cols", cols, 0, limit)?;
    let area = launch_rules::checked_area("rows * cols", rows, cols)?;
    let vectors = vec > 1 && cols.is_multiple_of(vec as u64);
    for b in full {
        launch_rules::check_len(b.arg, b.len, area)?;
        aligned(b, vectors)?;
    }
    for b in per_col {
        launch_rules::check_len(b.arg, b.len, cols)?;
        aligned(b, vectors)?;
    }
    Ok((area > 0).then(|| launch_rules::rows_dims(rows, rows_per_block, threads)))
}

/// A row kernel with several outputs (add_rmsnorm's `h` and `y`, `rows * cols` elements
/// each): no output overlaps another or an input in the elements the kernel touches
/// (`rows * cols` of the `full` inputs, `cols` of the `per_col` ones). Kernels read an input
/// row after other blocks have written theirs, so any shared byte can change a result.
pub fn rows_disjoint(
    rows: usize,
    cols: usize,
    outputs: &[Buf],
    full: &[Buf],
    per_col: &[Buf],
) -> Result<(), ArgError> {
    let area = (rows as u128) * (cols as u128);
    // Byte ranges in u128: no address plus length can wrap.
    let span = |b: &Buf, elems: u128| {
        let start = b.address as u128;
        (start, start + elems * b.elem_bytes as u128)
    };
    let spans: Vec<(&'static str, (u128, u128))> = outputs
        .iter()
        .chain(full)
        .map(|b| (b.arg, span(b, area)))
        .chain(per_col.iter().map(|b| (b.arg, span(b, cols as u128))))
        .collect();
    for (i, &(arg, (o0, o1))) in spans.iter().enumerate().take(outputs.len()) {
        for &(other, (b0, b1)) in &spans[i + 1..] {
            if o0 < o1 && b0 < b1 && o0 < b1 && b0 < o1 {
                return Err(ArgError::Overlap { arg, other });
            }
        }
    }
    Ok(())
}

/// Which instance of a row op handles rows of `cols` elements, given each instance's
/// `max_cols` (None: any length): the one-pass instance with the smallest `max_cols` ≥
/// `cols` (it reads each element once, with the fewest idle threads), else the first that
/// takes any length. Ties go to the first listed.
pub fn pick_rows(cols: usize, max_cols: &[Option<u32>]) -> Result<usize, ArgError> {
    let cols = cols as u64;
    let one_pass = max_cols
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.map(|m| (m as u64, i)))
        .filter(|&(m, _)| m >= cols)
        .min();
    if let Some((_, i)) = one_pass {
        return Ok(i);
    }
    if let Some(i) = max_cols.iter().position(Option::is_none) {
        return Ok(i);
    }
    let longest = max_cols.iter().flatten().copied().max().unwrap_or(0) as u64;
    Err(ArgError::OutOfRange {
        what: "cols (no instance of this op takes longer rows)",
        value: cols,
        min: 0,
        max: longest,
    })
}

/// Which elementwise instance runs `n` elements, given each instance's elements per block:
/// the one with the most elements per block that still gives each of the device's
/// `sm_count` SMs at least two blocks; when none does (small `n`), the one with the fewest
/// elements per block, which spreads the work widest. Ties go to the first listed.
pub fn pick_elements(n: usize, sm_count: u32, elems_per_block: &[u32]) -> usize {
    let enough = |e: u32| (n as u64) >= 2 * (sm_count.max(1) as u64) * e as u64;
    let mut best: Option<usize> = None;
    for (i, &e) in elems_per_block.iter().enumerate() {
        if enough(e) && best.is_none_or(|b| e > elems_per_block[b]) {
            best = Some(i);
        }
    }
    best.unwrap_or_else(|| {
        let mut small = 0;
        for (i, &e) in elems_per_block.iter().enumerate() {
            if e < elems_per_block[small] {
                small = i;
            }
        }
        small
    })
}

/// What a GEMM instance needs of a call beyond staying in bounds: pointer alignment and the
/// multiples its tiling and 16-byte copies assume (`ops::gemm::runtime_requirements` in
/// tilegen states them in words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmNeeds {
    /// Alignment of `a`, `b`, `c` and `d`, in bytes (`bias` needs only its element's).
    pub align: u64,
    /// `lda` and `ldb` must be multiples of this (16 bytes of input elements).
    pub ld_in_multiple: u64,
    /// `ldc` and `ldd` must be multiples of this (16 bytes of output elements).
    pub ld_out_multiple: u64,
    /// `m`, `n` and `k` must be multiples of these (1: any size, edges are masked).
    pub m_multiple: u64,
    pub n_multiple: u64,
    pub k_multiple: u64,
}

/// GEMM kernels index rows and columns in 32 bits.
pub const MAX_GEMM_DIM: u64 = (1 << 31) - 1;

/// One matrix operand: its buffer, leading dimension and whether it is stored transposed
/// (column-major).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matrix {
    pub buf: Buf,
    pub ld: usize,
    pub transposed: bool,
}

/// A GEMM call, `d = epilogue(a · b)` with `a` m×k, `b` k×n, `d` (and the residual `c`)
/// m×n row-major, and a `bias` of `n` elements broadcast over rows. That `d` overlaps no
/// input follows from Rust's borrow rules on cudarc's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmCall {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Matrix,
    pub b: Matrix,
    pub c: Option<Matrix>,
    pub d: Matrix,
    pub bias: Option<Buf>,
}

/// Checks one operand that is `rows`×`cols` (stored `cols`×`rows` when transposed) with
/// leading dimension `ld`, a multiple of `ld_multiple`.
fn matrix(
    name: &'static str,
    mat: &Matrix,
    rows: u64,
    cols: u64,
    ld_multiple: u64,
    align: u64,
) -> Result<(), ArgError> {
    let (rows, cols) = if mat.transposed {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let ld = size(name, mat.ld)?;
    launch_rules::check_range(name, ld, cols, i64::MAX as u64)?;
    launch_rules::check_multiple(name, ld, ld_multiple)?;
    let needed = if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1)
            .checked_mul(ld)
            .and_then(|v| v.checked_add(cols))
            .ok_or(ArgError::OutOfRange {
                what: name,
                value: ld,
                min: cols,
                max: i64::MAX as u64,
            })?
    };
    launch_rules::check_len(mat.buf.arg, mat.buf.len, needed)?;
    launch_rules::check_aligned(mat.buf.arg, mat.buf.address, align.max(mat.buf.elem_bytes))
}

/// GEMM: sizes up to 2^31 - 1 and multiples of what the instance needs, every operand in
/// bounds for its shape and leading dimension and aligned. `k` = 0 is allowed (the kernel
/// writes `epilogue(0)`); an empty output launches nothing.
pub fn gemm(
    call: &GemmCall,
    needs: &GemmNeeds,
    tile: (u32, u32),
    threads: u32,
    shared_bytes: u32,
) -> Result<Option<LaunchDims>, ArgError> {
    if !gemm_operands(call, needs)? {
        return Ok(None);
    }
    launch_rules::tiles_dims(
        call.m as u64,
        call.n as u64,
        tile.0,
        tile.1,
        threads,
        shared_bytes,
    )
    .map(Some)
}

/// [`gemm`]'s checks for a persistent kernel ([`launch_rules::persistent_dims`]): at most
/// `ctas_per_sm` blocks on each of the device's `sm_count` SMs, in clusters of `cluster`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_persistent(
    call: &GemmCall,
    needs: &GemmNeeds,
    tile: (u32, u32),
    ctas_per_sm: u32,
    cluster: u32,
    sm_count: u32,
    threads: u32,
    shared_bytes: u32,
) -> Result<Option<LaunchDims>, ArgError> {
    if !gemm_operands(call, needs)? {
        return Ok(None);
    }
    launch_rules::persistent_dims(
        call.m as u64,
        call.n as u64,
        tile.0,
        tile.1,
        ctas_per_sm,
        cluster,
        sm_count,
        threads,
        shared_bytes,
    )
    .map(Some)
}

/// The checks of both GEMM grids; false when the output is empty (nothing to launch).
fn gemm_operands(call: &GemmCall, needs: &GemmNeeds) -> Result<bool, ArgError> {
    let m = call.m as u64;
    let n = call.n as u64;
    let k = call.k as u64;
    launch_rules::check_range("m", m, 0, MAX_GEMM_DIM)?;
    launch_rules::check_range("n", n, 0, MAX_GEMM_DIM)?;
    launch_rules::check_range("k", k, 0, MAX_GEMM_DIM)?;
    launch_rules::check_multiple("m", m, needs.m_multiple)?;
    launch_rules::check_multiple("n", n, needs.n_multiple)?;
    launch_rules::check_multiple("k", k, needs.k_multiple)?;
    matrix("lda", &call.a, m, k, needs.ld_in_multiple, needs.align)?;
    matrix("ldb", &call.b, k, n, needs.ld_in_multiple, needs.align)?;
    if let Some(c) = &call.c {
        matrix("ldc", c, m, n, needs.ld_out_multiple, needs.align)?;
    }
    matrix("ldd", &call.d, m, n, needs.ld_out_multiple, needs.align)?;
    if let Some(bias) = &call.bias {
        launch_rules::check_len(bias.arg, bias.len, n)?;
        aligned(bias, false)?;
    }
    Ok(m > 0 && n > 0)
}

/// Output rows up to which a GEMM call counts as decode-shaped (one token per sequence of a
/// small batch). On the H200 an mma.sync 16-row tile beat the 128-row wgmma tiles there
/// (`bench/results/2026-11-30-h200-gemm-dispatch.txt`), and the swap-AB wgmma tiles beat it
/// by 1.5–2× (`bench/results/2026-12-02-h200-tune-gemm-decode-judge.txt`).
pub const DECODE_ROWS: u32 = 16;

/// wgmma's rows: a tensor-map tile shorter than this computes its transpose (swap-AB), with B
/// streamed once per row of tiles.
pub const WGMMA_ROWS: u32 = 64;

/// One GEMM instance as a group's dispatch sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmOption {
    /// Output tile (m, n).
    pub tile: (u32, u32),
    /// A tensor-map (TMA + wgmma) instance.
    pub tensor_maps: bool,
    /// Whether it runs on the device: a binary for it, and for tensor maps a driver that
    /// encodes them ([`crate::loader::KernelInfo::runs_on`]).
    pub runs: bool,
    /// Blocks that share each tile, splitting K between them (the grid rule's cluster; 1 for
    /// a block per tile).
    pub split_k: u32,
}

/// The bytes from one stored row of a GEMM call's A, and of its B, to the next: `lda` and
/// `ldb` times the element size. TMA reads each row of a box as one 128-byte piece; where the
/// rows are not whole 128-byte lines apart, most pieces would straddle two of L2's lines (the
/// likely cause, not measured), and the H200's tuning runs took longer there the more a tile
/// loads: [`wgmma_cost`] counts that operand's loads twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowPitches {
    /// A's row pitch in bytes.
    pub a: u64,
    /// B's row pitch in bytes.
    pub b: u64,
}

impl RowPitches {
    /// The line that TMA's 128-byte row pieces fill when a pitch is a multiple of it.
    pub const LINE: u64 = 128;

    /// The pitches of a call's A (`lda` elements of `a`) and B (`ldb` elements of `b`).
    pub fn of(a: &Buf, lda: usize, b: &Buf, ldb: usize) -> Self {
        Self {
            a: a.elem_bytes.saturating_mul(lda as u64),
            b: b.elem_bytes.saturating_mul(ldb as u64),
        }
    }

    /// Whether A's rows, and B's, start on a 128-byte line each (relative to the first).
    fn whole_lines(self) -> (bool, bool) {
        (
            self.a.is_multiple_of(Self::LINE),
            self.b.is_multiple_of(Self::LINE),
        )
    }
}

/// The order in which a GEMM group tries its instances on `device` for an m×n×k call whose
/// operands' rows lie `pitches` apart: only
/// instances that run there (all of them when none does, so that loading names what is
/// missing); tensor-map instances first (they run only on sm_90, where they are the fast
/// path), cheapest by [`wgmma_cost`] first, then the mma.sync ones in [`tile_order`]. The
/// exception is a decode-shaped output (at most
/// [`DECODE_ROWS`] rows) when the group has an mma.sync tile of that height and no swap-AB
/// tile that runs and covers M in one row: the mma.sync tile goes first.
/// Tensor-map tiles under [`WGMMA_ROWS`] rows (swap-AB) go first where one row of them covers
/// M, however many tiles a taller one makes (that one computes rows that are not there), and
/// last otherwise: each further row streams all of B again.
pub fn gemm_order(
    m: usize,
    n: usize,
    k: usize,
    pitches: RowPitches,
    device: &Device,
    options: &[GemmOption],
) -> Vec<usize> {
    let mut usable: Vec<usize> = (0..options.len()).filter(|&i| options[i].runs).collect();
    if usable.is_empty() {
        usable = (0..options.len()).collect();
    }
    // A swap-AB tile (tensor maps, under wgmma's rows) streams B once per row of tiles.
    let swap_ab = |i: usize| options[i].tensor_maps && options[i].tile.0 < WGMMA_ROWS;
    let covers_m = |i: usize| m <= options[i].tile.0 as usize;
    let decode_tile = m <= DECODE_ROWS as usize
        && !usable
            .iter()
            .any(|&i| swap_ab(i) && covers_m(i) && options[i].runs)
        && usable
            .iter()
            .any(|&i| !options[i].tensor_maps && options[i].tile.0 <= DECODE_ROWS);
    let parts = if decode_tile {
        [false, true]
    } else {
        [true, false]
    };
    let mut out = Vec::with_capacity(usable.len());
    for maps in parts {
        let part: Vec<usize> = usable
            .iter()
            .copied()
            .filter(|&i| options[i].tensor_maps == maps)
            .collect();
        let ordered: Vec<usize> = if maps {
            let mut part = part;
            // A stable sort: ties keep the listed order.
            part.sort_by_key(|&i| wgmma_cost(m, n, k, pitches, device.sm_count, &options[i]));
            part
        } else {
            let tiles: Vec<(u32, u32)> = part.iter().map(|&i| options[i].tile).collect();
            tile_order(m, n, device.sm_count, &tiles)
                .into_iter()
                .map(|j| part[j])
                .collect()
        };
        let (covering, rereading): (Vec<usize>, Vec<usize>) = ordered
            .into_iter()
            .partition(|&i| !swap_ab(i) || covers_m(i));
        // H200 tuning data at 1-16 rows (bench/results/2026-12-03-h200-gemm-rules-decode.txt):
        // with tile_order's first pick (often a taller tile that fills the SMs) the rules took
        // 1.26x the fastest instance on geometric mean over 136 method-shapes, with the
        // covering swap-AB tile first 1.03x.
        let (swapped, others): (Vec<usize>, Vec<usize>) =
            covering.into_iter().partition(|&i| swap_ab(i));
        out.extend(swapped);
        out.extend(others);
        out.extend(rereading);
    }
    out
}

/// A tensor-map GEMM instance's time for an m×n×k call, estimated in units of one column of
/// B loaded for one k, for ranking a group's instances against each other (not a time to
/// report). Each SM runs `rounds` of tiles (a persistent grid of `sm_count / split_k` tiles at
/// once), and a tile costs, per k its blocks walk:
/// - its columns of B and, twice weighted, its rows of A (what its blocks load), each operand
///   counted twice more where its rows are not whole 128-byte lines apart ([`RowPitches`]);
/// - `rows × columns / 40` of wgmma work;
/// - 64 that do not grow with the tile (barriers, descriptors, the ring's turns);
/// - with split K, 100 per output element once, for the partial sums' exchange;
/// - and 24000 once, whatever K (filling the ring, the epilogue), which settles near ties
///   between fewer large tiles and more small ones when K is short.
///
/// Fitted to the H200's tuning measurements, every wgmma member at 102 shapes from 1×4096×4096
/// to 16384×4096×4096 (`bench/tuning-lookup/rules_cost.py` over `bench/results/*tune*.tar.xz`):
/// its first pick took 1.010× the fastest member's time on geometric mean over 1563
/// method-shapes, 1.17× at worst, where `tile_order` took 1.129× and 2.65×. At 22 shapes
/// outside those (`bench/results/2026-12-05-h200-gemm-rules-heldout.txt`, 428 method-shapes),
/// 1.027× (1.51× at worst; 1.038× without the once-per-tile term) where `tile_order` took
/// 1.121×. The pitch term came from those 22 shapes, and was chosen on the same runs: over
/// all 1991 recorded method-shapes, the 216 whose rows are not whole lines apart (with 16-bit
/// elements, a K, N or, for A stored K × M, M not a multiple of 64) read 1.023× (worst 1.24×)
/// where they read 1.046× (1.51×), and every other pick stays as it was.
pub fn wgmma_cost(
    m: usize,
    n: usize,
    k: usize,
    pitches: RowPitches,
    sm_count: u32,
    option: &GemmOption,
) -> u64 {
    let (tile_m, tile_n) = (option.tile.0.max(1) as u64, option.tile.1.max(1) as u64);
    let split_k = option.split_k.max(1) as u64;
    let tiles = (m as u64)
        .div_ceil(tile_m)
        .saturating_mul((n as u64).div_ceil(tile_n));
    let at_once = (sm_count as u64 / split_k).max(1);
    let rounds = tiles.div_ceil(at_once);
    // In 40ths, to stay in integers.
    let area = tile_m.saturating_mul(tile_n);
    let (a_lines, b_lines) = pitches.whole_lines();
    let straddle = |whole: bool| -> u64 {
        if whole {
            1
        } else {
            2
        }
    };
    let per_k = area
        .saturating_add((80 * straddle(a_lines)).saturating_mul(tile_m))
        .saturating_add((40 * straddle(b_lines)).saturating_mul(tile_n))
        .saturating_add(40 * 64);
    let exchange = if split_k > 1 {
        area.saturating_mul(40 * 100)
    } else {
        0
    };
    let per_tile = (k as u64)
        .div_ceil(split_k)
        .saturating_mul(per_k)
        .saturating_add(exchange)
        .saturating_add(40 * 24000);
    rounds.saturating_mul(per_tile)
}

/// The order in which to try GEMM instances with these output tiles for an m×n output:
/// tiles that make at least one tile per SM first, largest tile first (more reuse per
/// block), then the rest smallest first (more blocks). Ties keep the listed order.
pub fn tile_order(m: usize, n: usize, sm_count: u32, tiles: &[(u32, u32)]) -> Vec<usize> {
    let count = |&(tm, tn): &(u32, u32)| {
        // Saturating: sizes are range-checked later, and dispatch must not overflow first.
        (m as u64)
            .div_ceil(tm.max(1) as u64)
            .saturating_mul((n as u64).div_ceil(tn.max(1) as u64))
    };
    let area = |&(tm, tn): &(u32, u32)| tm as u64 * tn as u64;
    let (mut fill, mut rest): (Vec<usize>, Vec<usize>) =
        (0..tiles.len()).partition(|&i| count(&tiles[i]) >= sm_count.max(1) as u64);
    fill.sort_by_key(|&i| core::cmp::Reverse(area(&tiles[i])));
    rest.sort_by_key(|&i| area(&tiles[i]));
    fill.extend(rest);
    fill
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::{Binary, BinaryKind, KernelInfo, Version};

    /// Rows whole 128-byte lines apart, as at the tuning runs' shapes (K and N multiples of 64).
    const WHOLE: RowPitches = RowPitches { a: 8192, b: 8192 };

    const fn cubin(arch: &'static str) -> Binary {
        Binary {
            arch,
            kind: BinaryKind::Cubin,
            ptx_isa: None,
            bytes: b"",
        }
    }

    const fn ptx(arch: &'static str) -> Binary {
        Binary {
            arch,
            kind: BinaryKind::Ptx,
            ptx_isa: Some(Version::new(9, 0)),
            bytes: b"",
        }
    }

    /// A GEMM group as a default library has it: two mma.sync instances for sm_80 and sm_90,
    /// and a wgmma instance that exists only for sm_90a.
    const KERNELS: &[KernelInfo] = &[
        KernelInfo {
            name: "gemm_128x128",
            entry_point: "tg_a",
            shared_bytes: 0,
            cluster: 1,
            binaries: &[cubin("sm_80"), ptx("sm_80"), cubin("sm_90"), ptx("sm_90")],
        },
        KernelInfo {
            name: "gemm_128x256",
            entry_point: "tg_b",
            shared_bytes: 0,
            cluster: 1,
            binaries: &[cubin("sm_80"), ptx("sm_80"), cubin("sm_90"), ptx("sm_90")],
        },
        KernelInfo {
            name: "gemm_128x256_wgmma",
            entry_point: "tg_c",
            shared_bytes: 0,
            cluster: 1,
            binaries: &[cubin("sm_90a"), ptx("sm_90a")],
        },
    ];
    const TILES: [(u32, u32); 3] = [(128, 128), (128, 256), (128, 256)];
    const MAPS: [bool; 3] = [false, false, true];

    fn device(major: u32, minor: u32, sm_count: u32) -> Device {
        Device {
            major,
            minor,
            sm_count,
            driver: Some(Version::new(13, 0)),
            name: crate::loader::DeviceName::unknown(),
        }
    }

    fn order(m: usize, n: usize, d: &Device) -> Vec<usize> {
        let options: Vec<GemmOption> = (0..3)
            .map(|i| GemmOption {
                tile: TILES[i],
                tensor_maps: MAPS[i],
                runs: KERNELS[i].runs_on(d, MAPS[i]),
                split_k: 1,
            })
            .collect();
        gemm_order(m, n, 4096, WHOLE, d, &options)
    }

    #[test]
    fn wgmma_first_on_sm_90_only() {
        // sm_90 (H100/H200): the wgmma instance first, whatever the shape, then mma.sync.
        let h200 = device(9, 0, 132);
        assert_eq!(order(8192, 8192, &h200), [2, 1, 0]);
        assert_eq!(order(16, 4096, &h200), [2, 0, 1]);
        // An sm_90 whose driver cannot encode tensor maps (or says nothing): mma.sync only.
        for driver in [Some(Version::new(11, 8)), None] {
            let old = Device { driver, ..h200 };
            assert_eq!(order(8192, 8192, &old), [1, 0]);
        }
        // Ampere, Ada and sm_86 never see the wgmma instance; the mma.sync ones plan as before.
        for d in [device(8, 0, 108), device(8, 6, 84), device(8, 9, 128)] {
            assert_eq!(order(8192, 8192, &d), [1, 0], "{d:?}");
            assert_eq!(order(16, 4096, &d), [0, 1], "{d:?}");
            assert_eq!(
                order(8192, 8192, &d),
                tile_order(8192, 8192, d.sm_count, &TILES[..2])
            );
        }
        // A device nothing runs on: every instance stays, so loading names what is missing.
        assert_eq!(order(8192, 8192, &device(7, 5, 40)), [2, 1, 0]);
    }

    #[test]
    fn decode_shapes_take_a_covering_swap_ab_tile_else_a_16_row_mma_sync_one_first() {
        let h200 = device(9, 0, 132);
        // mma.sync 16x32 and 128x128, wgmma 128x256 and 128x128.
        let options = |tiles: &[((u32, u32), bool)]| -> Vec<GemmOption> {
            tiles
                .iter()
                .map(|&(tile, tensor_maps)| GemmOption {
                    tile,
                    tensor_maps,
                    runs: true,
                    split_k: 1,
                })
                .collect()
        };
        let group = options(&[
            ((16, 32), false),
            ((128, 128), false),
            ((128, 256), true),
            ((128, 128), true),
        ]);
        assert_eq!(gemm_order(16, 4096, 4096, WHOLE, &h200, &group)[0], 0);
        assert_eq!(gemm_order(1, 11008, 4096, WHOLE, &h200, &group)[0], 0);
        // One more row, and the wgmma tiles come first again (the 128-row one that fills more SMs).
        assert_eq!(gemm_order(17, 4096, 4096, WHOLE, &h200, &group)[0], 3);
        assert_eq!(gemm_order(4096, 4096, 4096, WHOLE, &h200, &group)[0], 2);
        // Without a 16-row mma.sync tile, wgmma stays first for decode shapes too.
        let no_decode_tile = options(&[((128, 128), false), ((128, 256), true)]);
        assert_eq!(
            gemm_order(16, 4096, 4096, WHOLE, &h200, &no_decode_tile),
            [1, 0]
        );
        // A swap-AB tile whose one row covers M goes before the mma.sync one; above its rows
        // the mma.sync tile leads again.
        let mut with_swap = group.clone();
        with_swap.push(GemmOption {
            tile: (16, 64),
            tensor_maps: true,
            runs: true,
            split_k: 1,
        });
        assert_eq!(gemm_order(16, 4096, 4096, WHOLE, &h200, &with_swap)[0], 4);
        assert_eq!(gemm_order(1, 4096, 4096, WHOLE, &h200, &with_swap)[0], 4);
        with_swap[4].tile = (8, 64);
        assert_eq!(gemm_order(16, 4096, 4096, WHOLE, &h200, &with_swap)[0], 0);
        // A swap-AB tile that cannot run (no driver for tensor maps) leaves the rule as it was.
        with_swap[4].tile = (16, 64);
        with_swap[4].runs = false;
        assert_eq!(gemm_order(16, 4096, 4096, WHOLE, &h200, &with_swap)[0], 0);
    }

    #[test]
    fn swap_ab_tiles_lead_only_where_one_row_of_them_covers_m() {
        let h200 = device(9, 0, 132);
        // wgmma 128x256, 64x64 and the swap-AB 16x128 (the smallest), mma.sync 128x128.
        let group: Vec<GemmOption> = [
            ((128, 256), true),
            ((64, 64), true),
            ((16, 128), true),
            ((128, 128), false),
        ]
        .map(|(tile, tensor_maps)| GemmOption {
            tile,
            tensor_maps,
            runs: true,
            split_k: 1,
        })
        .to_vec();
        // Up to 16 rows the swap-AB tile leads, also where the taller tiles fill the SMs and
        // would cost less (64x64 makes 500 tiles at n = 32000, 128x256 one round of 125).
        assert_eq!(gemm_order(16, 4096, 4096, WHOLE, &h200, &group)[0], 2);
        assert_eq!(
            gemm_order(16, 32000, 4096, WHOLE, &h200, &group),
            [2, 0, 1, 3]
        );
        assert_eq!(gemm_order(1, 128256, 4096, WHOLE, &h200, &group)[0], 2);
        // Beyond, it would stream B once per 16 rows: after the other wgmma tiles, still
        // before the mma.sync ones.
        assert_eq!(
            gemm_order(64, 4096, 4096, WHOLE, &h200, &group),
            [1, 0, 2, 3]
        );
        assert_eq!(
            gemm_order(17, 4096, 4096, WHOLE, &h200, &group),
            [1, 0, 2, 3]
        );
        // Large outputs take the largest tile.
        assert_eq!(gemm_order(8192, 8192, 4096, WHOLE, &h200, &group)[0], 0);
    }

    #[test]
    fn the_cost_model_picks_what_the_h200_measured_fastest() {
        let h200 = device(9, 0, 132);
        // The default library's bf16 nn wgmma tiles, in its listed order (split K: 128x64 in
        // clusters of 2), and one mma.sync tile.
        let group: Vec<GemmOption> = [
            ((16, 64), 1, true),
            ((16, 128), 1, true),
            ((64, 64), 1, true),
            ((128, 64), 1, true),
            ((128, 64), 2, true),
            ((64, 128), 1, true),
            ((64, 192), 1, true),
            ((128, 128), 1, false),
            ((128, 128), 1, true),
            ((128, 256), 1, true),
        ]
        .map(|(tile, split_k, tensor_maps)| GemmOption {
            tile,
            tensor_maps,
            runs: true,
            split_k,
        })
        .to_vec();
        let first = |m, n, k| group[gemm_order(m, n, k, WHOLE, &h200, &group)[0]];
        // The fastest member that `tilegen tune` measured for gemm_nn_bf16 at each shape
        // (bench/results/2026-12-04-h200-tune-retune-2.tar.xz and the files that
        // bench/tuning-lookup/rules_cost.py reads beside it). At six of these shapes
        // tile_order's pick took 1.15-1.91x as long.
        let tile = |t: (u32, u32), split_k| (t, split_k);
        for ((m, n, k), want) in [
            ((16, 11008, 4096), tile((16, 128), 1)),
            ((48, 4096, 14336), tile((128, 64), 2)),
            ((96, 14336, 4096), tile((128, 128), 1)),
            ((128, 11008, 4096), tile((64, 192), 1)),
            ((192, 6144, 4096), tile((64, 192), 1)),
            ((256, 4096, 4096), tile((64, 128), 1)),
            ((1024, 1024, 1024), tile((64, 128), 1)),
            ((4096, 4096, 4096), tile((128, 256), 1)),
        ] {
            let o = first(m, n, k);
            assert!(o.tensor_maps, "{m}x{n}x{k}");
            assert_eq!((o.tile, o.split_k), want, "{m}x{n}x{k}");
        }
        // Short K: at 1000x3000x1000 128x256 makes 96 tiles, one round, and 64x192 makes 256,
        // two; with rows whole lines apart their loads and wgmma work tie, and what each tile
        // costs once decides. Measured (bench/results/2026-12-05-h200-gemm-rules-heldout.txt),
        // 64x192 took 1.16-1.26x as long in each of the 24 methods that have both. There the
        // rows (nn, bf16: 2000 and 6000 bytes) straddle lines, which tips it the same way.
        assert_eq!(first(1000, 3000, 1000).tile, (128, 256));
        let pitches = RowPitches { a: 2000, b: 6000 };
        let o = group[gemm_order(1000, 3000, 1000, pitches, &h200, &group)[0]];
        assert_eq!(o.tile, (128, 256));
        // More SMs, fewer rounds: at 128x5632x4096 64x128 makes 88 tiles, one round on 132
        // SMs; on 66 SMs two, where 64x192 makes 60, one.
        assert_eq!(first(128, 5632, 4096).tile, (64, 128));
        let half = device(9, 0, 66);
        let o = group[gemm_order(128, 5632, 4096, WHOLE, &half, &group)[0]];
        assert_eq!(o.tile, (64, 192));
    }

    /// Tensor-map members that run, from (tile, split_k) pairs, in the listed order.
    fn wgmma_group(members: &[((u32, u32), u32)]) -> Vec<GemmOption> {
        members
            .iter()
            .map(|&(tile, split_k)| GemmOption {
                tile,
                tensor_maps: true,
                runs: true,
                split_k,
            })
            .collect()
    }

    #[test]
    fn the_cost_model_picks_128x192_where_the_h100_measured_it_fastest() {
        let h100 = device(9, 0, 132);
        // The default library's bf16 nn wgmma tiles with 128x192 among them.
        let group = wgmma_group(&[
            ((16, 64), 1),
            ((16, 128), 1),
            ((64, 64), 1),
            ((128, 64), 1),
            ((64, 128), 1),
            ((64, 192), 1),
            ((128, 128), 1),
            ((128, 192), 1),
            ((128, 256), 1),
        ]);
        let first = |m, n, k| group[gemm_order(m, n, k, WHOLE, &h100, &group)[0]].tile;
        // `tilegen tune --dry-run` on an H100, every member of gemm_nn_bf16
        // (bench/results/2026-12-05-h100-gemm-128x192-rules.txt): 128x192 was the fastest
        // here, where the pick without it took 1.11-1.37x as long.
        for (m, n, k) in [
            (903, 3072, 6144),
            (1536, 14336, 4096),
            (384, 13824, 6144),
            (3072, 2048, 4096),
            (256, 11008, 11008),
        ] {
            assert_eq!(first(m, n, k), (128, 192), "{m}x{n}x{k}");
        }
        // And 128x256 stays where it makes whole rounds (measured fastest at the first two).
        for (m, n, k) in [(2048, 2048, 4096), (384, 11008, 4096), (4096, 4096, 4096)] {
            assert_eq!(first(m, n, k), (128, 256), "{m}x{n}x{k}");
        }
    }

    #[test]
    fn the_cost_model_picks_128x160_where_the_h100_measured_it_fastest() {
        let h100 = device(9, 0, 132);
        // The default library's bf16 nt wgmma tiles, 128x96 and 128x160 among them (split K:
        // 128x64 in clusters of 2).
        let group = wgmma_group(&[
            ((16, 64), 1),
            ((16, 128), 1),
            ((64, 64), 1),
            ((128, 64), 1),
            ((128, 64), 2),
            ((64, 128), 1),
            ((64, 192), 1),
            ((128, 96), 1),
            ((128, 128), 1),
            ((128, 160), 1),
            ((128, 192), 1),
            ((128, 256), 1),
        ]);
        let first = |m, n, k| group[gemm_order(m, n, k, WHOLE, &h100, &group)[0]].tile;
        // `tilegen bench` on an H100 beside 128x192 and 128x256
        // (bench/results/2026-12-05-h100-gemm-128x160-nt.txt): 128x160 was the fastest of the
        // three here, 0.88-0.89x 128x192's time.
        for (m, n, k) in [(768, 3072, 8192), (768, 3072, 4096), (384, 13824, 6144)] {
            assert_eq!(first(m, n, k), (128, 160), "{m}x{n}x{k}");
        }
        // Where it was slower (1.07-1.57x the fastest), the cost model keeps the wider tiles.
        for (m, n, k) in [(1536, 14336, 4096), (1024, 3072, 2048), (512, 6144, 8192)] {
            assert_eq!(first(m, n, k), (128, 192), "{m}x{n}x{k}");
        }
        for (m, n, k) in [(640, 5120, 5120), (4096, 4096, 4096), (2048, 2048, 2048)] {
            assert_eq!(first(m, n, k), (128, 256), "{m}x{n}x{k}");
        }
    }

    #[test]
    fn rows_that_straddle_lines_count_their_loads_twice() {
        let h200 = device(9, 0, 132);
        let o = |tile| GemmOption {
            tile,
            tensor_maps: true,
            runs: true,
            split_k: 1,
        };
        let (wide, narrow) = (o((128, 256)), o((64, 192)));
        // 903x3048x6120, A and B stored row-major (nn, bf16): rows 12240 and 6096 bytes apart,
        // neither a whole number of 128-byte lines. Measured there
        // (bench/results/2026-12-05-h200-gemm-rules-heldout.txt), 64x192 took 1.30-1.51x the
        // time of 128x256 in every method; with whole lines the model had them within 1 %.
        let ragged = RowPitches { a: 12240, b: 6096 };
        let cost = |p, t| wgmma_cost(903, 3048, 6120, p, 132, t);
        assert!(cost(ragged, &wide) < cost(ragged, &narrow));
        assert_eq!(
            gemm_order(903, 3048, 6120, ragged, &h200, &[narrow, wide]),
            [1, 0]
        );
        assert_eq!(
            gemm_order(903, 3048, 6120, WHOLE, &h200, &[narrow, wide]),
            [0, 1]
        );
        // Each operand counts on its own, and whole lines cost what they did.
        let a_only = RowPitches { a: 12240, b: 6144 };
        assert!(cost(WHOLE, &wide) < cost(a_only, &wide));
        assert!(cost(a_only, &wide) < cost(ragged, &wide));
        assert_eq!(
            cost(RowPitches { a: 128, b: 256 }, &wide),
            cost(WHOLE, &wide)
        );
        // The pitches of a call, in bytes: elements of the buffers' size.
        let (a, b) = (bf16("a", 903 * 6120, 0), bf16("b", 6120 * 3048, 0));
        assert_eq!(RowPitches::of(&a, 6120, &b, 3048), ragged);
    }

    #[test]
    fn the_cost_model_saturates_instead_of_overflowing() {
        let o = GemmOption {
            tile: (16, 64),
            tensor_maps: true,
            runs: true,
            split_k: 2,
        };
        let big = usize::MAX;
        assert_eq!(wgmma_cost(big, big, big, WHOLE, 132, &o), u64::MAX);
        // No SMs (an unreadable device) and a zero tile still order instead of dividing by 0.
        let zero = GemmOption {
            tile: (0, 0),
            split_k: 0,
            ..o
        };
        assert!(wgmma_cost(128, 128, 128, WHOLE, 0, &zero) > 0);
        let huge = GemmOption {
            tile: (u32::MAX, u32::MAX),
            ..o
        };
        assert_eq!(wgmma_cost(1, 1, 1, WHOLE, 132, &huge), u64::MAX);
        let odd = RowPitches {
            a: u64::MAX,
            b: u64::MAX,
        };
        assert_eq!(wgmma_cost(1, 1, 1, odd, 132, &huge), u64::MAX);
    }

    fn bf16(arg: &'static str, len: usize, address: u64) -> Buf {
        Buf::of::<u16>(arg, len, address)
    }

    #[test]
    fn persistent_gemm_checks_as_the_tiled_one() {
        let needs = GemmNeeds {
            align: 16,
            ld_in_multiple: 8,
            ld_out_multiple: 8,
            m_multiple: 1,
            n_multiple: 1,
            k_multiple: 1,
        };
        let base = 0x7f00_0000_0010; // 16-byte but not 128-byte aligned
        let call = |m: usize, n: usize, k: usize, lda: usize| GemmCall {
            m,
            n,
            k,
            a: Matrix {
                buf: bf16("a", m * lda, base),
                ld: lda,
                transposed: false,
            },
            b: Matrix {
                buf: bf16("b", k * n, base),
                ld: n,
                transposed: false,
            },
            c: None,
            d: Matrix {
                buf: bf16("d", m * n, base),
                ld: n,
                transposed: false,
            },
            bias: None,
        };
        let p = |c: &GemmCall| gemm_persistent(c, &needs, (128, 256), 1, 1, 132, 384, 200_000);
        let dims = p(&call(8192, 8192, 8192, 8192)).unwrap().unwrap();
        assert_eq!(dims.grid, (132, 1, 1));
        assert_eq!(dims.block, (384, 1, 1));
        assert_eq!(dims.shared_bytes, 200_000);
        assert_eq!(p(&call(129, 264, 72, 80)).unwrap().unwrap().grid.0, 4);
        assert_eq!(p(&call(0, 264, 72, 80)).unwrap(), None);
        assert!(matches!(
            p(&call(129, 264, 72, 76)),
            Err(ArgError::NotMultiple { what: "lda", .. })
        ));
        let mut short = call(129, 264, 72, 80);
        short.d.buf.len -= 1;
        assert!(matches!(
            p(&short),
            Err(ArgError::TooShort { arg: "d", .. })
        ));
    }
}
