//! What is compiled into the binary: the profiles under `profiles/` and
//! the patch series under `patches/`, read as a series directory, listed,
//! and exported to disk.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use include_dir::{Dir, include_dir};

use super::{DEFAULT_PROFILE, Origin, Profile};
use crate::error::hint;

static PROFILES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/profiles");
pub(super) static PATCHES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/patches");

/// Where a component's patch series lives.
#[derive(Debug, Clone)]
pub enum SeriesDir {
    Embedded(&'static Dir<'static>, String),
    Disk(PathBuf),
    /// No series: the project is built as released.
    Empty,
}

/// A series line that names a patch of a sibling series, `../SERIES/FILE`:
/// the way one patch text serves several series without a copy. Nothing
/// deeper or further up is a patch of this tree.
pub fn sibling(name: &str) -> Option<(&str, &str)> {
    let (series, file) = name.strip_prefix("../")?.split_once('/')?;
    let plain = |s: &str| !s.is_empty() && !s.starts_with('.') && !s.contains('/');
    (plain(series) && plain(file)).then_some((series, file))
}

/// Where a `../SERIES/FILE` line of the series at `dir` (relative to the
/// patches tree) finds its patch; None for a line of any other shape.
fn sibling_path(dir: &Path, name: &str) -> Option<PathBuf> {
    let (series, file) = sibling(name)?;
    Some(
        dir.parent()
            .unwrap_or(Path::new(""))
            .join(series)
            .join(file),
    )
}

impl SeriesDir {
    /// Read a file of the series, or with `../SERIES/FILE` of a sibling
    /// series; `None` when it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<String>> {
        let embedded = |dir: &'static Dir<'static>| match sibling_path(dir.path(), name) {
            Some(path) => PATCHES.get_file(path),
            None => dir.get_file(dir.path().join(name)),
        };
        match self {
            SeriesDir::Embedded(dir, _) => match embedded(dir) {
                Some(f) => Ok(Some(
                    f.contents_utf8()
                        .with_context(|| format!("{name} in {self} is not UTF-8"))?
                        .to_owned(),
                )),
                None => Ok(None),
            },
            SeriesDir::Disk(dir) => {
                let path = dir.join(name);
                if std::fs::symlink_metadata(&path).is_err() {
                    return Ok(None);
                }
                crate::fsutil::read_small(&path, 16 << 20).map(Some)
            }
            SeriesDir::Empty => Ok(None),
        }
    }

    /// The directory on disk, when there is one (`patches refresh` writes there).
    pub fn disk_path(&self) -> Option<&Path> {
        match self {
            SeriesDir::Embedded(..) | SeriesDir::Empty => None,
            SeriesDir::Disk(p) => Some(p),
        }
    }
}

impl std::fmt::Display for SeriesDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SeriesDir::Embedded(_, rel) => write!(f, "built-in patches/{rel}"),
            SeriesDir::Disk(p) => write!(f, "{}", p.display()),
            SeriesDir::Empty => f.write_str("no patch series"),
        }
    }
}

/// The names of the built-in series (`miopen/rocm-6.2.4`, ...).
pub fn builtin_series() -> Vec<String> {
    let mut out = Vec::new();
    for component in PATCHES.dirs() {
        for series in component.dirs() {
            if series.get_file(series.path().join("series")).is_some() {
                out.push(series.path().display().to_string());
            }
        }
    }
    out
}

pub(super) fn builtin(name: &str) -> Option<&'static str> {
    PROFILES
        .get_file(format!("{name}.toml"))
        .and_then(|f| f.contents_utf8())
}

/// Names of the profiles compiled into this binary.
pub fn builtin_names() -> Vec<String> {
    let mut names: Vec<String> = PROFILES
        .files()
        .filter_map(|f| {
            let p = f.path();
            (p.extension()? == "toml")
                .then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

/// The text of a built-in profile, for `profiles show`.
pub fn builtin_text(name: &str) -> Option<&'static str> {
    builtin(name)
}

/// `profiles list --json`: each built-in profile as it parses.
pub fn list_json() -> Result<serde_json::Value> {
    let mut out = Vec::new();
    for name in builtin_names() {
        let p = Profile::load(&name)?;
        let mut v = serde_json::to_value(&p)?;
        v["default"] = serde_json::Value::Bool(name == DEFAULT_PROFILE);
        v["install_prefix"] = serde_json::to_value(p.install_prefix()?)?;
        out.push(v);
    }
    Ok(serde_json::json!({
        "schema_version": crate::version::SCHEMA_VERSION,
        "profiles": out,
    }))
}

/// `profiles export NAME DIR`: the built-in profile as DIR/NAME.toml with
/// its series beside it, laid out so the file works as `--profile
/// DIR/NAME.toml` and its patches can be edited. Nothing that exists is
/// overwritten: the whole export is refused before anything is written.
pub fn export(name: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let text = builtin(name).ok_or_else(|| {
        hint(
            format!("no built-in profile named `{name}`"),
            format!("built-in profiles: {}", builtin_names().join(", ")),
        )
    })?;
    let profile = Profile::parse(text, name, Origin::Embedded)?;
    let mut files: Vec<(PathBuf, &[u8])> =
        vec![(dir.join(format!("{name}.toml")), text.as_bytes())];
    for patches in profile
        .components
        .values()
        .filter_map(|c| c.patches.as_ref())
    {
        let series = PATCHES
            .get_dir(patches)
            .with_context(|| format!("patches/{patches} is not in this binary"))?;
        for f in series.files() {
            files.push((dir.join(f.path()), f.contents()));
        }
        // The patches it shares with a sibling series go with it, where
        // its `../SERIES/FILE` lines find them.
        let lines = series
            .get_file(series.path().join("series"))
            .and_then(|f| f.contents_utf8())
            .unwrap_or_default();
        for line in lines.lines() {
            let word = line.split('#').next().unwrap_or_default();
            let Some(rel) = word
                .split_whitespace()
                .next()
                .and_then(|name| sibling_path(series.path(), name))
            else {
                continue;
            };
            let f = PATCHES
                .get_file(&rel)
                .with_context(|| format!("patches/{} is not in this binary", rel.display()))?;
            files.push((dir.join(rel), f.contents()));
        }
    }
    if let Some((existing, _)) = files.iter().find(|(p, _)| p.exists()) {
        return Err(hint(
            format!("{} already exists", existing.display()),
            "export into an empty directory, or move the old profile away; nothing was written",
        ));
    }
    for (path, bytes) in &files {
        if let Some(parent) = path.parent() {
            crate::fsutil::create_dir_all(parent)?;
        }
        crate::fsutil::write_atomic(path, bytes, None)?;
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}

/// The built-in profiles, each with the ROCm release (major.minor) it is
/// for, in name order.
fn builtin_releases() -> Vec<(String, String)> {
    builtin_names()
        .into_iter()
        .filter_map(|n| {
            let p = Profile::load(&n).ok()?;
            Some((n, crate::version::major_minor(&p.rocm.version)))
        })
        .collect()
}

/// How a ROCm install of release `found` fits `profile`.
pub enum RocmFit {
    /// It is the profile's release.
    Profile,
    /// Another release, which this built-in profile is for.
    Other(String),
    /// A release no built-in profile is for (Debian 12's ROCm 5.2, say):
    /// why, and the way out.
    Unserved(anyhow::Error),
}

/// How the ROCm `found` at `path` fits `profile`.
pub fn rocm_fit(profile: &Profile, found: &str, path: &Path) -> RocmFit {
    let release = crate::version::major_minor(found);
    if release == crate::version::major_minor(&profile.rocm.version) {
        return RocmFit::Profile;
    }
    let releases = builtin_releases();
    if let Some((name, _)) = releases.iter().find(|(_, r)| *r == release) {
        return RocmFit::Other(name.clone());
    }
    let served: Vec<&str> = releases.iter().map(|(_, r)| r.as_str()).collect();
    RocmFit::Unserved(hint(
        format!(
            "ROCm {found} at {}: no profile is for ROCm {release} (the built-in profiles are for ROCm {})",
            path.display(),
            served.join(", ")
        ),
        format!(
            "install ROCm {} for profile {} (or a release another profile is for), or compile nothing: pull a published build (`rdna1-patch trust KEY`, then `rdna1-patch build --from REF`)",
            crate::version::major_minor(&profile.rocm.version),
            profile.name
        ),
    ))
}
