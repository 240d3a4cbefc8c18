//! Writing files so that a reader, or a crash, never sees half of one.

use std::ffi::OsStr;
use std::path::Path;

use anyhow::{Context, Result};

use crate::owner;

/// A point a test build (feature `failpoints`) can pause at (`sleep(MS)`)
/// or act at, named in `FAILPOINTS`; nothing in a release build.
#[macro_export]
macro_rules! failpoint {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            fail::fail_point!($name);
        }
    };
}

mod at;
pub mod fd;
mod walk;
pub use at::{ANOTHER_PLACE, At, existing_ancestor, fitted_help, free_bytes, fs_error};

/// A test's stand-in for a user who swaps their directory while root
/// works in it (cargo feature `failpoints`): `FAILPOINTS=NAME=return(DIR,
/// TO,N)` renames DIR aside (`DIR.aside`) and puts a symlink to TO at its
/// name, as its owner could at that instant, at the Nth time (from 0) the
/// point is passed while DIR is a directory.
pub fn race_point(_name: &str) {
    #[cfg(feature = "failpoints")]
    fail::eval(_name, |arg: Option<String>| {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static PASSED: AtomicUsize = AtomicUsize::new(0);
        let arg = arg.unwrap_or_default();
        let mut parts = arg.split(',');
        let (Some(dir), Some(to), n) = (parts.next(), parts.next(), parts.next()) else {
            return;
        };
        let n: usize = n.and_then(|n| n.parse().ok()).unwrap_or(0);
        if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            return;
        }
        if PASSED.fetch_add(1, Ordering::Relaxed) != n {
            return;
        }
        let mut aside = std::ffi::OsString::from(dir);
        aside.push(".aside");
        std::fs::rename(dir, &aside)
            .and_then(|()| std::os::unix::fs::symlink(to, dir))
            .unwrap_or_else(|e| panic!("the failpoint could not swap {dir} for a symlink: {e}"));
    });
}

/// Write `data` to a new file beside `path`, fsync it, give it `mode` (or
/// the replaced file's mode; never a setuid, setgid or sticky bit) through
/// its descriptor, and rename it into place; run as root in a directory
/// another user owns, all of it as that user (`fd::Dir`).
pub fn write_atomic(path: &Path, data: &[u8], mode: Option<u32>) -> Result<()> {
    let (dir, name) = fd::parent_of(path).at("open the directory of", path)?;
    race_point("atomic-dir-opened");
    let mode = mode.or_else(|| {
        dir.stat(name)
            .ok()
            .flatten()
            .filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
            .map(|st| st.st_mode)
    });
    dir.write_atomic(name, data, owner::plain_mode(mode.unwrap_or(0o644)))
        .at("write", path)
}

/// Make a rename or a new name in `dir` survive a power cut.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .at("sync", dir)
}

/// Copy `from` to a new file `to` (replacing a leftover), with `mode` (its
/// permission bits alone), made as the owner of `to`'s directory when root
/// writes in another user's (`fd::Dir`), and fsync it before returning.
pub fn copy_synced(from: &Path, to: &Path, mode: u32) -> Result<()> {
    let mode = owner::plain_mode(mode);
    crate::tally::read(from);
    let mut src = std::fs::File::open(from).at("read", from)?;
    let (dir, name) = fd::parent_of(to).at("create", to)?;
    dir.remove_file(name).at("remove", to)?;
    let mut dst = dir.create_new(name, mode).at("create", to)?;
    std::io::copy(&mut src, &mut dst)
        .and_then(|_| dir.set_file_mode(&dst, mode))
        .and_then(|()| dst.sync_all())
        .at("write", to)?;
    Ok(())
}

/// A new file at `path` (an existing name, a symlink included, is an
/// error), with `mode`, made as its directory's owner when root writes in
/// another user's (`fd::Dir`).
pub fn create_new(path: &Path, mode: u32) -> Result<std::fs::File> {
    let (dir, name) = fd::parent_of(path).at("create", path)?;
    dir.create_new(name, owner::plain_mode(mode))
        .at("create", path)
}

/// A symlink at `at` to `target` (what is at `at` must be gone), made as
/// its directory's owner when root writes in another user's.
pub fn symlink(target: &Path, at: &Path) -> Result<()> {
    let (dir, name) = fd::parent_of(at).at("create", at)?;
    dir.symlink(target, name).at("create", at)
}

/// Set the permission bits of the directory `dir` through its descriptor.
pub fn set_dir_mode(dir: &Path, mode: u32) -> Result<()> {
    fd::Dir::open(dir)
        .and_then(|d| d.set_mode(mode))
        .at("set the mode of", dir)
}

/// The permission bits of `path`.
pub fn mode(path: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(path)
        .at("read", path)?
        .permissions()
        .mode()
        & 0o7777)
}

/// Create `dir` and its parents, naming it in the error; run as root, each
/// new directory is its parent's owner's (`fd::create_dir_all`).
pub fn create_dir_all(dir: &Path) -> Result<()> {
    fd::create_dir_all(dir).map(drop).at("create", dir)
}

/// Open a file for reading only if it is a regular file. A FIFO or a device
/// named in an editable record (MD5SUMS, a journal, sysfs) must fail at once,
/// not block the run forever: the open does not wait (O_NONBLOCK), and the
/// type is checked on the open file itself, so it cannot change in between.
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .at("read", path)?;
    let ft = file.metadata().at("read", path)?.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        anyhow::bail!("{} is {what}, not a regular file", path.display());
    }
    Ok(file)
}

/// Read a regular file that should be small, refusing one over `limit` bytes
/// without reading it (a profile is a few KB; a 300 MB one is a mistake).
pub fn read_small(path: &Path, limit: u64) -> Result<String> {
    use std::io::Read;
    let file = open_regular(path)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > limit {
        anyhow::bail!(
            "{} is {} bytes; it should be a small text file (at most {} KiB)",
            path.display(),
            len,
            limit / 1024
        );
    }
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {} as UTF-8 text", path.display()))?;
    if text.len() as u64 > limit {
        anyhow::bail!(
            "{} grew past {} KiB while being read",
            path.display(),
            limit / 1024
        );
    }
    Ok(text)
}

/// Remove a file we created, if it is there: only a regular file or a
/// symlink itself is removed (never what a symlink points to, never a
/// directory). Returns whether something was removed.
pub fn remove_own_file(path: &Path) -> Result<bool> {
    let (dir, name) = match fd::parent_of(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        other => other.at("inspect", path)?,
    };
    match dir.stat(name).at("inspect", path)? {
        None => Ok(false),
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => anyhow::bail!(
            "{} is a directory where rdna1-patch keeps a file of its own; it was left alone",
            path.display()
        ),
        Some(_) => {
            dir.remove_file(name).at("remove", path)?;
            Ok(true)
        }
    }
}

/// Create `dir` (and parents) and insist that it is a real directory, not a
/// symlink to somewhere else: the tool writes and deletes inside it.
pub fn create_own_dir(dir: &Path) -> Result<()> {
    create_dir_all(dir)?;
    let m = std::fs::symlink_metadata(dir).at("inspect", dir)?;
    if !m.is_dir() {
        return Err(crate::error::hint(
            format!(
                "{} is a symlink; rdna1-patch only writes into directories it created",
                dir.display()
            ),
            format!(
                "remove the symlink (`{}`) and run again; nothing was changed",
                crate::shell::as_run([OsStr::new("rm"), dir.as_os_str()])
            ),
        ));
    }
    Ok(())
}

/// The first symlink met walking `rel` down from `base`, one component at a
/// time without following any: a path the tool writes must not leave the
/// tree through one, however high up it sits. The walk stops at the first
/// component that does not exist (it is about to be created).
pub fn first_symlink(base: &Path, rel: &Path) -> Option<std::path::PathBuf> {
    let mut cur = base.to_path_buf();
    for comp in rel.components() {
        cur.push(comp);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => return Some(cur),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Whether a path component is git's own directory: `.git` in any case
/// (git itself refuses `.GIT` in a tree, for case-insensitive disks).
pub fn is_git_dir_name(name: &std::ffi::OsStr) -> bool {
    name.eq_ignore_ascii_case(".git")
}

/// Whether this process can create a file in `dir`: a temp file is made
/// there and removed at once. Permission bits, read-only mounts and ACLs
/// are all answered by the kernel, as the real write will be.
pub fn probe_writable(dir: &Path) -> std::io::Result<()> {
    // An unnamed file (O_TMPFILE where the filesystem has it, else one
    // unlinked at once): a run killed here leaves no name behind, as
    // `cargo xtask killtest` found a named probe could.
    tempfile::tempfile_in(dir)
        .map(drop)
        // tempfile names its random probe file in the error; the user needs
        // only the reason.
        .map_err(|e| match e.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::from(e.kind()),
        })
}

/// The XDG directories of rdna1-patch (cache, data, state), when $HOME is
/// known.
pub fn project_dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("", "", "rdna1-patch")
}

/// Remove a file or a whole directory (not following a symlink); one that
/// is already gone is fine.
pub fn remove_path(path: &Path) -> Result<()> {
    let (dir, name) = match fd::parent_of(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other.at("remove", path)?,
    };
    dir.remove_tree(name).at("remove", path)
}

/// Whether an error is the disk (or a quota, or a file size limit) being full.
pub fn is_disk_full(err: &anyhow::Error) -> bool {
    crate::error::io_errors(err).any(|io| {
        matches!(
            io.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG)
        )
    })
}

/// A lock on a directory itself (flock on the directory's own fd): it
/// creates nothing inside it, so torch's lib dir can be locked without
/// leaving a file behind there.
pub fn try_lock_dir(dir: &Path) -> Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .at("open", dir)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e).at("lock", dir),
    }
}

/// A lock on a directory itself, waited for: for short edits of a file in
/// it (the config) that two runs must not make at once.
pub fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .at("open", dir)?;
    file.lock().at("lock", dir)?;
    Ok(file)
}

/// Make a FIFO at `path`, for the tests that check one is refused.
#[cfg(test)]
pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// Bytes for people: 1.2 GiB, 340 MiB, 12 KiB.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The entries of `dir` whose names `wanted` takes, sorted; none when the
/// dir cannot be read.
pub fn entries_named(dir: &Path, wanted: impl Fn(&str) -> bool) -> Vec<std::path::PathBuf> {
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&wanted))
        .collect();
    found.sort();
    found
}

/// What says a file's bytes are the ones read before, without reading them
/// again: the same inode, size and modification time, as git's index and
/// rsync judge a file unchanged. The change time is left out: a hard link
/// to the file changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }

    pub fn read(path: &Path) -> Result<Stamp> {
        std::fs::metadata(path)
            .map(|m| Stamp::of(&m))
            .at("read", path)
    }

    /// As [`Stamp::read`], the file looked up in its directory reached by
    /// descriptor (`fd::parent_of`): never through a symlink another user
    /// put on the way, as root reading a file it staged in their place.
    pub fn read_held(path: &Path) -> Result<Stamp> {
        let (dir, name) = fd::parent_of(path).at("read", path)?;
        let st = dir
            .stat(name)
            .and_then(|st| st.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
            .at("read", path)?;
        Ok(Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            len: u64::try_from(st.st_size).unwrap_or(0),
            mtime: (st.st_mtime, st.st_mtime_nsec),
        })
    }

    /// Whether `path` is still the file this stamp was taken of.
    pub fn matches(&self, path: &Path) -> bool {
        Stamp::read(path).is_ok_and(|s| s == *self)
    }
}

/// Give `from`'s file a second name `to` (a hard link), as uv links its
/// cache into environments, when the result is a file that a copy made by
/// this process could not be safer than: owned by this user, as the
/// directory it goes into is, writable by no one else, with no setuid,
/// setgid or sticky bit, with `mode` already (None: any). Ok(false), with nothing
/// made, when that does not hold or the link cannot be made (another
/// filesystem, a filesystem without links): the caller copies instead.
pub fn link_own(from: &Path, to: &Path, mode: Option<u32>) -> Result<bool> {
    let Ok((src, from_name)) = fd::parent_of(from) else {
        return Ok(false);
    };
    let (dir, name) = fd::parent_of(to).at("create", to)?;
    link_own_at(&src, from_name, &dir, name, mode).at("create", to)
}

/// [`link_own`] of `from` in `src` as `name` in `dir`, both directories
/// held open: the file is judged by what `src` holds under that name, and
/// the link made from it there, never looked up by path again.
pub fn link_own_at(
    src: &fd::Dir,
    from: &std::ffi::OsStr,
    dir: &fd::Dir,
    name: &std::ffi::OsStr,
    mode: Option<u32>,
) -> std::io::Result<bool> {
    let Ok(Some(st)) = src.stat(from) else {
        return Ok(false);
    };
    let bits = st.st_mode & 0o7777;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG
        || st.st_uid != owner::euid()
        || bits & 0o7022 != 0
    {
        return Ok(false);
    }
    // A link into a directory someone else owns would leave them a file of
    // ours (root's, under sudo) that they cannot replace: copy instead.
    if dir.uid().map_or(true, |u| u != st.st_uid) {
        return Ok(false);
    }
    if mode.is_some_and(|m| m != bits) {
        return Ok(false);
    }
    dir.remove_file(name)?;
    match dir.link_from(src, from, name) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => Err(e),
        Err(_) => Ok(false),
    }
}

/// Copy the file `from` in `src` to a new file `name` in `dir` (replacing
/// a leftover), with `mode`, both looked up in directories held open;
/// fsynced before returning.
pub fn copy_at(
    src: &fd::Dir,
    from: &std::ffi::OsStr,
    dir: &fd::Dir,
    name: &std::ffi::OsStr,
    mode: u32,
) -> std::io::Result<()> {
    let mode = owner::plain_mode(mode);
    let mut input = src.open_read(from)?;
    dir.remove_file(name)?;
    let mut out = dir.create_new(name, mode)?;
    std::io::copy(&mut input, &mut out)?;
    dir.set_file_mode(&out, mode)?;
    out.sync_all()
}

/// Swap the names of `a` and `b` (each a file or a directory) in one step
/// (renameat2 RENAME_EXCHANGE): a reader sees one or the other at each
/// name, never neither. Fails where the filesystem cannot (then nothing
/// changed).
pub fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let (da, na) = fd::parent_of(a)?;
    let (db, nb) = fd::parent_of(b)?;
    da.exchange(na, &db, nb)
}

/// Rename `from` to `to`, each name looked up in its directory held open
/// (`fd::parent_of`; a symlink at either name is renamed itself, never
/// followed); the directory of `to` synced.
pub fn rename_in_dir(from: &Path, to: &Path) -> Result<()> {
    let (df, nf) = fd::parent_of(from).at("rename", from)?;
    let (dt, nt) = fd::parent_of(to).at("rename to", to)?;
    df.rename_to(nf, &dt, nt).at("rename to", to)?;
    dt.sync().at("sync", dt.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_device_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let err = open_regular(&fifo).unwrap_err().to_string();
        assert!(err.ends_with("is a FIFO, not a regular file"), "{err}");
        let err = open_regular(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("is a device, not a regular file"), "{err}");
        let err = read_small(dir.path(), 10).unwrap_err().to_string();
        assert!(err.ends_with("is a directory, not a regular file"), "{err}");
    }

    #[test]
    fn removing_our_file_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let precious = dir.path().join("precious");
        std::fs::write(&precious, "keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&precious, &link).unwrap();
        assert!(remove_own_file(&link).unwrap());
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep");
        assert!(!remove_own_file(&link).unwrap());
        assert!(remove_own_file(dir.path()).is_err());
    }
}
