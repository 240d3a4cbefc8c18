//! The battery in one row: the `smoke` check, and what the verdict says
//! when the battery was interrupted or ran nothing (docs/rows.md).

use super::battery::{Battery, BatteryStatus, CaseResult, Outcome};
use crate::inspect::checks::{CheckReport, Status};

pub use crate::error::signal_name;

/// Push the `smoke` check for `b`, and when the battery is no pass though
/// nothing failed (nothing run, interrupted), say so in the verdict.
pub fn summarize(b: &Battery, r: &mut CheckReport) {
    if b.status == BatteryStatus::NothingRun {
        let why = b.skipped.as_deref().unwrap_or("no case ran");
        r.push("smoke", Status::Skip, format!("nothing was checked: {why}"));
        r.unfinished = Some(format!(
            "nothing was checked: none of the battery's {} cases ran",
            b.cases.len()
        ));
        return;
    }
    let on = ran_on(b);
    let (mine, other): (Vec<&CaseResult>, Vec<&CaseResult>) =
        b.cases.iter().partition(|c| c.is_miopen());
    let failed = |list: &[&CaseResult]| -> Vec<String> {
        list.iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| format!("{} ({})", c.name, c.outcome.word()))
            .collect()
    };
    let not_run = mine
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::NotRun | Outcome::Interrupted))
        .count();
    let (mine_failed, other_failed) = (failed(&mine), failed(&other));
    let others = if other_failed.is_empty() {
        let ok = other.iter().filter(|c| c.status == Status::Ok).count();
        format!("outside MIOpen {ok} of {} ok", other.len())
    } else {
        format!("outside MIOpen, not MIOpen's: {}", other_failed.join(", "))
    };
    let interrupted = interrupted_by(b);
    let skipped = match (not_run, &interrupted) {
        (0, _) => String::new(),
        (n, Some(by)) => format!(", {n} not run ({by} stopped the battery)"),
        (n, None) => format!(
            ", {n} not run (the battery's limit of {} s)",
            b.limits.battery_seconds
        ),
    };
    if let Some(by) = &interrupted {
        r.unfinished = Some(stopped_after(b, by));
    }
    if !mine_failed.is_empty() {
        let hang = mine.iter().any(|c| c.outcome == Outcome::Hang);
        r.push_fix(
            "smoke",
            Status::Fail,
            format!(
                "{} of {} MIOpen cases failed on {on}: {}{skipped}; {others}",
                mine_failed.len(),
                mine.len(),
                mine_failed.join(", ")
            ),
            format!(
                "{}the battery below names each case; `rdna1-patch verify --smoke --report smoke.md` writes the report to share (docs/verify.md)",
                if hang {
                    "a hang is MIOpen's Find on unpatched RDNA1: check that `verify --runtime` is all ok, and try MIOPEN_FIND_MODE=FAST; "
                } else {
                    ""
                }
            ),
        );
    } else {
        let ok = mine.len() - not_run;
        let status = if other_failed.is_empty() && not_run == 0 {
            Status::Ok
        } else {
            Status::Warn
        };
        r.push(
            "smoke",
            status,
            format!(
                "{ok} of {} MIOpen cases within tolerance on {on}{skipped}; {others}",
                mine.len()
            ),
        );
    }
}

/// "Ctrl-C" when the battery was interrupted.
fn interrupted_by(b: &Battery) -> Option<String> {
    (b.status == BatteryStatus::Interrupted).then(|| {
        b.interrupted_by
            .map_or_else(|| "a signal".to_owned(), signal_name)
    })
}

/// Where the battery ran, as the `smoke` row says it.
fn ran_on(b: &Battery) -> String {
    match (b.device, b.place.as_ref()) {
        ("cpu", _) => "the CPU (RDNA1_PATCH_SMOKE_DEVICE=cpu: no GPU ran)".to_owned(),
        (_, Some(w)) => format!(
            "{} ({})",
            w.device,
            w.kfd.first().map_or("no KFD node", |g| g.gfx.as_str())
        ),
        _ => "the GPU".to_owned(),
    }
}

/// The verdict of an interrupted battery: how far it got.
fn stopped_after(b: &Battery, by: &str) -> String {
    let ran = b
        .cases
        .iter()
        .filter(|c| !matches!(c.outcome, Outcome::NotRun | Outcome::Interrupted))
        .count();
    format!(
        "the battery was interrupted ({by}) after {ran} of {} cases",
        b.cases.len()
    )
}
