//! Ctrl-C, SIGTERM and SIGHUP.
//!
//! Builds run in a session of their own so that one signal reaches ninja and
//! every compiler below it (ninja puts each command in a process group of
//! its own, but they stay in the session), even when only our pid was
//! signalled (`kill -TERM`): the signal is passed on, the build returns, and
//! the error says what stopped it. With no child running the run ends at once, with a
//! message: nothing we do between child runs is left half-done by exiting
//! (files are replaced by rename, the torch swap is journaled), and the
//! idle compile children's directories are removed first. A signal
//! handler is process-wide by nature, so the running child groups (the
//! diagnosis runs a compile child per core) are the one piece of global
//! state in the crate, kept behind this module.

use std::sync::Once;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

static CHILD_GROUPS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
/// Directories a signal that ends the run at once removes first (the
/// compile children's, kept for the whole run).
static LEFT_DIRS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
/// The signal that arrived, 0 if none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static INSTALL: Once = Once::new();
/// How many [`Hold`]s live.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Watch for the signals; called once, first thing in `main`.
pub fn install() {
    INSTALL.call_once(|| {
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        std::thread::spawn(move || {
            for sig in signals.forever() {
                SIGNAL.store(sig, Ordering::SeqCst);
                let groups = CHILD_GROUPS.lock().map(|g| g.clone()).unwrap_or_default();
                for &group in &groups {
                    // SAFETY: killpg only sends a signal; a stale group id at worst fails with ESRCH.
                    unsafe {
                        libc::killpg(group, sig);
                    }
                    // ninja runs each command in a process group of its
                    // own: the session (the build's, which it leads) holds
                    // them all.
                    signal_session(group, sig);
                }
                if groups.is_empty() && HELD.load(Ordering::SeqCst) == 0 {
                    for dir in LEFT_DIRS.lock().map(|d| d.clone()).unwrap_or_default() {
                        // Symlinks are removed, never followed.
                        let _ = std::fs::remove_dir_all(dir);
                    }
                    let err = stopped("rdna1-patch", sig);
                    crate::output::error(&err);
                    std::process::exit(i32::from(crate::error::exit_code(&err)));
                }
            }
        });
    });
}

/// While a `Hold` lives, a signal that arrives with no child running does
/// not end the run at once: the holder reads [`interrupted`] between its
/// steps and ends its work itself, reporting what it did (verify's battery:
/// one report, its status `interrupted`).
pub struct Hold(());

impl Hold {
    pub fn start() -> Hold {
        install();
        HELD.fetch_add(1, Ordering::SeqCst);
        Hold(())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// While this guard lives, a signal is passed on to process group `pgid`.
pub struct ChildGroup(i32);

impl ChildGroup {
    pub fn new(pgid: u32) -> ChildGroup {
        install();
        let pgid = pgid as i32;
        if let Ok(mut g) = CHILD_GROUPS.lock() {
            g.push(pgid);
        }
        ChildGroup(pgid)
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        if let Ok(mut g) = CHILD_GROUPS.lock()
            && let Some(i) = g.iter().position(|p| *p == self.0)
        {
            g.swap_remove(i);
        }
    }
}

/// While this guard lives, a signal that ends the run at once removes
/// directory `0` first: what drops would have removed, had they run.
pub struct RemovedAtExit(std::path::PathBuf);

impl RemovedAtExit {
    pub fn new(dir: &std::path::Path) -> RemovedAtExit {
        install();
        if let Ok(mut d) = LEFT_DIRS.lock() {
            d.push(dir.to_owned());
        }
        RemovedAtExit(dir.to_owned())
    }
}

impl Drop for RemovedAtExit {
    fn drop(&mut self) {
        if let Ok(mut d) = LEFT_DIRS.lock()
            && let Some(i) = d.iter().position(|p| *p == self.0)
        {
            d.swap_remove(i);
        }
    }
}

/// Send `sig` to every process of session `sid` (ours excepted); how many
/// there were.
pub fn signal_session(sid: i32, sig: i32) -> usize {
    let me = std::process::id() as i32;
    let mut n = 0;
    for p in crate::reaper::processes() {
        if p.session == sid && p.pid != me && p.state != "Z" {
            // SAFETY: kill(2) only sends a signal.
            unsafe { libc::kill(p.pid, sig) };
            n += 1;
        }
    }
    n
}

/// The signal that stopped a child group, if one did.
pub fn interrupted() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// The error for `what` (a program, or rdna1-patch itself between steps)
/// stopped by `sig`.
pub fn stopped(what: &str, sig: i32) -> anyhow::Error {
    anyhow::Error::new(crate::error::Interrupted(sig)).context(crate::error::Hint::new(
        format!("{what} was stopped"),
        "nothing was left half-done; run the same command again to finish",
    ))
}
