//! A child that serves requests for as long as it is fed: this binary's
//! compile child, started once per core and kept warm for a whole run
//! (issue 74: a child per batch loaded comgr a dozen times a diagnosis).
//! It runs under a reaper in a process group of its own, with only the
//! environment its command sets; each request is a line on its stdin and
//! each answer a line on its stdout, waited for within a limit, past
//! which the group is stopped. Its stderr is kept to its last words, for
//! the error that says how it ended.

use std::io::{BufRead, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Group, kill_group, spawn_error};

/// The longest answer line: a compile's answer is its log cut to a few KiB.
const LINE_CAP: u64 = 1 << 20;
/// The most of stderr kept: the end of it, which says how a child ended.
const TAIL_CAP: usize = 64 << 10;
/// How long a child that has stopped answering (or been told to stop) may
/// take to end before its group is killed.
const END_LIMIT: Duration = Duration::from_secs(15);

/// A running child, fed and heard line by line.
pub struct Served {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    tail: Arc<Mutex<Vec<u8>>>,
    /// Closed by the stderr reader when stderr ends.
    err_done: Receiver<()>,
    group: Group,
    status: Option<Option<ExitStatus>>,
}

/// What the child said next.
pub enum Heard {
    Line(String),
    /// Its stdout ended: it exited, died, or printed a line past the cap.
    Ended,
    /// Nothing within the limit.
    Silent,
}

/// How a child ended: its status (None when it was stopped) and the end
/// of its stderr.
pub struct Ended {
    pub status: Option<ExitStatus>,
    pub stderr: String,
}

impl Served {
    /// Start `cmd` under a reaper (`exe`, this binary), its environment
    /// only what `cmd` sets.
    pub fn start(cmd: &Command, exe: &Path) -> Result<Served> {
        let mut reaped = crate::reaper::contain(cmd, exe, true)?;
        let mut child = reaped
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| spawn_error(cmd, e))?;
        let group = Group {
            pgid: child.id() as i32,
            reaper: true,
        };
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match (&mut r).take(LINE_CAP).read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.last() != Some(&b'\n') => {
                        // Past the cap (or cut off at the end): no answer.
                        if line.len() as u64 >= LINE_CAP {
                            group.stop();
                        }
                        break;
                    }
                    Ok(_) => {
                        line.pop();
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let tail = Arc::new(Mutex::new(Vec::new()));
        let mut stderr = child.stderr.take().expect("piped");
        let (done_tx, err_done) = std::sync::mpsc::channel::<()>();
        let kept = tail.clone();
        std::thread::spawn(move || {
            let _done = done_tx;
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                let mut t = kept.lock().unwrap_or_else(|e| e.into_inner());
                t.extend_from_slice(&buf[..n]);
                if t.len() > TAIL_CAP {
                    let cut = t.len() - TAIL_CAP;
                    t.drain(..cut);
                }
            }
        });
        let stdin = child.stdin.take();
        Ok(Served {
            child,
            stdin,
            lines,
            tail,
            err_done,
            group,
            status: None,
        })
    }

    /// The child's process id (its group's), for a signal to reach it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Write `line` and a newline; false when the child reads no more.
    pub fn send(&mut self, line: &[u8]) -> bool {
        let Some(stdin) = self.stdin.as_mut() else {
            return false;
        };
        stdin
            .write_all(line)
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush())
            .is_ok()
    }

    /// The child's next line, waited for `limit`.
    pub fn hear(&mut self, limit: Duration) -> Heard {
        match self.lines.recv_timeout(limit) {
            Ok(line) => Heard::Line(String::from_utf8_lossy(&line).into_owned()),
            Err(RecvTimeoutError::Disconnected) => Heard::Ended,
            Err(RecvTimeoutError::Timeout) => Heard::Silent,
        }
    }

    /// Stop the group (the reaper sweeps it), then how it ended: no
    /// status, it was stopped.
    pub fn stop(&mut self) -> Ended {
        if self.status.is_none() {
            self.group.stop();
            self.wait(END_LIMIT);
            self.status = Some(None);
        }
        self.ended()
    }

    /// Wait for the child to end (its stdout has), then how it did.
    pub fn finish(&mut self) -> Ended {
        if self.status.is_none() {
            let status = self.wait(END_LIMIT);
            self.status = Some(status);
        }
        self.ended()
    }

    fn ended(&mut self) -> Ended {
        // The reaper has swept every descendant: stderr ends at once.
        let _ = self.err_done.recv_timeout(Duration::from_secs(1));
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        Ended {
            status: self.status.flatten(),
            stderr: String::from_utf8_lossy(&tail).into_owned(),
        }
    }

    /// The child's status within `limit`; past it, the group is killed.
    fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Some(s),
                Ok(None) if start.elapsed() < limit => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                _ => {
                    kill_group(self.group.pgid);
                    return self.child.wait().ok();
                }
            }
        }
    }
}

impl Drop for Served {
    /// Its stdin closed, a child that serves while fed ends; one that does
    /// not is stopped.
    fn drop(&mut self) {
        self.stdin = None;
        if self.status.is_none() {
            let start = Instant::now();
            loop {
                match self.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if start.elapsed() < Duration::from_secs(2) => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Ok(None) => {
                        self.group.stop();
                        self.wait(END_LIMIT);
                        break;
                    }
                }
            }
        }
    }
}
