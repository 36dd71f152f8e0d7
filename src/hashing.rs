//! Cache keys: sha256 over everything that decides a compiled kernel's bytes.

use sha2::{Digest, Sha256};

use crate::spec::model::Arch;

/// The inputs of one compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInputs<'a> {
    /// Rendered CUDA C, exactly as given to NVRTC.
    pub source: &'a str,
    pub nvrtc_version: &'a str,
    pub options: &'a [String],
    pub arch: Arch,
    pub tilegen_version: &'a str,
}

/// Hex sha256 of the inputs. Each part is length-prefixed so no two different inputs can
/// produce the same byte stream.
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
    part("source", k.source.as_bytes());
    hex::encode(h.finalize())
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
