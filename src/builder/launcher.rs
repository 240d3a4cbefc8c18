//! Compiler launchers: ccache or sccache make a rebuild after `--clean` (or
//! in another work dir) cheap; distcc spreads compiles over other machines.
//! They reach CMake as CMAKE_<LANG>_COMPILER_LAUNCHER.

use std::path::PathBuf;

use anyhow::Result;

use crate::builder::tools;
use crate::error::hint;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ccache,
    Sccache,
    Distcc,
    None,
}

impl Kind {
    pub fn program(self) -> &'static str {
        match self {
            Kind::Ccache => "ccache",
            Kind::Sccache => "sccache",
            Kind::Distcc => "distcc",
            Kind::None => "none",
        }
    }

    fn package(self) -> &'static str {
        match self {
            Kind::Ccache => "sudo apt install ccache",
            Kind::Sccache => "cargo install sccache (or your distribution's sccache package)",
            Kind::Distcc => "sudo apt install distcc, and set DISTCC_HOSTS",
            Kind::None => "",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    pub kind: Kind,
    pub path: PathBuf,
    /// Chosen because it is installed, not because it was asked for.
    pub auto: bool,
}

/// `asked` is `--launcher` or the profile's; nothing asked means ccache
/// when it is installed. One asked for and missing is an error now, before
/// anything is configured.
pub fn resolve(asked: Option<Kind>) -> Result<Option<Launcher>> {
    match asked {
        Some(Kind::None) => Ok(None),
        Some(kind) => match tools::find(kind.program()) {
            Some(path) => Ok(Some(Launcher {
                kind,
                path,
                auto: false,
            })),
            None => Err(hint(
                format!("the compiler launcher {} is not installed", kind.program()),
                format!("{}; or pass --launcher none", kind.package()),
            )),
        },
        None => Ok(tools::find("ccache").map(|path| Launcher {
            kind: Kind::Ccache,
            path,
            auto: true,
        })),
    }
}

impl Launcher {
    /// The CMake defines. HIP device code is left out for distcc: the remote
    /// hosts would need the same ROCm.
    pub fn defines(&self) -> Vec<(String, String)> {
        let langs: &[&str] = match self.kind {
            Kind::Distcc => &["C", "CXX"],
            _ => &["C", "CXX", "HIP"],
        };
        langs
            .iter()
            .map(|l| {
                (
                    format!("CMAKE_{l}_COMPILER_LAUNCHER"),
                    self.path.display().to_string(),
                )
            })
            .collect()
    }

    /// Parallel jobs worth running: for distcc, the slots its hosts offer
    /// (`distcc -j` reads DISTCC_HOSTS the way distcc itself will).
    pub fn jobs(&self) -> Option<usize> {
        if self.kind != Kind::Distcc {
            return None;
        }
        let mut cmd = std::process::Command::new(&self.path);
        cmd.arg("-j");
        crate::proc::helper(cmd).ok()?.stdout.trim().parse().ok()
    }

    pub fn describe(&self) -> String {
        format!(
            "{} ({}{})",
            self.kind.program(),
            self.path.display(),
            if self.auto {
                ", found on PATH; --launcher none turns it off"
            } else {
                ""
            }
        )
    }
}
