//! doctor's toolchain checks: the tools a build runs, its compiler and
//! launchers, and the ROCm it builds against.

use super::*;

const MIN_CMAKE: (u32, u32) = (3, 16);

/// cmake, a generator, patchelf, git.
pub(super) fn build_tools(r: &mut CheckReport) {
    cmake(r);
    match (tools::find("ninja"), tools::find("make")) {
        (Some(n), _) => r.push("ninja", Status::Ok, n.display().to_string()),
        (None, Some(m)) => r.push_fix(
            "ninja",
            Status::Warn,
            format!(
                "not found; the build will use {} (slower no-op rebuilds)",
                m.display()
            ),
            "sudo apt install ninja-build",
        ),
        (None, None) => r.push_fix(
            "ninja",
            Status::Fail,
            "neither ninja nor make is installed",
            "sudo apt install ninja-build",
        ),
    }
    match tools::find("patchelf") {
        Some(p) => r.push("patchelf", Status::Ok, p.display().to_string()),
        None => r.push_fix(
            "patchelf",
            Status::Warn,
            "not found: `install --into-torch` needs it to relink to torch's runtimes",
            "sudo apt install patchelf",
        ),
    }
    match crate::builder::git::check_version() {
        Ok((major, minor, patch)) => {
            r.push("git", Status::Ok, format!("git {major}.{minor}.{patch}"))
        }
        Err(e) => r.push_fix(
            "git",
            Status::Fail,
            e.to_string(),
            crate::error::help(&e)
                .unwrap_or("sudo apt install git")
                .to_owned(),
        ),
    }
}

fn cmake(r: &mut CheckReport) {
    let Some(path) = tools::find("cmake") else {
        return r.push_fix(
            "cmake",
            Status::Fail,
            "not found",
            "sudo apt install cmake (3.16 or newer)",
        );
    };
    let out = tools::version_output(&path).unwrap_or_default();
    let version = out
        .split_whitespace()
        .nth(2)
        .unwrap_or("unknown")
        .to_owned();
    let mut it = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let v = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    if v >= MIN_CMAKE {
        r.push(
            "cmake",
            Status::Ok,
            format!("{version} at {}", path.display()),
        );
    } else {
        r.push_fix(
            "cmake",
            Status::Fail,
            format!("{version} at {} is older than 3.16", path.display()),
            "install a newer cmake (pip install cmake, or Kitware's apt repository)",
        );
    }
}

/// The C++ compiler `build` will use: the profile's (ROCm's clang), or the
/// clang `hipconfig --hipclangpath` names when that is not there, as the
/// build itself decides; a host compiler cannot build MIOpen's HIP code.
pub(super) fn compiler(req: &DoctorRequest, r: &mut CheckReport) {
    let rocm = req
        .rocm
        .clone()
        .unwrap_or_else(|| req.profile.rocm.path.clone());
    let defines = req
        .profile
        .components
        .values()
        .next()
        .map(|c| c.cmake.effective_defines(&rocm, &[]))
        .unwrap_or_default();
    let Some(cxx) = defines.get("CMAKE_CXX_COMPILER") else {
        match ["c++", "g++", "clang++"]
            .iter()
            .find_map(|c| tools::find(c))
        {
            Some(c) => r.push("compiler", Status::Ok, c.display().to_string()),
            None => r.push_fix(
                "compiler",
                Status::Fail,
                "no C++ compiler (c++, g++ or clang++)",
                "sudo apt install g++",
            ),
        }
        return;
    };
    match tools::choose_cxx(cxx, &tools::HipClang::new(&rocm)) {
        tools::CxxChoice::Present => {
            r.push("compiler", Status::Ok, format!("{cxx} (the profile's)"))
        }
        tools::CxxChoice::HipClang(dir) => r.push(
            "compiler",
            Status::Ok,
            format!(
                "{} ({cxx} is not there; hipconfig --hipclangpath names this one, and build will use it)",
                dir.join("clang++").display()
            ),
        ),
        tools::CxxChoice::Missing => r.push_fix(
            "compiler",
            Status::Fail,
            format!("{cxx} is not there, and no hipconfig names HIP's clang"),
            format!(
                "install ROCm's compiler (rocm-llvm, or hipcc and clang on a distribution) under {}, or give --rocm DIR / ROCM_PATH, or -D CMAKE_CXX_COMPILER=PATH to build",
                rocm.display()
            ),
        ),
    }
}

pub(super) fn launchers(r: &mut CheckReport) {
    let found: Vec<String> = ["ccache", "sccache", "distcc"]
        .iter()
        .filter_map(|p| tools::find(p).map(|_| p.to_string()))
        .collect();
    if found.is_empty() {
        r.push_fix(
            "launcher",
            Status::Warn,
            "no ccache, sccache or distcc: every rebuild after --clean compiles everything again",
            "sudo apt install ccache",
        );
    } else {
        r.push(
            "launcher",
            Status::Ok,
            format!("found {}", found.join(", ")),
        );
    }
    if let Ok(Some(l)) =
        crate::builder::launcher::resolve(Some(crate::builder::launcher::Kind::Distcc))
    {
        match std::env::var("DISTCC_HOSTS") {
            Ok(hosts) => r.push(
                "distcc",
                Status::Ok,
                format!(
                    "DISTCC_HOSTS={hosts}: {} job slots",
                    l.jobs()
                        .map_or("an unknown number of".into(), |j| j.to_string())
                ),
            ),
            // One machine is the common case: nothing to fix. Spreading
            // a build is for those who have a second one, and know it.
            Err(_) => r.push(
                "distcc",
                Status::Skip,
                "installed; no DISTCC_HOSTS names other machines, so builds compile here (`--launcher distcc` with DISTCC_HOSTS set spreads them)",
            ),
        }
    }
}

pub(super) fn rocm(req: &DoctorRequest, r: &mut CheckReport) {
    let path = req.rocm.clone().unwrap_or(req.profile.rocm.path.clone());
    let want = &req.profile.rocm.version;
    if !path.is_dir() {
        r.push_fix(
            "rocm",
            Status::Fail,
            format!(
                "no ROCm at {} (profile {} wants ROCm {want})",
                path.display(),
                req.profile.name
            ),
            req.profile.rocm.get.clone().unwrap_or_else(|| {
                format!(
                    "install ROCm {} (amdgpu-install --usecase=rocm), or pass --rocm DIR",
                    crate::version::major_minor(want)
                )
            }),
        );
    } else {
        use crate::builder::profile::{RocmFit, rocm_fit};
        match tools::rocm_version(&path) {
            Some(v) => match rocm_fit(&req.profile, &v, &path) {
                RocmFit::Profile => {
                    r.push("rocm", Status::Ok, format!("{v} at {}", path.display()))
                }
                RocmFit::Other(name) => r.push_fix(
                    "rocm",
                    Status::Warn,
                    format!(
                        "{v} at {}, but profile {} is for ROCm {want}",
                        path.display(),
                        req.profile.name
                    ),
                    format!(
                        "use the profile for this ROCm (--profile {name}), or install the profile's"
                    ),
                ),
                RocmFit::Unserved(e) => r.push_error("rocm", Status::Fail, &e),
            },
            None => r.push_fix(
                "rocm",
                Status::Warn,
                format!(
                    "{} has neither .info/version nor include/hip/hip_version.h",
                    path.display()
                ),
                "check that ROCm is fully installed there",
            ),
        }
    }
    if path.is_dir() {
        compat(req, &path, r);
    }
    let hipcc = ["bin/hipcc", "llvm/bin/amdclang++", "bin/amdclang++"]
        .iter()
        .map(|p| path.join(p))
        .find(|p| p.is_file())
        .or_else(|| tools::find("hipcc"));
    match hipcc {
        Some(h) => r.push("hipcc", Status::Ok, h.display().to_string()),
        None => r.push_fix(
            "hipcc",
            Status::Fail,
            format!("no hipcc or amdclang++ in {} or on PATH", path.display()),
            "install ROCm's HIP SDK (the hip-dev and rocm-llvm packages)",
        ),
    }
}

/// The GPU checks; returns the cards' gfx names, read once from sysfs.
/// What the toolchain at `path` would need of this profile's build, as
/// `build` would meet it (`builder::compat`).
fn compat(req: &DoctorRequest, path: &std::path::Path, r: &mut CheckReport) {
    use crate::builder::compat;
    let Some(c) = req.profile.components.values().next() else {
        return;
    };
    let defines = c.cmake.effective_defines(path, &[]);
    match compat::needs(
        &compat::read(path),
        &c.compat,
        &[],
        &defines,
        &[],
        std::path::Path::new("<work>"),
    ) {
        Ok(needs) if needs.is_empty() => r.push(
            "compat",
            Status::Ok,
            format!("{} needs nothing of this toolchain", req.profile.name),
        ),
        Ok(needs) => r.push(
            "compat",
            Status::Ok,
            format!(
                "build will add: {}",
                needs
                    .iter()
                    .map(compat::Need::describe)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
        Err(e) => r.push_error("compat", Status::Fail, &e),
    }
}
