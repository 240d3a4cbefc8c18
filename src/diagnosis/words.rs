//! What a diagnosis says: its lines per kernel, its summary, its
//! standing, and the fix it calls for, in the words doctor and install
//! print.

use anyhow::Result;

use super::{Diagnosis, Standing};
use crate::error::hint;
use crate::ui::Ui;
use crate::verdict::{self, Outcome};

impl Diagnosis {
    /// The targets judged, in words: "gfx1010", "gfx1010 and gfx1012".
    pub fn said_targets(&self) -> String {
        crate::output::and(&self.targets)
    }

    /// Each kernel as judged for each target, in the first judgement's
    /// order (every judgement reads the same texts).
    fn per_kernel(&self) -> Vec<Vec<(&str, &verdict::Kernel)>> {
        let Some(first) = self.judgements.first() else {
            return Vec::new();
        };
        (0..first.kernels.len())
            .map(|i| {
                self.targets
                    .iter()
                    .zip(&self.judgements)
                    .filter_map(|(t, j)| j.kernels.get(i).map(|k| (t.as_str(), k)))
                    .collect()
            })
            .collect()
    }

    /// The kernels that fail for any target judged.
    pub fn failing(&self) -> usize {
        self.per_kernel()
            .iter()
            .filter(|per| per.iter().any(|(_, k)| k.verdict.fails()))
            .count()
    }

    /// One line per kernel: "MIOPEN_KERNEL_X: fails at the DPP reduction
    /// (fp32 NCHW: ...); fails in 1 of 1 case for gfx1010", each target
    /// it fails for named.
    pub fn lines(&self) -> Vec<String> {
        self.per_kernel()
            .iter()
            .map(|per| {
                let (_, k) = per[0];
                // Said by the first target it fails for.
                let shown = per
                    .iter()
                    .map(|(_, k)| *k)
                    .find(|k| k.verdict.fails())
                    .unwrap_or(k);
                let said = |k: &verdict::Kernel, t: &str| {
                    format!(
                        "{} of {} for {t}{}",
                        k.failing,
                        crate::output::count(k.cases, "case", "cases"),
                        match k.control_too {
                            0 => String::new(),
                            n => format!(", {n} of them for {} too", verdict::CONTROL),
                        }
                    )
                };
                let failing: Vec<_> = per.iter().filter(|(_, k)| k.failing > 0).collect();
                let alike = failing.windows(2).all(|w| {
                    (w[0].1.failing, w[0].1.cases, w[0].1.control_too)
                        == (w[1].1.failing, w[1].1.cases, w[1].1.control_too)
                });
                // The same for every target: said once, the targets named.
                let fails: Vec<String> = match (alike, failing.first()) {
                    (true, Some((_, k))) if failing.len() > 1 => {
                        let targets: Vec<&str> = failing.iter().map(|(t, _)| *t).collect();
                        vec![said(k, &targets.join(" and "))]
                    }
                    _ => failing.iter().map(|(t, k)| said(k, t)).collect(),
                };
                let failing = match (&k.verdict, fails.is_empty()) {
                    (verdict::Verdict::NotJudged { .. }, _) => "; never edited".to_owned(),
                    (_, true) => String::new(),
                    (_, false) => format!("; fails in {}", fails.join(", ")),
                };
                format!("{}: {}{failing}", k.name, shown.verdict.describe())
            })
            .collect()
    }

    /// The stack's verdict in a line, for the targets judged.
    pub fn summary(&self) -> String {
        let Some(first) = self.judgements.first() else {
            return "not compiled: no compiler library beside torch's MIOpen".into();
        };
        let counts: Vec<usize> = self
            .judgements
            .iter()
            .map(|j| j.failing().count())
            .collect();
        let fail = match counts.iter().all(|c| *c == counts[0]) {
            true => format!("fail for {}", self.said_targets()),
            false => {
                let more: Vec<String> = counts[1..]
                    .iter()
                    .zip(&self.targets[1..])
                    .map(|(c, t)| format!("{c} for {t}"))
                    .collect();
                format!("fail for {}, {}", self.targets[0], more.join(", "))
            }
        };
        let compiles: usize = self.judgements.iter().map(|j| j.compiles).sum();
        let how = match (first.cached, self.loaded.get()) {
            (true, _) => "known from an earlier diagnosis of these very texts".to_owned(),
            (false, Some(c)) => format!("{compiles} compiles, {} of them run", c.ran.get()),
            (false, None) => format!("{compiles} compiles"),
        };
        let how = format!("{how}, {:.2} s", self.took.as_secs_f64());
        let why = match self.card {
            true => self.target_from.clone(),
            false => format!("{}: judged for {}", self.target_from, self.said_targets()),
        };
        format!(
            "{} of {} batch-norm kernels of {} {fail} ({}), through {} ({how})",
            counts[0],
            first.kernels.len(),
            self.library.display(),
            why,
            first.compiler
        )
    }

    /// What the diagnosis says of the stack, decided here once: doctor's
    /// kernels row and install's fix both take it.
    pub fn standing(&self) -> Standing {
        if self.compiler_path.is_none() {
            return Standing::NoCompiler;
        }
        if let Some(e) = self.refusal() {
            return Standing::Refused(e);
        }
        match self
            .judgements
            .iter()
            .all(|j| j.outcome() == Outcome::NothingToFix)
        {
            true if !self.judgements.is_empty() => {
                Standing::NothingToFix(self.nothing_to_fix_line())
            }
            _ => Standing::Fixable,
        }
    }

    /// The error for a stack the fix cannot help, or none: the first
    /// target's that refuses.
    fn refusal(&self) -> Option<anyhow::Error> {
        self.targets
            .iter()
            .zip(&self.judgements)
            .find_map(|(t, j)| self.refusal_for(t, j))
    }

    fn refusal_for(&self, target: &str, j: &verdict::Judgement) -> Option<anyhow::Error> {
        match j.outcome() {
            Outcome::NotFixable { kernel, error } => Some(hint(
                format!(
                    "batch norm of {} is not fixable here: {kernel} {error} for {}, and not at the DPP reduction the fix removes; nothing was changed",
                    self.library.display(),
                    target
                ),
                match crate::compile::missing_std_header(&error) {
                    Some(h) => format!(
                        "hipRTC compiles MIOpen's HIP kernels with this machine's C++ standard library headers and finds no `{h}`: install them (Debian, Ubuntu: `sudo apt install g++`; Fedora: `sudo dnf install libstdc++-devel`), then run this again"
                    ),
                    None => "this needs more than the in-place fix: build the profile from source (`rdna1-patch build miopen`), and report the kernel and its error".into(),
                },
            )),
            Outcome::NoKernels => Some(hint(
                format!(
                    "{} embeds no batch-norm kernel text; nothing was changed",
                    self.library.display()
                ),
                "it is not a MIOpen whose batch norm this fix knows",
            )),
            Outcome::NothingCompiles { kernel, error } => Some(hint(
                format!(
                    "the batch-norm kernels of {} cannot be judged: not one compiles, even for {}, through {} ({kernel}: {error}); nothing was changed",
                    self.library.display(),
                    verdict::CONTROL,
                    j.compiler
                ),
                "this compiler builds nothing of MIOpen's here: reinstall torch (it bundles its comgr), and report the error if it stays",
            )),
            Outcome::Fixable | Outcome::NothingToFix => None,
        }
    }

    /// Say the diagnosis, and make the fix it calls for in memory, proven
    /// by compiling: None when there is nothing to fix (said, exit 0).
    pub fn plan_fix(&self, unproven: bool, ui: &Ui) -> Result<Option<crate::inplace::Planned>> {
        for line in self.lines() {
            ui.stage("Kernel", line);
        }
        ui.stage("Diagnosis", self.summary());
        match self.standing() {
            Standing::NoCompiler if !unproven => return Err(self.no_compiler()),
            Standing::Refused(e) => return Err(e),
            Standing::NothingToFix(line) => {
                ui.stage("Nothing", format!("{line}; torch was left as it is"));
                return Ok(None);
            }
            Standing::NoCompiler | Standing::Fixable => {}
        }
        let prove = |a: &[u8], b: &[u8]| self.proof(a, b);
        let prover: Option<crate::inplace::Prover> = match self.compiler_path {
            Some(_) => Some(&prove),
            None => None,
        };
        // The bytes the diagnosis read are not read twice.
        let planned =
            crate::inplace::plan(&self.library, prover, self.take_bytes(), &self.not_judged())?;
        ui.stage("Proven", &planned.proof);
        if self.compiler_path.is_none() {
            ui.warn("--unproven: the fix is installed without a compile to prove it");
        }
        Ok(Some(planned))
    }

    /// The kernels not judged: compiled for no card in any case, the DPP
    /// reduction aside, or needing a name no compiler is handed. Named,
    /// never edited.
    pub fn not_judged(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let not = self.judgements.iter().flat_map(|j| &j.kernels).filter(|k| {
            matches!(
                k.verdict,
                verdict::Verdict::NotJudged { .. } | verdict::Verdict::Refused { .. }
            )
        });
        for k in not {
            if !names.contains(&k.name) {
                names.push(k.name.clone());
            }
        }
        names
    }

    /// "to fix: ..." as the diagnosis found it: every case of every kernel
    /// judged compiles; those that could not be judged are said, never
    /// counted as compiling.
    fn nothing_to_fix_line(&self) -> String {
        let lib = self.library.display();
        let kernels = || self.judgements.iter().take(1).flat_map(|j| &j.kernels);
        let names = |v: &[&verdict::Kernel]| {
            v.iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let not: Vec<_> = kernels()
            .filter(|k| matches!(k.verdict, verdict::Verdict::NotJudged { .. }))
            .collect();
        let refused: Vec<_> = kernels()
            .filter(|k| matches!(k.verdict, verdict::Verdict::Refused { .. }))
            .collect();
        let mut line = match not.len() + refused.len() {
            0 => format!(
                "to fix: every batch-norm kernel of {lib} compiles for {} in every case",
                self.said_targets()
            ),
            _ => format!(
                "to fix in the kernels that could be judged: every other batch-norm kernel of {lib} compiles for {} in every case",
                self.said_targets()
            ),
        };
        if !not.is_empty() {
            line.push_str(&format!(
                "; {} not judged, no case of it compiling even for {} ({}), and left as it is",
                crate::output::count(not.len(), "kernel was", "kernels were"),
                verdict::CONTROL,
                names(&not)
            ));
        }
        if !refused.is_empty() {
            line.push_str(&format!(
                "; {} not judged, each needing a name no compiler is handed ({})",
                crate::output::count(refused.len(), "kernel was", "kernels were"),
                names(&refused)
            ));
        }
        line
    }

    /// The error for no compiler, unless an unproven fix was asked for.
    pub fn no_compiler(&self) -> anyhow::Error {
        let dirs: Vec<String> = self
            .looked_in
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        hint(
            format!(
                "no compiler library (libamd_comgr.so*) beside torch's MIOpen ({}), so whether its batch norm fails, and whether a fix works, cannot be proven; nothing was changed",
                dirs.join(", ")
            ),
            "torch bundles comgr with its MIOpen (reinstall torch if it is missing), a system ROCm has one (its lib dir on LD_LIBRARY_PATH); or pass --unproven to install the fix uncompiled, which the provenance and `status` then say",
        )
    }
}
