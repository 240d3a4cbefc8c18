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
#[derive(Clone, Copy)]
struct At {
    arch: usize,
    text: usize,
    case: usize,
}

/// What a second compile asks of a case that failed where the log does
/// not say why.
#[derive(Clone, Copy, PartialEq)]
enum Again {
    /// The text with its `row_bcast` instructions blanked, for the target:
    /// does the DPP reduction cause the failure?
    Blanked,
    /// The text for the control: is the failure every card's?
    Control,
}

/// Every text of `units` for each of `archs`, every case of each for each
/// target in one call of the compiler (so that every core has work), and
/// for each case that fails where the log does not put the failure at the
/// DPP reduction, asked as soon as that failure is in: the text once more
/// with its `row_bcast` instructions blanked, to tell the DPP reduction
/// from another cause, and the control, to tell a gfx101x failure from
/// one of every card. The kernels by target; the compiles each target
/// asked are added to `compiles`.
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
    let mut first: Vec<At> = Vec::new();
    let mut jobs: Vec<Job> = Vec::new();
    for (a, arch) in archs.iter().enumerate() {
        for (t, u) in judged.iter().enumerate() {
            for (c, defines) in asked[a][t].iter().enumerate() {
                first.push(At {
                    arch: a,
                    text: t,
                    case: c,
                });
                jobs.push(u.job(arch, defines));
            }
        }
    }
    // The second compiles, in the order asked: what each is.
    let mut second: Vec<(At, Again)> = Vec::new();
    let mut then = |n: usize, answer: &Compiled| -> Vec<Job> {
        let Some(&at) = first.get(n) else {
            return Vec::new();
        };
        let Compiled::Failed(log) = answer else {
            return Vec::new();
        };
        if at_dpp(log) {
            return Vec::new();
        }
        let mut more = Vec::new();
        if let Some(b) = &blanked[at.text] {
            more.push(b.job(archs[at.arch], &asked[at.arch][at.text][at.case]));
            second.push((at, Again::Blanked));
        }
        more.push(judged[at.text].job(CONTROL, &controls[at.text][at.case]));
        second.push((at, Again::Control));
        more
    };
    let answers = compile_then(compiler, &jobs, &mut then)?;
    for at in first.iter().chain(second.iter().map(|(at, _)| at)) {
        compiles[at.arch] += 1;
    }
    let answers = Answered {
        first: &first,
        second: &second,
        answers: &answers,
    };
    Ok((0..archs.len())
        .map(|a| {
            let mut verdicts = judged
                .iter()
                .enumerate()
                .map(|(t, u)| answers.verdict(u, &cases[t], a, t));
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

/// What [`judge_targets`] asked and was answered: the first compiles,
/// then the second, in the order asked.
struct Answered<'a> {
    first: &'a [At],
    second: &'a [(At, Again)],
    answers: &'a [Compiled],
}

impl Answered<'_> {
    /// The verdict of judged text `t` (`unit`, its `cases`) for target `a`.
    fn verdict(&self, unit: &Unit, cases: &[Case], a: usize, t: usize) -> Kernel {
        let (first, second) = self.answers.split_at(self.first.len());
        let mine = |k: &At| k.arch == a && k.text == t;
        let failed: Vec<(usize, String)> = self
            .first
            .iter()
            .zip(first)
            .filter(|(k, _)| mine(k))
            .filter_map(|(k, c)| match c {
                Compiled::Failed(log) => Some((k.case, log.clone())),
                Compiled::Object(_) => None,
            })
            .collect();
        let ask: Vec<usize> = failed
            .iter()
            .filter(|(_, log)| !at_dpp(log))
            .map(|(i, _)| *i)
            .collect();
        let of = |what: Again| -> Vec<Compiled> {
            ask.iter()
                .filter_map(|&i| {
                    self.second
                        .iter()
                        .zip(second)
                        .find(|((k, w), _)| mine(k) && k.case == i && *w == what)
                        .map(|(_, c)| c.clone())
                })
                .collect()
        };
        verdict_of(
            unit,
            cases,
            &failed,
            &ask,
            &of(Again::Blanked),
            &of(Again::Control),
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
