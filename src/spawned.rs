//! Proof that a process was started by this binary, for the entry points
//! no help offers (the reaper, `RDNA1_PATCH_REAPER`; the compile child,
//! `RDNA1_PATCH_COMGR_CHILD`). An environment variable is no proof: under
//! `sudo -E`, or a sudoers rule with SETENV, the user sets it, and root
//! then ran the reaper's argv or dlopened the library a request on stdin
//! named (issue 69). What neither the environment nor stdin can carry is
//! an open descriptor: the parent makes a socketpair and hands one end to
//! the child at [`FD`]. sudo closes every descriptor above 2 of what it
//! starts, so a hand-run entry point under sudo holds none. The child
//! checks that [`FD`] is a socket whose peer (SO_PEERCRED: the process
//! that made the pair) is its parent, and, run as root, that its parent's
//! program (`/proc/<ppid>/exe`) is this very binary (device and inode).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The descriptor the proof is handed at.
pub const FD: i32 = 197;

/// Hand `cmd`'s process the proof: a socketpair made here, its end put
/// at [`FD`] in the child; both ends live as long as `cmd`.
pub fn pass(cmd: &mut Command) -> std::io::Result<()> {
    let mut fds = [0i32; 2];
    // SAFETY: an array of two ints for the kernel to fill.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two descriptors just made, owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: only dup2, async-signal-safe, between fork and exec; the copy
    // at FD is not close-on-exec, the originals are.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &ours;
            match libc::dup2(theirs.as_raw_fd(), FD) {
                -1 => Err(std::io::Error::last_os_error()),
                _ => Ok(()),
            }
        });
    }
    Ok(())
}

/// Whether this process holds the proof that its parent, this binary,
/// started it; the descriptor is closed either way, so nothing this
/// process starts inherits it.
pub fn by_this_binary() -> bool {
    let proven = proven();
    // SAFETY: closing a descriptor number this process may hold; nothing
    // else of ours uses FD.
    unsafe { libc::close(FD) };
    proven
}

fn proven() -> bool {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor number and a struct to fill.
    if unsafe { libc::fstat(FD, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return false;
    }
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt of SO_PEERCRED into a ucred of its size.
    let rc = unsafe {
        libc::getsockopt(
            FD,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // SAFETY: getppid cannot fail.
    let parent = unsafe { libc::getppid() };
    if rc != 0 || cred.pid != parent {
        return false;
    }
    same_program(parent) || built_beside(parent) || !crate::owner::is_root() && cannot_see(parent)
}

/// In a debug build (the tests'), a parent built beside this binary (a
/// test of the library under target/debug, which starts this binary as
/// the compile child) holds the proof too; a release build is strict.
fn built_beside(parent: i32) -> bool {
    if !cfg!(debug_assertions) {
        return false;
    }
    let (Ok(theirs), Ok(ours)) = (
        std::fs::read_link(format!("/proc/{parent}/exe")),
        std::fs::read_link("/proc/self/exe"),
    ) else {
        return false;
    };
    ours.parent().is_some_and(|dir| theirs.starts_with(dir))
}

/// Whether the parent's program is this binary (device and inode).
fn same_program(parent: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    matches!(
        (id(&format!("/proc/{parent}/exe")), id("/proc/self/exe")),
        (Ok(a), Ok(b)) if a == b
    )
}

/// A reaper dropped to sudo's user may not read its root parent's
/// `/proc/<ppid>/exe`; run as that user it can do nothing that user
/// cannot, so the socket's proof of its parent suffices.
fn cannot_see(parent: i32) -> bool {
    std::fs::metadata(format!("/proc/{parent}/exe"))
        .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
}
