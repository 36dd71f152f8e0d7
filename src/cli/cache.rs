//! `tilegen cache …`: inspect, check, clean or prune the compile cache.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use tilegen::__internal::cache::Cache;
use tilegen::Error;

use super::report::Reporter;

#[derive(clap::Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    action: CacheAction,
    /// Cache folder (default: TILEGEN_CACHE_DIR, else the user cache folder).
    #[arg(long, global = true)]
    cache_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum CacheAction {
    /// Entries and size.
    Stats,
    /// Check every entry; remove corrupt, unreadable and wrong-typed ones (a marked cache only).
    Verify,
    /// Remove every entry (a marked cache only; files tilegen did not write stay).
    Clean,
    /// Remove least recently used entries until the cache is at most --max-size.
    Gc {
        /// Size such as 500M or 2G.
        #[arg(long, value_parser = parse_size)]
        max_size: u64,
    },
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

pub fn run(args: CacheArgs, rep: &Reporter) -> Result<ExitCode, Error> {
    let cache = Cache::open(match args.cache_dir {
        Some(d) => d,
        None => Cache::default_location()?,
    });
    match args.action {
        CacheAction::Stats => {
            let s = cache.stats();
            // The remote's configuration and reachability; its counts are per run (generate).
            let remote = cache.clone().with_remote(None).remote_status();
            rep.out(
                || serde_json::json!({"cache": cache.root(), "stats": s, "remote": remote}),
                || {
                    format!(
                        "{}: {} entries, {:.1} MiB, {} temporary files{}{}",
                        cache.root().display(),
                        s.entries,
                        mib(s.bytes),
                        s.temporary_files,
                        if s.marked {
                            ""
                        } else {
                            " (not marked as a tilegen cache)"
                        },
                        remote
                            .as_ref()
                            .map(|r| format!("\n{}", r.line()))
                            .unwrap_or_default()
                    )
                },
            );
        }
        CacheAction::Verify => {
            let r = cache.verify()?;
            let bad = r.removed.len() + r.unrepaired.len();
            rep.out(
                || {
                    serde_json::json!({
                        "checked": r.checked, "corrupt_removed": r.removed,
                        "unrepaired": r.unrepaired, "foreign": r.foreign
                    })
                },
                || {
                    let mut lines = vec![format!(
                        "{} entries checked, {} corrupt or unreadable ({} removed)",
                        r.checked,
                        bad,
                        r.removed.len()
                    )];
                    lines.extend(r.removed.iter().map(|b| format!("  removed: {b}")));
                    lines.extend(r.unrepaired.iter().map(|b| format!("  not repaired: {b}")));
                    lines.extend(foreign_lines(&r.foreign));
                    lines.join("\n")
                },
            );
            if bad > 0 {
                return Ok(ExitCode::from(1));
            }
        }
        CacheAction::Clean => {
            let r = cache.clean()?;
            rep.out(
                || serde_json::json!({"removed": r}),
                || {
                    let mut lines = vec![format!(
                        "removed {} entries ({:.1} MiB), {} temporary and {} lock files under {}",
                        r.entries,
                        mib(r.bytes),
                        r.temporary_files,
                        r.lock_files,
                        cache.root().display()
                    )];
                    lines.extend(foreign_lines(&r.foreign));
                    lines.join("\n")
                },
            );
        }
        CacheAction::Gc { max_size } => {
            let r = cache.gc(max_size)?;
            rep.out(
                || {
                    serde_json::json!({
                        "removed": r.entries, "bytes_freed": r.bytes,
                        "temporary_files_removed": r.temporary_files,
                        "lock_files_removed": r.lock_files, "foreign": r.foreign
                    })
                },
                || {
                    format!(
                        "removed {} entries, freed {:.1} MiB; removed {} stale temporary and {} stale lock files",
                        r.entries,
                        mib(r.bytes),
                        r.temporary_files,
                        r.lock_files
                    )
                },
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn foreign_lines(foreign: &[String]) -> impl Iterator<Item = String> + '_ {
    foreign
        .iter()
        .map(|f| format!("  left alone (not tilegen's): {f}"))
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let m = match s[i..]
                .to_ascii_uppercase()
                .trim_end_matches('B')
                .trim_end_matches('I')
            {
                "" => 1u64,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(format!("unknown size unit in `{s}` (use K, M, G or T)")),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size `{s}`"))
}
