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
    let ed = editing()?;
    let (shown, path, text) = (ed.shown.clone(), ed.path.clone(), &ed.text);
    // The file as it is must already be one rdna1-patch reads.
    let existing = Config::load()?.trusted()?;
    let key_id = super::sign::public_key_id(&public);
    let line = public.to_base64();
    if existing.iter().any(|k| k.to_bytes() == public.to_bytes()) {
        return Ok(Trusted {
            config: shown,
            key_id,
            added: false,
        });
    }
    let new = with_key(text, &line).map_err(|why| {
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

/// The config, open for an edit: its name as the user knows it, the file
/// it is (a symlinked config, a dotfiles repository's, is edited where it
/// points, so the link stays), its text, and the lock on its directory
/// that two runs at once wait on (else the second write loses the first's
/// key).
struct Editing {
    shown: PathBuf,
    path: PathBuf,
    text: String,
    _lock: std::fs::File,
}

fn editing() -> Result<Editing> {
    let shown = config::path().context(
        "no config dir: neither RDNA1_PATCH_CONFIG nor a home directory says where the config goes",
    )?;
    let path = shown.canonicalize().unwrap_or_else(|_| shown.clone());
    if let Some(dir) = path.parent() {
        crate::fsutil::create_dir_all(dir)?;
    }
    let _lock = crate::fsutil::lock_dir(path.parent().unwrap_or(Path::new("/")))?;
    refuse_read_only(&path)?;
    let text = match path.exists() {
        true => crate::fsutil::read_small(&path, 1 << 20)?,
        false => String::new(),
    };
    Ok(Editing {
        shown,
        path,
        text,
        _lock,
    })
}

/// Every trusted key: its id and the entry that names it.
pub struct Listed {
    pub config: String,
    pub keys: Vec<(String, String)>,
}

/// `trust --list`.
pub fn list() -> Result<Listed> {
    let config = Config::load()?;
    let keys = config.trusted()?;
    Ok(Listed {
        config: config.describe(),
        keys: keys
            .iter()
            .zip(&config.trusted_keys)
            .map(|(k, entry)| (super::sign::public_key_id(k), entry.clone()))
            .collect(),
    })
}

/// `trust --remove KEY`: KEY is a key id as `trust --list` shows it, a key
/// string, or a `.pub` file. Every entry naming that key goes; the rest of
/// the file is kept. The ids removed, and the config.
pub fn remove(key: &str) -> Result<(Vec<String>, PathBuf)> {
    let ed = editing()?;
    let (shown, path, text) = (&ed.shown, &ed.path, &ed.text);
    let listed = list()?;
    let wanted = match read_key(key) {
        Ok(k) => super::sign::public_key_id(&k),
        Err(_) => key.trim().to_ascii_uppercase(),
    };
    let gone: Vec<&(String, String)> = listed.keys.iter().filter(|(id, _)| *id == wanted).collect();
    if gone.is_empty() {
        return Err(hint(
            format!(
                "no trusted key in {} is {key}; nothing was changed",
                shown.display()
            ),
            "`rdna1-patch trust --list` shows the trusted keys and their ids",
        ));
    }
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    if let Some(list) = doc
        .get_mut("trusted-keys")
        .and_then(toml_edit::Item::as_array_mut)
    {
        list.retain(|v| {
            !gone
                .iter()
                .any(|(_, entry)| v.as_str() == Some(entry.as_str()))
        });
    }
    write(path, &doc.to_string())?;
    Ok((
        gone.iter().map(|(id, _)| id.clone()).collect(),
        shown.clone(),
    ))
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
            "make it writable (`{}`) and run this again, or add the key to its trusted-keys by hand",
            crate::shell::line([Path::new("chmod"), Path::new("u+w"), path])
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
