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
    if args.state.state_dir.is_some() && state.is_foreign() {
        return Err(crate::error::hint(
            format!(
                "{} is not an rdna1-patch state dir: it holds files, and no transactions, backups or lock",
                state.root().display()
            ),
            "pass the --state-dir that install used, or leave it out for the default ($XDG_STATE_HOME/rdna1-patch)",
        ));
    }
    let report = status::report(&args.prefix.resolve_installed(&state)?, &state)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        let home = std::env::var("HOME").ok();
        crate::outln!(
            "{}",
            report.text_for(crate::output::settings().whole(), home.as_deref())
        );
    }
    // The rule doctor and verify take: rows to exit status.
    Ok(ExitCode::from(report.answer().exit))
}
