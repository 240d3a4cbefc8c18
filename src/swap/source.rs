//! A prefix the in-place fix made is the fix of one library: the one it
//! was made from, named with its SHA-256 in the provenance. Installed into
//! a torch whose library is another (a prefix made for another torch, or
//! for this one before a pip upgrade), it would replace that torch's
//! MIOpen with another build's. Checked alike by the dry run and the real
//! run, before anything is said to be done or written.

use std::path::Path;

use anyhow::Result;

use crate::error::hint;
use crate::prefix::Provenance;
use crate::swap::txn::StateDir;
use crate::torch::Torch;

/// The build in `prefix` (`provenance`), when it is an in-place fix, was
/// made from the library this torch has (its original, over an install of
/// ours). A build compiled from source is for any torch of its ROCm line:
/// nothing to check here.
pub fn check(
    prefix: &Path,
    provenance: &Provenance,
    torch: &Torch,
    state: &StateDir,
) -> Result<()> {
    let Some(made) = &provenance.in_place else {
        return Ok(());
    };
    let original = match torch.system() {
        Some(s) => s.library.clone(),
        None => crate::swap::txn::original_of(&state.read()?, &torch.target),
    };
    let now = crate::prefix::sha256_hex(&crate::elf::read_file(&original)?);
    if now == made.source_sha256 {
        return Ok(());
    }
    let prefix = prefix.display();
    let from = Path::new(&made.source);
    Err(if from == original || from == torch.target {
        hint(
            format!(
                "the prefix {prefix} is the in-place fix of {} as it was (SHA-256 {}), and that file has changed since (SHA-256 {now}: a pip install or upgrade?); nothing was changed",
                from.display(),
                made.source_sha256
            ),
            format!(
                "leave out --built: `rdna1-patch install --into-torch` fixes the library torch {} has now, in place",
                torch.version
            ),
        )
    } else {
        hint(
            format!(
                "the prefix {prefix} is the in-place fix of another torch's library, {}, not of torch {}'s {}: it fits only the library it was made from; nothing was changed",
                from.display(),
                torch.version,
                torch.target.display()
            ),
            format!(
                "leave out --built: `rdna1-patch install --into-torch` fixes torch {}'s own library in place (with --prefix DIR, into a prefix of its own, keeping {prefix} for the other torch)",
                torch.version
            ),
        )
    })
}
