use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};

use super::ProfileArg;
use crate::pipeline::{self, Stage};
use crate::tools::Generator;
use crate::ui::Ui;
use crate::workdir::WorkDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The component to build
    #[arg(default_value = "miopen")]
    component: String,
    #[command(flatten)]
    profile: ProfileArg,
    /// Cache for sources, build dirs and logs [default: $XDG_CACHE_HOME/rdna1-patch]
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Install here instead of the profile's prefix
    #[arg(long, value_name = "DIR")]
    prefix: Option<PathBuf>,
    /// The ROCm install to build against, instead of the profile's
    #[arg(long, value_name = "DIR")]
    rocm: Option<PathBuf>,
    /// An extra or overriding CMake define
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    define: Vec<String>,
    /// Parallel build jobs [default: number of cores]
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// The generator, instead of the profile's
    #[arg(long, value_parser = ["ninja", "make"])]
    generator: Option<String>,
    /// Compiler launcher [default: the profile's, else ccache when installed]
    #[arg(long, value_enum)]
    launcher: Option<crate::launcher::Kind>,
    /// Stop after this stage
    #[arg(long, value_enum, default_value = "install")]
    stop_after: Stage,
    /// Print what would be done and change nothing
    #[arg(long)]
    dry_run: bool,
    /// Start from a fresh build dir
    #[arg(long)]
    clean: bool,
    /// Fetch the tag again, and accept it if it moved
    #[arg(long)]
    update: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut defines = Vec::new();
    for d in &args.define {
        match d.split_once('=') {
            Some((k, v)) if !k.is_empty() => defines.push((k.to_owned(), v.to_owned())),
            _ => bail!("-D {d}: expected KEY=VALUE"),
        }
    }
    let opts = pipeline::Options {
        profile: args.profile.load()?,
        component: args.component,
        work_dir: WorkDir::new(args.work_dir.as_deref())?,
        prefix: args.prefix,
        rocm: args.rocm,
        defines,
        jobs: args.jobs,
        generator: args.generator.as_deref().and_then(Generator::parse),
        launcher: args.launcher,
        stop_after: args.stop_after,
        dry_run: args.dry_run,
        clean: args.clean,
        update: args.update,
    };
    pipeline::run(&opts, &Ui::new())?;
    Ok(ExitCode::SUCCESS)
}
