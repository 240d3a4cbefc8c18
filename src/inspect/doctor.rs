//! `doctor`: will a build work here, and what will the GPU side see? Only
//! what blocks a build is a FAIL; the rest is information or a warning.

use std::path::{Path, PathBuf};

use crate::builder::profile::Profile;
use crate::builder::tools;
use crate::fatbin;
use crate::gpu;
use crate::inspect::checks::{CheckReport, Status};
use crate::swap::advice;
use crate::swap::torch::{self, Locator};

pub struct DoctorRequest {
    pub profile: Profile,
    pub rocm: Option<PathBuf>,
    pub work_dir: PathBuf,
    pub sysfs: PathBuf,
    pub torch: Option<Locator>,
    /// HSA_OVERRIDE_GFX_VERSION, if set.
    pub gfx_override: Option<String>,
    /// Free space a build needs, in GiB.
    pub need_gib: u64,
}

const MIN_CMAKE: (u32, u32) = (3, 16);

pub fn run(req: &DoctorRequest) -> CheckReport {
    let mut r = CheckReport::default();
    build_tools(&mut r);
    compiler(req, &mut r);
    launchers(&mut r);
    rocm(req, &mut r);
    let cards = gpus(req, &mut r);
    disk(req, &mut r);
    let code = torch_checks(req, &mut r);
    gfx_override(req, &cards, code.as_ref(), &mut r);
    // No ROCm: no compiler in it, no hipcc; one cause, one fix.
    r.follows_from("rocm", &["compiler", "hipcc", "compat"]);
    r
}

/// cmake, a generator, patchelf, git.
fn build_tools(r: &mut CheckReport) {
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

/// The C++ compiler `build` will use: the profile's (ROCm's clang), or the
/// clang `hipconfig --hipclangpath` names when that is not there, as the
/// build itself decides; a host compiler cannot build MIOpen's HIP code.
fn compiler(req: &DoctorRequest, r: &mut CheckReport) {
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
    match tools::choose_cxx(cxx, &rocm) {
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

/// The torch of `--python`, and the GPU code its libtorch_hip.so carries.
fn torch_checks(req: &DoctorRequest, r: &mut CheckReport) -> Option<fatbin::CodeObjects> {
    let torch = req.torch.as_ref().map(torch::locate);
    match &torch {
        None => {}
        Some(Ok(t)) if crate::version::major_minor(t.rocm()) == req.profile.rocm.torch_hip => r
            .push(
                "torch",
                Status::Ok,
                format!(
                    "{} ({}) at {}; {}",
                    t.version,
                    t.rocm_label(),
                    t.dir.display(),
                    crate::inspect::verify::layout_detail(t)
                ),
            ),
        Some(Ok(t)) => r.push_fix(
            "torch",
            Status::Warn,
            format!(
                "{} ({}) at {}, but profile {} is for torch built with ROCm {}; {}",
                t.version,
                t.rocm_label(),
                t.dir.display(),
                req.profile.name,
                req.profile.rocm.torch_hip,
                crate::inspect::verify::layout_detail(t)
            ),
            "use the profile for torch's ROCm, or the torch for the profile's",
        ),
        Some(Err(e)) => r.push_error("torch", Status::Warn, e),
    }
    if let Some(Ok(t)) = &torch
        && let torch::Layout::RocmSdk(_) = t.layout
        && let Some(torch::Locator::Python(python)) = &req.torch
    {
        devel_sdk(python, r);
    }
    if let Some(Ok(t)) = &torch {
        route(&req.profile, t, r);
    }
    let code = torch
        .as_ref()
        .and_then(|t| t.as_ref().ok())
        .map(|t| torch_code(t, r));
    code.flatten()
}

/// On the rocm-sdk layout the build wants that environment's devel SDK:
/// `python -m rocm_sdk path --root` names it (and expands it on first use).
fn devel_sdk(python: &Path, r: &mut CheckReport) {
    let mut cmd = std::process::Command::new(python);
    cmd.args(["-m", "rocm_sdk", "path", "--root"]);
    match crate::proc::helper(cmd) {
        Ok(out) if out.status.success() => r.push(
            "rocm-sdk",
            Status::Ok,
            format!("devel SDK at {}: build with --rocm {0}", out.stdout.trim()),
        ),
        Ok(out) => r.push_fix(
            "rocm-sdk",
            Status::Warn,
            format!(
                "{} -m rocm_sdk path --root failed: {}",
                python.display(),
                out.stderr.lines().last().unwrap_or("").trim()
            ),
            "install the devel SDK into the same environment: pip install \"rocm[devel]\"",
        ),
        Err(e) => r.push("rocm-sdk", Status::Warn, format!("{e:#}")),
    }
}

fn launchers(r: &mut CheckReport) {
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
            Err(_) => r.push_fix(
                "distcc",
                Status::Skip,
                "DISTCC_HOSTS is not set (distcc would read ~/.distcc/hosts)",
                "export DISTCC_HOSTS='localhost/2 buildbox/8' to spread the build",
            ),
        }
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

fn rocm(req: &DoctorRequest, r: &mut CheckReport) {
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
        match tools::rocm_version(&path) {
            Some(v) if crate::version::major_minor(&v) == crate::version::major_minor(want) => {
                r.push("rocm", Status::Ok, format!("{v} at {}", path.display()))
            }
            Some(v) => r.push_fix(
                "rocm",
                Status::Warn,
                format!(
                    "{v} at {}, but profile {} is for ROCm {want}",
                    path.display(),
                    req.profile.name
                ),
                "use the profile for this ROCm, or install the profile's",
            ),
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

fn gpus(req: &DoctorRequest, r: &mut CheckReport) -> Vec<String> {
    let scan = gpu::scan_all(&req.sysfs);
    for p in &scan.problems {
        r.push_fix(
            "gpu",
            Status::Warn,
            format!("a KFD topology node was skipped: {p}"),
            "in a container, pass the GPU's /dev/dri/renderD* and /dev/kfd through; otherwise report this with the file attached",
        );
    }
    let all = scan.gpus;
    if all.is_empty() {
        r.push_fix(
            "gpu",
            Status::Warn,
            format!(
                "no AMD GPU in the KFD topology ({}): a build works, running needs the card and the amdgpu driver",
                gpu::topology(&req.sysfs).display()
            ),
            "on the GPU machine: check `lsmod | grep amdgpu` and that your user is in the render and video groups",
        );
    }
    for g in &all {
        let what = format!(
            "{} {} at {} (node {}, gfx_target_version {})",
            g.gfx(),
            g.model(),
            g.pci,
            g.node,
            g.gfx_target_version
        );
        if g.is_rdna1() {
            r.push(
                "gpu",
                Status::Ok,
                format!("{what}: RDNA1, what this tool is for"),
            );
        } else {
            r.push(
                "gpu",
                Status::Warn,
                format!("{what}: not RDNA1 (gfx1010/1011/1012); the patches only change behaviour on RDNA1"),
            );
        }
    }
    let params = gpu::amdgpu_params(&req.sysfs);
    if params.iter().all(|(_, v)| v.is_none()) {
        r.push(
            "amdgpu",
            Status::Skip,
            "module parameters not readable (amdgpu not loaded)",
        );
    } else {
        let shown: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("?")))
            .collect();
        r.push("amdgpu", Status::Ok, shown.join(" "));
    }
    all.iter().map(gpu::Gpu::gfx).collect()
}

fn disk(req: &DoctorRequest, r: &mut CheckReport) {
    let mut dir: &Path = &req.work_dir;
    while !dir.exists() {
        dir = dir.parent().unwrap_or(Path::new("/"));
    }
    match free_bytes(dir) {
        None => r.push(
            "disk",
            Status::Warn,
            format!("cannot read the free space of {}", dir.display()),
        ),
        Some(free) => {
            let gib = free as f64 / (1u64 << 30) as f64;
            let detail = format!(
                "{gib:.1} GiB free at {} (a MIOpen build needs about {} GiB)",
                dir.display(),
                req.need_gib
            );
            if u128::from(free) >= u128::from(req.need_gib) << 30 {
                r.push("disk", Status::Ok, detail);
            } else {
                r.push_fix(
                    "disk",
                    Status::Fail,
                    detail,
                    "free space there, or pass --work-dir on a disk with room",
                );
            }
        }
    }
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed struct for the kernel to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

/// Which GPUs torch's own GPU code is for: the offload bundles of
/// torch/lib/libtorch_hip.so. `None` when that cannot be told.
fn torch_code(t: &torch::Torch, r: &mut CheckReport) -> Option<fatbin::CodeObjects> {
    let lib = t.dir.join("lib/libtorch_hip.so");
    match fatbin::read(&lib) {
        Ok(Some(c)) if !c.archs.is_empty() => {
            let list: Vec<&str> = c.archs.iter().map(String::as_str).collect();
            r.push(
                "torch-gpu",
                Status::Ok,
                format!(
                    "{} has code for {}{}",
                    lib.display(),
                    list.join(", "),
                    if c.has_gfx101x() { "" } else { " (no gfx101x)" }
                ),
            );
            Some(c)
        }
        Ok(Some(c)) if c.compressed > 0 => {
            r.push(
                "torch-gpu",
                Status::Skip,
                format!(
                    "{} holds {} compressed offload bundles, which this version does not read",
                    lib.display(),
                    c.compressed
                ),
            );
            None
        }
        Ok(_) => {
            r.push(
                "torch-gpu",
                Status::Skip,
                format!(
                    "{} carries no GPU code objects (.hip_fatbin)",
                    lib.display()
                ),
            );
            None
        }
        Err(e) => {
            r.push_error("torch-gpu", Status::Skip, &e);
            None
        }
    }
}

fn gfx_override(
    req: &DoctorRequest,
    cards: &[String],
    code: Option<&fatbin::CodeObjects>,
    r: &mut CheckReport,
) {
    let a = advice::override_advice(code, req.gfx_override.as_deref(), cards);
    let status = if a.fine { Status::Ok } else { Status::Warn };
    match a.fix {
        Some(fix) => r.push_fix("override", status, a.detail, fix),
        None => r.push("override", status, a.detail),
    }
}

/// The route for this torch, as build and install take it (`select::plan`).
fn route(profile: &crate::builder::profile::Profile, t: &torch::Torch, r: &mut CheckReport) {
    match crate::select::plan(profile, t) {
        crate::select::Plan::Inert(why) => r.push_fix(
            "route",
            Status::Warn,
            why,
            format!(
                "for the fix to act, use a torch with gfx101x code: TheRock's `{}`",
                crate::swap::route::NATIVE_TORCH
            ),
        ),
        other => r.push("route", Status::Ok, other.detail()),
    }
}
