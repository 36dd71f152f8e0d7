//! Launch geometry and argument checks, shared by `tilegen verify`/`bench` and the generated
//! bindings, so the two can never disagree. Standard library only.

/// Largest grid.x a launch may use.
pub const MAX_GRID_X: u64 = (1 << 31) - 1;
/// Grid-stride kernels need no more blocks than this to fill any current GPU many times over.
pub const MAX_STRIDE_BLOCKS: u64 = 1 << 16;
/// Row kernels index columns in 32 bits and step in chunks of up to 2^20: rows are limited to
/// this many columns.
pub const MAX_COLS: u64 = (1 << 31) - (1 << 21);

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

/// A call that would read or write out of bounds, or break a kernel's assumptions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgError {
    /// A buffer holds fewer elements than the call needs.
    TooShort {
        arg: &'static str,
        needed: u64,
        len: u64,
    },
    /// A pointer is not aligned as the kernel's vector accesses need.
    Misaligned {
        arg: &'static str,
        address: u64,
        align: u64,
    },
    /// A size is outside what the kernel supports.
    OutOfRange {
        what: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    /// A size must be a multiple of something (vector width, tile).
    NotMultiple {
        what: &'static str,
        value: u64,
        of: u64,
    },
    /// No instance of the op handles this shape.
    NoInstance {
        op: &'static str,
        reason: &'static str,
    },
    /// An output shares device memory with an input or another output.
    Overlap {
        arg: &'static str,
        other: &'static str,
    },
}

impl core::fmt::Display for ArgError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArgError::TooShort { arg, needed, len } => {
                write!(f, "`{arg}` holds {len} elements but the call needs {needed}")
            }
            ArgError::Misaligned { arg, address, align } => write!(
                f,
                "`{arg}` at address {address:#x} is not {align}-byte aligned (the kernel uses {align}-byte vector accesses)"
            ),
            ArgError::OutOfRange { what, value, min, max } => {
                write!(f, "{what} = {value} is outside the supported range {min}..={max}")
            }
            ArgError::NotMultiple { what, value, of } => {
                write!(f, "{what} = {value} must be a multiple of {of}")
            }
            ArgError::NoInstance { op, reason } => write!(f, "no {op} kernel in this library {reason}"),
            ArgError::Overlap { arg, other } => write!(
                f,
                "`{arg}` overlaps `{other}` in device memory (an output may share memory with no input and no other output)"
            ),
        }
    }
}

impl std::error::Error for ArgError {}

/// Checks that a buffer of `len` elements holds at least `needed`.
pub fn check_len(arg: &'static str, len: usize, needed: u64) -> Result<(), ArgError> {
    if (len as u64) < needed {
        return Err(ArgError::TooShort {
            arg,
            needed,
            len: len as u64,
        });
    }
    Ok(())
}

/// Checks a device address for the alignment of the kernel's vector accesses.
pub fn check_aligned(arg: &'static str, address: u64, align: u64) -> Result<(), ArgError> {
    if align > 1 && !address.is_multiple_of(align) {
        return Err(ArgError::Misaligned {
            arg,
            address,
            align,
        });
    }
    Ok(())
}

pub fn check_range(what: &'static str, value: u64, min: u64, max: u64) -> Result<(), ArgError> {
    if value < min || value > max {
        return Err(ArgError::OutOfRange {
            what,
            value,
            min,
            max,
        });
    }
    Ok(())
}

pub fn check_multiple(what: &'static str, value: u64, of: u64) -> Result<(), ArgError> {
    if of > 1 && !value.is_multiple_of(of) {
        return Err(ArgError::NotMultiple { what, value, of });
    }
    Ok(())
}

/// rows * cols without overflow.
pub fn checked_area(what: &'static str, rows: u64, cols: u64) -> Result<u64, ArgError> {
    rows.checked_mul(cols).ok_or(ArgError::OutOfRange {
        what,
        value: u64::MAX,
        min: 0,
        max: i64::MAX as u64,
    })
}

/// Grid-stride elementwise kernels: one block per `elems_per_block` elements, capped.
pub fn elements_dims(n: u64, elems_per_block: u32, threads: u32) -> LaunchDims {
    strided_dims(n, elems_per_block, MAX_STRIDE_BLOCKS, threads)
}

/// Row kernels: one block per `rows_per_block` rows (the kernels stride over rows beyond the
/// grid).
pub fn rows_dims(rows: u64, rows_per_block: u32, threads: u32) -> LaunchDims {
    strided_dims(rows, rows_per_block, MAX_GRID_X, threads)
}

/// A 1-D grid of one block per `per_block` units, at least 1 and at most `max_blocks`.
fn strided_dims(units: u64, per_block: u32, max_blocks: u64, threads: u32) -> LaunchDims {
    let blocks = units.div_ceil(per_block.max(1) as u64).clamp(1, max_blocks);
    LaunchDims {
        grid: (blocks as u32, 1, 1),
        block: (threads, 1, 1),
        shared_bytes: 0,
    }
}

/// Output tiles of `tile_m`×`tile_n` covering an `m`×`n` output (saturating; a zero tile side
/// counts as 1).
fn output_tiles(m: u64, n: u64, tile_m: u32, tile_n: u32) -> u64 {
    m.div_ceil(tile_m.max(1) as u64)
        .saturating_mul(n.div_ceil(tile_n.max(1) as u64))
}

/// Tiled kernels: one block per output tile, linearised (the kernel orders tiles for L2 reuse).
pub fn tiles_dims(
    m: u64,
    n: u64,
    tile_m: u32,
    tile_n: u32,
    threads: u32,
    shared_bytes: u32,
) -> Result<LaunchDims, ArgError> {
    let tiles = output_tiles(m, n, tile_m, tile_n);
    check_range("number of output tiles", tiles, 1, MAX_GRID_X)?;
    Ok(LaunchDims {
        grid: (tiles as u32, 1, 1),
        block: (threads, 1, 1),
        shared_bytes,
    })
}

/// Persistent tiled kernels: one cluster of `cluster` blocks (along x) per output tile, up to
/// `ctas_per_sm` blocks per SM (each cluster loops over the tiles), so
/// `min(tiles, sm_count * ctas_per_sm / cluster) * cluster` blocks (at least one cluster).
#[allow(clippy::too_many_arguments)]
pub fn persistent_dims(
    m: u64,
    n: u64,
    tile_m: u32,
    tile_n: u32,
    ctas_per_sm: u32,
    cluster: u32,
    sm_count: u32,
    threads: u32,
    shared_bytes: u32,
) -> Result<LaunchDims, ArgError> {
    let tiles = output_tiles(m, n, tile_m, tile_n);
    check_range("number of output tiles", tiles, 1, u64::MAX)?;
    let cluster = cluster.max(1) as u64;
    let resident = (sm_count.max(1) as u64).saturating_mul(ctas_per_sm.max(1) as u64);
    let clusters = tiles
        .min((resident / cluster).max(1))
        .min(MAX_GRID_X / cluster);
    Ok(LaunchDims {
        grid: ((clusters * cluster) as u32, 1, 1),
        block: (threads, 1, 1),
        shared_bytes,
    })
}

/// A persistent grid in clusters of `cluster` blocks held to `held` clusters: how many of the
/// kernel's clusters the device runs at once (cuOccupancyMaxActiveClusters). Clusters do not
/// span a GPC, so that can be fewer than [`persistent_dims`]'s SMs / `cluster` (on an H100 or
/// H200: 39 clusters of 3, not 44; 30 of 4, not 33), and clusters past it would wait for a
/// second round. The kernel loops over its tiles, so fewer clusters still cover them all.
/// Grids without clusters, and a `held` of 0 (the device did not say), are left as they are.
pub fn hold_clusters(dims: LaunchDims, cluster: u32, held: u32) -> LaunchDims {
    if cluster <= 1 || held == 0 {
        return dims;
    }
    let most = held.saturating_mul(cluster);
    LaunchDims {
        grid: (dims.grid.0.min(most), dims.grid.1, dims.grid.2),
        ..dims
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids() {
        assert_eq!(elements_dims(0, 4096, 256).grid.0, 1);
        assert_eq!(elements_dims(4097, 4096, 256).grid.0, 2);
        assert_eq!(
            elements_dims(u64::MAX / 2, 4096, 256).grid.0 as u64,
            MAX_STRIDE_BLOCKS
        );
        assert_eq!(rows_dims(65536, 1, 128).grid.0, 65536);
        assert_eq!(tiles_dims(129, 256, 128, 128, 256, 0).unwrap().grid.0, 4);
        // Persistent: the tiles while fewer than the resident blocks, else the SMs' worth.
        let p = |m, n, sms| persistent_dims(m, n, 128, 256, 1, 1, sms, 384, 1 << 17).unwrap();
        assert_eq!(p(129, 256, 132).grid.0, 2);
        assert_eq!(p(4096, 4096, 132).grid, (132, 1, 1));
        assert_eq!(p(1, 1, 132).grid.0, 1);
        assert_eq!(p(1 << 31, 1 << 31, 132).grid.0, 132);
        assert_eq!(p(4096, 4096, 132).shared_bytes, 1 << 17);
        assert_eq!(
            persistent_dims(4096, 4096, 128, 128, 2, 1, 108, 256, 0)
                .unwrap()
                .grid
                .0,
            216
        );
        assert!(persistent_dims(0, 4096, 128, 256, 1, 1, 132, 384, 0).is_err());
        // Clusters of 2: whole clusters, one per tile up to the SMs' worth (66 on 132 SMs;
        // 65 on 131), and one cluster even on a device with fewer SMs than the cluster.
        let c = |m, n, sms| {
            persistent_dims(m, n, 128, 64, 1, 2, sms, 384, 0)
                .unwrap()
                .grid
                .0
        };
        assert_eq!(c(16, 4096, 132), 128);
        assert_eq!(c(16, 11008, 132), 132);
        assert_eq!(c(16, 11008, 131), 130);
        assert_eq!(c(1, 1, 132), 2);
        assert_eq!(c(4096, 4096, 1), 2);
        // Held to the clusters the device runs at once, in whole clusters; a grid already
        // under it, one without clusters and an unknown count are left alone.
        let three = persistent_dims(16, 11008, 16, 128, 1, 3, 132, 384, 0).unwrap();
        assert_eq!(three.grid.0, 132);
        assert_eq!(hold_clusters(three, 3, 39).grid.0, 117);
        assert_eq!(hold_clusters(three, 3, 50).grid.0, 132);
        assert_eq!(hold_clusters(three, 3, 0).grid.0, 132);
        let one = persistent_dims(4096, 4096, 128, 256, 1, 1, 132, 384, 0).unwrap();
        assert_eq!(hold_clusters(one, 1, 7), one);
    }

    #[test]
    fn checks() {
        assert!(check_len("x", 10, 11).is_err());
        assert!(check_len("x", 11, 11).is_ok());
        assert!(check_aligned("x", 0x1008, 16).is_err());
        assert!(check_aligned("x", 0x1010, 16).is_ok());
        assert!(check_multiple("k", 12, 8).is_err());
        assert!(checked_area("rows*cols", u64::MAX, 2).is_err());
    }
}
