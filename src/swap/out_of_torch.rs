//! The rollback operation (`rollback`, `--list`, `--abandon`): settle what a
//! kill left, then undo installed transactions newest first, over `txn`.

use anyhow::Result;

use crate::swap::txn::{self, Journal, Rolled, StateDir};
use crate::torch::Locator;
use crate::ui::Ui;

/// What `rollback` was asked to do.
pub enum RollbackRequest {
    /// Every transaction and its state; nothing changes.
    List,
    /// Close one transaction without touching torch.
    Abandon(u32),
    /// Undo installed transactions from the newest down to `to` (or the
    /// newest alone); when the user `named` the torch, that torch's alone.
    /// Else `torch` is looked at only when nothing is installed, to tell a
    /// clean torch from one another state dir patched.
    Undo {
        to: Option<u32>,
        torch: Locator,
        named: bool,
    },
}

/// Carry out `req`; what `--list` shows is returned, one line a
/// transaction, for the caller to print.
pub fn run(state: &StateDir, req: &RollbackRequest, ui: &Ui) -> Result<Vec<String>> {
    let (to, torch, named) = match req {
        RollbackRequest::List => return list(state, ui),
        RollbackRequest::Abandon(_) => (None, None, false),
        RollbackRequest::Undo { to, torch, named } => (*to, Some(torch), *named),
    };
    // A torch the user named picks the transactions undone.
    let only = match torch.filter(|_| named) {
        Some(loc) => Some(crate::torch::find_dir(loc)?),
        None => None,
    };
    let only = only.map(|d| d.canonicalize().unwrap_or(d));
    let locked = state.lock()?;
    let recovery = txn::recover(&locked)?;
    for note in &recovery.notes {
        ui.stage("Recovered", note);
    }
    if let RollbackRequest::Abandon(id) = req {
        let j = txn::abandon(&locked, *id)?;
        ui.stage(
            "Abandoned",
            format!(
                "transaction {} ({} was left as it is; the original stays in {})",
                j.id,
                j.torch.target.display(),
                j.backup.display()
            ),
        );
        return Ok(Vec::new());
    }
    let mut notes = Vec::new();
    let rolled = txn::rollback(&locked, to, only.as_deref(), &mut notes);
    for note in notes {
        ui.stage("Closed", note);
    }
    match rolled? {
        Rolled::Nothing(last) => nothing(state, torch, last.as_deref(), ui)?,
        Rolled::Done(done) => {
            for (j, already) in done {
                restored(&j, already, ui);
            }
            if let Some(torch) = torch {
                crate::swap::kernel_cache::after_swap(torch, ui);
            }
        }
    }
    Ok(Vec::new())
}

fn restored(j: &txn::Journal, already: bool, ui: &Ui) {
    if let Some(s) = &j.system {
        let hip = match &s.edit {
            Some(_) => format!(
                ", {} is the original again (MD5 {})",
                s.hip.display(),
                j.original.md5
            ),
            None => String::new(),
        };
        let copy = match &j.set {
            Some(set) => format!(
                "the rocBLAS copy {} and {}",
                j.torch.target.display(),
                set.dir.display()
            ),
            None => format!("the fixed copy {}", j.torch.target.display()),
        };
        return ui.stage(
            "Restored",
            format!(
                "transaction {}: took {copy} out{hip}; torch loads the system's {} again{}",
                j.id,
                s.library.display(),
                if already { " (it already did)" } else { "" }
            ),
        );
    }
    let how = match (already, &j.set) {
        (true, _) => "the original was already in place",
        (false, None) => "copied back from the backup",
        (false, Some(_)) => "copied back from the backups",
    };
    if let Some(set) = &j.set {
        let dir = match &set.original {
            Some(t) => format!(
                "{} holds torch's own {} file(s) again",
                set.dir.display(),
                t.files
            ),
            None => format!("{} is gone again, as torch had none", set.dir.display()),
        };
        return ui.stage(
            "Restored",
            format!(
                "transaction {}: {} is the original again (MD5 {}) and {dir}, {how}",
                j.id,
                j.torch.target.display(),
                j.original.md5
            ),
        );
    }
    ui.stage(
        "Restored",
        format!(
            "transaction {}: {} is the original again (MD5 {}), {how}",
            j.id,
            j.torch.target.display(),
            j.original.md5
        ),
    );
}

/// `--list`: every transaction; the journals that cannot be read are warned
/// about.
fn list(state: &StateDir, ui: &Ui) -> Result<Vec<String>> {
    let all = state.read()?;
    for d in &all.damaged {
        ui.warn(format!("{} is damaged: {}", d.path.display(), d.error));
    }
    if all.list.is_empty() {
        return Ok(vec![format!(
            "no transactions in {}",
            state.root().display()
        )]);
    }
    Ok(all.list.iter().map(Journal::describe).collect())
}

/// Nothing installed here. That does not mean torch is clean: the state dir
/// that installed it may be gone, or another one was used.
fn nothing(
    state: &StateDir,
    torch: Option<&Locator>,
    last: Option<&txn::Journal>,
    ui: &Ui,
) -> Result<()> {
    let found = torch.map(crate::torch::locate);
    if let (None, Some(Err(e))) = (last, &found) {
        // No record at all, and no torch to look at: "nothing to roll back"
        // would be a guess, and wrong if another state dir patched torch.
        return Err(crate::error::hint(
            format!(
                "no transactions in {}, and no torch to check whether it holds an rdna1-patch build: {e:#}",
                state.root().display()
            ),
            "name the torch with --python PATH or --torch-dir DIR, and the state dir that installed into it with --state-dir DIR; nothing was changed",
        ));
    }
    if let Some(Ok(torch)) = found
        && txn::is_patched(&torch.target)
    {
        return Err(crate::error::hint(
            format!(
                "{} is an rdna1-patch build, but no transaction in {} installed it, so there is no original here to put back",
                torch.target.display(),
                state.root().display()
            ),
            format!(
                "if another --state-dir installed it, run `rdna1-patch rollback --state-dir DIR` with that one; if that state is lost, `pip install --force-reinstall torch=={}` (from the index you installed it from) brings torch's own library back",
                torch.version
            ),
        ));
    }
    let what = match last {
        Some(j) => format!(
            "nothing to roll back: no transaction is installed (the last, {}, is {} since {})",
            j.id,
            j.state.name(),
            j.updated
        ),
        None => format!(
            "nothing to roll back: no transactions in {}",
            state.root().display()
        ),
    };
    ui.stage("Rollback", what);
    Ok(())
}
