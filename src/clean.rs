//! `clean`: give back disk space without losing anything a user may still
//! need. Logs beyond the newest few of each component; backups that no
//! rollback can use any more (their transactions were rolled back or
//! aborted, and no other transaction names them); with `--builds`, the
//! checkouts and build dirs of the work dir. A backup of an abandoned
//! transaction is kept: abandon promised it would stay. A profile whose
//! build is running is skipped, and nothing is removed from a state dir
//! that has a damaged journal (it might name a backup).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::builder::workdir::{ComponentDirs, WorkDir};
use crate::swap::txn::{State, StateDir};

pub struct CleanRequest {
    pub work: WorkDir,
    pub state: StateDir,
    /// Logs to keep per component, newest first.
    pub keep_logs: usize,
    /// Also remove checkouts and build dirs (the next build starts over).
    pub builds: bool,
    pub dry_run: bool,
}

/// One thing removed (or, in a dry run, that would be).
pub struct Removed {
    pub path: PathBuf,
    pub bytes: u64,
    pub what: &'static str,
    /// A component dir the record names: dropped from it once removed.
    pub recorded: Option<(ComponentDirs, &'static str)>,
}

#[derive(Default)]
pub struct Cleaned {
    pub removed: Vec<Removed>,
    /// Why something was left alone.
    pub kept: Vec<String>,
}

impl Cleaned {
    pub fn bytes(&self) -> u64 {
        self.removed.iter().map(|r| r.bytes).sum()
    }
}

pub fn run(req: &CleanRequest) -> Result<Cleaned> {
    let mut out = Cleaned::default();
    work_dir(req, &mut out)?;
    backups(req, &mut out)?;
    if !req.dry_run {
        for r in &out.removed {
            crate::fsutil::remove_path(&r.path)?;
            if let Some((dirs, name)) = &r.recorded {
                dirs.forget(name)?;
            }
        }
    }
    Ok(out)
}

fn work_dir(req: &CleanRequest, out: &mut Cleaned) -> Result<()> {
    let Ok(profiles) = std::fs::read_dir(req.work.root()) else {
        return Ok(());
    };
    for profile in profiles.flatten() {
        let dir = profile.path();
        if !profile.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // Held by a running build of this profile (pipeline::run).
        let Some(_lock) = crate::fsutil::try_lock_dir(&dir)? else {
            out.kept
                .push(format!("{}: a build is running there", dir.display()));
            continue;
        };
        for component in std::fs::read_dir(&dir)?.flatten() {
            if !component.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = component.file_name().to_string_lossy().into_owned();
            let dirs = req
                .work
                .component(&profile.file_name().to_string_lossy(), &name);
            let made = dirs.made();
            if req.builds {
                for (name, what) in [
                    ("build", "build dir"),
                    ("src", "checkout"),
                    ("state", "build state"),
                ] {
                    let path = dirs.base.join(name);
                    let real_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
                    if real_dir && made.contains(name) {
                        out.removed.push(Removed {
                            bytes: size(&path),
                            path,
                            what,
                            recorded: Some((dirs.clone(), name)),
                        });
                    } else if std::fs::symlink_metadata(&path).is_ok() {
                        out.kept.push(not_ours(&path, &dirs));
                    }
                }
            }
            if made.contains("logs") {
                old_logs(&dirs.logs, req.keep_logs, out);
            } else if dirs.logs.exists() {
                out.kept.push(not_ours(&dirs.logs, &dirs));
            }
        }
    }
    Ok(())
}

fn not_ours(path: &Path, dirs: &ComponentDirs) -> String {
    format!(
        "{}: rdna1-patch has no record of making it ({} does not name it); remove it yourself if it should go",
        path.display(),
        dirs.record().display()
    )
}

/// Every log but the newest `keep` (log names start with their time) and
/// the one latest.log points at.
fn old_logs(dir: &Path, keep: usize, out: &mut Cleaned) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let latest = std::fs::read_link(dir.join("latest.log")).ok();
    let mut logs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.reverse();
    for path in logs.into_iter().skip(keep) {
        if latest.as_deref() == path.file_name().map(Path::new) {
            continue;
        }
        out.removed.push(Removed {
            bytes: size(&path),
            path,
            what: "log",
            recorded: None,
        });
    }
}

fn backups(req: &CleanRequest, out: &mut Cleaned) -> Result<()> {
    let dir = req.state.root().join("backups");
    if !dir.is_dir() {
        return Ok(());
    }
    // A dry run reads without the lock, which would write our pid into it.
    let _locked = if req.dry_run {
        None
    } else {
        Some(req.state.lock()?)
    };
    let all = req.state.read()?;
    if !all.damaged.is_empty() {
        out.kept.push(format!(
            "backups in {}: {} damaged journal(s) there may name one (`rdna1-patch rollback --list`)",
            dir.display(),
            all.damaged.len()
        ));
        return Ok(());
    }
    let finished = |s: State| matches!(s, State::RolledBack | State::Aborted);
    let needed: BTreeSet<&Path> = all
        .list
        .iter()
        .filter(|j| !finished(j.state))
        .map(|j| j.backup.as_path())
        .collect();
    for j in &all.list {
        if j.state == State::Abandoned && j.backup.is_file() {
            out.kept.push(format!(
                "{}: the original of abandoned transaction {}",
                j.backup.display(),
                j.id
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for j in all.list.iter().filter(|j| finished(j.state)) {
        let path = j.backup.as_path();
        if needed.contains(path) || !path.is_file() || !seen.insert(path) {
            continue;
        }
        out.removed.push(Removed {
            bytes: size(path),
            path: path.to_owned(),
            what: "backup",
            recorded: None,
        });
    }
    Ok(())
}

/// Bytes under `path`, not following symlinks.
fn size(path: &Path) -> u64 {
    walkdir::WalkDir::new(path)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| !m.is_dir())
        .map(|m| m.len())
        .sum()
}
