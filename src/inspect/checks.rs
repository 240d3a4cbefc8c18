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
    fn label(self) -> &'static str {
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
}

#[derive(Debug, Default, Serialize)]
pub struct CheckReport {
    pub checks: Vec<Check>,
}

impl CheckReport {
    pub fn push(&mut self, name: &'static str, status: Status, detail: impl Into<String>) {
        self.checks.push(Check {
            name,
            status,
            detail: detail.into(),
            fix: None,
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
        });
    }

    /// A check that ended in an error: its chain as the detail, and its
    /// hint's help, if it has one, as the fix (never "help:" inside the
    /// detail).
    pub fn push_error(&mut self, name: &'static str, status: Status, err: &anyhow::Error) {
        self.checks.push(Check {
            name,
            status,
            detail: format!("{err:#}"),
            fix: crate::error::help(err).map(str::to_owned),
        });
    }

    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }

    /// One line per check, and a `fix:` line under each that has one.
    pub fn text(&self) -> String {
        let mut lines = Vec::new();
        for c in &self.checks {
            lines.push(format!(
                "{:<4}  {:<9} {}",
                c.status.label(),
                c.name,
                c.detail
            ));
            if let Some(fix) = &c.fix {
                lines.push(format!("{:<4}  {:<9} fix: {fix}", "", ""));
            }
        }
        lines.join("\n")
    }

    pub fn json(&self) -> String {
        let summary = serde_json::json!({
            "schema_version": crate::output::SCHEMA_VERSION,
            "ok": !self.failed(),
            "checks": self.checks,
        });
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    }
}
