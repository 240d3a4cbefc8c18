//! Settling what a killed run left: each unfinished journal against what is
//! at its target now.

use std::path::Path;

use anyhow::Result;

use crate::checksum;
use crate::error::hint;

use super::journal::{Journal, State};
use super::state::Locked;

/// What is at a transaction's target now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    Original,
    New,
    /// Another transaction's library: the build this one was installing
    /// over, still in place.
    Earlier(u32),
    /// Torch, or its library, is no longer there.
    Gone,
    Other(String),
}

pub(super) fn found(j: &Journal, all: &[Journal]) -> Found {
    if !j.torch.dir.join("version.py").is_file() || !j.torch.target.exists() {
        return Found::Gone;
    }
    match checksum::md5_file(&j.torch.target) {
        Ok(m) if m == j.original.md5 => Found::Original,
        Ok(m) if m == j.new.md5 => Found::New,
        Ok(m) => match all
            .iter()
            .find(|p| p.id != j.id && p.torch.target == j.torch.target && p.new.md5 == m)
        {
            Some(p) => Found::Earlier(p.id),
            None => Found::Other(format!("MD5 {m}")),
        },
        Err(e) => Found::Other(format!("{e:#}")),
    }
}

/// Whether torch's library is still the same file as the prefix's (a
/// linked install), so a change to one was a change to both: someone
/// edited the prefix's library (patchelf, a rebuild in place).
pub fn linked_to_prefix(j: &Journal) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    matches!((id(&j.torch.target), id(&j.build.library)), (Ok(a), Ok(b)) if a == b)
}

pub(super) fn changed_elsewhere(j: &Journal, what: &str) -> anyhow::Error {
    hint(
        format!(
            "{} ({what}) is neither the original (MD5 {}) nor the library transaction {} installed (MD5 {}): something else changed it, perhaps a pip install",
            j.torch.target.display(),
            j.original.md5,
            j.id,
            j.new.md5
        ),
        format!(
            "rdna1-patch does not overwrite a file it did not put there. If torch was reinstalled, its own library is back and `{}` closes the transaction without touching torch; the original stays in {}",
            crate::shell::tool(["rollback", "--abandon", &j.id.to_string()]),
            j.backup.display()
        ),
    )
}

/// What [`recover`] found.
#[derive(Default)]
pub struct Recovery {
    /// One line per transaction settled.
    pub notes: Vec<String>,
    /// Unfinished transactions whose target holds a file no transaction
    /// wrote: left open, for the user to decide (`--abandon`).
    pub unsettled: Vec<(Journal, String)>,
}

impl Recovery {
    /// Refuse to change `target` while a transaction on it is unsettled.
    pub fn check_target(&self, target: &Path) -> Result<()> {
        match self
            .unsettled
            .iter()
            .find(|(j, _)| j.torch.target == target)
        {
            Some((j, what)) => Err(changed_elsewhere(j, what)),
            None => Ok(()),
        }
    }
}

/// Settle the swaps a killed run left open, from what is on disk.
pub(super) fn recover_swaps(locked: &Locked) -> Result<Recovery> {
    let mut out = Recovery::default();
    repair_chains(locked, &mut out.notes)?;
    let all = locked.journals()?.list;
    for j in all.iter().filter(|j| j.state.unfinished()) {
        let mut j = j.clone();
        if j.system.is_some() || j.set.is_some() {
            // Settled by `txn::recover`, which knows the system route and
            // rocBLAS's sets.
            continue;
        }
        j.remove_temps();
        let was = j.state;
        let note = match (was, found(&j, &all)) {
            (_, Found::Gone) => {
                locked.set(&mut j, State::Abandoned)?;
                format!(
                    "transaction {} was interrupted ({}) and {} is gone now, so it is closed; the original stays in {}",
                    j.id,
                    was.name(),
                    j.torch.target.display(),
                    j.backup.display()
                )
            }
            (State::RollingBack, Found::Original) => {
                locked.set(&mut j, State::RolledBack)?;
                format!(
                    "transaction {} was interrupted while rolling back; the original was already back, so it is now rolled back",
                    j.id
                )
            }
            (State::RollingBack, Found::New) => {
                locked.set(&mut j, State::Installed)?;
                format!(
                    "transaction {} was interrupted while rolling back, before the original went back; it is installed again",
                    j.id
                )
            }
            (_, Found::New) => {
                locked.set(&mut j, State::Installed)?;
                supersede(locked, &j)?;
                format!(
                    "transaction {} was interrupted after the swap; the new library is in place and checked, so it is now installed",
                    j.id
                )
            }
            (_, Found::Original) => {
                locked.set(&mut j, State::Aborted)?;
                format!(
                    "transaction {} was interrupted before the swap ({}); torch's original was never changed, so it is now aborted",
                    j.id,
                    was.name()
                )
            }
            (State::Begun | State::BackedUp | State::Swapping, Found::Earlier(p)) => {
                locked.set(&mut j, State::Aborted)?;
                format!(
                    "transaction {} was interrupted before the swap ({}); torch still holds the build of transaction {p}, so it is now aborted",
                    j.id,
                    was.name()
                )
            }
            (_, Found::Earlier(p)) => {
                out.unsettled
                    .push((j.clone(), format!("the build of transaction {p}")));
                continue;
            }
            (_, Found::Other(what)) => {
                out.unsettled.push((j.clone(), what));
                continue;
            }
        };
        out.notes.push(note);
    }
    Ok(out)
}

/// Finish the bookkeeping between two transactions that a kill cut short.
pub(super) fn repair_chains(locked: &Locked, notes: &mut Vec<String>) -> Result<()> {
    // A run killed between "installed" and marking the transaction it went
    // over as replaced: finish that step.
    let all = locked.journals()?.list;
    for j in all.iter().filter(|j| j.state == State::Installed) {
        if let Some(p) = j.inherits.and_then(|prev| {
            all.iter()
                .find(|p| p.id == prev && p.state == State::Installed)
        }) {
            supersede(locked, j)?;
            notes.push(format!(
                "transaction {} went over transaction {} before a run was stopped; {} is now replaced",
                j.id, p.id, p.id
            ));
        }
    }
    // And one killed between rolling back a transaction and marking the
    // one it had replaced: that one's original is back too.
    for j in all.iter().filter(|j| j.state == State::RolledBack) {
        if let Some(mut p) = j
            .inherits
            .and_then(|prev| {
                all.iter()
                    .find(|p| p.id == prev && p.state == State::Replaced)
            })
            .cloned()
        {
            locked.set(&mut p, State::RolledBack)?;
            notes.push(format!(
                "transaction {} was rolled back before a run was stopped; transaction {} it had replaced is rolled back too",
                j.id, p.id
            ));
        }
    }
    Ok(())
}

/// Mark the transaction `j` inherited from as replaced by it.
pub(super) fn supersede(locked: &Locked, j: &Journal) -> Result<()> {
    let Some(prev) = j.inherits else {
        return Ok(());
    };
    for mut p in locked.journals()?.list {
        if p.id == prev && p.state == State::Installed {
            locked.set(&mut p, State::Replaced)?;
        }
    }
    Ok(())
}
