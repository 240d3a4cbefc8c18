//! `verify`: prove what is installed, loaded and linked, one check a line.

use std::path::PathBuf;
use std::time::Duration;

use crate::elf;
use crate::inspect::checks::{CheckReport, Status};
use crate::swap::torch::{self, Locator, Torch};
use crate::swap::txn::{Journal, State, StateDir};
use anyhow::{Context, Result};

mod installed;
mod prefix;
mod runtime;

use installed::{check_links, check_torch};
use prefix::{check_markers, check_prefix, check_targets};
use runtime::{check_runtime, smoke};

pub struct VerifyRequest {
    pub prefix: PathBuf,
    /// Given with --python/--torch-dir; otherwise the last install's torch.
    pub torch: Option<Locator>,
    pub python: PathBuf,
    pub state: StateDir,
    pub runtime: bool,
    pub smoke: bool,
    pub timeout: Duration,
    pub sysfs: PathBuf,
    pub jobs: usize,
    /// Compile torch's batch-norm kernels through its comgr.
    pub compile: bool,
    /// The targets to compile for; empty: the machine's RDNA1 cards.
    pub compile_for: Vec<String>,
}

pub fn run(req: &VerifyRequest) -> Result<CheckReport> {
    let mut r = CheckReport::default();
    let Some((prov, library)) = check_prefix(req, &mut r) else {
        return Ok(r);
    };
    // Read once: the library can be hundreds of MB.
    let bytes =
        std::fs::read(&library).with_context(|| format!("cannot read {}", library.display()));
    check_markers(&prov, &library, &bytes, &mut r);
    check_targets(&prov, &req.sysfs, &mut r);
    let built = bytes.ok().and_then(|b| elf::parse(&b).ok());
    let all = req.state.read()?;
    for d in &all.damaged {
        r.push_fix(
            "journal",
            Status::Fail,
            format!("{} is damaged: {}", d.path.display(), d.error),
            "if you edited it, undo the edit; otherwise set it aside (mv FILE FILE.damaged) once torch is as you want it",
        );
    }
    let journals = all.list;
    let torch = find_torch(req, &journals, &mut r);
    let install = torch
        .as_ref()
        .and_then(|t| check_torch(&req.state, t, &journals, &prov, built.as_ref(), &mut r));
    check_links(
        torch.as_ref().map_or(&library, |t| &t.target),
        torch.as_ref(),
        &mut r,
    );
    if req.compile {
        match &torch {
            Some(t) => crate::inspect::kernels::check(
                t,
                &journals,
                &req.sysfs,
                &req.compile_for,
                req.timeout,
                &mut r,
            ),
            None => r.push(
                "kernels",
                Status::Skip,
                "no torch to compile the kernels of",
            ),
        }
    }
    if req.runtime {
        match &torch {
            Some(t) => check_runtime(req, t, install.as_ref(), &mut r),
            None => r.push("runtime", Status::Skip, "no torch to import"),
        }
    }
    if req.smoke {
        smoke(req, torch.as_ref(), &mut r);
    }
    Ok(r)
}

fn find_torch(req: &VerifyRequest, journals: &[Journal], r: &mut CheckReport) -> Option<Torch> {
    let loc = match &req.torch {
        Some(l) => l.clone(),
        None => match journals.iter().rev().find(|j| j.state == State::Installed) {
            Some(j) => Locator::Dir(j.torch.dir.clone()),
            None => {
                r.push(
                    "torch",
                    Status::Skip,
                    "no --python/--torch-dir given and no install recorded",
                );
                return None;
            }
        },
    };
    match torch::locate(&loc) {
        Ok(t) => {
            r.push("layout", Status::Ok, layout_detail(&t));
            Some(t)
        }
        Err(e) => {
            r.push_error("torch", Status::Fail, &e);
            None
        }
    }
}

/// Which layout torch loads MIOpen from, and how it was found.
pub fn layout_detail(t: &Torch) -> String {
    match &t.layout {
        torch::Layout::Bundled => format!("torch/lib: torch loads {}", t.library.display()),
        torch::Layout::RocmSdk(sdk) => format!(
            "rocm-sdk {} ({}): torch's preload loads {} (found by {}{})",
            sdk.version,
            sdk.family,
            sdk.library.display(),
            sdk.found_by,
            sdk.note
                .as_deref()
                .map(|n| format!("; python's rocm_sdk: {n}"))
                .unwrap_or_default()
        ),
    }
}
