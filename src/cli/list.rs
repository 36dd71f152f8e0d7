//! `tilegen list`: the instances the specs produce.

use std::path::PathBuf;
use std::process::ExitCode;

use tilegen::__internal::generate;
use tilegen::Error;

use super::report::Reporter;
use super::Inputs;

#[derive(clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    inputs: Inputs,
}

pub fn run(args: ListArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    let r = generate::render_all(&args.inputs.options(PathBuf::new()))?;
    for inst in &r.instances {
        let launch = tilegen::__internal::ops::launch(inst);
        rep.out(
            || {
                serde_json::json!({
                    "name": inst.name, "op": inst.op, "dtype": inst.dtype,
                    "out_dtype": inst.out_dtype, "params": inst.params,
                    "epilogue": inst.epilogue, "archs": inst.archs, "threads": launch.threads,
                    "origin": format!("{}:{}", inst.origin.file, inst.origin.line),
                    "config_sha256": tilegen::__internal::render::config_hash(inst)
                })
            },
            || {
                let archs: Vec<&str> = inst.archs.iter().map(|a| a.as_str()).collect();
                let epi: Vec<&str> = inst.epilogue.iter().map(|e| e.as_str()).collect();
                format!(
                    "{:<44} {:<10} {:<5} threads={:<5} epilogue=[{}] archs={}  ({}:{})",
                    inst.name,
                    inst.op,
                    inst.dtype,
                    launch.threads,
                    epi.join(","),
                    archs.join(","),
                    inst.origin.file,
                    inst.origin.line
                )
            },
        );
    }
    Ok(ExitCode::SUCCESS)
}
