//! The external tools a build drives, found and checked before any long work.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::hint;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generator {
    Ninja,
    Make,
}

impl Generator {
    /// The name CMake's `-G` takes.
    pub fn cmake_name(self) -> &'static str {
        match self {
            Generator::Ninja => "Ninja",
            Generator::Make => "Unix Makefiles",
        }
    }

    pub fn parse(s: &str) -> Option<Generator> {
        match s.to_ascii_lowercase().as_str() {
            "ninja" => Some(Generator::Ninja),
            "make" | "unix makefiles" => Some(Generator::Make),
            _ => None,
        }
    }
}

/// What preflight found: everything the configure and build stages run.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub cmake: PathBuf,
    pub cmake_version: String,
    pub generator: Generator,
    /// Set when Ninja was asked for but is missing and Make is used instead.
    pub generator_fallback: bool,
    pub rocm: RocmInstall,
    /// What every cmake run gets in its environment besides ours (the
    /// tools Tensile runs, where it would not find them).
    pub env: Vec<(String, PathBuf)>,
}

#[derive(Debug, Clone)]
pub struct RocmInstall {
    /// e.g. "6.2.4", read from the install itself.
    pub version: Option<String>,
}

pub fn find(name: &str) -> Option<PathBuf> {
    which::which(name).ok()
}

/// Look for everything a build needs and report all that is missing at once,
/// each with what to install.
pub fn preflight(
    requested: Generator,
    rocm_path: &Path,
    defines: &BTreeMap<String, String>,
) -> Result<Toolchain> {
    // What is missing, and how to get it: one error line and one help
    // line for them all.
    let mut missing: Vec<(String, String)> = Vec::new();

    let cmake = find("cmake");
    if cmake.is_none() {
        missing.push((
            "cmake".into(),
            "apt-get install cmake (or pip install cmake)".into(),
        ));
    }
    let make = find("make").or_else(|| find("gmake"));
    let ninja = find("ninja");
    let (generator, generator_fallback) = match (requested, ninja.is_some(), make.is_some()) {
        (Generator::Ninja, true, _) => (Generator::Ninja, false),
        (Generator::Ninja, false, true) => (Generator::Make, true),
        (Generator::Make, _, true) => (Generator::Make, false),
        (Generator::Make, true, false) => (Generator::Ninja, true),
        _ => {
            missing.push(("ninja or make".into(), "apt-get install ninja-build".into()));
            (requested, false)
        }
    };

    if let Err(name) = cxx(defines) {
        missing.push((
            format!("a C++ compiler (`{name}` is not there)"),
            "name a C++ compiler with the profile's CMAKE_CXX_COMPILER, $CXX or c++ on PATH (ROCm ships amdclang++ in <rocm>/llvm/bin)".into(),
        ));
    }

    let rocm = if rocm_path.is_dir() {
        Some(RocmInstall {
            version: rocm_version(rocm_path),
        })
    } else {
        missing.push((
            format!("ROCm at {}", rocm_path.display()),
            "install ROCm, or point at it with --rocm DIR".into(),
        ));
        None
    };

    if !missing.is_empty() {
        let (what, how): (Vec<String>, Vec<String>) = missing.into_iter().unzip();
        return Err(hint(
            format!("missing what the build needs: {}", what.join(", ")),
            format!(
                "{}; `rdna1-patch doctor` checks everything at once",
                how.join("; ")
            ),
        ));
    }
    let cmake = cmake.expect("checked above");
    let cmake_version = version_output(&cmake)
        .with_context(|| format!("cannot run {} --version", cmake.display()))?
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("cmake version ")
        .to_owned();
    Ok(Toolchain {
        cmake,
        cmake_version,
        generator,
        generator_fallback,
        rocm: rocm.expect("checked above"),
        env: Vec::new(),
    })
}

/// Where Tensile's assembler and offload bundler are, when Tensile would
/// not find them itself: it looks in `<rocm>/llvm/bin` (AMD's layout), and
/// a distribution's ROCm (Debian: /usr/lib/llvm-N/bin) has none there, so
/// its kernels fail to assemble ("No bundler available"). HIP's clang dir
/// (`hipconfig --hipclangpath`) then, with both tools in it; None when
/// Tensile finds its own or there is no such dir.
pub fn tensile_tools(hip: &HipClang) -> Option<(PathBuf, Vec<(String, PathBuf)>)> {
    const BUNDLER: &str = "clang-offload-bundler";
    if hip.rocm.join("llvm/bin").join(BUNDLER).is_file() {
        return None;
    }
    let dir = hip.dir()?.to_owned();
    let bundler = dir.join(BUNDLER);
    bundler.is_file().then(|| {
        let env = vec![
            (
                "TENSILE_ROCM_ASSEMBLER_PATH".to_owned(),
                dir.join("clang++"),
            ),
            ("TENSILE_ROCM_OFFLOAD_BUNDLER_PATH".to_owned(), bundler),
        ];
        (dir, env)
    })
}

/// The C++ compiler CMake will use: the define, else $CXX, else c++, g++
/// or clang++ on PATH; the name looked for when there is none.
pub fn cxx(defines: &BTreeMap<String, String>) -> Result<PathBuf, String> {
    match defines.get("CMAKE_CXX_COMPILER") {
        Some(c) => resolve(c).ok_or_else(|| c.clone()),
        None => std::env::var("CXX")
            .ok()
            .and_then(|c| resolve(&c))
            .or_else(|| ["c++", "g++", "clang++"].iter().find_map(|c| find(c)))
            .ok_or_else(|| "c++".to_owned()),
    }
}

fn resolve(cmd: &str) -> Option<PathBuf> {
    let p = Path::new(cmd);
    if p.is_absolute() {
        p.is_file().then(|| p.to_owned())
    } else {
        find(cmd)
    }
}

/// The ROCm release of an install: for a rocm-sdk devel tree
/// (`site-packages/_rocm_sdk_devel*`), the SDK version pip recorded, which
/// is what a torch on those packages is matched against; else
/// `.info/version` ("6.2.4-120"), else the HIP version header.
pub fn rocm_version(rocm: &Path) -> Option<String> {
    let devel = rocm
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("_rocm_sdk_devel"));
    if devel && let Some(v) = rocm.parent().and_then(crate::rocm_sdk::version_in) {
        return Some(v);
    }
    if let Ok(s) = std::fs::read_to_string(rocm.join(".info/version")) {
        let v = s.trim().split(['-', '\n']).next().unwrap_or_default();
        if !v.is_empty() {
            return Some(v.to_owned());
        }
    }
    let header = std::fs::read_to_string(rocm.join("include/hip/hip_version.h")).ok()?;
    let num = |key: &str| {
        header.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("#define ")?.strip_prefix(key)?;
            rest.trim().parse::<u32>().ok()
        })
    };
    Some(format!(
        "{}.{}.{}",
        num("HIP_VERSION_MAJOR")?,
        num("HIP_VERSION_MINOR")?,
        num("HIP_VERSION_PATCH").unwrap_or(0)
    ))
}

/// What a profile's C++ compiler `cxx` is at this ROCm: there as named,
/// replaced by the clang `hipconfig --hipclangpath` names (a distribution's
/// layout, with no {rocm}/llvm), or missing. `build` and `doctor` decide
/// the same way.
pub enum CxxChoice {
    Present,
    HipClang(PathBuf),
    Missing,
}

pub fn choose_cxx(cxx: &str, hip: &HipClang) -> CxxChoice {
    if Path::new(cxx).exists() {
        return CxxChoice::Present;
    }
    match hip.dir() {
        Some(dir) => CxxChoice::HipClang(dir.to_owned()),
        None => CxxChoice::Missing,
    }
}

/// HIP's clang dir at a ROCm ([`hip_clang_dir`]), asked of hipconfig at
/// most once however many steps of a plan want it (the compiler, and
/// Tensile's assembler and bundler).
pub struct HipClang<'a> {
    rocm: &'a Path,
    dir: std::cell::OnceCell<Option<PathBuf>>,
}

impl<'a> HipClang<'a> {
    pub fn new(rocm: &'a Path) -> HipClang<'a> {
        HipClang {
            rocm,
            dir: std::cell::OnceCell::new(),
        }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.get_or_init(|| hip_clang_dir(self.rocm)).as_deref()
    }
}

/// The directory of HIP's clang, as ROCm's own `hipconfig --hipclangpath`
/// names it (AMD's packages: <rocm>/llvm/bin; Debian: /usr/lib/llvm-N/bin).
/// `<rocm>/bin/hipconfig` first, then the one on PATH.
fn hip_clang_dir(rocm: &Path) -> Option<PathBuf> {
    let own = rocm.join("bin/hipconfig");
    let hipconfig = if own.is_file() {
        own
    } else {
        find("hipconfig")?
    };
    let mut cmd = std::process::Command::new(&hipconfig);
    cmd.arg("--hipclangpath");
    // It prints a path: a hipconfig that hangs must not cost the helpers'
    // two minutes.
    let out = crate::proc::run(cmd, std::time::Duration::from_secs(15)).ok()?;
    let dir = PathBuf::from(out.stdout.trim());
    (out.status.is_some_and(|s| s.success()) && dir.join("clang++").is_file()).then_some(dir)
}

/// What `program --version` prints, within the helper time limit.
pub fn version_output(program: &Path) -> Result<String> {
    let mut cmd = std::process::Command::new(program);
    cmd.arg("--version");
    let out = crate::proc::helper(cmd)?;
    if !out.status.success() {
        anyhow::bail!(
            "{} --version failed: {}",
            program.display(),
            out.stderr.trim()
        );
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocm_version_from_info_or_header() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(rocm_version(d.path()), None);
        std::fs::create_dir_all(d.path().join("include/hip")).unwrap();
        std::fs::write(
            d.path().join("include/hip/hip_version.h"),
            "#define HIP_VERSION_MAJOR 6\n#define HIP_VERSION_MINOR 2\n#define HIP_VERSION_PATCH 41134\n",
        )
        .unwrap();
        assert_eq!(rocm_version(d.path()).as_deref(), Some("6.2.41134"));
        std::fs::create_dir_all(d.path().join(".info")).unwrap();
        std::fs::write(d.path().join(".info/version"), "6.2.4-120\n").unwrap();
        assert_eq!(rocm_version(d.path()).as_deref(), Some("6.2.4"));
        assert_eq!(crate::version::major_minor("6.2.4"), "6.2");
    }
}

#[cfg(test)]
mod tensile_tests {
    use std::os::unix::fs::PermissionsExt;

    use super::{HipClang, tensile_tools};

    fn exe(path: &std::path::Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Debian's layout: no <rocm>/llvm/bin, hipconfig names HIP's clang
    /// dir; Tensile is told both tools there. AMD's layout: nothing.
    #[test]
    fn tensile_is_told_hips_clang_only_where_it_would_not_find_it() {
        let d = tempfile::tempdir().unwrap();
        let rocm = d.path().join("usr");
        let clang = d.path().join("llvm-21/bin");
        exe(&clang.join("clang++"), "#!/bin/sh\n");
        exe(
            &rocm.join("bin/hipconfig"),
            &format!("#!/bin/sh\necho {}\n", clang.display()),
        );
        assert_eq!(
            tensile_tools(&HipClang::new(&rocm)),
            None,
            "no bundler beside HIP's clang"
        );
        exe(&clang.join("clang-offload-bundler"), "#!/bin/sh\n");
        let (dir, env) = tensile_tools(&HipClang::new(&rocm)).expect("told");
        assert_eq!(dir, clang);
        assert_eq!(
            env,
            [
                (
                    "TENSILE_ROCM_ASSEMBLER_PATH".to_owned(),
                    clang.join("clang++")
                ),
                (
                    "TENSILE_ROCM_OFFLOAD_BUNDLER_PATH".to_owned(),
                    clang.join("clang-offload-bundler")
                ),
            ]
        );
        exe(&rocm.join("llvm/bin/clang-offload-bundler"), "#!/bin/sh\n");
        assert_eq!(
            tensile_tools(&HipClang::new(&rocm)),
            None,
            "AMD's layout: Tensile finds its own"
        );
    }
}
