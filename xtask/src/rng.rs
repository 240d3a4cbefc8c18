//! The killtests' random instants: one generator the torch route's, the
//! system route's and rocBLAS's draw from, below all three; a run killed
//! at one; and the journals as the next run must have left them.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Result, bail};
use rdna1_patch::swap::txn::{Journals, StateDir};

/// xorshift64*: reproducible from the seed it prints, no dependency.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An instant within a run that took `took` unkilled, and a quarter
    /// past it (so some runs finish first).
    pub(crate) fn instant(&mut self, took: Duration) -> Duration {
        Duration::from_micros(self.below(took.as_micros() as u64 * 5 / 4 + 1))
    }
}

/// Run `cmd`, its output discarded, and kill -9 it at `delay` unless it
/// ended first; whether it was killed mid-run.
pub(crate) fn kill_at(cmd: &mut Command, delay: Duration) -> Result<bool> {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
    std::thread::sleep(delay);
    let running = child.try_wait()?.is_none();
    if running {
        child.kill()?; // SIGKILL
    }
    child.wait()?;
    Ok(running)
}

/// The journals of `state` once a run settled them: a damaged one ends
/// the test; one left open is a problem, said with `what` happened.
pub(crate) fn settled(state: &Path, what: &str, problems: &mut Vec<String>) -> Result<Journals> {
    let journals = StateDir::new(Some(state))?.read()?;
    if !journals.damaged.is_empty() {
        bail!("{what}: damaged journals {:?}", journals.damaged);
    }
    if let Some(j) = journals.list.iter().find(|j| j.state.unfinished()) {
        problems.push(format!(
            "{what}: transaction {} left {}",
            j.id,
            j.state.name()
        ));
    }
    Ok(journals)
}

/// Run `cmd` to its end (the run after a kill, which must settle); how
/// long it took, or its stderr when it failed.
pub(crate) fn to_the_end(cmd: &mut Command, what: &str) -> Result<Duration> {
    let start = std::time::Instant::now();
    let out = cmd.output()?;
    if !out.status.success() {
        bail!(
            "{what} after a kill failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(start.elapsed())
}
