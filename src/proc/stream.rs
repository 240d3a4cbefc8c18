//! A long child's merged output handed over line by line as it comes (to
//! a log and a progress bar), in a session of its own that Ctrl-C reaches
//! as a whole, killed when it prints nothing for too long.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{Group, pump, spawn_error};

/// The longest line [`stream`] hands on; a longer one (a child printing
/// without a newline) comes in pieces of this size.
pub const LINE_CAP: usize = 1 << 20;

/// What a streamed child did.
pub struct Streamed {
    /// None when it was killed for printing nothing for too long.
    pub status: Option<ExitStatus>,
}

/// Run `cmd` with stdout and stderr merged into one pipe, handing each line
/// to `on_line` as it comes, in its own process group that Ctrl-C reaches
/// as a whole (see `interrupt`).
pub fn stream(cmd: Command, on_line: impl FnMut(&str)) -> Result<Streamed> {
    stream_watched(cmd, None, on_line)
}

/// [`stream`], where a child that prints nothing for `silence` is killed
/// (with its group) and reported with no status. A carriage return ends a
/// line too, so progress that redraws one line (git's) arrives as it is drawn.
pub fn stream_watched(
    mut cmd: Command,
    silence: Option<Duration>,
    mut on_line: impl FnMut(&str),
) -> Result<Streamed> {
    let (reader, writer) = std::io::pipe().context("cannot create a pipe")?;
    let writer2 = writer.try_clone().context("cannot create a pipe")?;
    // A session of its own (its group too, with the same id): ninja puts
    // each command in a group of its own, and the session is what holds
    // them all when the build must stop.
    // SAFETY: setsid is async-signal-safe, as pre_exec requires.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .spawn()
        .map_err(|e| spawn_error(&cmd, e))?;
    // Our copies of the writing end must go, or the read never ends.
    drop(cmd);
    let guard = crate::interrupt::ChildGroup::new(child.id());
    // No cap on the whole: each line is handed on (to a log on disk), not
    // kept; one line is cut at LINE_CAP instead.
    let rx = pump(reader, usize::MAX, Group::plain(child.id()));
    let mut pending: Vec<u8> = Vec::new();
    let mut emit = |bytes: &[u8]| {
        let line = String::from_utf8_lossy(bytes);
        on_line(&line);
    };
    let mut silent = false;
    let mut after_cr = false;
    loop {
        let chunk = match silence {
            Some(limit) => match rx.recv_timeout(limit) {
                Ok(c) => c,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    silent = true;
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(c) => c,
                Err(_) => break,
            },
        };
        for &b in &chunk {
            match b {
                b'\r' => {
                    emit(&pending);
                    pending.clear();
                    after_cr = true;
                }
                // "\r\n" ends one line, not two.
                b'\n' if after_cr => after_cr = false,
                b'\n' => {
                    emit(&pending);
                    pending.clear();
                }
                _ => {
                    pending.push(b);
                    after_cr = false;
                    if pending.len() >= LINE_CAP {
                        emit(&pending);
                        pending.clear();
                    }
                }
            }
        }
    }
    if !pending.is_empty() {
        emit(&pending);
    }
    if silent {
        // SAFETY: kill(2) on the group we created; no memory involved.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    }
    let status = child.wait().context("cannot wait for a child")?;
    if crate::interrupt::interrupted().is_some() {
        // The compilers got the signal too; be sure they are gone before
        // saying so (a loaded machine takes a moment to finish them).
        wait_group_gone(child.id() as i32, Duration::from_secs(3));
    }
    drop(guard);
    Ok(Streamed {
        status: (!silent).then_some(status),
    })
}

/// Wait until no process of group `pgid` is left, at most `limit`; past
/// it, SIGKILL what is, and wait as long again for the killed to be gone
/// (on a loaded machine dying takes a moment: returning at once left a
/// compiler launcher in /proc after our exit).
fn wait_group_gone(pgid: i32, limit: Duration) {
    let start = Instant::now();
    let mut killed = false;
    // SAFETY: kill(2) with signal 0 only checks the group exists.
    let left =
        || unsafe { libc::kill(-pgid, 0) } == 0 || crate::interrupt::signal_session(pgid, 0) > 0;
    while left() {
        if !killed && start.elapsed() > limit {
            // SAFETY: as above, on the group we created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            crate::interrupt::signal_session(pgid, libc::SIGKILL);
            killed = true;
        }
        if start.elapsed() > limit * 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
