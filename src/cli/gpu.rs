//! What the GPU commands (`verify`, `bench`) share: which instances of a library they run.

use tilegen::Error;

use super::report::Reporter;

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

/// How long a GPU command waits for the GPU before it gives up on a hung kernel.
#[derive(clap::Args, Clone, Copy)]
pub struct WaitLimit {
    /// Seconds that one wait for the GPU (a case's launch, one of the timed launches) may last
    /// before the command names what was running and exits 1, where a kernel that hangs would
    /// keep it waiting for ever; 0 means no limit.
    #[arg(long = "kernel-timeout", value_name = "SECONDS", default_value_t = 60.0, value_parser = seconds)]
    pub seconds: f64,
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1e6).contains(&v) => Ok(v),
        _ => Err(format!("{s}: give seconds from 0 (no limit) to 1000000")),
    }
}

/// Opens the GPU for the library at `lib`, its waits limited by `limit`. When a wait outlives
/// it, the error names what was running and the process ends at once: destructors would wait
/// for the hung kernel too, and only the end of the process frees the GPU.
pub fn open(
    lib: &std::path::Path,
    limit: WaitLimit,
    rep: Reporter,
) -> Result<tilegen::__internal::gpu::Gpu, Error> {
    let mut gpu = tilegen::__internal::gpu::Gpu::open(lib)?;
    if limit.seconds > 0.0 {
        let limit = std::time::Duration::from_secs_f64(limit.seconds);
        gpu.limit_waits(
            limit,
            Box::new(move |what, limit| {
                let e = Error::Gpu(format!(
                    "{what}: the GPU has not finished after {} s (--kernel-timeout): a kernel \
                     hangs, or runs far longer than it should; stopping here, since nothing \
                     else can run on the GPU until this process ends",
                    limit.as_secs_f64()
                ));
                rep.error(&e);
                use std::io::Write;
                let _ = std::io::stdout().flush();
                let _ = std::io::stderr().flush();
                // SAFETY: ends the process without running destructors or exit handlers,
                // which could block on the GPU; the output is flushed above.
                unsafe { libc::_exit(e.exit_code()) }
            }),
        )?;
    }
    Ok(gpu)
}

/// A seed for random inputs when none is given: from the clock, so each run tries new data.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}
