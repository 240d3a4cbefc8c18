//! A list of checks, each ok / warn / FAIL / skip with its evidence and the
//! fix: what `verify` and `doctor` print, or give as JSON.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skip,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
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
}

impl CheckReport {
    pub fn push(&mut self, name: &'static str, status: Status, detail: impl Into<String>) {
        self.checks.push(Check {
            name,
            status,
            detail: detail.into(),
            fix: None,
            cause: None,
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
            detail: detail.into(),
            fix: Some(fix.into()),
            cause: None,
        });
    }

    /// A check that ended in an error: its chain as the detail, and its
    /// hint's help, if it has one, as the fix (never "help:" inside the
    /// detail).
    pub fn push_error(&mut self, name: &'static str, status: Status, err: &anyhow::Error) {
        self.checks.push(Check {
            name,
            status,
            detail: crate::error::chain(err),
            fix: crate::error::help(err).map(str::to_owned),
            cause: None,
        });
    }

    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
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

    /// One line that says where things stand: what blocks (the causes, not
    /// what follows from them), and how many warnings. The text report
    /// heads it `verdict: `; JSON has it under that name.
    pub fn verdict(&self) -> String {
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        let causes: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail && c.cause.is_none())
            .map(|c| c.name)
            .collect();
        let warnings = match count(Status::Warn) {
            0 => String::new(),
            1 => "; 1 warning".to_owned(),
            n => format!("; {n} warnings"),
        };
        if causes.is_empty() {
            match &self.unfinished {
                Some(why) => format!("{why}{warnings}"),
                None => format!("no problem found{warnings}"),
            }
        } else {
            let lead = self
                .unfinished
                .as_deref()
                .map(|w| format!("{w}; "))
                .unwrap_or_default();
            let follow = count(Status::Fail) - causes.len();
            format!(
                "{lead}{} to fix: {}{}{warnings}",
                if causes.len() == 1 {
                    "1 problem"
                } else {
                    "problems"
                },
                causes.join(", "),
                match follow {
                    0 => String::new(),
                    n => format!(" ({n} more check(s) fail because of it, shown under it)"),
                }
            )
        }
    }

    /// The verdict, then one line per check, with a `fix:` line under each
    /// that has one, and the checks that follow from a failure under it.
    /// The report for a person; with `width`, each row is wrapped to it
    /// under its own column, not cut mid-word by the terminal.
    pub fn text_wrapped(&self, width: Option<usize>) -> String {
        let Some(width) = width else {
            return self.text();
        };
        // Rows continue under their detail column (status 4, two spaces,
        // name 9, a space); the verdict line from the left.
        let column = " ".repeat(4 + 2 + 9 + 1);
        wrap(&self.text(), width, |line| {
            if line.starts_with("verdict:") {
                ""
            } else {
                column.as_str()
            }
        })
    }

    pub fn text(&self) -> String {
        let mut lines = vec![format!("verdict: {}", self.verdict())];
        for c in self.checks.iter().filter(|c| c.cause.is_none()) {
            lines.push(format!(
                "{:<4}  {:<9} {}",
                c.status.label(),
                c.name,
                c.detail
            ));
            if let Some(fix) = &c.fix {
                lines.push(format!("{:<4}  {:<9} fix: {fix}", "", ""));
            }
            for e in self.checks.iter().filter(|e| e.cause == Some(c.name)) {
                lines.push(format!(
                    "{:<4}  {:<9} {} (because of {} above)",
                    e.status.label(),
                    e.name,
                    e.detail,
                    c.name
                ));
            }
        }
        lines.join("\n")
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.json_value()).unwrap_or_default()
    }

    /// The document `json` prints, for a report that adds to it.
    pub fn json_value(&self) -> serde_json::Value {
        let mut doc = serde_json::json!({
            "schema_version": crate::version::SCHEMA_VERSION,
            "ok": !self.failed() && self.unfinished.is_none(),
            "verdict": self.verdict(),
            "checks": self.checks,
        });
        if let (Some(libs), Some(map)) = (&self.libraries, doc.as_object_mut()) {
            map.insert("libraries".into(), serde_json::json!(libs));
        }
        doc
    }
}

/// Each line of `text` wrapped to `width` (at least 40), never mid-word,
/// its continuation lines indented as `indent` says for that line.
pub(crate) fn wrap<'a>(text: &str, width: usize, indent: impl Fn(&str) -> &'a str) -> String {
    let mut out = Vec::new();
    for line in text.lines() {
        let opts = textwrap::Options::new(width.max(40))
            .subsequent_indent(indent(line))
            .break_words(false);
        out.extend(
            textwrap::wrap(line, opts)
                .into_iter()
                .map(|l| l.into_owned()),
        );
    }
    out.join("\n")
}
