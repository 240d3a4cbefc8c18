//! The command line: parse, dispatch, print the error once.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;

#[derive(Parser)]
#[command(
    name = "rdna1-patch",
    version,
    about = "Build a patched MIOpen for AMD RDNA1 GPUs (gfx1010/1011/1012) and swap it into PyTorch, reversibly",
    after_help = crate::error::EXIT_STATUS_HELP,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fetch, patch, configure, build and install a component (today: miopen)
    Build(commands::build::Args),
    /// Swap the built library into torch (journaled; `rollback` undoes it)
    Install(commands::install::Args),
    /// Put torch's original library back
    Rollback(commands::rollback::Args),
    /// What is built, what is installed where, and open transactions
    Status(commands::status::Args),
    /// Prove what is installed, loaded and linked (exit 1 if any check fails)
    Verify(commands::verify::Args),
    /// Check this machine before a build: tools, ROCm, GPU, disk
    Doctor(commands::doctor::Args),
    /// Work on patch series: list, check against a tree, refresh from a tree
    #[command(subcommand)]
    Patches(commands::patches::PatchesCommand),
    /// Show the built-in profiles
    #[command(subcommand)]
    Profiles(commands::profiles::ProfilesCommand),
}

pub fn main() -> ExitCode {
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    crate::interrupt::install();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(args) => commands::build::run(args),
        Command::Install(args) => commands::install::run(args),
        Command::Rollback(args) => commands::rollback::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Patches(cmd) => commands::patches::run(cmd),
        Command::Profiles(cmd) => commands::profiles::run(cmd),
    };
    // A command that reports errors as data (doctor, verify) still ends
    // with the signal's status when a signal stopped one of its programs.
    let result = match (result, crate::interrupt::interrupted()) {
        (Ok(_), Some(sig)) => Err(crate::interrupt::stopped("rdna1-patch", sig)),
        (result, _) => result,
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            crate::output::error(&err);
            ExitCode::from(crate::error::exit_code(&err))
        }
    }
}
