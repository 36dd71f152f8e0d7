//! Rendering instances to CUDA C through Tera. The templates ship inside the binary; a
//! templates folder given by the user overrides them file by file.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::ops;
use crate::spec::model::Instance;

/// The templates shipped with tilegen: (name, text).
pub const EMBEDDED: &[(&str, &str)] = &[
    ("prelude.cuh", include_str!("../templates/prelude.cuh")),
    ("rows.cuh", include_str!("../templates/rows.cuh")),
    ("epilogue.cuh", include_str!("../templates/epilogue.cuh")),
    (
        "epilogue_steps.cuh",
        include_str!("../templates/epilogue_steps.cuh"),
    ),
    (
        "elementwise.cu",
        include_str!("../templates/elementwise.cu"),
    ),
    ("softmax.cu", include_str!("../templates/softmax.cu")),
    ("norm.cu", include_str!("../templates/norm.cu")),
    ("gemm.cu", include_str!("../templates/gemm.cu")),
    ("gemm_sm90.cu", include_str!("../templates/gemm_sm90.cu")),
    ("attention.cu", include_str!("../templates/attention.cu")),
    ("wgmma.cuh", include_str!("../templates/wgmma.cuh")),
    ("sm90.cuh", include_str!("../templates/sm90.cuh")),
    ("attention.cuh", include_str!("../templates/attention.cuh")),
    (
        "attention_sm90.cu",
        include_str!("../templates/attention_sm90.cu"),
    ),
];

/// A set of templates ready to render, with the files it was built from (for
/// `cargo:rerun-if-changed`).
pub struct Renderer {
    tera: tera::Tera,
    pub files_read: Vec<PathBuf>,
}

impl Renderer {
    /// The embedded templates, with any file of the same name in `overrides` taking their place.
    pub fn new(overrides: Option<&Path>) -> Result<Self> {
        let mut tera = tera::Tera::default();
        tera.autoescape_on(vec![]);
        let mut sources: Vec<(String, String)> = EMBEDDED
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        let mut files_read = Vec::new();
        if let Some(dir) = overrides {
            if !dir.is_dir() {
                return Err(Error::Usage(format!(
                    "templates folder {} does not exist",
                    dir.display()
                )));
            }
            for (name, text) in sources.iter_mut() {
                let path = dir.join(&*name);
                if path.is_file() {
                    *text = std::fs::read_to_string(&path).at(&path)?;
                    files_read.push(path);
                }
            }
        }
        // Parsed one by one first, so a syntax error names its file: the override's path,
        // or the embedded template's name.
        let shown = |name: &str| match files_read.iter().find(|p| p.ends_with(name)) {
            Some(path) => path.display().to_string(),
            None => format!("{name} (embedded)"),
        };
        for (name, text) in &sources {
            if let Err(e) = tera::Template::new(name, None, text) {
                return Err(Error::Template {
                    template: shown(name),
                    instance: "every instance".into(),
                    message: format!("syntax error{}", error_chain(&e)),
                });
            }
        }
        let folder = overrides.map_or("the embedded templates".to_string(), |d| {
            format!("the templates in {}", d.display())
        });
        tera.add_raw_templates(sources.iter().map(|(n, t)| (n.as_str(), t.as_str())))
            .map_err(|e| Error::Template {
                template: folder,
                instance: "every instance".into(),
                message: error_chain(&e),
            })?;
        Ok(Renderer { tera, files_read })
    }

    /// Renders one instance's CUDA C.
    pub fn render(&self, inst: &Instance) -> Result<String> {
        let template = ops::template(inst);
        let ctx = context(inst);
        let text = self
            .tera
            .render(template, &ctx)
            .map_err(|e| Error::Template {
                template: match self.files_read.iter().find(|p| p.ends_with(template)) {
                    Some(path) => path.display().to_string(),
                    None => template.into(),
                },
                instance: inst.name.clone(),
                message: error_chain(&e),
            })?;
        Ok(tidy(&text))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg += ": ";
        msg += &s.to_string();
        src = s.source();
    }
    msg
}

/// Stable identity of an instance's configuration (what the spec asked for).
pub fn config_hash(inst: &Instance) -> String {
    let json = serde_json::to_vec(inst).expect("instances serialize");
    let mut h = Sha256::new();
    h.update(crate::VERSION.as_bytes());
    h.update([0]);
    h.update(&json);
    hex::encode(h.finalize())
}

fn context(inst: &Instance) -> tera::Context {
    let mut c = tera::Context::new();
    let launch = ops::launch(inst);
    let args = ops::signature(inst);
    c.insert(
        "header",
        &format!(
            "// @generated by tilegen {} from {}:{}. Do not edit.\n// instance: {}\n// config sha256: {}",
            crate::VERSION,
            // The spec's path is any text the file system allows; escaped, it stays a comment.
            crate::escape::comment(&inst.origin.file),
            inst.origin.line,
            inst.name,
            config_hash(inst)
        ),
    );
    c.insert("kernel", &inst.entry_point());
    c.insert("op", inst.op.as_str());
    c.insert("dtype", inst.dtype.as_str());
    c.insert("out_dtype", inst.out_dtype.as_str());
    c.insert("T", inst.dtype.c_type());
    c.insert("OT", inst.out_dtype.c_type());
    c.insert("vec", &inst.dtype.per_16_bytes());
    c.insert("out_vec", &inst.out_dtype.per_16_bytes());
    c.insert("threads", &launch.threads);
    c.insert("block", &inst.params.block.unwrap_or(launch.threads));
    c.insert("items", &inst.params.items.unwrap_or(1));
    c.insert(
        "variant",
        &inst.params.variant.map(|v| v.as_str()).unwrap_or(""),
    );
    c.insert("affine", &inst.params.affine.unwrap_or(false));
    let epilogue: Vec<&str> = inst.epilogue.iter().map(|e| e.as_str()).collect();
    c.insert("epilogue", &epilogue);
    if let Some(chain) = ops::epilogue::Chain::of(inst.op) {
        let code = ops::epilogue::cuda_lines(&inst.epilogue, chain, inst.out_dtype);
        c.insert("epilogue_code", &code);
    }
    // Tensor maps (TMA kernels) come first, then the arguments.
    let decls: Vec<String> = ops::tensor_maps(inst)
        .iter()
        .map(|m| m.c_decl())
        .chain(args.iter().map(|a| a.c_decl()))
        .collect();
    c.insert("params", &decls.join(", "));
    for (k, v) in ops::template_values(inst) {
        c.insert(k, &v);
    }
    c
}

/// Canonical form of rendered source: no trailing spaces, at most one blank line in a row,
/// one final newline. Templates can then use Tera tags freely without ragged output.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 || out.is_empty() {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}
