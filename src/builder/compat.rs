//! What a toolchain needs of a build that the profile cannot know: a
//! distribution's ROCm puts things where MIOpen does not look, or ships
//! newer libraries than the release was written for. Each need is read from
//! the toolchain itself (headers under `{rocm}/include`), offered only for
//! the compat names the profile lists (`compat = [...]`: what is known to
//! apply to its MIOpen), shown in the plan, the stage output and the
//! provenance, and turned off with `--no-compat NAME`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::hint;

/// The compat names a profile may list.
pub const KNOWN: &[&str] = &["boost-1.92", "half", "comgr-3", "comgr-2"];

/// What one need adds to the build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// A shipped compat series (`patches/compat/<name>`), after the profile's.
    Series(String),
    /// A define, with a directory the build makes first (a symlink farm
    /// that puts a header where the project looks).
    Define {
        key: String,
        value: PathBuf,
        link: (PathBuf, PathBuf),
    },
}

/// A need found, and how it is met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub name: &'static str,
    /// What was found, for the user.
    pub found: String,
    pub fix: Fix,
}

impl Need {
    pub fn describe(&self) -> String {
        let how = match &self.fix {
            Fix::Series(s) => format!("series compat/{s}"),
            Fix::Define { key, value, .. } => format!("-D {key}={}", value.display()),
        };
        format!("{}: {} -> {how}", self.name, self.found)
    }
}

/// The toolchain facts compat decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// BOOST_VERSION, e.g. 109200 for 1.92; Err: the header is there but
    /// says nothing believable.
    pub boost: Reading,
    /// Where a bare `half.hpp` is (Debian's libhalf-dev), when no
    /// `half/half.hpp` is.
    pub bare_half: Option<PathBuf>,
    /// AMD_COMGR_INTERFACE_VERSION_MAJOR.
    pub comgr_major: Reading,
}

/// A version read from a header: absent (no header), found, or why the
/// header there cannot be believed.
pub type Reading = std::result::Result<Option<u32>, String>;

impl Default for Toolchain {
    fn default() -> Self {
        Toolchain {
            boost: Ok(None),
            bare_half: None,
            comgr_major: Ok(None),
        }
    }
}

/// Read the facts from `{rocm}/include`.
pub fn read(rocm: &Path) -> Toolchain {
    let include = rocm.join("include");
    // A header that is there must be a small regular file that defines the
    // version, and the version must be one that exists: a FIFO, a loop, a
    // huge or garbled file, or 4294967295 would otherwise pass as "needs
    // nothing" and the build would fail an hour later.
    let define = |file: &str, name: &str, max: u32| -> Reading {
        let path = include.join(file);
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        let text = crate::fsutil::read_small(&path, 1 << 20).map_err(|e| {
            format!(
                "{} cannot be read: {}",
                path.display(),
                crate::error::chain(&e)
            )
        })?;
        let value = text.lines().find_map(|l| define_of(l, name));
        match value.as_deref().map(str::parse::<u32>) {
            Some(Ok(v)) if v <= max => Ok(Some(v)),
            Some(_) => Err(format!(
                "{} defines {name} as {}, which is no version",
                path.display(),
                value.unwrap_or_default()
            )),
            None => Err(format!("{} does not define {name}", path.display())),
        }
    };
    Toolchain {
        boost: define("boost/version.hpp", "BOOST_VERSION", 9_999_999),
        bare_half: (!include.join("half/half.hpp").is_file() && include.join("half.hpp").is_file())
            .then(|| include.join("half.hpp")),
        comgr_major: define(
            "amd_comgr/amd_comgr.h",
            "AMD_COMGR_INTERFACE_VERSION_MAJOR",
            99,
        ),
    }
}

/// The value `line` gives `name`, if it is `#define name value`; the name
/// must be whole, or Boost's include guard BOOST_VERSION_HPP, defined
/// first, would read as BOOST_VERSION.
fn define_of(line: &str, name: &str) -> Option<String> {
    let rest = line.trim().strip_prefix('#')?.trim_start();
    let rest = rest
        .strip_prefix("define")?
        .trim_start()
        .strip_prefix(name)?;
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim().to_owned())
}

/// What a wanted compat fix reads, or why it cannot be decided.
fn believe(reading: &Reading, name: &str) -> Result<Option<u32>> {
    reading.clone().map_err(|why| {
        hint(
            format!("cannot tell what this toolchain needs for compat {name}: {why}"),
            format!(
                "fix or reinstall that header, or leave the fix out with --no-compat {name}; nothing was fetched or built"
            ),
        )
    })
}

/// The needs of `t` among the profile's `listed` compat names, less those
/// in `off` ("all" turns every one off) and the defines the user gave.
/// `dir` is where a define's symlink farm goes. An unmet need that nothing
/// shipped can meet is an error, before anything is fetched.
pub fn needs(
    t: &Toolchain,
    listed: &[String],
    off: &[String],
    defines: &BTreeMap<String, String>,
    user_defines: &[(String, String)],
    dir: &Path,
) -> Result<Vec<Need>> {
    let wanted = |name: &str| {
        listed.iter().any(|l| l == name) && !off.iter().any(|o| o == name || o == "all")
    };
    let mut out = Vec::new();
    let boost = if wanted("boost-1.92") {
        believe(&t.boost, "boost-1.92")?
    } else {
        None
    };
    let comgr = if wanted("comgr-3") || wanted("comgr-2") {
        believe(
            &t.comgr_major,
            if wanted("comgr-3") {
                "comgr-3"
            } else {
                "comgr-2"
            },
        )?
    } else {
        None
    };
    if let Some(v) = boost.filter(|v| *v >= 109200) {
        out.push(Need {
            name: "boost-1.92",
            found: format!("Boost {}.{}", v / 100_000, v / 100 % 1000),
            fix: Fix::Series("boost-1.92".into()),
        });
    }
    let given = |k: &str| user_defines.iter().any(|(d, _)| d == k);
    if wanted("half")
        && !given("HALF_INCLUDE_DIR")
        && !defines.contains_key("HALF_INCLUDE_DIR")
        && let Some(bare) = &t.bare_half
    {
        let value = dir.join("half-include");
        out.push(Need {
            name: "half",
            found: format!("{} (no half/half.hpp beside it)", bare.display()),
            fix: Fix::Define {
                key: "HALF_INCLUDE_DIR".into(),
                link: (value.join("half/half.hpp"), bare.clone()),
                value,
            },
        });
    }
    if wanted("comgr-3")
        && let Some(major) = comgr.filter(|m| *m >= 3)
    {
        out.push(Need {
            name: "comgr-3",
            found: format!("COMgr {major}"),
            fix: Fix::Series("comgr-3".into()),
        });
    }
    if wanted("comgr-2")
        && let Some(major) = comgr.filter(|m| *m >= 3)
    {
        return Err(hint(
            format!(
                "this ROCm's comgr is version {major}, and this MIOpen release is written for comgr 2: its src/comgr.cpp uses actions comgr 3 removed, and the build would stop there after most of an hour"
            ),
            "build a profile whose MIOpen has the comgr 3 port (rocm-6.3.1 and later), or use a ROCm with comgr 2; --no-compat comgr-2 builds anyway. Nothing was changed",
        ));
    }
    Ok(out)
}

/// Make what a define needs (before configure; a dry run does not).
pub fn prepare(needs: &[Need]) -> Result<()> {
    for n in needs {
        if let Fix::Define { link: (at, to), .. } = &n.fix {
            if let Some(parent) = at.parent() {
                crate::fsutil::create_dir_all(parent)?;
            }
            if std::fs::read_link(at).ok().as_deref() != Some(to.as_path()) {
                crate::fsutil::remove_own_file(at)?;
                crate::fsutil::symlink(to, at)?;
            }
        }
    }
    Ok(())
}
