//! Stage 5, install: the build goes into the prefix with a checksum list that
//! `md5sum -c` accepts and a record of exactly what was built.
//!
//! CMake installs into a staging DESTDIR inside the prefix; the files are then
//! renamed into place, MD5SUMS last, so a prefix never holds a half-written
//! file and an interrupted install has no MD5SUMS to vouch for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::checksum::{self, Entry};
use crate::error::hint;
use crate::fsutil;

/// Inside the prefix: where our records live.
pub const RECORD_DIR: &str = "share/rdna1-patch";
pub const MD5SUMS: &str = "share/rdna1-patch/MD5SUMS";
pub const PROVENANCE: &str = "share/rdna1-patch/provenance.toml";
/// The build key's inputs (`build::key`), as JSON: what `publish` tags by.
pub const KEY: &str = "share/rdna1-patch/build-key.json";
const STAGING: &str = ".rdna1-patch-staging";

/// What was built, from what, with what: written to the prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub tool: String,
    pub date: String,
    pub profile: String,
    pub component: String,
    pub rocm: ProvRocm,
    pub source: ProvSource,
    pub patches: Vec<ProvPatch>,
    pub cmake: ProvCmake,
    pub library: ProvLibrary,
    /// Every file the build installed (CMake's install manifest), relative
    /// to the prefix: MD5SUMS must list each of them and nothing else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Files of the checkout that differed from the commit plus the series
    /// when it was built (`build --keep-local`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_edits: Vec<String>,
    /// A prefix made from the user's own library, fixed in place, not built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place: Option<ProvInPlace>,
}

/// Where a library fixed in place came from, and every text changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvInPlace {
    pub source: String,
    pub source_sha256: String,
    /// How the texts were found: "dynamic symbols" or a search.
    pub found_by: String,
    pub texts: Vec<ProvText>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvText {
    pub name: String,
    /// The batch-norm decisions changed in it.
    pub decisions: usize,
    pub sha256_before: String,
    pub sha256_after: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvRocm {
    pub path: String,
    /// The version the profile targets.
    pub version: String,
    /// The version found in the ROCm install the build used.
    pub found: Option<String>,
    pub torch_hip: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvSource {
    pub url: String,
    /// The tag, or `commit <id>` for a profile that pins a commit alone.
    pub tag: String,
    pub commit: String,
    /// The monorepo project built, e.g. "projects/miopen".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvPatch {
    pub name: String,
    /// The series it came from (the profile's, or an extra one).
    #[serde(default)]
    pub series: String,
    pub sha256: String,
    pub marker: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvCmake {
    pub generator: String,
    pub defines: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvLibrary {
    pub soname: String,
    /// Relative to the prefix; empty when the install had no file by that name.
    pub path: String,
}

impl Provenance {
    /// Identity of the build, leaving out when it was installed.
    fn key(&self) -> String {
        let mut p = self.clone();
        p.date.clear();
        p.library.path.clear();
        p.files.clear();
        let text = toml::to_string(&p).unwrap_or_default();
        checksum::hex(&Sha256::digest(text.as_bytes()))
    }

    pub fn read(prefix: &Path) -> Result<Provenance> {
        let path = prefix.join(PROVENANCE);
        let text = fsutil::read_small(&path, 16 << 20)?;
        toml::from_str(&text).with_context(|| format!("{} is damaged", path.display()))
    }
}

pub fn read_key(prefix: &Path) -> Result<crate::builder::key::KeyInputs> {
    let path = prefix.join(KEY);
    let text = fsutil::read_small(&path, 1 << 20)?;
    serde_json::from_str(&text).with_context(|| format!("{} is damaged", path.display()))
}

pub fn sha256_hex(data: &[u8]) -> String {
    checksum::hex(&Sha256::digest(data))
}

/// The prefix must be a directory we can write: say so plainly if not.
pub fn ensure_writable(prefix: &Path) -> Result<()> {
    let unwritable = |e: &dyn std::fmt::Display| {
        hint(
            format!(
                "cannot write to the install prefix {}: {e}",
                prefix.display()
            ),
            format!(
                "run the install step with sudo, or choose a prefix you own with --prefix (e.g. --prefix ~/.local/rocm-miopen-rdna1); nothing was installed into {}",
                prefix.display()
            ),
        )
    };
    std::fs::create_dir_all(prefix).map_err(|e| unwritable(&e))?;
    fsutil::probe_writable(prefix).map_err(|e| unwritable(&e))
}

/// Before any long work: the prefix is a directory, or can be created as
/// one, by this user. Nothing is created here.
pub fn preflight(prefix: &Path) -> Result<()> {
    let mut existing = prefix;
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(p) => existing = p,
            None => break,
        }
    }
    let meta = std::fs::metadata(existing);
    if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
        return Err(hint(
            format!(
                "the install prefix {} cannot be a directory: {} is {}",
                prefix.display(),
                existing.display(),
                match meta {
                    Ok(_) => "a file".to_owned(),
                    Err(e) => format!("unreadable ({e})"),
                }
            ),
            "choose another --prefix; nothing was fetched or built",
        ));
    }
    fsutil::probe_writable(existing).map_err(|e| {
            hint(
                format!(
                    "cannot write to the install prefix {}: {} is not writable ({e})",
                    prefix.display(),
                    existing.display()
                ),
                format!(
                    "run with sudo, or choose a prefix you own with --prefix (e.g. --prefix ~/.local/rocm-miopen-rdna1); nothing was fetched, built or installed into {}",
                    prefix.display()
                ),
            )
        })
}

/// Where `cmake --install` should put files: DESTDIR for the staging area.
pub fn staging_dir(prefix: &Path) -> PathBuf {
    prefix.join(STAGING)
}

/// Start a fresh staging area (a leftover from an interrupted run is removed).
pub fn begin(prefix: &Path) -> Result<PathBuf> {
    ensure_writable(prefix)?;
    let staging = staging_dir(prefix);
    if staging.exists() {
        std::fs::remove_dir_all(&staging)
            .with_context(|| format!("cannot remove the leftover {}", staging.display()))?;
    }
    fsutil::create_dir_all(&staging)?;
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
    key: Option<&crate::builder::key::KeyInputs>,
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
    let prov_text = format!(
        "# What rdna1-patch built and installed here.\n{}",
        toml::to_string(&provenance)?
    );
    fsutil::create_dir_all(&staged_root.join(RECORD_DIR))?;
    fsutil::write_atomic(
        &staged_root.join(PROVENANCE),
        prov_text.as_bytes(),
        Some(0o644),
    )?;

    let mut listed = rels;
    // A build has a key to share it by; a library fixed in place has none.
    if let Some(key) = key {
        fsutil::write_atomic(
            &staged_root.join(KEY),
            serde_json::to_string_pretty(key)?.as_bytes(),
            Some(0o644),
        )?;
        listed.push(KEY.to_owned());
    }
    listed.push(PROVENANCE.to_owned());
    let known_md5 = |rel: &String| known.iter().find(|e| e.path == *rel).map(|e| &e.md5);
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
    std::fs::remove_dir_all(staging)
        .with_context(|| format!("cannot remove {}", staging.display()))?;
    Ok(Installed { entries, removed })
}

/// Move a staged prefix whose files were checked against `entries` as
/// they were written (a pulled artifact) into place, MD5SUMS last.
/// Renames do not change bytes, so nothing is read again.
pub fn commit_verified(prefix: &Path, staging: &Path, entries: &[Entry]) -> Result<Vec<String>> {
    let removed = move_into_place(prefix, staging, entries)?;
    std::fs::remove_dir_all(staging)
        .with_context(|| format!("cannot remove {}", staging.display()))?;
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

/// Rename the staged files into the prefix, MD5SUMS last, and remove what
/// the previous install listed and this one does not. Returns the removed.
fn move_into_place(prefix: &Path, staged_root: &Path, entries: &[Entry]) -> Result<Vec<String>> {
    fits(prefix, entries)?;
    let previous = read_md5sums(prefix).unwrap_or_default();
    // From here on the prefix changes: first make it visibly incomplete.
    let md5_path = prefix.join(MD5SUMS);
    match std::fs::remove_file(&md5_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", md5_path.display())),
    }
    for e in entries {
        let (from, to) = (staged_root.join(&e.path), prefix.join(&e.path));
        if let Some(dir) = to.parent() {
            fsutil::create_dir_all(dir)?;
        }
        std::fs::rename(&from, &to)
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
    fsutil::write_atomic(
        &md5_path,
        checksum::format_md5sums(entries).as_bytes(),
        Some(0o644),
    )?;
    Ok(removed)
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

/// What is wrong with a prefix's records beyond the checksums themselves:
/// an MD5SUMS that leaves out the library, the provenance or any file the
/// build installed vouches for nothing, however well the listed files match.
pub fn incomplete(prov: &Provenance, entries: &[Entry]) -> Vec<String> {
    let listed: std::collections::BTreeSet<&str> =
        entries.iter().map(|e| e.path.as_str()).collect();
    let mut problems = Vec::new();
    if entries.is_empty() {
        problems.push(format!("{MD5SUMS} lists no files"));
        return problems;
    }
    let mut must: Vec<&str> = vec![PROVENANCE];
    let records = [PROVENANCE, KEY];
    if !prov.library.path.is_empty() {
        must.push(&prov.library.path);
    }
    must.extend(prov.files.iter().map(String::as_str));
    for m in must {
        if !listed.contains(m) {
            problems.push(format!("{MD5SUMS} does not list {m}"));
        }
    }
    if !prov.files.is_empty() {
        for extra in listed {
            if !records.contains(&extra) && !prov.files.iter().any(|f| f == extra) {
                problems.push(format!(
                    "{MD5SUMS} lists {extra}, which the build did not install"
                ));
            }
        }
    }
    problems
}

pub fn read_md5sums(prefix: &Path) -> Result<Vec<Entry>> {
    let path = prefix.join(MD5SUMS);
    let text = fsutil::read_small(&path, 64 << 20)?;
    checksum::parse_md5sums(&text).with_context(|| format!("{} is damaged", path.display()))
}

/// Remembered after an install, so a no-op build can skip reinstalling: the
/// build identity and, for every installed file, what a rewrite cannot keep
/// the same. Size and mtime alone can be restored (`touch -d`); the inode
/// and ctime of a file change with any write and cannot be set back.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Stamp {
    prefix: PathBuf,
    build: String,
    files: Vec<FileStat>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct FileStat {
    path: String,
    size: u64,
    inode: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub fn take(prefix: &Path, provenance: &Provenance) -> Result<Stamp> {
        Ok(Stamp {
            prefix: prefix.to_owned(),
            build: provenance.key(),
            files: stat_files(prefix)?,
        })
    }

    /// Whether the prefix still holds exactly what this build installed.
    pub fn matches(&self, prefix: &Path, provenance: &Provenance) -> bool {
        self.prefix == prefix
            && self.build == provenance.key()
            && stat_files(prefix).is_ok_and(|f| f == self.files)
    }

    pub fn load(path: &Path) -> Option<Stamp> {
        toml::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            fsutil::create_dir_all(dir)?;
        }
        fsutil::write_atomic(path, toml::to_string(self)?.as_bytes(), None)
    }
}

fn stat_files(prefix: &Path) -> Result<Vec<FileStat>> {
    use std::os::unix::fs::MetadataExt;
    let mut paths: Vec<String> = read_md5sums(prefix)?.into_iter().map(|e| e.path).collect();
    paths.push(MD5SUMS.to_owned());
    let mut out = Vec::new();
    for path in paths {
        let m = std::fs::metadata(prefix.join(&path))?;
        out.push(FileStat {
            path,
            size: m.size(),
            inode: m.ino(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        });
    }
    Ok(out)
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
        let entry = |path: &str, md5: &str| Entry {
            path: path.to_owned(),
            md5: md5.to_owned(),
        };
        std::fs::create_dir_all(prefix.join("lib/libMIOpen.so.1")).unwrap();
        std::fs::create_dir_all(prefix.join("share/rdna1-patch")).unwrap();
        std::fs::write(prefix.join("lib/a"), "old").unwrap();
        let old = vec![entry("lib/a", &"0".repeat(32))];
        std::fs::write(prefix.join(MD5SUMS), checksum::format_md5sums(&old)).unwrap();
        std::fs::create_dir_all(staged.join("lib")).unwrap();
        std::fs::write(staged.join("lib/a"), "new").unwrap();
        std::fs::write(staged.join("lib/libMIOpen.so.1"), "new").unwrap();
        let new = vec![
            entry("lib/a", &"1".repeat(32)),
            entry("lib/libMIOpen.so.1", &"2".repeat(32)),
        ];
        let err = move_into_place(&prefix, &staged, &new).unwrap_err();
        assert!(format!("{err:#}").contains("is a directory"), "{err:#}");
        assert_eq!(
            std::fs::read_to_string(prefix.join("lib/a")).unwrap(),
            "old"
        );
        assert!(prefix.join(MD5SUMS).exists(), "MD5SUMS stays");
    }
}
