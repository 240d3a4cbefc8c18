//! Applying a series in memory, all or nothing, and writing only the files
//! whose content changes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use anyhow::{Result, anyhow};

use super::series::{FileChange, Kind, check_path_syntax, hunk_header};
use super::{ApplyOutcome, FileSummary, PatchFile, Series};
use crate::error::hint;
use crate::fsutil;
use crate::fsutil::At;

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

/// A path must not reach outside `root` through a symlink on disk.
pub(super) fn check_no_symlink(patch: &str, root: &Path, path: &str) -> Result<()> {
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
            Trial::Fits(staged) => {
                self.files.extend(staged);
                Ok(ApplyOutcome::Applied)
            }
            Trial::DoesNot(forward) => match self.try_apply(patch, &changes, true)? {
                Trial::Fits(_) => Ok(ApplyOutcome::AlreadyApplied),
                Trial::DoesNot(_) => Err(forward.into()),
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
        let staged = match self.try_apply(patch, &changes, true)? {
            Trial::Fits(staged) => staged,
            Trial::DoesNot(e) => {
                return Err(hint(
                    format!("{e} (while taking it out to refresh an earlier patch)"),
                    format!(
                        "{} also changes this file and its changes are no longer in the tree as it has them; refresh {} first, or fix the file",
                        e.patch, e.patch
                    ),
                ));
            }
        };
        self.files.extend(staged);
        Ok(())
    }

    /// Apply `changes` (reversed with `reverse`) to the files as they are
    /// now, without keeping the result. An error is a file that cannot
    /// be read; a patch that does not fit is [`Trial::DoesNot`].
    fn try_apply(
        &mut self,
        patch: &PatchFile,
        changes: &[FileChange],
        reverse: bool,
    ) -> Result<Trial> {
        let mut staged = Staged::new();
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
                (Kind::Create, Some(_)) => return Ok(Trial::DoesNot(fail(Reason::Exists))),
                (Kind::Create, None) => String::new(),
                (_, None) => return Ok(Trial::DoesNot(fail(Reason::Missing))),
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
                    return Ok(Trial::DoesNot(fail(Reason::Hunk { number, header })));
                }
            };
            let result = if kind == Kind::Delete {
                if !output.is_empty() {
                    return Ok(Trial::DoesNot(fail(Reason::NotEmptyAfterDelete)));
                }
                None
            } else {
                Some(output)
            };
            staged.insert(ch.path.clone(), result);
        }
        Ok(Trial::Fits(staged))
    }
}

/// Each changed file's new text (None: deleted), by path.
type Staged = BTreeMap<String, Option<String>>;

/// Whether a patch fits the files as they are.
enum Trial {
    Fits(Staged),
    DoesNot(ApplyError),
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
                    return Err(e).at("remove", &full);
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
        Err(e) => Err(e).at("read", path),
    }
}

/// A base that reads the tree itself (for `patches check` on any directory).
pub fn disk_base(root: &Path) -> impl Fn(&str) -> Result<Option<String>> + '_ {
    move |rel| read_optional(&root.join(rel))
}
