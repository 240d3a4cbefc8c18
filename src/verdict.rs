//! What fails, established by compiling, never by reading: every
//! batch-norm kernel text a libMIOpen embeds, in each case a solver may
//! compile it (variant, data type, layout), compiled for a target through
//! the compiler MIOpen itself loads, with gfx1030 as the control. Text
//! patterns only say where an edit would go (`kernel_text`); whether a
//! library fails, and whether a fix works, is what the compiler answers.
//!
//! Every case is judged for the card: a case the card fails is failing,
//! whatever the control does. The control says whether a failure is
//! gfx101x's own; it never takes a case out of the count (Debian's 6.4.3
//! and 7.2.4 reach the DPP reduction through a decision true on gfx1030
//! too, and 39 failing cases were left out as "failing for every card").
//! Only a kernel no case of which compiles anywhere, the DPP reduction
//! aside, is not judged, and is said to be.

use serde::{Deserialize, Serialize};

mod cases;
#[cfg(fuzzing)]
mod fuzz;
mod judge;
mod proof;
mod source;
/// The words of a compile (`crate::compile`), by the names the diagnosis's
/// callers know them.
pub use crate::compile::{Compiled, Compiler, Job, Lang, unplain};
pub use cases::{Case, Type, cases, defines, variants};
#[cfg(fuzzing)]
pub use fuzz::fuzz_kernels;
pub(crate) use judge::{compile_all, compile_jobs};
pub use judge::{judge, judge_all, judge_targets, judge_text, judge_units};
pub use proof::{Proof, Reached, Unproven, prove};
pub use source::{Source, Unit, digest, kernels, kernels_in};

/// The rules a judgement was made by: a judgement kept by an earlier
/// version under other rules is judged anew.
pub const RULES: u32 = 4;

/// The control target: batch norm compiles there (MIOpen marks it gfx103x).
pub const CONTROL: &str = "gfx1030";

/// The RDNA1 targets a fix must make compile.
pub const RDNA1: [&str; 3] = ["gfx1010", "gfx1011", "gfx1012"];

/// How one kernel fares for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// Every case compiles for the target.
    Compiles,
    /// A case fails at the DPP row_bcast reduction gfx10 does not have.
    FailsAtDpp { case: String, error: String },
    /// A case fails for another reason: the fix does not reach it.
    FailsOtherwise { case: String, error: String },
    /// No case compiles for the target or the control, and not for the
    /// DPP reduction: this text is not built for any card with the
    /// defines a solver passes here (a define this check does not know, a
    /// missing header), so it says nothing of gfx101x. Never edited.
    NotJudged { case: String, error: String },
    /// Never compiled: it needs a name no compiler is handed
    /// ([`Unit::refused`]: a header name that leads out of the
    /// compiler's directory), said with the name.
    Refused { error: String },
}

impl Verdict {
    /// Fails for the target (judged).
    pub fn fails(&self) -> bool {
        matches!(
            self,
            Verdict::FailsAtDpp { .. } | Verdict::FailsOtherwise { .. }
        )
    }

    /// "compiles", "fails at the DPP reduction (variant 1 fp32 NCHW: ...)".
    pub fn describe(&self) -> String {
        match self {
            Verdict::Compiles => "compiles".into(),
            Verdict::FailsAtDpp { case, error } => {
                format!("fails at the DPP reduction ({case}: {error})")
            }
            Verdict::FailsOtherwise { case, error } => format!("fails ({case}: {error})"),
            Verdict::NotJudged { case, error } => {
                format!("not judged: no case compiles, even for {CONTROL} ({case}: {error})")
            }
            Verdict::Refused { error } => {
                format!("not judged: {error}; nothing was compiled for it")
            }
        }
    }
}

/// One batch-norm kernel text, judged for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    /// The cases compiled for the target.
    pub cases: usize,
    /// The cases that fail for the target: each counts, whatever the
    /// control does.
    pub failing: usize,
    /// Of those not at the DPP reduction, the ones that fail for the
    /// control too: not gfx101x's own failures, failures all the same. (A
    /// failure at the DPP reduction is the card's whatever the control
    /// does: the control is compiled only where the log does not say.)
    pub control_too: usize,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Every batch-norm kernel of a library, judged for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    pub arch: String,
    pub compiler: String,
    pub kernels: Vec<Kernel>,
    /// Compiles run to reach it.
    pub compiles: usize,
    /// Read from the cache of an earlier diagnosis of the same files.
    #[serde(skip)]
    pub cached: bool,
}

/// What the judgement means for the stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every batch-norm kernel compiles for the target.
    NothingToFix,
    /// Every failure is at the DPP reduction: the in-place fix's kind.
    Fixable,
    /// A kernel fails for another reason (named, with its first error).
    NotFixable { kernel: String, error: String },
    /// No batch-norm kernel text at all.
    NoKernels,
    /// Not one kernel compiles even for the control: the compiler builds
    /// nothing of MIOpen's here (the first kernel and its error).
    NothingCompiles { kernel: String, error: String },
}

impl Judgement {
    pub fn outcome(&self) -> Outcome {
        if self.kernels.is_empty() {
            return Outcome::NoKernels;
        }
        // hipRTC without the C++ standard headers compiles no HIP kernel
        // for any card, at run time either: not fixable here, and said.
        let blocks = |v: &Verdict| match v {
            Verdict::FailsOtherwise { .. } => true,
            Verdict::NotJudged { error, .. } => crate::compile::missing_std_header(error).is_some(),
            _ => false,
        };
        if let Some(k) = self.kernels.iter().find(|k| blocks(&k.verdict)) {
            return Outcome::NotFixable {
                kernel: k.name.clone(),
                error: k.verdict.describe(),
            };
        }
        // Not one compiled, even for the control (kernels never compiled
        // for their names aside): the first that was tried says why.
        let tried = self
            .kernels
            .iter()
            .find(|k| matches!(k.verdict, Verdict::NotJudged { .. }));
        if let Some(tried) = tried
            && self.kernels.iter().all(|k| {
                matches!(
                    k.verdict,
                    Verdict::NotJudged { .. } | Verdict::Refused { .. }
                )
            })
        {
            return Outcome::NothingCompiles {
                kernel: tried.name.clone(),
                error: tried.verdict.describe(),
            };
        }
        match self.kernels.iter().any(|k| k.verdict.fails()) {
            true => Outcome::Fixable,
            false => Outcome::NothingToFix,
        }
    }

    pub fn failing(&self) -> impl Iterator<Item = &Kernel> {
        self.kernels.iter().filter(|k| k.verdict.fails())
    }
}

/// Blank every instruction with a `row_bcast` operand in `text`; whether
/// there was one.
pub(crate) fn blank_row_bcast(text: &mut [u8]) -> bool {
    let lines = row_bcast_lines(text);
    for line in &lines {
        blank(text, line);
    }
    !lines.is_empty()
}

/// The lines of `text` (byte ranges, without their newline) that carry a
/// `row_bcast` operand.
pub(crate) fn row_bcast_lines(text: &[u8]) -> Vec<std::ops::Range<usize>> {
    let finder = memchr::memmem::Finder::new(b"row_bcast:");
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = finder.find(&text[at..]).map(|i| at + i) {
        let start = text[..i]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |n| n + 1);
        let end = text[i..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(text.len(), |n| i + n);
        out.push(start..end);
        at = end;
    }
    out
}

/// Blank the instruction on `line`: its string literal's bytes, whole
/// (its row_mask and bank_mask would not stand without the row_bcast),
/// and any `row_bcast:` operand left outside it (a line of several
/// literals, or of none).
pub(crate) fn blank(text: &mut [u8], line: &std::ops::Range<usize>) {
    let bytes = &text[line.clone()];
    if let (Some(a), Some(b)) = (
        bytes.iter().position(|&b| b == b'"'),
        bytes.iter().rposition(|&b| b == b'"'),
    ) && a < b
    {
        text[line.start + a + 1..line.start + b].fill(b' ');
    }
    let left: Vec<usize> = memchr::memmem::find_iter(&text[line.clone()], b"row_bcast:").collect();
    for i in left {
        text[line.start + i..line.start + i + 10].fill(b' ');
    }
}

/// Whether a failed compile's log puts the failure at the DPP row_bcast
/// operand gfx10 lacks, and nothing else: every error the assembler wrote
/// (`...: error: not a valid operand.`) is followed by the instruction it
/// rejected, which carries `row_bcast:`, and every other error is comgr's
/// own word for those ("cannot compile inline asm") or their count. The
/// compile child puts LLVM's stderr after comgr's log (comgr 2.4 says no
/// more than "cannot compile inline asm" in it); a log that says less, or
/// names another error, is left to the compile with the DPP blanked.
fn at_dpp(log: &str) -> bool {
    let lines: Vec<&str> = log.lines().collect();
    let mut dpp = 0;
    for (i, line) in lines.iter().enumerate() {
        if !line.contains("error") {
            continue;
        }
        let rejected = lines.get(i + 1).is_some_and(|l| l.contains("row_bcast:"));
        if rejected && line.contains("error: ") {
            dpp += 1;
            continue;
        }
        // comgr's summary: "error: cannot compile inline asm / ... / 2
        // errors generated."
        let said = line.split(" / ").all(|part| {
            let part = part.trim();
            part == "error: cannot compile inline asm"
                || part.ends_with("errors generated.")
                || part.ends_with("error generated.")
        });
        if !said {
            return false;
        }
    }
    dpp > 0
}

/// The first line that says "error", without its file and position.
pub fn first_error(log: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains("error"))
        .or_else(|| log.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("no message")
        .trim();
    let line = match line.find("error: ") {
        Some(i) => &line[i + 7..],
        None => line,
    };
    // comgr's summary joins its first errors with " / ": the first is it.
    let line = line.split(" / ").next().unwrap_or(line).trim();
    let mut s: String = line.chars().take(200).collect();
    if s.len() < line.len() {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str, verdict: Verdict) -> Kernel {
        Kernel {
            name: name.into(),
            cases: 1,
            failing: usize::from(verdict != Verdict::Compiles),
            control_too: 0,
            verdict,
        }
    }

    #[test]
    fn a_kernel_no_card_compiles_is_not_judged_unless_the_std_headers_are_missing() {
        let j = |kernels: Vec<Kernel>| Judgement {
            arch: "gfx1010".into(),
            compiler: "c".into(),
            kernels,
            compiles: 0,
            cached: false,
        };
        let not_judged = |error: &str| Verdict::NotJudged {
            case: "fp32 NCHW".into(),
            error: error.into(),
        };
        let undeclared = not_judged("use of undeclared identifier 'FLOAT2FLOAPREC'");
        let compiles = j(vec![
            kernel("A", Verdict::Compiles),
            kernel("B", undeclared.clone()),
        ]);
        assert_eq!(compiles.outcome(), Outcome::NothingToFix);
        assert_eq!(compiles.failing().count(), 0);
        let std = not_judged("'type_traits' file not found");
        match j(vec![kernel("A", Verdict::Compiles), kernel("H", std)]).outcome() {
            Outcome::NotFixable { kernel, error } => {
                assert_eq!(kernel, "H");
                assert!(error.contains("'type_traits' file not found"), "{error}");
            }
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            j(vec![kernel("B", undeclared)]).outcome(),
            Outcome::NothingCompiles { .. }
        ));
    }

    #[test]
    fn the_first_error_line_loses_its_position() {
        let log = "warning: x\n/tmp/a.cl:3:5: error: not a valid operand.\n v_add row_bcast:15\n";
        assert_eq!(first_error(log), "not a valid operand.");
        assert!(at_dpp(log));
        assert!(!at_dpp(
            "a.cl:1:1: error: instruction not supported on this GPU"
        ));
    }

    /// comgr 2.4's log with the assembler's stderr after it (the compile
    /// child's): at DPP only when every error is the row_bcast operand.
    #[test]
    fn a_failure_is_at_dpp_only_when_every_error_is_the_row_bcast_operand() {
        let comgr = "error: cannot compile inline asm / error: cannot compile inline asm / 2 errors generated.";
        let operand = |n: u32| {
            format!(
                "<inline asm>:{n}:20: error: not a valid operand.\nv_add_f32 v1 v1 v1 row_bcast:15 row_mask:0xa\n                   ^"
            )
        };
        assert!(at_dpp(&format!("{comgr}\n{}\n{}", operand(2), operand(4))));
        assert_eq!(
            first_error(&format!("{comgr}\n{}", operand(2))),
            "cannot compile inline asm"
        );
        // comgr's words alone do not say which operand.
        assert!(!at_dpp(comgr));
        // Another instruction rejected beside the DPP one.
        let dot = "<inline asm>:1:1: error: instruction not supported on this GPU\nv_dot2_f32_f16 v1, v2, v2, v1\n^";
        assert!(!at_dpp(&format!("{comgr}\n{}\n{dot}", operand(2))));
        // A front-end error in comgr's log.
        assert!(!at_dpp(&format!(
            "error: use of undeclared identifier 'x' / 1 error generated.\n{}",
            operand(2)
        )));
    }

    /// Every row_bcast operand of a line is blanked: inside its literal,
    /// after it, and on a line of no literal, each of several.
    #[test]
    fn every_row_bcast_operand_of_a_line_is_blanked() {
        for line in [
            "asm(\"v_add row_bcast:15 row_mask:0xa\");",
            "asm(\"a\" \"b\" row_bcast:15);",
            "v_add row_bcast:15 row_bcast:31",
        ] {
            let mut text = format!("x\n{line}\ny").into_bytes();
            assert!(blank_row_bcast(&mut text));
            assert_eq!(text.len(), line.len() + 4);
            assert!(
                !String::from_utf8_lossy(&text).contains("row_bcast:"),
                "{line}"
            );
            assert!(text.starts_with(b"x\n") && text.ends_with(b"\ny"));
        }
    }
}
