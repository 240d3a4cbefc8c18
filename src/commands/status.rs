use std::process::ExitCode;

use anyhow::Result;

use super::{PrefixArg, StateArg};
use crate::inspect::status;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    prefix: PrefixArg,
    #[command(flatten)]
    state: StateArg,
    /// Print the report as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let state = args.state.open()?;
    let report = status::report(&args.prefix.resolve_installed(&state)?, &state)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        crate::outln!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}
