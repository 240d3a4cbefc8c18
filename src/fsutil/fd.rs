//! Every change the tool makes to the file system by name goes through a
//! directory held open ([`Dir`]): the name is looked up in that directory
//! alone, never followed as a symlink, and what is made is then changed
//! only through its own descriptor (fchmod, fsync), never by path again.
//!
//! Run as root where the directory is another user's, each change is made
//! with that user's file-system identity (setfsuid, setfsgid: this thread
//! alone, and only for the call): what is created is theirs from the
//! start, and a name they swap for a symlink while the tool works leads
//! nowhere they could not write themselves. A chmod by path after an
//! fsync, the old way, changed whatever file a symlink put at the temp
//! file's name pointed to, root's own included (issue 59).
//!
//! The house test (`tests/e2e/house.rs`) keeps calls that change a file
//! by path (chmod, chown, create, write-open) out of the rest of `src/`.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::walk::swapped_error;

/// A directory held open, and whose file-system identity changes in it
/// are made with.
#[derive(Debug)]
pub struct Dir {
    file: File,
    path: PathBuf,
    /// The directory's owner and group, when root makes changes in it as
    /// them (the directory is not root's).
    owner: Option<(u32, u32)>,
}

impl Dir {
    /// Open the directory at `path`: as root, one component at a time
    /// from `/`, following a symlink only where no one but root could
    /// have put it (`walk`); what is inside is never followed again.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let file = super::walk::open_dir(path)?;
        Dir::from_file(file, path.to_owned())
    }

    /// The path this directory was opened by, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's device and inode.
    pub fn id(&self) -> io::Result<(u64, u64)> {
        let m = self.file.metadata()?;
        Ok((m.dev(), m.ino()))
    }

    /// Whether `name` here is a directory of that device and inode (not
    /// a symlink to one).
    pub fn holds_dir(&self, name: &OsStr, id: (u64, u64)) -> io::Result<bool> {
        Ok(self.stat(name)?.is_some_and(|st| {
            st.st_mode & libc::S_IFMT == libc::S_IFDIR && (st.st_dev, st.st_ino) == id
        }))
    }

    /// The directory's permission bits, read from its descriptor.
    pub fn mode(&self) -> io::Result<u32> {
        Ok(self.file.metadata()?.mode() & 0o7777)
    }

    /// The directory's owner, read from its descriptor.
    pub fn uid(&self) -> io::Result<u32> {
        Ok(self.file.metadata()?.uid())
    }

    fn from_file(file: File, path: PathBuf) -> io::Result<Dir> {
        let meta = file.metadata()?;
        let owner = (crate::owner::is_root() && meta.uid() != 0).then(|| (meta.uid(), meta.gid()));
        Ok(Dir { file, path, owner })
    }

    /// Run `f` with this directory's owner's file-system identity when
    /// root acts for them here; put back whatever happens.
    fn as_owner<T>(&self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let Some((uid, gid)) = self.owner else {
            return f();
        };
        let _back = FsIdentity::become_(uid, gid)?;
        f()
    }

    fn c(name: &OsStr) -> io::Result<CString> {
        if name.is_empty() || name.as_bytes().contains(&b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a plain file name: {}", name.to_string_lossy()),
            ));
        }
        CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    }

    fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// What stands at `name`, not following a symlink; None when nothing.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<libc::stat>> {
        let c = Dir::c(name)?;
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd, a NUL-terminated name and a struct to fill.
        let rc =
            unsafe { libc::fstatat(self.fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        match rc {
            0 => Ok(Some(st)),
            _ => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::NotFound => Ok(None),
                e => Err(e),
            },
        }
    }

    /// A new file at `name`, made here and nowhere else: an existing name,
    /// a symlink included, is an error (O_EXCL, O_NOFOLLOW).
    pub fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        self.open_new(name, libc::O_EXCL, mode)
    }

    /// Open the regular file at `name` for reading and writing, made if it
    /// is not there; a symlink or anything but a regular file is refused.
    pub fn open_or_create(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let file = self.open_new(name, libc::O_NONBLOCK, mode)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        Ok(file)
    }

    /// openat(O_CREAT | O_NOFOLLOW | O_RDWR | `flags`) of `name` here, as
    /// this directory's owner.
    fn open_new(&self, name: &OsStr, flags: i32, mode: u32) -> io::Result<File> {
        let c = Dir::c(name)?;
        let flags = libc::O_CREAT | libc::O_NOFOLLOW | libc::O_RDWR | libc::O_CLOEXEC | flags;
        self.as_owner(|| {
            // SAFETY: a valid fd and name; the result is checked.
            match unsafe { libc::openat(self.fd(), c.as_ptr(), flags, mode as libc::c_uint) } {
                -1 => Err(io::Error::last_os_error()),
                // SAFETY: a descriptor just opened, owned by nothing else.
                fd => Ok(unsafe { File::from_raw_fd(fd) }),
            }
        })
    }

    /// Give `from` the name `to` in this directory, replacing what is
    /// there (a rename never follows a symlink at either name).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (f, t) = (Dir::c(from)?, Dir::c(to)?);
        self.as_owner(|| {
            // SAFETY: valid fds and names.
            match unsafe { libc::renameat(self.fd(), f.as_ptr(), self.fd(), t.as_ptr()) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })
    }

    /// Remove the name `name` (a file or a symlink itself, never what it
    /// points to); nothing there is fine.
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        let c = Dir::c(name)?;
        self.as_owner(|| {
            // SAFETY: a valid fd and name.
            match unsafe { libc::unlinkat(self.fd(), c.as_ptr(), 0) } {
                0 => Ok(()),
                _ => match io::Error::last_os_error() {
                    e if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    e => Err(e),
                },
            }
        })
    }

    /// The directory `name` in this one, made (as this one's owner) when
    /// it is not there; a symlink there is refused, not followed.
    pub fn subdir(&self, name: &OsStr, mode: u32) -> io::Result<Dir> {
        let c = Dir::c(name)?;
        self.as_owner(|| {
            // SAFETY: a valid fd and name.
            match unsafe { libc::mkdirat(self.fd(), c.as_ptr(), mode as libc::mode_t) } {
                0 => Ok(()),
                _ => match io::Error::last_os_error() {
                    e if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                    e => Err(e),
                },
            }
        })?;
        // A name that was there before may be anything: said plainly.
        self.open_dir(name, |path| {
            io::Error::other(format!(
                "{} is not a directory rdna1-patch made (a symlink or a file stands there)",
                path.display()
            ))
        })
    }

    /// A second name `name` here for the file `from` in `src` (a hard
    /// link; a symlink at `from` is linked itself, never followed): both
    /// names looked up in directories held open, never by path.
    pub fn link_from(&self, src: &Dir, from: &OsStr, name: &OsStr) -> io::Result<()> {
        let (f, n) = (Dir::c(from)?, Dir::c(name)?);
        self.as_owner(|| {
            // SAFETY: valid names and fds.
            match unsafe { libc::linkat(src.fd(), f.as_ptr(), self.fd(), n.as_ptr(), 0) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })
    }

    /// A new directory `name` here (an existing name, a symlink included,
    /// is an error), made as this directory's owner and held open.
    pub fn subdir_new(&self, name: &OsStr, mode: u32) -> io::Result<Dir> {
        let c = Dir::c(name)?;
        self.as_owner(|| {
            // SAFETY: a valid fd and name.
            match unsafe { libc::mkdirat(self.fd(), c.as_ptr(), mode as libc::mode_t) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })?;
        self.subdir_open(name)
    }

    /// The directory `name` here, held open; a symlink there is refused
    /// as a swap (the tool made it, or read it as a directory, just now).
    pub fn subdir_open(&self, name: &OsStr) -> io::Result<Dir> {
        self.open_dir(name, |path| {
            swapped_error(format!(
                "{} is not the directory rdna1-patch made (a symlink or a file stands there; another program swapped it); nothing was written through it",
                path.display()
            ))
        })
    }

    /// The directory `name` here, held open, never through a symlink:
    /// `not_dir` makes the error when a symlink or a file stands there.
    fn open_dir(&self, name: &OsStr, not_dir: impl FnOnce(&Path) -> io::Error) -> io::Result<Dir> {
        let c = Dir::c(name)?;
        // SAFETY: a valid fd and name; the result is checked.
        let fd = unsafe {
            libc::openat(
                self.fd(),
                c.as_ptr(),
                libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd == -1 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => not_dir(&self.path.join(name)),
                _ => e,
            });
        }
        // SAFETY: a descriptor just opened, owned by nothing else.
        Dir::from_file(unsafe { File::from_raw_fd(fd) }, self.path.join(name))
    }

    /// The regular file `name` here, opened for reading; a symlink or
    /// anything but a regular file is refused.
    pub fn open_read(&self, name: &OsStr) -> io::Result<File> {
        let c = Dir::c(name)?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        // SAFETY: a valid fd and name; the result is checked.
        let file = match unsafe { libc::openat(self.fd(), c.as_ptr(), flags) } {
            -1 => return Err(io::Error::last_os_error()),
            // SAFETY: a descriptor just opened, owned by nothing else.
            fd => unsafe { File::from_raw_fd(fd) },
        };
        if !file.metadata()?.is_file() {
            return Err(io::Error::other(format!(
                "{} is not a regular file",
                self.path.join(name).display()
            )));
        }
        Ok(file)
    }

    /// Give `from` here the name `to` in `other` (renameat), as this
    /// directory's owner.
    pub fn rename_to(&self, from: &OsStr, other: &Dir, to: &OsStr) -> io::Result<()> {
        let (f, t) = (Dir::c(from)?, Dir::c(to)?);
        self.as_owner(|| {
            // SAFETY: valid fds and names.
            match unsafe { libc::renameat(self.fd(), f.as_ptr(), other.fd(), t.as_ptr()) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })
    }

    /// Swap the name `a` here with `b` in `other` in one step (renameat2
    /// RENAME_EXCHANGE), as this directory's owner.
    pub fn exchange(&self, a: &OsStr, other: &Dir, b: &OsStr) -> io::Result<()> {
        let (a, b) = (Dir::c(a)?, Dir::c(b)?);
        self.as_owner(|| {
            // SAFETY: valid fds and names.
            let rc = unsafe {
                libc::renameat2(
                    self.fd(),
                    a.as_ptr(),
                    other.fd(),
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            match rc {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })
    }

    /// Remove `name` here and, when it is a directory, all it holds, each
    /// directory below opened without following a symlink (a symlink is
    /// removed itself); nothing there is fine.
    pub fn remove_tree(&self, name: &OsStr) -> io::Result<()> {
        let Some(st) = self.stat(name)? else {
            return Ok(());
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return self.remove_file(name);
        }
        let sub = self.subdir_open(name)?;
        let names: Vec<std::ffi::OsString> =
            std::fs::read_dir(format!("/proc/self/fd/{}", sub.fd()))?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<_>>()?;
        for n in names {
            sub.remove_tree(&n)?;
        }
        self.remove_dir(name)
    }

    /// Remove the empty directory `name` here (unlinkat AT_REMOVEDIR).
    pub fn remove_dir(&self, name: &OsStr) -> io::Result<()> {
        let c = Dir::c(name)?;
        self.as_owner(|| {
            // SAFETY: a valid fd and name.
            match unsafe { libc::unlinkat(self.fd(), c.as_ptr(), libc::AT_REMOVEDIR) } {
                0 => Ok(()),
                _ => match io::Error::last_os_error() {
                    e if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    e => Err(e),
                },
            }
        })
    }

    /// A symlink `name` here, to `target` (made as this directory's owner).
    pub fn symlink(&self, target: &Path, name: &OsStr) -> io::Result<()> {
        let t = CString::new(target.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let n = Dir::c(name)?;
        self.as_owner(|| {
            // SAFETY: valid names and fd.
            match unsafe { libc::symlinkat(t.as_ptr(), self.fd(), n.as_ptr()) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })
    }

    /// The directory's own permission bits, set through its descriptor
    /// (as its owner, when root acts for them).
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        self.as_owner(|| fchmod(&self.file, mode))
    }

    /// The permission bits of `file`, made here, set as this directory's
    /// owner (who owns it).
    pub fn set_file_mode(&self, file: &File, mode: u32) -> io::Result<()> {
        self.as_owner(|| fchmod(file, mode))
    }

    /// Make the directory's entries (a rename, a new name) survive a power cut.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// Write `data` as `name` here: into a new file of a name of its own,
    /// given `mode` through its descriptor and synced, then renamed over
    /// `name` once that name is seen to still hold this very file.
    /// Someone who swaps the temp name meanwhile (only the directory's
    /// owner can, and then only as themselves) gets an error, never a
    /// change to what their symlink points to.
    pub fn write_atomic(&self, name: &OsStr, data: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        let (tmp_name, mut tmp) = self.temp_file(mode)?;
        let written = (|| {
            tmp.write_all(data)?;
            self.as_owner(|| fchmod(&tmp, mode))?;
            tmp.sync_all()?;
            crate::failpoint!("write-atomic-synced");
            self.rename_checked(&tmp, &tmp_name, name)
        })();
        if written.is_err() {
            let _ = self.remove_own(&tmp, &tmp_name);
        }
        written?;
        self.sync()
    }

    /// A new file of a fresh name (`.rdna1-patch-XXXXXX`, the name every
    /// reader of the tool's directories passes over), for new content.
    pub fn temp_file(&self, mode: u32) -> io::Result<(CString, File)> {
        let mut rnd = [0u8; 6];
        for _ in 0..100 {
            // SAFETY: a buffer of its length; a short answer only repeats letters.
            unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) };
            let mut n = b".rdna1-patch-".to_vec();
            n.extend(
                rnd.iter()
                    .map(|b| b"abcdefghijklmnopqrstuvwxyz012345"[(*b & 31) as usize]),
            );
            let tmp = OsStr::from_bytes(&n);
            match self.create_new(tmp, mode & 0o700) {
                Ok(f) => return Ok((Dir::c(tmp)?, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::from(io::ErrorKind::AlreadyExists))
    }

    /// Rename `tmp_name` over `name` when it still names `file`; then check
    /// that `name` is that file.
    pub fn rename_checked(&self, file: &File, tmp_name: &CString, name: &OsStr) -> io::Result<()> {
        let ours = file.metadata()?;
        let is_ours = |st: Option<libc::stat>| {
            st.is_some_and(|st| st.st_ino == ours.ino() && st.st_dev == ours.dev())
        };
        let tmp = OsStr::from_bytes(tmp_name.as_bytes());
        if !is_ours(self.stat(tmp)?) {
            return Err(swapped(&self.path, name));
        }
        self.rename(tmp, name)?;
        if !is_ours(self.stat(name)?) {
            return Err(swapped(&self.path, name));
        }
        Ok(())
    }

    /// Remove `name` only while it is still `file` (a temp file of ours).
    fn remove_own(&self, file: &File, name: &CString) -> io::Result<()> {
        let ours = file.metadata()?;
        let n = OsStr::from_bytes(name.as_bytes());
        match self.stat(n)? {
            Some(st) if st.st_ino == ours.ino() && st.st_dev == ours.dev() => self.remove_file(n),
            _ => Ok(()),
        }
    }
}

fn swapped(dir: &Path, name: &OsStr) -> io::Error {
    swapped_error(format!(
        "another program replaced the file being written as {} in {} (whoever can write in that directory); nothing of theirs was changed",
        name.to_string_lossy(),
        dir.display()
    ))
}

/// The permission bits of an open file, set through its descriptor.
pub fn fchmod(file: &File, mode: u32) -> io::Result<()> {
    // SAFETY: a valid fd.
    match unsafe { libc::fchmod(file.as_raw_fd(), crate::owner::plain_mode(mode)) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Run `f` with sudo's user's file-system identity (`SUDO_UID`,
/// `SUDO_GID`) when root acts for them, so a file their environment names
/// is opened only if they could open it themselves; else as is.
pub fn as_invoking_user<T>(f: impl FnOnce() -> T) -> io::Result<T> {
    if !crate::owner::is_root() {
        return Ok(f());
    }
    match crate::owner::sudo_identity().map_err(|e| io::Error::other(format!("{e:#}")))? {
        Some((uid, gid)) => {
            let _back = FsIdentity::become_(uid, gid)?;
            Ok(f())
        }
        None => Ok(f()),
    }
}

/// This thread's file-system identity, switched and put back when dropped.
struct FsIdentity;

impl FsIdentity {
    fn become_(uid: u32, gid: u32) -> io::Result<FsIdentity> {
        // SAFETY: setfsgid/setfsuid change this thread's file-system ids
        // only; each is read back (a call with -1 changes nothing and
        // answers the current one), since they report no error.
        unsafe {
            libc::setfsgid(gid);
            libc::setfsuid(uid);
            let now = (libc::setfsuid(u32::MAX), libc::setfsgid(u32::MAX));
            if now != (uid as i32, gid as i32) {
                drop(FsIdentity);
                return Err(io::Error::other(format!(
                    "cannot act as uid {uid} gid {gid} in their directory (setfsuid)"
                )));
            }
        }
        Ok(FsIdentity)
    }
}

impl Drop for FsIdentity {
    fn drop(&mut self) {
        // SAFETY: back to the process's own ids, this thread alone.
        unsafe {
            libc::setfsuid(libc::geteuid());
            libc::setfsgid(libc::getegid());
        }
    }
}

/// Create `dir` and every missing directory above it, each new one made
/// inside its parent as the parent's owner (never root's in a user's
/// place), none followed if a symlink appears where one was made.
pub fn create_dir_all(dir: &Path) -> io::Result<Dir> {
    let dir = std::path::absolute(dir)?;
    let top = super::existing_ancestor(&dir);
    let mut cur = Dir::open(top)?;
    let rest = dir.strip_prefix(top).unwrap_or(Path::new(""));
    for comp in rest.components() {
        match comp {
            std::path::Component::Normal(name) => cur = cur.subdir(name, 0o777)?,
            std::path::Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} has a `..` in it", dir.display()),
                ));
            }
        }
    }
    Ok(cur)
}

/// The directory of `path` held open, and `path`'s file name in it.
pub fn parent_of(path: &Path) -> io::Result<(Dir, &OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((Dir::open(parent)?, name))
}
