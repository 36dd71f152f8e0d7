//! `tilegen check`: validate the specs and render every instance, without NVRTC.

use std::path::PathBuf;
use std::process::ExitCode;

use tilegen::__internal::generate;
use tilegen::Error;

use super::report::Reporter;
use super::Inputs;

#[derive(clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    inputs: Inputs,
}

pub fn run(args: CheckArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    let r = generate::render_all(&args.inputs.options(PathBuf::new()))?;
    rep.err(
        || serde_json::json!({"event": "checked", "instances": r.instances.len()}),
        || {
            format!(
                "{} spec file(s) OK: {} instances rendered",
                r.spec_files,
                r.instances.len()
            )
        },
    );
    Ok(ExitCode::SUCCESS)
}
