use std::process::ExitCode;

use anyhow::Result;

use super::{StateArg, TorchArg};
use crate::swap::out_of_torch::{self, RollbackRequest};
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    state: StateArg,
    /// Show every transaction and its state, change nothing
    #[arg(long, conflicts_with_all = ["to", "abandon"])]
    list: bool,
    /// With --list: print the transactions as JSON
    #[arg(long, requires = "list")]
    pub(crate) json: bool,
    /// Undo every installed transaction from the newest down to this one
    #[arg(long, value_name = "ID")]
    to: Option<u32>,
    /// Close a transaction whose library something else has replaced (e.g. a
    /// reinstalled torch), without touching torch
    #[arg(long, value_name = "ID", conflicts_with = "to")]
    abandon: Option<u32>,
    /// The torch whose transactions are undone (default: the newest
    /// transaction here, whichever torch it is of); with nothing to roll
    /// back, the torch to check for a build no transaction here recorded
    #[command(flatten)]
    torch: TorchArg,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let state = args.state.open()?;
    if args.json {
        let doc = crate::inspect::status::transactions_json(&state)?;
        crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    let req = if args.list {
        RollbackRequest::List
    } else if let Some(id) = args.abandon {
        RollbackRequest::Abandon(id)
    } else {
        RollbackRequest::Undo {
            to: args.to,
            torch: args.torch.locator()?,
            named: args.torch.given(),
        }
    };
    let term = super::term::Term::new();
    for line in out_of_torch::run(&state, &req, &Ui::new(&term))? {
        // A transaction's row one glance long, as the stages are.
        crate::outln!("{}", super::term::glance(&line, "      "));
    }
    Ok(ExitCode::SUCCESS)
}
