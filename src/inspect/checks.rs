//! A list of checks, each ok / warn / FAIL / skip with its evidence and the
//! fix: what `verify` and `doctor` print, or give as JSON.

use serde::Serialize;

use super::glance::{glance, glance_wrapped, shorten, wrap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skip,
    /// A check the answer needs that could not run (a compiler that will
    /// not load, a directory it may not read): no pass, and said as such.
    #[serde(rename = "not-checked")]
    NotChecked,
}

/// A row that keeps the answer from yes: the only statuses a row that
/// says what fails for the user (`breaks`) can have, so that no `warn`
/// ever says a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    Fail,
    NotChecked,
}

impl From<Blocking> for Status {
    fn from(b: Blocking) -> Status {
        match b {
            Blocking::Fail => Status::Fail,
            Blocking::NotChecked => Status::NotChecked,
        }
    }
}

impl Status {
    /// Whether a row of this status keeps the answer from yes (exit 1,
    /// `ok` false): the one rule's first question.
    pub fn blocks(self) -> bool {
        match self {
            Status::Fail | Status::NotChecked => true,
            Status::Ok | Status::Warn | Status::Skip => false,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
            Status::NotChecked => "----",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    /// The evidence: what was found.
    pub detail: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The failed check this one follows from (a missing ROCm has no
    /// compiler): shown under it, and fixed by its fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    /// What a blocking row means for the user, in a torch user's words,
    /// with the one next step ("batch-norm training: 2 kernels fail for
    /// gfx1010; `rdna1-patch install --into-torch` fixes them"): the
    /// verdict says it in place of the row's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaks: Option<String>,
}

/// The answer a report gives, decided by one rule ([`CheckReport::answer`])
/// for doctor, verify and status alike: the first line, `ok` and the exit
/// status never disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub verdict: String,
    pub ok: bool,
    /// 0 a pass; 1 a row failed or a check the answer needs did not run;
    /// 3 nothing failed but the run did not finish (`unfinished`).
    pub exit: u8,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct CheckReport {
    pub checks: Vec<Check>,
    /// Why the run is no pass though no check failed (a battery that ran
    /// nothing, or was interrupted): the verdict leads with it.
    #[serde(skip)]
    pub unfinished: Option<String>,
    /// doctor's reading of the GPU libraries torch loads (`libraries` in
    /// its JSON), when it read them.
    pub libraries: Option<Vec<crate::gpucode::Finding>>,
    /// What the answer is about ("torch 2.6.0+rocm6.4 on gfx1010"): the
    /// verdict leads with it.
    #[serde(skip)]
    pub subject: Option<String>,
    /// Paths a person reads shorter, each (path, its short form): what is
    /// in torch's directory as `torch/...`, home as `~`. The JSON and
    /// `--detail` keep them whole.
    #[serde(skip)]
    pub short: Vec<(String, String)>,
    /// The plan for this machine (doctor's): its steps go into the JSON,
    /// its count and first step into the verdict.
    #[serde(skip)]
    pub plan: Option<crate::plan::Plan>,
}

impl CheckReport {
    pub fn push(&mut self, name: &'static str, status: Status, detail: impl Into<String>) {
        self.checks.push(Check {
            name,
            status,
            detail: crate::shell::rewrite(&detail.into()).into_owned(),
            fix: None,
            cause: None,
            breaks: None,
        });
    }

    /// A blocking check (`Fail` or `NotChecked`) with what it means for
    /// the user and the next step, which the verdict says, and its fix.
    pub fn push_breaks(
        &mut self,
        name: &'static str,
        status: Blocking,
        detail: impl Into<String>,
        breaks: impl Into<String>,
        fix: Option<String>,
    ) {
        self.checks.push(Check {
            name,
            status: status.into(),
            detail: crate::shell::rewrite(&detail.into()).into_owned(),
            fix: fix.map(|f| crate::shell::fix(&f)),
            cause: None,
            breaks: Some(crate::shell::rewrite(&breaks.into()).into_owned()),
        });
    }

    /// A check with what to do about it.
    pub fn push_fix(
        &mut self,
        name: &'static str,
        status: Status,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.checks.push(Check {
            name,
            status,
            detail: crate::shell::rewrite(&detail.into()).into_owned(),
            fix: Some(crate::shell::fix(&fix.into())),
            cause: None,
            breaks: None,
        });
    }

    /// A check that ended in an error: its chain as the detail, and its
    /// hint's help, if it has one, as the fix (never "help:" inside the
    /// detail).
    pub fn push_error(&mut self, name: &'static str, status: Status, err: &anyhow::Error) {
        self.checks.push(Check {
            name,
            status,
            detail: crate::shell::rewrite(&crate::error::chain(err)).into_owned(),
            fix: crate::error::help(err).map(crate::shell::fix),
            cause: None,
            breaks: None,
        });
    }

    /// Mark the failed checks among `effects` as following from the
    /// failed check `cause`: one cause, one fix.
    pub fn follows_from(&mut self, cause: &'static str, effects: &[&str]) {
        let failed = |c: &Check| c.status == Status::Fail;
        if !self.checks.iter().any(|c| c.name == cause && failed(c)) {
            return;
        }
        for c in &mut self.checks {
            if effects.contains(&c.name) && failed(c) {
                c.cause = Some(cause);
                c.fix = None;
            }
        }
    }

    /// One line that says where things stand ([`answer`]'s verdict).
    ///
    /// [`answer`]: CheckReport::answer
    pub fn verdict(&self) -> String {
        self.answer().verdict
    }

    /// The one rule from rows to the answer. Any `FAIL` or `not checked`
    /// row makes it no (exit 1, `ok` false) and the verdict names each
    /// cause (a row's `breaks` where it says what fails for the user, else
    /// its name); what follows from a cause is counted under it. With no
    /// such row, a run that did not finish (`unfinished`) leads and is no
    /// pass (exit 3); otherwise "no problem found", with the warnings
    /// counted: `warn` and `skip` rows are information and never fail it.
    pub fn answer(&self) -> Answer {
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        let said = |c: &Check| c.breaks.clone().unwrap_or_else(|| c.name.to_owned());
        let causes: Vec<String> = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail && c.cause.is_none())
            .map(said)
            .collect();
        let unchecked: Vec<String> = self
            .checks
            .iter()
            .filter(|c| c.status == Status::NotChecked)
            .map(said)
            .collect();
        let said_any = self
            .checks
            .iter()
            .any(|c| c.status == Status::Fail && c.cause.is_none() && c.breaks.is_some());
        let warnings = match count(Status::Warn) {
            0 => String::new(),
            1 => "; 1 warning".to_owned(),
            n => format!("; {n} warnings"),
        };
        // The plan's count and first step, where it has more than one.
        let warnings = match self.plan.as_ref().and_then(crate::plan::Plan::said) {
            Some(p) => format!("{warnings}; {p}"),
            None => warnings,
        };
        let subject = self
            .subject
            .as_deref()
            .map(|s| format!("{s}: "))
            .unwrap_or_default();
        let lead = self
            .unfinished
            .as_deref()
            .map(|w| format!("{w}; "))
            .unwrap_or_default();
        let mut parts = Vec::new();
        if !causes.is_empty() {
            let follow = count(Status::Fail) - causes.len();
            parts.push(format!(
                "{} to fix: {}{}",
                if causes.len() == 1 {
                    "1 problem"
                } else {
                    "problems"
                },
                // Names alone read as a list; sentences need a stop.
                causes.join(if said_any { "; " } else { ", " }),
                match follow {
                    0 => String::new(),
                    n => format!(" ({n} more check(s) fail because of it, shown under it)"),
                }
            ));
        }
        if !unchecked.is_empty() {
            parts.push(format!("not checked: {}", unchecked.join("; ")));
        }
        // Every blocking row is a cause or follows from one.
        debug_assert_eq!(
            parts.is_empty(),
            !self.checks.iter().any(|c| c.status.blocks())
        );
        if !parts.is_empty() {
            return Answer {
                verdict: format!("{subject}{lead}{}{warnings}", parts.join("; ")),
                ok: false,
                exit: 1,
            };
        }
        match &self.unfinished {
            Some(why) => Answer {
                verdict: format!("{subject}{why}{warnings}"),
                ok: false,
                exit: crate::error::NOTHING_CHECKED,
            },
            None => Answer {
                verdict: format!("{subject}no problem found{warnings}"),
                ok: true,
                exit: 0,
            },
        }
    }

    /// The verdict, then one line per check, with a `fix:` line under each
    /// that has one, and the checks that follow from a failure under it.
    /// The report for a person; with `width`, each row is wrapped to it
    /// under its own column, not cut mid-word by the terminal.
    pub fn text_wrapped(&self, width: Option<usize>, detail: bool) -> String {
        let Some(width) = width else {
            return self.text_for(detail);
        };
        // Rows continue under their detail column (status 4, two spaces,
        // name 9, a space); the verdict line from the left.
        let column = " ".repeat(4 + 2 + 9 + 1);
        wrap(&self.text_for(detail), width, |line| {
            if line.starts_with("verdict:") {
                ""
            } else {
                column.as_str()
            }
        })
    }

    /// The verdict, then one line per check, its detail lines indented
    /// under it, a `fix:` line under each that has one, and the checks
    /// that follow from a failure under it. Without `detail`, one glance:
    /// paths short (`short`), each row cut to [`GLANCE`](super::glance::GLANCE) characters and a
    /// fix or the verdict wrapped there; with it, everything whole.
    pub fn text_for(&self, detail: bool) -> String {
        let column = " ".repeat(4 + 2 + 9 + 1);
        // Each command as this run types it (shell.rs) before a row is
        // cut or wrapped, so that the cut and the wrap see it whole; the
        // rewrite is the same again when the text is printed.
        let short = |text: &str| {
            let text = crate::shell::rewrite(text).into_owned();
            if detail {
                return text;
            }
            self.short.iter().fold(text, |t, (p, s)| shorten(&t, p, s))
        };
        let row = |line: String| if detail { line } else { glance(&line) };
        let wrapped = |line: String, indent: &str| match detail {
            true => line,
            false => glance_wrapped(&line, indent),
        };
        let verdict = crate::shell::rewrite(&self.verdict()).into_owned();
        let mut lines = vec![wrapped(format!("verdict: {verdict}"), "         ")];
        for c in self.checks.iter().filter(|c| c.cause.is_none()) {
            let text = short(&c.detail);
            let mut text = text.lines();
            lines.push(row(format!(
                "{:<4}  {:<9} {}",
                c.status.label(),
                c.name,
                text.next().unwrap_or_default()
            )));
            // Detail lines stay under their row, not at column 0.
            lines.extend(text.map(|l| row(format!("{column}{l}"))));
            if let Some(fix) = &c.fix {
                let fix = short(fix);
                lines.push(wrapped(format!("{column}fix: {fix}"), &column));
            }
            for e in self.checks.iter().filter(|e| e.cause == Some(c.name)) {
                lines.push(row(format!(
                    "{:<4}  {:<9} {} (because of {} above)",
                    e.status.label(),
                    e.name,
                    short(&e.detail),
                    c.name
                )));
            }
        }
        lines.join("\n")
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.json_value()).unwrap_or_default()
    }

    /// The document `json` prints, for a report that adds to it.
    pub fn json_value(&self) -> serde_json::Value {
        let answer = self.answer();
        let mut doc = serde_json::json!({
            "schema_version": crate::version::SCHEMA_VERSION,
            "ok": answer.ok,
            "verdict": answer.verdict,
            "checks": self.checks,
        });
        if let (Some(libs), Some(map)) = (&self.libraries, doc.as_object_mut()) {
            map.insert("libraries".into(), serde_json::json!(libs));
        }
        if let (Some(plan), Some(map)) = (&self.plan, doc.as_object_mut()) {
            map.insert("plan".into(), serde_json::json!(plan));
        }
        doc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::glance::GLANCE;

    /// Every status, and whether a row of it keeps the answer from yes:
    /// the match is exhaustive, so a new status must be placed here.
    fn every_status() -> Vec<(Status, bool)> {
        [
            Status::Ok,
            Status::Warn,
            Status::Fail,
            Status::Skip,
            Status::NotChecked,
        ]
        .into_iter()
        .map(|s| {
            let blocks = match s {
                Status::Ok | Status::Warn | Status::Skip => false,
                Status::Fail | Status::NotChecked => true,
            };
            (s, blocks)
        })
        .collect()
    }

    fn json_ok(r: &CheckReport) -> bool {
        r.json_value()["ok"].as_bool().unwrap()
    }

    /// Every status, with and without what it breaks (only a blocking row
    /// can say that: `push_breaks` takes a [`Blocking`]), a fix, and a run
    /// that did not finish: the verdict, `ok`, the JSON and the exit status
    /// agree, and "no problem found" is said exactly when nothing blocks.
    #[test]
    fn the_verdict_the_exit_status_and_ok_agree_for_every_status() {
        const BREAKS: &str = "batch-norm training: 2 kernels fail";
        for (status, blocks) in every_status() {
            assert_eq!(status.blocks(), blocks, "{status:?}");
            let blocking = match status {
                Status::Fail => Some(Blocking::Fail),
                Status::NotChecked => Some(Blocking::NotChecked),
                _ => None,
            };
            for (breaks, fix) in [
                (false, None),
                (false, Some("do this")),
                (true, Some("do this")),
            ] {
                if breaks && blocking.is_none() {
                    continue;
                }
                for unfinished in [None, Some("nothing was checked")] {
                    let mut r = CheckReport::default();
                    r.push("torch", Status::Ok, "found");
                    r.push("gpu", Status::Warn, "information");
                    match (blocking, breaks, fix) {
                        (Some(b), true, _) => {
                            r.push_breaks("kernels", b, "found", BREAKS, fix.map(str::to_owned))
                        }
                        (_, _, Some(f)) => r.push_fix("kernels", status, "found", f),
                        (_, _, None) => r.push("kernels", status, "found"),
                    }
                    r.unfinished = unfinished.map(str::to_owned);
                    let a = r.answer();
                    let case = format!("{status:?} {breaks} {fix:?} {unfinished:?}: {a:?}");
                    let pass = !blocks && unfinished.is_none();
                    assert_eq!(a.ok, pass, "{case}");
                    assert_eq!(json_ok(&r), a.ok, "{case}");
                    assert_eq!(r.json_value()["verdict"], a.verdict.as_str(), "{case}");
                    assert_eq!(a.verdict.contains("no problem found"), pass, "{case}");
                    let exit = match (blocks, unfinished) {
                        (true, _) => 1,
                        (false, Some(_)) => crate::error::NOTHING_CHECKED,
                        (false, None) => 0,
                    };
                    assert_eq!(a.exit, exit, "{case}");
                    // A warning is counted, never a cause.
                    let warnings = match status {
                        Status::Warn => "; 2 warnings",
                        _ => "; 1 warning",
                    };
                    assert!(a.verdict.ends_with(warnings), "{case}");
                    assert!(!a.verdict.contains("gpu"), "{case}");
                    assert!(
                        r.text_for(true)
                            .starts_with(&format!("verdict: {}\n", a.verdict))
                    );
                    if blocks {
                        // The verdict names what fails, in the row's words.
                        let named = if breaks { BREAKS } else { "kernels" };
                        assert!(a.verdict.contains(named), "{case}");
                        assert_eq!(
                            a.verdict.contains("not checked: "),
                            status == Status::NotChecked,
                            "{case}"
                        );
                    }
                }
            }
        }
    }

    /// At a glance a row is at most GLANCE characters, cut at a word with
    /// ` …`; a fix is wrapped, never cut; paths in torch's directory read
    /// `torch/...` but torch's own stays whole; `--detail` is untouched.
    #[test]
    fn a_row_is_one_glance_and_detail_keeps_it_whole() {
        let mut r = CheckReport::default();
        let long = format!(
            "/site/torch/lib/libMIOpen.so at /site/torch; {}",
            "word ".repeat(60)
        );
        r.push_fix(
            "kernels",
            Status::Fail,
            format!("{long}\nunder it"),
            "word ".repeat(40),
        );
        r.short.push(("/site/torch/".into(), "torch/".into()));
        let glance = r.text_for(false);
        let lines: Vec<&str> = glance.lines().collect();
        assert!(
            lines.iter().all(|l| l.chars().count() <= GLANCE),
            "{glance}"
        );
        assert!(
            lines[1].starts_with("FAIL  kernels   torch/lib/libMIOpen.so at /site/torch; word")
        );
        assert!(lines[1].ends_with("word …"), "{}", lines[1]);
        assert_eq!(lines[2], "                under it");
        assert!(lines[3].starts_with("                fix: word"));
        assert!(lines[4].starts_with("                word"), "{glance}");
        let whole = r.text_for(true);
        assert!(whole.contains(&long), "{whole}");
        assert_eq!(
            shorten("/home/u/x /home/user", "/home/u", "~"),
            "~/x /home/user"
        );
        // A command is pasted and run: a quoted path stays as it is
        // (`'~/my venv'` is no home), a plain one starting a word is `~`.
        assert_eq!(
            shorten(
                "at /home/u/a b: `x --python '/home/u/my venv/bin/python' --state-dir /home/u/s` /home/u/c",
                "/home/u",
                "~"
            ),
            "at ~/a b: `x --python '/home/u/my venv/bin/python' --state-dir ~/s` ~/c"
        );
        // torch's own short name means nothing to a shell.
        assert_eq!(
            shorten(
                "at /t/torch/lib: `mv /t/torch/lib/a b`",
                "/t/torch",
                "torch"
            ),
            "at torch/lib: `mv /t/torch/lib/a b`"
        );
    }

    /// A failure that follows from another is counted under its cause, and
    /// still fails the answer.
    #[test]
    fn a_failure_that_follows_from_another_still_fails() {
        let mut r = CheckReport::default();
        r.push("rocm", Status::Fail, "no ROCm at /opt/rocm");
        r.push("compiler", Status::Fail, "no clang in it");
        r.push("gpu", Status::Warn, "not RDNA1");
        r.follows_from("rocm", &["compiler"]);
        let a = r.answer();
        assert_eq!(
            a.verdict,
            "1 problem to fix: rocm (1 more check(s) fail because of it, shown under it); 1 warning"
        );
        assert_eq!((a.ok, a.exit), (false, 1));
    }
}
