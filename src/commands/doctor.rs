use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::{ProfileArg, ReportArgs, StateArg, TorchArg};
use crate::builder::workdir::WorkDir;
use crate::inspect::doctor::{self, DoctorRequest};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    profile: ProfileArg,
    /// The ROCm install to check [default: $ROCM_PATH, else the profile's]
    #[arg(long, value_name = "DIR")]
    rocm: Option<PathBuf>,
    /// Where builds would go [default: $XDG_CACHE_HOME/rdna1-patch]
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    #[command(flatten)]
    torch: TorchArg,
    #[command(flatten)]
    state: StateArg,
    /// Free space a build needs, in GiB
    #[arg(long, default_value_t = 20, value_name = "GIB")]
    need_space: u64,
    /// Show every row, the build's too, whatever the route for this torch
    /// (--rocm shows them as well)
    #[arg(long)]
    all: bool,
    /// Judge torch's batch norm for this RDNA1 target (gfx1010, gfx1011 or
    /// gfx1012) instead of this machine's cards: on a machine with no
    /// RDNA1 card, or none visible, to know what a card would need
    /// (repeat it for more)
    #[arg(long, value_name = "GFX", value_parser = rdna1_target)]
    target: Vec<String>,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
}

/// An RDNA1 target, the only ones batch norm is judged for.
pub(super) fn rdna1_target(s: &str) -> Result<String, String> {
    match crate::verdict::RDNA1.contains(&s) {
        true => Ok(s.to_owned()),
        false => Err(format!(
            "`{s}` is not an RDNA1 target: gfx1010 (RX 5600/5700), gfx1011 (Radeon Pro 5000) or gfx1012 (RX 5500)"
        )),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    // The torch `install` would use: --python, --torch-dir, else python3;
    // looked for once.
    let stack = crate::stack::Stack::establish(args.torch.locator()?, super::sysfs_root())
        .asking(args.target);
    let asked_rocm = args.rocm.is_some();
    let req = DoctorRequest {
        // The profile build and install would take for this torch.
        profile: match args.profile.for_torch(&stack.torch) {
            Ok((p, _)) => p,
            Err(_) => args.profile.load()?,
        },
        rocm: args.rocm.or_else(super::rocm_path_env),
        work_dir: WorkDir::new(args.work_dir.as_deref())?.root().to_owned(),
        stack,
        python: args.torch.python()?,
        // Naming a ROCm is asking about a build.
        all: args.all || asked_rocm,
        gfx_override: std::env::var("HSA_OVERRIDE_GFX_VERSION").ok(),
        need_gib: args.need_space,
        // A fix install made is read from its transactions.
        state: args.state.open().ok(),
    };
    let report = doctor::run(&req);
    // Interrupted, the diagnosis did not finish: no verdict is said.
    if let Some(sig) = crate::interrupt::interrupted() {
        return Err(crate::interrupt::stopped("rdna1-patch", sig));
    }
    super::print_report(&report, &args.report)
}
