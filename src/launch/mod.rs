//! A kernel's calling convention as the manifest records it: its arguments, its tensor-map
//! parameters and how its grid is sized. Plain data over the spec model, so the manifest, the
//! bindings, the GPU runner and bundles read it without depending on the op families that
//! derive it (`ops`).

pub mod tma;

pub use tma::{Interleave, L2Promotion, OobFill, Swizzle, TensorMap};

use serde::{Deserialize, Serialize};

use crate::spec::model::DType;

/// How a kernel argument is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgKind {
    /// Device pointer read by the kernel.
    In,
    /// Device pointer written by the kernel.
    Out,
    /// Scalar by value.
    Scalar,
}

/// One kernel argument, in call order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arg {
    pub name: String,
    pub kind: ArgKind,
    /// Element type for pointers (`f32`, `f16`, `bf16`), value type for scalars (`i64`, `f32`).
    #[serde(rename = "type")]
    pub ty: String,
}

impl Arg {
    pub fn input(name: &str, dtype: DType) -> Arg {
        Arg {
            name: name.into(),
            kind: ArgKind::In,
            ty: dtype.as_str().into(),
        }
    }
    pub fn output(name: &str, dtype: DType) -> Arg {
        Arg {
            name: name.into(),
            kind: ArgKind::Out,
            ty: dtype.as_str().into(),
        }
    }
    pub fn scalar(name: &str, ty: &str) -> Arg {
        Arg {
            name: name.into(),
            kind: ArgKind::Scalar,
            ty: ty.into(),
        }
    }
    /// The C parameter declaration in the kernel's signature.
    pub fn c_decl(&self) -> String {
        let elem = |t: &str| DType::parse(t).map(DType::c_type).unwrap_or("void");
        match self.kind {
            ArgKind::In => format!("const {}* __restrict__ {}", elem(&self.ty), self.name),
            ArgKind::Out => format!("{}* __restrict__ {}", elem(&self.ty), self.name),
            ArgKind::Scalar => {
                let t = match self.ty.as_str() {
                    "i64" => "long long",
                    "f32" => "float",
                    other => other,
                };
                format!("{t} {}", self.name)
            }
        }
    }
}

/// How the grid is sized from the problem at launch time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum GridRule {
    /// Grid-stride over `n` elements; `elems_per_block` per block per trip.
    Elements { elems_per_block: u32 },
    /// One block per `rows_per_block` rows (grid-stride beyond the grid limit).
    Rows {
        rows_per_block: u32,
        max_cols: Option<u32>,
    },
    /// One block per `tile_m`×`tile_n` output tile, in a grouped order.
    Tiles { tile_m: u32, tile_n: u32 },
    /// Persistent: `min(ceil(M/tile_m) * ceil(N/tile_n), sm_count * ctas_per_sm / cluster)`
    /// clusters of `cluster` blocks along x, each cluster looping over the output tiles.
    Persistent {
        tile_m: u32,
        tile_n: u32,
        ctas_per_sm: u32,
        /// Blocks per cluster (the kernel's compiled `__cluster_dims__(cluster, 1, 1)`): they
        /// share each tile, splitting K. Absent in the manifest when 1.
        #[serde(default = "one", skip_serializing_if = "is_one")]
        cluster: u32,
    },
    /// Attention: grid `(ceil(seq_q / tile_q), heads_q, batch)`, `seq_q` the longest query
    /// sequence (varlen: blocks past their sequence's end return at once).
    QueryTiles { tile_q: u32 },
    /// Persistent attention: `(x, 1, 1)` blocks, each looping over work units (query tiles
    /// of a (batch, head), `seq_q` the longest query sequence; with `pairs`, two of them: the
    /// i-th longest with the i-th shortest). `x = min(units, sm_count * ctas_per_sm)`, with
    /// `pairs` lowered to the largest count coprime to the units per (batch, head); any
    /// `x >= 1` computes the same result (`tilegen_runtime::attention::persistent_query_tiles_dims`).
    PersistentQueryTiles {
        tile_q: u32,
        #[serde(default, skip_serializing_if = "is_false")]
        pairs: bool,
        ctas_per_sm: u32,
    },
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// Most blocks per cluster a portable cluster launch has (a grid rule's `cluster`).
pub const MAX_CLUSTER: u32 = 8;

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// What the fixed dispatch rules (`tilegen_runtime::call_checks::pick_*`, `gemm_order`) know
/// of an instance: the bindings emit these facts, and `tune` asks the same rules with them.
impl GridRule {
    /// Elements one block handles per trip (elementwise); 1 for other rules.
    pub fn elems_per_block(&self) -> u32 {
        match self {
            GridRule::Elements { elems_per_block } => *elems_per_block,
            _ => 1,
        }
    }

    /// The longest row a row kernel takes in one pass; None: any length (or not a row kernel).
    pub fn max_cols(&self) -> Option<u32> {
        match self {
            GridRule::Rows { max_cols, .. } => *max_cols,
            _ => None,
        }
    }

    /// Blocks per cluster: a grid is a whole number of them (1 for rules without clusters).
    pub fn cluster(&self) -> u32 {
        match self {
            GridRule::Persistent { cluster, .. } => *cluster,
            _ => 1,
        }
    }

    /// An attention kernel's query tile (rows per block or work unit); None for other rules.
    pub fn query_tile(&self) -> Option<u32> {
        match self {
            GridRule::QueryTiles { tile_q } | GridRule::PersistentQueryTiles { tile_q, .. } => {
                Some(*tile_q)
            }
            _ => None,
        }
    }

    /// How a GEMM's grid covers its output, for predicting its time between measured shapes
    /// (`tilegen_runtime::tuning::pick_tiled`); None for other rules. A grid of one block per
    /// tile counts one block per SM: the manifest does not say how many the device holds.
    pub fn tiling(&self) -> Option<tilegen_runtime::tuning::Tiling> {
        use tilegen_runtime::tuning::Tiling;
        match *self {
            GridRule::Tiles { tile_m, tile_n } => Some(Tiling {
                tile_m,
                tile_n,
                blocks_per_tile: 1,
                blocks_per_sm: 1,
            }),
            GridRule::Persistent {
                tile_m,
                tile_n,
                ctas_per_sm,
                cluster,
            } => Some(Tiling {
                tile_m,
                tile_n,
                blocks_per_tile: cluster,
                blocks_per_sm: ctas_per_sm,
            }),
            _ => None,
        }
    }

    /// A GEMM's output tile (m, n); (1, 1) for other rules.
    pub fn output_tile(&self) -> (u32, u32) {
        match self {
            GridRule::Tiles { tile_m, tile_n } | GridRule::Persistent { tile_m, tile_n, .. } => {
                (*tile_m, *tile_n)
            }
            _ => (1, 1),
        }
    }
}

/// Launch geometry of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    pub threads: u32,
    pub grid: GridRule,
    /// Dynamic shared memory per block, in bytes (static shared memory is in the resources).
    pub shared_bytes: u32,
}
