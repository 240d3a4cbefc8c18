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
    /// Also run the battery on the GPU, if there is one: convolutions and
    /// batch norm (and a matmul, nonzero/unique) checked against the CPU,
    /// each case in a process of its own; home is written ~ in the report
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
    /// Time limit for --runtime's import, for each --smoke case and for
    /// each compile of --compile, in seconds; the smoke battery as a whole
    /// stops at 10 times this
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    timeout: u64,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
}

/// The variables that change what ROCm and MIOpen do, as the battery's
/// children inherit them: the report names them.
fn rocm_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            k == "HSA_OVERRIDE_GFX_VERSION"
                || k.ends_with("_VISIBLE_DEVICES")
                || k.starts_with("MIOPEN_")
        })
        .collect()
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
        smoke_device: super::smoke_device(),
        env: rocm_env(),
        timeout: Duration::from_secs(args.timeout),
        sysfs: super::sysfs_root(),
        jobs: crate::checksum::default_jobs(),
        compile: args.compile,
        compile_for: args.compile_for,
    };
    let report = verify::run(&req)?;
    // The battery's report is made to be shared: home is written ~.
    let home = std::env::var("HOME").ok().filter(|_| args.smoke);
    if args.report.json {
        crate::outln!("{}", report.json(home.as_deref()));
    } else {
        let text = report.text(super::term::stdout_width(), home.as_deref());
        crate::outln!("{}", super::painted(&text));
    }
    // Interrupted, the report above is the one document: the signal's
    // status says the rest (cli.rs prints no second, error, document).
    if let Some(sig) = report.interrupted() {
        return Ok(ExitCode::from(crate::error::signal_status(sig)));
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else if report.nothing_checked() {
        ExitCode::from(crate::error::NOTHING_CHECKED)
    } else {
        ExitCode::SUCCESS
    })
}
