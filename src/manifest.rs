//! The library manifest: a sorted JSON description of every instance, its arguments, launch
//! geometry, resources and files. Bindings, `verify`, `bench` and bundles all read it.

use serde::{Deserialize, Serialize};

use crate::nvrtc::Resources;
use crate::ops::{Arg, Launch};
use crate::spec::model::{Arch, DType, Epilogue, Op, Origin, Params};

/// Bumped when the manifest's shape changes incompatibly.
pub const FORMAT: u32 = 1;
pub const FILE_NAME: &str = "manifest.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub tilegen_version: String,
    pub nvrtc_version: String,
    pub instances: Vec<InstanceEntry>,
    /// Every file of the library other than the manifest, sorted; `generate` removes files
    /// listed by an older manifest that are no longer produced.
    pub files: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceEntry {
    pub name: String,
    pub op: Op,
    pub dtype: DType,
    pub out_dtype: DType,
    pub params: Params,
    pub epilogue: Vec<Epilogue>,
    pub origin: Origin,
    pub entry_point: String,
    pub args: Vec<Arg>,
    pub launch: Launch,
    pub config_sha256: String,
    /// Rendered CUDA C, relative to the library folder.
    pub source: FileRef,
    pub targets: Vec<Target>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub arch: Arch,
    pub cache_key: String,
    pub ptx: FileRef,
    pub cubin: FileRef,
    pub resources: Resources,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

impl Manifest {
    /// Canonical bytes: pretty JSON with a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("manifest serializes");
        v.push(b'\n');
        v
    }

    pub fn from_bytes(bytes: &[u8]) -> serde_json::Result<Manifest> {
        serde_json::from_slice(bytes)
    }

    pub fn instance(&self, name: &str) -> Option<&InstanceEntry> {
        self.instances.iter().find(|i| i.name == name)
    }
}
