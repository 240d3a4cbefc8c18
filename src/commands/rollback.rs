use std::process::ExitCode;

use anyhow::Result;

use super::StateArg;
use crate::status::describe;
use crate::txn::{self, Rolled};
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
}

pub fn run(args: Args) -> Result<ExitCode> {
    let ui = Ui::new();
    let state = args.state.open()?;
    if args.list {
        let journals = state.journals()?;
        if journals.is_empty() {
            println!("no transactions in {}", state.root().display());
        }
        for j in &journals {
            println!("{}", describe(j));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let locked = state.lock()?;
    for note in txn::recover(&locked)? {
        ui.stage("Recovered", note);
    }
    if let Some(id) = args.abandon {
        let j = txn::abandon(&locked, id)?;
        ui.stage(
            "Abandoned",
            format!(
                "transaction {} ({} was left as it is)",
                j.id,
                j.torch.target.display()
            ),
        );
        return Ok(ExitCode::SUCCESS);
    }
    match txn::rollback(&locked, args.to)? {
        Rolled::Nothing(last) => match last {
            Some(j) => ui.stage(
                "Rollback",
                format!(
                    "nothing to roll back: no transaction is installed (the last, {}, is {} since {})",
                    j.id,
                    j.state.name(),
                    j.updated
                ),
            ),
            None => ui.stage(
                "Rollback",
                format!("nothing to roll back: no transactions in {}", state.root().display()),
            ),
        },
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
