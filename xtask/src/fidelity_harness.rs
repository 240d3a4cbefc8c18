//! What every fidelity run hands the chroot: the batch-norm kernel
//! harness and a tree copied as it is. Below `fidelity` and
//! `fidelity_more`, which both use them.

use std::path::Path;

use anyhow::{Context, Result};

/// The script that compiles MIOpen's batch-norm kernels pristine and
/// patched in the chroot.
pub(crate) const HARNESS: &str = include_str!("bn-kernels.sh");

/// Put a script (or any file a run reads) into the chroot under a new
/// inode: bash reads a script as it goes, so one rewritten in place under
/// a run still going would have it run from the middle of other lines.
pub(crate) fn put_script(path: &Path, text: &str) -> Result<()> {
    let temp = path.with_extension("new");
    std::fs::write(&temp, text)?;
    std::fs::rename(&temp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Held while a fidelity run of `dir` goes: a second one would rewrite
/// its work dir and results under it. The lock goes with the process.
pub(crate) fn lock_run(dir: &Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(".run.lock");
    let f = std::fs::File::create(&path)?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another fidelity run of {} is going (it holds {}): wait for it, or stop it first",
            dir.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
