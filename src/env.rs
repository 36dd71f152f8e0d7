//! Environment variables, read through one door so build scripts can report each variable
//! they depend on (`cargo:rerun-if-env-changed`), as cc-rs does.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::sync::Mutex;

static READ: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Reads a variable and records that it was read.
pub fn var_os(name: &str) -> Option<OsString> {
    if let Ok(mut set) = READ.lock() {
        set.insert(name.to_string());
    }
    #[allow(clippy::disallowed_methods)]
    std::env::var_os(name)
}

/// Reads a variable as UTF-8; a non-UTF-8 value counts as unset.
pub fn var(name: &str) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// Every variable read so far, sorted.
pub fn read_so_far() -> Vec<String> {
    READ.lock()
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default()
}
