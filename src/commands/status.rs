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
    let report = status::report(&args.prefix.resolve()?, &args.state.open()?)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        crate::outln!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}
