//! Tensor maps (TMA descriptors) of the kernels that take them: the rule the kernel table
//! carries for each map parameter (which pointer argument it covers, where its dims come from,
//! which size arguments give its strides, box, swizzle, interleave, L2 promotion, out-of-bounds fill), and the
//! pure part of encoding one for a call: every limit `cuTensorMapEncodeTiled` puts on its
//! arguments, checked here so that a call the driver would refuse is refused before anything
//! launches, with the argument named. Standard library only; the driver call itself is in the
//! `cuda` feature (`loader::encode_tensor_map`).

use crate::launch_rules::ArgError;
use crate::loader::{Device, Version};

/// Most dimensions a tiled map may have.
pub const MAX_RANK: usize = 5;
/// Largest box extent per dimension, in elements.
pub const MAX_BOX: u32 = 256;
/// Largest global dimension (`cuTensorMapEncodeTiled`: at most 2^32).
pub const MAX_DIM: u64 = 1 << 32;
/// Global strides are below this many bytes.
pub const STRIDE_LIMIT: u64 = 1 << 40;
/// The first CUDA version whose driver has `cuTensorMapEncodeTiled`.
pub const MIN_DRIVER: Version = Version::new(12, 0);

/// Element type of a map (`CUtensorMapDataType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapDtype {
    F16,
    Bf16,
    F32,
}

impl MapDtype {
    pub const fn bytes(self) -> u64 {
        match self {
            MapDtype::F16 | MapDtype::Bf16 => 2,
            MapDtype::F32 => 4,
        }
    }
}

/// `CUtensorMapSwizzle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Swizzle {
    None,
    B32,
    B64,
    B128,
}

impl Swizzle {
    /// Bytes of the swizzle pattern's span: a box's inner extent must fit in it.
    pub const fn span(self) -> Option<u64> {
        match self {
            Swizzle::None => None,
            Swizzle::B32 => Some(32),
            Swizzle::B64 => Some(64),
            Swizzle::B128 => Some(128),
        }
    }
}

/// `CUtensorMapInterleave`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Interleave {
    None,
    B16,
    B32,
}

/// `CUtensorMapL2promotion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L2Promotion {
    None,
    B64,
    B128,
    B256,
}

/// `CUtensorMapFloatOOBfill`: `Zero` is FLOAT_OOB_FILL_NONE (elements outside the tensor
/// read as zero), `Nan` is FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OobFill {
    Zero,
    Nan,
}

/// A size argument of the call: its index in the kernel's `args` and its name (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeArg {
    pub arg: usize,
    pub name: &'static str,
}

/// Where one dim of a map comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapDim {
    /// A size argument of the call.
    Arg(SizeArg),
    /// A constant extent, the same for every call: a size the kernel was compiled for
    /// (attention's head_dim).
    Const(u64),
}

impl MapDim {
    /// What a message calls the dim.
    pub const fn name(&self) -> &'static str {
        match self {
            MapDim::Arg(a) => a.name,
            MapDim::Const(_) => "constant tensor-map dim",
        }
    }
}

/// How to encode one tensor-map parameter from a call's arguments, as the kernel table
/// carries it. Argument indices count the kernel's `args` (the parameters after the maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorMapRule {
    /// The kernel parameter's name.
    pub name: &'static str,
    /// The pointer argument whose memory the map covers: its index and name.
    pub tensor: SizeArg,
    pub dtype: MapDtype,
    /// Dims, innermost (contiguous) first.
    pub dims: &'static [MapDim],
    /// Strides of dims 1.., in elements, each a size argument.
    pub strides: &'static [SizeArg],
    /// Box extents in elements, innermost first.
    pub box_dims: &'static [u32],
    pub swizzle: Swizzle,
    pub interleave: Interleave,
    pub l2_promotion: L2Promotion,
    /// The promotion to use instead where the rows are not whole 128-byte lines apart (the
    /// first stride, in bytes, no multiple of 128); None: `l2_promotion` always.
    pub l2_promotion_straddling: Option<L2Promotion>,
    pub oob_fill: OobFill,
}

/// The tensor-map parameters of one kernel of the table, in parameter order (before its
/// `args`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelMaps {
    /// Index of the kernel in the library's kernel table.
    pub kernel: usize,
    pub maps: &'static [TensorMapRule],
}

/// Everything `cuTensorMapEncodeTiled` takes for one map of one call, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TiledMap {
    pub dtype: MapDtype,
    pub address: u64,
    pub rank: usize,
    /// Dims (elements), innermost first; `rank` of them are used.
    pub dims: [u64; MAX_RANK],
    /// Strides of dims 1.. in bytes; `rank - 1` are used.
    pub strides: [u64; MAX_RANK - 1],
    pub box_dims: [u32; MAX_RANK],
    pub swizzle: Swizzle,
    pub interleave: Interleave,
    pub l2_promotion: L2Promotion,
    pub oob_fill: OobFill,
}

fn out_of_range(what: &'static str, value: u64, min: u64, max: u64) -> ArgError {
    ArgError::OutOfRange {
        what,
        value,
        min,
        max,
    }
}

/// A rule that is malformed (the table's fault, not the call's): a generated table never has
/// one, a hand-written one might; refused rather than passed to the driver.
fn bad_rule() -> ArgError {
    ArgError::NoInstance {
        op: "tensor-map",
        reason: "for this call: the kernel table's tensor-map rule is malformed",
    }
}

impl TensorMapRule {
    /// Whether the rule is one `cuTensorMapEncodeTiled` can take for some call: rank 1..=5
    /// (3.. with interleave), constant dims 1..=2^32, one stride per dim after the first, box
    /// extents 1..=256, the box's inner row a multiple of 16 bytes and, with a swizzle, within
    /// its span.
    pub fn is_sound(&self) -> bool {
        let rank = self.dims.len();
        let inner = self
            .box_dims
            .first()
            .map_or(0, |&b| b as u64 * self.dtype.bytes());
        (1..=MAX_RANK).contains(&rank)
            && (self.interleave == Interleave::None || rank >= 3)
            && self
                .dims
                .iter()
                .all(|d| !matches!(d, MapDim::Const(v) if !(1..=MAX_DIM).contains(v)))
            && self.strides.len() + 1 == rank
            && self.box_dims.len() == rank
            && self.box_dims.iter().all(|b| (1..=MAX_BOX).contains(b))
            && (self.interleave != Interleave::None || inner.is_multiple_of(16))
            && (self.interleave != Interleave::None
                || self.swizzle.span().is_none_or(|span| inner <= span))
    }

    /// The map for a call whose argument values (device addresses and sizes, in the kernel's
    /// `args` order; anything else may be 0) are `values`, or why the driver would refuse it:
    /// the tensor's address 16-byte aligned (32 with 32-byte interleave), every dim 1..=2^32, every
    /// stride a multiple of 16 bytes (32 with 32-byte interleave) and below 2^40 bytes.
    /// Strides need not grow with the dim: a `[batch, seq, heads, d]` tensor mapped as
    /// `[d, seq, heads, batch]` has a head stride below the seq extent, and a packed batch a
    /// batch stride of 0; the H200's driver encodes both (`bench/flash-attn/NOTES.md`). That
    /// the map stays inside the buffer is the call's checks' job, as for the kernel's own
    /// pointer arithmetic.
    pub fn resolve(&self, values: &[u64]) -> Result<TiledMap, ArgError> {
        if !self.is_sound() {
            return Err(bad_rule());
        }
        let value = |a: &SizeArg| values.get(a.arg).copied().ok_or_else(bad_rule);
        let esize = self.dtype.bytes();
        let align = if self.interleave == Interleave::B32 {
            32
        } else {
            16
        };
        let address = value(&self.tensor)?;
        crate::launch_rules::check_aligned(self.tensor.name, address, align)?;
        let mut map = TiledMap {
            dtype: self.dtype,
            address,
            rank: self.dims.len(),
            dims: [1; MAX_RANK],
            strides: [0; MAX_RANK - 1],
            box_dims: [1; MAX_RANK],
            swizzle: self.swizzle,
            interleave: self.interleave,
            l2_promotion: self.l2_promotion,
            oob_fill: self.oob_fill,
        };
        for (i, d) in self.dims.iter().enumerate() {
            let v = match d {
                MapDim::Arg(a) => value(a)?,
                MapDim::Const(v) => *v,
            };
            if !(1..=MAX_DIM).contains(&v) {
                return Err(out_of_range(d.name(), v, 1, MAX_DIM));
            }
            map.dims[i] = v;
            map.box_dims[i] = self.box_dims[i];
        }
        for (i, s) in self.strides.iter().enumerate() {
            let elems = value(s)?;
            let bytes = elems.saturating_mul(esize);
            let per = align / esize;
            if bytes >= STRIDE_LIMIT {
                return Err(out_of_range(s.name, elems, 0, (STRIDE_LIMIT - 1) / esize));
            }
            crate::launch_rules::check_multiple(s.name, elems, per)?;
            map.strides[i] = bytes;
        }
        if let Some(p) = self.l2_promotion_straddling {
            if map.rank > 1 && !map.strides[0].is_multiple_of(crate::call_checks::RowPitches::LINE)
            {
                map.l2_promotion = p;
            }
        }
        Ok(map)
    }
}

/// Resolves every map of a kernel for a call ([`TensorMapRule::resolve`]), in order.
pub fn resolve_all(rules: &[TensorMapRule], values: &[u64]) -> Result<Vec<TiledMap>, ArgError> {
    rules.iter().map(|r| r.resolve(values)).collect()
}

/// Whether a device's driver can encode tensor maps (`cuTensorMapEncodeTiled` came with CUDA
/// 12.0; an unknown driver version is taken as unable, so nothing calls a missing symbol).
pub fn driver_encodes(device: &Device) -> bool {
    device.driver.is_some_and(|v| v >= MIN_DRIVER)
}

/// The rules of kernel `kernel` in a library's table of maps (empty when it takes none).
pub fn maps_of(table: &'static [KernelMaps], kernel: usize) -> &'static [TensorMapRule] {
    table
        .iter()
        .find(|k| k.kernel == kernel)
        .map_or(&[], |k| k.maps)
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn arg(arg: usize, name: &'static str) -> SizeArg {
        SizeArg { arg, name }
    }

    // A bf16 "nn" GEMM's A (m×k row-major): args a, b, d, m, n, k, lda, ldb, ldd.
    const A: TensorMapRule = TensorMapRule {
        name: "a_map",
        tensor: arg(0, "a"),
        dtype: MapDtype::Bf16,
        dims: &[MapDim::Arg(arg(5, "k")), MapDim::Arg(arg(3, "m"))],
        strides: &[arg(6, "lda")],
        box_dims: &[64, 128],
        swizzle: Swizzle::B128,
        interleave: Interleave::None,
        l2_promotion: L2Promotion::B256,
        l2_promotion_straddling: None,
        oob_fill: OobFill::Zero,
    };

    fn values(a: u64, m: u64, k: u64, lda: u64) -> [u64; 9] {
        [a, 0x2000, 0x3000, m, 64, k, lda, 64, 64]
    }

    #[test]
    fn resolves_a_call() {
        let t = A.resolve(&values(0x1_0010, 129, 72, 80)).unwrap();
        assert_eq!(t.address, 0x1_0010);
        assert_eq!(t.rank, 2);
        assert_eq!(&t.dims[..2], &[72, 129]);
        assert_eq!(t.strides[0], 160);
        assert_eq!(&t.box_dims[..2], &[64, 128]);
        // Dims of 1 and the largest are fine; a 16-byte but not 128-byte aligned base too.
        assert!(A.resolve(&values(0x1_0010, 1, 8, 8)).is_ok());
        assert!(A.resolve(&values(0x1_0000, 1 << 32, 8, 8)).is_ok());
    }

    #[test]
    fn refuses_what_the_driver_would() {
        // Misaligned base.
        assert_eq!(
            A.resolve(&values(0x1_0008, 16, 16, 16)),
            Err(ArgError::Misaligned {
                arg: "a",
                address: 0x1_0008,
                align: 16
            })
        );
        // A zero dim (k = 0): TMA has no empty tensors.
        assert!(matches!(
            A.resolve(&values(0x1_0000, 16, 0, 16)),
            Err(ArgError::OutOfRange {
                what: "k",
                value: 0,
                ..
            })
        ));
        assert!(matches!(
            A.resolve(&values(0x1_0000, (1 << 32) + 1, 16, 16)),
            Err(ArgError::OutOfRange { what: "m", .. })
        ));
        // Stride not a multiple of 16 bytes (8 bf16), too large.
        assert!(matches!(
            A.resolve(&values(0x1_0000, 16, 16, 20)),
            Err(ArgError::NotMultiple {
                what: "lda",
                value: 20,
                of: 8
            })
        ));
        // A stride below the row's extent is the driver's to take (the GEMM's own checks
        // refuse lda < k before a map is made).
        assert!(A.resolve(&values(0x1_0000, 16, 24, 16)).is_ok());
        assert!(matches!(
            A.resolve(&values(0x1_0000, 2, 16, 1 << 39)),
            Err(ArgError::OutOfRange { what: "lda", .. })
        ));
        // Too few values for the rule's indices: the table's fault, refused, no panic.
        assert!(A.resolve(&[0x1_0000]).is_err());
    }

    // An attention kernel's K (bf16, head_dim 128, laid out batch × heads × seq × head_dim):
    // args q, k, v, o, seq_q, seq_kv, heads_q, heads_kv, k_ss, k_hs, k_bs, batch; head_dim is
    // the kernel's constant.
    const K: TensorMapRule = TensorMapRule {
        name: "k_map",
        tensor: arg(1, "k"),
        dtype: MapDtype::Bf16,
        dims: &[
            MapDim::Const(128),
            MapDim::Arg(arg(5, "seq_kv")),
            MapDim::Arg(arg(7, "heads_kv")),
            MapDim::Arg(arg(11, "batch")),
        ],
        strides: &[arg(8, "k_ss"), arg(9, "k_hs"), arg(10, "k_bs")],
        box_dims: &[64, 64, 1, 1],
        swizzle: Swizzle::B128,
        interleave: Interleave::None,
        l2_promotion: L2Promotion::B256,
        l2_promotion_straddling: None,
        oob_fill: OobFill::Zero,
    };

    /// K's argument values for `seq_kv` keys over `heads` heads and `batch` entries, packed.
    fn k_values(seq_kv: u64, heads: u64, batch: u64) -> [u64; 12] {
        let (q, k, v, o) = (0x1000, 0x2000, 0x3000, 0x4000);
        let (ss, hs, bs) = (128, 128 * seq_kv, 128 * seq_kv * heads);
        [q, k, v, o, 64, seq_kv, heads, heads, ss, hs, bs, batch]
    }

    #[test]
    fn constant_and_argument_dims() {
        assert!(K.is_sound());
        let t = K.resolve(&k_values(300, 8, 3)).unwrap();
        assert_eq!(t.address, 0x2000);
        assert_eq!(t.rank, 4);
        assert_eq!(&t.dims[..4], &[128, 300, 8, 3]);
        assert_eq!(&t.strides[..3], &[256, 256 * 300, 256 * 300 * 8]);
        assert_eq!(&t.box_dims[..4], &[64, 64, 1, 1]);
        // An empty batch is refused like any empty dim.
        assert_eq!(K.resolve(&k_values(300, 8, 1)).unwrap().dims[3], 1);
        assert_eq!(
            K.resolve(&k_values(300, 8, 0)),
            Err(ArgError::OutOfRange {
                what: "batch",
                value: 0,
                min: 1,
                max: MAX_DIM
            })
        );
        assert!(K.resolve(&k_values(300, 8, MAX_DIM)).is_ok());
        assert!(matches!(
            K.resolve(&k_values(300, 8, MAX_DIM + 1)),
            Err(ArgError::OutOfRange { what: "batch", .. })
        ));
        // The usual [batch, seq, heads, d] layout: the head stride is below the seq extent;
        // and a packed varlen batch has a batch stride of 0. Both encode as given.
        let mut bshd = k_values(300, 8, 2);
        (bshd[8], bshd[9], bshd[10]) = (128 * 8, 128, 0);
        assert_eq!(&K.resolve(&bshd).unwrap().strides[..3], &[2048, 256, 0]);
        // A constant outside 1..=2^32 makes the rule unsound: refused for every call.
        const ONE_STRIDE: &[SizeArg] = &[arg(8, "k_ss")];
        let two_dims = |dims| TensorMapRule {
            dims,
            strides: ONE_STRIDE,
            box_dims: &[64, 1],
            ..K
        };
        const BATCH: MapDim = MapDim::Arg(arg(11, "batch"));
        for dims in [
            &[MapDim::Const(0), BATCH],
            &[MapDim::Const(MAX_DIM + 1), BATCH],
        ] {
            assert!(!two_dims(dims).is_sound());
            assert!(two_dims(dims).resolve(&k_values(300, 8, 1)).is_err());
        }
        let largest = two_dims(&[MapDim::Const(64), MapDim::Const(MAX_DIM)]);
        assert!(largest.is_sound());
        assert_eq!(
            resolve_all(&[K, largest], &k_values(300, 8, 2))
                .unwrap()
                .iter()
                .map(|m| m.dims[1])
                .collect::<Vec<_>>(),
            [300, MAX_DIM]
        );
    }

    #[test]
    fn rows_off_whole_lines_take_the_straddling_promotion() {
        let a = TensorMapRule {
            l2_promotion_straddling: Some(L2Promotion::B128),
            ..A
        };
        // lda 6144 and 64 bf16: 12288 and 128 bytes, whole lines; 6120 and 72 are not.
        for (lda, want) in [
            (6144, L2Promotion::B256),
            (64, L2Promotion::B256),
            (6120, L2Promotion::B128),
            (72, L2Promotion::B128),
        ] {
            let t = a.resolve(&values(0x1_0000, 903, 64, lda)).unwrap();
            assert_eq!(t.l2_promotion, want, "lda {lda}");
        }
        // Without one, the rule's promotion holds at any pitch.
        let t = A.resolve(&values(0x1_0000, 903, 64, 6120)).unwrap();
        assert_eq!(t.l2_promotion, L2Promotion::B256);
    }

    #[test]
    fn unsound_rules_are_refused() {
        assert!(A.is_sound());
        let wide = TensorMapRule {
            box_dims: &[128, 128],
            ..A
        }; // 256 B > 128 B swizzle span
        assert!(!wide.is_sound());
        assert!(TensorMapRule {
            box_dims: &[128, 128],
            swizzle: Swizzle::None,
            ..A
        }
        .is_sound());
        assert!(!TensorMapRule {
            box_dims: &[64, 257],
            ..A
        }
        .is_sound());
        assert!(!TensorMapRule {
            box_dims: &[64, 0],
            ..A
        }
        .is_sound());
        assert!(!TensorMapRule {
            box_dims: &[4, 128],
            ..A
        }
        .is_sound()); // 8 bytes
        assert!(!TensorMapRule { strides: &[], ..A }.is_sound());
        assert!(!TensorMapRule {
            interleave: Interleave::B16,
            ..A
        }
        .is_sound()); // rank 2
        assert!(wide.resolve(&values(0x1_0000, 16, 16, 16)).is_err());
    }

    #[test]
    fn drivers_that_encode() {
        let dev = |driver| Device {
            major: 9,
            minor: 0,
            sm_count: 132,
            driver,
            name: crate::loader::DeviceName::unknown(),
        };
        assert!(driver_encodes(&dev(Some(Version::new(13, 0)))));
        assert!(driver_encodes(&dev(Some(Version::new(12, 0)))));
        assert!(!driver_encodes(&dev(Some(Version::new(11, 8)))));
        assert!(!driver_encodes(&dev(None)));
        static TABLE: &[KernelMaps] = &[KernelMaps {
            kernel: 3,
            maps: &[A],
        }];
        assert_eq!(maps_of(TABLE, 3).len(), 1);
        assert!(maps_of(TABLE, 2).is_empty());
    }
}
