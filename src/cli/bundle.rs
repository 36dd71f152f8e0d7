//! `tilegen bundle …`: create, check, unpack and sign prebuilt kernel bundles.

use std::process::ExitCode;

use tilegen::error::Error;

use crate::{emit_json, BundleAction, SigArgs};

pub fn bundle_command(action: BundleAction, json: bool) -> Result<ExitCode, Error> {
    use tilegen::bundle::{self, sign, SignaturePolicy, Signed};
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
            if !json {
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
            if json {
                emit_json(serde_json::json!({"event": "signed", "path": file, "signature": out}));
            } else {
                eprintln!("signed {}: wrote {}", file.display(), out.display());
            }
            return Ok(ExitCode::SUCCESS);
        }
        BundleAction::Keygen { out } => {
            let (pk, sk) = sign::keygen(&out)?;
            if json {
                emit_json(
                    serde_json::json!({"event": "keygen", "public_key": pk, "secret_key": sk}),
                );
            } else {
                eprintln!(
                    "wrote {} (public) and {} (secret, unencrypted: keep it out of version control)",
                    pk.display(),
                    sk.display()
                );
            }
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
    if json {
        emit_json(
            serde_json::json!({"event": what, "path": file, "bundle": m, "signature": signature}),
        );
    } else {
        eprintln!(
            "{what} {}: {} members, {} instances, archs {}",
            file.display(),
            m.members.len(),
            m.instances,
            m.archs.join(",")
        );
        if let Some(s) = signature {
            eprintln!("signature: {s}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
