//! The battery in one row: the `smoke` check, and what the verdict says
//! when the battery was interrupted or ran nothing (docs/rows.md).

use super::battery::{Battery, BatteryStatus, CaseResult, Outcome};
use crate::inspect::checks::{Blocking, CheckReport, Status};

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
                "{}{SHARE}",
                if hang {
                    "a hang is MIOpen's Find on unpatched RDNA1: check that `verify --runtime` is all ok, and try MIOPEN_FIND_MODE=FAST; "
                } else {
                    ""
                }
            ),
        );
    } else {
        let ok = mine.len() - not_run;
        let detail = format!(
            "{ok} of {} MIOpen cases within tolerance on {on}{skipped}; {others}",
            mine.len()
        );
        let passed = Passed {
            other_failed: &other_failed,
            not_run,
            interrupted: interrupted.is_some(),
            on: &on,
        };
        passed.row(b, detail, r);
    }
}

/// A battery whose MIOpen cases all passed that ran: the rest decides.
struct Passed<'a> {
    other_failed: &'a [String],
    not_run: usize,
    interrupted: bool,
    on: &'a str,
}

impl Passed<'_> {
    fn row(&self, b: &Battery, detail: String, r: &mut CheckReport) {
        if !self.other_failed.is_empty() {
            // Not what the fix is for, but torch fails there: no pass.
            return r.push_breaks(
                "smoke",
                Blocking::Fail,
                detail,
                format!(
                    "outside MIOpen: {} fail on {} (not MIOpen's; see smoke)",
                    self.other_failed.join(", "),
                    self.on
                ),
                Some(SHARE.into()),
            );
        }
        match (self.not_run, self.interrupted) {
            (0, _) => r.push("smoke", Status::Ok, detail),
            // The verdict leads with the interruption.
            (_, true) => r.push("smoke", Status::Warn, detail),
            (n, false) => r.push_breaks(
                "smoke",
                Blocking::NotChecked,
                detail,
                format!(
                    "{} not run: the battery's limit of {} s was reached (see smoke)",
                    crate::output::count(n, "MIOpen case", "MIOpen cases"),
                    b.limits.battery_seconds
                ),
                Some(format!(
                    "run it again with a longer --timeout (now {} s a case; the battery's limit grows with it)",
                    b.limits.case_seconds
                )),
            ),
        }
    }
}

/// Where a failed battery's cases are said and shared.
const SHARE: &str = "the battery below names each case; `rdna1-patch verify --smoke --report smoke.md` writes the report to share (docs/verify.md)";

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::verify::battery::{BATTERY_VERSION, Limits};
    use crate::inspect::verify::{cases, judge};

    /// A battery of real cases, MIOpen's (`true`) or another library's,
    /// each with its outcome.
    fn battery(outcomes: &[(bool, Outcome)], status: BatteryStatus) -> Battery {
        let all = cases::cases();
        let (mut mine, mut other) = (
            all.iter().filter(|c| c.library == "MIOpen"),
            all.iter().filter(|c| c.library != "MIOpen"),
        );
        Battery {
            battery: BATTERY_VERSION,
            device: "gpu",
            status,
            skipped: None,
            interrupted_by: (status == BatteryStatus::Interrupted).then_some(libc::SIGINT),
            limits: Limits {
                case_seconds: 2,
                battery_seconds: 20,
            },
            tolerances: Vec::new(),
            place: None,
            cases: outcomes
                .iter()
                .map(|&(miopen, outcome)| {
                    let case = match miopen {
                        true => mine.next(),
                        false => other.next(),
                    };
                    judge::blank(case.expect("enough cases"), outcome, String::new())
                })
                .collect(),
        }
    }

    /// A battery's cases (MIOpen's or not, and their outcomes), its status,
    /// and the smoke row's status, verdict and exit it must give.
    type Expected = (
        &'static [(bool, Outcome)],
        BatteryStatus,
        Status,
        &'static str,
        u8,
    );

    /// The smoke row's status and the answer for a battery: a failure
    /// outside MIOpen, and cases the battery's limit left unrun, are no
    /// pass; an interruption leads the verdict (and its signal the exit).
    #[test]
    fn every_battery_that_did_not_pass_is_no_pass() {
        use Outcome::*;
        let complete = BatteryStatus::Complete;
        let table: [Expected; 5] = [
            (
                &[(true, Ok), (false, Ok)],
                complete,
                Status::Ok,
                "no problem found",
                0,
            ),
            (
                &[(true, Wrong), (false, Ok)],
                complete,
                Status::Fail,
                "1 problem to fix: smoke",
                1,
            ),
            (
                &[(true, Ok), (false, Crash)],
                complete,
                Status::Fail,
                "1 problem to fix: outside MIOpen: [..] (crash) fail on the GPU (not MIOpen's; see smoke)",
                1,
            ),
            (
                &[(true, Ok), (true, NotRun), (false, Ok)],
                complete,
                Status::NotChecked,
                "not checked: 1 MIOpen case not run: the battery's limit of 20 s was reached (see smoke)",
                1,
            ),
            (
                &[(true, Ok), (true, Interrupted), (false, NotRun)],
                BatteryStatus::Interrupted,
                Status::Warn,
                "the battery was interrupted (Ctrl-C) after 1 of 3 cases; 1 warning",
                crate::error::NOTHING_CHECKED,
            ),
        ];
        for (outcomes, status, row, verdict, exit) in table {
            let mut r = CheckReport::default();
            summarize(&battery(outcomes, status), &mut r);
            let a = r.answer();
            let case = format!("{outcomes:?}: {a:?}");
            assert_eq!(r.checks[0].status, row, "{case}");
            let (head, tail) = verdict.split_once("[..]").unwrap_or((verdict, ""));
            assert!(
                a.verdict.starts_with(head) && a.verdict.ends_with(tail),
                "{case}"
            );
            assert_eq!(a.exit, exit, "{case}");
        }
    }
}
