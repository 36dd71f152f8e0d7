//! The vocabulary of specs (dtypes, archs, ops, epilogues) and the resolved kernel instance
//! that everything after parsing works on.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str { match self { $($name::$variant => $text),+ } }
            pub fn parse(s: &str) -> Option<Self> { match s { $($text => Some($name::$variant),)+ _ => None } }
            /// The accepted spellings, for error messages.
            pub fn choices() -> String { [$($text),+].join(", ") }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.pad(self.as_str()) }
        }
    };
}

keyword_enum!(
    /// Element types.
    DType { F32 = "f32", F16 = "f16", Bf16 = "bf16" }
);

impl DType {
    pub fn size(self) -> u32 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }
    /// Elements in one 16-byte vector access.
    pub fn per_16_bytes(self) -> u32 {
        16 / self.size()
    }
    /// The C type the templates use (defined by the prelude, no toolkit header needed).
    pub fn c_type(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "tg_f16",
            DType::Bf16 => "tg_bf16",
        }
    }
    /// The Rust element type in generated bindings.
    pub fn rust_type(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "half::f16",
            DType::Bf16 => "half::bf16",
        }
    }
    /// The oldest arch that has the type in hardware.
    pub fn min_sm(self) -> u32 {
        match self {
            DType::Bf16 => 80,
            _ => 70,
        }
    }
}

keyword_enum!(
    /// Target GPU architectures: the closed set tilegen compiles for, with what it plans by
    /// (shared memory, dtypes). The runtime names archs as `loader::Sm`, an open set parsed
    /// from the bindings' `arch: "sm_90a"` strings, because a library (or bundle) made by a
    /// newer tilegen may name archs this one does not know; `Sm::from(arch)` is the one
    /// conversion between the two.
    Arch { Sm70 = "sm_70", Sm75 = "sm_75", Sm80 = "sm_80", Sm86 = "sm_86", Sm89 = "sm_89", Sm90 = "sm_90", Sm90a = "sm_90a" }
);

impl std::str::FromStr for Arch {
    type Err = String;
    /// Parses `sm_90` and the like; the error lists the accepted names.
    fn from_str(s: &str) -> Result<Self, String> {
        Arch::parse(s)
            .ok_or_else(|| format!("unknown arch `{s}` (expected one of: {})", Arch::choices()))
    }
}

impl From<Arch> for tilegen_runtime::loader::Sm {
    /// The runtime's name for the arch: what it parses from `arch.as_str()` in the bindings.
    fn from(arch: Arch) -> Self {
        tilegen_runtime::loader::Sm {
            major: arch.sm() / 10,
            minor: arch.sm() % 10,
            arch_specific: arch == Arch::Sm90a,
        }
    }
}

impl Arch {
    /// Compute capability as major*10+minor.
    pub fn sm(self) -> u32 {
        match self {
            Arch::Sm70 => 70,
            Arch::Sm75 => 75,
            Arch::Sm80 => 80,
            Arch::Sm86 => 86,
            Arch::Sm89 => 89,
            Arch::Sm90 | Arch::Sm90a => 90,
        }
    }
    /// Largest shared memory one block may opt into, in bytes (CUDA programming guide,
    /// compute capabilities table).
    pub fn max_shared_per_block(self) -> u32 {
        match self {
            Arch::Sm70 => 96 * 1024,
            Arch::Sm75 => 64 * 1024,
            Arch::Sm80 => 163 * 1024,
            Arch::Sm86 | Arch::Sm89 => 99 * 1024,
            Arch::Sm90 | Arch::Sm90a => 227 * 1024,
        }
    }
}

keyword_enum!(
    /// The ops a spec can ask for.
    Op {
        VectorAdd = "vector_add",
        Fma = "fma",
        Softmax = "softmax",
        LayerNorm = "layernorm",
        RmsNorm = "rmsnorm",
        Gemm = "gemm",
        AddRmsNorm = "add_rmsnorm",
        Attention = "attention",
        SiluMul = "silu_mul",
    }
);

/// Op families: the ops of one family share a module under `ops/` (checks, signature, launch
/// rule, template values), a shape of call (size arguments) and how the bindings check a call
/// and pick among instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Flat tensors of `n` elements (vector_add, fma, silu_mul).
    Elements,
    /// A `rows`×`cols` tensor, one row per block (softmax, layernorm, rmsnorm, add_rmsnorm).
    Rows,
    /// Tiled matrix products (gemm).
    Gemm,
    /// Attention over (batch, heads, sequence) with per-tensor strides.
    Attention,
}

impl Op {
    /// The family the op belongs to (the one place that says so).
    pub fn family(self) -> Family {
        match self {
            Op::VectorAdd | Op::Fma | Op::SiluMul => Family::Elements,
            Op::Softmax | Op::LayerNorm | Op::RmsNorm | Op::AddRmsNorm => Family::Rows,
            Op::Gemm => Family::Gemm,
            Op::Attention => Family::Attention,
        }
    }
}

keyword_enum!(
    /// Steps of a fused epilogue chain, applied in order to each output value in registers.
    Epilogue {
        Scale = "scale",
        Bias = "bias",
        Relu = "relu",
        Gelu = "gelu",
        GeluErf = "gelu_erf",
        Silu = "silu",
        Residual = "residual",
    }
);

keyword_enum!(
    /// How a row op holds its row: in registers (`onepass`), staged through shared memory by
    /// cp.async so many rows are in flight per SM without register cost (`staged`, sm_80+), or
    /// streamed in chunks for rows of any length (`online`, softmax only).
    RowVariant { OnePass = "onepass", Staged = "staged", Online = "online" }
);

keyword_enum!(
    /// GEMM operand layouts: first letter A, second B; n = row-major (not transposed),
    /// t = column-major (transposed), BLAS-style.
    Layout { Nn = "nn", Nt = "nt", Tn = "tn", Tt = "tt" }
);

keyword_enum!(
    /// How a GEMM computes on tensor cores: `mma_sync` (warp-level mma.sync from cp.async
    /// stages, every arch from sm_80) or `wgmma` (sm_90a only: TMA loads, warpgroup MMA,
    /// warp-specialized persistent blocks).
    Engine { MmaSync = "mma_sync", Wgmma = "wgmma" }
);

impl Layout {
    /// A is stored transposed (K×M, column-major A).
    pub fn a_transposed(self) -> bool {
        matches!(self, Layout::Tn | Layout::Tt)
    }
    /// B is stored transposed (N×K, column-major B).
    pub fn b_transposed(self) -> bool {
        matches!(self, Layout::Nt | Layout::Tt)
    }
}

/// Op parameters after validation. Which are set depends on the op; unset ones are omitted
/// from the manifest and the template context.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Params {
    /// Threads per block (elementwise, row ops).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub block: Option<u32>,
    /// 16-byte vectors each thread handles per row (row ops) or per loop trip (elementwise).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub items: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub variant: Option<RowVariant>,
    /// Norms: apply weight (and bias for layernorm).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub affine: Option<bool>,
    /// GEMM block tile [m, n, k].
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tile: Option<[u32; 3]>,
    /// GEMM warp tile [m, n].
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub warp: Option<[u32; 2]>,
    /// Shared-memory depth: a GEMM's copy pipeline, or a staged row op's ring of rows.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stages: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub layout: Option<Layout>,
    /// f32 GEMM on TF32 tensor cores instead of the SIMT path.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tf32: Option<bool>,
    /// GEMM engine; unset means `mma_sync` (the default is never stored, so instances that
    /// do not ask for an engine keep their names and hashes).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub engine: Option<Engine>,
    /// Attention: the head dimension of q, k, v and o.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub head_dim: Option<u32>,
    /// Attention: bottom-right aligned causal mask.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub causal: Option<bool>,
    /// Attention: query rows per block.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tile_q: Option<u32>,
    /// Attention: keys per K/V tile.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tile_kv: Option<u32>,
    /// Row ops, a ring of staged rows: rows each block owns; unset means the default (8), so
    /// instances that do not ask keep their names and hashes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rows_per_block: Option<u32>,
    /// Layernorm, a ring of staged rows: the trimmed per-row path (see `norm.cu`); unset
    /// means off (`false` is never stored).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub lean: Option<bool>,
    /// GEMM, engine wgmma: the blocks of a cluster that split K between them (rank 0 sums
    /// the others' partial tiles); unset means 1 (never stored).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub split_k: Option<u32>,
    /// GEMM, engine wgmma: the blocks of a cluster, on tiles side by side along N, that share
    /// A's rows, loaded once for all of them (TMA multicast); unset means 1 (never stored).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub multicast: Option<u32>,
    /// GEMM, engine wgmma: the two consumer warpgroups take alternate tiles of their own
    /// (one's epilogue runs under the other's main loop) instead of halves of one tile;
    /// unset means off (`false` is never stored).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pingpong: Option<bool>,
}

impl Params {
    /// Every whole-number field that is set, by its spec key, with its values (a tile's or a
    /// warp's each): what a spec's YAML holds below `integer_ceiling`, and a manifest must too.
    pub fn integers(&self) -> Vec<(&'static str, &[u32])> {
        let list = [
            ("block", self.block.as_slice()),
            ("items", self.items.as_slice()),
            ("tile", self.tile.as_ref().map_or(&[][..], |t| &t[..])),
            ("warp", self.warp.as_ref().map_or(&[][..], |w| &w[..])),
            ("stages", self.stages.as_slice()),
            ("head_dim", self.head_dim.as_slice()),
            ("tile_q", self.tile_q.as_slice()),
            ("tile_kv", self.tile_kv.as_slice()),
            ("rows_per_block", self.rows_per_block.as_slice()),
            ("split_k", self.split_k.as_slice()),
            ("multicast", self.multicast.as_slice()),
        ];
        list.into_iter().filter(|(_, v)| !v.is_empty()).collect()
    }
}

/// Where an instance came from, for headers and messages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// Spec path as given relative to the specs folder, with `/` separators.
    pub file: String,
    pub line: usize,
}

/// What a kernel computes and how: the part of an instance that the manifest's entry records
/// as well. Both embed it flattened, so it serializes as if its fields were theirs, in place:
/// the config hash and `manifest.json` keep their bytes. They read its fields through `Deref`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelConfig {
    pub name: String,
    pub op: Op,
    pub dtype: DType,
    /// Output element type (GEMM may differ from the inputs; others equal `dtype`).
    pub out_dtype: DType,
    pub params: Params,
    pub epilogue: Vec<Epilogue>,
}

/// One fully resolved kernel: a point of a spec's sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    #[serde(flatten)]
    pub kernel: KernelConfig,
    // The manifest entry has no `archs` (its targets say them), so each struct declares
    // `origin` itself. The config hash covers the kernel and `archs`, not `origin`.
    pub archs: Vec<Arch>,
    pub origin: Origin,
    /// From a kernel marked `tuning: candidates`: shipped only where a tuning table names it
    /// as a winner, when `generate` prunes by tuning. Not configuration: no part of the name,
    /// the hash or the kernel.
    #[serde(skip)]
    pub tuning_candidate: bool,
    /// From a GEMM kernel marked `tuning: table_only`: pruned like a candidate, and the
    /// bindings' fixed rules leave it out too, so that only a tuning table dispatches to it. Not configuration
    /// either; the manifest records it (`InstanceEntry::table_only`).
    #[serde(skip)]
    pub table_only: bool,
}

impl Instance {
    /// An instance named `t` for unit tests: no epilogue, output dtype = input dtype, the
    /// default archs.
    #[cfg(test)]
    pub(crate) fn for_test(op: Op, dtype: DType, params: Params) -> Instance {
        Instance {
            kernel: KernelConfig {
                name: "t".into(),
                op,
                dtype,
                out_dtype: dtype,
                params,
                epilogue: vec![],
            },
            archs: vec![Arch::Sm80, Arch::Sm90],
            origin: Origin {
                file: "t.yaml".into(),
                line: 1,
            },
            tuning_candidate: false,
            table_only: false,
        }
    }
}

impl KernelConfig {
    /// The `extern "C"` symbol of the kernel's entry point.
    pub fn entry_point(&self) -> String {
        format!("tg_{}", self.name)
    }
    pub fn has_epilogue(&self, e: Epilogue) -> bool {
        self.epilogue.contains(&e)
    }
}

impl std::ops::Deref for Instance {
    type Target = KernelConfig;
    fn deref(&self) -> &KernelConfig {
        &self.kernel
    }
}

impl std::ops::DerefMut for Instance {
    fn deref_mut(&mut self) -> &mut KernelConfig {
        &mut self.kernel
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilegen_runtime::loader::Sm;

    #[test]
    fn every_arch_is_the_runtime_arch_its_name_parses_to() {
        // The bindings write `arch.as_str()`; the loader parses it back with `Sm::parse`.
        for &arch in Arch::ALL {
            let sm = Sm::from(arch);
            assert_eq!(Sm::parse(arch.as_str()), Some(sm), "{arch}");
            assert_eq!(sm.to_string(), arch.as_str());
        }
        assert!(Sm::from(Arch::Sm90a).arch_specific && !Sm::from(Arch::Sm90).arch_specific);
    }
}
