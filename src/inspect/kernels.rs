//! `verify --compile`: the batch-norm kernels of the MIOpen torch loads,
//! compiled for the card's target through the comgr beside it, as MIOpen
//! compiles them at run time; and, where a transaction kept the original,
//! the original's kernels too, which should fail on gfx101x. No GPU runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::comgr;
use crate::comgr::child::{Answers, Batch};
use crate::inspect::checks::{CheckReport, Status};
use crate::kernel_check::{self, Child, Compiler, Plan, Row};
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

/// Every compile of the check, for one child: the control, then per
/// target the installed library's texts and the original's.
struct Compiles {
    batch: Batch,
    control: Plan,
    targets: Vec<(String, Plan, Option<anyhow::Result<Plan>>)>,
}

fn plan(
    installed: &[u8],
    original: Option<anyhow::Result<Vec<u8>>>,
    archs: &[String],
) -> anyhow::Result<Compiles> {
    let mut batch = Batch::default();
    let now = kernel_check::texts(&mut batch, installed)?;
    let before = original.map(|o| o.and_then(|bytes| kernel_check::texts(&mut batch, &bytes)));
    let control = kernel_check::plan(&mut batch, &now, CONTROL);
    let mut targets = Vec::new();
    for arch in archs {
        let plan_now = kernel_check::plan(&mut batch, &now, arch);
        let plan_before = before.as_ref().map(|b| match b {
            Ok(texts) => Ok(kernel_check::plan(&mut batch, texts, arch)),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        });
        targets.push((arch.clone(), plan_now, plan_before));
    }
    Ok(Compiles {
        batch,
        control,
        targets,
    })
}

pub fn check(
    torch: &Torch,
    journals: &[Journal],
    sysfs: &Path,
    asked: &[String],
    limit: Duration,
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
    // Refused here, before a child is started; the child checks again.
    if let Err(e) = comgr::check_trusted(&path) {
        return r.push_error("kernels", Status::Fail, &e);
    }
    // Each library is read once, whatever the number of targets.
    let installed = match crate::elf::read_file(&torch.target) {
        Ok(b) => b,
        Err(e) => return r.push_error("kernels", Status::Fail, &e),
    };
    let original = journals
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == torch.target)
        // The system route keeps no copy of the original: it is the
        // system's library, only ever read.
        .map(|j| crate::elf::read_file(j.system.as_ref().map_or(&j.backup, |s| &s.library)));
    let (archs, why) = targets(sysfs, asked);
    let compiles = match plan(&installed, original, &archs) {
        Ok(c) => c,
        Err(e) => return r.push_error("kernels", Status::Fail, &e),
    };
    let answers = match Child::new(path.clone(), limit).and_then(|c| c.compile(&compiles.batch)) {
        Ok(a) => a,
        Err(e) => return r.push_error("kernels", Status::Fail, &e),
    };
    let by = format!(
        "comgr {}.{} ({})",
        answers.version.0,
        answers.version.1,
        path.display()
    );
    // A kernel that fails for the gfx1030 control too fails for want of a
    // define this check does not pass: it says nothing about gfx101x. All
    // of them failing there says the comgr cannot compile at all.
    let control = compiles.control.rows(&answers.answers);
    if let Some(first) = control.iter().find_map(|r| r.error.as_ref())
        && control.iter().all(|r| !r.ok())
    {
        return r.push_fix(
            "kernels",
            Status::Fail,
            format!(
                "{by} failed to compile even the control target {CONTROL}: {}: {first}",
                control[0].name
            ),
            "this comgr compiles none of MIOpen's batch-norm kernels, so the check proves nothing: reinstall torch (it bundles its comgr), or leave out --compile",
        );
    }
    let control: Vec<String> = control
        .into_iter()
        .filter(|r| !r.ok())
        .map(|r| r.name)
        .collect();
    for (arch, now, before) in &compiles.targets {
        let rows = |plan: &Plan, answers: &Answers| without(plan.rows(&answers.answers), &control);
        let pristine = before.as_ref().map(|b| match b {
            Ok(plan) => Ok(rows(plan, &answers)),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        });
        report(r, &by, arch, why, rows(now, &answers), pristine, &control);
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
    by: &str,
    arch: &str,
    why: &str,
    installed: Vec<Row>,
    pristine: Option<anyhow::Result<Vec<Row>>>,
    left_out: &[String],
) {
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
