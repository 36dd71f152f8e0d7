//! The archive layer: a reproducible tar + gzip writer, and a reader that treats its input
//! as hostile. Only plain files with plain relative names come out of [`read`]; everything
//! else is refused with a message naming the member and what is wrong.
//!
//! Reproducible: members in the order given (the caller sorts), GNU headers with mode 0644,
//! uid/gid 0, no user or group names, one fixed mtime; gzip at a fixed level with no file
//! name, mtime 0 and OS byte 255 ("unknown"), so the same files give the same bytes on any
//! machine.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read};

use flate2::{Compression, GzBuilder};

/// Size, count and ratio limits for reading an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The compressed archive.
    pub max_archive_bytes: u64,
    /// Everything decompressed (tar headers and padding included).
    pub max_unpacked_bytes: u64,
    /// One member.
    pub max_member_bytes: u64,
    /// Tar entries (extension headers included).
    pub max_entries: usize,
    /// Decompressed bytes per compressed byte, checked once past 1 MiB
    /// (`RATIO_FLOOR`).
    pub max_ratio: u64,
}

/// Below this many decompressed bytes the ratio is not checked (tar padding of a few small
/// files compresses far better than any real content).
pub const RATIO_FLOOR: u64 = 1 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_archive_bytes: 1 << 30,
            max_unpacked_bytes: 2 << 30,
            max_member_bytes: 1 << 30,
            max_entries: 100_000,
            max_ratio: 100,
        }
    }
}

const LEVEL: u32 = 6;
/// Longest member name a bundle may hold, in bytes.
const MAX_NAME_BYTES: usize = 1024;
/// The only gzip header tilegen writes (and so the only one it reads): no flags, mtime 0,
/// XFL 0 (level 6), OS 255.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// Writes `members` (path, bytes), in the order given, as a reproducible `.tar.gz`.
pub fn write(members: &[(&str, &[u8])], mtime: u64) -> io::Result<Vec<u8>> {
    let gz = GzBuilder::new()
        .mtime(0)
        .operating_system(0xff)
        .write(Vec::new(), Compression::new(LEVEL));
    let mut tar = tar::Builder::new(gz);
    for (path, bytes) in members {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(mtime);
        // append_data sets the path (a GNU long-name entry when needed) and the checksum.
        tar.append_data(&mut h, path, *bytes)?;
    }
    let gz = tar.into_inner()?;
    let out = gz.finish()?;
    debug_assert_eq!(out[..10], GZIP_HEADER);
    Ok(out)
}

/// Whether `path` is a name tilegen could have written: `/`-separated parts of ASCII
/// letters, digits, `_`, `-`, `+` and `.`, none empty, `.` or `..`, not absolute.
pub fn check_member_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("a member has an empty name".into());
    }
    // The name is hostile: shown escaped (a NUL or newline printed raw would garble the
    // message) and cut on a character boundary.
    let shown = crate::escape::shown_prefix(path, 200);
    if path.starts_with('/') {
        return Err(format!("`{shown}` is an absolute path"));
    }
    if path.len() > MAX_NAME_BYTES {
        let start = crate::escape::shown_prefix(path, 64);
        return Err(format!("`{start}` has a name over {MAX_NAME_BYTES} bytes"));
    }
    for part in path.split('/') {
        match part {
            ".." => {
                return Err(format!(
                    "`{shown}` has a `..` component (it would escape the folder)"
                ))
            }
            "" | "." => return Err(format!("`{shown}` has an empty or `.` component")),
            _ => {}
        }
    }
    if let Some(c) = path
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '.' | '/')))
    {
        return Err(format!(
            "`{shown}` has the character {c:?}, which bundle names never hold"
        ));
    }
    Ok(())
}

/// Counts the compressed bytes the decompressor has taken, so that the ratio is judged
/// against what produced the output (bytes after the stream must not dilute it).
struct Consumed<R> {
    inner: R,
    consumed: u64,
}

impl<R: BufRead> Read for Consumed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Consumed<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, n: usize) {
        self.consumed += n as u64;
        self.inner.consume(n);
    }
}

/// Counts what comes out of the decompressor and stops it at the limits, remembering why
/// (the tar reader may rewrap the error).
struct Limited<R: BufRead> {
    inner: flate2::bufread::GzDecoder<Consumed<R>>,
    read: u64,
    limits: Limits,
    violation: Option<String>,
}

impl<R: BufRead> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        let compressed = self.inner.get_ref().consumed;
        if self.read > self.limits.max_unpacked_bytes {
            self.violation = Some(format!(
                "the archive unpacks to more than {} bytes (the limit)",
                self.limits.max_unpacked_bytes
            ));
        } else if self.read > RATIO_FLOOR
            && self.read > compressed.saturating_mul(self.limits.max_ratio)
        {
            self.violation = Some(format!(
                "the archive unpacks to over {} times the {compressed} compressed bytes it took (a decompression bomb?)",
                self.limits.max_ratio
            ));
        }
        match &self.violation {
            Some(v) => Err(io::Error::other(v.clone())),
            None => Ok(n),
        }
    }
}

/// What [`read_from`] does with each member it accepts: `begin` with its name and size (all
/// archive checks passed), `chunk` with its bytes in order, `end` once all `size` bytes
/// arrived. An error stops the read and becomes the archive's error.
pub trait Visit {
    fn begin(&mut self, path: &str, size: u64) -> Result<(), String>;
    fn chunk(&mut self, bytes: &[u8]) -> Result<(), String>;
    fn end(&mut self) -> Result<(), String>;
}

/// Collects every member in memory, for [`read`].
#[derive(Default)]
struct Collect {
    members: Vec<(String, Vec<u8>)>,
}

impl Visit for Collect {
    fn begin(&mut self, path: &str, size: u64) -> Result<(), String> {
        let cap = size.min(1 << 24) as usize;
        self.members
            .push((path.to_string(), Vec::with_capacity(cap)));
        Ok(())
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<(), String> {
        if let Some((_, data)) = self.members.last_mut() {
            data.extend_from_slice(bytes);
        }
        Ok(())
    }
    fn end(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// Reads every member of a `.tar.gz`, in archive order, refusing anything but plain files
/// with safe, unique (also case-insensitively) names within the limits, and any corruption:
/// the whole gzip stream is read, so its CRC is checked, and nothing may follow it.
pub fn read(bytes: &[u8], limits: &Limits) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut all = Collect::default();
    read_from(bytes, bytes.len() as u64, limits, &mut all)?;
    Ok(all.members)
}

/// [`read`] as a stream: `input` holds `len` bytes of archive (a file's size), which are
/// read once, front to back, to the end (so a hash of what `input` gives covers the whole
/// file); each member goes to `visit` in chunks as it is decompressed, so memory stays
/// bounded whatever the members' sizes. Every check of [`read`] applies, with the same
/// messages; `visit` sees a member only once its name, type and size passed them, but the
/// archive as a whole is good only when this returns `Ok`.
pub fn read_from<R: BufRead>(
    mut input: R,
    len: u64,
    limits: &Limits,
    visit: &mut dyn Visit,
) -> Result<(), String> {
    if len > limits.max_archive_bytes {
        return Err(format!(
            "the archive is {len} bytes, over the limit of {}",
            limits.max_archive_bytes
        ));
    }
    let mut header = [0u8; GZIP_HEADER.len()];
    if len < GZIP_HEADER.len() as u64 + 8 || input.read_exact(&mut header).is_err() {
        return Err("the archive is truncated (too short for gzip)".into());
    }
    if header != GZIP_HEADER {
        return Err(if header[..2] == [0x1f, 0x8b] {
            "the gzip header is not the one tilegen writes (no name, mtime 0, OS 255): not a tilegen bundle, or corrupt".into()
        } else {
            "not a gzip file (a bundle is a .tar.gz written by `tilegen bundle create`)".into()
        });
    }
    let mut input = Limited {
        inner: flate2::bufread::GzDecoder::new(Consumed {
            inner: io::Cursor::new(header).chain(input),
            consumed: 0,
        }),
        read: 0,
        limits: *limits,
        violation: None,
    };
    let members = read_tar(&mut input, limits, visit);
    let members = members.and_then(|()| {
        // Read to the end of the gzip stream (the tar end marker and the CRC trailer). Only
        // zeros may follow the end marker: tar readers that go on past it (`tar -i`) must
        // find no member that was never checked.
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = input
                .read(&mut buf)
                .map_err(|e| format!("corrupt archive after the last member: {e}"))?;
            if n == 0 {
                return Ok(());
            }
            if buf[..n].iter().any(|&b| b != 0) {
                return Err("data after the archive's end marker".to_string());
            }
        }
    });
    match (members, input.violation.take()) {
        (_, Some(v)) => return Err(v),
        (m, None) => m?,
    }
    let (_, mut rest) = input.inner.into_inner().inner.into_inner();
    let trailing = io::copy(&mut rest, &mut io::sink())
        .map_err(|e| format!("cannot read the archive after the compressed stream: {e}"))?;
    if trailing > 0 {
        return Err(format!(
            "{trailing} bytes of trailing data after the compressed stream"
        ));
    }
    Ok(())
}

/// Why an extension entry other than a GNU long name is refused.
fn extension(kind: &str) -> String {
    format!("a {kind} entry: bundles hold plain files with GNU long names only")
}

fn read_tar<R: Read>(input: R, limits: &Limits, visit: &mut dyn Visit) -> Result<(), String> {
    let corrupt = |e: io::Error| format!("corrupt or truncated archive: {e}");
    let mut archive = tar::Archive::new(input);
    let mut folded: BTreeMap<String, String> = BTreeMap::new();
    let mut buf = vec![0u8; 64 << 10];
    // Raw entries: the tar crate would read a GNU long-name or PAX member whole, whatever its
    // size, to apply it. A long name (what `write` emits for paths over 100 bytes) is read
    // here within the name limit; other extensions are not what tilegen writes.
    let mut long_name: Option<Vec<u8>> = None;
    for (n, entry) in archive.entries().map_err(corrupt)?.raw(true).enumerate() {
        if n >= limits.max_entries {
            return Err(format!(
                "the archive has more than {} entries (the limit)",
                limits.max_entries
            ));
        }
        let mut entry = entry.map_err(corrupt)?;
        match entry.header().entry_type() {
            tar::EntryType::GNULongName => {
                let size = entry.size();
                if size > MAX_NAME_BYTES as u64 + 1 {
                    return Err(format!(
                        "a long-name entry of {size} bytes: names are at most {MAX_NAME_BYTES} bytes"
                    ));
                }
                let mut name = Vec::with_capacity(size as usize);
                (&mut entry)
                    .take(size)
                    .read_to_end(&mut name)
                    .map_err(corrupt)?;
                // GNU tar ends the name with a NUL.
                while name.last() == Some(&0) {
                    name.pop();
                }
                if long_name.replace(name).is_some() {
                    return Err("two long-name entries in a row".into());
                }
                continue;
            }
            tar::EntryType::GNULongLink => return Err(extension("GNU long-link")),
            tar::EntryType::XHeader | tar::EntryType::XGlobalHeader => {
                return Err(extension("PAX header"))
            }
            _ => {}
        }
        let raw = match long_name.take() {
            Some(name) => std::borrow::Cow::Owned(name),
            None => entry.path_bytes(),
        };
        let path = String::from_utf8(raw.to_vec()).map_err(|_| {
            // A hostile name can be megabytes long: show its start only.
            let start = &raw[..raw.len().min(256)];
            let shown = crate::escape::shown_prefix(&String::from_utf8_lossy(start), 200);
            format!("`{shown}` is not a UTF-8 name")
        })?;
        let kind = entry.header().entry_type();
        let what = match kind {
            tar::EntryType::Regular => None,
            tar::EntryType::Symlink => Some("a symbolic link (links are not allowed)"),
            tar::EntryType::Link => Some("a hard link (links are not allowed)"),
            tar::EntryType::Char | tar::EntryType::Block => Some("a device file"),
            tar::EntryType::Fifo => Some("a fifo"),
            tar::EntryType::Directory => Some("a directory entry (bundles hold only files)"),
            _ => Some("not a plain file"),
        };
        if let Some(what) = what {
            return Err(format!(
                "`{}` is {what}",
                crate::escape::shown_prefix(&path, 200)
            ));
        }
        check_member_path(&path)?;
        let size = entry.size();
        if size > limits.max_member_bytes {
            return Err(format!(
                "`{path}` is {size} bytes, over the member limit of {}",
                limits.max_member_bytes
            ));
        }
        if let Some(other) = folded.insert(path.to_ascii_lowercase(), path.clone()) {
            return Err(if other == path {
                format!("`{path}` appears twice in the archive")
            } else {
                format!("`{other}` and `{path}` differ only in case (they collide on case-insensitive file systems)")
            });
        }
        visit.begin(&path, size)?;
        let mut data = (&mut entry).take(size);
        let mut got = 0u64;
        loop {
            let k = match data.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("`{path}`: corrupt or truncated: {e}")),
            };
            got += k as u64;
            visit.chunk(&buf[..k])?;
        }
        if got != size {
            return Err(format!("`{path}` is truncated ({got} of {size} bytes)"));
        }
        visit.end()?;
    }
    if long_name.is_some() {
        return Err("the archive ends with a long name and no file for it".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gzipped tar of `entries` (type, name in the header, data), as tilegen would write it
    /// but for what the entries are.
    fn crafted(entries: &[(tar::EntryType, &str, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (kind, name, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            tar.append(&h, *data).unwrap();
        }
        let body = tar.into_inner().unwrap();
        let mut gz = GzBuilder::new()
            .mtime(0)
            .operating_system(0xff)
            .write(Vec::new(), Compression::new(LEVEL));
        std::io::Write::write_all(&mut gz, &body).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn long_names_round_trip_and_oversized_extensions_are_refused_unread() {
        let long = format!("kernels/{}.sm_90a.cubin", "x".repeat(300));
        let a = write(&[(long.as_str(), b"bin")], 7).unwrap();
        let m = read(&a, &Limits::default()).unwrap();
        assert_eq!(m, vec![(long.clone(), b"bin".to_vec())]);
        // A long name of 2 MB: refused by its header's size, before its data is read.
        let big = vec![b'a'; 2 << 20];
        let e = read(
            &crafted(&[
                (tar::EntryType::GNULongName, "././@LongLink", &big),
                (tar::EntryType::Regular, "a", b"x"),
            ]),
            &Limits::default(),
        )
        .unwrap_err();
        assert!(e.contains("long-name entry of 2097152 bytes"), "{e}");
        // PAX headers and long links are not what tilegen writes.
        for kind in [tar::EntryType::XHeader, tar::EntryType::GNULongLink] {
            let e = read(
                &crafted(&[
                    (kind, "h", b"10 path=a\n"),
                    (tar::EntryType::Regular, "a", b"x"),
                ]),
                &Limits::default(),
            )
            .unwrap_err();
            assert!(e.contains("bundles hold plain files"), "{e}");
        }
        // A long name with no file after it.
        let e = read(
            &crafted(&[(tar::EntryType::GNULongName, "././@LongLink", b"name\0")]),
            &Limits::default(),
        )
        .unwrap_err();
        assert!(e.contains("no file for it"), "{e}");
    }

    #[test]
    fn round_trip_and_fixed_header() {
        let a = write(&[("a.txt", b"one"), ("k/b.bin", &[0u8; 3])], 7).unwrap();
        assert_eq!(a[..10], GZIP_HEADER);
        let m = read(&a, &Limits::default()).unwrap();
        assert_eq!(
            m,
            vec![
                ("a.txt".to_string(), b"one".to_vec()),
                ("k/b.bin".to_string(), vec![0; 3])
            ]
        );
        let mut trailing = a.clone();
        trailing.extend_from_slice(b"junk");
        assert!(read(&trailing, &Limits::default())
            .unwrap_err()
            .contains("trailing data"));
    }

    #[test]
    fn member_names() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../b",
            "a//b",
            "./a",
            "a\\b",
            "C:x",
            "a b",
        ] {
            assert!(check_member_path(bad).is_err(), "{bad}");
        }
        for good in [
            "manifest.json",
            "kernels/gemm_bf16_64x64x32.sm_90a.cubin",
            "bindings.rs",
        ] {
            assert!(check_member_path(good).is_ok(), "{good}");
        }
    }
}
