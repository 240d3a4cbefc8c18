//! The user's own settings: `$RDNA1_PATCH_CONFIG`, else
//! `$XDG_CONFIG_HOME/rdna1-patch/config.toml`. No file is no settings.
//!
//! ```toml
//! # Where `build` looks for a finished build before compiling one.
//! caches = ["oci://ghcr.io/someone/miopen-rdna1"]
//! # minisign public keys whose signatures you accept.
//! trusted-keys = ["RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"]
//! ```
//!
//! Trust has this one source: a trusted key is a key string, or a `.pub`
//! file the config names, a relative name read beside the config itself.
//! Nothing is looked up in the current directory: a file there named like
//! a key must never stand in for it.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;

use crate::error::hint;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    #[serde(default)]
    pub caches: Vec<String>,
    #[serde(default)]
    pub trusted_keys: Vec<String>,
    /// Where the settings came from, for messages.
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

pub fn path() -> Option<PathBuf> {
    match std::env::var_os("RDNA1_PATCH_CONFIG").filter(|v| !v.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => crate::fsutil::project_dirs().map(|d| d.config_dir().join("config.toml")),
    }
}

/// A config sudo's user may not read, said as such: under sudo it is read
/// as them, and the generic help (worked out as root) would mislead.
fn unreadable_as_user(e: anyhow::Error, path: &Path) -> anyhow::Error {
    let denied =
        crate::error::io_errors(&e).any(|io| io.kind() == std::io::ErrorKind::PermissionDenied);
    match (denied, crate::owner::invoking_user()) {
        (true, Some(uid)) if crate::owner::is_root() => {
            let who = crate::owner::name_of(uid);
            hint(
                format!(
                    "cannot read the config {}: {who} (uid {uid}, who ran sudo) may not read it, and under sudo the config is read as that user",
                    path.display()
                ),
                format!(
                    "make it readable by {who}, or name one they can read in RDNA1_PATCH_CONFIG; nothing was read"
                ),
            )
        }
        _ => e,
    }
}

impl Config {
    pub fn load() -> Result<Config> {
        let Some(path) = path() else {
            return Ok(Config::default());
        };
        // Named by the user's environment (`RDNA1_PATCH_CONFIG`, their
        // home): read as sudo's user when root acts for them, so a file
        // only root may read is not read at all (issue 69).
        let read = crate::fsutil::fd::as_invoking_user(|| match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => crate::fsutil::read_small(&path, 1 << 20).map(Some),
        })
        .map_err(anyhow::Error::new)?
        .map_err(|e| unreadable_as_user(e, &path))?;
        let Some(text) = read else {
            return Ok(Config {
                path: Some(path),
                ..Config::default()
            });
        };
        let mut config: Config = toml::from_str(&text).map_err(|e| {
            // Named, never quoted: the parser's own words and the line,
            // not the text of it.
            let line = e
                .span()
                .map(|s| text.bytes().take(s.start).filter(|b| *b == b'\n').count() + 1);
            let at = line.map_or_else(String::new, |l| format!(" (line {l})"));
            hint(
                format!(
                    "{} is not a valid rdna1-patch config{at}: {}",
                    path.display(),
                    e.message().trim_end()
                ),
                "it may set caches = [\"oci://...\"] and trusted-keys = [\"RW...\"]; fix the file, or move it away to run without it",
            )
        })?;
        for c in &config.caches {
            crate::share::oci::Reference::parse(c).map_err(|e| {
                hint(
                    format!("{}: caches has `{c}`: {e}", path.display()),
                    "a cache is oci://HOST/REPO or a directory",
                )
            })?;
        }
        config.path = Some(path);
        Ok(config)
    }

    /// The keys trusted-keys names, each decoded: a key string is the key
    /// (it is tried first, so no file can stand in for it); anything else
    /// is a minisign `.pub` file, relative to the config's directory.
    pub fn trusted(&self) -> Result<Vec<minisign::PublicKey>> {
        let base = self
            .path
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new("/"));
        self.trusted_keys
            .iter()
            .map(|entry| {
                let k = entry.trim();
                if let Ok(key) = minisign::PublicKey::from_base64(k) {
                    return Ok(key);
                }
                let file = base.join(k);
                let text = crate::fsutil::read_small(&file, KEY_FILE_LIMIT).map_err(|e| {
                    hint(
                        format!(
                            "{}: trusted-keys has `{k}`, which is not a minisign public key, and the key file {} cannot be read: {}",
                            self.describe(),
                            file.display(),
                            crate::error::chain(&e)
                        ),
                        "a trusted key is the second line of a minisign .pub file (RW...), or the path of that file (a relative path is read beside the config)",
                    )
                })?;
                decode_key_file(&text).ok_or_else(|| {
                    hint(
                        format!(
                            "{}: trusted-keys names {}, which holds no minisign public key",
                            self.describe(),
                            file.display()
                        ),
                        "name the .pub file `minisign -G` wrote, or put its second line (RW...) in trusted-keys",
                    )
                })
            })
            .collect()
    }

    /// Where the settings are, for a message.
    pub fn describe(&self) -> String {
        self.path
            .as_ref()
            .map_or("(no config dir)".to_owned(), |p| p.display().to_string())
    }
}

/// A `.pub` file is two lines; nothing larger is read.
pub(super) const KEY_FILE_LIMIT: u64 = 4 << 10;

/// minisign's `.pub` format (an untrusted comment, then the key), or the
/// key line alone.
pub(super) fn decode_key_file(text: &str) -> Option<minisign::PublicKey> {
    minisign::PublicKeyBox::from_string(text)
        .and_then(minisign::PublicKeyBox::into_public_key)
        .ok()
        .or_else(|| minisign::PublicKey::from_base64(text.trim()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3";

    fn config(dir: &Path, keys: &[&str]) -> Config {
        Config {
            trusted_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            path: Some(dir.join("config.toml")),
            ..Config::default()
        }
    }

    #[test]
    fn key_strings_win_and_files_are_read_beside_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let other = "RWTdO27qOJbeTAnYxsSiAacJP2vw7kcHO4ABBxWcK7Dm8iM7ydZy5GUb";
        // A file named like the key, holding another: the string wins.
        std::fs::write(
            dir.path().join(KEY),
            format!("untrusted comment: x\n{other}\n"),
        )
        .unwrap();
        let keys = config(dir.path(), &[KEY]).trusted().unwrap();
        assert_eq!(keys[0].to_base64(), KEY);
        std::fs::write(
            dir.path().join("m.pub"),
            format!("untrusted comment: x\n{other}\n"),
        )
        .unwrap();
        let keys = config(dir.path(), &["m.pub"]).trusted().unwrap();
        assert_eq!(keys[0].to_base64(), other);
        let err = config(dir.path(), &["absent.pub"]).trusted().unwrap_err();
        assert!(format!("{err:#}").contains("absent.pub"), "{err:#}");
        std::fs::write(dir.path().join("big.pub"), vec![b'R'; 1 << 20]).unwrap();
        assert!(config(dir.path(), &["big.pub"]).trusted().is_err());
    }
}
