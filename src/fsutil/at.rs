//! A file-system error said once, in words, with what to do about its
//! cause: a read-only file system, a directory another user owns, a full
//! disk. Worked out when the error happens, from the path's nearest
//! existing directory, so the help names the real owner and free space.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{FsError, words};

/// `.at("create", path)`: the error of an I/O call on `path`, as an
/// [`FsError`].
pub trait At<T> {
    fn at(self, op: &str, path: &Path) -> anyhow::Result<T>;
}

impl<T> At<T> for std::io::Result<T> {
    fn at(self, op: &str, path: &Path) -> anyhow::Result<T> {
        self.map_err(|e| fs_error(op, path, &e))
    }
}

/// "cannot {op} {path}: {what is wrong}", with a help fitted to the cause.
pub fn fs_error(op: &str, path: &Path, e: &std::io::Error) -> anyhow::Error {
    if let Some(swapped) = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<super::walk::Swapped>())
    {
        return crate::error::hint(
            format!("cannot {op} {}: {swapped}", path.display()),
            format!(
                "stop whatever else writes in {} (under sudo, a directory another user owns is written as that user), then run this again",
                path.parent().unwrap_or(Path::new("/")).display()
            ),
        );
    }
    let e = os_error(e);
    anyhow::Error::new(FsError {
        message: format!("cannot {op} {}: {}", path.display(), words(&e.to_string())),
        help: fitted_help(path, &e, op, ANOTHER_PLACE),
        io: e,
    })
}

/// The OS's own error under one that wraps it (tempfile names its random
/// file in its errors: the user needs the cause, not that name).
fn os_error(e: &std::io::Error) -> std::io::Error {
    if let Some(code) = e.raw_os_error() {
        return std::io::Error::from_raw_os_error(code);
    }
    let inner = e
        .get_ref()
        .and_then(|i| i.source())
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error);
    match inner.or_else(|| code_of(e.kind())) {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

/// Where a user can choose to go instead: "another place", or the option
/// that names it ("another --prefix DIR").
pub const ANOTHER_PLACE: &str = "another place";

/// What to do about `e`, met doing `op` ("create", "read", ...) on `path`,
/// for the causes a user can act on; `place`: what to choose instead
/// ([`ANOTHER_PLACE`], or "another --prefix DIR").
pub fn fitted_help(path: &Path, e: &std::io::Error, op: &str, place: &str) -> Option<String> {
    // An error made from its kind alone (a probe's) has no OS code.
    let code = e.raw_os_error().or_else(|| code_of(e.kind()))?;
    // A read is refused by the file itself; a write, by where it goes.
    let reads = ["read", "open", "inspect"]
        .iter()
        .any(|r| op.starts_with(r));
    let at = match reads && std::fs::symlink_metadata(path).is_ok() {
        true => path,
        false => nearest_existing(path),
    };
    let shown = at.display();
    match code {
        libc::EROFS => Some(format!(
            "{shown} is on a read-only file system: choose {place} on a writable one, or remount it read-write"
        )),
        libc::ENOSPC | libc::EDQUOT => {
            let free = free_bytes(at).map_or_else(
                || "no room".to_owned(),
                |b| format!("{} free", super::human_bytes(b)),
            );
            Some(format!(
                "the file system of {shown} is full ({free}): free space there, or choose {place} on another disk"
            ))
        }
        // Not the mode bits: an immutable file, or one the kernel protects.
        libc::EPERM => Some(format!(
            "the system does not permit this on {shown} whatever its mode (an immutable file shows an `i` in `lsattr`): choose {place}"
        )),
        libc::EACCES => denied(at, reads, place),
        // A file where a directory is expected: the one in the way.
        libc::ENOTDIR => {
            let file = path
                .ancestors()
                .find(|a| std::fs::symlink_metadata(a).is_ok_and(|m| !m.is_dir()))
                .unwrap_or(path);
            Some(format!(
                "{} is a file where a directory is expected: name a directory (or one to be made) instead, or move the file away",
                file.display()
            ))
        }
        _ => None,
    }
}

/// Permission denied at `at`: whose it is, and the mode bit missing.
fn denied(at: &Path, reads: bool, place: &str) -> Option<String> {
    let shown = at.display();
    let meta = std::fs::metadata(at).ok()?;
    let me = crate::owner::euid();
    let owner = meta.uid();
    if owner == me {
        let mode = meta.mode() & 0o7777;
        // Writing in a directory takes w and x; reading, r (and x for one).
        let (need, verb) = match (reads, meta.is_dir()) {
            (true, true) => (0o500, "read"),
            (true, false) => (0o400, "read"),
            (false, _) => (0o300, "write there"),
        };
        let missing = need & !mode;
        let bits: String = [(0o400, 'r'), (0o200, 'w'), (0o100, 'x')]
            .iter()
            .filter(|(b, _)| missing & b != 0)
            .map(|(_, c)| *c)
            .collect();
        let bits = format!("u+{bits}");
        return Some(match missing == 0 {
            true => format!(
                "you own {shown} and its mode ({mode:o}) allows it, so something else refuses (an ACL, a security module): `{}` and `{}` say more; or choose {place}",
                crate::shell::line([OsStr::new("ls"), OsStr::new("-ld"), at.as_os_str()]),
                crate::shell::line([OsStr::new("getfacl"), at.as_os_str()]),
            ),
            false => format!(
                "you own {shown}, but its mode ({mode:o}) does not let you {verb}: `{}`, or choose {place}",
                crate::shell::line([OsStr::new("chmod"), OsStr::new(&bits), at.as_os_str()]),
            ),
        });
    }
    let name = crate::owner::name_of(owner);
    let (mine, home) =
        crate::owner::passwd(me).map_or_else(|| (format!("uid {me}"), None), |(n, h)| (n, Some(h)));
    let in_home = home.is_some_and(|h| h != Path::new("/") && at.starts_with(h));
    Some(match owner {
        // A run with sudo leaves root's files in a user's own tree.
        0 if in_home => format!(
            "{shown} belongs to root, in your home (a run with sudo makes its files root's): take it back (`{}`), or choose {place} you own",
            crate::shell::line([
                OsStr::new("sudo"),
                OsStr::new("chown"),
                OsStr::new("-R"),
                OsStr::new(&mine),
                at.as_os_str()
            ]),
        ),
        0 => format!(
            "{shown} belongs to root: choose {place} you own, or run this with sudo for a system-wide one"
        ),
        _ => format!(
            "{shown} belongs to {name}, not you ({mine}): run this as {name}, or choose {place} you own"
        ),
    })
}

/// The OS code of the kinds a help is fitted to.
fn code_of(kind: std::io::ErrorKind) -> Option<i32> {
    use std::io::ErrorKind as K;
    match kind {
        K::ReadOnlyFilesystem => Some(libc::EROFS),
        K::StorageFull => Some(libc::ENOSPC),
        K::QuotaExceeded => Some(libc::EDQUOT),
        K::PermissionDenied => Some(libc::EACCES),
        K::NotFound => Some(libc::ENOENT),
        _ => None,
    }
}

/// `path`, or the nearest directory above it that exists: where the
/// error's cause lies.
fn nearest_existing(path: &Path) -> &Path {
    // The path itself may be a file that exists: its directory decides
    // whether it can be replaced.
    match std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir()) {
        true => path.parent().unwrap_or(Path::new("/")),
        false => existing_ancestor(path),
    }
}

/// `path` if it exists (a symlink counts), else the nearest directory
/// above it that does: what a path to be made would be made in.
pub fn existing_ancestor(path: &Path) -> &Path {
    let mut p = path;
    while std::fs::symlink_metadata(p).is_err() {
        match p.parent() {
            Some(up) => p = up,
            None => break,
        }
    }
    p
}

/// The bytes free to this user on the file system of `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed struct for the kernel to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail * s.f_frsize)
}
