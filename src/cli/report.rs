//! Where every command's output goes: with `--message-format json`, one JSON object per line
//! on stdout; otherwise text for people. Commands describe each outcome both ways and the
//! reporter picks, so no handler tests the format itself for what it prints.

use std::process::ExitCode;

use serde_json::Value;
use tilegen::Error;

#[derive(Clone, Copy)]
pub struct Reporter {
    json: bool,
}

impl Reporter {
    pub fn new(json: bool) -> Reporter {
        Reporter { json }
    }

    /// Whether output is JSON (for what differs beyond printing, such as a progress bar).
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// An outcome whose text goes to stdout (data a person or a script reads).
    pub fn out(&self, json: impl FnOnce() -> Value, text: impl FnOnce() -> String) {
        if self.json {
            println!("{}", json());
        } else {
            println!("{}", text());
        }
    }

    /// An outcome whose text goes to stderr (progress and summaries, beside data on stdout).
    pub fn err(&self, json: impl FnOnce() -> Value, text: impl FnOnce() -> String) {
        if self.json {
            println!("{}", json());
        } else {
            eprintln!("{}", text());
        }
    }

    /// An event only JSON readers get.
    pub fn event(&self, json: impl FnOnce() -> Value) {
        if self.json {
            println!("{}", json());
        }
    }

    /// Text only people get, on stdout (headings and tables whose rows are JSON events).
    pub fn text(&self, text: impl FnOnce() -> String) {
        if !self.json {
            println!("{}", text());
        }
    }

    /// Same, on stderr.
    pub fn text_err(&self, text: impl FnOnce() -> String) {
        if !self.json {
            eprintln!("{}", text());
        }
    }

    /// A line on stderr in either format: a problem that does not stop the command.
    pub fn note(&self, text: impl FnOnce() -> String) {
        eprintln!("{}", text());
    }

    /// A failed command: its message (and a spec's diagnostics, one by one for JSON) and the
    /// exit code documented for its kind of error.
    pub fn error(&self, e: &Error) -> ExitCode {
        self.err(
            || {
                let diagnostics: Vec<Value> = match e {
                    Error::Spec(d) => d
                        .0
                        .iter()
                        .map(|d| {
                            serde_json::json!({
                                "file": d.file, "line": d.mark.line, "column": d.mark.col, "message": d.message
                            })
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                serde_json::json!({"event": "error", "exit_code": e.exit_code(), "message": e.to_string(), "diagnostics": diagnostics})
            },
            || e.to_string(),
        );
        ExitCode::from(e.exit_code() as u8)
    }
}
