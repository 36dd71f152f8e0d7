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

/// Reads a variable as UTF-8. A value that is set but not UTF-8 is an error, never "unset":
/// a variable that asks for something (a key whose signature to demand, a read-only mode)
/// must not silently fall back to its absence. The message never shows the value: it may be
/// a password or a URL with one.
pub fn var(name: &str) -> crate::Result<Option<String>> {
    match var_os(name).map(OsString::into_string) {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(_)) => Err(crate::Error::Usage(format!(
            "{name} is set, but its value is not UTF-8"
        ))),
    }
}

/// A variable that names a path: set but empty counts as unset (as a shell's `VAR=` reads).
pub fn path(name: &str) -> Option<std::path::PathBuf> {
    var_os(name)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// Every variable read so far, sorted.
pub fn read_so_far() -> Vec<String> {
    READ.lock()
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    /// A variable that asks for something (a key whose signature to demand) must not read
    /// as unset because its value is not UTF-8.
    #[test]
    fn a_value_that_is_not_utf8_is_an_error_not_unset() {
        use std::os::unix::ffi::OsStrExt;
        let name = "TILEGEN_TEST_ENV_NOT_UTF8";
        std::env::set_var(name, std::ffi::OsStr::from_bytes(b"hunter2\xffsecret"));
        let err = super::var(name).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains("not UTF-8"), "{err}");
        assert!(!err.contains("hunter2"), "the value may be a secret: {err}");
        std::env::set_var(name, "keys/key.pub");
        assert_eq!(super::var(name).unwrap().as_deref(), Some("keys/key.pub"));
        std::env::remove_var(name);
        assert_eq!(super::var(name).unwrap(), None);
    }
}
