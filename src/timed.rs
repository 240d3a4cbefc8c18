//! Run a child with a hard time limit: MIOpen is known to hang in Find on
//! RDNA1, and a hang must end as a clear failure, not a frozen terminal.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

pub struct Output {
    /// None when the time limit killed it.
    pub status: Option<ExitStatus>,
    pub stdout: String,
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
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    // Readers send what they read as they read it, so a pipe that a
    // grandchild keeps open cannot hold us past the limit, nor cost us what
    // the child itself printed.
    let reader = |mut pipe: Box<dyn Read + Send>| {
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
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let pgid = child.id() as i32;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() >= limit {
            // SAFETY: kill(2) on the group we created; no memory involved.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever the child left running in its group goes with it; anything
    // that left the group (setsid) gets until the limit to close its pipes.
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
        let deadline = start + limit.max(start.elapsed() + Duration::from_millis(200));
        let mut buf = Vec::new();
        while let Ok(chunk) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            buf.extend_from_slice(&chunk);
        }
        String::from_utf8_lossy(&buf).into_owned()
    };
    Ok(Output {
        status,
        stdout: collect(out),
        stderr: collect(err),
        elapsed: start.elapsed(),
    })
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
    pub stderr: String,
}
