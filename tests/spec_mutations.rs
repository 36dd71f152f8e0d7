//! The default specs with one value changed at a time to numbers and shapes at and past every
//! edge (zero, one past a tile, the largest u32 and beyond, negative, empty lists). Whatever
//! the change, rendering returns the instances or a spec error that names the file; it never
//! panics. (A tile of fewer than 64 rows once reached a division by a zero consumer count.)
//! Rendering needs no NVRTC, so this runs everywhere; the mutations are a fixed list, so a
//! failure names one that reproduces it.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;

use tilegen::__internal::generate;
use tilegen::Options;

const EDGE_VALUES: &[&str] = &[
    "0",
    "1",
    "3",
    "65",
    "4294967295",
    "4294967296",
    "-1",
    "[]",
    "[0, 0, 0]",
    "[1, 1, 1]",
    "[8, 256, 64]",
    "[48, 128, 64]",
    "[65, 65, 65]",
    "[4294967295, 4294967295, 4294967295]",
    "[0, 0]",
    "[4294967295, 4294967295]",
];

/// Every `    key: value` line of an entry (the spec files indent entries' keys by four).
fn key_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            l.strip_prefix("    ")
                .and_then(|r| r.split_once(": "))
                .is_some_and(|(k, _)| {
                    !k.is_empty()
                        && k != "name"
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn changed_values_give_instances_or_a_spec_error() {
    let specs = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs");
    let tmp = tempfile::tempdir().unwrap();
    let mut files: Vec<_> = fs::read_dir(&specs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    // Panics are the failure looked for: keep their messages off the test output.
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    let mut runs = 0;
    for file in &files {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        let text = fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let keys = key_lines(&text);
        // Big files: every third key line, so that the test stays within seconds.
        let step = if keys.len() > 120 { 3 } else { 1 };
        for &i in keys.iter().step_by(step) {
            let key = lines[i].split_once(':').unwrap().0;
            for value in EDGE_VALUES {
                let mut changed: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                changed[i] = format!("{key}: {value}");
                let dir = tmp.path().join("specs");
                let _ = fs::remove_dir_all(&dir);
                fs::create_dir_all(&dir).unwrap();
                fs::write(dir.join(&name), changed.join("\n")).unwrap();
                let opts = Options::new(&dir, tmp.path().join("out"));
                runs += 1;
                let what = format!(
                    "{name}:{}: `{}` -> `{}: {value}`",
                    i + 1,
                    lines[i].trim(),
                    key.trim()
                );
                match panic::catch_unwind(AssertUnwindSafe(|| generate::render_all(&opts))) {
                    Err(_) => failures.push(format!("{what}: panicked")),
                    Ok(Err(e)) if !e.to_string().contains(&name) => {
                        failures.push(format!("{what}: the error does not name the file: {e}"))
                    }
                    Ok(_) => {}
                }
            }
        }
    }
    panic::set_hook(hook);
    assert!(
        runs > 1000,
        "only {runs} mutations: did the specs' layout change?"
    );
    assert!(
        failures.is_empty(),
        "{} of {runs} mutations:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
