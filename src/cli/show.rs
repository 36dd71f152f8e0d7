//! `tilegen show`: one instance's CUDA C, or its PTX for an arch.

use std::path::PathBuf;
use std::process::ExitCode;

use tilegen::__internal::cache::Cache;
use tilegen::__internal::generate;
use tilegen::Arch;
use tilegen::Error;

use super::report::Reporter;
use super::{parse_arch, Inputs};

#[derive(clap::Args)]
pub struct ShowArgs {
    /// Instance name (see `tilegen list`).
    name: String,
    #[command(flatten)]
    inputs: Inputs,
    /// Print the PTX for this arch instead (compiles it, through the cache).
    #[arg(long, value_parser = parse_arch)]
    ptx: Option<Arch>,
}

/// The source is the output in either format: there is no JSON form of it.
pub fn run(args: ShowArgs, _rep: &Reporter) -> Result<ExitCode, Error> {
    let ShowArgs { name, inputs, ptx } = args;
    let r = generate::render_all(&inputs.options(PathBuf::new()))?;
    let Some(i) = r.instances.iter().position(|i| i.name == name) else {
        let near = r
            .instances
            .iter()
            .map(|i| (strsim::jaro_winkler(&i.name, &name), &i.name))
            .filter(|(score, _)| *score > 0.8)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let hint = match near {
            Some((_, n)) => format!("did you mean `{n}`? "),
            None => String::new(),
        };
        return Err(Error::Usage(format!(
            "no instance named `{}`; {hint}`tilegen list` shows them",
            tilegen::__internal::escape::shown(&name)
        )));
    };
    match ptx {
        None => print!("{}", r.sources[i]),
        Some(arch) => {
            // The checks `generate` applies to the instance's own archs, for this one.
            let mut one = r.instances[i].clone();
            one.archs = vec![arch];
            if let Some((_, why)) = tilegen::__internal::ops::arch_problems(&one)
                .into_iter()
                .next()
            {
                return Err(Error::Usage(format!(
                    "cannot show {name}'s PTX for {arch}: {why}"
                )));
            }
            let nvrtc = tilegen::__internal::nvrtc::load()?.version();
            let cache = Cache::open(Cache::default_location()?);
            let c = generate::compile_cached(&cache, &nvrtc, &name, &r.sources[i], arch)?.compiled;
            print!("{}", String::from_utf8_lossy(&c.ptx));
        }
    }
    Ok(ExitCode::SUCCESS)
}
