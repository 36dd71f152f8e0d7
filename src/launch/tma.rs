//! Tensor-memory-accelerator (TMA) descriptors as the manifest states them: which kernel
//! parameters are `CUtensorMap`s and how a host encodes each one
//! (`cuTensorMapEncodeTiled`) from the call's own arguments, so that a host in any language
//! can launch a TMA kernel from `manifest.json` alone.

use serde::{Deserialize, Serialize};

use crate::spec::model::DType;

/// Bytes of one encoded map (`CUtensorMap`), passed by value as a kernel parameter.
pub const TENSOR_MAP_BYTES: u32 = 128;
/// Alignment of a map parameter: CUDA 13's `cuda.h` declares `CUtensorMap` 128-byte aligned
/// (64 before 13.0), and the kernel's stand-in type matches, so a host places each map
/// parameter at a multiple of this in the parameter buffer.
pub const TENSOR_MAP_ALIGN: u32 = 128;

macro_rules! map_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str { match self { $($name::$variant => $text),+ } }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.pad(self.as_str()) }
        }
    };
}

map_enum!(
    /// `CUtensorMapSwizzle`: NONE, 32B, 64B, 128B.
    Swizzle { None = "none", B32 = "32b", B64 = "64b", B128 = "128b" }
);
map_enum!(
    /// `CUtensorMapInterleave`: NONE, 16B, 32B.
    Interleave { None = "none", B16 = "16b", B32 = "32b" }
);
map_enum!(
    /// `CUtensorMapL2promotion`: NONE, L2_64B, L2_128B, L2_256B.
    L2Promotion { None = "none", B64 = "64b", B128 = "128b", B256 = "256b" }
);
map_enum!(
    /// `CUtensorMapFloatOOBfill`: `zero` = FLOAT_OOB_FILL_NONE (out-of-bounds elements read
    /// as zero), `nan` = FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA.
    OobFill { Zero = "zero", Nan = "nan" }
);

/// One tensor-map kernel parameter. Strides name the call's size arguments (`lda`, ...) and
/// dims mostly do (`m`, `n`, `k`, ...), so the host computes them per call: `dims` innermost
/// (contiguous) first, `strides` for dims 1.. in elements (bytes = value × dtype size);
/// element strides are all 1; the map's base address is the pointer argument `tensor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMap {
    /// Kernel parameter name.
    pub name: String,
    /// The pointer argument (in `args`) whose memory the map covers.
    pub tensor: String,
    pub dtype: DType,
    /// Each dim is one of ([`dim_source`]): the name of an i64 size argument, or a decimal
    /// literal in 1..=2^32, a constant extent (`"128"`).
    pub dims: Vec<String>,
    /// Each a name of an i64 size argument.
    pub strides: Vec<String>,
    /// Box size in elements per dim, innermost first.
    #[serde(rename = "box")]
    pub box_dims: Vec<u32>,
    pub swizzle: Swizzle,
    pub interleave: Interleave,
    pub l2_promotion: L2Promotion,
    /// The promotion to use instead where the map's rows are not whole 128-byte lines apart
    /// (its first stride, in bytes, no multiple of 128); absent: `l2_promotion` always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_promotion_straddling: Option<L2Promotion>,
    pub oob_fill: OobFill,
}

/// What one entry of [`TensorMap::dims`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DimSource<'a> {
    /// The size argument of this name.
    Arg(&'a str),
    /// A constant extent, 1..=2^32.
    Const(u64),
}

/// Reads one `dims` entry: a literal (an entry that starts with a digit or a sign: digits
/// only, no leading zero, 1..=2^32, else an error saying why), or else the name of a size
/// argument (whether the instance has one is the caller's to check). A literal has one
/// spelling so that a manifest's maps compare equal exactly when they mean the same.
pub fn dim_source(dim: &str) -> Result<DimSource<'_>, String> {
    if !dim.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-') {
        return Ok(DimSource::Arg(dim));
    }
    let max = crate::tensor_map::MAX_DIM;
    if !dim.bytes().all(|b| b.is_ascii_digit()) || (dim.starts_with('0') && dim != "0") {
        return Err("is not a plain decimal extent (digits only, no sign or leading zero)".into());
    }
    match dim.parse::<u64>() {
        Ok(v) if (1..=max).contains(&v) => Ok(DimSource::Const(v)),
        _ => Err(format!("is outside 1..={max}")),
    }
}

/// A `dims` entry of an instance: [`dim_source`], its error a phrase that follows "dims" in a
/// message (`` `0` is outside 1..=… ``).
pub fn instance_dim(dim: &str) -> Result<DimSource<'_>, String> {
    dim_source(dim).map_err(|why| format!("`{}` {why}", crate::escape::shown_prefix(dim, 80)))
}

impl TensorMap {
    /// A 2-D map over `tensor`: `dims = [inner, outer]`, one stride (the outer dim's), 128-byte
    /// swizzle, no interleave, 256-byte L2 promotion, zero fill.
    pub fn tiled_2d(
        name: &str,
        tensor: &str,
        dtype: DType,
        dims: [&str; 2],
        stride: &str,
        box_dims: [u32; 2],
        swizzle: Swizzle,
    ) -> TensorMap {
        TensorMap {
            name: name.into(),
            tensor: tensor.into(),
            dtype,
            dims: dims.iter().map(|d| d.to_string()).collect(),
            strides: vec![stride.into()],
            box_dims: box_dims.to_vec(),
            swizzle,
            interleave: Interleave::None,
            l2_promotion: L2Promotion::B256,
            l2_promotion_straddling: None,
            oob_fill: OobFill::Zero,
        }
    }

    /// The C parameter declaration in the kernel's signature.
    pub fn c_decl(&self) -> String {
        format!("const __grid_constant__ TgTensorMap {}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_with_the_manifest_names() {
        let m = TensorMap::tiled_2d(
            "a_map",
            "a",
            DType::Bf16,
            ["k", "m"],
            "lda",
            [64, 128],
            Swizzle::B128,
        );
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "name": "a_map", "tensor": "a", "dtype": "bf16", "dims": ["k", "m"],
                "strides": ["lda"], "box": [64, 128], "swizzle": "128b", "interleave": "none",
                "l2_promotion": "256b", "oob_fill": "zero"
            })
        );
        let back: TensorMap = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        for s in Swizzle::ALL {
            let j = serde_json::to_string(s).unwrap();
            assert_eq!(j, format!("\"{}\"", s.as_str()));
        }
    }

    #[test]
    fn dims_are_arguments_or_constants() {
        assert_eq!(dim_source("seq_kv"), Ok(DimSource::Arg("seq_kv")));
        assert_eq!(dim_source("batch"), Ok(DimSource::Arg("batch")));
        assert_eq!(dim_source("128"), Ok(DimSource::Const(128)));
        assert_eq!(dim_source("1"), Ok(DimSource::Const(1)));
        assert_eq!(dim_source("4294967296"), Ok(DimSource::Const(1 << 32)));
        for bad in ["0", "4294967297", "99999999999999999999999"] {
            assert!(
                dim_source(bad).unwrap_err().contains("outside 1..="),
                "{bad}"
            );
        }
        for bad in ["0128", "+128", "-1", "12a", "1_024", "00"] {
            assert!(
                dim_source(bad).unwrap_err().contains("plain decimal"),
                "{bad}"
            );
        }
    }
}
