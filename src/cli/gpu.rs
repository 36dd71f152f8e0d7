//! What the GPU commands (`verify`, `bench`) share: which instances of a library they run.

use tilegen::Error;

/// The library a GPU command reads and which of its instances it runs.
#[derive(clap::Args)]
pub struct LibraryArgs {
    /// Library folder (written by `tilegen generate`).
    #[arg(long, default_value = "generated")]
    pub lib: std::path::PathBuf,
    /// Only instances whose name contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Only instances of this op (an `op` of the specs, as `tilegen list` shows them).
    #[arg(long)]
    pub op: Option<String>,
}

/// Which instances a GPU command runs: by name text and by op, checked before the driver is
/// touched.
pub struct Select {
    filter: Option<String>,
    op: Option<tilegen::Op>,
}

impl Select {
    pub fn new(filter: Option<String>, op: Option<String>) -> Result<Select, Error> {
        let op = match op {
            None => None,
            Some(o) => Some(tilegen::Op::parse(&o).ok_or_else(|| {
                Error::Usage(format!("--op {o}: not an op ({})", tilegen::Op::choices()))
            })?),
        };
        Ok(Select { filter, op })
    }

    pub fn of(&self, gpu: &tilegen::__internal::gpu::Gpu) -> Vec<tilegen::InstanceEntry> {
        gpu.manifest
            .instances
            .iter()
            .filter(|i| self.filter.as_deref().is_none_or(|f| i.name.contains(f)))
            .filter(|i| self.op.is_none_or(|o| i.op == o))
            .cloned()
            .collect()
    }
}

/// A seed for random inputs when none is given: from the clock, so each run tries new data.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}
