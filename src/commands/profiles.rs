use std::process::ExitCode;

use anyhow::Result;

use crate::builder::profile::{self, DEFAULT_PROFILE, Profile};

#[derive(clap::Subcommand, Debug)]
pub enum ProfilesCommand {
    /// List the built-in profiles
    List {
        /// Print them as JSON, each with its ROCm, source and series
        #[arg(long)]
        json: bool,
    },
    /// Print a built-in profile's TOML
    Show {
        /// The built-in profile (`profiles list` names them)
        #[arg(default_value = DEFAULT_PROFILE)]
        name: String,
    },
    /// Write a built-in profile and its patch series into a directory, to
    /// edit and use with `--profile DIR/NAME.toml`
    Export {
        /// The built-in profile to export (`profiles list` names them)
        name: String,
        /// The directory to write NAME.toml and its series into (made if
        /// missing)
        dir: std::path::PathBuf,
    },
}

pub fn run(cmd: ProfilesCommand) -> Result<ExitCode> {
    match cmd {
        ProfilesCommand::List { json: true } => {
            let doc = profile::list_json()?;
            crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
        }
        ProfilesCommand::List { json: false } => {
            for name in profile::builtin_names() {
                let p = Profile::load(&name)?;
                let default = if name == DEFAULT_PROFILE {
                    " (default)"
                } else {
                    ""
                };
                // What it builds: a profile may pin more than MIOpen.
                let components: Vec<&str> = p.components.keys().map(String::as_str).collect();
                crate::outln!(
                    "{name}{default}\t{}; builds {}",
                    p.description,
                    components.join(", ")
                );
            }
        }
        ProfilesCommand::Show { name } => {
            let text = profile::builtin_text(&name).ok_or_else(|| {
                crate::error::hint(
                    format!("no built-in profile named `{name}`"),
                    format!("built-in profiles: {}", profile::builtin_names().join(", ")),
                )
            })?;
            crate::outln!("{}", text.trim_end_matches('\n'));
        }
        ProfilesCommand::Export { name, dir } => {
            let files = profile::export(&name, &dir)?;
            crate::outln!(
                "wrote {} files; build with: rdna1-patch build --profile {}",
                files.len(),
                files[0].display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

impl ProfilesCommand {
    pub(crate) fn json(&self) -> bool {
        matches!(self, ProfilesCommand::List { json: true })
    }
}
