use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::ProfileArg;
use crate::builder::patch::verbs as series;
use crate::builder::profile::{self, Profile};

#[derive(clap::Subcommand, Debug)]
pub enum PatchesCommand {
    /// List the patch series of every built-in profile, or of one
    List {
        /// A built-in profile name, or a profile TOML file [default: all built-in]
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<String>,
        /// Print the series as JSON
        #[arg(long)]
        json: bool,
    },
    /// Check that the series applies to a source tree (exit 0 if it does, 1 if not)
    Check {
        #[command(flatten)]
        profile: ProfileArg,
        /// The source tree, e.g. a MIOpen checkout
        #[arg(long, value_name = "DIR")]
        source: PathBuf,
        #[arg(long, default_value = "miopen")]
        component: String,
        /// A series of your own to check after the profile's, as `build
        /// --extra-patches` applies it
        #[arg(long, value_name = "DIR")]
        extra_patches: Option<PathBuf>,
        /// Print the result as JSON: per patch its status, files and hunks
        #[arg(long)]
        json: bool,
    },
    /// Rewrite one patch from an edited tree, like `quilt refresh`
    Refresh {
        /// The patch file name, as the series lists it
        name: String,
        /// A git checkout with the whole series applied and then edited
        #[arg(long, value_name = "DIR")]
        source: PathBuf,
        /// A profile file on disk (built-in patches cannot be edited)
        #[arg(long, value_name = "FILE")]
        profile: PathBuf,
        #[arg(long, default_value = "miopen")]
        component: String,
        /// Also put this file (relative to the tree) into the patch
        #[arg(long, value_name = "PATH")]
        add: Vec<String>,
    },
}

pub fn run(cmd: PatchesCommand) -> Result<ExitCode> {
    match cmd {
        PatchesCommand::List { profile, json } => {
            let profiles = match profile {
                Some(p) => vec![Profile::load(&p)?],
                None => profile::builtin_names()
                    .iter()
                    .map(|n| Profile::load(n))
                    .collect::<Result<_>>()?,
            };
            if json {
                let doc = series::list_json(&profiles)?;
                crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                for line in series::list(&profiles)? {
                    crate::outln!("{line}");
                }
            }
        }
        PatchesCommand::Check {
            profile,
            source,
            component,
            extra_patches,
            json,
        } => {
            let checked = series::check(&series::CheckRequest {
                profile: &profile.load()?,
                component: &component,
                source: &source,
                extra: extra_patches.as_deref(),
                json,
            })?;
            crate::outln!("{}", checked.report);
            if !checked.ok {
                if !json {
                    crate::errln!(
                        "{}",
                        crate::error::render(&crate::error::hint(
                            checked.failure.clone().unwrap_or_else(|| format!(
                                "the series does not apply to {}",
                                source.display()
                            )),
                            "check that --source is a checkout of the profile's tag; to carry the series to this tree, edit the patched checkout and `rdna1-patch patches refresh` the patch that failed",
                        ))
                    );
                }
                return Ok(ExitCode::from(crate::error::CHECK_FAILED));
            }
        }
        PatchesCommand::Refresh {
            name,
            source,
            profile,
            component,
            add,
        } => crate::outln!(
            "{}",
            series::refresh(&name, &source, &profile, &component, &add)?
        ),
    }
    Ok(ExitCode::SUCCESS)
}

impl PatchesCommand {
    pub(crate) fn json(&self) -> bool {
        match self {
            PatchesCommand::List { json, .. } | PatchesCommand::Check { json, .. } => *json,
            PatchesCommand::Refresh { .. } => false,
        }
    }
}
