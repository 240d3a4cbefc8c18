//! MIOpen's cache of compiled kernels, after the library under it changed.
//!
//! MIOpen keeps the code objects it compiles in a per-user SQLite file,
//! `~/.cache/miopen/<version>/<arch>_<CUs>.ukdb` (exactly
//! `$MIOPEN_CUSTOM_CACHE_DIR` when that is set), keyed by kernel file name
//! and build options, not by the kernel's text. A failed compile is never
//! cached, so installing a fix leaves nothing stale; but after a rollback
//! the kernels compiled from the fixed texts would still be served, and
//! batch norm would go on working with a library that cannot build it. So
//! after every swap the batch-norm kernels of the gfx101x caches are
//! forgotten (the rest of the cache, convolutions included, is kept), and
//! MIOpen compiles them again from the library now in place.

use std::path::{Path, PathBuf};

use anyhow::Result;

/// What was done, for the user to read.
pub struct Forgotten {
    /// (file, batch-norm kernels removed from it).
    pub files: Vec<(PathBuf, usize)>,
    /// Why nothing was looked at, when nothing was.
    pub note: Option<String>,
}

/// The home of the user whose torch runs MIOpen: under sudo, sudo's user's
/// (sudo sets HOME to root's, whose cache that user's torch never reads);
/// else HOME. Only listed here: what is changed in it, python changes as
/// that user (`proc::python`).
fn torch_users_home() -> Option<PathBuf> {
    match crate::owner::invoking_user() {
        Some(uid) => crate::owner::passwd(uid).map(|(_, home)| home),
        None => std::env::var_os("HOME").map(PathBuf::from),
    }
}

/// The cache directories MIOpen of any version uses for this user.
fn cache_dirs() -> Vec<PathBuf> {
    if let Some(custom) = std::env::var_os("MIOPEN_CUSTOM_CACHE_DIR").filter(|v| !v.is_empty()) {
        let custom = PathBuf::from(custom);
        let custom = match (custom.strip_prefix("~"), torch_users_home()) {
            (Ok(rest), Some(home)) => home.join(rest),
            _ => custom,
        };
        // The python that edits it runs in `/`: a relative dir is ours.
        return vec![std::path::absolute(&custom).unwrap_or(custom)];
    }
    let Some(home) = torch_users_home() else {
        return Vec::new();
    };
    let root = home.join(".cache/miopen");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The user caches of gfx101x devices in `dir`: regular files only. A
/// symlink is never followed: it could name any SQLite file, whose rows
/// the cleanup would delete (as root under sudo).
fn gfx101x_caches(dir: &Path) -> Vec<PathBuf> {
    let mut files =
        crate::fsutil::entries_named(dir, |n| n.starts_with("gfx101") && n.ends_with(".ukdb"));
    files.retain(|f| std::fs::symlink_metadata(f).is_ok_and(|m| m.is_file()));
    files
}

/// Deletes the batch-norm kernels, in one transaction, and prints how many.
const FORGET: &str = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
with db:
    n = db.execute("DELETE FROM kern_db WHERE kernel_name LIKE 'MIOpenBatchNorm%'").rowcount
print(n)
"#;

const FORGET_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Forget the batch-norm kernels MIOpen compiled for gfx101x, with
/// `python` (its sqlite3 module).
pub fn forget_batch_norm(python: &Path) -> Result<Forgotten> {
    if std::env::var("MIOPEN_DISABLE_CACHE")
        .is_ok_and(|v| matches!(v.as_str(), "1" | "ON" | "on" | "true" | "yes"))
    {
        return Ok(Forgotten {
            files: Vec::new(),
            note: Some("MIOPEN_DISABLE_CACHE is set: MIOpen keeps no compiled kernels".into()),
        });
    }
    let mut files = Vec::new();
    for dir in cache_dirs() {
        for file in gfx101x_caches(&dir) {
            let mut cmd = crate::proc::python(python)?;
            // sqlite3 alone: no site (no .pth, no sitecustomize), no PYTHON*.
            cmd.args(["-I", "-S", "-c", FORGET]).arg(&file);
            let out = crate::proc::run(cmd, FORGET_LIMIT)?;
            let ok = out.status.is_some_and(|s| s.success());
            let n = out.stdout.trim().parse::<usize>().ok().filter(|_| ok);
            let Some(n) = n else {
                anyhow::bail!(
                    "cannot remove the batch-norm kernels from MIOpen's cache {}: {}; MIOpen may serve kernels compiled from the library that was in place before: remove that file (MIOpen compiles its kernels again)",
                    file.display(),
                    out.stderr.trim().lines().last().unwrap_or("no answer")
                );
            };
            files.push((file, n));
        }
    }
    Ok(Forgotten { files, note: None })
}

/// Forget them after a swap, and say so; a failure is a warning (the swap
/// stands), with what to do.
pub fn after_swap(torch: &crate::torch::Locator, ui: &crate::ui::Ui) {
    let python = match torch {
        crate::torch::Locator::Python(p) => p.clone(),
        crate::torch::Locator::Dir(_) => PathBuf::from("python3"),
    };
    match forget_batch_norm(&python) {
        Ok(f) => {
            for (file, n) in &f.files {
                ui.stage(
                    "Cache",
                    format!(
                        "forgot {n} batch-norm kernels MIOpen had compiled, in {} (it compiles them again from the library now in place)",
                        file.display()
                    ),
                );
            }
            if let Some(note) = f.note {
                ui.note(note);
            }
        }
        Err(e) => ui.warn(format!("{e:#}")),
    }
}
