use std::process::ExitCode;

use anyhow::Result;

use super::{StateArg, TorchArg};
use crate::inspect::status::describe;
use crate::swap::txn::{self, Rolled};
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    state: StateArg,
    /// Show every transaction and its state, change nothing
    #[arg(long, conflicts_with_all = ["to", "abandon"])]
    list: bool,
    /// Undo every installed transaction from the newest down to this one
    #[arg(long, value_name = "ID")]
    to: Option<u32>,
    /// Close a transaction whose library something else has replaced (e.g. a
    /// reinstalled torch), without touching torch
    #[arg(long, value_name = "ID", conflicts_with = "to")]
    abandon: Option<u32>,
    /// With nothing to roll back: the torch to check for a build that no
    /// transaction here recorded
    #[command(flatten)]
    torch: TorchArg,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let term = super::term::Term::new();
    let ui = Ui::new(&term);
    let state = args.state.open()?;
    if args.list {
        return list(&state, &ui);
    }
    let locked = state.lock()?;
    let recovery = txn::recover(&locked)?;
    for note in &recovery.notes {
        ui.stage("Recovered", note);
    }
    if let Some(id) = args.abandon {
        let j = txn::abandon(&locked, id)?;
        ui.stage(
            "Abandoned",
            format!(
                "transaction {} ({} was left as it is; the original stays in {})",
                j.id,
                j.torch.target.display(),
                j.backup.display()
            ),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut notes = Vec::new();
    let rolled = txn::rollback(&locked, args.to, &mut notes);
    for note in notes {
        ui.stage("Closed", note);
    }
    match rolled? {
        Rolled::Nothing(last) => nothing(&state, &args.torch, last.as_deref(), &ui)?,
        Rolled::Done(done) => {
            for (j, already) in done {
                let how = if already {
                    "the original was already in place"
                } else {
                    "copied back from the backup"
                };
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
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--list`: every transaction, and the journals that cannot be read.
fn list(state: &txn::StateDir, ui: &Ui) -> Result<ExitCode> {
    let all = state.read()?;
    for d in &all.damaged {
        ui.warn(format!("{} is damaged: {}", d.path.display(), d.error));
    }
    if all.list.is_empty() {
        crate::outln!("no transactions in {}", state.root().display());
    }
    for j in &all.list {
        crate::outln!("{}", describe(j));
    }
    Ok(ExitCode::SUCCESS)
}

/// Nothing installed here. That does not mean torch is clean: the state dir
/// that installed it may be gone, or another one was used.
fn nothing(
    state: &txn::StateDir,
    torch: &TorchArg,
    last: Option<&txn::Journal>,
    ui: &Ui,
) -> Result<()> {
    if let Ok(torch) = crate::swap::torch::locate(&torch.locator())
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
