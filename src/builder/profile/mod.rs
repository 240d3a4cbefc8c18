//! Profiles: everything a build needs, pinned, in one TOML file.
//!
//! The profiles under `profiles/` and the patch series under `patches/` are
//! compiled into the binary, so an installed `rdna1-patch` works without a
//! checkout. `--profile FILE` loads one from disk instead; its patch series is
//! then found relative to the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::hint;

mod builtin;
mod check;
mod pin;

use builtin::{PATCHES, builtin};
pub use builtin::{
    RocmFit, SeriesDir, builtin_names, builtin_series, builtin_text, export, list_json, rocm_fit,
    sibling,
};
use check::{check_compat, component_problem, is_inner_path, is_plain_name};
pub use pin::Source;

/// A profile is a few KB of TOML; reading anything much larger is a mistake.
const PROFILE_LIMIT: u64 = 1 << 20;

/// The profile used when `--profile` is not given.
pub const DEFAULT_PROFILE: &str = "rocm-6.2.4";

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Where `build` installs; `--prefix` overrides. Unset (the built-in
    /// profiles), it is a directory the user owns: see [`Profile::install_prefix`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<PathBuf>,
    pub rocm: Rocm,
    pub components: BTreeMap<String, Component>,
    /// Where this profile came from, for messages and for finding its patches.
    #[serde(skip)]
    pub origin: Origin,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rocm {
    /// The ROCm install the build compiles against; `--rocm` overrides.
    pub path: PathBuf,
    /// The ROCm release this profile targets, e.g. "6.2.4".
    pub version: String,
    /// The `torch.version.hip` major.minor a matching torch wheel reports, e.g. "6.2".
    pub torch_hip: String,
    /// How a user gets this ROCm, when it is not AMD's installer (TheRock's
    /// devel SDK comes from pip): what `doctor` says when it is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    /// What the project calls itself in messages ("rocBLAS"); the
    /// component's key when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// A git repository, or with `sha256` a tarball.
    pub url: String,
    /// The tag to fetch. A profile may pin a `commit` alone instead (a
    /// monorepo's release pins a commit of a branch); it must then be the
    /// full 40-digit id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The commit the tag must resolve to; without it the first fetch is
    /// recorded in the work dir's lock file and later fetches must agree.
    #[serde(default)]
    pub commit: Option<String>,
    /// The SHA-256 of the tarball at `url` (a source with no git history
    /// that can be reached, e.g. Debian's `.orig.tar.gz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The project's directory in a monorepo, e.g. "projects/miopen". The
    /// fetch is then blobless and checks out only this directory and
    /// `sparse`; CMake's source dir and the patches' root are this directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
    /// Directories outside `subdir` that the project's CMake reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sparse: Vec<String>,
    /// Other sources the build reads, each pinned as the component's own
    /// and fetched beside it; `{NAME}` in a define is its directory.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub with: BTreeMap<String, Source>,
    /// The patch series directory, below `patches/` (embedded profiles) or
    /// relative to the profile file (profiles loaded from disk); none for a
    /// project built as it is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<String>,
    /// A series of the user's own, applied after `patches` (relative to the
    /// profile file); `--extra-patches` overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_patches: Option<String>,
    /// SONAME of the library the component installs, e.g. "libMIOpen.so.1".
    pub soname: String,
    /// The Tensile directory the component installs, relative to the
    /// prefix (rocBLAS's `lib/rocblas/library`): checked before install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensile: Option<String>,
    /// What a toolchain may need of this release that is known to apply to
    /// it (`builder::compat::KNOWN`): met when the toolchain needs it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compat: Vec<String>,
    /// What a first build costs, said before it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Files the build needs in the ROCm install, checked before the fetch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Require>,
    pub cmake: CmakeSettings,
}

/// A file of the ROCm install a build needs, and where it comes from.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Require {
    /// Relative to the ROCm path, e.g. "include/roctracer/roctx.h".
    pub file: String,
    /// The package that has it, for the help line.
    pub from: String,
}

/// A first build's time and disk, as measured (or "not yet measured").
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    pub time: String,
    /// Unset until measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    /// A no-op rebuild's time, where it is not seconds (rocBLAS's build
    /// checks Tensile's generated files again each time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CmakeSettings {
    /// "Ninja" or "Unix Makefiles"; Ninja falls back to Make when ninja is missing.
    #[serde(default = "default_generator")]
    pub generator: String,
    #[serde(default = "default_build_type")]
    pub build_type: String,
    /// `-D` defines. `{rocm}` expands to the ROCm path.
    #[serde(default)]
    pub defines: BTreeMap<String, String>,
    /// ccache, sccache, distcc or none; unset: ccache when installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<crate::builder::launcher::Kind>,
}

fn default_generator() -> String {
    "Ninja".into()
}

fn default_build_type() -> String {
    "Release".into()
}

#[derive(Debug, Clone, Default)]
pub enum Origin {
    #[default]
    Embedded,
    File(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Embedded => f.write_str("built-in"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Where builds go when neither `--prefix` nor the profile says:
/// `$XDG_DATA_HOME/rdna1-patch/<profile>` (~/.local/share/...), a
/// directory the user owns, so a build never fails at its last step for
/// want of root. torch gets a copy of the library, so the prefix need not
/// be system-wide.
pub fn default_prefix(profile: &str) -> Result<PathBuf> {
    crate::fsutil::project_dirs()
        .map(|d| d.data_dir().join(profile))
        .context("cannot find a data directory ($HOME is not set); pass --prefix")
}

impl Profile {
    /// Where `build` installs this profile, unless `--prefix` says.
    pub fn install_prefix(&self) -> Result<PathBuf> {
        self.install_prefix_for("miopen")
    }

    /// Where `build` installs `component`, unless `--prefix` says: the
    /// profile's prefix for MIOpen, and one named for the component beside
    /// it for any other (`rocm-6.4.3-rocblas`), so that two builds of one
    /// profile never replace each other; a profile that sets `prefix` has
    /// it for each (`build` refuses one component's build over another's).
    pub fn install_prefix_for(&self, component: &str) -> Result<PathBuf> {
        match (&self.prefix, component) {
            (Some(p), _) => Ok(p.clone()),
            (None, "miopen") => default_prefix(&self.name),
            (None, other) => default_prefix(&format!("{}-{other}", self.name)),
        }
    }

    /// Load a profile by built-in name, or from a file when the argument is a path.
    pub fn load(spec: &str) -> Result<Profile> {
        let looks_like_path = spec.contains('/') || spec.ends_with(".toml");
        if looks_like_path || (Path::new(spec).is_file() && builtin(spec).is_none()) {
            return Profile::from_file(Path::new(spec));
        }
        match builtin(spec) {
            Some(text) => {
                Profile::parse(text, &format!("built-in profile {spec}"), Origin::Embedded)
            }
            None => Err(hint(
                format!("no built-in profile named `{spec}`"),
                format!(
                    "built-in profiles: {}; or give a file with --profile path/to/profile.toml",
                    builtin_names().join(", ")
                ),
            )),
        }
    }

    pub fn from_file(path: &Path) -> Result<Profile> {
        if !path.exists() {
            return Err(hint(
                format!("there is no profile file {}", path.display()),
                format!(
                    "give the path of a profile file, or a built-in profile's name ({})",
                    builtin_names().join(", ")
                ),
            ));
        }
        // read_small names the file; "profile" says what it was read for.
        let text = crate::fsutil::read_small(path, PROFILE_LIMIT).context("reading a profile")?;
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        Profile::parse(&text, &path.display().to_string(), Origin::File(abs))
    }

    /// Parse and check a profile. `label` names it in errors; toml's own message
    /// carries the line and column.
    pub fn parse(text: &str, label: &str, origin: Origin) -> Result<Profile> {
        let mut profile: Profile = toml::from_str(text).map_err(|e| {
            hint(
                format!("invalid profile {label}: {}", e.to_string().trim_end()),
                "fix the profile; `rdna1-patch profiles show` prints a valid one to start from",
            )
        })?;
        profile.origin = origin;
        profile.check(label)?;
        Ok(profile)
    }

    fn check(&self, label: &str) -> Result<()> {
        let problem = self.problem().or_else(|| {
            self.components
                .iter()
                .find_map(|(name, c)| component_problem(name, c))
        });
        if let Some((what, help)) = problem {
            let what = format!("invalid profile {label}: {what}");
            return Err(help.map_or_else(|| anyhow::anyhow!("{what}"), |h| hint(&what, h)));
        }
        for (name, c) in &self.components {
            check_compat(label, name, c)?;
        }
        Ok(())
    }

    /// What is wrong with the profile as a whole, and the fix if there
    /// is more to say than the problem.
    fn problem(&self) -> Option<(String, Option<&'static str>)> {
        if self.components.is_empty() {
            return Some(("it defines no [components.*]".into(), None));
        }
        // Both name directories of the work dir: they must stay single,
        // plain path components inside it.
        std::iter::once(("name", &self.name))
            .chain(self.components.keys().map(|k| ("component", k)))
            .find(|(_, name)| !is_plain_name(name))
            .map(|(what, name)| {
                (
                    format!("{what} `{}` is not a plain name", name.escape_debug()),
                    Some("use letters, digits, `.`, `_` and `-` only (it names a directory in the work dir), e.g. name = \"rocm-6.2.4-mine\""),
                )
            })
    }

    pub fn component(&self, name: &str) -> Result<&Component> {
        self.components.get(name).ok_or_else(|| {
            let have: Vec<&str> = self.components.keys().map(String::as_str).collect();
            let elsewhere: Vec<String> = builtin_names()
                .into_iter()
                .filter(|n| builtin(n).is_some_and(|t| t.contains(&format!("[components.{name}]"))))
                .collect();
            let also = match elsewhere.first() {
                Some(first) => format!(
                    "; `{name}` is in the built-in profile(s) {}: --profile {first}",
                    elsewhere.join(", ")
                ),
                None => String::new(),
            };
            hint(
                format!("profile {} has no component `{name}`", self.name),
                format!("components in this profile: {}{also}", have.join(", ")),
            )
        })
    }

    /// The component's extra series directory, from the profile.
    pub fn extra_series_dir(&self, component: &Component) -> Option<PathBuf> {
        let dir = component.extra_patches.as_ref()?;
        Some(match &self.origin {
            Origin::File(file) => file.parent().unwrap_or(Path::new(".")).join(dir),
            Origin::Embedded => PathBuf::from(dir),
        })
    }

    /// A shipped compat series, `patches/compat/<name>`.
    pub fn compat_series(name: &str) -> Result<SeriesDir> {
        let path = format!("compat/{name}");
        let dir = PATCHES
            .get_dir(&path)
            .ok_or_else(|| anyhow::anyhow!("patches/{path} is not in this binary"))?;
        Ok(SeriesDir::Embedded(dir, path))
    }

    /// The patch series of a component, embedded or on disk.
    pub fn series_dir(&self, component: &Component) -> Result<SeriesDir> {
        let Some(patches) = &component.patches else {
            return Ok(SeriesDir::Empty);
        };
        match &self.origin {
            Origin::Embedded => {
                let dir = PATCHES.get_dir(patches).ok_or_else(|| {
                    anyhow::anyhow!(
                        "built-in profile {} names patches/{}, which is not in this binary",
                        self.name,
                        patches
                    )
                })?;
                Ok(SeriesDir::Embedded(dir, patches.clone()))
            }
            Origin::File(file) => {
                let base = file.parent().unwrap_or(Path::new("."));
                let dir = base.join(patches);
                if dir.is_dir() {
                    return Ok(SeriesDir::Disk(dir));
                }
                // A profile file copied from `profiles show` names a built-in
                // series; with no directory of that name beside it, that is
                // the one meant.
                if let Some(embedded) = PATCHES.get_dir(patches) {
                    return Ok(SeriesDir::Embedded(embedded, patches.clone()));
                }
                Err(hint(
                    format!(
                        "profile {} names the patch series `{}`, but {} is not a directory, and no built-in series has that name",
                        file.display(),
                        patches,
                        dir.display()
                    ),
                    format!(
                        "the `patches` path of a profile file is relative to the file itself; built-in series: {}",
                        builtin_series().join(", ")
                    ),
                ))
            }
        }
    }
}

impl CmakeSettings {
    /// The defines with `{rocm}` expanded and `extra` (from `-D` on the
    /// command line) applied on top, in a stable order.
    pub fn effective_defines(
        &self,
        rocm: &Path,
        extra: &[(String, String)],
    ) -> BTreeMap<String, String> {
        self.expanded_defines(rocm, &[], extra)
    }

    /// [`CmakeSettings::effective_defines`], each source read besides
    /// (`{NAME}`, in `with`) expanded too.
    pub fn expanded_defines(
        &self,
        rocm: &Path,
        with: &[(&str, &Path)],
        extra: &[(String, String)],
    ) -> BTreeMap<String, String> {
        let places: Vec<(String, String)> = std::iter::once(("rocm", rocm))
            .chain(with.iter().copied())
            .map(|(name, path)| (format!("{{{name}}}"), path.display().to_string()))
            .collect();
        let expand = |v: &str| {
            places
                .iter()
                .fold(v.to_owned(), |v, (from, to)| v.replace(from, to))
        };
        let mut defines: BTreeMap<String, String> = self
            .defines
            .iter()
            .map(|(k, v)| (k.clone(), expand(v)))
            .collect();
        defines.insert("CMAKE_BUILD_TYPE".into(), self.build_type.clone());
        for (k, v) in extra {
            defines.insert(k.clone(), v.clone());
        }
        defines
    }
}

impl Component {
    /// The component's own source, pinned.
    pub fn source(&self) -> Source {
        Source {
            url: self.url.clone(),
            tag: self.tag.clone(),
            commit: self.commit.clone(),
            sha256: self.sha256.clone(),
            subdir: self.subdir.clone(),
            sparse: self.sparse.clone(),
        }
    }

    /// What the source is pinned to, for messages: the tag, the commit, or
    /// the tarball.
    pub fn pin(&self) -> String {
        self.source().pin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One copy of each patch text: a series that needs another's patch
    /// names it `../SERIES/FILE` rather than carrying its own copy.
    #[test]
    fn no_patch_text_is_held_twice() {
        let mut seen = std::collections::BTreeMap::new();
        let mut dirs = vec![&PATCHES];
        while let Some(d) = dirs.pop() {
            dirs.extend(d.dirs());
            for f in d
                .files()
                .filter(|f| f.path().extension().is_some_and(|e| e == "patch"))
            {
                if let Some(other) = seen.insert(f.contents(), f.path()) {
                    panic!(
                        "{} and {} hold the same patch",
                        other.display(),
                        f.path().display()
                    );
                }
            }
        }
        assert!(seen.len() >= 6, "{} patch files", seen.len());
        assert_eq!(
            sibling("../rocm-6.2.4/0001-x.patch"),
            Some(("rocm-6.2.4", "0001-x.patch"))
        );
        for not in [
            "0001-x.patch",
            "../../a/b",
            "../a/b/c",
            "../.git/x",
            "../a/.x",
            "./a/b",
        ] {
            assert_eq!(sibling(not), None, "{not}");
        }
    }

    /// An exported profile finds the patches it shares with a sibling
    /// series, as the built-in one does.
    #[test]
    fn an_exported_profile_keeps_its_shared_patches() {
        let dir = tempfile::tempdir().unwrap();
        export("rocm-6.3.1", dir.path()).unwrap();
        let p = Profile::from_file(&dir.path().join("rocm-6.3.1.toml")).unwrap();
        let c = p.component("miopen").unwrap();
        let on_disk = crate::builder::patch::Series::load(&p.series_dir(c).unwrap()).unwrap();
        let built_in = Profile::load("rocm-6.3.1").unwrap();
        let c = built_in.component("miopen").unwrap();
        let embedded =
            crate::builder::patch::Series::load(&built_in.series_dir(c).unwrap()).unwrap();
        let names = |s: &crate::builder::patch::Series| -> Vec<(String, String, String)> {
            s.patches
                .iter()
                .map(|p| (p.name.clone(), p.file.clone(), p.text.clone()))
                .collect()
        };
        assert_eq!(names(&on_disk), names(&embedded));
        assert_eq!(on_disk.patches[0].name, "0001-rdna1-detection.patch");
        assert_eq!(
            on_disk.patches[0].file,
            "../rocm-6.2.4/0001-rdna1-detection.patch"
        );
    }

    #[test]
    fn every_builtin_profile_parses_and_has_its_series() {
        assert!(!builtin_names().is_empty());
        for name in builtin_names() {
            let p = Profile::load(&name).unwrap();
            assert_eq!(p.name, name, "profile file name and `name` key must agree");
            // A component built as released names no series.
            for c in p.components.values().filter(|c| c.patches.is_some()) {
                let dir = p.series_dir(c).unwrap();
                // Loading parses every patch and rejects paths outside the tree.
                let series = crate::builder::patch::Series::load(&dir).unwrap();
                assert!(!series.patches.is_empty(), "{dir} has no patches");
                for patch in &series.patches {
                    let marker = patch.marker.as_deref().unwrap_or_default();
                    assert!(
                        marker.contains("[RDNA1 PATCH]"),
                        "{} declares no [RDNA1 PATCH] marker",
                        patch.name
                    );
                    assert!(
                        !patch.files.is_empty() && !patch.subject.is_empty(),
                        "{}",
                        patch.name
                    );
                }
            }
        }
    }

    #[test]
    fn unknown_key_names_line_and_column() {
        let text = "name = \"x\"\nprefix = \"/p\"\nbogus = 1\n";
        let err = Profile::parse(text, "t.toml", Origin::Embedded).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("t.toml"), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("bogus"), "{msg}");
    }

    #[test]
    fn defines_expand_rocm_and_take_overrides() {
        let p = Profile::load(DEFAULT_PROFILE).unwrap();
        let c = p.component("miopen").unwrap();
        let d = c.cmake.effective_defines(
            Path::new("/r"),
            &[("MIOPEN_BACKEND".into(), "HIPNOGPU".into())],
        );
        assert_eq!(d["CMAKE_PREFIX_PATH"], "/r");
        assert_eq!(d["MIOPEN_BACKEND"], "HIPNOGPU");
        assert_eq!(d["CMAKE_BUILD_TYPE"], "Release");
        // A source read besides is `{NAME}`: rocBLAS's Tensile.
        let p = Profile::load("rocm-6.4.3").unwrap();
        let c = p.component("rocblas").unwrap();
        let d =
            c.cmake
                .expanded_defines(Path::new("/r"), &[("tensile", Path::new("/w/t/src"))], &[]);
        assert_eq!(d["Tensile_ROOT"], "/w/t/src/Tensile");
        assert_eq!(d["CMAKE_PREFIX_PATH"], "/r;/w/t/src/Tensile/cmake");
        assert_eq!(d["CMAKE_CXX_COMPILER"], "/r/llvm/bin/amdclang++");
    }
}
