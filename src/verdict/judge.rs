//! The diagnosis's rounds of compiles: every batch-norm kernel text of a
//! library, in each case a solver may compile it, for a target, with the
//! DPP reduction blanked and the control where a case fails.

use super::{
    CONTROL, Case, Compiled, Compiler, Job, Judgement, Kernel, Unit, Verdict, at_dpp, first_error,
    kernels,
};

/// Judge every batch-norm kernel of `library` for `arch`.
pub fn judge(compiler: &dyn Compiler, library: &[u8], arch: &str) -> anyhow::Result<Judgement> {
    let mut compiles = 0;
    let units: Vec<Unit> = kernels(library)?
        .iter()
        .map(|s| Unit::of(s, library))
        .collect();
    let out = judge_units(compiler, &units, arch, &mut compiles)?;
    Ok(Judgement {
        arch: arch.to_owned(),
        compiler: compiler.describe(),
        kernels: out,
        compiles,
        cached: false,
    })
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

/// Every text of `units` for `arch`, in two rounds, each one batch for
/// the compiler, all texts together (so that every core has work, and a
/// child loads the compiler twice, not twice a text): every case for
/// `arch`; then, for the cases that failed where the log does not put the
/// failure at the DPP reduction, the text once more with its `row_bcast`
/// instructions blanked, to tell the DPP reduction from another cause,
/// and the control, to tell a gfx101x failure from one of every card.
pub fn judge_units(
    compiler: &dyn Compiler,
    units: &[Unit],
    arch: &str,
    compiles: &mut usize,
) -> anyhow::Result<Vec<Kernel>> {
    // A name that would lead a compiler out of its directory: nothing is
    // compiled, and the kernel is said not judged, with the name.
    let judged: Vec<&Unit> = units.iter().filter(|u| u.refused().is_none()).collect();
    let cases: Vec<Vec<Case>> = judged.iter().map(|u| u.cases()).collect();
    let asked: Vec<Vec<Vec<String>>> = judged
        .iter()
        .zip(&cases)
        .map(|(u, c)| u.defines_all(arch, c))
        .collect();
    let first = compile_units(
        compiler,
        judged
            .iter()
            .zip(&asked)
            .map(|(u, d)| (*u, arch, d.clone())),
        compiles,
    )?;
    let failed: Vec<Vec<(usize, String)>> = first
        .into_iter()
        .map(|answers| {
            answers
                .into_iter()
                .enumerate()
                .filter_map(|(i, c)| match c {
                    Compiled::Failed(log) => Some((i, log)),
                    Compiled::Object(_) => None,
                })
                .collect()
        })
        .collect();
    let ask: Vec<Vec<usize>> = failed
        .iter()
        .map(|f| {
            f.iter()
                .filter(|(_, log)| !at_dpp(log))
                .map(|(i, _)| *i)
                .collect()
        })
        .collect();
    let blanked: Vec<Option<Unit>> = judged.iter().map(|u| u.without_row_bcast()).collect();
    // The control where it decides something: a failure the log puts at
    // the DPP reduction is the card's, judged, whatever the control does;
    // for another, whether the control fails too says whether the text is
    // built for any card here (else it is not judged).
    let controls: Vec<Vec<Vec<String>>> = judged
        .iter()
        .zip(&ask)
        .zip(&cases)
        .map(|((u, ask), c)| {
            let asked_cases: Vec<Case> = ask.iter().map(|i| c[*i]).collect();
            u.defines_all(CONTROL, &asked_cases)
        })
        .collect();
    let again_asked: Vec<Vec<Vec<String>>> = ask
        .iter()
        .zip(&asked)
        .map(|(ask, asked)| ask.iter().map(|i| asked[*i].clone()).collect())
        .collect();
    let (again, control) = second_round(
        compiler,
        (&judged, &blanked),
        arch,
        (&again_asked, &controls),
        compiles,
    )?;
    let mut verdicts = judged
        .iter()
        .enumerate()
        .map(|(k, u)| verdict_of(u, &cases[k], &failed[k], &ask[k], &again[k], &control[k]));
    Ok(units
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
        .collect())
}

/// The second round, one batch: the `blanked` copies for `arch` with the
/// define sets asked again, and the `judged` texts for the control with
/// theirs; the answers of each, by text.
type Rounds = (Vec<Vec<Compiled>>, Vec<Vec<Compiled>>);
/// Define sets, by text.
type DefineSets = [Vec<Vec<String>>];
fn second_round(
    compiler: &dyn Compiler,
    (judged, blanked): (&[&Unit], &[Option<Unit>]),
    arch: &str,
    (again, controls): (&DefineSets, &DefineSets),
    compiles: &mut usize,
) -> anyhow::Result<Rounds> {
    let mut asks: Vec<(&Unit, &str, Vec<Vec<String>>)> = Vec::new();
    for (b, d) in blanked.iter().zip(again) {
        if let Some(b) = b {
            asks.push((b, arch, d.clone()));
        }
    }
    for (u, d) in judged.iter().zip(controls) {
        asks.push((u, CONTROL, d.clone()));
    }
    let mut answers = compile_units(compiler, asks, compiles)?.into_iter();
    let again = blanked
        .iter()
        .map(|b| match b {
            Some(_) => answers.next().unwrap_or_default(),
            None => Vec::new(),
        })
        .collect();
    Ok((again, answers.collect()))
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

/// Each (unit, target, define sets) compiled, all in one batch; the
/// answers by unit, in order.
fn compile_units<'a>(
    compiler: &dyn Compiler,
    asks: impl IntoIterator<Item = (&'a Unit, &'a str, Vec<Vec<String>>)>,
    compiles: &mut usize,
) -> anyhow::Result<Vec<Vec<Compiled>>> {
    let asks: Vec<(&Unit, &str, Vec<Vec<String>>)> = asks.into_iter().collect();
    let jobs: Vec<Job> = asks
        .iter()
        .flat_map(|(u, arch, defines)| defines.iter().map(|d| u.job(arch, d)))
        .collect();
    let mut answers = compile_jobs(compiler, &jobs, compiles)?.into_iter();
    Ok(asks
        .iter()
        .map(|(_, _, d)| answers.by_ref().take(d.len()).collect())
        .collect())
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
