use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::PrefixArg;
use crate::share::{self, Signer};
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to: oci://HOST[:PORT]/REPO[:TAG], or a directory for an OCI
    /// image layout, DIR[:TAG] [default tag: <profile>-<build key>]
    #[arg(value_name = "REF", value_parser = super::build::parse_reference)]
    reference: crate::share::oci::Reference,
    #[command(flatten)]
    prefix: PrefixArg,
    /// The minisign secret key to sign with [default: ~/.minisign/minisign.key,
    /// where `minisign -G` puts it]
    #[arg(long, value_name = "FILE")]
    sign_key: Option<PathBuf>,
    /// Read the signing key's password from the first line of FILE, for a
    /// publish with no terminal to ask on [or: $RDNA1_PATCH_SIGN_PASSWORD]
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
    /// Give up on a registry that sends nothing for this long
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    net_timeout: u64,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let prefix = args.prefix.resolve()?;
    // What to publish first, then who signs it: no key is asked for a
    // prefix that holds no build.
    if let Err(crate::prefix::OpenError::Provenance(e)) = crate::prefix::Prefix::open(&prefix) {
        return Err(crate::error::hint(
            format!("no build to publish: {}", crate::error::chain(&e)),
            "run `rdna1-patch build miopen` first, or point --prefix at the prefix it installed to",
        ));
    }
    let key_file = match args.sign_key {
        Some(k) => k,
        None => directories::BaseDirs::new()
            .map(|d| d.home_dir().join(".minisign/minisign.key"))
            .ok_or_else(|| {
                anyhow::anyhow!("no home directory: name the key with --sign-key FILE")
            })?,
    };
    let signer = Signer::load(&key_file, args.password_file.as_deref())?;
    let net = crate::share::oci::Net {
        timeout: std::time::Duration::from_secs(args.net_timeout),
    };
    let term = super::term::Term::new();
    let ui = Ui::new(&term);
    if let Some(w) = &signer.warning {
        ui.warn(w);
    }
    let p = share::publish(&prefix, &args.reference, &signer, net, &ui)?;
    ui.stage(
        "Published",
        format!(
            "{} files ({} compressed{}) as {}",
            p.files,
            crate::fsutil::human_bytes(p.layer_size),
            if p.uploaded { "" } else { ", already there" },
            p.reference
        ),
    );
    crate::outln!("{}@{}", p.reference, p.digest);
    ui.note(format!("build key {}", p.key));
    ui.note(format!(
        "signed by key {}: users add its public key (the second line of the .pub file) to trusted-keys in their config",
        p.key_id
    ));
    Ok(ExitCode::SUCCESS)
}
