//! Helpers shared by the integration tests: a small library rendered without NVRTC and given
//! fake binaries, tilegen run as a child (and waited for with a hang guard), and hostile archives built from raw tar headers (gzipped
//! as tilegen writes them), with `bundle.json`'s hashes fixed up so that only the edit under
//! test is hostile.

// Each test file uses some of these.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tilegen::{FileRef, Manifest, Target};

pub fn sha(b: &[u8]) -> String {
    tilegen::__internal::hashing::sha256_hex(b)
}

pub fn golden_specs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/specs")
}

/// One spec file's text rendered without NVRTC (no binaries) into `dir/lib`, its cache in
/// `dir/cache`: the manifest and the library folder (bindings.rs, kernels/NAME.cu).
pub fn render_spec(dir: &Path, spec: &str) -> (Manifest, PathBuf) {
    let specs = dir.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::write(specs.join("a.yaml"), spec).unwrap();
    let out = dir.join("lib");
    let mut o = tilegen::Options::new(&specs, &out);
    o.compile = false;
    o.cache_dir = Some(dir.join("cache"));
    tilegen::generate(&o, &|_| {}).expect("the spec renders");
    let m = Manifest::from_bytes(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    (m, out)
}

/// The manifest's instance named `name` (the test's own library has it).
pub fn instance(m: &Manifest, name: &str) -> tilegen::InstanceEntry {
    m.instances
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no instance `{name}`"))
        .clone()
}

/// What loading one spec file's text (written as `dir/bad/b.yaml`) refuses, as one message.
pub fn spec_error(dir: &Path, spec: &str) -> String {
    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("b.yaml"), spec).unwrap();
    tilegen::__internal::spec::load_dir(&bad)
        .unwrap_err()
        .to_string()
}

/// A library rendered from specs without NVRTC, then given fake PTX and cubins and bindings
/// that embed them (what `generate` would write).
pub struct FakeLibrary<'a> {
    pub specs: PathBuf,
    pub filter: Option<&'a str>,
    /// Each target's arch and the PTX ISA version its PTX declares.
    pub targets: &'a [(&'a str, &'a str)],
    /// The size of the first instance's first cubin, written a block at a time, when it is
    /// to be large; the others are a few bytes.
    pub big_cubin: Option<usize>,
}

impl FakeLibrary<'_> {
    /// Writes the library into `dir` and returns its manifest.
    pub fn write(&self, dir: &Path) -> Manifest {
        let cache = tempfile::tempdir().unwrap();
        let mut o = tilegen::Options::new(&self.specs, dir);
        o.compile = false;
        o.cache_dir = Some(cache.path().to_path_buf());
        o.filter = self.filter.map(str::to_string);
        tilegen::generate(&o, &|_| {}).expect("renders without NVRTC");
        let mpath = dir.join("manifest.json");
        let mut m = Manifest::from_bytes(&std::fs::read(&mpath).unwrap()).unwrap();
        let mut big = self.big_cubin;
        for inst in &mut m.instances {
            for (arch, isa) in self.targets {
                let ptx = format!(
                    "//\n// fake PTX\n.version {isa}\n.target {arch}\n.address_size 64\n// {}\n",
                    inst.name
                );
                let write = |ext: &str, b: &[u8]| {
                    let path = format!("kernels/{}.{arch}.{ext}", inst.name);
                    std::fs::write(dir.join(&path), b).unwrap();
                    FileRef {
                        path,
                        sha256: sha(b),
                        bytes: b.len() as u64,
                    }
                };
                let cubin = match big.take() {
                    Some(n) => {
                        let path = format!("kernels/{}.{arch}.cubin", inst.name);
                        let sha256 = write_compressible(&dir.join(&path), n);
                        FileRef {
                            path,
                            sha256,
                            bytes: n as u64,
                        }
                    }
                    None => write(
                        "cubin",
                        format!("\x7fELF fake cubin of {} for {arch}", inst.name).as_bytes(),
                    ),
                };
                let ptx = write("ptx", ptx.as_bytes());
                m.files.extend([ptx.path.clone(), cubin.path.clone()]);
                inst.targets.push(Target {
                    arch: tilegen::Arch::parse(arch).unwrap(),
                    cache_key: sha(arch.as_bytes()),
                    ptx,
                    cubin,
                    resources: Default::default(),
                });
            }
        }
        // Bindings generated as `generate` does: from the file list without themselves.
        m.files.retain(|f| f != "bindings.rs");
        m.files.sort();
        let bindings = tilegen::__internal::bindings::generate_in(&m, dir).unwrap();
        std::fs::write(dir.join("bindings.rs"), bindings).unwrap();
        m.files.push("bindings.rs".into());
        m.files.sort();
        std::fs::write(&mpath, m.to_bytes()).unwrap();
        m
    }
}

/// Writes a fake cubin of `n` bytes to `path` a block at a time (a test process's peak memory
/// is inherited by the children it spawns, so it must stay small) and returns its sha256.
/// It deflates about 40:1: each 4 KiB block is 64 pseudo-random bytes, then zeros, well
/// inside the 100:1 ratio limit, so a big member stays a legal one.
fn write_compressible(path: &Path, n: usize) -> String {
    use sha2::Digest;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut h = sha2::Sha256::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut block = [0u8; 4096];
    let mut left = n;
    block[..4].copy_from_slice(b"\x7fELF");
    while left > 0 {
        let k = left.min(block.len());
        for b in block[if left == n { 4 } else { 0 }..64].iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        f.write_all(&block[..k]).unwrap();
        h.update(&block[..k]);
        left -= k;
    }
    f.flush().unwrap();
    hex::encode(h.finalize())
}

/// tilegen with `args`, without the variables that would change what it does.
pub fn tilegen_command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tilegen"));
    c.args(args)
        .env_remove("TILEGEN_BUNDLE")
        .env_remove("TILEGEN_BUNDLE_PUBKEY")
        .env_remove("SOURCE_DATE_EPOCH");
    c
}

/// Runs [`tilegen_command`] with `env` added.
pub fn tilegen(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = tilegen_command(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Waits for a child, killing it (and failing) if it runs past a minute: a hang is a bug.
pub fn finish(mut child: std::process::Child, what: &str) -> Output {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{what}: still running after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

/// The members of a bundle (`bundle.json` first).
pub fn members(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    tilegen::__internal::bundle::archive::read(bytes, &tilegen::bundle::Limits::default()).unwrap()
}

/// `members` with member `path` replaced by `bytes` and `bundle.json` (the first member)
/// fixed up to match, so that the archive is consistent but for what `bytes` says.
pub fn replace_member(members: &mut [(String, Vec<u8>)], path: &str, bytes: Vec<u8>) {
    assert_eq!(members[0].0, "bundle.json");
    let mut b: serde_json::Value = serde_json::from_slice(&members[0].1).unwrap();
    for member in b["members"].as_array_mut().unwrap() {
        if member["path"] == path {
            member["sha256"] = sha(&bytes).into();
            member["bytes"] = bytes.len().into();
        }
    }
    let mut bj = serde_json::to_vec_pretty(&b).unwrap();
    bj.push(b'\n');
    members[0].1 = bj;
    let i = members.iter().position(|(p, _)| p == path).unwrap();
    members[i].1 = bytes;
}

/// Gzip exactly as tilegen writes it, so the hostile part is what gets tested.
pub fn gz(tar: &[u8]) -> Vec<u8> {
    let mut e = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(0xff)
        .write(Vec::new(), flate2::Compression::new(6));
    e.write_all(tar).unwrap();
    e.finish().unwrap()
}

/// One raw tar entry: any name bytes, any type, link target.
pub struct Raw {
    pub name: Vec<u8>,
    pub kind: tar::EntryType,
    pub data: Vec<u8>,
    pub link: Option<&'static str>,
}

/// A regular file entry.
pub fn file(name: impl AsRef<[u8]>, data: &[u8]) -> Raw {
    Raw {
        name: name.as_ref().to_vec(),
        kind: tar::EntryType::Regular,
        data: data.to_vec(),
        link: None,
    }
}

/// Regular file entries for `members`.
pub fn files(members: &[(String, Vec<u8>)]) -> Vec<Raw> {
    members.iter().map(|(p, d)| file(p, d)).collect()
}

/// A tar built with the low-level header API (no path validation), gzipped. A name of 100
/// bytes or more, or with a NUL, goes into a GNU long name entry (`././@LongLink`) first.
pub fn raw_archive(entries: &[Raw]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        if e.name.len() < 100 && !e.name.contains(&0) {
            h.as_old_mut().name[..e.name.len()].copy_from_slice(&e.name);
        } else {
            let mut l = tar::Header::new_gnu();
            l.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
            l.set_entry_type(tar::EntryType::GNULongName);
            let mut long = e.name.clone();
            long.push(0);
            l.set_size(long.len() as u64);
            l.set_mode(0o644);
            l.set_mtime(0);
            l.set_cksum();
            b.append(&l, long.as_slice()).unwrap();
            h.as_old_mut().name[..9].copy_from_slice(b"long_name");
        }
        h.set_entry_type(e.kind);
        h.set_size(e.data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        if let Some(l) = e.link {
            h.as_old_mut().linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_cksum();
        b.append(&h, e.data.as_slice()).unwrap();
    }
    gz(&b.into_inner().unwrap())
}
