//! `install --into-torch` for a torch that loads the system's MIOpen: the
//! fix made in place from the system's library goes into torch/lib as a
//! copy whose run path names the system's directory, and libtorch_hip.so
//! searches torch/lib first (`txn::system` journals both). Add, don't
//! replace: the system file is only read.

use std::path::Path;

use anyhow::{Context, Result};

use crate::error::hint;
use crate::fsutil;
use crate::swap::relink;
use crate::swap::txn::{self, AddSystem, BuildRec, SwapOutcome};
use crate::torch::{self, Torch};
use crate::ui::Ui;

/// The fix to add: the prefix's library, made in place from the system's
/// library of SHA-256 `source_sha256` (None: a build, which this route
/// does not take).
pub struct Fix<'a> {
    pub rec: BuildRec,
    pub library: &'a Path,
    pub source_sha256: Option<&'a str>,
}

pub fn install(
    loc: &torch::Locator,
    locked: &txn::Locked,
    build: Fix,
    torch: Torch,
    ui: &Ui,
) -> Result<()> {
    let Some(source_sha256) = build.source_sha256 else {
        return Err(hint(
            format!(
                "torch {} at {} loads the system's MIOpen, and the build in {} was built, not made from that library; nothing was changed",
                torch.version,
                torch.dir.display(),
                build.rec.prefix.display()
            ),
            "leave out --built: for this torch, `install --into-torch` fixes the system's library into a copy of yours",
        ));
    };
    let _lock = locked.lock_target(&torch.library)?;
    let staged = locked.state.staged_path("system-copy");
    let result = (|| -> Result<_> {
        let sys = torch
            .system()
            .context("not a torch on the system's MIOpen")?;
        let run_path = relink::copy_beside(build.library, sys, &staged)?;
        let md5 = crate::checksum::md5_file(&staged)?;
        // Over an install of ours whose fix is of an older system library:
        // out with it first, then torch is looked at afresh.
        let torch = match txn::take_out(locked, &torch, &md5)? {
            Some(prev) => {
                ui.stage(
                    "Rolled back",
                    format!(
                        "transaction {}: its copy was made from an earlier {} (SHA-256 {})",
                        prev.id,
                        sys.library.display(),
                        prev.system.as_ref().map_or("", |s| s.sha256.as_str())
                    ),
                );
                torch::locate(loc)?
            }
            None => torch.clone(),
        };
        let sys = torch
            .system()
            .context("torch no longer loads the system's MIOpen")?;
        ui.stage("Route", sys.how());
        ui.note(format!(
            "the system's {} ({}) is only read; the copy's run path is {run_path}",
            sys.library.display(),
            crate::torch::system::describe_owner(&sys.owner, &sys.library)
        ));
        let hip_staged = locked.state.staged_path("libtorch_hip.so");
        let hip_edited = relink::hip_with_origin(sys, &hip_staged)?;
        let add = AddSystem {
            torch: &torch,
            sys,
            copy_at: &torch.library,
            tensile: None,
            build: BuildRec {
                relink: format!("RUNPATH -> {run_path}"),
                ..build.rec.clone()
            },
            copy: &staged,
            copy_run_path: run_path.clone(),
            hip_edited,
            derived_from: source_sha256,
        };
        let outcome = txn::add_system(locked, &add);
        let _ = fsutil::remove_own_file(&hip_staged);
        Ok((outcome?, torch))
    })();
    let _ = fsutil::remove_own_file(&staged);
    let (outcome, torch) = result?;
    report(&outcome, &torch, loc, ui);
    Ok(())
}

fn report(outcome: &SwapOutcome, torch: &Torch, loc: &torch::Locator, ui: &Ui) {
    match outcome {
        SwapOutcome::Installed(j) => {
            let s = j.system.as_ref().expect("a system journal");
            ui.stage(
                "Installed",
                format!(
                    "{} (transaction {}): a fixed copy (MD5 {}) of the system's {}, which is unchanged",
                    j.torch.target.display(),
                    j.id,
                    j.new.md5,
                    s.library.display()
                ),
            );
            if let Some(e) = &s.edit {
                ui.stage(
                    "Relink",
                    format!(
                        "{}: run path {} -> {} (MD5 {} -> {})",
                        s.hip.display(),
                        if e.before.is_empty() { "(none)" } else { &e.before },
                        e.after,
                        j.original.md5,
                        e.new.md5
                    ),
                );
            }
            ui.note(format!(
                "`rdna1-patch rollback` takes the copy out{}",
                if s.edit.is_some() {
                    format!(
                        " and puts libtorch_hip.so back from {}",
                        j.backup.display()
                    )
                } else {
                    String::new()
                }
            ));
            crate::swap::kernel_cache::after_swap(loc, ui);
        }
        SwapOutcome::AlreadyInstalled(j) => ui.stage(
            "Installed",
            format!(
                "{} already holds this fix of the system's MIOpen (transaction {}, {}); nothing to do",
                torch.library.display(),
                j.id,
                j.created
            ),
        ),
    }
}

/// The file to compare against the journal's target when settling: the
/// copy's name for the system route, torch's library otherwise.
pub fn settled_target(torch: &Torch) -> &Path {
    match torch.system() {
        Some(_) => &torch.library,
        None => &torch.target,
    }
}
