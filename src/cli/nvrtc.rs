//! `tilegen nvrtc …`: install the pinned NVRTC, or say which one tilegen finds.

use std::process::ExitCode;

use tilegen::error::Error;
use tilegen::provision;

use crate::{emit_json, NvrtcAction};

pub fn nvrtc_command(action: NvrtcAction, json: bool) -> Result<ExitCode, Error> {
    match action {
        NvrtcAction::Install { dir, if_missing } => {
            if if_missing {
                if let Ok(nv) = tilegen::nvrtc::load() {
                    report(json, "found", &nv.location, &nv.version());
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
            if !json {
                eprintln!(
                    "installing {} into {} (pip, checked against its pinned sha256)",
                    tilegen::nvrtc::PINNED_WHEEL,
                    dir.display()
                );
            }
            let done = provision::install(&dir)?;
            let what = if done.already {
                "already installed"
            } else {
                "installed"
            };
            report(
                json,
                what,
                &done.lib.display().to_string(),
                provision::pinned_release(),
            );
            Ok(ExitCode::SUCCESS)
        }
        NvrtcAction::Path => {
            let nv = tilegen::nvrtc::load()?;
            report(json, "found", &nv.location, &nv.version());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn report(json: bool, what: &str, location: &str, version: &str) {
    if json {
        emit_json(
            serde_json::json!({"event": "nvrtc", "status": what, "location": location, "version": version}),
        );
    } else {
        println!("NVRTC {version} {what}: {location}");
    }
}
