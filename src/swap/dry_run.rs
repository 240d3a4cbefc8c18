//! What a dry run checks before it says what the real run would do: every
//! place the real run writes (torch's library directory, the prefix the
//! in-place fix writes, the state dir and its lock), so that a dry run
//! which says "would" is one the real run can do. Nothing is made here.

use std::path::Path;

use anyhow::Result;

use crate::swap::txn::StateDir;
use crate::torch::Torch;

/// `prefix`: where the route writes a prefix (the in-place fix), if it does.
pub fn check(state: &StateDir, torch: &Torch, prefix: Option<&Path>) -> Result<()> {
    // The system route adds its copy to torch/lib; the others replace the
    // library where it lies (torch/lib, or the rocm-sdk package's lib).
    let dir = match torch.system() {
        Some(_) => torch.lib_dir.as_path(),
        None => torch.target.parent().unwrap_or(Path::new("/")),
    };
    crate::swap::txn::ensure_writable(dir)?;
    if let Some(p) = prefix {
        crate::prefix::preflight(p)?;
    }
    state.can_lock()
}
