//! A directory of files taken as one: rocBLAS's Tensile directory, which
//! only works with the librocblas it was built with. It is named by a
//! digest of every entry's path, mode and MD5, so a journal records it in
//! one line however many files it holds; it is staged, backed up and
//! restored whole beside where it goes, and compared whole.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::checksum;
use crate::error::hint;
use crate::fsutil::{self, At, fd};

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
    Ok(found_read(dir, known, jobs)?.map(|(rec, _)| rec))
}

/// As [`found`], with the entries when every file was read.
pub fn found_read(
    dir: &Path,
    known: &[&TreeRec],
    jobs: usize,
) -> Result<Option<(TreeRec, Option<Vec<Entry>>)>> {
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
        let rec = TreeRec {
            digest: String::new(),
            files,
            bytes,
        };
        return Ok(Some((rec, None)));
    }
    let entries = read(dir, jobs)?;
    Ok(Some((record(&entries), Some(entries))))
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
/// each file a hard link where `fsutil::link_own_at` allows one (the same
/// bytes, no copy), else a copy; then every file read back against its
/// MD5, so that nothing that is not the tree takes its name. A partial
/// tree is removed.
///
/// Every step goes through a descriptor: `to` is made in its directory
/// held open and held open itself, each directory below it likewise, each
/// file made, linked, read back and given its mode through the directory
/// that holds it (`*at` calls, fchmod); the source is read the same way.
/// Someone who swaps a staged directory for a symlink meanwhile (its
/// owner, under sudo) changes nothing of root's: the tool goes on writing
/// into the directory it made, or stops with an error naming the swap.
pub fn stage(from: &Path, entries: &[Entry], to: &Path, jobs: usize) -> Result<Staged> {
    let (parent, name) = fd::parent_of(to).at("create", to)?;
    if parent.stat(name).at("read", to)?.is_some() {
        bail!("{} is there already", to.display());
    }
    let made = stage_in(from, entries, &parent, name, to, jobs).and_then(|id| {
        let staged = Staged(id);
        staged.check(&parent, name, to)?;
        Ok(staged)
    });
    if made.is_err() {
        let _ = parent.remove_tree(name);
    }
    made
}

/// The directory [`stage`] made, by device and inode: what its name must
/// still hold when it is moved into place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staged((u64, u64));

impl Staged {
    /// Whether `name` in `dir` (`path`) is still this directory.
    fn check(&self, dir: &fd::Dir, name: &OsStr, path: &Path) -> Result<()> {
        held(dir, name, self.0, path)
    }
}

/// Whether `name` in `dir` (`path`) is still the directory `id`.
fn held(dir: &fd::Dir, name: &OsStr, id: (u64, u64), path: &Path) -> Result<()> {
    {
        if dir.holds_dir(name, id).at("read", path)? {
            return Ok(());
        }
        let parent = path.parent().unwrap_or(Path::new("/"));
        Err(hint(
            format!(
                "{} is not the directory rdna1-patch staged: another program replaced it (a symlink or another directory stands there) while rdna1-patch filled it; nothing was written through it",
                path.display()
            ),
            format!(
                "stop whatever else writes in {} (under sudo, a directory another user owns is written as that user), then run this again",
                parent.display()
            ),
        ))
    }
}

fn stage_in(
    from: &Path,
    entries: &[Entry],
    parent: &fd::Dir,
    name: &OsStr,
    to: &Path,
    jobs: usize,
) -> Result<(u64, u64)> {
    let src = fd::Dir::open(from).at("read", from)?;
    let top_mode = src.mode().at("read", from)?;
    let root = parent.subdir_new(name, 0o700).at("create", to)?;
    fsutil::race_point("tree-mkdir");
    // Each directory of the tree, held open, by its entry's path ("" the top).
    let mut dirs: HashMap<&str, (fd::Dir, fd::Dir)> = HashMap::new();
    dirs.insert("", (root, src));
    for e in entries {
        let (up, base) = split(&e.rel)?;
        let (dst, src) = &dirs[up];
        let at = under(to, &e.rel)?;
        match &e.md5 {
            None => {
                let d = dst.subdir_new(base, 0o700).at("create", &at)?;
                let s = src.subdir_open(base).at("read", &under(from, &e.rel)?)?;
                dirs.insert(e.rel.as_str(), (d, s));
                fsutil::race_point("tree-mkdir");
            }
            Some(_) => {
                if !fsutil::link_own_at(src, base, dst, base, Some(e.mode)).at("create", &at)? {
                    fsutil::copy_at(src, base, dst, base, e.mode).at("create", &at)?;
                }
                fsutil::race_point("tree-file");
            }
        }
    }
    for e in entries.iter().filter(|e| e.md5.is_none()) {
        fsutil::race_point("tree-chmod");
        dirs[e.rel.as_str()]
            .0
            .set_mode(e.mode)
            .at("set the mode of", &under(to, &e.rel)?)?;
    }
    fsutil::race_point("tree-chmod");
    dirs[""].0.set_mode(top_mode).at("set the mode of", to)?;
    let files: Vec<&Entry> = entries.iter().filter(|e| e.md5.is_some()).collect();
    let sums = read_back(&files, &dirs, jobs);
    for (e, got) in files.iter().zip(sums) {
        let p = under(to, &e.rel)?;
        let got = got.at("read", &p)?;
        if Some(&got) != e.md5.as_ref() {
            bail!(
                "{} reads back as MD5 {got}, not {}; was {} changed meanwhile?",
                p.display(),
                e.md5.as_deref().unwrap_or_default(),
                under(from, &e.rel)?.display()
            );
        }
    }
    // Every directory below must still be the one made, at its name.
    for e in entries.iter().filter(|e| e.md5.is_none()) {
        let (up, base) = split(&e.rel)?;
        let id = dirs[e.rel.as_str()].0.id().at("read", to)?;
        held(&dirs[up].0, base, id, &under(to, &e.rel)?)?;
    }
    dirs[""].0.sync().at("sync", to)?;
    parent.sync().at("sync", parent.path())?;
    dirs[""].0.id().at("read", to)
}

/// The MD5 of each staged file, read through the directory holding it, on
/// `jobs` threads.
fn read_back(
    files: &[&Entry],
    dirs: &HashMap<&str, (fd::Dir, fd::Dir)>,
    jobs: usize,
) -> Vec<std::io::Result<String>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let out: Vec<std::sync::Mutex<Option<std::io::Result<String>>>> =
        files.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, files.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(e) = files.get(i) else { break };
                    let sum = split(&e.rel)
                        .map_err(std::io::Error::other)
                        .and_then(|(up, base)| dirs[up].0.open_read(base))
                        .and_then(md5_of);
                    *out[i].lock().expect("no thread panics holding it") = Some(sum);
                }
            });
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .expect("no thread panics holding it")
                .expect("every file read")
        })
        .collect()
}

fn md5_of(mut file: std::fs::File) -> std::io::Result<String> {
    use std::io::Read;
    let mut md5 = checksum::Md5::new().map_err(std::io::Error::other)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf)? {
            0 => break,
            n => md5.update(&buf[..n]).map_err(std::io::Error::other)?,
        }
    }
    md5.finish().map_err(std::io::Error::other)
}

/// An entry's directory (`a/b/`, `""` at the top) and its own name,
/// checked to be plain.
fn split(rel: &str) -> Result<(&str, &OsStr)> {
    under(Path::new("/"), rel)?;
    let r = rel.trim_end_matches('/');
    Ok(match r.rfind('/') {
        Some(i) => (&rel[..=i], OsStr::new(&r[i + 1..])),
        None => ("", OsStr::new(r)),
    })
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
    fsutil::remove_path(&tmp)?;
    let staged = stage(from, entries, &tmp, jobs)?;
    fsutil::remove_path(to)?;
    let (dir, name) = fd::parent_of(&tmp).at("open the directory of", &tmp)?;
    staged.check(&dir, name, &tmp)?;
    fsutil::rename_in_dir(&tmp, to)
}

/// Where [`copy_to`] stages.
pub fn temp_of(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    dir.with_file_name(name)
}

/// Put `new` (a whole tree, staged beside `live`) at `live`'s name in one
/// step, the tree that was there then at `new`'s name: each name always
/// holds one whole tree. Where nothing was there, a rename. Both names
/// are looked up in their directory held open.
pub fn swap_in(new: &Path, live: &Path, staged: Staged) -> Result<()> {
    let (dir, live_name) = fd::parent_of(live).at("open the directory of", live)?;
    let (from, new_name) = fd::parent_of(new).at("open the directory of", new)?;
    staged.check(&from, new_name, new)?;
    let there = dir.stat(live_name).at("read", live)?.is_some();
    let done = if there {
        fsutil::exchange(new, live)
    } else {
        from.rename_to(new_name, &dir, live_name)
    };
    done.map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "cannot put {} in place of {}",
            new.display(),
            live.display()
        ))
    })?;
    dir.sync().at("sync", dir.path())?;
    staged.check(&dir, live_name, live)
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
