//! Who can write a path, and who the tool acts for: the facts behind the
//! one privilege rule (SECURITY.md). Run as root, the tool never makes a
//! file setuid, never leaves a root-owned file in a user's directory, and
//! never lets a file one user controls (a journal, a torch, a compiler
//! library) steer it into what that user could not change themselves.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The permission bits the tool gives a file it writes in place of another:
/// read, write and execute only. A setuid, setgid or sticky bit is never
/// carried over: under sudo, a copy of a user's mode-4755 file would be a
/// setuid-root program.
pub fn plain_mode(mode: u32) -> u32 {
    mode & 0o777
}

/// The user this process acts as (what owns the files it creates).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub fn is_root() -> bool {
    euid() == 0
}

/// The user on whose behalf root runs: sudo's `SUDO_UID`; None when not
/// root or not under sudo (a root shell acts for root alone).
pub fn invoking_user() -> Option<u32> {
    if !is_root() {
        return None;
    }
    std::env::var("SUDO_UID")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&u| u != 0)
}

/// Under sudo, who the user's programs (python, torch's import, the
/// compile child) run as, in words ("nobody (uid 65534, who ran sudo)");
/// None otherwise.
pub fn acting_for() -> Option<String> {
    let uid = invoking_user()?;
    Some(match passwd(uid) {
        Some((name, _)) => format!("{name} (uid {uid}, who ran sudo)"),
        None => format!("uid {uid} (who ran sudo)"),
    })
}

/// Whom root runs the compile child as under sudo: sudo's user and group
/// (`SUDO_UID`, `SUDO_GID`); None when not root or not under sudo (a root
/// shell compiles as root, and then loads root's files alone).
pub fn sudo_identity() -> anyhow::Result<Option<(u32, u32)>> {
    let Some(uid) = invoking_user() else {
        return Ok(None);
    };
    match std::env::var("SUDO_GID")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        Some(gid) => Ok(Some((uid, gid))),
        None => Err(crate::error::hint(
            format!(
                "SUDO_UID is {uid} and SUDO_GID is not a group id, so whom to compile as cannot be told; nothing was compiled"
            ),
            "run rdna1-patch through sudo, which sets both, or unset SUDO_UID to act as root alone",
        )),
    }
}

/// Someone besides root who can change a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Who {
    User(u32),
    Group(u32),
    Anyone,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::User(u) => write!(f, "uid {u}"),
            Who::Group(g) => write!(f, "group {g}"),
            Who::Anyone => f.write_str("every user"),
        }
    }
}

/// Everyone but root who can replace what `path` names: the owner of the
/// path and of each directory above it, and a group or everybody where a
/// directory (or the file) is writable by them. A sticky directory (/tmp)
/// lets only an entry's owner move the entry, so it adds its owner alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Writers {
    pub set: BTreeSet<Who>,
    /// Where the first of them comes from, to name in an error.
    pub first: Option<PathBuf>,
}

impl Writers {
    pub fn of(path: &Path) -> std::io::Result<Writers> {
        let mut w = Writers::default();
        let path = std::path::absolute(path)?;
        let mut cur: Option<&Path> = Some(&path);
        let mut leaf = true;
        while let Some(p) = cur {
            let meta = match std::fs::symlink_metadata(p) {
                Ok(m) => m,
                // A file about to be made, or one that is gone: the
                // directories that remain decide who could put it there.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    cur = p.parent();
                    leaf = false;
                    continue;
                }
                Err(e) => return Err(e),
            };
            for who in entry_writers(&meta, leaf) {
                if w.set.insert(who) && w.first.is_none() {
                    w.first = Some(p.to_owned());
                }
            }
            leaf = false;
            cur = p.parent();
        }
        Ok(w)
    }

    /// " (through DIR)" when what lets them is a directory above `path`.
    pub fn through(&self, path: &Path) -> String {
        match &self.first {
            Some(p) if p != path => format!(" (through {})", p.display()),
            _ => String::new(),
        }
    }

    /// Those of `self` that `other` does not have.
    pub fn beyond(&self, other: &Writers) -> Vec<Who> {
        self.set.difference(&other.set).copied().collect()
    }

    /// Those who are neither root nor `user`.
    pub fn others_than(&self, user: Option<u32>) -> Vec<Who> {
        self.set
            .iter()
            .filter(|w| Some(**w) != user.map(Who::User))
            .copied()
            .collect()
    }
}

/// Who besides root can change what stands at one path, from its own
/// owner and mode: `leaf` is the path itself; a sticky directory that is
/// not (one above it, as /tmp) lets only its owner move the entry.
fn entry_writers(meta: &std::fs::Metadata, leaf: bool) -> Vec<Who> {
    let mode = meta.mode();
    let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
    let mut who = Vec::new();
    if meta.uid() != 0 {
        who.push(Who::User(meta.uid()));
    }
    if !sticky_dir || leaf {
        if mode & 0o020 != 0 && meta.gid() != 0 {
            who.push(Who::Group(meta.gid()));
        }
        if mode & 0o002 != 0 {
            who.push(Who::Anyone);
        }
    }
    who
}

/// A user's name and home directory, from the password database (never
/// the environment): said to the user, and made a path by the caller only
/// where root lists, and what is changed there is changed as that user
/// (MIOpen's kernel cache under sudo).
pub fn passwd(uid: u32) -> Option<(String, PathBuf)> {
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r fills `pwd` with pointers into `buf`, which
    // outlives every use of them below; `out` is null on failure.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pwd.pw_dir.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: pw_name and pw_dir are NUL-terminated strings inside `buf`.
    let (name, dir) = unsafe {
        (
            std::ffi::CStr::from_ptr(pwd.pw_name),
            std::ffi::CStr::from_ptr(pwd.pw_dir),
        )
    };
    Some((
        name.to_string_lossy().into_owned(),
        PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())),
    ))
}

/// A user by name ("root", "alice"), else by number ("uid 1234").
pub fn name_of(uid: u32) -> String {
    passwd(uid).map_or_else(|| format!("uid {uid}"), |(n, _)| n)
}

/// "uid 1000 and group 100".
pub fn describe(list: &[Who]) -> String {
    let names: Vec<String> = list.iter().map(Who::to_string).collect();
    crate::output::and(&names)
}

/// Run as root, who besides root and sudo's user can change anything in
/// the tree `dir` (a torch package: its python files and libraries), or
/// `dir` and the directories above it; and the first path that lets them.
/// A symlink inside is judged by what it leads to. None: no one.
pub fn tree_writers(dir: &Path) -> std::io::Result<Option<(Vec<Who>, PathBuf)>> {
    let user = invoking_user();
    let top = Writers::of(dir)?;
    let others = top.others_than(user);
    if !others.is_empty() {
        return Ok(Some((others, top.first.unwrap_or_else(|| dir.to_owned()))));
    }
    for entry in walkdir::WalkDir::new(dir).follow_links(false).min_depth(1) {
        let entry = entry.map_err(std::io::Error::from)?;
        let meta = entry.path().symlink_metadata()?;
        if meta.file_type().is_symlink() {
            let Ok(real) = entry.path().canonicalize() else {
                continue;
            };
            if real.starts_with(dir) {
                continue;
            }
            let w = Writers::of(&real)?;
            let others = w.others_than(user);
            if !others.is_empty() {
                return Ok(Some((others, entry.path().to_owned())));
            }
            continue;
        }
        // A directory inside is judged as one above a file: sticky (as
        // /tmp), others may add names but never move or replace ours.
        let who: Vec<Who> = entry_writers(&meta, !meta.is_dir())
            .into_iter()
            .filter(|w| Some(*w) != user.map(Who::User))
            .collect();
        if !who.is_empty() {
            return Ok(Some((who, entry.path().to_owned())));
        }
    }
    Ok(None)
}

/// Run as root, refuse to run or change the torch in `dir` when anyone
/// but root and sudo's user can change any of it: its import runs every
/// python file of it, and loads its libraries, as whoever imports it.
pub fn ensure_root_may_trust_torch(dir: &Path) -> anyhow::Result<()> {
    if !is_root() {
        return Ok(());
    }
    let found = tree_writers(dir).map_err(|e| {
        crate::error::hint(
            format!(
                "cannot read who can change the torch in {}: {e}",
                dir.display()
            ),
            "run rdna1-patch as the user who owns that torch, without sudo",
        )
    })?;
    let Some((who, at)) = found else {
        return Ok(());
    };
    Err(crate::error::hint(
        format!(
            "{} can be changed by {}; run as root, rdna1-patch neither runs nor changes a torch that another user controls; nothing was run or changed",
            at.display(),
            describe(&who)
        ),
        "run rdna1-patch as the user who owns that torch, without sudo (a torch in a venv is its owner's), or take the write bits away from others (`chmod -R go-w` on that torch)",
    ))
}

/// The program `name` the tool runs (dpkg, rpm, pacman, patchelf), found
/// as a shell would but in absolute PATH entries only (an empty or `.`
/// entry is the current directory, whoever's it is), and, run as root,
/// only where no one but root can change the file or any directory above
/// it: with `.` or a user's bin on root's PATH, their `dpkg` is not run
/// as root. None when there is no such program.
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .filter(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .find(|p| {
            !is_root()
                // The PATH entry (where the name is) and the file the
                // name resolves to: a symlink's own mode bits mean nothing.
                || p.canonicalize().is_ok_and(|real| {
                    [p.parent().unwrap_or(p), real.as_path()]
                        .iter()
                        .all(|q| Writers::of(q).is_ok_and(|w| w.set.is_empty()))
                })
        })
}

/// Run as root under sudo, refuse a build (issue 69): it runs, for up to
/// an hour, the compiler, cmake and Tensile's python that the user's
/// profile, PATH and `--rocm` name, in a work dir that under `sudo -E` is
/// their cache, which they can change while root builds. Built as the
/// user, a prefix is moved into place by root with a plain copy, checked
/// by its MD5SUMS. A root shell (no sudo) builds with root's own tools.
pub fn ensure_not_building_for_a_user() -> anyhow::Result<()> {
    let Some(uid) = invoking_user().filter(|_| is_root()) else {
        return Ok(());
    };
    let who = name_of(uid);
    Err(crate::error::hint(
        format!(
            "run as root under sudo, rdna1-patch builds nothing: a build runs the compilers, cmake and python that {who}'s profile, PATH and --rocm name, as root, for up to an hour; nothing was run"
        ),
        format!(
            "build as {who}, without sudo, into a prefix {who} owns (the default, or `--prefix ~/rdna1-patch-build`), then copy it into place as root (`sudo cp -a PREFIX /opt/NAME`; `cd /opt/NAME && md5sum -c share/rdna1-patch/MD5SUMS` checks the copy)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_bits_never_survive() {
        assert_eq!(plain_mode(0o4755), 0o755);
        assert_eq!(plain_mode(0o6775), 0o775);
        assert_eq!(plain_mode(0o1777), 0o777);
    }

    #[test]
    fn a_world_writable_directory_lets_everyone_replace_its_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let file = sub.join("f");
        std::fs::write(&file, "x").unwrap();
        let before = Writers::of(&file).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
        let after = Writers::of(&file).unwrap();
        // A plain user's group is not root's: it can write there too.
        let gid = std::fs::metadata(&sub).unwrap().gid();
        let mut want: Vec<Who> = (gid != 0).then_some(Who::Group(gid)).into_iter().collect();
        want.push(Who::Anyone);
        assert_eq!(after.beyond(&before), want);
        // Sticky, as /tmp: only the entry's owner moves it.
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(Writers::of(&file).unwrap(), before);
    }
}
