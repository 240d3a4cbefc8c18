//! Finding the user's torch, without importing it: a torch whose GPU
//! initialisation crashes must still be found, to be repaired. Where torch
//! is and how its MIOpen is laid out is a fact every wing reads (the
//! stack is built from it, the swap, the diagnosis and inspect use it), so
//! it lies below them all; `system` is the layout whose MIOpen is the
//! system's.

use crate::gpucode::Code;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;

use crate::error::hint;
use crate::fsutil::At;
pub use crate::rocm_sdk::Sdk;
use get::native_torch;
pub use get::{for_build, index_args, requirements};
pub use system::System;

pub mod get;
pub mod origin;
mod probe;
pub(crate) mod system;

/// How the user pointed at torch.
#[derive(Debug, Clone)]
pub enum Locator {
    /// A python interpreter (a venv's works): torch is found with its
    /// `importlib.util.find_spec`.
    Python(PathBuf),
    /// The torch package directory itself (the one holding version.py).
    Dir(PathBuf),
}

impl Locator {
    /// `--torch-dir` wins; then `--python`; then the python
    /// `which_python` chooses (the user's, never the tool's own venv's).
    pub fn new(python: Option<PathBuf>, torch_dir: Option<PathBuf>) -> anyhow::Result<Locator> {
        Ok(match torch_dir {
            Some(d) => Locator::Dir(d),
            None => Locator::Python(crate::which_python::choose(python.as_deref())?.python),
        })
    }
}

/// Where torch's MIOpen lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// torch/lib/libMIOpen.so: pytorch.org ROCm wheels up to ROCm 7.2 and
    /// local builds (the wheel copies ROCm's libraries in, RPATH $ORIGIN).
    Bundled,
    /// The rocm-sdk packages beside torch (TheRock; pytorch.org from 7.14).
    RocmSdk(Sdk),
    /// No MIOpen of torch's own: libtorch_hip.so loads the system's (ROCm
    /// packages, a distribution's libmiopen1), which is only ever read;
    /// the fix is a copy added to torch/lib (`swap::into_system`).
    System(Box<System>),
}

impl Layout {
    pub fn name(&self) -> &'static str {
        match self {
            Layout::Bundled => "torch/lib",
            Layout::RocmSdk(_) => "rocm-sdk",
            Layout::System(_) => "system",
        }
    }
}

/// A ROCm build of torch and the MIOpen library it loads.
#[derive(Debug, Clone)]
pub struct Torch {
    pub dir: PathBuf,
    /// The directory of the library torch loads: torch/lib, or the rocm-sdk
    /// libraries package's lib.
    pub lib_dir: PathBuf,
    /// torch.__version__, e.g. "2.5.1+rocm6.2".
    pub version: String,
    /// torch.version.hip, e.g. "6.2.41133-dd7f95766".
    pub hip: String,
    /// The name torch loads: torch/lib/libMIOpen.so, or the path
    /// `rocm_sdk.find_libraries("miopen")` gives; for the system layout,
    /// torch/lib/<the name libtorch_hip.so needs>, where the copy goes.
    pub library: PathBuf,
    /// The file that name leads to (itself unless it is a symlink); for
    /// the system layout, what torch loads now: the copy, or the system's.
    pub target: PathBuf,
    pub layout: Layout,
    /// torch's own GPU code, read on first ask: once per command, however
    /// many steps ask.
    gpu_code: std::cell::OnceCell<std::result::Result<Option<Code>, String>>,
}

impl Torch {
    /// The GPU code of torch's lib/libtorch_hip.so, read as every library
    /// is (`gpucode::read_library`: compressed bundles too): None when it
    /// carries none; Err, why it cannot be read.
    pub fn gpu_code(&self) -> std::result::Result<Option<&Code>, &str> {
        let code = self.gpu_code.get_or_init(|| {
            crate::gpucode::read_library(&self.dir.join("lib/libtorch_hip.so"))
                .map_err(|e| format!("{e:#}"))
        });
        match code {
            Ok(c) => Ok(c.as_ref()),
            Err(e) => Err(e.as_str()),
        }
    }

    /// The directory the library must stay inside: torch, or the rocm-sdk
    /// libraries package.
    pub fn root(&self) -> &Path {
        match &self.layout {
            Layout::Bundled | Layout::System(_) => &self.dir,
            Layout::RocmSdk(sdk) => &sdk.package,
        }
    }

    /// The ROCm version the library must match: torch.version.hip for a
    /// bundled library, the SDK's version for the rocm-sdk packages.
    pub fn rocm(&self) -> &str {
        match &self.layout {
            Layout::Bundled | Layout::System(_) => &self.hip,
            Layout::RocmSdk(sdk) => &sdk.version,
        }
    }

    /// Where the libraries torch loads live: torch/lib, or the rocm-sdk
    /// libraries package's lib and the core package's lib (the preload's);
    /// for the system layout, torch/lib and the system library's directory.
    pub fn runtime_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.lib_dir.clone()];
        match &self.layout {
            Layout::RocmSdk(Sdk {
                core_lib: Some(core),
                ..
            }) => dirs.push(core.clone()),
            Layout::System(sys) => dirs.push(sys.dir().to_owned()),
            _ => {}
        }
        dirs
    }

    /// The system layout's record, when that is torch's.
    pub fn system(&self) -> Option<&System> {
        match &self.layout {
            Layout::System(s) => Some(s),
            _ => None,
        }
    }

    /// The extra search path the loader check needs: none for torch/lib
    /// (RUNPATH $ORIGIN reaches it), the preload's directories for rocm-sdk.
    pub fn preloaded_dirs(&self) -> Vec<PathBuf> {
        match &self.layout {
            Layout::Bundled | Layout::System(_) => Vec::new(),
            Layout::RocmSdk(_) => self.runtime_dirs(),
        }
    }

    /// "ROCm 7.14.0 (rocm-sdk gfx101X-dgpu)" or "HIP 6.2.41133-...".
    pub fn rocm_label(&self) -> String {
        match &self.layout {
            Layout::Bundled => format!("HIP {}", self.hip),
            Layout::RocmSdk(sdk) => format!("rocm-sdk {} {}", sdk.version, sdk.family),
            Layout::System(_) => format!("HIP {}, the system's MIOpen", self.hip),
        }
    }
}

/// What torch/version.py says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Version {
    pub version: Option<String>,
    pub hip: Option<String>,
    pub cuda: Option<String>,
}

pub const LIBRARY: &str = "libMIOpen.so";

/// Paths come back as the hex of their bytes (`os.fsencode`): a path that
/// is not UTF-8 is a string of lone surrogates to python, which JSON
/// readers refuse (issue 59: "lone leading surrogate").
/// `managed`: PEP 668's marker in the stdlib, outside a venv: pip refuses
/// to install there, so the help to get a torch makes a venv first.
const FIND_SPEC: &str = r#"
import importlib.util, json, os, sys, sysconfig
spec = importlib.util.find_spec("torch")
dirs = list(spec.submodule_search_locations or []) if spec else []
hexed = lambda p: os.fsencode(p).hex()
managed = sys.prefix == sys.base_prefix and os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
print(json.dumps({"executable": hexed(sys.executable), "torch": hexed(dirs[0]) if dirs else None, "managed": managed}))
"#;

#[derive(Deserialize)]
struct Found {
    executable: String,
    torch: Option<String>,
    managed: bool,
}

/// A path from the hex of its bytes.
fn unhex(hex: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

/// The torch package directory.
pub fn find_dir(loc: &Locator) -> Result<PathBuf> {
    find(loc).map(|(dir, _)| dir)
}

/// The torch package directory, and the python that was asked for it
/// (none with --torch-dir).
fn find(loc: &Locator) -> Result<(PathBuf, Option<get::Asked>)> {
    let python = match loc {
        Locator::Dir(d) => return Ok((probe::package_dir(d)?, None)),
        Locator::Python(p) => p,
    };
    probe::is_python(python)?;
    let mut cmd = crate::proc::python(python)?;
    cmd.args(["-c", FIND_SPEC]);
    const OR_PYTHON: &str = "; or pass the python torch is in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir";
    // A python that cannot run is the --python given: that, first. Ctrl-C
    // while it is asked is an interruption (130), passed on as it is.
    let out = crate::proc::helper(cmd).map_err(probe::unless_interrupted)?;
    if !out.status.success() {
        let said = match out.stderr.trim() {
            "" => match out.status.code() {
                Some(c) => format!("it exited with status {c} and printed nothing"),
                None => format!("it ended with {} and printed nothing", out.status),
            },
            s => s.lines().last().unwrap_or(s).to_owned(),
        };
        return Err(get::no_rocm_torch(
            format!("{} could not look for torch: {said}", python.display()),
            None,
            false,
            OR_PYTHON,
        ));
    }
    let unexpected = || {
        hint(
            format!(
                "unexpected answer from {} when asked where torch is: {}",
                python.display(),
                out.stdout.trim().lines().next().unwrap_or("nothing")
            ),
            probe::NAME_IT,
        )
    };
    let found: Found = serde_json::from_str(&out.stdout).map_err(|_| unexpected())?;
    let executable = unhex(&found.executable).ok_or_else(unexpected)?;
    let asked = get::Asked {
        executable,
        managed: found.managed,
    };
    match found.torch {
        Some(t) => Ok((unhex(&t).ok_or_else(unexpected)?, Some(asked))),
        None => {
            let sudo = crate::owner::acting_for();
            let what = format!(
                "{} ({}) has no torch {}",
                python.display(),
                asked.executable.display(),
                match &sudo {
                    Some(who) => format!("that {who} can import (python runs as that user)"),
                    None => "installed".to_owned(),
                }
            );
            let e = get::no_rocm_torch(what.clone(), Some(&asked), false, OR_PYTHON);
            // Under sudo a torch only root can read is the likelier cause:
            // that first, then the torch to install.
            Err(match sudo {
                Some(_) => {
                    let rest = crate::error::help(&e).unwrap_or_default();
                    hint(what, format!("{}; or {rest}", probe::UNDER_SUDO))
                }
                None => e,
            })
        }
    }
}

/// How the refusal of a torch/lib outside torch starts its help.
pub const OUTSIDE_HELP: &str = "what is there may be other programs' too";

/// torch/lib a symlink that leads out of torch (into a system lib dir, say):
/// every write the tool makes into torch/lib would land there.
fn refuse_lib_outside(lib_dir: &Path, dir: &Path) -> Result<()> {
    let is_link = std::fs::symlink_metadata(lib_dir).is_ok_and(|m| m.file_type().is_symlink());
    let Ok(real) = lib_dir.canonicalize() else {
        return Ok(());
    };
    if !is_link || real.starts_with(dir) {
        return Ok(());
    }
    Err(hint(
        format!(
            "torch's lib directory {} is a symlink to {}, outside torch: rdna1-patch writes only inside torch; nothing was changed",
            lib_dir.display(),
            real.display()
        ),
        format!(
            "{OUTSIDE_HELP}. To fix this torch alone, give it a lib directory of its own (`{} && {}`), then run this again",
            crate::shell::as_run([Path::new("rm"), lib_dir]),
            crate::shell::as_run([Path::new("cp"), Path::new("-a"), &real, lib_dir]),
        ),
    ))
}

/// Find torch and its MIOpen; anything but a ROCm build is an error that
/// names what was found.
pub fn locate(loc: &Locator) -> Result<Torch> {
    crate::tally::count(crate::tally::What::TorchLocated);
    let (found, asked) = find(loc)?;
    // Canonical, so that "inside torch" below compares like with like.
    let dir = found.canonicalize().unwrap_or(found);
    let version = read_version(&dir)?;
    let lib_dir = dir.join("lib");
    refuse_lib_outside(&lib_dir, &dir)?;
    let library = lib_dir.join(LIBRARY);
    let named = version.version.as_deref().unwrap_or("(unknown version)");
    let Some(hip) = version.hip.clone() else {
        return Err(not_rocm(&dir, &version, &library, asked.as_ref()));
    };
    let python = match loc {
        Locator::Python(p) => Some(p.as_path()),
        Locator::Dir(_) => None,
    };
    let (library, layout) = which_library(&dir, library, python, named, &hip)?;
    if let Layout::System(sys) = &layout {
        return Ok(Torch {
            lib_dir: lib_dir.clone(),
            target: sys.copy.clone().unwrap_or_else(|| sys.library.clone()),
            dir,
            version: named.to_owned(),
            hip,
            library,
            layout,
            gpu_code: std::cell::OnceCell::new(),
        });
    }
    let root = match &layout {
        Layout::Bundled | Layout::System(_) => dir.clone(),
        Layout::RocmSdk(sdk) => sdk.package.clone(),
    };
    let target = match std::fs::canonicalize(&library) {
        Ok(t) => t,
        Err(e) => {
            return Err(hint(
                format!(
                    "torch {named} (hip {hip}) at {} has no usable {}: {e}",
                    dir.display(),
                    library.display()
                ),
                "reinstall torch (pip install --force-reinstall ...) so that its libMIOpen.so is back",
            ));
        }
    };
    if !target.starts_with(&root) {
        let owner = match &layout {
            Layout::Bundled | Layout::System(_) => format!("torch at {}", root.display()),
            Layout::RocmSdk(_) => format!("the rocm-sdk package {}", root.display()),
        };
        return Err(hint(
            format!(
                "{} is a symlink to {}, outside {owner}: rdna1-patch only replaces a file that belongs to torch",
                library.display(),
                target.display(),
            ),
            format!(
                "that file may be used by other programs (a system ROCm, say). To patch this torch alone, replace the symlink with a copy (`{}`) and install again",
                crate::shell::as_run([
                    Path::new("cp"),
                    Path::new("--remove-destination"),
                    &target,
                    &library
                ]),
            ),
        ));
    }
    let lib_dir = library.parent().unwrap_or(&lib_dir).to_owned();
    Ok(Torch {
        dir,
        lib_dir,
        version: named.to_owned(),
        hip,
        library,
        target,
        layout,
        gpu_code: std::cell::OnceCell::new(),
    })
}

/// The error for the torch in `dir` when its version.py says it is no ROCm
/// build (a CUDA or CPU one): what a run on an AMD card needs to know
/// before it imports it.
pub fn not_a_rocm_build(dir: &Path) -> Option<anyhow::Error> {
    let version = read_version(dir).ok()?;
    let library = dir.join("lib").join(LIBRARY);
    version
        .hip
        .is_none()
        .then(|| not_rocm(dir, &version, &library, None))
}

/// The error for a torch that is no ROCm build, found by `asked`.
fn not_rocm(
    dir: &Path,
    version: &Version,
    library: &Path,
    asked: Option<&get::Asked>,
) -> anyhow::Error {
    let named = version.version.as_deref().unwrap_or("(unknown version)");
    let kind = match &version.cuda {
        Some(c) => format!("a CUDA {c} build"),
        None => "a CPU-only build".to_owned(),
    };
    get::no_rocm_torch(
        format!(
            "torch {named} at {} is {kind}, not a ROCm one: torch.version.hip is None{}",
            dir.display(),
            if library.exists() {
                ""
            } else {
                " and torch/lib has no libMIOpen.so"
            }
        ),
        asked,
        true,
        "",
    )
}

/// torch/lib/libMIOpen.so when torch bundles one, else the rocm-sdk
/// package's.
fn which_library(
    dir: &Path,
    library: PathBuf,
    python: Option<&Path>,
    named: &str,
    hip: &str,
) -> Result<(PathBuf, Layout)> {
    Ok(if library.symlink_metadata().is_ok() {
        (library, Layout::Bundled)
    } else {
        match crate::rocm_sdk::find(dir, python)? {
            // rocm_sdk gives the package by its real path, checked to be in
            // torch's site-packages.
            Some(sdk) => (sdk.library.clone(), Layout::RocmSdk(sdk)),
            None => {
                if let Some(sys) = crate::torch::system::detect(dir)? {
                    refuse_packaged_torch(dir, named)?;
                    let library = dir.join("lib").join(&sys.needed);
                    return Ok((library, Layout::System(Box::new(sys))));
                }
                return Err(hint(
                    format!(
                        "torch {named} (hip {hip}) at {} has no MIOpen: torch/lib has no libMIOpen.so, and there is no rocm-sdk libraries package ({}*) beside it in {}",
                        dir.display(),
                        crate::rocm_sdk::LIBRARIES_PACKAGE,
                        dir.parent().unwrap_or(Path::new("/")).display()
                    ),
                    "reinstall torch (a pytorch.org ROCm wheel bundles libMIOpen.so; TheRock's torch needs its libraries: `pip install \"rocm[libraries]\"`)",
                ));
            }
        }
    })
}

/// How the refusal of a package's torch starts its help: the in-place
/// route passes that error on, where others give way to the build's own.
pub const PACKAGED_HELP: &str = "make a venv with a torch of your own";

/// A torch a package manager installed is the package manager's: every
/// change to it is undone by the next upgrade and breaks its verify.
pub fn refuse_packaged_torch(torch_dir: &Path, version: &str) -> Result<()> {
    let probe = torch_dir.join("lib/libtorch_hip.so");
    let probe = if probe.is_file() {
        probe
    } else {
        torch_dir.join("version.py")
    };
    let Some((manager, package)) = crate::packages::owner(&probe)
        .package()
        .map(|(m, p)| (m, p.to_owned()))
    else {
        return Ok(());
    };
    Err(hint(
        format!(
            "torch {version} at {} belongs to the {} package {package}: rdna1-patch never changes a file a package manager owns; nothing was changed",
            torch_dir.display(),
            manager.program()
        ),
        format!(
            "{PACKAGED_HELP} and fix that one: TheRock's native torch (`{}`), then `rdna1-patch install --into-torch`; or a torch you built for gfx1010 against this system's ROCm",
            native_torch("gfx1010")
        ),
    ))
}

/// Read torch/version.py as text: it is a generated file of simple
/// assignments, and executing it is what we avoid.
pub fn read_version(dir: &Path) -> Result<Version> {
    let path = dir.join("version.py");
    let text = match std::fs::read_to_string(&path).at("read", &path) {
        Err(e) if crate::error::is_not_found(&e) => return Err(damaged(dir, "version.py")),
        read => read?,
    };
    Ok(parse_version(&text))
}

/// The fix for a damaged torch: the same torch again, whole.
pub const REINSTALL: &str = "reinstall it with the pip command it came from plus --force-reinstall (`pip install --force-reinstall torch ...`, with the same --index-url), then run this again";

/// The error for a torch missing a file every torch has: damaged (a pip
/// install stopped half-way, a file deleted), and reinstalled whole.
pub fn damaged(dir: &Path, file: &str) -> anyhow::Error {
    hint(
        format!(
            "torch at {} is damaged: its {file} is missing, and every torch has one",
            dir.display()
        ),
        REINSTALL,
    )
}

fn parse_version(text: &str) -> Version {
    let mut v = Version::default();
    for line in text.lines() {
        let Some((lhs, rhs)) = line.split_once('=') else {
            continue;
        };
        // `hip: Optional[str] = '6.2...'` has an annotation before the `=`.
        let key = lhs.split(':').next().unwrap_or("").trim();
        let rhs = rhs.trim();
        let value = if rhs == "None" {
            None
        } else {
            let q = rhs.chars().next().filter(|c| *c == '\'' || *c == '"');
            match q {
                Some(q) => rhs[1..].split(q).next().map(str::to_owned),
                None => continue,
            }
        };
        match key {
            "__version__" => v.version = value,
            "hip" => v.hip = value,
            "cuda" => v.cuda = value,
            _ => {}
        }
    }
    v
}

/// The ROCm patch level torch was built for, when its version says
/// ("2.5.1+rocm6.2.4" -> 4; "2.5.1+rocm6.2" says nothing).
pub fn rocm_patch(torch_version: &str) -> Option<u32> {
    let rocm = torch_version.split("+rocm").nth(1)?;
    rocm.split('.').nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_generated_version_py() {
        let v = parse_version(
            "from typing import Optional\n__version__ = '2.5.1+rocm6.2'\ndebug = False\ncuda: Optional[str] = None\nhip: Optional[str] = '6.2.41133-dd7f95766'\n",
        );
        assert_eq!(v.version.as_deref(), Some("2.5.1+rocm6.2"));
        assert_eq!(v.hip.as_deref(), Some("6.2.41133-dd7f95766"));
        assert_eq!(v.cuda, None);
        let cuda = parse_version("__version__ = \"2.5.1+cu124\"\ncuda = \"12.4\"\nhip = None\n");
        assert_eq!(cuda.cuda.as_deref(), Some("12.4"));
        assert_eq!(cuda.hip, None);
    }

    #[test]
    fn versions() {
        assert_eq!(rocm_patch("2.5.1+rocm6.2.4"), Some(4));
        assert_eq!(rocm_patch("2.5.1+rocm6.2"), None);
    }
}
