//! Putting a staged prefix in place. A prefix that holds nothing but ours
//! is exchanged whole with the staged tree in one rename, so a run killed
//! at any instant leaves the previous prefix or the new one, never a mix.
//! A prefix shared with other files (`--prefix /usr/local`) is changed file
//! by file, MD5SUMS last: a killed run leaves it visibly incomplete (no
//! MD5SUMS), never vouched for.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{
    KEY, MD5SUMS, PROVENANCE, Provenance, RECORD_DIR, STAGING, ensure_writable, read_md5sums,
    staging_dir,
};
use crate::checksum::{self, Entry};
use crate::error::hint;
use crate::fsutil;

/// Start a fresh staging area (a leftover from an interrupted run is removed).
pub fn begin(prefix: &Path) -> Result<PathBuf> {
    ensure_writable(prefix)?;
    let staging = staging_dir(prefix);
    for leftover in [staging.clone()].into_iter().chain(aside(prefix)) {
        if std::fs::symlink_metadata(&leftover).is_ok() {
            fsutil::remove_path(&leftover)
                .with_context(|| format!("cannot remove the leftover {}", leftover.display()))?;
        }
    }
    fsutil::create_dir_all(&staging)?;
    fsutil::race_point("prefix-staging-made");
    Ok(staging)
}

/// The result of an install.
pub struct Installed {
    /// What MD5SUMS lists, as read from the staged files.
    pub entries: Vec<Entry>,
    pub removed: Vec<String>,
}

/// Move what CMake staged into the prefix, with MD5SUMS and provenance.
/// The checksums are read from the staged files as written, except those
/// in `known` (files the caller wrote from bytes it hashed); renames do
/// not change bytes, so nothing is read again.
pub fn commit(
    prefix: &Path,
    staging: &Path,
    manifest: &[PathBuf],
    mut provenance: Provenance,
    key: Option<&super::key::KeyInputs>,
    known: &[Entry],
    jobs: usize,
) -> Result<Installed> {
    let staged_root = staging.join(prefix.strip_prefix("/").unwrap_or(prefix));
    let rels = installed_paths(prefix, staging, manifest)?;
    provenance.library.path = rels
        .iter()
        .find(|r| {
            Path::new(r)
                .file_name()
                .is_some_and(|n| *n == *provenance.library.soname)
        })
        .cloned()
        .unwrap_or_default();
    provenance.files = rels.clone();
    fsutil::create_dir_all(&staged_root.join(RECORD_DIR))?;
    // Our records are hashed from the bytes written, never read back by
    // name: a staging dir its owner swapped for a symlink meanwhile would
    // have root read (and vouch for) a file of wherever it leads.
    let mut records = Vec::new();
    let mut record = |rel: &str, data: &[u8]| -> Result<()> {
        fsutil::write_atomic(&staged_root.join(rel), data, Some(0o644))?;
        records.push(Entry {
            md5: checksum::md5_bytes(data)?,
            path: rel.to_owned(),
        });
        Ok(())
    };
    record(PROVENANCE, provenance.text()?.as_bytes())?;

    let mut listed = rels;
    // A build has a key to share it by; a library fixed in place has none.
    if let Some(key) = key {
        record(KEY, serde_json::to_string_pretty(key)?.as_bytes())?;
        listed.push(KEY.to_owned());
    }
    listed.push(PROVENANCE.to_owned());
    let known_md5 = |rel: &String| {
        known
            .iter()
            .chain(&records)
            .find(|e| e.path == *rel)
            .map(|e| &e.md5)
    };
    let unknown: Vec<&String> = listed.iter().filter(|r| known_md5(r).is_none()).collect();
    let staged: Vec<PathBuf> = unknown.iter().map(|r| staged_root.join(r)).collect();
    let mut hashed = unknown.into_iter().zip(checksum::md5_files(&staged, jobs));
    let mut entries = Vec::new();
    for rel in &listed {
        let md5 = match known_md5(rel) {
            Some(m) => m.clone(),
            None => hashed.next().expect("one hash per unknown file").1?,
        };
        entries.push(Entry {
            md5,
            path: rel.clone(),
        });
    }
    let removed = move_into_place(prefix, &staged_root, &entries)?;
    // After an exchange the staging dir went with the previous prefix.
    fsutil::remove_path(staging)?;
    Ok(Installed { entries, removed })
}

/// Move a staged prefix whose files were checked against `entries` as
/// they were written (a pulled artifact) into place, MD5SUMS last.
/// Renames do not change bytes, so nothing is read again.
pub fn commit_verified(prefix: &Path, staging: &Path, entries: &[Entry]) -> Result<Vec<String>> {
    let removed = move_into_place(prefix, staging, entries)?;
    fsutil::remove_path(staging)?;
    Ok(removed)
}

/// The files CMake installed, relative to the prefix, sorted; anything
/// outside the prefix or in our records dir is an error.
fn installed_paths(prefix: &Path, staging: &Path, manifest: &[PathBuf]) -> Result<Vec<String>> {
    let mut rels = Vec::new();
    for path in manifest {
        let final_path = path
            .strip_prefix(staging)
            .map(|p| Path::new("/").join(p))
            .unwrap_or(path.clone());
        let rel = final_path.strip_prefix(prefix).with_context(|| {
            format!(
                "CMake installed {} outside the prefix {}",
                final_path.display(),
                prefix.display()
            )
        })?;
        let rel = rel
            .to_str()
            .context("installed file name is not UTF-8")?
            .to_owned();
        if rel.starts_with(RECORD_DIR) {
            bail!("the project installs {rel}, which rdna1-patch keeps for its own records");
        }
        rels.push(rel);
    }
    rels.sort();
    rels.dedup();
    Ok(rels)
}

/// Put the staged tree in place as the prefix, and remove what the
/// previous install listed and this one does not. Returns the removed.
fn move_into_place(prefix: &Path, staged_root: &Path, entries: &[Entry]) -> Result<Vec<String>> {
    let previous = read_md5sums(prefix).unwrap_or_default();
    if whole_is_ours(prefix, &previous) && exchange_whole(prefix, staged_root, entries)? {
        return Ok(previous
            .into_iter()
            .filter(|old| !entries.iter().any(|e| e.path == old.path))
            .map(|old| old.path)
            .collect());
    }
    file_by_file(prefix, staged_root, entries, previous)
}

/// Beside the prefix: where the staged tree waits to be exchanged with it,
/// and where the previous prefix is until it is removed. None for a prefix
/// with no parent or name (`/`).
fn aside(prefix: &Path) -> Option<PathBuf> {
    let name = prefix.file_name()?.to_string_lossy();
    Some(
        prefix
            .parent()?
            .join(format!(".{name}.rdna1-patch-exchange")),
    )
}

/// Whether the prefix is a real directory of this user's holding nothing
/// but what its MD5SUMS lists, the directories on the way to those files,
/// our records and our staging dir: only then is it ours to exchange
/// whole. Anything else in it (another project's files, a file the user
/// put there) keeps the prefix from being replaced as a whole.
fn whole_is_ours(prefix: &Path, previous: &[Entry]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(prefix) else {
        return false;
    };
    if !meta.is_dir() || meta.uid() != crate::owner::euid() {
        return false;
    }
    let listed = |rel: &str| {
        rel == STAGING
            || rel.starts_with(&format!("{STAGING}/"))
            || rel == RECORD_DIR
            || rel.starts_with(&format!("{RECORD_DIR}/"))
            || previous.iter().any(|e| e.path == rel)
    };
    let on_the_way = |rel: &str| {
        let dir = format!("{rel}/");
        RECORD_DIR.starts_with(&dir) || previous.iter().any(|e| e.path.starts_with(&dir))
    };
    let mut walk = walkdir::WalkDir::new(prefix).min_depth(1).into_iter();
    while let Some(entry) = walk.next() {
        let Ok(entry) = entry else {
            return false;
        };
        let Some(rel) = entry
            .path()
            .strip_prefix(prefix)
            .ok()
            .and_then(Path::to_str)
        else {
            return false;
        };
        if listed(rel) {
            if entry.file_type().is_dir() {
                walk.skip_current_dir();
            }
        } else if !(entry.file_type().is_dir() && on_the_way(rel)) {
            return false;
        }
    }
    true
}

/// Exchange the prefix with the staged tree (MD5SUMS written into it
/// first) in one rename, then remove the previous prefix. Ok(false), with
/// the prefix unchanged and the staged tree where it was, where the
/// filesystem cannot: another filesystem beside the prefix, no exchange.
fn exchange_whole(prefix: &Path, staged_root: &Path, entries: &[Entry]) -> Result<bool> {
    let Some(aside) = aside(prefix) else {
        return Ok(false);
    };
    write_md5sums(staged_root, entries)?;
    let mode = fsutil::mode(prefix)?;
    fsutil::set_dir_mode(staged_root, mode)?;
    if fsutil::rename_in_dir(staged_root, &aside).is_err() {
        fsutil::remove_own_file(&staged_root.join(MD5SUMS)).ok();
        return Ok(false);
    }
    if fsutil::exchange(&aside, prefix).is_err() {
        fsutil::rename_in_dir(&aside, staged_root).with_context(|| {
            format!(
                "cannot move {} back to {}",
                aside.display(),
                staged_root.display()
            )
        })?;
        fsutil::remove_own_file(&staged_root.join(MD5SUMS)).ok();
        return Ok(false);
    }
    fsutil::sync_dir(prefix.parent().unwrap_or(Path::new("/")))?;
    // The previous prefix, now beside the new one; a run killed before
    // this removes it at its start (`begin`).
    fsutil::remove_path(&aside)?;
    Ok(true)
}

/// Rename the staged files into a shared prefix, MD5SUMS last, and remove
/// what the previous install listed and this one does not.
fn file_by_file(
    prefix: &Path,
    staged_root: &Path,
    entries: &[Entry],
    previous: Vec<Entry>,
) -> Result<Vec<String>> {
    fits(prefix, entries)?;
    // From here on the prefix changes: first make it visibly incomplete.
    let md5_path = prefix.join(MD5SUMS);
    fsutil::remove_own_file(&md5_path)?;
    for e in entries {
        let (from, to) = (staged_root.join(&e.path), prefix.join(&e.path));
        if let Some(dir) = to.parent() {
            fsutil::create_dir_all(dir)?;
        }
        fsutil::rename_in_dir(&from, &to)
            .with_context(|| format!("cannot move {} to {}", from.display(), to.display()))?;
    }
    // The old MD5SUMS is an editable file: only a plain path inside the
    // prefix is ever removed, and never through a symlink out of it.
    let real_prefix = prefix.canonicalize().unwrap_or_else(|_| prefix.to_owned());
    let mut removed = Vec::new();
    for old in previous {
        if !entries.iter().any(|e| e.path == old.path)
            && checksum::is_inside(&real_prefix, &old.path)
            && fsutil::remove_own_file(&prefix.join(&old.path)).unwrap_or(false)
        {
            removed.push(old.path);
        }
    }
    write_md5sums(prefix, entries)?;
    Ok(removed)
}

/// `root`'s MD5SUMS listing `entries`, written whole or not at all.
fn write_md5sums(root: &Path, entries: &[Entry]) -> Result<()> {
    fsutil::create_dir_all(&root.join(RECORD_DIR))?;
    fsutil::write_atomic(
        &root.join(MD5SUMS),
        checksum::format_md5sums(entries).as_bytes(),
        Some(0o644),
    )
}

/// Every file can be renamed into the prefix: nothing there is a directory
/// where a file goes, or a file (or link) where a directory goes. Checked
/// before the prefix changes at all, so that the install that cannot
/// finish leaves the previous one whole.
fn fits(prefix: &Path, entries: &[Entry]) -> Result<()> {
    for e in entries {
        let mut at = prefix.to_path_buf();
        let parts: Vec<_> = Path::new(&e.path).components().collect();
        for (i, c) in parts.iter().enumerate() {
            at.push(c);
            let Ok(meta) = std::fs::symlink_metadata(&at) else {
                break;
            };
            let last = i + 1 == parts.len();
            let clash = if last { meta.is_dir() } else { !meta.is_dir() };
            if clash {
                return Err(hint(
                    format!(
                        "{} cannot go into the prefix: {} is {}",
                        e.path,
                        at.display(),
                        if meta.is_dir() {
                            "a directory"
                        } else {
                            "not a directory"
                        }
                    ),
                    format!(
                        "move {} aside (or install into another --prefix); the prefix was not changed",
                        at.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, 7: an install that cannot finish (a directory where a file
    /// goes) leaves the previous prefix whole, MD5SUMS included.
    #[test]
    fn an_install_that_cannot_finish_leaves_the_previous_prefix_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (prefix, staged) = (dir.path().join("p"), dir.path().join("s"));
        std::fs::create_dir_all(prefix.join("lib/libMIOpen.so.1")).unwrap();
        std::fs::create_dir_all(prefix.join("share/rdna1-patch")).unwrap();
        write_listed(&prefix, &["lib/a"], "old", 0);
        let new = write_listed(&staged, &["lib/a", "lib/libMIOpen.so.1"], "new", 1);
        let err = move_into_place(&prefix, &staged, &new).unwrap_err();
        assert!(format!("{err:#}").contains("is a directory"), "{err:#}");
        assert_eq!(read(&prefix.join("lib/a")), "old");
        assert!(prefix.join(MD5SUMS).exists(), "MD5SUMS stays");
    }

    /// `files` below `root`, each holding `text`, and their entries with
    /// made-up sums from digit `first` on; written to `root`'s MD5SUMS
    /// when its record dir exists (a prefix, not a staged tree).
    fn write_listed(root: &Path, files: &[&str], text: &str, first: u32) -> Vec<Entry> {
        let mut entries = Vec::new();
        for (n, f) in (first..).zip(files) {
            std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            std::fs::write(root.join(f), text).unwrap();
            let digit = char::from_digit(n, 10).unwrap();
            entries.push(Entry {
                path: (*f).to_owned(),
                md5: digit.to_string().repeat(32),
            });
        }
        if root.join(RECORD_DIR).is_dir() {
            std::fs::write(root.join(MD5SUMS), checksum::format_md5sums(&entries)).unwrap();
        }
        entries
    }

    /// A previous prefix (lib/a, lib/old-only, MD5SUMS) and a staged tree
    /// inside its staging dir (lib/a, lib/b), as `commit` leaves them.
    fn previous_and_staged(dir: &Path) -> (PathBuf, PathBuf, Vec<Entry>) {
        let prefix = dir.join("p");
        std::fs::create_dir_all(prefix.join(RECORD_DIR)).unwrap();
        write_listed(&prefix, &["lib/a", "lib/old-only"], "old", 0);
        let staged = staging_dir(&prefix).join("root");
        let new = write_listed(&staged, &["lib/a", "lib/b"], "new", 2);
        (prefix, staged, new)
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    fn ino(p: &Path) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap())
    }

    /// A prefix holding only what its MD5SUMS lists is exchanged whole: a
    /// new directory at its name, the old-only file gone with the old one,
    /// nothing left beside it.
    #[test]
    fn a_prefix_of_ours_is_exchanged_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (prefix, staged, new) = previous_and_staged(dir.path());
        let before = ino(&prefix);
        let removed = move_into_place(&prefix, &staged, &new).unwrap();
        assert_eq!(removed, ["lib/old-only"]);
        assert_ne!(ino(&prefix), before, "exchanged, not changed file by file");
        assert_eq!(read(&prefix.join("lib/a")), "new");
        assert_eq!(read(&prefix.join("lib/b")), "new");
        assert!(!prefix.join("lib/old-only").exists());
        assert_eq!(read(&prefix.join(MD5SUMS)), checksum::format_md5sums(&new));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["p"], "nothing beside the prefix");
        assert!(!staging_dir(&prefix).exists());
    }

    /// A prefix holding a file that is not ours is changed file by file,
    /// and that file stays.
    #[test]
    fn a_shared_prefix_is_changed_file_by_file_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (prefix, staged, new) = previous_and_staged(dir.path());
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::write(prefix.join("bin/theirs"), "theirs").unwrap();
        let before = ino(&prefix);
        let removed = move_into_place(&prefix, &staged, &new).unwrap();
        assert_eq!(removed, ["lib/old-only"]);
        assert_eq!(ino(&prefix), before);
        assert_eq!(read(&prefix.join("bin/theirs")), "theirs");
        assert_eq!(read(&prefix.join("lib/b")), "new");
        assert_eq!(read(&prefix.join(MD5SUMS)), checksum::format_md5sums(&new));
    }
}
