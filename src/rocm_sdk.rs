//! The rocm-sdk layout (TheRock's Python packages, and pytorch.org ROCm
//! wheels from 7.14): torch bundles no ROCm library, and `torch/_rocm_init.py`
//! preloads each one by absolute path through `rocm_sdk.initialize_process`.
//! MIOpen is `lib/libMIOpen.so*` in the libraries package beside torch in
//! site-packages: `_rocm_sdk_libraries` with per-target device overlays
//! (the multi-arch index, `torch[device-gfx1010]`), or one
//! `_rocm_sdk_libraries_<family>` per target family (the older releases).
//!
//! We ask the user's python with `import rocm_sdk` only (pure python; no GPU
//! initialisation) and the target family fixed, so that `find_libraries`
//! does not run `offload-arch`. When that fails, or torch was named by its
//! directory, the same answer is read from the filesystem.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::error::hint;

/// The libraries package's name: alone (multi-arch), or before the family.
pub const LIBRARIES_PACKAGE: &str = "_rocm_sdk_libraries";

/// Whether `name` is a rocm-sdk libraries package: `_rocm_sdk_libraries`,
/// or that with `_<family>` and perhaps a nonce after it.
pub fn is_libraries_package(name: &str) -> bool {
    name.strip_prefix(LIBRARIES_PACKAGE)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
}

/// Where the rocm-sdk layout keeps torch's MIOpen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sdk {
    /// The SDK's version, e.g. "7.14.0" (pip's, else rocm_sdk.__version__).
    pub version: String,
    /// Which libraries: "gfx101X-dgpu" (a per-family package), or
    /// "multi-arch, device gfx1010, gfx1030" with the device overlays
    /// installed.
    pub family: String,
    /// The libraries package in torch's site-packages: the library must stay in it.
    pub package: PathBuf,
    /// The path `rocm_sdk.find_libraries("miopen")` gives: what the preload loads.
    pub library: PathBuf,
    /// `_rocm_sdk_core/lib` (the HIP runtime, comgr, hipRTC), when found.
    pub core_lib: Option<PathBuf>,
    /// "rocm_sdk" (asked through python) or "filesystem".
    pub found_by: &'static str,
    /// Why python's answer was not used, when the files were read instead.
    pub note: Option<String>,
}

/// A GPU target as a device package names it (gfx1010, gfx90a): what is
/// not one, a terminal escape say, is never printed.
fn is_target(name: &str) -> bool {
    name.strip_prefix("gfx").is_some_and(|n| {
        !n.is_empty() && n.len() <= 8 && n.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// How a multi-arch install is named: its device overlays, sorted.
fn multi_arch(targets: &[String]) -> String {
    let mut t: Vec<String> = targets.iter().filter(|t| is_target(t)).cloned().collect();
    t.sort();
    if t.is_empty() {
        "multi-arch, no device package".to_owned()
    } else {
        format!("multi-arch, device {}", t.join(", "))
    }
}

/// Asked of the user's python. With per-family packages the family is fixed
/// first, from ROCM_SDK_TARGET_FAMILY or the one installed, so that
/// `find_libraries` never runs `offload-arch`; with the arch-neutral
/// package of the multi-arch index there is no family to fix, and torch's
/// own preload asks for none.
const QUERY: &str = r#"
import json, os, sys
from importlib import metadata
out = {}
try:
    import rocm_sdk
    from rocm_sdk import _dist_info as d
    try:
        out["version"] = metadata.version("rocm")
    except Exception:
        out["version"] = rocm_sdk.__version__
    pkg = d.ALL_PACKAGES["libraries"]
    if pkg.is_target_specific:
        installed = sorted(f for f in d.AVAILABLE_TARGET_FAMILIES if pkg.has_py_package(f))
        family = os.environ.get("ROCM_SDK_TARGET_FAMILY") or (installed[0] if len(installed) == 1 else None)
        out.update(installed=installed, family=family)
        if family:
            os.environ["ROCM_SDK_TARGET_FAMILY"] = family
    else:
        prefix = "rocm-sdk-device-"
        names = {(dist.metadata["Name"] or "").lower().replace("_", "-") for dist in metadata.distributions()}
        out["targets"] = sorted(n[len(prefix):] for n in names if n.startswith(prefix))
    if out.get("family") or not pkg.is_target_specific:
        out["miopen"] = str(rocm_sdk.find_libraries("miopen")[0])
        out["core"] = str(rocm_sdk.find_libraries("amdhip64")[0].parent)
except Exception as e:
    out["error"] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"#;

#[derive(Deserialize, Default)]
struct Answer {
    version: Option<String>,
    #[serde(default)]
    installed: Vec<String>,
    family: Option<String>,
    /// Device overlays of a multi-arch install; None for per-family.
    targets: Option<Vec<String>>,
    miopen: Option<PathBuf>,
    core: Option<PathBuf>,
    error: Option<String>,
}

/// The rocm-sdk MIOpen of the torch in `torch_dir`. `python` is the user's
/// interpreter when torch was found through one. Ok(None): no rocm-sdk
/// libraries package is there at all.
pub fn find(torch_dir: &Path, python: Option<&Path>) -> Result<Option<Sdk>> {
    let site = torch_dir.parent().unwrap_or(Path::new("/"));
    let mut asked = None;
    let mut note = None;
    if let Some(python) = python {
        match ask(python) {
            Ok(a) => {
                note = a.error.clone();
                asked = Some(a);
            }
            Err(e) => note = Some(format!("{e:#}")),
        }
    }
    if let Some(a) = &asked {
        if a.installed.len() > 1 && a.family.is_none() {
            return Err(several(&a.installed));
        }
        let family = match (&a.targets, &a.family) {
            (Some(targets), _) => Some(multi_arch(targets)),
            (None, family) => family.clone(),
        };
        if let (Some(version), Some(family), Some(miopen)) = (&a.version, family, &a.miopen) {
            let package = confined(miopen, site)?;
            return in_site(
                Sdk {
                    version: version.clone(),
                    family,
                    package,
                    library: miopen.clone(),
                    core_lib: a.core.clone(),
                    found_by: "rocm_sdk",
                    note: None,
                },
                site,
            )
            .map(Some);
        }
    }
    let fallback = match from_files(site)? {
        Some(s) => Some(in_site(Sdk { note, ..s }, site)?),
        None => None,
    };
    if fallback.is_none()
        && let Some(Answer {
            version: Some(_),
            error: Some(e),
            ..
        }) = &asked
    {
        // rocm_sdk is there but could not name MIOpen: say why.
        return Err(hint(
            format!("rocm_sdk cannot find MIOpen: {e}"),
            "install the libraries for your GPU (`pip install \"rocm[libraries]\"`, or torch[device-gfx1010] from TheRock's index)",
        ));
    }
    Ok(fallback)
}

/// The swap replaces the file python names, so python's answer is held to
/// what torch's own preload can load: a `libMIOpen.so*` in `lib/` of a
/// libraries package in torch's own site-packages. Anything else (another
/// environment's package, the HIP runtime, a path outside site-packages)
/// is refused before a byte is written.
fn confined(miopen: &Path, site: &Path) -> Result<PathBuf> {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let named_miopen = miopen
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libMIOpen.so"));
    match package_of(miopen) {
        Some(package)
            if named_miopen
                && package
                    .parent()
                    .is_some_and(|p| canonical(p) == canonical(site)) =>
        {
            Ok(package)
        }
        _ => Err(hint(
            format!(
                "rocm_sdk.find_libraries('miopen') gave {}, which is not a libMIOpen.so* in a {LIBRARIES_PACKAGE}* package beside torch in {}",
                miopen.display(),
                site.display()
            ),
            "rdna1-patch replaces only the MIOpen of torch's own environment; run it with that environment's python (--python), or check what ROCM_SDK_TARGET_FAMILY and rocm_sdk say. Nothing was changed",
        )),
    }
}

/// The package must really be in torch's site-packages: a package that is
/// a symlink to another environment's passes every check made on names, and
/// the swap would write there. Judged by real paths, before anything is
/// written; the package is kept by its real path, which the journal
/// records and rollback checks again.
fn in_site(mut sdk: Sdk, site: &Path) -> Result<Sdk> {
    let real = |p: &Path| {
        std::fs::canonicalize(p).with_context(|| format!("cannot resolve {}", p.display()))
    };
    let (package, real_site) = (real(&sdk.package)?, real(site)?);
    if package.parent() != Some(real_site.as_path()) {
        return Err(hint(
            format!(
                "the rocm-sdk package {} is {}, outside torch's site-packages {}: rdna1-patch replaces only the MIOpen of torch's own environment",
                sdk.package.display(),
                package.display(),
                site.display()
            ),
            "that package belongs to another environment (a symlink put it here); install torch's own libraries there (`pip install --force-reinstall \"rocm[libraries]\"`), or run rdna1-patch with the other environment's python. Nothing was changed",
        ));
    }
    // The file name is kept: it is the name the preload loads.
    if let Some(name) = sdk.library.file_name() {
        sdk.library = package.join("lib").join(name);
    }
    sdk.package = package;
    Ok(sdk)
}

/// How long the rocm_sdk query may take: it imports a pure-python package
/// and answers in well under a second; past this the files are read instead
/// (a hung python must not cost the user the helpers' two minutes).
const QUERY_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

fn ask(python: &Path) -> Result<Answer> {
    let mut cmd = crate::proc::python(python)?;
    cmd.args(["-c", QUERY]);
    let out = crate::proc::run(cmd, QUERY_LIMIT)?;
    let Some(status) = out.status else {
        anyhow::bail!(
            "{} did not answer the rocm_sdk query within {} s and was stopped",
            python.display(),
            QUERY_LIMIT.as_secs()
        );
    };
    if !status.success() {
        anyhow::bail!("{} failed: {}", python.display(), out.stderr.trim());
    }
    let a: Answer = serde_json::from_str(out.stdout.trim())
        .with_context(|| format!("unexpected answer from {}", python.display()))?;
    Ok(a)
}

fn several(families: &[String]) -> anyhow::Error {
    let mut families = families.to_vec();
    families.sort();
    hint(
        format!(
            "several rocm-sdk libraries packages are installed ({}), and ROCM_SDK_TARGET_FAMILY does not say which one torch loads",
            families.join(", ")
        ),
        format!(
            "set ROCM_SDK_TARGET_FAMILY to your GPU's family (for an RX 5000 card: ROCM_SDK_TARGET_FAMILY={} rdna1-patch ...), as torch itself does",
            families
                .iter()
                .find(|f| f.starts_with("gfx101"))
                .map_or("gfx101X-dgpu", String::as_str)
        ),
    )
}

/// The libraries package (`_rocm_sdk_libraries[_<family>]`) above
/// `lib/libMIOpen.so*`.
pub fn package_of(library: &Path) -> Option<PathBuf> {
    let package = library.parent()?.parent()?;
    is_libraries_package(package.file_name()?.to_str()?).then(|| package.to_owned())
}

/// The same answer from the files: the arch-neutral libraries package of a
/// multi-arch install, else the one per-family package in `site` (or the
/// one ROCM_SDK_TARGET_FAMILY names); its first `lib/libMIOpen.so*` in
/// sorted order as `find_libraries` takes it; the version pip recorded.
fn from_files(site: &Path) -> Result<Option<Sdk>> {
    let mut packages = Vec::new();
    let mut neutral = None;
    let mut core_lib = None;
    let mut targets = Vec::new();
    let Ok(entries) = std::fs::read_dir(site) else {
        return Ok(None);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(t) = name
            .strip_prefix("rocm_sdk_device_")
            .and_then(|r| r.split_once('-'))
            .filter(|(_, rest)| rest.ends_with(".dist-info"))
        {
            targets.push(t.0.to_owned());
        }
        let lib = e.path().join("lib");
        if !lib.is_dir() {
            continue;
        }
        if name == LIBRARIES_PACKAGE {
            neutral = Some(e.path());
        } else if let Some(rest) = name.strip_prefix(&format!("{LIBRARIES_PACKAGE}_")) {
            // A family is letters, digits and '_' (gfx101X_dgpu): a name
            // with anything else, a terminal escape say, is no package.
            if rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                packages.push((rest.to_owned(), e.path()));
            }
        } else if name.starts_with("_rocm_sdk_core") {
            core_lib = Some(lib);
        }
    }
    let (family, package) = match neutral {
        Some(p) if packages.is_empty() || multi_arch_meta(site) => (multi_arch(&targets), p),
        _ => match choose_family(packages)? {
            Some(chosen) => chosen,
            None => return Ok(None),
        },
    };
    let mut libs: Vec<PathBuf> = std::fs::read_dir(package.join("lib"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libMIOpen.so"))
        })
        .collect();
    libs.sort();
    let Some(library) = libs.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some(Sdk {
        version: version_in(site).unwrap_or_else(|| "unknown".to_owned()),
        family,
        package,
        library,
        core_lib,
        found_by: "filesystem",
        note: None,
    }))
}

/// Whether the installed rocm_sdk is a multi-arch build: its
/// `_dist_info.py` names the libraries package without a family.
fn multi_arch_meta(site: &Path) -> bool {
    std::fs::read_to_string(site.join("rocm_sdk/_dist_info.py")).is_ok_and(|t| {
        t.lines().any(|l| {
            l.starts_with("ALL_PACKAGES[\"libraries\"].dist_package_template")
                && !l.contains("{target_family}")
        })
    })
}

/// The per-family package torch loads: the one installed, or the one
/// ROCM_SDK_TARGET_FAMILY names. `packages` are (name after the prefix, dir).
fn choose_family(mut packages: Vec<(String, PathBuf)>) -> Result<Option<(String, PathBuf)>> {
    packages.sort();
    // The package name is the family with `-` as `_`, then perhaps a nonce.
    // Empty is unset, as for rocm_sdk itself (`os.environ.get(..) or`).
    let wanted = std::env::var("ROCM_SDK_TARGET_FAMILY")
        .ok()
        .filter(|w| !w.is_empty())
        .map(|w| w.replace('-', "_"));
    let chosen: Vec<_> = packages
        .into_iter()
        .filter(|(fam, _)| {
            wanted
                .as_deref()
                .is_none_or(|w| fam == w || fam.starts_with(&format!("{w}_")))
        })
        .collect();
    match chosen.as_slice() {
        [] => Ok(None),
        [(family, package)] => Ok(Some((family_name(family), package.clone()))),
        many => Err(several(
            &many.iter().map(|(f, _)| family_name(f)).collect::<Vec<_>>(),
        )),
    }
}

/// "gfx101X_dgpu" (the package name's form) -> "gfx101X-dgpu".
fn family_name(package_suffix: &str) -> String {
    package_suffix.replace('_', "-")
}

/// The SDK version: pip's `rocm-<version>.dist-info`, else the last
/// `__version__` of rocm_sdk/_dist_info.py (the template says "DEFAULT",
/// and the build appends the real one after it).
pub fn version_in(site: &Path) -> Option<String> {
    let entries = std::fs::read_dir(site).ok()?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(v) = name
            .strip_prefix("rocm-")
            .and_then(|r| r.strip_suffix(".dist-info"))
        {
            return Some(v.to_owned());
        }
    }
    let text = std::fs::read_to_string(site.join("rocm_sdk/_dist_info.py")).ok()?;
    text.lines().rev().find_map(|l| {
        let rest = l
            .strip_prefix("__version__")?
            .trim_start()
            .strip_prefix('=')?;
        let v = rest.trim().trim_matches(['"', '\'']);
        (!v.is_empty() && v != "DEFAULT").then(|| v.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_that_are_not_targets_are_not_shown() {
        let shown = multi_arch(&[
            "gfx1010".into(),
            "gfx1030\x1b]0;owned\x07".into(),
            "x".into(),
        ]);
        assert_eq!(shown, "multi-arch, device gfx1010");
    }

    #[test]
    fn package_and_family_names() {
        assert_eq!(
            package_of(Path::new(
                "/s/_rocm_sdk_libraries_gfx101X_dgpu/lib/libMIOpen.so.1"
            )),
            Some(PathBuf::from("/s/_rocm_sdk_libraries_gfx101X_dgpu"))
        );
        assert_eq!(package_of(Path::new("/s/torch/lib/libMIOpen.so")), None);
        assert_eq!(family_name("gfx101X_dgpu"), "gfx101X-dgpu");
    }
}
