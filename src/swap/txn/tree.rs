//! A directory of files taken as one: rocBLAS's Tensile directory, which
//! only works with the librocblas it was built with. It is named by a
//! digest of every entry's path, mode and MD5, so a journal records it in
//! one line however many files it holds; it is staged, backed up and
//! restored whole beside where it goes, and compared whole.

use std::path::{Component, Path, PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::checksum;
use crate::fsutil::{self, At};

/// A tree as a journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeRec {
    /// MD5 of the sorted lines `<md5> <mode> <path>` (`dir <mode> <path>/`
    /// for a directory): the same tree, the same digest.
    pub digest: String,
    pub files: usize,
    pub bytes: u64,
}

/// One entry of a tree, relative to its root (`/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub rel: String,
    /// None for a directory.
    pub md5: Option<String>,
    pub mode: u32,
    pub size: u64,
}

/// The entries under `dir`, directories first in path order, without their
/// MD5s: nothing followed, and anything but a plain file or directory (a
/// symlink, a FIFO) refused, since it would not be what a copy makes.
fn walk(dir: &Path) -> Result<Vec<(Entry, PathBuf)>> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_owned(), String::new())];
    while let Some((d, rel)) = todo.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&d)
            .at("read", &d)?
            .collect::<std::io::Result<Vec<_>>>()
            .at("read", &d)?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                bail!(
                    "{} has a name that is not UTF-8; rdna1-patch records the files it moves as text",
                    e.path().display()
                );
            };
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).at("read", &path)?;
            let r = format!("{rel}{name}");
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                out.push((
                    Entry {
                        rel: format!("{r}/"),
                        md5: None,
                        mode,
                        size: 0,
                    },
                    path.clone(),
                ));
                todo.push((path, format!("{r}/")));
            } else if meta.is_file() {
                out.push((
                    Entry {
                        rel: r,
                        md5: Some(String::new()),
                        mode,
                        size: meta.len(),
                    },
                    path,
                ));
            } else {
                bail!(
                    "{} is neither a file nor a directory; rdna1-patch moves only those",
                    path.display()
                );
            }
        }
    }
    out.sort_by(|a, b| a.0.rel.cmp(&b.0.rel));
    Ok(out)
}

/// Every entry under `dir` with its MD5, read on `jobs` threads.
pub fn read(dir: &Path, jobs: usize) -> Result<Vec<Entry>> {
    let walked = walk(dir)?;
    let files: Vec<PathBuf> = walked
        .iter()
        .filter(|(e, _)| e.md5.is_some())
        .map(|(_, p)| p.clone())
        .collect();
    let mut sums = checksum::md5_files(&files, jobs).into_iter();
    walked
        .into_iter()
        .map(|(mut e, _)| {
            if e.md5.is_some() {
                e.md5 = Some(sums.next().expect("one sum a file")?);
            }
            Ok(e)
        })
        .collect()
}

/// Every entry under `dir`, each file's MD5 taken from `known` (by its
/// path under `dir`: a prefix's MD5SUMS, just checked) rather than read
/// again; a file `known` does not list is an error.
pub fn read_known(
    dir: &Path,
    known: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<Entry>> {
    walk(dir)?
        .into_iter()
        .map(|(mut e, p)| {
            if e.md5.is_some() {
                let Some(m) = known.get(&e.rel) else {
                    bail!("{} is not listed in the prefix's MD5SUMS", p.display());
                };
                e.md5 = Some(m.clone());
            }
            Ok(e)
        })
        .collect()
}

/// The record of `entries`.
pub fn record(entries: &[Entry]) -> TreeRec {
    let text: String = entries
        .iter()
        .map(|e| match &e.md5 {
            Some(m) => format!("{m} {:04o} {}\n", e.mode, e.rel),
            None => format!("dir {:04o} {}\n", e.mode, e.rel),
        })
        .collect();
    TreeRec {
        digest: checksum::md5_bytes(text.as_bytes()).unwrap_or_default(),
        files: entries.iter().filter(|e| e.md5.is_some()).count(),
        bytes: entries.iter().map(|e| e.size).sum(),
    }
}

/// What is at `dir` now: None when nothing is there; the record of what
/// is. A count or size that matches none of `known` is told without
/// reading a byte.
pub fn found(dir: &Path, known: &[&TreeRec], jobs: usize) -> Result<Option<TreeRec>> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).at("read", dir),
        Ok(m) if !m.is_dir() => bail!("{} is not a directory", dir.display()),
        Ok(_) => {}
    }
    let walked = walk(dir)?;
    let files = walked.iter().filter(|(e, _)| e.md5.is_some()).count();
    let bytes = walked.iter().map(|(e, _)| e.size).sum();
    if !known.iter().any(|k| k.files == files && k.bytes == bytes) {
        return Ok(Some(TreeRec {
            digest: String::new(),
            files,
            bytes,
        }));
    }
    Ok(Some(record(&read(dir, jobs)?)))
}

/// A path of an entry, checked to stay under the root it is joined to.
fn under(root: &Path, rel: &str) -> Result<PathBuf> {
    let p = Path::new(rel.trim_end_matches('/'));
    if p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Ok(root.join(p));
    }
    bail!("{rel} is not a plain relative path")
}

/// Make `to` (which must not exist) hold `entries` of the tree at `from`:
/// each file a hard link where `fsutil::link_own` allows one (the same
/// bytes, no copy), else a copy; then every file read back against its
/// MD5, so that nothing that is not the tree takes its name. A partial
/// tree is removed.
pub fn stage(from: &Path, entries: &[Entry], to: &Path, jobs: usize) -> Result<()> {
    let made = (|| -> Result<()> {
        if std::fs::symlink_metadata(to).is_ok() {
            bail!("{} is there already", to.display());
        }
        fsutil::create_dir_all(to)?;
        for e in entries {
            let (src, dst) = (under(from, &e.rel)?, under(to, &e.rel)?);
            match &e.md5 {
                None => fsutil::create_dir_all(&dst)?,
                Some(_) => {
                    if !fsutil::link_own(&src, &dst, Some(e.mode))? {
                        fsutil::copy_synced(&src, &dst, e.mode)?;
                    }
                }
            }
        }
        for e in entries.iter().filter(|e| e.md5.is_none()) {
            fsutil::set_dir_mode(&under(to, &e.rel)?, e.mode)?;
        }
        fsutil::set_dir_mode(to, fsutil::mode(from)?)?;
        let files: Vec<(&Entry, PathBuf)> = entries
            .iter()
            .filter(|e| e.md5.is_some())
            .map(|e| Ok((e, under(to, &e.rel)?)))
            .collect::<Result<_>>()?;
        let paths: Vec<PathBuf> = files.iter().map(|(_, p)| p.clone()).collect();
        for ((e, p), got) in files.iter().zip(checksum::md5_files(&paths, jobs)) {
            let got = got?;
            if Some(&got) != e.md5.as_ref() {
                bail!(
                    "{} reads back as MD5 {got}, not {}; was {} changed meanwhile?",
                    p.display(),
                    e.md5.as_deref().unwrap_or_default(),
                    under(from, &e.rel)?.display()
                );
            }
        }
        fsutil::sync_dir(to)?;
        fsutil::sync_dir(to.parent().unwrap_or(Path::new("/")))
    })();
    if made.is_err() {
        let _ = fsutil::remove_path(to);
    }
    made
}

/// Make `to` hold the tree at `from` as `want` records it (a backup, or a
/// restore from one): staged beside `to`, then renamed into place, unless
/// `to` is that tree already. `entries`: `from`'s, when just read. The
/// temp name is `to` with `.tmp` added.
pub fn copy_to(
    from: &Path,
    entries: Option<&[Entry]>,
    to: &Path,
    want: &TreeRec,
    jobs: usize,
) -> Result<()> {
    if found(to, &[want], jobs)?.as_ref() == Some(want) {
        return Ok(());
    }
    let read_now;
    let entries = match entries {
        Some(e) => e,
        None => {
            read_now = read(from, jobs)?;
            &read_now
        }
    };
    let got = record(entries);
    if got != *want {
        bail!(
            "{} is not the tree it should be: its digest is {}, not {}",
            from.display(),
            got.digest,
            want.digest
        );
    }
    let tmp = temp_of(to);
    let _ = fsutil::remove_path(&tmp);
    stage(from, entries, &tmp, jobs)?;
    fsutil::remove_path(to)?;
    std::fs::rename(&tmp, to).at("rename to", to)?;
    fsutil::sync_dir(to.parent().unwrap_or(Path::new("/")))
}

/// Where [`copy_to`] stages.
pub fn temp_of(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    dir.with_file_name(name)
}

/// Put `new` (a whole tree, staged beside `live`) at `live`'s name in one
/// step, the tree that was there then at `new`'s name: each name always
/// holds one whole tree. Where nothing was there, a rename.
pub fn swap_in(new: &Path, live: &Path) -> Result<()> {
    let there = std::fs::symlink_metadata(live).is_ok();
    let done = if there {
        fsutil::exchange(new, live)
    } else {
        std::fs::rename(new, live)
    };
    done.map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "cannot put {} in place of {}",
            new.display(),
            live.display()
        ))
    })?;
    fsutil::sync_dir(live.parent().unwrap_or(Path::new("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_staged_read_back_and_named_by_its_digest() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::create_dir_all(a.join("sub")).unwrap();
        std::fs::write(a.join("x.dat"), b"x").unwrap();
        std::fs::write(a.join("sub/y.co"), b"yy").unwrap();
        let entries = read(&a, 2).unwrap();
        let rec = record(&entries);
        assert_eq!((rec.files, rec.bytes), (2, 3));
        let b = d.path().join("b");
        stage(&a, &entries, &b, 2).unwrap();
        assert_eq!(found(&b, &[&rec], 2).unwrap(), Some(rec.clone()));
        // A new file, not a write through the link into `a`'s.
        std::fs::remove_file(b.join("x.dat")).unwrap();
        std::fs::write(b.join("x.dat"), b"z").unwrap();
        assert_ne!(found(&b, &[&rec], 2).unwrap(), Some(rec.clone()));
        assert_eq!(found(&d.path().join("none"), &[&rec], 2).unwrap(), None);
        assert!(under(&a, "../x").is_err());
        // A copy made from a tree that is not the one asked for is refused.
        let c = d.path().join("c");
        assert!(copy_to(&b, None, &c, &rec, 2).is_err());
        assert!(!c.exists() && !temp_of(&c).exists());
        copy_to(&a, None, &c, &rec, 2).unwrap();
        assert_eq!(found(&c, &[&rec], 2).unwrap(), Some(rec));
    }
}
