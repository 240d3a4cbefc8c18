//! The proof of a fix, by the same compiler as the diagnosis: every case
//! of every kernel compiles for each target asked (the card in the
//! machine, else every RDNA1 target) after the edit, and the
//! code the control compiles to is unchanged wherever it compiled before.
//! A kernel that compiled nowhere before and was not edited is said, not
//! taken for proven; one still failing is named with the line of the DPP
//! reduction it still reaches.

use super::{
    CONTROL, Compiled, Compiler, Job, RDNA1, Unit, Verdict, compile_all, compile_jobs,
    judge_targets,
};

/// Why a fix is not proven: nothing of it may be installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unproven {
    /// A kernel still fails for a gfx101x target after the edit, and
    /// where it still reaches the DPP reduction, when that is the cause.
    StillFails {
        kernel: String,
        arch: String,
        error: String,
        reached: Option<Reached>,
    },
    /// The edit changed the code a kernel compiles to for the control,
    /// in a case that compiled before, where it must change nothing.
    ControlChanged { kernel: String, case: String },
    /// The edit changed a kernel that is never compiled
    /// ([`Verdict::Refused`]): nothing can show the control unchanged.
    Refused { kernel: String, error: String },
}

/// A `row_bcast` line a kernel still reaches after the fix: in which text
/// (the kernel's or a header's), its 1-based line, the instruction, and
/// the conditional it lies under, when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    pub text: String,
    pub line: usize,
    pub code: String,
    pub under: Option<(usize, String)>,
}

impl std::fmt::Display for Unproven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unproven::StillFails {
                kernel,
                arch,
                error,
                reached,
            } => {
                write!(f, "{kernel} still fails for {arch} after the fix: {error}")?;
                if let Some(r) = reached {
                    write!(
                        f,
                        "; it still reaches the DPP reduction at line {} of {} (`{}`)",
                        r.line, r.text, r.code
                    )?;
                    if let Some((line, directive)) = &r.under {
                        write!(
                            f,
                            ", under `{directive}` (line {line}), code the fix does not know how to make portable"
                        )?;
                    }
                }
                Ok(())
            }
            Unproven::ControlChanged { kernel, case } => write!(
                f,
                "the fix changes the code {kernel} compiles to for {CONTROL} ({case}), where it must change nothing"
            ),
            Unproven::Refused { kernel, error } => write!(
                f,
                "the fix changes {kernel}, which is never compiled: {error}"
            ),
        }
    }
}

/// What proved a fix: the kernels proven, those not judged (compiling
/// nowhere before or after, and not edited), the control's cases that
/// failed before and compile after, and the compiles run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub kernels: usize,
    pub not_judged: Vec<String>,
    pub control_now_compiles: usize,
    pub compiles: usize,
}

/// Prove `fixed` (the same library after the same-length edit): every case
/// of every batch-norm kernel compiles for each of `targets`, and every
/// kernel whose text (or a header it includes) the edit changed compiles,
/// in each case that compiled before for the control, to the very code
/// object the pristine text compiles to.
pub fn prove(
    compiler: &dyn Compiler,
    pristine: &[u8],
    fixed: &[u8],
    targets: &[&str],
) -> anyhow::Result<std::result::Result<Proof, Unproven>> {
    anyhow::ensure!(!targets.is_empty(), "a proof for no target");
    let mut compiles = 0;
    let sources = super::kernels(fixed)?;
    let mut not_judged: Vec<String> = Vec::new();
    let units: Vec<Unit> = sources.iter().map(|s| Unit::of(s, fixed)).collect();
    // Every kernel for every target at once, on every core.
    let mut counts = vec![0; targets.len()];
    let all = judge_targets(compiler, &units, targets, &mut counts)?;
    compiles += counts.iter().sum::<usize>();
    for (&arch, judged) in targets.iter().zip(all) {
        for ((s, unit), k) in sources.iter().zip(&units).zip(judged) {
            let (case, error) = match k.verdict {
                Verdict::Compiles => continue,
                // Never compiled, so never edited: said as not judged (an
                // edit of it is refused below).
                Verdict::Refused { .. } => {
                    if !not_judged.contains(&s.name) {
                        not_judged.push(s.name.clone());
                    }
                    continue;
                }
                Verdict::NotJudged { case, error } => {
                    // Not judged, and left alone: it compiles nowhere, and
                    // did not before either (a header the edit changed
                    // might have broken it: its pristine self is asked).
                    let own = pristine.get(s.range.clone()) == fixed.get(s.range.clone());
                    if own && not_judged.contains(&s.name) {
                        continue;
                    }
                    if own && !compiled_anywhere(compiler, &Unit::of(s, pristine), &mut compiles)? {
                        not_judged.push(s.name.clone());
                        continue;
                    }
                    (
                        case,
                        format!("{error}; it compiles for no card after the fix"),
                    )
                }
                Verdict::FailsAtDpp { case, error } | Verdict::FailsOtherwise { case, error } => {
                    (case, error)
                }
            };
            let defines = unit
                .cases()
                .into_iter()
                .find(|c| c.to_string() == case)
                .map(|c| unit.defines(arch, &c))
                .unwrap_or_default();
            return Ok(Err(Unproven::StillFails {
                kernel: s.name.clone(),
                arch: arch.to_owned(),
                error: format!("{case}: {error}"),
                reached: reached(compiler, unit, arch, &defines, &mut compiles)?,
            }));
        }
    }
    let control_now_compiles =
        match control_unchanged(compiler, &sources, pristine, fixed, &mut compiles)? {
            Ok(n) => n,
            Err(why) => return Ok(Err(why)),
        };
    Ok(Ok(Proof {
        kernels: sources.len() - not_judged.len(),
        not_judged,
        control_now_compiles,
        compiles,
    }))
}

/// Every kernel the edit changed compiles for the control, in each case
/// that compiled before, to the very code it compiled to; how many of the
/// control's cases that failed before compile after. An OpenCL case whose
/// front end gives the same IR before and after compiles to the same code
/// (or fails alike): only the others are compiled to code.
fn control_unchanged(
    compiler: &dyn Compiler,
    sources: &[super::Source],
    pristine: &[u8],
    fixed: &[u8],
    compiles: &mut usize,
) -> anyhow::Result<std::result::Result<usize, Unproven>> {
    let mut control_now_compiles = 0;
    let changed: Vec<&super::Source> = sources
        .iter()
        .filter(|s| s.differs(pristine, fixed))
        .collect();
    let mut pairs = Vec::new();
    for s in &changed {
        let (before, after) = (Unit::of(s, pristine), Unit::of(s, fixed));
        if let Some(error) = before.refused().or_else(|| after.refused()) {
            return Ok(Err(Unproven::Refused {
                kernel: s.name.clone(),
                error,
            }));
        }
        let cases = before.cases();
        let defines: Vec<Vec<String>> = before.defines_all(CONTROL, &cases);
        pairs.push((before, after, cases, defines));
    }
    let differ = front_ends_differ(compiler, &pairs, compiles)?;
    let jobs: Vec<Job> = pairs
        .iter()
        .zip(&differ)
        .flat_map(|((b, a, _, d), differ)| {
            let asked = || d.iter().zip(differ).filter(|(_, x)| **x).map(|(d, _)| d);
            asked()
                .map(|d| b.job(CONTROL, d))
                .chain(asked().map(|d| a.job(CONTROL, d)))
        })
        .collect();
    let answers = compile_jobs(compiler, &jobs, compiles)?;
    let object = |c: &Compiled| match c {
        Compiled::Object(o) => Some(o.clone()),
        Compiled::Failed(_) => None,
    };
    let mut at = 0;
    for ((s, (_, _, cases, _)), differ) in changed.iter().zip(&pairs).zip(&differ) {
        let n = differ.iter().filter(|x| **x).count();
        let was: Vec<Option<Vec<u8>>> = answers[at..at + n].iter().map(object).collect();
        let is: Vec<Option<Vec<u8>>> = answers[at + n..at + 2 * n].iter().map(object).collect();
        at += 2 * n;
        let asked = cases
            .iter()
            .zip(differ)
            .filter(|(_, x)| **x)
            .map(|(c, _)| c);
        for (i, case) in asked.enumerate() {
            match (&was[i], &is[i]) {
                // A case that failed for the control before may compile
                // after (the DPP reduction it reached is gone): said.
                (None, Some(_)) => control_now_compiles += 1,
                (Some(a), b) if Some(a) != b.as_ref() => {
                    return Ok(Err(Unproven::ControlChanged {
                        kernel: s.name.clone(),
                        case: case.to_string(),
                    }));
                }
                _ => {}
            }
        }
    }
    Ok(Ok(control_now_compiles))
}

/// Whether any case of `unit` compiles for the control or a gfx101x
/// target, its DPP reduction blanked.
fn compiled_anywhere(
    compiler: &dyn Compiler,
    unit: &Unit,
    compiles: &mut usize,
) -> anyhow::Result<bool> {
    let blanked = unit.without_row_bcast();
    let unit = blanked.as_ref().unwrap_or(unit);
    for arch in [CONTROL, RDNA1[0]] {
        let defines: Vec<Vec<String>> = unit.defines_all(arch, &unit.cases());
        let answers = compile_all(compiler, unit, arch, &defines, compiles)?;
        if answers.iter().any(|c| matches!(c, Compiled::Object(_))) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The first `row_bcast` line `unit` still reaches for `arch` with
/// `defines`: with every other such line blanked, the compile fails; and
/// with all of them blanked it compiles (else the DPP is not the cause,
/// and no line is named). One batch.
fn reached(
    compiler: &dyn Compiler,
    unit: &Unit,
    arch: &str,
    defines: &[String],
    compiles: &mut usize,
) -> anyhow::Result<Option<Reached>> {
    // Every row_bcast line, as (file index: 0 the text, i + 1 header i,
    // its range).
    let files: Vec<&[u8]> = std::iter::once(unit.text.as_slice())
        .chain(unit.headers.iter().map(|(_, h)| h.as_slice()))
        .collect();
    let lines: Vec<(usize, std::ops::Range<usize>)> = files
        .iter()
        .enumerate()
        .flat_map(|(f, t)| super::row_bcast_lines(t).into_iter().map(move |r| (f, r)))
        .collect();
    if lines.is_empty() {
        return Ok(None);
    }
    // Copy k keeps line k - 1 alone; copy 0 keeps none.
    let copies: Vec<Unit> = (0..=lines.len())
        .map(|keep| {
            let mut u = Unit {
                name: unit.name.clone(),
                lang: unit.lang,
                text: unit.text.clone(),
                headers: unit.headers.clone(),
            };
            for (k, (f, r)) in lines.iter().enumerate() {
                if keep != k + 1 {
                    match f {
                        0 => super::blank(&mut u.text, r),
                        h => super::blank(&mut u.headers[h - 1].1, r),
                    }
                }
            }
            u
        })
        .collect();
    let jobs: Vec<Job> = copies.iter().map(|u| u.job(arch, defines)).collect();
    let answers = compile_jobs(compiler, &jobs, compiles)?;
    if !matches!(answers.first(), Some(Compiled::Object(_))) {
        return Ok(None);
    }
    let Some(k) = (1..answers.len()).find(|&k| matches!(answers[k], Compiled::Failed(_))) else {
        return Ok(None);
    };
    let (f, range) = &lines[k - 1];
    let text = files[*f];
    let line = text[..range.start].iter().filter(|&&b| b == b'\n').count() + 1;
    let code = String::from_utf8_lossy(&text[range.clone()]);
    let code = code.trim().trim_matches('"').trim_end_matches("\\n").trim();
    Ok(Some(Reached {
        text: match f {
            0 => unit.name.clone(),
            h => unit.headers[h - 1].0.clone(),
        },
        line,
        code: code.to_owned(),
        under: under(text, range.start),
    }))
}

/// The innermost preprocessor conditional open at `at` in `text`: its
/// 1-based line and its directive, continuations joined.
fn under(text: &[u8], at: usize) -> Option<(usize, String)> {
    let mut open: Vec<(usize, String)> = Vec::new();
    let mut line_no = 1;
    let mut start = 0;
    while start < at {
        let mut end = memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |n| start + n);
        let first = line_no;
        // A directive continued over several lines is one.
        while text[start..end].trim_ascii_end().ends_with(b"\\") && end < text.len() {
            end = memchr::memchr(b'\n', &text[end + 1..]).map_or(text.len(), |n| end + 1 + n);
            line_no += 1;
        }
        let raw = String::from_utf8_lossy(&text[start..end]).replace("\\\n", " ");
        let directive = raw.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(rest) = directive.strip_prefix('#') {
            let word = rest.trim_start();
            if ["if", "ifdef", "ifndef"].iter().any(|w| {
                word.strip_prefix(w)
                    .is_some_and(|r| r.starts_with([' ', '(']))
            }) {
                open.push((first, directive.clone()));
            } else if word.starts_with("elif") || word.starts_with("else") {
                open.pop();
                open.push((first, directive.clone()));
            } else if word.starts_with("endif") {
                open.pop();
            }
        }
        line_no += 1;
        start = end + 1;
    }
    open.pop()
}

/// A changed kernel before and after, its cases and their defines.
type Pair = (Unit, Unit, Vec<super::Case>, Vec<Vec<String>>);

/// For each pair, which cases to compile to code for the control: those
/// whose front ends differ before and after.
fn front_ends_differ(
    compiler: &dyn Compiler,
    pairs: &[Pair],
    compiles: &mut usize,
) -> anyhow::Result<Vec<Vec<bool>>> {
    // The front ends first. An OpenCL text's LLVM IR before any pass,
    // with the same options and target, decides its code, so a case
    // whose IR the fix leaves as it was compiles to the code it did (or
    // fails as it did). A HIP text's preprocessed text, as hipRTC itself
    // preprocesses it, likewise decides its compile's whole input. Only
    // the cases whose front ends differ are compiled to code, before and
    // after; a HIP case whose hipRTC cannot stop at its preprocessor
    // (before ROCm 5.3), or that fails there, is compiled to code too.
    let front: Vec<Job> = pairs
        .iter()
        .flat_map(|(b, a, _, d)| {
            d.iter()
                .map(|d| b.front_end_job(CONTROL, d))
                .chain(d.iter().map(|d| a.front_end_job(CONTROL, d)))
        })
        .collect();
    let fronts = compile_jobs(compiler, &front, compiles)?;
    let mut fronts = fronts.iter();
    // Per pair, the cases to compile to code.
    Ok(pairs
        .iter()
        .map(|(b, _, _, d)| {
            let was: Vec<&Compiled> = fronts.by_ref().take(d.len()).collect();
            let is: Vec<&Compiled> = fronts.by_ref().take(d.len()).collect();
            was.iter()
                .zip(&is)
                .map(|(w, i)| match (w, i, b.lang) {
                    (Compiled::Object(w), Compiled::Object(i), _) => w != i,
                    (Compiled::Failed(_), Compiled::Failed(_), super::Lang::OpenCl) => false,
                    _ => true,
                })
                .collect()
        })
        .collect())
}
