//! One module per verb: parse arguments, call the library, nothing more.

pub mod build;
pub mod patches;
pub mod profiles;

use anyhow::Result;

use crate::profile::{DEFAULT_PROFILE, Profile};

/// `--profile NAME|FILE`, shared by the verbs that need one.
#[derive(clap::Args, Debug, Clone)]
pub struct ProfileArg {
    /// A built-in profile name, or a profile TOML file
    #[arg(long, value_name = "NAME|FILE", default_value = DEFAULT_PROFILE)]
    pub profile: String,
}

impl ProfileArg {
    pub fn load(&self) -> Result<Profile> {
        Profile::load(&self.profile)
    }
}
