//! Signing a manifest with the maintainer's minisign, and reading whose
//! key signed one.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::scratch;
use crate::error::hint;

/// Signs with the maintainer's own minisign, as `minisign -S` would: the
/// key file stays the one `minisign -G` wrote (its password asked for by
/// minisign itself on the terminal), and the signature is what `minisign
/// -V` checks. Signatures are verified here with the minisign crate, so
/// users need no minisign.
pub struct Signer {
    key: PathBuf,
    minisign: PathBuf,
    /// What the user should know about the key file (who else can read it).
    pub warning: Option<String>,
}

impl Signer {
    pub fn load(path: &Path) -> Result<Signer> {
        let minisign = which::which("minisign").ok().ok_or_else(|| {
            hint(
                "publish signs with minisign, which is not installed",
                "apt-get install minisign (or see https://jedisct1.github.io/minisign/); nothing was pushed",
            )
        })?;
        let text = crate::fsutil::read_small(path, 64 << 10).map_err(|e| {
            hint(
                format!("cannot read the signing key {}: {e:#}", path.display()),
                "make one with `minisign -G` (it writes ~/.minisign/minisign.key), or name yours with --sign-key FILE",
            )
        })?;
        // A secret key file: a comment line, then the key, base64 of
        // "Ed" and a KDF name; a public key's line is shorter.
        let key_line = text.lines().nth(1).unwrap_or_default();
        if !text.starts_with("untrusted comment:")
            || !key_line.starts_with("RW")
            || key_line.len() < 100
        {
            return Err(hint(
                format!("{} is not a minisign secret key", path.display()),
                "give the secret key file `minisign -G` wrote (not the .pub file)",
            ));
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        let warning = (mode & 0o077 != 0).then(|| {
            format!(
                "the signing key {} can be read by others (mode {:o}); `chmod 600 {}` keeps it yours",
                path.display(),
                mode & 0o777,
                path.display()
            )
        });
        Ok(Signer {
            key: path.to_owned(),
            minisign,
            warning,
        })
    }

    /// A detached signature of `data` whose trusted comment is `trusted`.
    pub(super) fn sign(&self, data: &[u8], trusted: &str) -> Result<String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sign-{}-", std::process::id()))
            .tempdir_in(scratch()?)?;
        let (file, sig) = (
            dir.path().join("manifest.json"),
            dir.path().join("manifest.minisig"),
        );
        std::fs::write(&file, data)?;
        let mut cmd = std::process::Command::new(&self.minisign);
        cmd.arg("-S")
            .arg("-s")
            .arg(&self.key)
            .arg("-m")
            .arg(&file)
            .arg("-x")
            .arg(&sig)
            .args(["-t", trusted]);
        let ok = crate::proc::interactive(cmd)?;
        if !ok {
            return Err(hint(
                format!("minisign could not sign with {}", self.key.display()),
                "check the key and its password (minisign says what went wrong above); nothing was signed",
            ));
        }
        Ok(std::fs::read_to_string(&sig)?)
    }
}

/// minisign prints key ids as 16 hex digits of the little-endian number.
pub(crate) fn key_id(keynum: &[u8]) -> String {
    keynum.iter().rev().map(|b| format!("{b:02X}")).collect()
}

pub(super) fn signature_key_id(signature: &str) -> Result<String> {
    let b = minisign::SignatureBox::from_string(signature)
        .map_err(|e| anyhow::anyhow!("minisign wrote a signature that does not parse: {e}"))?;
    Ok(key_id(b.keynum()))
}

/// Where a manifest's signature is stored, as cosign names it.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replace(':', "-"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn key_ids_read_as_minisign_prints_them() {
        assert_eq!(super::key_id(&[0x01, 0x02]), "0201");
    }
}
