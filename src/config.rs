//! The user's own settings: `$RDNA1_PATCH_CONFIG`, else
//! `$XDG_CONFIG_HOME/rdna1-patch/config.toml`. No file is no settings.
//!
//! ```toml
//! # Where `build` looks for a finished build before compiling one.
//! caches = ["oci://ghcr.io/someone/miopen-rdna1"]
//! # minisign public keys whose signatures you accept.
//! trusted-keys = ["RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"]
//! ```

use std::path::PathBuf;

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

impl Config {
    pub fn load() -> Result<Config> {
        let Some(path) = path() else {
            return Ok(Config::default());
        };
        if !path.exists() {
            return Ok(Config {
                path: Some(path),
                ..Config::default()
            });
        }
        let text = crate::fsutil::read_small(&path, 1 << 20)?;
        let mut config: Config = toml::from_str(&text).map_err(|e| {
            hint(
                format!("{} is not a valid rdna1-patch config: {e}", path.display()),
                "it may set caches = [\"oci://...\"] and trusted-keys = [\"RW...\"]; fix the file, or move it away to run without it",
            )
        })?;
        for c in &config.caches {
            crate::oci::Reference::parse(c).map_err(|e| {
                hint(
                    format!("{}: caches has `{c}`: {e}", path.display()),
                    "a cache is oci://HOST/REPO or a directory",
                )
            })?;
        }
        config.path = Some(path);
        Ok(config)
    }

    /// Where the settings are, for a message.
    pub fn describe(&self) -> String {
        self.path
            .as_ref()
            .map_or("(no config dir)".to_owned(), |p| p.display().to_string())
    }
}
