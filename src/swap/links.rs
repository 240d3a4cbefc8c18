//! What a library about to go into torch would load where it lands:
//! everything resolves, and no runtime torch bundles comes from elsewhere.

use std::path::Path;

use anyhow::Result;

use crate::error::hint;
use crate::swap::linker;
use crate::swap::relink::Relink;
use crate::torch::{self, Torch};
use crate::ui::Ui;

/// The in-place fix: the library it starts from must find, from torch/lib,
/// all it needs, as the fixed copy will have to; a library torch's MIOpen
/// cannot load is not made loadable by fixing its kernels.
pub fn needs_found(library: &Path, torch: &Torch) -> Result<()> {
    // A file that cannot be read as a library is the diagnosis's to name.
    let Ok(deps) = linker::resolve_as_in(library, &torch.lib_dir, &torch.preloaded_dirs()) else {
        return Ok(());
    };
    let missing = linker::missing(&deps);
    if missing.is_empty() {
        return Ok(());
    }
    Err(hint(
        format!(
            "{} needs {}, which the dynamic loader cannot find from {}: torch's MIOpen cannot load as it is, fixed or not; nothing was changed",
            library.display(),
            missing.join(", "),
            torch.lib_dir.display()
        ),
        "install what provides them (the same versions this MIOpen was built against, with their directory on the system library path), then run this again",
    ))
}

/// What the new file would load where it lands, in torch/lib, as torch
/// reaches it (`$ORIGIN` is torch/lib): everything must resolve, and no
/// runtime torch bundles may come from elsewhere.
pub fn check_links(file: &Path, torch: &Torch, relink: Option<&Relink>, ui: &Ui) -> Result<()> {
    let sdk = matches!(torch.layout, torch::Layout::RocmSdk(_));
    let deps = linker::resolve_as_in(file, &torch.lib_dir, &torch.preloaded_dirs())?;
    let missing = linker::missing(&deps);
    if !missing.is_empty() {
        return Err(hint(
            format!(
                "the dynamic loader cannot find {} for the new library in {}",
                missing.join(", "),
                torch.lib_dir.display()
            ),
            if sdk {
                "the rocm-sdk packages do not provide them: build against this environment's devel SDK (`pip install \"rocm[devel]\"`, then `rdna1-patch build miopen --rocm \"$(python -m rocm_sdk path --root)\"`)"
            } else if relink.is_some() {
                "torch does not bundle them and they are not on the system library path: install them (e.g. ROCm's copies, with their directory in /etc/ld.so.conf.d), or pass --no-relink to keep the build's RUNPATH"
            } else {
                "the build's RUNPATH no longer reaches them: rebuild, or leave out --no-relink"
            },
        ));
    }
    let dups = linker::second_copies(&deps, &torch.runtime_dirs())?;
    if dups.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = dups
        .iter()
        .map(|(b, other)| format!("{} (torch bundles {b})", other.display()))
        .collect();
    let msg = format!(
        "the new library would load a second copy of runtimes torch bundles: {}",
        list.join(", ")
    );
    if sdk {
        return Err(hint(
            msg,
            format!(
                "the build links another ROCm's runtime; rebuild against the rocm-sdk devel SDK {} of this environment (`--rocm \"$(python -m rocm_sdk path --root)\"`)",
                torch.rocm()
            ),
        ));
    }
    if relink.is_none() {
        ui.warn(format!(
            "{msg}; two HIP runtimes in one process is a known cause of memory faults (--no-relink)"
        ));
        return Ok(());
    }
    Err(hint(
        msg,
        "a library that torch's bundled ones pull in needs it; report this with `rdna1-patch status --json` attached",
    ))
}
