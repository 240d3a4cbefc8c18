use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::{PrefixArg, ReportArgs, StateArg, TorchArg};
use crate::inspect::verify::{self, VerifyRequest};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    prefix: PrefixArg,
    #[command(flatten)]
    torch: TorchArg,
    #[command(flatten)]
    state: StateArg,
    /// Also import torch in a subprocess and check what it maps
    #[arg(long)]
    runtime: bool,
    /// Also run a small Conv2d forward+backward on the GPU, if there is one
    #[arg(long)]
    smoke: bool,
    /// Also compile torch's batch-norm kernels for the card through the comgr
    /// torch loads, as MIOpen does at run time (no GPU needed)
    #[arg(long)]
    compile: bool,
    /// With --compile: compile for this target instead of the machine's
    /// RDNA1 cards (repeat it for more, e.g. a gfx1030 control)
    #[arg(long, value_name = "GFX", requires = "compile")]
    compile_for: Vec<String>,
    /// Time limit for --runtime and --smoke, and for each compile of
    /// --compile, in seconds
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    timeout: u64,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let state = args.state.open()?;
    let req = VerifyRequest {
        prefix: args.prefix.resolve_installed(&state)?,
        torch: args.torch.given().then(|| args.torch.locator()),
        python: args
            .torch
            .python
            .clone()
            .unwrap_or_else(|| "python3".into()),
        state,
        runtime: args.runtime,
        smoke: args.smoke,
        timeout: Duration::from_secs(args.timeout),
        sysfs: super::sysfs_root(),
        jobs: crate::checksum::default_jobs(),
        compile: args.compile,
        compile_for: args.compile_for,
    };
    let report = verify::run(&req)?;
    super::print_report(&report, &args.report)
}
