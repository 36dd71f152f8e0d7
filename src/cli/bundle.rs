//! `tilegen bundle …`: create, check, unpack and sign prebuilt kernel bundles.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use tilegen::Error;

use super::report::Reporter;

#[derive(Subcommand)]
pub enum BundleAction {
    /// Pack a library folder (written by `tilegen generate`) into a bundle.
    Create {
        #[arg(long, default_value = "generated")]
        lib: PathBuf,
        /// Bundle file to write (.tar.gz).
        #[arg(long)]
        out: PathBuf,
    },
    /// Check every member against bundle.json (and, with --pubkey, the signature FILE.minisig
    /// first); exit 7 when anything is wrong.
    Verify {
        file: PathBuf,
        #[command(flatten)]
        sig: SigArgs,
    },
    /// Verify, then print the bundle manifest's summary.
    Inspect {
        file: PathBuf,
        #[command(flatten)]
        sig: SigArgs,
    },
    /// Verify, then install into an absent or empty folder atomically.
    Unpack {
        file: PathBuf,
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        sig: SigArgs,
    },
    /// Sign a bundle (or any file) with a minisign secret key, writing FILE.minisig beside it.
    Sign {
        file: PathBuf,
        /// Minisign secret key file (an encrypted one takes its password from
        /// TILEGEN_SIGN_PASSWORD).
        #[arg(long)]
        key: PathBuf,
    },
    /// Write a new unencrypted minisign key pair, tilegen.pub and tilegen.key, into a folder
    /// (for tests and CI secrets; never overwrites).
    Keygen {
        #[arg(long)]
        out: PathBuf,
    },
}

/// Signature checking for the bundle commands that read a bundle.
#[derive(Args)]
pub struct SigArgs {
    /// Check the bundle's signature FILE.minisig with this minisign public key (a .pub file,
    /// or the key itself, RW…) before reading the bundle; a bad signature is an error.
    #[arg(long)]
    pubkey: Option<String>,
    /// Refuse a bundle without a signature (needs --pubkey).
    #[arg(long, requires = "pubkey")]
    require_signed: bool,
}

pub fn run(action: BundleAction, rep: &Reporter) -> Result<ExitCode, Error> {
    use tilegen::__internal::bundle::sign;
    use tilegen::bundle::{self, SignaturePolicy, Signed};
    let limits = bundle::Limits::default();
    let pubkey = |sig: &SigArgs| sig.pubkey.as_deref().map(sign::read_public_key).transpose();
    fn policy<'a>(sig: &SigArgs, key: &'a Option<sign::PublicKey>) -> Option<SignaturePolicy<'a>> {
        key.as_ref().map(|k| SignaturePolicy {
            pubkey: k,
            required: sig.require_signed,
        })
    }
    let (what, file, m, signed) = match action {
        BundleAction::Create { lib, out } => {
            ("created", out.clone(), bundle::create(&lib, &out)?, None)
        }
        BundleAction::Verify { file, sig } => {
            let key = pubkey(&sig)?;
            let (m, signed) = bundle::check_signed(&file, &limits, policy(&sig, &key))?;
            ("verified", file, m, signed)
        }
        BundleAction::Inspect { file, sig } => {
            let key = pubkey(&sig)?;
            let (m, signed) = bundle::check_signed(&file, &limits, policy(&sig, &key))?;
            // The summary is the human form; JSON readers get the whole manifest below.
            if !rep.is_json() {
                print!("{}", m.summary());
            }
            ("inspected", file, m, signed)
        }
        BundleAction::Unpack { file, to, sig } => {
            let key = pubkey(&sig)?;
            let (m, signed) = bundle::unpack_signed(&file, &to, &limits, policy(&sig, &key))?;
            ("unpacked into", to, m, signed)
        }
        BundleAction::Sign { file, key } => {
            let out = sign::sign(&file, &key)?;
            rep.err(
                || serde_json::json!({"event": "signed", "path": file, "signature": out}),
                || format!("signed {}: wrote {}", file.display(), out.display()),
            );
            return Ok(ExitCode::SUCCESS);
        }
        BundleAction::Keygen { out } => {
            let (pk, sk) = sign::keygen(&out)?;
            rep.err(
                || serde_json::json!({"event": "keygen", "public_key": pk, "secret_key": sk}),
                || {
                    format!(
                        "wrote {} (public) and {} (secret, unencrypted: keep it out of version control)",
                        pk.display(),
                        sk.display()
                    )
                },
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let signature = match &signed {
        Some(Signed::Yes { key_id, comment }) => Some(format!(
            "signed by key {key_id} ({})",
            comment.replace('\t', ", ")
        )),
        Some(Signed::Unsigned) => Some("unsigned (no signature to check)".to_string()),
        None => None,
    };
    rep.err(
        || serde_json::json!({"event": what, "path": file, "bundle": m, "signature": signature}),
        || {
            let mut text = format!(
                "{what} {}: {} members, {} instances, archs {}",
                file.display(),
                m.members.len(),
                m.instances,
                m.archs.join(",")
            );
            if let Some(s) = &signature {
                text += &format!("\nsignature: {s}");
            }
            text
        },
    );
    Ok(ExitCode::SUCCESS)
}
