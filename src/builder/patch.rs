//! Stage 2, patch: apply a quilt-style series of git-style patches.
//!
//! The whole series is applied in memory first; nothing is written unless
//! every hunk of every patch applies (at any line offset, never with fuzz).
//! Only files whose final content differs from what is on disk are written,
//! so an unchanged series touches nothing and a changed patch rewrites only
//! the files it affects, and the next build recompiles only those.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Component as PathComponent, Path};

use anyhow::{Context, Result, anyhow, bail};
use diffy::patch_set::{FileOperation, ParseOptions, PatchKind, PatchSet};

use crate::builder::profile::SeriesDir;
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
    pub name: String,
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
    pub fn load(dir: &SeriesDir) -> Result<Series> {
        let origin = dir.to_string();
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
            if name.contains('/') || name.starts_with('.') {
                bail!(
                    "{origin}/series line {}: `{name}` must be a file in the series directory",
                    n + 1
                );
            }
            let text = dir.read(name)?.ok_or_else(|| {
                anyhow!(
                    "{origin}/series line {} names {name}, which does not exist",
                    n + 1
                )
            })?;
            let mut p = PatchFile::parse(name, text)?;
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

    fn changes(&self) -> Result<Vec<FileChange<'_>>> {
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

/// How one patch of a series fares against a tree, for `patches check`.
#[derive(Debug, serde::Serialize)]
pub struct CheckedPatch {
    pub name: String,
    /// "ok", "already-applied", "failed", or "not-tried" after a failure.
    pub status: &'static str,
    pub marker: Option<String>,
    pub files: Vec<FileSummary>,
    /// Why it does not apply: the patch, file and hunk, as the error says.
    pub error: Option<String>,
}

/// Apply the series in memory on `base`, patch by patch, and say how each
/// fares; after the first that fails, the rest are not tried (they may
/// build on it). Nothing is written.
pub fn check(
    series: &Series,
    base: &dyn Fn(&str) -> Result<Option<String>>,
) -> Result<Vec<CheckedPatch>> {
    let mut ws = Workspace::new(base);
    let mut out = Vec::new();
    let mut failed = false;
    for p in &series.patches {
        let (status, error) = if failed {
            ("not-tried", None)
        } else {
            match ws.apply(p) {
                Ok(ApplyOutcome::Applied) => ("ok", None),
                Ok(ApplyOutcome::AlreadyApplied) => ("already-applied", None),
                Err(e) if e.is::<ApplyError>() => {
                    failed = true;
                    ("failed", Some(format!("{e:#}")))
                }
                Err(e) => return Err(e),
            }
        };
        out.push(CheckedPatch {
            name: p.name.clone(),
            status,
            marker: p.marker.clone(),
            files: p.summary()?,
            error,
        });
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Create,
    Modify,
    Delete,
}

struct FileChange<'a> {
    path: String,
    kind: Kind,
    patch: diffy::Patch<'a, str>,
}

/// Paths in a patch must stay inside the tree: relative, no `..`, not into `.git`.
fn check_path_syntax(patch: &str, path: &str) -> Result<()> {
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

/// A path must not reach outside `root` through a symlink on disk.
fn check_no_symlink(patch: &str, root: &Path, path: &str) -> Result<()> {
    match fsutil::first_symlink(root, Path::new(path)) {
        Some(link) => Err(hint(
            format!(
                "patch {patch} changes `{path}`, but {} is a symlink, which could point outside the source tree",
                link.display()
            ),
            "refusing to write through it; replace the symlink with a real file or directory",
        )),
        None => Ok(()),
    }
}

/// Why a patch does not apply.
#[derive(Debug)]
pub struct ApplyError {
    pub patch: String,
    pub file: String,
    pub reason: Reason,
}

#[derive(Debug)]
pub enum Reason {
    Missing,
    Exists,
    Hunk { number: usize, header: String },
    NotEmptyAfterDelete,
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "patch {} does not apply: {}: ", self.patch, self.file)?;
        match &self.reason {
            Reason::Missing => f.write_str("the file does not exist in the tree"),
            Reason::Exists => f.write_str("the patch creates it, but it already exists"),
            Reason::Hunk { number, header } => write!(
                f,
                "hunk #{number} ({header}) does not match: its context or removed lines are not in the file (offsets are allowed, fuzz is not)"
            ),
            Reason::NotEmptyAfterDelete => {
                f.write_str("the patch deletes it, but the file has other content")
            }
        }
    }
}

impl std::error::Error for ApplyError {}

/// Files being patched in memory, read lazily from a base.
pub struct Workspace<'b> {
    files: BTreeMap<String, Option<String>>,
    base: &'b dyn Fn(&str) -> Result<Option<String>>,
}

impl<'b> Workspace<'b> {
    /// `base` gives a file's starting content, `None` when it does not exist.
    pub fn new(base: &'b dyn Fn(&str) -> Result<Option<String>>) -> Self {
        Workspace {
            files: BTreeMap::new(),
            base,
        }
    }

    pub fn get(&mut self, path: &str) -> Result<Option<String>> {
        if let Some(v) = self.files.get(path) {
            return Ok(v.clone());
        }
        let v = (self.base)(path)?;
        self.files.insert(path.to_owned(), v.clone());
        Ok(v)
    }

    /// Apply a patch, or notice it is already applied, or fail naming the
    /// first hunk that does not fit. Nothing changes on failure.
    pub fn apply(&mut self, patch: &PatchFile) -> Result<ApplyOutcome> {
        let changes = patch.changes()?;
        match self.try_apply(patch, &changes, false)? {
            Ok(staged) => {
                self.files.extend(staged);
                Ok(ApplyOutcome::Applied)
            }
            Err(forward) => match self.try_apply(patch, &changes, true)? {
                Ok(_) => Ok(ApplyOutcome::AlreadyApplied),
                Err(_) => Err(forward.into()),
            },
        }
    }

    /// Undo a patch (for refresh): its reverse must apply.
    pub fn unapply(&mut self, patch: &PatchFile, only: &BTreeSet<String>) -> Result<()> {
        let changes: Vec<_> = patch
            .changes()?
            .into_iter()
            .filter(|c| only.contains(&c.path))
            .collect();
        let staged = self.try_apply(patch, &changes, true)?.map_err(|e| {
            hint(
                format!("{e} (while taking it out to refresh an earlier patch)"),
                format!(
                    "{} also changes this file and its changes are no longer in the tree as it has them; refresh {} first, or fix the file",
                    e.patch, e.patch
                ),
            )
        })?;
        self.files.extend(staged);
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn try_apply(
        &mut self,
        patch: &PatchFile,
        changes: &[FileChange],
        reverse: bool,
    ) -> Result<std::result::Result<BTreeMap<String, Option<String>>, ApplyError>> {
        let mut staged: BTreeMap<String, Option<String>> = BTreeMap::new();
        for ch in changes {
            let current = match staged.get(&ch.path) {
                Some(v) => v.clone(),
                None => self.get(&ch.path)?,
            };
            let fail = |reason| ApplyError {
                patch: patch.name.clone(),
                file: ch.path.clone(),
                reason,
            };
            let kind = match (ch.kind, reverse) {
                (Kind::Create, true) => Kind::Delete,
                (Kind::Delete, true) => Kind::Create,
                (k, _) => k,
            };
            let input = match (kind, &current) {
                (Kind::Create, Some(_)) => return Ok(Err(fail(Reason::Exists))),
                (Kind::Create, None) => String::new(),
                (_, None) => return Ok(Err(fail(Reason::Missing))),
                (_, Some(text)) => text.clone(),
            };
            let reversed;
            let p = if reverse {
                reversed = ch.patch.reverse();
                &reversed
            } else {
                &ch.patch
            };
            let output = match diffy::apply(&input, p) {
                Ok(o) => o,
                Err(e) => {
                    // diffy numbers the failing hunk only in its message.
                    let number = e
                        .to_string()
                        .rsplit('#')
                        .next()
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .unwrap_or(1);
                    let header = ch
                        .patch
                        .hunks()
                        .get(number - 1)
                        .map(hunk_header)
                        .unwrap_or_default();
                    return Ok(Err(fail(Reason::Hunk { number, header })));
                }
            };
            let result = if kind == Kind::Delete {
                if !output.is_empty() {
                    return Ok(Err(fail(Reason::NotEmptyAfterDelete)));
                }
                None
            } else {
                Some(output)
            };
            staged.insert(ch.path.clone(), result);
        }
        Ok(Ok(staged))
    }
}

fn hunk_header(h: &diffy::Hunk<'_, str>) -> String {
    let (o, n) = (h.old_range(), h.new_range());
    format!(
        "@@ -{},{} +{},{} @@",
        o.start(),
        o.len(),
        n.start(),
        n.len()
    )
}

/// What applying a series to a tree would do.
#[derive(Debug)]
pub struct SeriesPlan {
    pub outcomes: Vec<(String, ApplyOutcome)>,
    /// Files to write (`Some`) or delete (`None`), relative to the root.
    pub writes: Vec<(String, Option<String>)>,
    /// Every file the series changes.
    pub touched: BTreeSet<String>,
}

/// Apply `series` in memory on top of `base`, and compare the result with the
/// tree at `root`. `also` are files an earlier run patched: if the series no
/// longer touches them, they go back to `base`.
pub fn plan(
    series: &Series,
    root: &Path,
    base: &dyn Fn(&str) -> Result<Option<String>>,
    also: &BTreeSet<String>,
) -> Result<SeriesPlan> {
    for p in &series.patches {
        for f in &p.files {
            check_no_symlink(&p.name, root, f)?;
        }
    }
    for f in also {
        check_path_syntax("(recorded state)", f)?;
        check_no_symlink("(recorded state)", root, f)?;
    }
    let mut ws = Workspace::new(base);
    let mut outcomes = Vec::new();
    let mut touched = BTreeSet::new();
    for p in &series.patches {
        outcomes.push((p.name.clone(), ws.apply(p)?));
        touched.extend(p.files.iter().cloned());
    }
    let mut writes = Vec::new();
    for path in touched
        .iter()
        .chain(also.iter().filter(|f| !touched.contains(*f)))
    {
        let wanted = ws.get(path)?;
        let on_disk = read_optional(&root.join(path))?;
        if wanted != on_disk {
            writes.push((path.clone(), wanted));
        }
    }
    Ok(SeriesPlan {
        outcomes,
        writes,
        touched,
    })
}

/// Carry out a plan. Each file is replaced atomically.
pub fn execute(plan: &SeriesPlan, root: &Path) -> Result<()> {
    for (path, content) in &plan.writes {
        let full = root.join(path);
        match content {
            Some(text) => {
                if let Some(dir) = full.parent() {
                    fsutil::create_dir_all(dir)?;
                }
                fsutil::write_atomic(&full, text.as_bytes(), None)?;
            }
            None => match std::fs::remove_file(&full) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot remove {}", full.display()));
                }
            },
        }
    }
    Ok(())
}

/// A file's text, `None` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
            anyhow!(
                "{} is not UTF-8 text; only text files can be patched",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// A base that reads the tree itself (for `patches check` on any directory).
pub fn disk_base(root: &Path) -> impl Fn(&str) -> Result<Option<String>> + '_ {
    move |rel| read_optional(&root.join(rel))
}

/// Render one file's change as a git-style diff with three lines of context.
pub fn render_diff(path: &str, before: Option<&str>, after: Option<&str>) -> String {
    let mut out = format!("diff --git a/{path} b/{path}\n");
    let (old_name, new_name) = match (before, after) {
        (None, _) => {
            out.push_str("new file mode 100644\n");
            ("/dev/null".to_owned(), format!("b/{path}"))
        }
        (_, None) => {
            out.push_str("deleted file mode 100644\n");
            (format!("a/{path}"), "/dev/null".to_owned())
        }
        _ => (format!("a/{path}"), format!("b/{path}")),
    };
    let diff = similar::TextDiff::from_lines(before.unwrap_or(""), after.unwrap_or(""));
    out.push_str(
        &diff
            .unified_diff()
            .context_radius(3)
            .header(&old_name, &new_name)
            .to_string(),
    );
    out
}

/// Rewrite patch `name` from the edited tree at `root`, like `quilt refresh`.
///
/// `base` gives the unpatched files; the patch's "before" is `base` with the
/// earlier patches applied, its "after" is the tree with the later patches
/// taken out again. `add` names files to bring into the patch.
pub fn refresh(
    series: &Series,
    name: &str,
    root: &Path,
    base: &dyn Fn(&str) -> Result<Option<String>>,
    add: &[String],
) -> Result<String> {
    let (index, patch) = series.get(name).ok_or_else(|| {
        hint(
            format!("{} has no patch named {name}", series.origin),
            format!(
                "patches in the series: {}",
                series
                    .patches
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    let mut files: BTreeSet<String> = patch.files.iter().cloned().collect();
    for a in add {
        check_path_syntax(name, a)?;
        files.insert(a.clone());
    }
    for f in &files {
        check_no_symlink(name, root, f)?;
    }

    let mut before = Workspace::new(base);
    for p in &series.patches[..index] {
        before.apply(p)?;
    }
    let disk = disk_base(root);
    let mut after = Workspace::new(&disk);
    for later in series.patches[index + 1..].iter().rev() {
        if later.files.iter().any(|f| files.contains(f)) {
            after.unapply(later, &files)?;
        }
    }

    let mut body = String::new();
    for f in &files {
        let (b, a) = (before.get(f)?, after.get(f)?);
        if b != a {
            body.push_str(&render_diff(f, b.as_deref(), a.as_deref()));
        }
    }
    if body.is_empty() {
        bail!("refreshing {name} would leave it empty: the tree has none of its changes");
    }
    let mut text = patch.header().to_owned();
    if !text.is_empty() && !text.ends_with("\n\n") {
        text.push('\n');
    }
    text.push_str(&body);
    // Parse what we made, so a refresh can never write a patch we cannot read.
    PatchFile::parse(name, text.clone())
        .context("internal error: refreshed patch does not parse")?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base_of(files: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>> + use<> {
        let map: BTreeMap<String, String> = files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |p| Ok(map.get(p).cloned())
    }

    const ORIG: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n";

    fn modify_patch() -> PatchFile {
        let text = format!(
            "Subject: [PATCH] change three\n\nWhy.\n\nMarker: [RDNA1 PATCH] t\n---\n{}",
            render_diff("a.txt", Some(ORIG), Some(&ORIG.replace("three", "THREE")))
        );
        PatchFile::parse("0001-t.patch", text).unwrap()
    }

    #[test]
    fn header_fields() {
        let p = modify_patch();
        assert_eq!(p.subject, "change three");
        assert_eq!(p.marker.as_deref(), Some("[RDNA1 PATCH] t"));
        assert_eq!(p.files, vec!["a.txt"]);
    }

    #[test]
    fn applies_at_an_offset_and_detects_already_applied() {
        let p = modify_patch();
        let shifted = format!("zero\nzero\n{ORIG}");
        let base = base_of(&[("a.txt", &shifted)]);
        let mut ws = Workspace::new(&base);
        assert_eq!(ws.apply(&p).unwrap(), ApplyOutcome::Applied);
        assert!(
            ws.get("a.txt")
                .unwrap()
                .unwrap()
                .contains("zero\nzero\none\ntwo\nTHREE")
        );
        assert_eq!(ws.apply(&p).unwrap(), ApplyOutcome::AlreadyApplied);
    }

    #[test]
    fn failure_names_patch_file_and_hunk() {
        let p = modify_patch();
        let base = base_of(&[("a.txt", "something else entirely\n")]);
        let mut ws = Workspace::new(&base);
        let err = ws.apply(&p).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("0001-t.patch"), "{msg}");
        assert!(msg.contains("a.txt"), "{msg}");
        assert!(msg.contains("hunk #1 (@@ -1,6 +1,6 @@)"), "{msg}");
    }

    #[test]
    fn paths_outside_the_tree_are_rejected() {
        for bad in ["../x", "/etc/passwd", ".git/config", "a/../../b"] {
            let text = format!(
                "diff --git a/{bad} b/{bad}\n--- a/{bad}\n+++ b/{bad}\n@@ -1 +1 @@\n-a\n+b\n"
            );
            let err = PatchFile::parse("evil.patch", text).unwrap_err();
            assert!(
                format!("{err:#}").contains("outside the source tree"),
                "{bad}: {err:#}"
            );
        }
    }

    #[test]
    fn a_mode_change_an_empty_change_or_a_symlink_is_refused() {
        let cases = [
            (
                "diff --git a/a.sh b/a.sh\nold mode 100644\nnew mode 100755\n",
                "patch p: the change to a.sh has no hunks (only its mode changes, which is not supported); it would record a marker for a change that is not there",
            ),
            (
                "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
                "patch p: link is a symlink in the patch; only regular text files can be patched",
            ),
        ];
        for (diff, want) in cases {
            let text = format!("Subject: x\n\nMarker: [RDNA1 PATCH] x\n---\n{diff}");
            let err = PatchFile::parse("p", text).unwrap_err();
            assert_eq!(format!("{err:#}"), want);
        }
    }

    #[test]
    fn create_and_refresh_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), ORIG.replace("three", "THREE")).unwrap();
        std::fs::write(dir.path().join("series"), "0001-t.patch\n").unwrap();
        std::fs::write(dir.path().join("0001-t.patch"), &modify_patch().text).unwrap();
        let series = Series::load(&SeriesDir::Disk(dir.path().to_owned())).unwrap();
        // The user edits the tree further and adds a new file to the patch.
        std::fs::write(
            dir.path().join("a.txt"),
            ORIG.replace("three", "3").replace("six", "6"),
        )
        .unwrap();
        std::fs::write(dir.path().join("new.h"), "#pragma once\n").unwrap();
        let base = base_of(&[("a.txt", ORIG)]);
        let text = refresh(
            &series,
            "0001-t.patch",
            dir.path(),
            &base,
            &["new.h".into()],
        )
        .unwrap();
        assert!(text.starts_with("Subject: [PATCH] change three"), "{text}");
        let p = PatchFile::parse("0001-t.patch", text).unwrap();
        assert_eq!(p.files, vec!["a.txt", "new.h"]);
        let mut ws = Workspace::new(&base);
        ws.apply(&p).unwrap();
        assert_eq!(
            ws.get("a.txt").unwrap().unwrap(),
            ORIG.replace("three", "3").replace("six", "6")
        );
        assert_eq!(ws.get("new.h").unwrap().unwrap(), "#pragma once\n");
    }
}
