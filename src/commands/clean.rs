use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::StateArg;
use crate::builder::workdir::WorkDir;
use crate::clean::{self, CleanRequest};
use crate::fsutil::human_bytes as human;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Show what would be removed, and how much, removing nothing
    #[arg(long)]
    dry_run: bool,
    /// Logs to keep per component, newest first
    #[arg(long, value_name = "N", default_value_t = 3)]
    keep_logs: usize,
    /// Also remove the checkouts and build dirs of the work dir (the next
    /// build fetches and compiles again; installed prefixes are not touched)
    #[arg(long)]
    builds: bool,
    /// The build cache [default: $XDG_CACHE_HOME/rdna1-patch]
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    #[command(flatten)]
    state: StateArg,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let cleaned = clean::run(&CleanRequest {
        work: WorkDir::new(args.work_dir.as_deref())?,
        state: args.state.open()?,
        keep_logs: args.keep_logs,
        builds: args.builds,
        dry_run: args.dry_run,
    })?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for r in &cleaned.removed {
        crate::outln!(
            "{verb} {} {} ({})",
            r.what,
            r.path.display(),
            human(r.bytes)
        );
    }
    for k in &cleaned.kept {
        crate::outln!("kept {k}");
    }
    crate::outln!(
        "{} {} in {} item(s){}",
        verb,
        human(cleaned.bytes()),
        cleaned.removed.len(),
        if args.dry_run {
            "; nothing was changed"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}
