//! The diagnosis's rounds of compiles: every batch-norm kernel text of a
//! library, in each case a solver may compile it, for a target, with the
//! DPP reduction blanked and the control where a case fails.

use super::{
    CONTROL, Case, Compiled, Compiler, Job, Judgement, Kernel, Unit, Verdict, at_dpp, first_error,
    kernels,
};

/// Judge every batch-norm kernel of `library` for `arch`.
pub fn judge(compiler: &dyn Compiler, library: &[u8], arch: &str) -> anyhow::Result<Judgement> {
    Ok(judge_all(compiler, library, &[arch])?.remove(0))
}

/// Judge every batch-norm kernel of `library` for each of `archs`, all
/// at once ([`judge_targets`]).
pub fn judge_all(
    compiler: &dyn Compiler,
    library: &[u8],
    archs: &[&str],
) -> anyhow::Result<Vec<Judgement>> {
    let units: Vec<Unit> = kernels(library)?
        .iter()
        .map(|s| Unit::of(s, library))
        .collect();
    let mut compiles = vec![0; archs.len()];
    let out = judge_targets(compiler, &units, archs, &mut compiles)?;
    Ok(archs
        .iter()
        .zip(out)
        .zip(compiles)
        .map(|((arch, kernels), compiles)| Judgement {
            arch: (*arch).to_owned(),
            compiler: compiler.describe(),
            kernels,
            compiles,
            cached: false,
        })
        .collect())
}

/// One text for `arch` ([`judge_units`] of it alone).
pub fn judge_text(
    compiler: &dyn Compiler,
    unit: &Unit,
    arch: &str,
    compiles: &mut usize,
) -> anyhow::Result<Kernel> {
    Ok(judge_units(compiler, std::slice::from_ref(unit), arch, compiles)?.remove(0))
}

/// Every text of `units` for `arch` ([`judge_targets`] for it alone).
pub fn judge_units(
    compiler: &dyn Compiler,
    units: &[Unit],
    arch: &str,
    compiles: &mut usize,
) -> anyhow::Result<Vec<Kernel>> {
    let mut counts = [0];
    let mut out = judge_targets(compiler, units, &[arch], &mut counts)?;
    *compiles += counts[0];
    Ok(out.remove(0))
}

/// Where a compile of [`judge_targets`] stands: a target (by index), a
/// judged text (by index) and its case.
#[derive(Clone, Copy, PartialEq, Eq)]
struct At {
    arch: usize,
    text: usize,
    case: usize,
}

/// What a compile after a case's front end is.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    /// The case compiled to code for its target: the verdict's answer.
    Code,
    /// The text with its `row_bcast` instructions blanked, for the target:
    /// does the DPP reduction cause the failure?
    Blanked,
    /// The text for the control: is the failure every card's?
    Control,
}

/// Every text of `units` for each of `archs`, in one call of the compiler
/// (every core has work to the end), each compile asked the moment the
/// answer it follows is in. First each case's front end (an OpenCL
/// text's IR before any pass, a HIP text as hipRTC preprocesses it),
/// then its code, asked by its front end ([`Job::code_of`]): cases whose
/// front ends are the same for a target compile to the same code, or
/// fail the same way, and a compiler that keeps answers by their input
/// compiles one of them for all (Debian's 6.4.3: 48 codes for 68 OpenCL
/// cases). Then, for each
/// case that fails where the log does not put the failure at the DPP
/// reduction: the text once more with its `row_bcast` instructions
/// blanked, to tell the DPP reduction from another cause, and the
/// control, to tell a gfx101x failure from one of every card. The
/// kernels by target; the compiles each target asked are added to
/// `compiles`.
pub fn judge_targets(
    compiler: &dyn Compiler,
    units: &[Unit],
    archs: &[&str],
    compiles: &mut [usize],
) -> anyhow::Result<Vec<Vec<Kernel>>> {
    // A name that would lead a compiler out of its directory: nothing is
    // compiled, and the kernel is said not judged, with the name.
    let judged: Vec<&Unit> = units.iter().filter(|u| u.refused().is_none()).collect();
    let cases: Vec<Vec<Case>> = judged.iter().map(|u| u.cases()).collect();
    // The define sets, by target, text and case; the control's.
    let defines = |arch: &str| -> Vec<Vec<Vec<String>>> {
        judged
            .iter()
            .zip(&cases)
            .map(|(u, c)| u.defines_all(arch, c))
            .collect()
    };
    let asked: Vec<Vec<Vec<Vec<String>>>> = archs.iter().map(|a| defines(a)).collect();
    let controls = defines(CONTROL);
    let blanked: Vec<Option<Unit>> = judged.iter().map(|u| u.without_row_bcast()).collect();
    let mut rounds = Rounds {
        archs,
        judged: &judged,
        asked: &asked,
        controls: &controls,
        blanked: &blanked,
        first: Vec::new(),
        later: Vec::new(),
    };
    let mut jobs: Vec<Job> = Vec::new();
    for (a, arch) in archs.iter().enumerate() {
        for (t, u) in judged.iter().enumerate() {
            for (c, defines) in asked[a][t].iter().enumerate() {
                rounds.first.push(At {
                    arch: a,
                    text: t,
                    case: c,
                });
                jobs.push(u.front_end_job(arch, defines));
            }
        }
    }
    let answers = compile_then(compiler, &jobs, &mut |n, c| rounds.then(n, c))?;
    for at in rounds
        .first
        .iter()
        .chain(rounds.later.iter().map(|(at, _)| at))
    {
        compiles[at.arch] += 1;
    }
    let answered = Answered {
        rounds: &rounds,
        answers: &answers,
    };
    Ok((0..archs.len())
        .map(|a| {
            let mut verdicts = judged
                .iter()
                .enumerate()
                .map(|(t, u)| answered.verdict(u, &cases[t], a, t));
            units
                .iter()
                .map(|u| match u.refused() {
                    Some(error) => Kernel {
                        name: u.name.clone(),
                        cases: 0,
                        failing: 0,
                        control_too: 0,
                        verdict: Verdict::Refused { error },
                    },
                    None => verdicts.next().expect("one verdict a judged text"),
                })
                .collect()
        })
        .collect())
}

/// The compiles of [`judge_targets`] as they are asked: the front ends
/// first, then what each answer asks.
struct Rounds<'a> {
    archs: &'a [&'a str],
    judged: &'a [&'a Unit],
    asked: &'a [Vec<Vec<Vec<String>>>],
    controls: &'a [Vec<Vec<String>>],
    blanked: &'a [Option<Unit>],
    /// The front ends, by number.
    first: Vec<At>,
    /// What came after, numbered on from the front ends.
    later: Vec<(At, Then)>,
}

impl<'a> Rounds<'a> {
    /// The compiles answer `n` asks: after a front end, the case's code
    /// (by that front end, when it has one: a failed one is compiled to
    /// code for its own log); after a code that fails where the log does
    /// not say why, the second compiles.
    fn then(&mut self, n: usize, answer: &Compiled) -> Vec<Job<'a>> {
        if let Some(&at) = self.first.get(n) {
            let code_of = match answer {
                Compiled::Object(digest) => digest.as_slice().try_into().ok(),
                Compiled::Failed(_) => None,
            };
            self.later.push((at, Then::Code));
            let u = self.judged[at.text];
            return vec![Job {
                code_of,
                ..u.job(self.archs[at.arch], &self.asked[at.arch][at.text][at.case])
            }];
        }
        match self.later[n - self.first.len()] {
            (at, Then::Code) if matches!(answer, Compiled::Failed(log) if !at_dpp(log)) => {
                self.second(at)
            }
            _ => Vec::new(),
        }
    }

    /// A failing case's second compiles: blanked, and the control.
    fn second(&mut self, at: At) -> Vec<Job<'a>> {
        let mut more = Vec::new();
        if let Some(b) = &self.blanked[at.text] {
            more.push(b.job(self.archs[at.arch], &self.asked[at.arch][at.text][at.case]));
            self.later.push((at, Then::Blanked));
        }
        let u = self.judged[at.text];
        more.push(u.job(CONTROL, &self.controls[at.text][at.case]));
        self.later.push((at, Then::Control));
        more
    }
}

/// What [`judge_targets`] asked and was answered.
struct Answered<'a> {
    rounds: &'a Rounds<'a>,
    answers: &'a [Compiled],
}

impl Answered<'_> {
    /// The answer of what came after the front ends, for `at`.
    fn after(&self, at: At, what: Then) -> Option<&Compiled> {
        let r = self.rounds;
        r.later
            .iter()
            .position(|&(k, w)| k == at && w == what)
            .map(|i| &self.answers[r.first.len() + i])
    }

    /// The verdict of judged text `t` (`unit`, its `cases`) for target `a`.
    fn verdict(&self, unit: &Unit, cases: &[Case], a: usize, t: usize) -> Kernel {
        let at = |case| At {
            arch: a,
            text: t,
            case,
        };
        let failed: Vec<(usize, String)> = (0..cases.len())
            .filter_map(|c| match self.after(at(c), Then::Code)? {
                Compiled::Failed(log) => Some((c, log.clone())),
                Compiled::Object(_) => None,
            })
            .collect();
        let ask: Vec<usize> = failed
            .iter()
            .filter(|(_, log)| !at_dpp(log))
            .map(|(i, _)| *i)
            .collect();
        let of = |what: Then| -> Vec<Compiled> {
            ask.iter()
                .filter_map(|&c| self.after(at(c), what).cloned())
                .collect()
        };
        verdict_of(
            unit,
            cases,
            &failed,
            &ask,
            &of(Then::Blanked),
            &of(Then::Control),
        )
    }
}

/// One text's verdict from its rounds: the cases that `failed` for the
/// target (with their logs), those `ask`ed again (the log not saying the
/// cause), blanked, with the answers `again`, and the control's answers
/// for each asked.
fn verdict_of(
    unit: &Unit,
    cases: &[Case],
    failed: &[(usize, String)],
    ask: &[usize],
    again: &[Compiled],
    control: &[Compiled],
) -> Kernel {
    let mut control_too = 0;
    let mut verdict = Verdict::Compiles;
    for (i, log) in failed {
        let asked = ask.iter().position(|a| a == i);
        let dpp = at_dpp(log)
            || asked
                .and_then(|k| again.get(k))
                .is_some_and(|c| matches!(c, Compiled::Object(_)));
        let control_fails = asked
            .and_then(|k| control.get(k))
            .is_some_and(|c| matches!(c, Compiled::Failed(_)));
        // A failure at the DPP reduction is the card's, whatever the
        // control does; another that the control shares is every card's.
        control_too += usize::from(control_fails && !dpp);
        let (case, error) = (cases[*i].to_string(), first_error(log));
        if !verdict.fails() {
            verdict = match dpp {
                true => Verdict::FailsAtDpp { case, error },
                false => Verdict::FailsOtherwise { case, error },
            };
        } else if !dpp && matches!(verdict, Verdict::FailsAtDpp { .. }) {
            // A failure the fix cannot reach outweighs one it can.
            verdict = Verdict::FailsOtherwise { case, error };
        }
    }
    // A text no case of which compiles anywhere, DPP aside, was never
    // judged: that is said, never taken for "compiles" or for a failure
    // of gfx101x.
    if !cases.is_empty() && control_too == cases.len() {
        let (i, log) = &failed[0];
        verdict = Verdict::NotJudged {
            case: cases[*i].to_string(),
            error: first_error(log),
        };
    }
    Kernel {
        name: unit.name.clone(),
        cases: cases.len(),
        failing: failed.len(),
        control_too,
        verdict,
    }
}

/// `jobs` and what `then` asks after each answer, in one call of the
/// compiler; a compiler that answers another number of them is an error.
fn compile_then<'a>(
    compiler: &dyn Compiler,
    jobs: &[Job<'a>],
    then: &mut dyn FnMut(usize, &Compiled) -> Vec<Job<'a>>,
) -> anyhow::Result<Vec<Compiled>> {
    let mut asked = jobs.len();
    let mut counted = |n: usize, c: &Compiled| {
        let more = then(n, c);
        asked += more.len();
        more
    };
    let answers = compiler.compile_then(jobs, &mut counted)?;
    anyhow::ensure!(
        answers.len() == asked,
        "{} gave {} answers to {asked} compiles",
        compiler.describe(),
        answers.len(),
    );
    Ok(answers)
}

/// `unit` compiled for `arch` with each define set, in one batch.
pub(crate) fn compile_all(
    compiler: &dyn Compiler,
    unit: &Unit,
    arch: &str,
    defines: &[Vec<String>],
    compiles: &mut usize,
) -> anyhow::Result<Vec<Compiled>> {
    let jobs: Vec<Job> = defines.iter().map(|d| unit.job(arch, d)).collect();
    compile_jobs(compiler, &jobs, compiles)
}

/// `jobs` compiled in one batch (none: no call), counted in `compiles`;
/// a compiler that answers another number of them is an error.
pub(crate) fn compile_jobs(
    compiler: &dyn Compiler,
    jobs: &[Job],
    compiles: &mut usize,
) -> anyhow::Result<Vec<Compiled>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    *compiles += jobs.len();
    let answers = compiler.compile_all(jobs)?;
    anyhow::ensure!(
        answers.len() == jobs.len(),
        "{} gave {} answers to {} compiles",
        compiler.describe(),
        answers.len(),
        jobs.len()
    );
    Ok(answers)
}
