//! The prefix: the object every flow shares. A source build, a pull and the
//! in-place fix write one (staged, then `commit`ted with a checksum list that
//! `md5sum -c` accepts and a record of exactly what was built); `publish`,
//! the swap into torch and `verify` read one through [`Prefix::open`] and
//! [`Prefix::check`].
//!
//! CMake installs into a staging DESTDIR inside the prefix; `commit` then
//! puts the staged tree in place, so a prefix never holds a half-written
//! file and an interrupted install never leaves a mix vouched for.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::checksum::{self, Entry};
use crate::error::hint;
use crate::fsutil;

/// Inside the prefix: where our records live.
pub const RECORD_DIR: &str = "share/rdna1-patch";
pub const MD5SUMS: &str = "share/rdna1-patch/MD5SUMS";
pub const PROVENANCE: &str = "share/rdna1-patch/provenance.toml";
/// The build key's inputs (`prefix::key`), as JSON: what `publish` tags by.
pub const KEY: &str = "share/rdna1-patch/build-key.json";
const STAGING: &str = ".rdna1-patch-staging";

mod commit;
pub mod key;
mod provenance;
mod stamp;
pub use commit::{begin, commit, commit_verified};
pub use provenance::{
    ProvCmake, ProvInPlace, ProvLibrary, ProvPatch, ProvRocm, ProvSource, ProvText, Provenance,
};
pub use stamp::Stamp;

/// A prefix's records, read; its files not yet checked against them.
pub struct Prefix {
    pub dir: PathBuf,
    pub provenance: Provenance,
    pub entries: Vec<Entry>,
}

/// The record a prefix could not give: each flow words its own advice.
/// Past a good provenance, what it says is kept for the report.
#[derive(Debug)]
pub enum OpenError {
    Provenance(anyhow::Error),
    Md5sums(anyhow::Error, Box<Provenance>),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Provenance(e) | OpenError::Md5sums(e, _) => write!(f, "{e:#}"),
        }
    }
}

impl Prefix {
    pub fn open(dir: &Path) -> std::result::Result<Prefix, OpenError> {
        let provenance = Provenance::read(dir).map_err(OpenError::Provenance)?;
        let entries = match read_md5sums(dir) {
            Ok(e) => e,
            Err(e) => return Err(OpenError::Md5sums(e, Box::new(provenance))),
        };
        Ok(Prefix {
            dir: dir.to_owned(),
            provenance,
            entries,
        })
    }

    /// Everything that keeps the prefix from vouching for its files: records
    /// that leave something out, then each file that differs from MD5SUMS.
    /// `Err` holds one line per problem.
    pub fn check(&self, jobs: usize) -> std::result::Result<(), Vec<String>> {
        let mut problems = incomplete(&self.provenance, &self.entries);
        problems.extend(
            checksum::verify(&self.dir, &self.entries, jobs)
                .iter()
                .map(ToString::to_string),
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

pub fn read_key(prefix: &Path) -> Result<key::KeyInputs> {
    let path = prefix.join(KEY);
    let text = fsutil::read_small(&path, 1 << 20)?;
    serde_json::from_str(&text).with_context(|| format!("{} is damaged", path.display()))
}

pub fn sha256_hex(data: &[u8]) -> String {
    checksum::hex(&Sha256::digest(data))
}

/// The prefix must be a directory we can write: say so plainly if not.
pub fn ensure_writable(prefix: &Path) -> Result<()> {
    let unwritable = |e: &std::io::Error| {
        hint(
            format!(
                "cannot write to the install prefix {}: {}",
                prefix.display(),
                crate::error::words(&e.to_string())
            ),
            fsutil::fitted_help(prefix, e, "write", "another --prefix DIR").unwrap_or_else(|| format!(
                "choose a prefix you own with --prefix (e.g. --prefix ~/.local/rocm-miopen-rdna1); nothing was installed into {}",
                prefix.display()
            )),
        )
    };
    fsutil::fd::create_dir_all(prefix).map_err(|e| unwritable(&e))?;
    fsutil::probe_writable(prefix).map_err(|e| unwritable(&e))
}

/// Before any long work: the prefix is a directory, or can be created as
/// one, by this user. Nothing is created here.
pub fn preflight(prefix: &Path) -> Result<()> {
    let existing = fsutil::existing_ancestor(prefix);
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
                "cannot write to the install prefix {}: {} is not writable ({})",
                prefix.display(),
                existing.display(),
                crate::error::words(&e.to_string())
            ),
            fsutil::fitted_help(existing, &e, "write", "another --prefix DIR").unwrap_or_else(|| format!(
                "choose a prefix you own with --prefix (e.g. --prefix ~/.local/rocm-miopen-rdna1); nothing was fetched, built or installed into {}",
                prefix.display()
            )),
        )
    })
}

/// `err` about a file staged under `staged_root` (the prefix's whole path
/// again, under its staging dir) said of the file it is to be in the
/// prefix: one path, the one the user knows.
pub fn as_installed(mut err: anyhow::Error, staged_root: &Path, prefix: &Path) -> anyhow::Error {
    let (from, to) = (
        staged_root.display().to_string(),
        prefix.display().to_string(),
    );
    if let Some(f) = err.downcast_mut::<crate::error::FsError>() {
        f.message = f.message.replace(&from, &to);
        f.help = f.help.as_ref().map(|h| h.replace(&from, &to));
    }
    err
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
