//! The lock file: the commit each tag resolved to on its first fetch, so a
//! tag that moves later stops the build (`--update` accepts it).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::FetchRequest;
use crate::builder::git::short;
use crate::error::hint;
use crate::fsutil;
use crate::fsutil::At;
use crate::ui::Ui;

/// Component name -> what its tag resolved to.
type LockFile = BTreeMap<String, LockEntry>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    pub url: String,
    pub tag: String,
    pub commit: String,
}

fn read_lock(path: &Path) -> Result<LockFile> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| {
            hint(
                format!("lock file {} is damaged: {e}", path.display()),
                "delete it to record the commits again on the next fetch",
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LockFile::default()),
        Err(e) => Err(e).at("read", path),
    }
}

/// The commit a build will use, as far as it is known without the network.
pub fn planned_commit(req: &FetchRequest) -> Result<Option<String>> {
    if let Some(c) = &req.source.commit {
        return Ok(Some(c.clone()));
    }
    let Some(pin) = lock_pin(req.source) else {
        return Ok(None);
    };
    let lock = read_lock(req.lock_file)?;
    Ok(lock
        .get(req.name)
        .filter(|e| e.url == req.source.url && e.tag == pin)
        .map(|e| e.commit.clone()))
}

/// What a lock entry is keyed by besides the URL: the tag, or for a
/// tarball `sha256:HEX` (its entry records the commit its unpacked tree
/// was made into, so the build key is known before the next unpack).
pub(super) fn lock_pin(source: &crate::builder::profile::Source) -> Option<String> {
    match (&source.sha256, &source.tag) {
        (Some(sha), _) => Some(format!("sha256:{sha}")),
        (None, tag) => tag.clone(),
    }
}

pub(super) fn check_lock(req: &FetchRequest, tag: &str, commit: &str, ui: &Ui) -> Result<()> {
    let c = req.source;
    let lock = read_lock(req.lock_file)?;
    match lock.get(req.name) {
        Some(e) if e.url == c.url && e.tag == tag && e.commit == commit => return Ok(()),
        Some(e) if e.url == c.url && e.tag == tag => {
            if !req.update {
                return Err(hint(
                    format!(
                        "tag {} of {} now resolves to {}, but {} recorded {} on the first fetch",
                        tag,
                        c.url,
                        commit,
                        req.lock_file.display(),
                        e.commit
                    ),
                    "a moved tag can mean a compromised or rewritten upstream; inspect it, then pass --update to accept the new commit",
                ));
            }
            ui.warn(format!(
                "accepting moved tag {}: {} -> {} (--update)",
                tag,
                short(&e.commit),
                short(commit)
            ));
        }
        _ => {}
    }
    record(req, tag, commit)
}

/// Write `tag` -> `commit` for this source into the lock file.
pub(super) fn record(req: &FetchRequest, tag: &str, commit: &str) -> Result<()> {
    let mut lock = read_lock(req.lock_file)?;
    let wanted = LockEntry {
        url: req.source.url.clone(),
        tag: tag.to_owned(),
        commit: commit.to_owned(),
    };
    if lock.get(req.name) == Some(&wanted) {
        return Ok(());
    }
    lock.insert(req.name.to_owned(), wanted);
    let text = format!(
        "# Written by rdna1-patch: the commit each tag resolved to when first fetched.\n{}",
        toml::to_string(&lock)?
    );
    if let Some(dir) = req.lock_file.parent() {
        fsutil::create_dir_all(dir)?;
    }
    fsutil::write_atomic(req.lock_file, text.as_bytes(), None)
}
