//! The swap into torch as a transaction, after rustup's
//! dist/component/transaction.rs, but persisted: each transaction has a
//! journal, written and fsynced before every step, so that a run killed at
//! any point leaves either the original or the new file in place, the next
//! run knows which, and `rollback` works from a later run.
//!
//! ```text
//! <state>/lock                       held while anything here changes
//! <state>/transactions/NNNN.toml     one journal per transaction
//! <state>/backups/<md5>.so           originals, named by their checksum
//! <state>/staging/                   the relinked library before the swap
//! ```
//!
//! Nothing in a journal is trusted to name a file to write or delete: temp
//! files are named from the transaction's id and target, the backup must be
//! `backups/<md5>.so` of this state dir, and the target must be inside the
//! torch the journal names, reached from torch's own library name.

/// A crash point for the tests (cargo feature `failpoints`):
/// `FAILPOINTS=<name>=return` aborts the process there, as kill -9 would,
/// with no destructor or cleanup running.
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            let _ = fail::eval($name, |_| -> () { std::process::abort() });
        }
    };
}

mod install;
mod journal;
mod recover;
mod rollback;
mod set;
mod state;
mod system;
pub mod tree;

pub use install::*;
pub use journal::*;
pub use recover::{Recovery, linked_to_prefix};
pub use rollback::*;
pub use set::{SetSwap, swap as swap_set};
pub use state::*;
pub use system::{AddSystem, add as add_system, source_changed, take_out};

/// Settle transactions a killed run left open, from what is on disk: the
/// swaps, then the system route's.
pub fn recover(locked: &Locked) -> anyhow::Result<Recovery> {
    let mut out = recover::recover_swaps(locked)?;
    let all = locked.journals()?.list;
    for j in all
        .iter()
        .filter(|j| j.state.unfinished() && j.set.is_some() && j.system.is_none())
    {
        let mut j = j.clone();
        match set::recover_one(locked, &mut j, &all)? {
            Some(note) => out.notes.push(note),
            None => {
                let what = match set::found(&j, &all) {
                    set::Found::Other(w) => w,
                    other => format!("{other:?}"),
                };
                out.unsettled.push((j.clone(), what));
            }
        }
    }
    for j in all
        .iter()
        .filter(|j| j.state.unfinished() && j.system.is_some())
    {
        let mut j = j.clone();
        match system::recover_one(locked, &mut j)? {
            Some(note) => out.notes.push(note),
            None => {
                let what = match j.system.as_ref().map(|s| system::found(&j, s)) {
                    Some(system::Found::Other(w)) => w,
                    other => format!("{other:?}"),
                };
                out.unsettled.push((j.clone(), what));
            }
        }
    }
    Ok(out)
}
