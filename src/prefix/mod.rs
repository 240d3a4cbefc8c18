//! Stage 5, install: the build goes into the prefix with a checksum list that
//! `md5sum -c` accepts and a record of exactly what was built.
//!
//! CMake installs into a staging DESTDIR inside the prefix; `commit` then
//! puts the staged tree in place, so a prefix never holds a half-written
//! file and an interrupted install never leaves a mix vouched for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
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

mod commit;
pub use commit::{begin, commit, commit_verified};

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
    /// The file's text, as `commit` writes it.
    pub fn text(&self) -> Result<String> {
        Ok(format!(
            "# What rdna1-patch built and installed here.\n{}",
            toml::to_string(self)?
        ))
    }

    /// As published: every path inside the publisher's `home` written
    /// `~/...`, so a shared build does not carry its maintainer's user
    /// name and directories (`/home/alice/...`).
    pub fn published(&self, home: &Path) -> Provenance {
        let home = home.to_string_lossy();
        let home = home.trim_end_matches('/');
        if home.is_empty() {
            return self.clone();
        }
        let inside = format!("{home}/");
        let strip = |s: &mut String| {
            if *s == home {
                *s = "~".to_owned();
            } else if s.contains(&inside) {
                *s = s.replace(&inside, "~/");
            }
        };
        let mut p = self.clone();
        strip(&mut p.rocm.path);
        strip(&mut p.source.url);
        p.patches.iter_mut().for_each(|x| strip(&mut x.series));
        p.cmake.defines.values_mut().for_each(strip);
        if let Some(i) = &mut p.in_place {
            strip(&mut i.source);
        }
        p
    }

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
