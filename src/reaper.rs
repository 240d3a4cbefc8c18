//! A child that cannot outlive its time limit, whatever it does: the
//! program runs under this binary again, started with [`REAPER_ENV`] (an
//! entry point no help offers, as the compile child's), which makes itself
//! a child subreaper (prctl(2)): a process that leaves the group and
//! double-forks (a torch whose import calls `setsid()`) is still its
//! descendant. When the program ends, or the reaper is told to stop
//! (SIGTERM, SIGINT, SIGHUP: the time limit or Ctrl-C), it kills every
//! descendant, reaps them, and ends as the program did. Used for what runs
//! torch's code or a compiler's: `verify --runtime`, `--smoke`, the compile
//! child (`proc::run_contained`, `proc::run_fed_contained`).

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// Set in the reaper's environment (the program's first argument after
/// the binary): `cli::main` then runs [`serve`].
pub const REAPER_ENV: &str = "RDNA1_PATCH_REAPER";

/// How long the sweep of descendants may take before it gives up: each
/// round kills what it finds, and a fork bomb is outrun by SIGKILL.
const SWEEP_LIMIT: Duration = Duration::from_secs(10);

/// `cmd` run under a reaper, `exe` (this binary: /proc/self/exe runs it
/// even when its file was replaced): the same program, arguments,
/// environment and working directory. `clear_env` says that `cmd`'s
/// environment is only what it sets (`Command::env_clear`, which a Command
/// does not tell).
pub fn contain(cmd: &Command, exe: &std::path::Path, clear_env: bool) -> std::io::Result<Command> {
    let mut c = Command::new(exe);
    if clear_env {
        c.env_clear();
    }
    c.arg0("rdna1-patch-reaper")
        .env(REAPER_ENV, "1")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        c.current_dir(dir);
    }
    // The reaper runs only with the proof that this binary started it.
    crate::spawned::pass(&mut c)?;
    Ok(c)
}

/// The reaper: run the program given as arguments, then leave nothing of
/// it behind.
pub fn serve() -> ExitCode {
    use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        eprintln!("rdna1-patch: cannot become a child subreaper");
        return ExitCode::from(125);
    }
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGCHLD, SIGTERM, SIGINT, SIGHUP])
    else {
        return ExitCode::from(125);
    };
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        return ExitCode::from(125);
    };
    let mut cmd = Command::new(&program);
    cmd.args(args).env_remove(REAPER_ENV);
    // The program may be the compile child, which runs only with the
    // proof that this binary (the reaper) started it.
    if crate::spawned::pass(&mut cmd).is_err() {
        return ExitCode::from(125);
    }
    let child = match cmd.spawn() {
        Ok(c) => c.id() as i32,
        Err(e) => {
            eprintln!("rdna1-patch: cannot run {}: {e}", program.to_string_lossy());
            return ExitCode::from(127);
        }
    };
    for sig in signals.forever() {
        if sig != SIGCHLD {
            sweep();
            return ExitCode::from(128 + sig as u8);
        }
        if let Some(status) = reap(child) {
            sweep();
            return end_as(status);
        }
    }
    ExitCode::from(125)
}

/// Reap every child that has ended; the program's wait status once it has.
fn reap(program: i32) -> Option<i32> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own children, WNOHANG, a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == program {
            found = Some(status);
        }
    }
}

/// Kill every descendant, round after round, until none is left (or the
/// sweep's limit is past), reaping them as they go.
fn sweep() {
    let me = std::process::id() as i32;
    let start = Instant::now();
    while start.elapsed() < SWEEP_LIMIT {
        let left = descendants(me);
        if left.is_empty() {
            return;
        }
        for pid in left {
            // SAFETY: kill(2) of a descendant of ours; no memory involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        reap(-1);
        std::thread::sleep(Duration::from_millis(5));
        reap(-1);
    }
}

/// A process as /proc/PID/stat says it is.
pub struct Process {
    pub pid: i32,
    pub state: String,
    pub ppid: i32,
    pub session: i32,
}

/// Every process /proc shows (those that end while it is read are left
/// out).
pub fn processes() -> Vec<Process> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp session ...: comm may hold spaces and
        // parentheses, so count from the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().take(4).collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<i32>().ok());
        if let (Some(state), Some(ppid), Some(session)) = (f.first(), num(1), num(3)) {
            out.push(Process {
                pid,
                state: (*state).to_owned(),
                ppid,
                session,
            });
        }
    }
    out
}

/// Every process below `root`.
pub fn descendants(root: i32) -> Vec<i32> {
    let all = processes();
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for c in all.iter().filter(|c| c.ppid == p) {
            if !out.contains(&c.pid) {
                out.push(c.pid);
                todo.push(c.pid);
            }
        }
    }
    out
}

/// End as the program did: its exit code, or the signal that ended it.
fn end_as(status: i32) -> ExitCode {
    if libc::WIFEXITED(status) {
        return ExitCode::from(libc::WEXITSTATUS(status) as u8);
    }
    let sig = libc::WTERMSIG(status);
    // SAFETY: restore the default action and raise the same signal, so the
    // parent sees the program's death, not an exit code standing for it.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
    }
    ExitCode::from(128 + sig as u8)
}
