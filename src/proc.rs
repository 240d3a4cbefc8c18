//! The one way this tool starts programs, each in its own process group:
//! [`run`] captures a child with a hard time limit (MIOpen is known to hang
//! in Find on RDNA1, and a hang must end as a clear failure, not a frozen
//! terminal); [`helper`] is that for short helper programs; [`stream`] hands
//! a long child's merged output over line by line (to a log and a progress
//! bar) and forwards Ctrl-C to its whole group. A program that is not
//! installed is named, with how to install it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

pub struct Output {
    /// None when the time limit killed it.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    /// stdout was not UTF-8, and `stdout` has replacement characters.
    pub stdout_lossy: bool,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Run `cmd` in its own process group; past `limit`, SIGKILL the group.
pub fn run(mut cmd: Command, limit: Duration) -> Result<Output> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| spawn_error(&cmd, e))?;
    // Readers send what they read as they read it, so a pipe that a
    // grandchild keeps open cannot hold us past the limit, nor cost us what
    // the child itself printed.
    // Readers send what they read as they read it, so a pipe that a
    // grandchild keeps open cannot hold us past the limit, nor cost us what
    // the child itself printed.
    let out = pump(child.stdout.take().expect("piped"));
    let err = pump(child.stderr.take().expect("piped"));
    let pgid = child.id() as i32;
    // A signal reaches the child's group; we then return its error below.
    let guard = crate::interrupt::ChildGroup::new(child.id());
    // A waiting thread, not a polling loop: a helper that answers in 2 ms
    // costs 2 ms (git runs a dozen of them per fetch).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait());
    });
    let status = match done_rx.recv_timeout(limit) {
        Ok(status) => Some(status?),
        Err(_) => {
            // SAFETY: kill(2) on the group we created; no memory involved.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = done_rx.recv();
            None
        }
    };
    // Whatever the child left running in its group goes with it; anything
    // that left the group (setsid) gets until the limit to close its pipes.
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    drop(guard);
    if let Some(sig) = crate::interrupt::interrupted() {
        return Err(crate::interrupt::stopped(
            &cmd.get_program().to_string_lossy(),
            sig,
        ));
    }
    let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
        let deadline = start + limit.max(start.elapsed() + Duration::from_millis(200));
        let mut buf = Vec::new();
        while let Ok(chunk) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            buf.extend_from_slice(&chunk);
        }
        match String::from_utf8(buf) {
            Ok(text) => (text, false),
            Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
        }
    };
    let (stdout, stdout_lossy) = collect(out);
    Ok(Output {
        status,
        stdout,
        stdout_lossy,
        stderr: collect(err).0,
        elapsed: start.elapsed(),
    })
}

/// A thread that reads `pipe` to its end and sends each chunk as it comes.
fn pump(mut pipe: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// How long a helper program may take (python looking for torch, ldd,
/// patchelf, a `--version`): they answer in well under a second, so one that
/// has not answered in this long is hung, and waiting longer helps nobody.
pub const HELPER_LIMIT: Duration = Duration::from_secs(120);

/// Run a helper program to the end within [`HELPER_LIMIT`]; a hang is an
/// error that names the program.
pub fn helper(cmd: Command) -> Result<Finished> {
    let shown = format!(
        "{} {}",
        cmd.get_program().to_string_lossy(),
        cmd.get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = run(cmd, HELPER_LIMIT)?;
    match out.status {
        Some(status) => Ok(Finished {
            status,
            stdout: out.stdout,
            stdout_lossy: out.stdout_lossy,
            stderr: out.stderr,
        }),
        None => anyhow::bail!(
            "`{}` did not finish within {} s and was killed",
            shown.chars().take(200).collect::<String>(),
            HELPER_LIMIT.as_secs()
        ),
    }
}

/// A helper that ran to the end.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    /// stdout was not UTF-8, and `stdout` has replacement characters.
    pub stdout_lossy: bool,
    pub stderr: String,
}

/// Debian/Ubuntu packages of the programs this tool runs.
const PACKAGES: &[(&str, &str)] = &[
    ("cmake", "cmake"),
    ("git", "git"),
    ("ninja", "ninja-build"),
    ("patchelf", "patchelf"),
    ("ldd", "libc-bin"),
    ("python3", "python3"),
    ("distcc", "distcc"),
    ("ccache", "ccache"),
    ("sccache", "sccache"),
];

/// Why a child could not start; a missing program is named with its package.
fn spawn_error(cmd: &Command, e: std::io::Error) -> anyhow::Error {
    let program = cmd.get_program().to_string_lossy().into_owned();
    if e.kind() == std::io::ErrorKind::NotFound {
        let name = Path::new(&program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let fix = match PACKAGES.iter().find(|(p, _)| *p == name) {
            Some((_, pkg)) => {
                format!("install it (Debian/Ubuntu: sudo apt install {pkg}) and run this again")
            }
            None => format!("install {name}, or check the path, and run this again"),
        };
        return crate::error::hint(format!("{program} is not installed (not found)"), fix);
    }
    anyhow::Error::new(e).context(format!("cannot run {program}"))
}

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
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .spawn()
        .map_err(|e| spawn_error(&cmd, e))?;
    // Our copies of the writing end must go, or the read never ends.
    drop(cmd);
    let guard = crate::interrupt::ChildGroup::new(child.id());
    let rx = pump(reader);
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
    drop(guard);
    Ok(Streamed {
        status: (!silent).then_some(status),
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_named_with_its_package() {
        let err = helper(Command::new("patchelf-not-here")).err().unwrap();
        assert_eq!(
            crate::error::render(&err),
            "error: patchelf-not-here is not installed (not found)\nhelp: install patchelf-not-here, or check the path, and run this again"
        );
        let mut c = Command::new("/nonexistent/dir/ninja");
        c.arg("--version");
        let err = stream(c, |_| {}).err().unwrap();
        assert!(
            crate::error::render(&err).ends_with(
                "help: install it (Debian/Ubuntu: sudo apt install ninja-build) and run this again"
            ),
            "{}",
            crate::error::render(&err)
        );
    }

    #[test]
    fn a_streamed_child_gives_stdout_and_stderr_line_by_line() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo one; echo two >&2; exit 3"]);
        let mut lines = Vec::new();
        let s = stream(c, |l| lines.push(l.to_owned())).unwrap();
        assert_eq!(lines, ["one", "two"]);
        assert_eq!(s.status.and_then(|s| s.code()), Some(3));
    }

    #[test]
    fn carriage_returns_end_lines_and_a_silent_child_is_killed() {
        let mut c = Command::new("sh");
        c.args(["-c", "printf 'a 1%%\\ra 2%%\\r\\nb\\n\\nc'"]);
        let mut lines = Vec::new();
        stream(c, |l| lines.push(l.to_owned())).unwrap();
        assert_eq!(lines, ["a 1%", "a 2%", "b", "", "c"]);

        let mut c = Command::new("sh");
        c.args(["-c", "echo started; sleep 30"]);
        let start = Instant::now();
        let mut lines = Vec::new();
        let s = stream_watched(c, Some(Duration::from_millis(300)), |l| {
            lines.push(l.to_owned())
        })
        .unwrap();
        assert!(s.status.is_none());
        assert_eq!(lines, ["started"]);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
}
