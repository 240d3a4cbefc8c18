//! Ctrl-C handling for long child processes.
//!
//! Builds run in their own process group so that one signal reaches ninja and
//! every compiler below it, even when only our pid was signalled (`kill -INT`).
//! A signal handler is process-wide by nature, so the current child group is
//! the one piece of global state in the crate, kept behind this module.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static CHILD_GROUP: AtomicI32 = AtomicI32::new(0);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

fn install() {
    INSTALL.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            INTERRUPTED.store(true, Ordering::SeqCst);
            let group = CHILD_GROUP.load(Ordering::SeqCst);
            if group > 0 {
                // SAFETY: killpg only sends a signal; a stale group id at worst fails with ESRCH.
                unsafe {
                    libc::killpg(group, libc::SIGINT);
                }
            } else {
                // No child to stop: nothing we do between child runs is left
                // half-done by exiting (files are replaced by rename).
                std::process::exit(130);
            }
        });
    });
}

/// While this guard lives, Ctrl-C is forwarded to process group `pgid`.
pub struct ChildGroup(());

impl ChildGroup {
    pub fn new(pgid: u32) -> ChildGroup {
        install();
        CHILD_GROUP.store(pgid as i32, Ordering::SeqCst);
        ChildGroup(())
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        CHILD_GROUP.store(0, Ordering::SeqCst);
    }
}

/// Whether a Ctrl-C arrived while a child group was running.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
