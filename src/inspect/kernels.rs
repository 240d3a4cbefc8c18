//! `verify --compile`: the batch-norm kernels of the MIOpen torch loads,
//! judged for the card's target as the diagnosis judges them
//! (`verdict::judge`: every case each text reads, through the comgr and
//! hipRTC beside it, as MIOpen compiles them at run time); and, where a
//! transaction kept the original, the original's too, which should fail
//! on gfx101x. No GPU runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::inspect::checks::{Blocking, CheckReport, Status};
use crate::swap::txn::{Journal, State};
use crate::torch::Torch;
use crate::verdict::{self, Judgement, Verdict};

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
    limit: Duration,
    r: &mut CheckReport,
) {
    // GPUs, none RDNA1, none asked for: nothing of this tool's to judge.
    if let (true, crate::plan::Here::NoRdna1(others)) =
        (asked.is_empty(), crate::plan::facts::cards(sysfs, asked).1)
    {
        return r.push(
            "kernels",
            Status::Skip,
            format!(
                "not compiled: no RDNA1 card in this machine ({}), so nothing for this tool to fix on it (--compile-for gfx1010 judges for one)",
                others.join(", ")
            ),
        );
    }
    let dirs = torch.runtime_dirs();
    let Some(path) = crate::comgr::find(&dirs) else {
        return not_checked(
            r,
            format!(
                "no libamd_comgr.so* beside torch's MIOpen ({}), so its kernels cannot be compiled as MIOpen compiles them",
                list(&dirs)
            ),
            Some(
                "torch bundles comgr with its MIOpen; reinstall torch, or leave out --compile"
                    .into(),
            ),
        );
    };
    let hiprtc = crate::comgr::hiprtc::find(&dirs);
    let compiler = match crate::diagnosis::compiler(&path, hiprtc.as_deref(), limit) {
        Ok(c) => c,
        Err(e) => return not_checked_by(r, &e),
    };
    // Each library is read once, whatever the number of targets.
    let installed = match crate::elf::read_file(&torch.target) {
        Ok(b) => b,
        Err(e) => return not_checked_by(r, &e),
    };
    let original = journals
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == torch.target)
        // The system route keeps no copy of the original: it is the
        // system's library, only ever read.
        .map(|j| crate::elf::read_file(j.system.as_ref().map_or(&j.backup, |s| &s.library)));
    let (archs, why) = targets(sysfs, asked);
    // Every target at once, the installed library's and the original's.
    let names: Vec<&str> = archs.iter().map(String::as_str).collect();
    let nows = match verdict::judge_all(&compiler, &installed, &names) {
        Ok(j) => j,
        Err(e) => return not_checked_by(r, &e),
    };
    // A comgr that compiles nothing, not even for the control, proves
    // nothing: said before the original is compiled too.
    if let Some(first) = nows.iter().find_map(broken_compiler) {
        return not_checked(
            r,
            format!(
                "{} failed to compile even the control target {}: {first}",
                verdict::Compiler::describe(&compiler),
                verdict::CONTROL
            ),
            Some("this comgr compiles none of MIOpen's batch-norm kernels, so the check proves nothing: reinstall torch (it bundles its comgr), or leave out --compile".into()),
        );
    }
    let befores: Option<Vec<anyhow::Result<Judgement>>> = original.as_ref().map(|o| {
        match o {
            Ok(bytes) => verdict::judge_all(&compiler, bytes, &names),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        }
        .map_or_else(
            |e| {
                names
                    .iter()
                    .map(|_| Err(anyhow::anyhow!("{e:#}")))
                    .collect()
            },
            |js| js.into_iter().map(Ok).collect(),
        )
    });
    let mut befores = befores.map(Vec::into_iter);
    for (arch, now) in archs.iter().zip(nows) {
        let by = verdict::Compiler::describe(&compiler);
        let before = befores.as_mut().and_then(Iterator::next);
        // torch with no code for the card runs nothing there: its torch
        // first, whatever MIOpen does.
        let lacks = matches!(torch.gpu_code(), Ok(Some(c)) if !c.all_targets().is_empty() && !c.covers(arch));
        report(r, &by, arch, why, &now, before, lacks);
    }
}

/// When every kernel fails for the control too, the compiler compiles
/// nothing of MIOpen's: its first kernel and error.
fn broken_compiler(j: &Judgement) -> Option<String> {
    let every = !j.kernels.is_empty()
        && j.kernels
            .iter()
            .all(|k| matches!(k.verdict, Verdict::NotJudged { .. }));
    let k = j.kernels.first()?;
    match (&k.verdict, every) {
        (Verdict::NotJudged { error, .. }, true) => Some(format!("{}: {error}", k.name)),
        _ => None,
    }
}

/// The compile check could not run: whether batch norm fails is not
/// known, which is no pass (docs/rows.md).
fn not_checked(r: &mut CheckReport, why: String, fix: Option<String>) {
    r.push_breaks(
        "kernels",
        Blocking::NotChecked,
        format!("not checked: {why}"),
        "batch norm: its kernels could not be compiled to judge them (see kernels)",
        fix,
    );
}

/// [`not_checked`] for an error: its chain, its help as the fix.
fn not_checked_by(r: &mut CheckReport, e: &anyhow::Error) {
    not_checked(
        r,
        crate::error::chain(e),
        crate::error::help(e).map(str::to_owned),
    );
}

fn list(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn report(
    r: &mut CheckReport,
    by: &str,
    arch: &str,
    why: &str,
    now: &Judgement,
    before: Option<anyhow::Result<Judgement>>,
    torch_lacks: bool,
) {
    if now.kernels.is_empty() {
        return not_checked(
            r,
            "torch's MIOpen embeds no batch-norm kernel text".into(),
            Some("it is not a MIOpen rdna1-patch knows; nothing to compile".into()),
        );
    }
    let bad: Vec<String> = now
        .failing()
        .map(|k| format!("{}: {}", k.name, k.verdict.describe()))
        .collect();
    let mut before = match before {
        Some(Ok(j)) => format!(
            "; the original's: {} of {} fail",
            j.failing().count(),
            j.kernels.len()
        ),
        Some(Err(e)) => format!("; the original could not be read: {e:#}"),
        None => String::new(),
    };
    let not_judged: Vec<&str> = now
        .kernels
        .iter()
        .filter(|k| matches!(k.verdict, Verdict::NotJudged { .. }))
        .map(|k| k.name.as_str())
        .collect();
    if !not_judged.is_empty() {
        before.push_str(&format!(
            "; {} more not judged (information, not a failure): no case compiles even for the {} control: {}",
            not_judged.len(),
            verdict::CONTROL,
            not_judged.join(", ")
        ));
    }
    // Only kernels judged are counted as compiling; the ones no case
    // compiles for even on the control are said apart, as information.
    let n = now.kernels.len() - not_judged.len();
    if bad.is_empty() {
        r.push(
            "kernels",
            Status::Ok,
            format!("{n} batch-norm kernels judged compile for {arch}{why} through {by}{before}"),
        );
    } else {
        let (breaks, fix) = crate::plan::miopen_breaks(bad.len(), &[arch.to_owned()], torch_lacks);
        r.push_breaks(
            "kernels",
            Blocking::Fail,
            format!(
                "{} of {n} batch-norm kernels judged do not compile for {arch}{why} through {by}{before}:\n{}",
                bad.len(),
                bad.join("\n")
            ),
            breaks,
            Some(fix),
        );
    }
}
