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

use anyhow::Result;

mod served;
mod stream;
pub use served::{Ended, Heard, Served};
pub use stream::{stream, stream_watched};

pub struct Output {
    /// None when the time limit killed it.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    /// stdout was not UTF-8, and `stdout` has replacement characters.
    pub stdout_lossy: bool,
    pub stderr: String,
    pub elapsed: Duration,
}

/// The most a captured child may print on stdout, and again on stderr.
/// Every helper answers in far less (git's longest, a file's content, is a
/// few MB); one that goes on is broken or hostile, and is stopped rather
/// than let grow this process without bound.
pub const OUTPUT_CAP: usize = 64 << 20;

/// Run `cmd` in its own process group; past `limit`, SIGKILL the group.
/// Past [`OUTPUT_CAP`] on either stream, the group is killed too and the
/// run is an error that names the cap.
pub fn run(cmd: Command, limit: Duration) -> Result<Output> {
    run_with(cmd, limit, false)
}

/// [`run`] under a reaper (`reaper`): a program that leaves its process
/// group (setsid, a double fork) is still ended with it, at its end or at
/// the limit. For what runs code the tool does not control: torch's
/// import. Run as root under sudo, it runs as sudo's user and group, with
/// no supplementary groups (std drops them when it sets the user): the
/// code is that user's torch, and needs nothing of root's.
pub fn run_contained(cmd: Command, limit: Duration) -> Result<Output> {
    let mut reaped = crate::reaper::contain(&cmd, Path::new("/proc/self/exe"), false)?;
    if let Some((uid, gid)) = crate::owner::sudo_identity()? {
        reaped.uid(uid).gid(gid);
    }
    named_as(&cmd, run_with(reaped, limit, true))
}

/// An error of a reaped run names the program, not the reaper.
fn named_as(cmd: &Command, out: Result<Output>) -> Result<Output> {
    out.map_err(|e| {
        // Stopped by a signal: the run is interrupted, said as such (exit
        // 130 and the help to run again), never the child's own name.
        match e
            .chain()
            .find_map(|c| c.downcast_ref::<crate::error::Interrupted>())
        {
            Some(crate::error::Interrupted(sig)) => crate::interrupt::stopped("rdna1-patch", *sig),
            None => anyhow::anyhow!("{}", e.to_string().replace("/proc/self/exe", &shown(cmd))),
        }
    })
}

/// A child's process group, and whether its leader is a reaper, which is
/// told to stop (and then sweeps every descendant) rather than killed.
#[derive(Clone, Copy)]
struct Group {
    pgid: i32,
    reaper: bool,
}

impl Group {
    fn plain(pid: u32) -> Group {
        Group {
            pgid: pid as i32,
            reaper: false,
        }
    }

    fn stop(self) {
        match self.reaper {
            // SAFETY: kill(2) of our own child; no memory involved.
            true => unsafe {
                libc::kill(self.pgid, libc::SIGTERM);
            },
            false => kill_group(self.pgid),
        }
    }
}

fn run_with(mut cmd: Command, limit: Duration, reaper: bool) -> Result<Output> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| spawn_error(&cmd, e))?;
    let pgid = child.id() as i32;
    let group = Group { pgid, reaper };
    // Readers send what they read as they read it, so a pipe that a
    // grandchild keeps open cannot hold us past the limit, nor cost us what
    // the child itself printed.
    let out = pump(child.stdout.take().expect("piped"), OUTPUT_CAP, group);
    let err = pump(child.stderr.take().expect("piped"), OUTPUT_CAP, group);
    // A signal reaches the child's group; we then return its error below.
    let guard = crate::interrupt::ChildGroup::new(child.id());
    // A waiting thread, not a polling loop: a helper that answers in 2 ms
    // costs 2 ms (git runs a dozen of them per fetch).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait());
    });
    let status = wait_within(&done_rx, group, start, limit)?;
    // Whatever the child left running in its group goes with it; anything
    // that left the group (setsid) gets until the limit to close its pipes.
    kill_group(pgid);
    drop(guard);
    if let Some(sig) = crate::interrupt::interrupted() {
        return Err(crate::interrupt::stopped(
            &cmd.get_program().to_string_lossy(),
            sig,
        ));
    }
    let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>,
                   stream: &str|
     -> Result<(String, bool)> {
        let deadline = start + limit.max(start.elapsed() + Duration::from_millis(200));
        let mut buf = Vec::new();
        while let Ok(chunk) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            buf.extend_from_slice(&chunk);
        }
        if buf.len() > OUTPUT_CAP {
            anyhow::bail!(
                "`{}` printed more than {} MiB on {stream}, and was stopped",
                shown(&cmd),
                OUTPUT_CAP >> 20
            );
        }
        Ok(match String::from_utf8(buf) {
            Ok(text) => (text, false),
            Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
        })
    };
    let (stdout, stdout_lossy) = collect(out, "stdout")?;
    Ok(Output {
        status,
        stdout,
        stdout_lossy,
        stderr: collect(err, "stderr")?.0,
        elapsed: start.elapsed(),
    })
}

/// The child's status once `done` has it; None when it ran past `limit`
/// and its group was killed.
fn wait_within(
    done: &std::sync::mpsc::Receiver<std::io::Result<ExitStatus>>,
    group: Group,
    start: Instant,
    limit: Duration,
) -> Result<Option<ExitStatus>> {
    match done.recv_timeout(limit.saturating_sub(start.elapsed())) {
        Ok(status) => Ok(Some(status?)),
        Err(_) => {
            group.stop();
            // A reaper sweeps, then ends; one that does not in time goes
            // with its group.
            if done.recv_timeout(Duration::from_secs(15)).is_err() {
                kill_group(group.pgid);
                let _ = done.recv();
            }
            Ok(None)
        }
    }
}

fn kill_group(pgid: i32) {
    // SAFETY: kill(2) on a process group we created; no memory involved.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// A command as a person would type it, on one line (a `python -c` script
/// has several), cut to 200 characters.
fn shown(cmd: &Command) -> String {
    let text = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .flat_map(|a| {
            a.to_string_lossy()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join(" ");
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// A thread that reads `pipe` to its end and sends each chunk as it comes.
/// Past `cap` bytes it sends one byte more (so the reader sees the cap was
/// passed), kills the process group `pgid` and stops reading.
fn pump(
    mut pipe: impl Read + Send + 'static,
    cap: usize,
    group: Group,
) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut total = 0usize;
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = cap - total;
                    let over = n > room;
                    let take = if over { room + 1 } else { n };
                    total += take;
                    if tx.send(buf[..take].to_vec()).is_err() {
                        break;
                    }
                    if over {
                        group.stop();
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// How long a helper program may take (python looking for torch,
/// patchelf, a `--version`): they answer in well under a second, so one that
/// has not answered in this long is hung, and waiting longer helps nobody.
pub const HELPER_LIMIT: Duration = Duration::from_secs(120);

/// A python for a question the tool asks of it. Nothing in the current
/// directory is imported: python puts the working directory first on
/// `sys.path` for `-c` and `-m`, so a `json.py` there would run (as root
/// under sudo). The working directory is `/`, which only root writes, and
/// `PYTHONSAFEPATH` says the same to python 3.11 and newer. The user's
/// environment (PYTHONPATH, a venv) still decides which torch is seen: it
/// is theirs, given on purpose, unlike the directory they happen to be in.
/// Under sudo it runs as sudo's user and group, with no supplementary
/// groups: python runs a venv's `.pth` files and `sitecustomize` as it
/// starts, and those are the user's code, which gets no more than the user
/// has. What it answers is data, read as such.
pub fn python(program: &Path) -> Result<Command> {
    // A relative path with a slash is the caller's, not `/`'s.
    let program = if program.components().count() > 1 && program.is_relative() {
        std::path::absolute(program).unwrap_or_else(|_| program.to_owned())
    } else {
        program.to_owned()
    };
    let mut c = Command::new(program);
    c.current_dir("/").env("PYTHONSAFEPATH", "1");
    if let Some((uid, gid)) = crate::owner::sudo_identity()? {
        c.uid(uid).gid(gid);
    }
    Ok(c)
}

/// Run a helper program to the end within [`HELPER_LIMIT`]; a hang is an
/// error that names the program.
pub fn helper(cmd: Command) -> Result<Finished> {
    let shown = shown(&cmd);
    let out = run(cmd, HELPER_LIMIT)?;
    match out.status {
        Some(status) => Ok(Finished {
            status,
            stdout: out.stdout,
            stdout_lossy: out.stdout_lossy,
            stderr: out.stderr,
        }),
        None => anyhow::bail!(
            "`{shown}` did not finish within {} s and was killed",
            HELPER_LIMIT.as_secs()
        ),
    }
}

/// A program that may ask the user something (minisign's password), on
/// this terminal: stdin, stdout and stderr are ours, and it stays in our
/// process group so the terminal's Ctrl-C reaches it. Without a terminal
/// it runs as a [`helper`], its stderr passed on in the error.
pub fn interactive(mut cmd: Command) -> Result<bool> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        let status = cmd.status().map_err(|e| spawn_error(&cmd, e))?;
        return Ok(status.success());
    }
    let shown = shown(&cmd);
    let out = helper(cmd)?;
    if !out.status.success() {
        anyhow::bail!("`{shown}` failed: {}", out.stderr.trim());
    }
    Ok(true)
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

#[cfg(test)]
mod tests;
