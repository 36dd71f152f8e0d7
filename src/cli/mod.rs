//! The `tilegen` commands, one module each (a group of subcommands shares one), all
//! reporting through [`report::Reporter`]. A command is a module here with an argument type
//! and `run`, one variant of `Command` in `main.rs`, and one line of its dispatch.

pub mod bench;
pub mod bundle;
pub mod cache;
pub mod check;
pub mod doctor;
pub mod generate;
pub mod gpu;
pub mod list;
pub mod nvrtc;
pub mod report;
pub mod show;
pub mod tune;
pub mod verify;

use std::path::PathBuf;

use tilegen::Arch;
use tilegen::Options;

/// The spec inputs of the commands that read specs.
#[derive(clap::Args, Clone)]
pub struct Inputs {
    /// Specs folder (every *.yaml under it) or one spec file.
    #[arg(long, default_value = "specs")]
    specs: PathBuf,
    /// Folder of templates overriding the embedded ones by file name.
    #[arg(long)]
    templates: Option<PathBuf>,
    /// Only instances whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Compile for these archs instead of each spec's (comma-separated, e.g. sm_80,sm_90).
    #[arg(long, value_delimiter = ',', value_parser = parse_arch)]
    arch: Option<Vec<Arch>>,
}

impl Inputs {
    /// Generate options for these inputs, writing into `out`.
    pub fn options(&self, out: PathBuf) -> Options {
        let mut o = Options::new(&self.specs, out);
        o.templates = self.templates.clone();
        o.filter = self.filter.clone();
        o.archs = self.arch.clone();
        o
    }
}

pub fn parse_arch(s: &str) -> Result<Arch, String> {
    s.parse()
}
