//! `tilegen nvrtc …`: install the pinned NVRTC, or say which one tilegen finds.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use tilegen::__internal::provision;
use tilegen::Error;

use super::report::Reporter;

#[derive(Subcommand)]
pub enum NvrtcAction {
    /// Fetch the pinned nvidia-cuda-nvrtc wheel with pip (sha256-checked) into a versioned
    /// folder that every later tilegen run and build script searches.
    Install {
        /// Install folder (default: <user cache folder>/tilegen-nvrtc/<release>).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Do nothing when tilegen already finds a working NVRTC anywhere.
        #[arg(long)]
        if_missing: bool,
    },
    /// Print the NVRTC tilegen finds and loads, or why none.
    Path,
}

pub fn run(action: NvrtcAction, rep: &Reporter) -> Result<ExitCode, Error> {
    match action {
        NvrtcAction::Install { dir, if_missing } => {
            // TILEGEN_NVRTC, where set, is the only NVRTC used: an install elsewhere would
            // not stand in for a wrong one.
            if tilegen::__internal::nvrtc::requested_dir().is_some() {
                tilegen::__internal::nvrtc::load()?;
            }
            if if_missing {
                if let Ok(nv) = tilegen::__internal::nvrtc::load() {
                    report(rep, "found", &nv.location, &nv.version());
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let dir = match dir {
                Some(d) => d,
                None => provision::default_dir().ok_or_else(|| {
                    Error::Environment(
                        "nvrtc install: no user cache folder is known here (HOME unset); give --dir"
                            .into(),
                    )
                })?,
            };
            rep.text_err(|| {
                format!(
                    "installing {} into {} (pip, checked against its pinned sha256)",
                    tilegen::__internal::nvrtc::PINNED_WHEEL,
                    dir.display()
                )
            });
            let done = provision::install(&dir)?;
            let what = if done.already {
                "already installed"
            } else {
                "installed"
            };
            report(
                rep,
                what,
                &done.lib.display().to_string(),
                provision::pinned_release(),
            );
            Ok(ExitCode::SUCCESS)
        }
        NvrtcAction::Path => {
            let nv = tilegen::__internal::nvrtc::load()?;
            report(rep, "found", &nv.location, &nv.version());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn report(rep: &Reporter, what: &str, location: &str, version: &str) {
    rep.out(
        || {
            serde_json::json!({"event": "nvrtc", "status": what, "location": location, "version": version})
        },
        || format!("NVRTC {version} {what}: {location}"),
    );
}
