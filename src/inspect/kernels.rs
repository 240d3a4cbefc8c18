//! `verify --compile`: the batch-norm kernels of the MIOpen torch loads,
//! compiled for the card's target through the comgr beside it, as MIOpen
//! compiles them at run time; and, where a transaction kept the original,
//! the original's kernels too, which should fail on gfx101x. No GPU runs.

use std::path::{Path, PathBuf};

use crate::comgr::{self, Comgr};
use crate::inspect::checks::{CheckReport, Status};
use crate::kernel_check::{self, Row};
use crate::swap::torch::Torch;
use crate::swap::txn::{Journal, State};

/// The targets to compile for: those asked for, else the RDNA1 cards of
/// this machine, else gfx1010 (and why).
fn targets(sysfs: &Path, asked: &[String]) -> (Vec<String>, &'static str) {
    if !asked.is_empty() {
        return (asked.to_vec(), "");
    }
    let found = crate::gpu::rdna1_targets(sysfs);
    if found.is_empty() {
        (
            vec!["gfx1010".to_owned()],
            " (no RDNA1 card found: for gfx1010)",
        )
    } else {
        (found, "")
    }
}

pub fn check(
    torch: &Torch,
    journals: &[Journal],
    sysfs: &Path,
    asked: &[String],
    r: &mut CheckReport,
) {
    let dirs = torch.runtime_dirs();
    let Some(path) = comgr::find(&dirs) else {
        r.push_fix(
            "kernels",
            Status::Fail,
            format!(
                "no libamd_comgr.so* beside torch's MIOpen ({}), so its kernels cannot be compiled as MIOpen compiles them",
                list(&dirs)
            ),
            "torch bundles comgr with its MIOpen; reinstall torch, or leave out --compile",
        );
        return;
    };
    let comgr = match Comgr::open(&path) {
        Ok(c) => c,
        Err(e) => {
            r.push_error("kernels", Status::Fail, &e);
            return;
        }
    };
    // Each library is read once, whatever the number of targets.
    let installed = match crate::elf::read_file(&torch.target) {
        Ok(b) => b,
        Err(e) => return r.push_error("kernels", Status::Fail, &e),
    };
    let original = journals
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == torch.target)
        .map(|j| crate::elf::read_file(&j.backup));
    let (archs, why) = targets(sysfs, asked);
    // A kernel that fails for the gfx1030 control too fails for want of a
    // define this check does not pass: it says nothing about gfx101x.
    let control: Vec<String> = kernel_check::check(&comgr, &installed, CONTROL)
        .map(|rows| {
            rows.into_iter()
                .filter(|r| !r.ok())
                .map(|r| r.name)
                .collect()
        })
        .unwrap_or_default();
    for arch in &archs {
        let now = kernel_check::check(&comgr, &installed, arch).map(|r| without(r, &control));
        let pristine = original.as_ref().map(|o| match o {
            Ok(bytes) => kernel_check::check(&comgr, bytes, arch).map(|r| without(r, &control)),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        });
        report(r, &comgr, arch, why, now, pristine, &control);
    }
}

/// The control target: batch norm works there (MIOpen marks it gfx103x).
const CONTROL: &str = "gfx1030";

fn without(rows: Vec<Row>, left_out: &[String]) -> Vec<Row> {
    rows.into_iter()
        .filter(|r| !left_out.contains(&r.name))
        .collect()
}

fn list(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn failing(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter(|r| !r.ok())
        .map(|r| format!("{}: {}", r.name, r.error.as_deref().unwrap_or_default()))
        .collect()
}

fn report(
    r: &mut CheckReport,
    comgr: &Comgr,
    arch: &str,
    why: &str,
    installed: anyhow::Result<Vec<Row>>,
    pristine: Option<anyhow::Result<Vec<Row>>>,
    left_out: &[String],
) {
    let installed = match installed {
        Ok(rows) => rows,
        Err(e) => return r.push_error("kernels", Status::Fail, &e),
    };
    let by = format!(
        "comgr {}.{} ({})",
        comgr.version.0,
        comgr.version.1,
        comgr.path.display()
    );
    if installed.is_empty() {
        r.push_fix(
            "kernels",
            Status::Fail,
            "torch's MIOpen embeds no batch-norm kernel text",
            "it is not a MIOpen rdna1-patch knows; nothing to compile",
        );
        return;
    }
    let bad = failing(&installed);
    let before = match pristine {
        Some(Ok(rows)) => format!(
            "; the original's: {} of {} fail",
            failing(&rows).len(),
            rows.len()
        ),
        Some(Err(e)) => format!("; the original could not be read: {e:#}"),
        None => String::new(),
    };
    let before = if left_out.is_empty() {
        before
    } else {
        format!(
            "{before}; left out, as they fail for the {CONTROL} control too with this check's defines: {}",
            left_out.join(", ")
        )
    };
    if bad.is_empty() {
        r.push(
            "kernels",
            Status::Ok,
            format!(
                "{} batch-norm kernels compile for {arch}{why} through {by}{before}",
                installed.len()
            ),
        );
    } else {
        r.push_fix(
            "kernels",
            Status::Fail,
            format!(
                "{} of {} batch-norm kernels do not compile for {arch}{why} through {by}{before}:\n{}",
                bad.len(),
                installed.len(),
                bad.join("\n")
            ),
            "batch norm fails on this card: `rdna1-patch install --into-torch` fixes torch's MIOpen",
        );
    }
}
