//! `verify --smoke --report FILE`: the battery as Markdown, to paste into
//! an issue: where it ran (card, driver, torch, HIP), the libraries torch
//! mapped, each case with its class and error, the tolerances, and
//! verify's rows. Returned as text; the command writes it.

use super::VerifyReport;
use super::battery::{Battery, BatteryStatus, Mapped, Where, tilde};
use crate::inspect::checks::Status;

/// A row of the report's "Libraries" section: a GPU library the battery's
/// process mapped. The code-object targets each carries, and whether the
/// card is among them, come from a reader of the libraries' GPU code (issue
/// 52, item 1), not from the battery: they stay `None` until one fills
/// them, and the section says they were not read.
#[derive(Debug, Clone)]
pub struct LibraryRow {
    pub name: String,
    pub path: String,
    /// The targets its code objects declare (gfx1010, ...).
    pub targets: Option<Vec<String>>,
    /// Whether the card's target is among them.
    pub has_card: Option<bool>,
}

impl From<&Mapped> for LibraryRow {
    fn from(m: &Mapped) -> LibraryRow {
        LibraryRow {
            name: m.name.clone(),
            path: m.path.clone(),
            targets: None,
            has_card: None,
        }
    }
}

/// The report as Markdown, with `home` written `~`; `libraries` as the
/// "Libraries" section shows them (the battery's maps, or richer rows).
pub fn markdown(v: &VerifyReport, libraries: &[LibraryRow], home: Option<&str>) -> String {
    let mut md = vec![
        "# rdna1-patch verify --smoke".to_owned(),
        String::new(),
        format!(
            "rdna1-patch {}; verdict: **{}**",
            crate::version::VERSION,
            cell(&v.checks.verdict())
        ),
    ];
    if let Some(b) = &v.smoke {
        battery(b, libraries, &mut md);
    }
    md.extend([
        String::new(),
        "## verify's checks".to_owned(),
        String::new(),
        "| row | status | detail |".to_owned(),
        "|---|---|---|".to_owned(),
    ]);
    for c in &v.checks.checks {
        let fix = c
            .fix
            .as_deref()
            .map(|f| format!(" (fix: {f})"))
            .unwrap_or_default();
        md.push(format!(
            "| {} | {} | {}{} |",
            c.name,
            c.status.label(),
            cell(&c.detail),
            cell(&fix)
        ));
    }
    md.push(String::new());
    let text = md.join("\n");
    home.map_or(text.clone(), |h| tilde(&text, h))
}

fn battery(b: &Battery, libraries: &[LibraryRow], md: &mut Vec<String>) {
    let status = match b.status {
        BatteryStatus::Complete => "complete",
        BatteryStatus::Interrupted => "interrupted",
        BatteryStatus::NothingRun => "nothing run",
    };
    md.extend([
        String::new(),
        "## Where it ran".to_owned(),
        String::new(),
        "| | |".to_owned(),
        "|---|---|".to_owned(),
        format!(
            "| battery | {} ({status}), {} cases, on the {} |",
            b.battery,
            b.cases.len(),
            if b.device == "cpu" {
                "CPU (the tests' hook: no GPU ran)"
            } else {
                "GPU"
            }
        ),
    ]);
    if let Some(why) = &b.skipped {
        md.push(format!("| not run | {} |", cell(why)));
    }
    if let Some(w) = &b.place {
        place(w, md);
    }
    libraries_section(libraries, b.place.is_some(), md);
    md.extend([
        String::new(),
        "## Cases".to_owned(),
        String::new(),
        format!(
            "Tolerances, the largest error over the largest |value| of the float64 CPU result: {}; integer, index and text results exact.",
            b.tolerances_text()
        ),
        String::new(),
        "Failed cases first, then those not run, then those within tolerance.".to_owned(),
        String::new(),
        "| case | library | class | error |".to_owned(),
        "|---|---|---|---|".to_owned(),
    ]);
    // What failed first, then what did not run, then what passed: the
    // reader of an issue looks for the first.
    let mut cases: Vec<_> = b.cases.iter().collect();
    cases.sort_by_key(|c| match c.status {
        Status::Fail | Status::NotChecked => 0,
        Status::Warn | Status::Skip => 1,
        Status::Ok => 2,
    });
    for c in cases {
        md.push(format!(
            "| {} | {} | {} | {} |",
            c.name,
            c.library,
            c.outcome.word(),
            cell(&c.detail)
        ));
    }
}

/// The rows of where it ran: card, driver, torch, HIP, the variables.
fn place(w: &Where, md: &mut Vec<String>) {
    let kfd: Vec<String> = w
        .kfd
        .iter()
        .map(|g| format!("{} {} (node {}, {})", g.gfx, g.model, g.node, g.pci))
        .collect();
    let env: Vec<String> = w.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    md.extend([
        format!(
            "| card (KFD) | {} |",
            if kfd.is_empty() {
                "no AMD GPU".to_owned()
            } else {
                kfd.join(", ")
            }
        ),
        format!("| driver | {} |", cell(&w.driver.text())),
        format!("| torch | {} |", cell(&w.torch)),
        format!(
            "| HIP | {} |",
            w.hip.as_deref().unwrap_or("none (no ROCm torch)")
        ),
        format!(
            "| device | {}, HIP arch {} |",
            cell(&w.device),
            w.hip_arch.as_deref().unwrap_or("none")
        ),
        format!(
            "| environment | {} |",
            if env.is_empty() {
                "HSA_OVERRIDE_GFX_VERSION not set, nor any MIOPEN_ variable".to_owned()
            } else {
                cell(&env.join(" "))
            }
        ),
        match &w.miopen {
            Some(l) => format!(
                "| libMIOpen | {} (SHA-256 {}): {} |",
                cell(&l.path),
                l.sha256.as_deref().unwrap_or("unreadable"),
                cell(&l.why)
            ),
            None => "| libMIOpen | none mapped |".to_owned(),
        },
    ]);
}

fn libraries_section(libraries: &[LibraryRow], ran: bool, md: &mut Vec<String>) {
    md.extend([String::new(), "## Libraries".to_owned(), String::new()]);
    if !ran {
        md.push("None: torch was not imported.".to_owned());
        return;
    }
    md.extend([
        "The GPU libraries the battery's process mapped after `import torch`, with the targets their code objects declare where rdna1-patch read them in torch's load closure (\"not read\": outside it, or no GPU code).".to_owned(),
        String::new(),
        "| library | path | targets |".to_owned(),
        "|---|---|---|".to_owned(),
    ]);
    if libraries.is_empty() {
        md.push("| none mapped | | |".to_owned());
    }
    for l in libraries {
        let targets = match (&l.targets, l.has_card) {
            (Some(t), Some(card)) => format!(
                "{}{}",
                t.join(", "),
                if card {
                    " (the card's among them)"
                } else {
                    " (not the card's)"
                }
            ),
            (Some(t), None) => t.join(", "),
            (None, _) => "not read".to_owned(),
        };
        md.push(format!(
            "| {} | {} | {targets} |",
            cell(&l.name),
            cell(&l.path)
        ));
    }
}

/// Text fit for a table cell: no pipe ends it, no newline breaks it.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}
