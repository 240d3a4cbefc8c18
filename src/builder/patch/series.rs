//! A series as the `series` file orders it, and each patch's parsed form.

use std::path::{Component as PathComponent, Path};

use anyhow::{Result, anyhow, bail};
use diffy::patch_set::{FileOperation, ParseOptions, PatchKind, PatchSet};

use crate::builder::profile::{Component, Profile, SeriesDir};
use crate::error::hint;
use crate::fsutil;

/// A patch series as the `series` file orders it.
#[derive(Debug, Clone)]
pub struct Series {
    /// Where it came from, for messages.
    pub origin: String,
    pub patches: Vec<PatchFile>,
}

#[derive(Debug, Clone)]
pub struct PatchFile {
    /// The file's name: what provenance, build keys and messages say.
    pub name: String,
    /// Where the series finds it: `name`, or `../SERIES/name` for a patch
    /// a sibling series holds.
    pub file: String,
    /// The series it came from, for provenance and messages.
    pub origin: String,
    pub text: String,
    pub subject: String,
    /// The string this patch compiles into the library, from its `Marker:` line.
    pub marker: Option<String>,
    /// The files it changes, relative to the source root.
    pub files: Vec<String>,
}

/// What happened to one patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOutcome {
    Applied,
    /// Its reverse applies: the tree already has it.
    AlreadyApplied,
}

impl Series {
    /// The series a build applies: the profile's, then the extra one
    /// (`--extra-patches`, else the profile's `extra_patches`), all or nothing.
    pub fn for_build(
        profile: &Profile,
        component: &Component,
        extra: Option<&Path>,
    ) -> Result<Series> {
        let mut series = Series::load(&profile.series_dir(component)?)?;
        let extra = extra
            .map(Path::to_path_buf)
            .or_else(|| profile.extra_series_dir(component));
        if let Some(dir) = extra {
            if !dir.is_dir() {
                return Err(hint(
                    format!(
                        "the extra patch series {} is not a directory",
                        dir.display()
                    ),
                    "give --extra-patches (or the profile's extra_patches) a directory with a `series` file and its patches",
                ));
            }
            series.append(Series::load(&SeriesDir::Disk(dir))?)?;
        }
        Ok(series)
    }

    pub fn load(dir: &SeriesDir) -> Result<Series> {
        let origin = dir.to_string();
        if let SeriesDir::Empty = dir {
            return Ok(Series {
                origin,
                patches: Vec::new(),
            });
        }
        let series = dir.read("series")?.ok_or_else(|| {
            hint(
                format!("{origin} has no `series` file"),
                "a series directory lists its patches, one per line, in a file named `series`",
            )
        })?;
        let mut patches = Vec::new();
        for (n, line) in series.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let name = words.next().expect("non-empty line has a word");
            for opt in words {
                if opt != "-p1" {
                    bail!(
                        "{origin}/series line {}: option `{opt}` is not supported (patches are git-style, -p1)",
                        n + 1
                    );
                }
            }
            let shared = crate::builder::profile::sibling(name);
            if shared.is_none() && (name.contains('/') || name.starts_with('.')) {
                bail!(
                    "{origin}/series line {}: `{name}` must be a file in the series directory, or ../SERIES/FILE in a sibling series",
                    n + 1
                );
            }
            let text = dir.read(name)?.ok_or_else(|| {
                anyhow!(
                    "{origin}/series line {} names {name}, which does not exist",
                    n + 1
                )
            })?;
            let mut p = PatchFile::parse(shared.map_or(name, |(_, file)| file), text)?;
            p.file = name.to_owned();
            p.origin = origin.clone();
            patches.push(p);
        }
        Ok(Series { origin, patches })
    }

    /// Apply `extra` after this series (a user's own patches, say for a
    /// distribution's newer compiler); names must not collide.
    pub fn append(&mut self, extra: Series) -> Result<()> {
        for p in &extra.patches {
            if self.get(&p.name).is_some() {
                return Err(hint(
                    format!(
                        "{} has a patch named {}, like {}",
                        extra.origin, p.name, self.origin
                    ),
                    "rename the extra patch (and its line in the extra series file)",
                ));
            }
        }
        self.origin = format!("{}, then {}", self.origin, extra.origin);
        self.patches.extend(extra.patches);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<(usize, &PatchFile)> {
        self.patches
            .iter()
            .enumerate()
            .find(|(_, p)| p.name == name)
    }
}

impl PatchFile {
    /// Parse and check a patch: every file it names must be a plain relative
    /// path inside the tree.
    pub fn parse(name: &str, text: String) -> Result<PatchFile> {
        let (subject, marker) = parse_header(&text);
        let mut p = PatchFile {
            name: name.to_owned(),
            file: name.to_owned(),
            origin: String::new(),
            text,
            subject,
            marker,
            files: Vec::new(),
        };
        let files = p.changes()?.into_iter().map(|c| c.path).collect();
        p.files = files;
        Ok(p)
    }

    /// Per file it changes: the path, how (create, modify, delete) and its
    /// hunks' `@@` headers.
    pub fn summary(&self) -> Result<Vec<FileSummary>> {
        Ok(self
            .changes()?
            .into_iter()
            .map(|c| FileSummary {
                kind: match c.kind {
                    Kind::Create => "create",
                    Kind::Modify => "modify",
                    Kind::Delete => "delete",
                },
                hunks: c.patch.hunks().iter().map(hunk_header).collect(),
                path: c.path,
            })
            .collect())
    }

    /// The text before the first diff: subject, description, Marker line.
    pub fn header(&self) -> &str {
        let end = diff_start(&self.text).unwrap_or(self.text.len());
        &self.text[..end]
    }

    pub(super) fn changes(&self) -> Result<Vec<FileChange<'_>>> {
        if diff_start(&self.text).is_none() {
            bail!("patch {} contains no `diff --git` section", self.name);
        }
        let mut out = Vec::new();
        for fp in PatchSet::parse(&self.text, ParseOptions::gitdiff()) {
            let fp = fp.map_err(|e| anyhow!("patch {} cannot be parsed: {e}", self.name))?;
            let (path, kind) = match fp.operation().strip_prefix(1) {
                FileOperation::Create(p) => (p.into_owned(), Kind::Create),
                FileOperation::Delete(p) => (p.into_owned(), Kind::Delete),
                FileOperation::Modify { original, modified } if original == modified => {
                    (original.into_owned(), Kind::Modify)
                }
                op => bail!(
                    "patch {}: {op:?} is not supported; patches may create, change or delete files",
                    self.name
                ),
            };
            check_path_syntax(&self.name, &path)?;
            use diffy::patch_set::FileMode;
            if let Some(mode) = [fp.old_mode(), fp.new_mode()]
                .into_iter()
                .flatten()
                .find(|m| matches!(m, FileMode::Symlink | FileMode::Gitlink))
            {
                bail!(
                    "patch {}: {path} is a {} in the patch; only regular text files can be patched",
                    self.name,
                    if *mode == FileMode::Symlink {
                        "symlink"
                    } else {
                        "submodule"
                    }
                );
            }
            let mode_change = fp.old_mode().is_some() && fp.new_mode().is_some();
            let patch = match fp.into_patch() {
                PatchKind::Text(p) => p,
                PatchKind::Binary(_) => bail!(
                    "patch {}: {path} is a binary patch, which is not supported",
                    self.name
                ),
            };
            if kind == Kind::Modify && patch.hunks().is_empty() {
                bail!(
                    "patch {}: the change to {path} has no hunks{}; it would record a marker for a change that is not there",
                    self.name,
                    if mode_change {
                        " (only its mode changes, which is not supported)"
                    } else {
                        ""
                    }
                );
            }
            out.push(FileChange { path, kind, patch });
        }
        Ok(out)
    }
}

fn diff_start(text: &str) -> Option<usize> {
    if text.starts_with("diff --git ") {
        return Some(0);
    }
    text.find("\ndiff --git ").map(|i| i + 1)
}

fn parse_header(text: &str) -> (String, Option<String>) {
    let header = &text[..diff_start(text).unwrap_or(text.len())];
    let subject = header
        .lines()
        .find_map(|l| l.strip_prefix("Subject:"))
        .map(|s| {
            let s = s.trim();
            match s.strip_prefix('[') {
                Some(rest) => rest.split_once(']').map_or(s, |(_, r)| r.trim()),
                None => s,
            }
            .to_owned()
        })
        .or_else(|| {
            header
                .lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_owned())
        })
        .unwrap_or_default();
    let marker = header
        .lines()
        .find_map(|l| l.trim().strip_prefix("Marker:"))
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty());
    (subject, marker)
}

/// One file of a patch, for reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileSummary {
    pub path: String,
    pub kind: &'static str,
    pub hunks: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Create,
    Modify,
    Delete,
}

pub(super) struct FileChange<'a> {
    pub(super) path: String,
    pub(super) kind: Kind,
    pub(super) patch: diffy::Patch<'a, str>,
}

/// Paths in a patch must stay inside the tree: relative, no `..`, not into `.git`.
pub(super) fn check_path_syntax(patch: &str, path: &str) -> Result<()> {
    let p = Path::new(path);
    let bad = path.is_empty()
        || p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, PathComponent::Normal(_)))
        || p.components()
            .any(|c| fsutil::is_git_dir_name(c.as_os_str()));
    if bad {
        return Err(hint(
            format!("patch {patch} names `{path}`, which is outside the source tree"),
            "patch paths must be relative to the source root (a/src/..., b/src/...), without `..`",
        ));
    }
    Ok(())
}

pub(super) fn hunk_header(h: &diffy::Hunk<'_, str>) -> String {
    let (o, n) = (h.old_range(), h.new_range());
    format!(
        "@@ -{},{} +{},{} @@",
        o.start(),
        o.len(),
        n.start(),
        n.len()
    )
}
