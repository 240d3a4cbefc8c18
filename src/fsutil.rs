//! Writing files so that a reader, or a crash, never sees half of one.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Write `data` to a temp file beside `path`, fsync it, give it `mode` (or
/// the replaced file's mode), and rename it into place.
pub fn write_atomic(path: &Path, data: &[u8], mode: Option<u32>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".rdna1-patch-")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    tmp.write_all(data)
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write {}", tmp.path().display()))?;
    let mode = mode.or_else(|| {
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    });
    let mode = mode.unwrap_or(0o644);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", tmp.path().display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    sync_dir(dir)
}

/// Make a rename or a new name in `dir` survive a power cut.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", dir.display()))
}

/// Copy `from` to a new file `to` (replacing a leftover), with `mode`, and
/// fsync it before returning.
pub fn copy_synced(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut src =
        std::fs::File::open(from).with_context(|| format!("cannot read {}", from.display()))?;
    let _ = std::fs::remove_file(to);
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(to)
        .with_context(|| format!("cannot create {}", to.display()))?;
    std::io::copy(&mut src, &mut dst)
        .and_then(|_| dst.set_permissions(std::fs::Permissions::from_mode(mode)))
        .and_then(|_| dst.sync_all())
        .with_context(|| format!("cannot write {}", to.display()))?;
    Ok(())
}

/// The permission bits of `path`.
pub fn mode(path: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .permissions()
        .mode()
        & 0o7777)
}

/// Create `dir` and its parents, naming it in the error.
pub fn create_dir_all(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}
