//! `rdna1-patch trust`: add a publisher's minisign public key to the
//! config's `trusted-keys`, as `cargo add` edits a manifest: the rest of
//! the file (comments, order, caches) is kept, and the new file is
//! checked before it replaces the old one.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::config::{self, Config};
use crate::error::hint;

/// What `trust` did.
pub struct Trusted {
    pub config: PathBuf,
    /// The key's id as signatures and `build --from` name it.
    pub key_id: String,
    /// False when the config already trusted it.
    pub added: bool,
}

/// Trust `key`: a key string (the second line of a minisign `.pub`
/// file) or the path of such a file, read now. The config gets the key
/// string, never the path: a file that changes later must not change
/// whom the user trusts.
pub fn trust(key: &str) -> Result<Trusted> {
    let public = read_key(key)?;
    let shown = config::path().context(
        "no config dir: neither RDNA1_PATCH_CONFIG nor a home directory says where the config goes",
    )?;
    // A config that is a symlink (a dotfiles repository's) is edited where
    // it points, so the link stays and its target gets the key.
    let path = shown.canonicalize().unwrap_or_else(|_| shown.clone());
    if let Some(dir) = path.parent() {
        crate::fsutil::create_dir_all(dir)?;
    }
    // Two runs at once must not each add their key to the same old text,
    // the second write losing the first's key.
    let _lock = crate::fsutil::lock_dir(path.parent().unwrap_or(Path::new("/")))?;
    refuse_read_only(&path)?;
    // The file as it is must already be one rdna1-patch reads.
    let existing = Config::load()?.trusted()?;
    let text = match path.exists() {
        true => crate::fsutil::read_small(&path, 1 << 20)?,
        false => String::new(),
    };
    let key_id = super::sign::key_id(&public.to_bytes()[2..10]);
    let line = public.to_base64();
    if existing.iter().any(|k| k.to_bytes() == public.to_bytes()) {
        return Ok(Trusted {
            config: shown,
            key_id,
            added: false,
        });
    }
    let new = with_key(&text, &line).map_err(|why| {
        hint(
            format!("cannot add the key to {}: {why}", path.display()),
            "fix trusted-keys by hand (a list of key strings), or move the file away",
        )
    })?;
    write(&path, &new)?;
    Ok(Trusted {
        config: shown,
        key_id,
        added: true,
    })
}

/// A config the user made read-only is theirs to change, not ours.
fn refuse_read_only(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o200 != 0 {
        return Ok(());
    }
    Err(hint(
        format!(
            "{} is read-only (mode {mode:o}); rdna1-patch does not change a file you made read-only, so the key was not added",
            path.display()
        ),
        format!(
            "make it writable (`chmod u+w {}`) and run this again, or add the key to its trusted-keys by hand",
            path.display()
        ),
    ))
}

/// The key `arg` names: a key string, else a `.pub` file.
fn read_key(arg: &str) -> Result<minisign::PublicKey> {
    if let Ok(k) = minisign::PublicKey::from_base64(arg.trim()) {
        return Ok(k);
    }
    let help =
        "give the second line of the publisher's minisign.pub (RW...), or the path of that file";
    let file = Path::new(arg);
    if !file.exists() {
        return Err(hint(
            format!("`{arg}` is neither a minisign public key nor a file"),
            help,
        ));
    }
    let text = crate::fsutil::read_small(file, config::KEY_FILE_LIMIT)?;
    config::decode_key_file(&text).ok_or_else(|| {
        hint(
            format!("{} holds no minisign public key", file.display()),
            help,
        )
    })
}

/// `text` (a config) with `key` appended to its `trusted-keys`; an error
/// says what in the file stands in the way.
fn with_key(text: &str, key: &str) -> std::result::Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    let keys = doc
        .entry("trusted-keys")
        .or_insert_with(|| toml_edit::value(toml_edit::Array::new()));
    let list = keys
        .as_array_mut()
        .ok_or("its trusted-keys is not a list")?;
    list.push(key);
    Ok(doc.to_string())
}

/// Replace the config with `text`, once rdna1-patch reads it back as a
/// config; it keeps its mode.
fn write(path: &Path, text: &str) -> Result<()> {
    toml::from_str::<Config>(text)
        .context("the edited config would not be one rdna1-patch reads; nothing was written")?;
    crate::fsutil::write_atomic(path, text.as_bytes(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3";

    #[test]
    fn a_key_is_appended_and_the_rest_of_the_file_kept() {
        let text = "# mine\ncaches = [\"oci://h/r\"] # the team's\n";
        let new = with_key(text, KEY).unwrap();
        assert_eq!(
            new,
            format!("# mine\ncaches = [\"oci://h/r\"] # the team's\ntrusted-keys = [\"{KEY}\"]\n")
        );
        let again = with_key("trusted-keys = [\"a.pub\"]\n", KEY).unwrap();
        assert_eq!(again, format!("trusted-keys = [\"a.pub\", \"{KEY}\"]\n"));
    }

    #[test]
    fn a_trusted_keys_that_is_no_list_is_said() {
        assert_eq!(
            with_key("trusted-keys = \"x\"\n", KEY).unwrap_err(),
            "its trusted-keys is not a list"
        );
    }
}
