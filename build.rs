//! Embeds every template under `templates/` in the library (`render::EMBEDDED`), so a new
//! template needs no list kept by hand: the file is the registration.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=templates");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
            entry.file_name().to_string_lossy().into_owned()
        })
        .filter(|name| name.ends_with(".cu") || name.ends_with(".cuh"))
        .collect();
    // A fixed order: the same binary from any checkout.
    names.sort();
    let mut out = String::from(
        "/// The templates shipped with tilegen: (name, text), every file of `templates/`.\npub const EMBEDDED: &[(&str, &str)] = &[\n",
    );
    for name in &names {
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.'),
            "template file name {name:?}: use letters, digits, `_` and `.`"
        );
        let path = dir.join(name);
        writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n");
    // Cargo's own variable for this script (tilegen::env is for the library's readers).
    #[allow(clippy::disallowed_methods)]
    let out_dir = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    let target = Path::new(&out_dir).join("templates.rs");
    std::fs::write(&target, out).unwrap_or_else(|e| panic!("writing {}: {e}", target.display()));
}
