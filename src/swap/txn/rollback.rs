//! Undoing swaps: newest first, each from its verified backup.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::checksum;
use crate::error::hint;
use crate::fsutil;

use super::install::{ensure_root_may_change, library_out_of_space};
use super::journal::{Journal, State, check_backup};
use super::recover::{Found, changed_elsewhere, linked_to_prefix};
use super::state::Locked;

/// What is at a transaction's files now, for either route.
pub(super) fn found(j: &Journal, all: &[Journal]) -> Found {
    if j.set.is_some() && j.system.is_none() {
        use super::set::Found as S;
        return match super::set::found(j, all) {
            S::Original => Found::Original,
            S::New => Found::New,
            S::Earlier(p) => Found::Earlier(p),
            S::HalfIn | S::HalfOut => {
                Found::Other("half of one rocBLAS set, half of another".into())
            }
            S::Gone => Found::Gone,
            S::Other(what) => Found::Other(what),
        };
    }
    if let Some(s) = &j.system {
        use super::system::Found as S;
        return match super::system::found(j, s) {
            S::Original => Found::Original,
            S::New => Found::New,
            S::Partial => {
                Found::Other("the fixed copy is there, libtorch_hip.so is as it was".into())
            }
            S::Gone => Found::Gone,
            S::Other(what) => Found::Other(what),
        };
    }
    super::recover::found(j, all)
}

/// What a rollback did.
pub enum Rolled {
    /// Each transaction rolled back, newest first, and whether its original
    /// was already in place.
    Done(Vec<(Journal, bool)>),
    /// Nothing installed; the last transaction, if any.
    Nothing(Option<Box<Journal>>),
}

/// Roll back the newest installed transaction, or with `to`, every one from
/// the newest down to `to`; with `torch` (its package dir), only that
/// torch's. Transactions whose torch is gone are closed on the way (their
/// notes go to `notes`).
pub fn rollback(
    locked: &Locked,
    to: Option<u32>,
    torch: Option<&Path>,
    notes: &mut Vec<String>,
) -> Result<Rolled> {
    let all = locked.journals()?.list;
    for j in all.iter().filter(|j| live(j, torch)) {
        if found(j, &all) == Found::Gone {
            let mut j = j.clone();
            locked.set(&mut j, State::Abandoned)?;
            notes.push(format!(
                "transaction {}: {} is gone, so it is closed; the original stays in {}",
                j.id,
                j.torch.target.display(),
                j.backup.display()
            ));
        }
    }
    let journals = locked.journals()?.list;
    let chosen = choose(&journals, to, torch)?;
    if chosen.is_empty() {
        let last = journals.iter().rev().find(|j| mine(j, torch));
        return Ok(Rolled::Nothing(last.cloned().map(Box::new)));
    }
    // Lock every torch concerned, and check every backup, before changing anything.
    let mut held = Vec::new();
    // A set's backup as it was read and checked, for its undo.
    let mut checked = std::collections::HashMap::new();
    for j in &chosen {
        // One lock per directory: a second flock on it from this process
        // would conflict with the first.
        let dir = j.torch.target.parent().map(Path::to_owned);
        if !held.iter().any(|(d, _)| *d == dir) {
            held.push((dir, locked.lock_target(&j.torch.target)?));
        }
        if found(j, &journals) != Found::Original {
            ensure_root_may_change(&j.torch.target)?;
            match (&j.system, &j.set) {
                (Some(_), _) => super::system::check_needs(j)?,
                (None, Some(_)) => {
                    if let Some(entries) = super::set::check_backups(locked, j)? {
                        checked.insert(j.id, entries);
                    }
                }
                (None, None) => check_backup(j)?,
            }
        }
    }
    let mut done = Vec::new();
    for id in chosen.iter().map(|j| j.id) {
        // Re-read: undoing a later transaction may have settled this one.
        let all = locked.journals()?.list;
        let Some(mut j) = all.iter().find(|j| j.id == id).cloned() else {
            continue;
        };
        if !live(&j, torch) {
            continue;
        }
        let already = undo(locked, &mut j, &all, checked.remove(&id))?;
        let inherited = j.inherits;
        done.push((j, already));
        // Its original is the one the transaction it replaced kept.
        if let Some(mut p) = inherited.and_then(|prev| {
            all.iter()
                // Installed too: a run killed before it marked `prev`
                // replaced; either way `prev`'s original is back now.
                .find(|p| p.id == prev && matches!(p.state, State::Replaced | State::Installed))
                .cloned()
        }) {
            locked.set(&mut p, State::RolledBack)?;
            done.push((p, true));
        }
    }
    Ok(Rolled::Done(done))
}

/// The transactions to undo, newest first: from the newest down to `to`,
/// or the newest installed; with `torch`, that torch's alone. None: nothing
/// is installed.
fn choose(journals: &[Journal], to: Option<u32>, torch: Option<&Path>) -> Result<Vec<Journal>> {
    let Some(id) = to else {
        return Ok(journals
            .iter()
            .rev()
            .find(|j| j.state == State::Installed && mine(j, torch))
            .cloned()
            .into_iter()
            .collect());
    };
    // "ID and later", as uninstall's first line uses it: with nothing
    // there, or all of it undone already, there is nothing to do (exit 0,
    // said), as `rollback` alone says; an ID no transaction has is an
    // error (a typo would undo more than meant).
    let newest = journals.iter().map(|j| j.id).max();
    if let Some(n) = newest
        && !journals.iter().any(|j| j.id == id)
    {
        return Err(hint(
            format!("there is no transaction {id}: the newest is {n}"),
            "`rdna1-patch rollback --list` shows them",
        ));
    }
    if let Some(j) = journals.iter().find(|j| j.id == id)
        && !mine(j, torch)
    {
        return Err(hint(
            format!(
                "transaction {id} is of the torch at {}, not of the one you named",
                j.torch.dir.display()
            ),
            "`rdna1-patch rollback --list` shows which torch each transaction is of; name that torch, or leave out --python and --torch-dir",
        ));
    }
    Ok(journals
        .iter()
        .rev()
        .filter(|j| live(j, torch) && j.id >= id)
        .cloned()
        .collect())
}

/// Whether `j` is of `torch` (any, with none named).
fn mine(j: &Journal, torch: Option<&Path>) -> bool {
    torch.is_none_or(|t| j.torch.dir == t)
}

/// Whether `j`'s library may still be in `torch`: there to undo.
fn live(j: &Journal, torch: Option<&Path>) -> bool {
    matches!(j.state, State::Installed | State::Replaced) && mine(j, torch)
}

/// Put `j`'s original back; true when it already was. `checked`: a set's
/// backup as `rollback` read it.
pub(super) fn undo(
    locked: &Locked,
    j: &mut Journal,
    all: &[Journal],
    checked: Option<Vec<super::tree::Entry>>,
) -> Result<bool> {
    if j.system.is_some() {
        return super::system::undo(locked, j);
    }
    // One match for both routes that keep what torch held in a backup:
    // torch's library, and rocBLAS's set (whose halves `found` names).
    let theirs = if j.set.is_some() { "set" } else { "build" };
    match found(j, all) {
        Found::Original => {
            locked.set(j, State::RolledBack)?;
            return Ok(true);
        }
        Found::New => {}
        Found::Earlier(p) => {
            let what = format!("the {theirs} of transaction {p}");
            return Err(changed_elsewhere(j, &what));
        }
        Found::Gone => return Err(changed_elsewhere(j, "gone")),
        // Edited through the prefix it shares an inode with: still ours
        // to undo, from the backup of torch's original.
        Found::Other(_) if j.set.is_none() && linked_to_prefix(j) => {}
        Found::Other(what) => return Err(changed_elsewhere(j, &what)),
    }
    // The target must still be what torch loads: a journal edited to point
    // elsewhere is not followed.
    if j.library().canonicalize().ok().as_ref() != Some(&j.torch.target) {
        return Err(hint(
            format!(
                "{} no longer leads to {}, which transaction {} changed; nothing was changed",
                j.library().display(),
                j.torch.target.display(),
                j.id
            ),
            format!(
                "if torch was reinstalled, `{}` closes the transaction; the original stays in {}",
                crate::shell::tool(["rollback", "--abandon", &j.id.to_string()]),
                j.backup.display()
            ),
        ));
    }
    if j.set.is_some() {
        return super::set::undo(locked, j, checked);
    }
    // `rollback` checked the backup before changing anything; what is
    // checked here is the copy about to take the library's name.
    let dir = j.torch.target.parent().unwrap_or(Path::new("/")).to_owned();
    let temp = j.temp(true);
    locked.set(j, State::RollingBack)?;
    crash_point!("rollback-begun");
    let copied = fsutil::copy_synced(&j.backup, &temp, j.original.mode)
        .and_then(|()| checksum::md5_file(&temp));
    let copy = match copied {
        Ok(m) => m,
        Err(e) => {
            let _ = fsutil::remove_own_file(&temp);
            locked.set(j, State::Installed)?;
            return Err(library_out_of_space(e, &dir, "torch was not changed"));
        }
    };
    if copy != j.original.md5 {
        let _ = fsutil::remove_own_file(&temp);
        locked.set(j, State::Installed)?;
        bail!(
            "the copy of the backup {} reads back as MD5 {copy}, not {}; torch was not changed",
            j.backup.display(),
            j.original.md5
        );
    }
    crash_point!("rollback-temp-written");
    fsutil::rename_in_dir(&temp, &j.torch.target).with_context(|| {
        format!(
            "cannot rename {} to {}",
            temp.display(),
            j.torch.target.display()
        )
    })?;
    fsutil::sync_dir(&dir)?;
    crash_point!("rollback-renamed");
    super::journal::read_back_original(j)?;
    locked.set(j, State::RolledBack)?;
    Ok(false)
}

/// Close a transaction without touching torch: one whose library something
/// else replaced, or whose torch is gone. Works whatever state the
/// transaction was left in, unless our library is still in place.
pub fn abandon(locked: &Locked, id: u32) -> Result<Journal> {
    let all = locked.journals()?.list;
    let mut j = all.iter().find(|j| j.id == id).cloned().ok_or_else(|| {
        hint(
            format!("there is no transaction {id}"),
            "`rdna1-patch rollback --list` shows them",
        )
    })?;
    if matches!(
        j.state,
        State::RolledBack | State::Aborted | State::Abandoned
    ) {
        bail!("transaction {id} is {} already", j.state.name());
    }
    if found(&j, &all) == Found::New {
        return Err(hint(
            format!(
                "the library transaction {id} installed is still in {}",
                j.torch.target.display()
            ),
            "use `rdna1-patch rollback` to put the original back",
        ));
    }
    j.remove_temps();
    locked.set(&mut j, State::Abandoned)?;
    Ok(j)
}
