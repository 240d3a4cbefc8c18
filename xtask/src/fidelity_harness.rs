//! What every fidelity run hands the chroot: the batch-norm kernel
//! harness and a tree copied as it is. Below `fidelity` and
//! `fidelity_more`, which both use them.

use std::path::Path;

use anyhow::{Context, Result};

/// The script that compiles MIOpen's batch-norm kernels pristine and
/// patched in the chroot.
pub(crate) const HARNESS: &str = include_str!("bn-kernels.sh");

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
