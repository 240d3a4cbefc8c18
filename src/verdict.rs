//! What fails, established by compiling, never by reading: every
//! batch-norm kernel text a libMIOpen embeds, in each case a solver may
//! compile it (variant, data type, layout), compiled for a target through
//! the compiler MIOpen itself loads, with gfx1030 as the control. Text
//! patterns only say where an edit would go (`kernel_text`); whether a
//! library fails, and whether a fix works, is what the compiler answers.
//!
//! A case that fails for the control too fails for every card (a define
//! this check does not pass, a combination no solver builds): it says
//! nothing about gfx101x and is counted apart, never as a failure.

use serde::{Deserialize, Serialize};

use crate::embedded::{self, Text};

mod cases;
pub use cases::{Case, Type, cases, defines, variants};

/// The control target: batch norm compiles there (MIOpen marks it gfx103x).
pub const CONTROL: &str = "gfx1030";

/// The RDNA1 targets a fix must make compile.
pub const RDNA1: [&str; 3] = ["gfx1010", "gfx1011", "gfx1012"];

/// One compile asked of the compiler.
pub struct Job<'a> {
    pub name: &'a str,
    pub text: &'a [u8],
    pub arch: &'a str,
    pub defines: &'a [String],
}

/// What a compile gave: the code object, or the compiler's errors.
pub enum Compiled {
    Object(Vec<u8>),
    Failed(String),
}

/// The compiler MIOpen loads (comgr for OpenCL), or a stand-in that
/// answers as it would.
pub trait Compiler {
    /// What it is, for a report: "comgr 2.4 (/path/libamd_comgr.so.2)".
    fn describe(&self) -> String;
    /// The compile's answer; an error when the compiler gave none (it
    /// hung past its limit, crashed, could not be started). That is no
    /// verdict on the kernel: the diagnosis stops, and nothing is kept.
    fn compile(&self, job: &Job) -> anyhow::Result<Compiled>;
}

/// How one kernel fares for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// Every case the control compiles compiles for the target too.
    Compiles,
    /// A case fails at the DPP row_bcast reduction gfx10 does not have.
    FailsAtDpp { case: String, error: String },
    /// A case fails for another reason: the fix does not reach it.
    FailsOtherwise { case: String, error: String },
}

impl Verdict {
    pub fn fails(&self) -> bool {
        !matches!(self, Verdict::Compiles)
    }

    /// "compiles", "fails at the DPP reduction (variant 1 fp32 NCHW: ...)".
    pub fn describe(&self) -> String {
        match self {
            Verdict::Compiles => "compiles".into(),
            Verdict::FailsAtDpp { case, error } => {
                format!("fails at the DPP reduction ({case}: {error})")
            }
            Verdict::FailsOtherwise { case, error } => format!("fails ({case}: {error})"),
        }
    }
}

/// One batch-norm kernel text, judged for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    /// The cases compiled for the target.
    pub cases: usize,
    /// Cases that fail for the control too, with the first error: left out.
    pub left_out: Vec<(String, String)>,
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
}

impl Judgement {
    pub fn outcome(&self) -> Outcome {
        if self.kernels.is_empty() {
            return Outcome::NoKernels;
        }
        if let Some(k) = self
            .kernels
            .iter()
            .find(|k| matches!(k.verdict, Verdict::FailsOtherwise { .. }))
        {
            return Outcome::NotFixable {
                kernel: k.name.clone(),
                error: k.verdict.describe(),
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

/// Why a fix is not proven: nothing of it may be installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unproven {
    /// A kernel still fails for a gfx101x target after the edit.
    StillFails {
        kernel: String,
        arch: String,
        error: String,
    },
    /// The edit changed the code a kernel compiles to for the control,
    /// where it must change nothing.
    ControlChanged { kernel: String, case: String },
}

impl std::fmt::Display for Unproven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unproven::StillFails {
                kernel,
                arch,
                error,
            } => write!(f, "{kernel} still fails for {arch} after the fix: {error}"),
            Unproven::ControlChanged { kernel, case } => write!(
                f,
                "the fix changes the code {kernel} compiles to for {CONTROL} ({case}), where it must change nothing"
            ),
        }
    }
}

/// What proved a fix: compiles run, and for which targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub kernels: usize,
    pub compiles: usize,
}

/// Prove `fixed` (the same library after the same-length edit): every
/// batch-norm kernel compiles for each RDNA1 target, and every kernel
/// whose text the edit changed compiles, in each case, to the very code
/// object for the control that the pristine text compiles to.
pub fn prove(
    compiler: &dyn Compiler,
    pristine: &[u8],
    fixed: &[u8],
) -> anyhow::Result<std::result::Result<Proof, Unproven>> {
    let mut compiles = 0;
    let texts = kernels(fixed)?;
    for arch in RDNA1 {
        for t in &texts {
            let k = judge_text(
                compiler,
                &t.name,
                &fixed[t.range.clone()],
                arch,
                &mut compiles,
            )?;
            if let Verdict::FailsAtDpp { case, error } | Verdict::FailsOtherwise { case, error } =
                k.verdict
            {
                return Ok(Err(Unproven::StillFails {
                    kernel: t.name.clone(),
                    arch: arch.to_owned(),
                    error: format!("{case}: {error}"),
                }));
            }
        }
    }
    for t in texts
        .iter()
        .filter(|t| pristine.get(t.range.clone()) != fixed.get(t.range.clone()))
    {
        let (before, after) = (&pristine[t.range.clone()], &fixed[t.range.clone()]);
        for case in cases(before) {
            let defines = defines(before, CONTROL, &case);
            let object = |text: &[u8]| -> anyhow::Result<Option<Vec<u8>>> {
                Ok(
                    match compiler.compile(&Job {
                        name: &t.name,
                        text,
                        arch: CONTROL,
                        defines: &defines,
                    })? {
                        Compiled::Object(o) => Some(o),
                        Compiled::Failed(_) => None,
                    },
                )
            };
            compiles += 2;
            if object(before)? != object(after)? {
                return Ok(Err(Unproven::ControlChanged {
                    kernel: t.name.clone(),
                    case: case.to_string(),
                }));
            }
        }
    }
    Ok(Ok(Proof {
        kernels: texts.len(),
        compiles,
    }))
}

/// The batch-norm kernel texts of `library` (a whole file's bytes): the
/// OpenCL texts that define a kernel whose name says batch norm.
pub fn kernels(library: &[u8]) -> anyhow::Result<Vec<Text>> {
    let (texts, _) = embedded::locate(library)?;
    Ok(texts
        .into_iter()
        .filter(|t| is_batch_norm_kernel(&t.name, &library[t.range.clone()]))
        .collect())
}

fn is_batch_norm_kernel(name: &str, text: &[u8]) -> bool {
    let find = |n: &[u8]| memchr::memmem::find(text, n).is_some();
    find(b"__kernel")
        && !name.ends_with("_INCLUDE")
        && (name.to_ascii_uppercase().contains("BATCHNORM") || find(b"BatchNorm"))
}

/// Judge every batch-norm kernel of `library` for `arch`.
pub fn judge(compiler: &dyn Compiler, library: &[u8], arch: &str) -> anyhow::Result<Judgement> {
    let mut compiles = 0;
    let mut out = Vec::new();
    for t in kernels(library)? {
        let text = &library[t.range.clone()];
        out.push(judge_text(compiler, &t.name, text, arch, &mut compiles)?);
    }
    Ok(Judgement {
        arch: arch.to_owned(),
        compiler: compiler.describe(),
        kernels: out,
        compiles,
        cached: false,
    })
}

/// One text for `arch`, case by case; the control is asked only about a
/// case that fails, to tell a gfx101x failure from one of every card.
pub fn judge_text(
    compiler: &dyn Compiler,
    name: &str,
    text: &[u8],
    arch: &str,
    compiles: &mut usize,
) -> anyhow::Result<Kernel> {
    let cases = cases(text);
    let mut left_out = Vec::new();
    let mut verdict = Verdict::Compiles;
    for case in &cases {
        let asked = defines(text, arch, case);
        *compiles += 1;
        let Compiled::Failed(log) = compiler.compile(&Job {
            name,
            text,
            arch,
            defines: &asked,
        })?
        else {
            continue;
        };
        let control = defines(text, CONTROL, case);
        *compiles += 1;
        if let Compiled::Failed(c) = compiler.compile(&Job {
            name,
            text,
            arch: CONTROL,
            defines: &control,
        })? {
            left_out.push((case.to_string(), first_error(&c)));
            continue;
        }
        let error = first_error(&log);
        let dpp = at_dpp(&log)
            || compiles_without_row_bcast(compiler, name, text, arch, &asked, compiles)?;
        if !verdict.fails() {
            verdict = match dpp {
                true => Verdict::FailsAtDpp {
                    case: case.to_string(),
                    error,
                },
                false => Verdict::FailsOtherwise {
                    case: case.to_string(),
                    error,
                },
            };
        } else if !dpp && matches!(verdict, Verdict::FailsAtDpp { .. }) {
            // A failure the fix cannot reach outweighs one it can.
            verdict = Verdict::FailsOtherwise {
                case: case.to_string(),
                error,
            };
        }
    }
    Ok(Kernel {
        name: name.to_owned(),
        cases: cases.len(),
        left_out,
        verdict,
    })
}

/// Whether a text that failed compiles once every instruction with a
/// `row_bcast` operand is blanked (same length): then the DPP reduction is
/// why it failed.
/// This asks the compiler, where a log does not say: Debian 12's comgr
/// reports a rejected operand as "cannot compile inline asm", no more.
fn compiles_without_row_bcast(
    compiler: &dyn Compiler,
    name: &str,
    text: &[u8],
    arch: &str,
    defines: &[String],
    compiles: &mut usize,
) -> anyhow::Result<bool> {
    let finder = memchr::memmem::Finder::new(b"row_bcast:");
    if finder.find(text).is_none() {
        return Ok(false);
    }
    // The instruction goes whole (its string literal's bytes, on its line):
    // its row_mask and bank_mask would not stand without the row_bcast.
    let mut blanked = text.to_vec();
    let mut at = 0;
    while let Some(i) = finder.find(&blanked[at..]).map(|i| at + i) {
        let start = blanked[..i]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |n| n + 1);
        let end = blanked[i..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(blanked.len(), |n| i + n);
        let line = &blanked[start..end];
        match (
            line.iter().position(|&b| b == b'"'),
            line.iter().rposition(|&b| b == b'"'),
        ) {
            (Some(a), Some(b)) if a < b => blanked[start + a + 1..start + b].fill(b' '),
            _ => blanked[i..i + 10].fill(b' '),
        }
        at = end;
    }
    *compiles += 1;
    Ok(matches!(
        compiler.compile(&Job {
            name,
            text: &blanked,
            arch,
            defines,
        })?,
        Compiled::Object(_)
    ))
}

/// Whether a failed compile's log is the DPP row_bcast operand gfx10 lacks:
/// the assembler names the operand ("not a valid operand") on the
/// instruction's line, which carries `row_bcast`.
fn at_dpp(log: &str) -> bool {
    log.contains("row_bcast")
        || log
            .lines()
            .any(|l| l.contains("not a valid operand") && log.contains("row_"))
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

    #[test]
    fn the_first_error_line_loses_its_position() {
        let log = "warning: x\n/tmp/a.cl:3:5: error: not a valid operand.\n v_add row_bcast:15\n";
        assert_eq!(first_error(log), "not a valid operand.");
        assert!(at_dpp(log));
        assert!(!at_dpp(
            "a.cl:1:1: error: instruction not supported on this GPU"
        ));
    }
}
