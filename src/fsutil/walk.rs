//! A directory reached by descriptor, one component at a time from `/`,
//! as root: each name is opened in the directory just opened and never
//! followed as a symlink (`openat2` with `RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS`; `openat` with `O_NOFOLLOW | O_DIRECTORY` where
//! the kernel or a seccomp profile answers ENOSYS or EPERM). A symlink is
//! followed only where no one but root could have put it: in a directory
//! root owns that no one else can write (or a sticky one, the link
//! root's). One another user can change is refused, naming it: a staged
//! directory swapped for a symlink to a root-only one (issue 69) leads
//! nowhere, where opening by path led root there.
//!
//! Run as any other user there is no privilege line to cross, and the
//! directory is opened by path, as the caller named it.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// As many symlinks as the kernel follows in one lookup.
const MAX_LINKS: u32 = 40;

/// Set once openat2 answered ENOSYS or EPERM: the rest of the run walks
/// with openat alone.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The directory at `path`, opened for reading (`O_DIRECTORY`).
pub(super) fn open_dir(path: &Path) -> io::Result<File> {
    if !crate::owner::is_root() {
        use std::os::unix::fs::OpenOptionsExt;
        return std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(path);
    }
    let abs = std::path::absolute(path)?;
    let mut todo = names(&abs);
    let mut cur = open_root()?;
    let mut at = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        let e = match open_one(&cur, &name) {
            Ok(next) => {
                cur = next;
                match name.as_bytes() {
                    b".." => at = at.parent().map_or_else(|| "/".into(), Path::to_owned),
                    _ => at.push(&name),
                }
                continue;
            }
            Err(e) => e,
        };
        if !matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) {
            return Err(e);
        }
        let Some(link) = lstat(&cur, &name)?.filter(|s| s.st_mode & libc::S_IFMT == libc::S_IFLNK)
        else {
            return Err(e);
        };
        let dir = fstat(&cur)?;
        if !only_root_changes(&dir, &link) {
            return Err(untrusted(&at, &name, &dir));
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        let target = PathBuf::from(readlink(&cur, &name)?);
        if target.is_absolute() {
            cur = open_root()?;
            at = PathBuf::from("/");
        }
        for n in names(&target).into_iter().rev() {
            todo.push_front(n);
        }
    }
    Ok(cur)
}

/// The names of `path` to open in turn (`..` kept: the kernel's, of the
/// directory actually open).
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

const FLAGS: i32 = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

fn open_root() -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open("/")
}

/// The directory `name` in `dir`, never followed if a symlink.
fn open_one(dir: &File, name: &OsStr) -> io::Result<File> {
    let c =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if openat2_usable() {
        // SAFETY: a plain struct of integers, all zero is valid.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = FLAGS as u64;
        how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: a valid fd, a NUL-terminated name and the struct's size.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor just opened, owned by nothing else.
            return Ok(unsafe { File::from_raw_fd(fd as i32) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EPERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
            _ => return Err(e),
        }
    }
    // SAFETY: a valid fd and name; the result is checked.
    match unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), FLAGS) } {
        -1 => Err(io::Error::last_os_error()),
        // SAFETY: a descriptor just opened, owned by nothing else.
        fd => Ok(unsafe { File::from_raw_fd(fd) }),
    }
}

/// Whether to try openat2: not once it failed for want of it, nor in a
/// test build told (`FAILPOINTS=no-openat2=return`) to walk as a kernel
/// without it would.
fn openat2_usable() -> bool {
    #[cfg(feature = "failpoints")]
    if fail::eval("no-openat2", |_| ()).is_some() {
        return false;
    }
    !NO_OPENAT2.load(Ordering::Relaxed)
}

/// Whether only root can have put `link` in `dir`: root's directory, no
/// one else may write it (a group of root's aside), or it is sticky and
/// the link is root's.
fn only_root_changes(dir: &libc::stat, link: &libc::stat) -> bool {
    let others = dir.st_mode & 0o002 != 0;
    let group = dir.st_mode & 0o020 != 0 && dir.st_gid != 0;
    let sticky = dir.st_mode & libc::S_ISVTX != 0;
    dir.st_uid == 0 && !group && (!others || (sticky && link.st_uid == 0))
}

fn untrusted(at: &Path, name: &OsStr, dir: &libc::stat) -> io::Error {
    let who = match dir.st_uid {
        0 => "a user other than root".to_owned(),
        uid => format!("{} (uid {uid})", crate::owner::name_of(uid)),
    };
    swapped_error(format!(
        "{} is a symlink in a directory {who} can change (one made there, or a directory swapped for one while rdna1-patch worked); run as root, rdna1-patch follows no symlink another user controls, so nothing was written through it",
        at.join(name).display()
    ))
}

fn lstat(dir: &File, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd, a NUL-terminated name and a struct to fill.
    match unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } {
        0 => Ok(Some(st)),
        _ => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::NotFound => Ok(None),
            e => Err(e),
        },
    }
}

fn fstat(file: &File) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a struct to fill.
    match unsafe { libc::fstat(file.as_raw_fd(), &mut st) } {
        0 => Ok(st),
        _ => Err(io::Error::last_os_error()),
    }
}

fn readlink(dir: &File, name: &OsStr) -> io::Result<OsString> {
    let c =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a valid fd and name, and a buffer of its length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

/// A name that stopped being the tool's file while it wrote it.
#[derive(Debug)]
pub struct Swapped(String);

impl std::fmt::Display for Swapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Swapped {}

/// An error that says a name was swapped under the tool (`Swapped`).
pub(super) fn swapped_error(what: String) -> io::Error {
    io::Error::other(Swapped(what))
}
