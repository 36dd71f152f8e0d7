//! Cache keys: sha256 over everything that decides a compiled kernel's bytes.

use sha2::{Digest, Sha256};

use crate::spec::model::Arch;

/// The inputs of one compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInputs<'a> {
    /// Rendered CUDA C, exactly as given to NVRTC (the key leaves out its header line: see
    /// [`cache_key`]).
    pub source: &'a str,
    pub nvrtc_version: &'a str,
    pub options: &'a [String],
    pub arch: Arch,
    pub tilegen_version: &'a str,
}

/// Hex sha256 of the inputs. Each part is length-prefixed so no two different inputs can
/// produce the same byte stream. The text of the source's header line, which names the spec
/// file and line, is not part of the key (where the line stands is): a one-line comment
/// (the tilegen version is keyed on its own), it leaves NVRTC's output as it is, and without
/// it a kernel moved within its specs, or served from a bundle made from other specs, keeps
/// its cache entry.
pub fn cache_key(k: &KeyInputs) -> String {
    let mut h = Sha256::new();
    let mut part = |label: &str, bytes: &[u8]| {
        h.update(label.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part("tilegen", k.tilegen_version.as_bytes());
    part("nvrtc", k.nvrtc_version.as_bytes());
    part("arch", k.arch.as_str().as_bytes());
    for o in k.options {
        part("option", o.as_bytes());
    }
    match header_line(k.source) {
        Some((before, after)) => {
            part("source before the header", before.as_bytes());
            part("source after the header", after.as_bytes());
        }
        None => part("source", k.source.as_bytes()),
    }
    hex::encode(h.finalize())
}

/// The source before and after the text of its header line: the first line that starts as
/// tilegen's header does, if it has the header's whole form (a line comment that cannot
/// continue onto the next line: templates write it on a line of its own, outside any
/// string, and the spec path in it is escaped).
fn header_line(source: &str) -> Option<(&str, &str)> {
    let start_text = format!("{}{} from ", crate::render::HEADER_START, crate::VERSION);
    let start = if source.starts_with(&start_text) {
        0
    } else {
        source.find(&format!("\n{start_text}"))? + 1
    };
    let end = source[start..]
        .find('\n')
        .map_or(source.len(), |i| start + i);
    source[start..end]
        .ends_with(crate::render::HEADER_END)
        .then(|| (&source[..start], &source[end..]))
}

/// Hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ingredient_changes_the_key() {
        let opts = vec!["-std=c++17".to_string()];
        let base = KeyInputs {
            source: "__global__ void k() {}",
            nvrtc_version: "13.0",
            options: &opts,
            arch: Arch::Sm90,
            tilegen_version: "0.1.0",
        };
        let k0 = cache_key(&base);
        assert_eq!(k0, cache_key(&base.clone()), "key is deterministic");
        let more_opts = vec!["-std=c++17".to_string(), "-G".to_string()];
        let variants = [
            KeyInputs {
                source: "__global__ void k() { }",
                ..base.clone()
            },
            KeyInputs {
                nvrtc_version: "13.1",
                ..base.clone()
            },
            KeyInputs {
                options: &more_opts,
                ..base.clone()
            },
            KeyInputs {
                arch: Arch::Sm80,
                ..base.clone()
            },
            KeyInputs {
                tilegen_version: "0.1.1",
                ..base.clone()
            },
        ];
        for v in &variants {
            assert_ne!(cache_key(v), k0, "{v:?} should change the key");
        }
        // The header line naming the spec's file and line is not keyed; the rest of the
        // source, a header elsewhere or anything else on the first line is.
        let at = |first: &str, rest: &str| format!("{first}\n{rest}");
        let header = |origin: &str| {
            format!(
                "{}{} from {origin}. Do not edit.",
                crate::render::HEADER_START,
                crate::VERSION
            )
        };
        let key = |source: &str| {
            cache_key(&KeyInputs {
                source,
                ..base.clone()
            })
        };
        let body = "// instance: k\n__global__ void k() {}";
        let here = key(&at(&header("a.yaml:3"), body));
        assert_eq!(here, key(&at(&header("b/c.yaml:40"), body)));
        assert_ne!(here, key(body), "the line itself counts");
        assert_ne!(
            here,
            key(&at(&header("a.yaml:3"), "__global__ void k() { }"))
        );
        assert_ne!(here, key(&at("// a.yaml:3", body)));
        assert_ne!(here, key(&at("__device__ int x;", body)));
        // Further down (as the attention templates put it), the same holds.
        let below = |origin: &str| key(&format!("#if 0\n#endif\n{}\n{body}", header(origin)));
        assert_eq!(below("a.yaml:3"), below("a.yaml:9"));
        assert_ne!(below("a.yaml:3"), here);
        // A line that only starts like the header (say, one that a backslash would continue
        // onto the next) is keyed whole.
        let like = |tail: &str| {
            key(&format!(
                "{}{} from a.yaml:3{tail}\n{body}",
                crate::render::HEADER_START,
                crate::VERSION
            ))
        };
        assert_ne!(like(". Do not edit. \\"), like(". Do not edit. \\ "));
        // Two sources that differ only in where the header stands are not one.
        assert_ne!(
            key(&format!("int a;\n{}\nint b;", header("x.yaml:1"))),
            key(&format!("int a;\nint b;\n{}", header("x.yaml:1")))
        );
        // Moving bytes between option boundaries must not collide.
        let a = vec!["ab".to_string(), "c".to_string()];
        let b = vec!["a".to_string(), "bc".to_string()];
        assert_ne!(
            cache_key(&KeyInputs {
                options: &a,
                ..base.clone()
            }),
            cache_key(&KeyInputs {
                options: &b,
                ..base.clone()
            })
        );
    }
}
