//! Signing a manifest with the maintainer's minisign, and reading whose
//! key signed one.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::scratch;
use crate::error::hint;

/// Signs with the maintainer's own minisign, as `minisign -S` would: the
/// key file stays the one `minisign -G` wrote (its password asked for by
/// minisign itself on the terminal, or given to it on its stdin when there
/// is none), and the signature is what `minisign -V` checks. Signatures
/// are verified here with the minisign crate, so users need no minisign.
pub struct Signer {
    key: PathBuf,
    minisign: PathBuf,
    /// What the user should know about the key file (who else can read it).
    pub warning: Option<String>,
    /// The key's password, for a run with no terminal to ask on.
    password: Option<String>,
}

/// The variable a password for the signing key may come from.
pub const PASSWORD_ENV: &str = "RDNA1_PATCH_SIGN_PASSWORD";

impl Signer {
    /// The key at `path`, and its password from `password_file` (its first
    /// line) or `$RDNA1_PATCH_SIGN_PASSWORD`. A key with a password and no
    /// way to give it (no terminal, none given) is refused here, before
    /// anything is packed or pushed.
    pub fn load(path: &Path, password_file: Option<&Path>) -> Result<Signer> {
        let minisign = which::which("minisign").ok().ok_or_else(|| {
            hint(
                "publish signs with minisign, which is not installed",
                "apt-get install minisign (or see https://jedisct1.github.io/minisign/); nothing was pushed",
            )
        })?;
        let text = crate::fsutil::read_small(path, 64 << 10).map_err(|e| {
            hint(
                format!("cannot read the signing key {}: {e:#}", path.display()),
                "make one with `mkdir -p ~/.minisign && minisign -G` (the key goes to ~/.minisign/minisign.key, minisign.pub to the current directory), or name yours with --sign-key FILE",
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
        let password = match password_file {
            Some(f) => Some(read_password(f)?),
            None => std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()),
        };
        let mut warnings: Vec<String> = password_file
            .and_then(|f| readable_by_others("the password file", f))
            .into_iter()
            .collect();
        use std::io::IsTerminal;
        if has_password(key_line) && password.is_none() && !std::io::stdin().is_terminal() {
            return Err(hint(
                format!(
                    "the signing key {} has a password, and there is no terminal to ask for it on",
                    path.display()
                ),
                format!(
                    "give it with --password-file FILE or ${PASSWORD_ENV}, or sign with a key made without one (`minisign -G -W`); nothing was pushed"
                ),
            ));
        }
        warnings.extend(readable_by_others("the signing key", path));
        Ok(Signer {
            key: path.to_owned(),
            minisign,
            warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
            password,
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
        // The password goes on minisign's stdin alone: left in its
        // environment, /proc/PID/environ would show it.
        cmd.env_remove(PASSWORD_ENV);
        cmd.arg("-S")
            .arg("-s")
            .arg(&self.key)
            .arg("-m")
            .arg(&file)
            .arg("-x")
            .arg(&sig)
            .args(["-t", trusted]);
        let (ok, said) = match &self.password {
            Some(p) => with_password(cmd, p)?,
            None => (crate::proc::interactive(cmd)?, String::new()),
        };
        if !ok {
            return Err(hint(
                format!("minisign could not sign with {}{said}", self.key.display()),
                "check the key and its password; nothing was pushed",
            ));
        }
        Ok(std::fs::read_to_string(&sig)?)
    }
}

/// A warning when others can read a secret (the key, its password file).
fn readable_by_others(what: &str, path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode())
        .unwrap_or(0);
    (mode & 0o077 != 0).then(|| {
        format!(
            "{what} {} can be read by others (mode {:o}); `{}` keeps it yours",
            path.display(),
            mode & 0o777,
            crate::shell::line([Path::new("chmod"), Path::new("600"), path])
        )
    })
}

/// Whether a secret key's line (base64 of "Ed", the KDF's name, ...) names
/// a KDF: then minisign asks for its password.
fn has_password(key_line: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(key_line.trim())
        .is_ok_and(|b| b.get(2..4).is_some_and(|kdf| kdf != [0, 0]))
}

fn read_password(file: &Path) -> Result<String> {
    let text = crate::fsutil::read_small(file, 4 << 10).map_err(|e| {
        hint(
            format!("cannot read the password file {}: {e:#}", file.display()),
            "--password-file names a file whose first line is the signing key's password; nothing was pushed",
        )
    })?;
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

/// Run minisign with the password on its stdin, where it reads it when
/// stdin is no terminal: whether it signed, and what it said (`: ...`).
fn with_password(mut cmd: std::process::Command, password: &str) -> Result<(bool, String)> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // A minisign that stopped reading is judged by its status below.
        let _ = writeln!(stdin, "{password}");
    }
    let out = child.wait_with_output()?;
    let said = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = said
        .lines()
        .map(|l| l.trim().trim_start_matches("Password:").trim())
        .filter(|l| !l.is_empty())
        .collect();
    Ok((out.status.success(), format!(": {}", said.join("; "))))
}

/// A public key's id, as minisign and signatures name it: its key number
/// (bytes 2..10, after the "Ed" algorithm tag).
pub(crate) fn public_key_id(k: &minisign::PublicKey) -> String {
    key_id(&k.to_bytes()[2..10])
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
