//! What a no-op build compares to skip reinstalling the prefix.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{MD5SUMS, Provenance, read_md5sums};
use crate::fsutil;

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
