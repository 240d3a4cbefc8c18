//! doctor's and verify's `library`, `tensile` and `miopen-db` rows: every
//! GPU library torch loads, read for the card (`gpucode`), each finding
//! said with the ops that fail and, where TheRock's gfx101x torch would not
//! have the problem, that torch.

use std::path::Path;

use crate::gpu;
use crate::gpucode::{self, Finding, therock};
use crate::inspect::checks::{Blocking, CheckReport, Status};
use crate::torch;

/// The target the libraries are judged for: what ROCm reports for the
/// card (HSA_OVERRIDE_GFX_VERSION's target when it is set), the machine's
/// first RDNA1 card, else its first card, else gfx1010; and how it was had.
pub(crate) fn judged_target(gfx_override: Option<&str>, cards: &[String]) -> (String, String) {
    if let Some(t) = gfx_override.and_then(gpu::override_gfx) {
        return (
            t.clone(),
            format!("{t} (what HSA_OVERRIDE_GFX_VERSION makes ROCm report)"),
        );
    }
    let card = cards
        .iter()
        .find(|c| gpu::is_rdna1_arch(c))
        .or(cards.first());
    match card {
        Some(c) => (c.clone(), format!("{c} (the card's)")),
        None => (
            "gfx1010".to_owned(),
            "gfx1010 (no card seen: the RX 5700's)".to_owned(),
        ),
    }
}

/// The findings for torch's load closure, from libtorch_hip.so; when the
/// closure cannot be had, a `library` skip row says why and there are none.
pub(crate) fn survey(t: &torch::Torch, target: &str, r: &mut CheckReport) -> Vec<Finding> {
    let hip = t.dir.join("lib/libtorch_hip.so");
    match gpucode::closure(&hip, &t.preloaded_dirs()) {
        Ok(libs) => gpucode::survey(&libs, target),
        // Whether rocBLAS and the rest have the card's code is not known:
        // no pass.
        Err(e) => {
            r.push_breaks(
                "library",
                Blocking::NotChecked,
                format!("not checked: the GPU libraries torch loads were not read: {e:#}"),
                "torch's GPU libraries: which torch loads could not be read (see library)",
                None,
            );
            Vec::new()
        }
    }
}

/// What doctor knows beyond the files: the route that fixes rocBLAS for
/// this torch (a build of it, for a torch its user built), and the
/// transaction whose rocBLAS torch holds, when one does.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    /// The fix a failing rocBLAS row gets in place of TheRock's torch.
    pub rocblas: Option<String>,
    /// "transaction 1 of 2026-...": the install torch's rocBLAS is.
    pub rocblas_fixed_by: Option<String>,
}

impl Routes {
    /// `f` is rocBLAS's library or Tensile directory.
    fn is_rocblas(f: &Finding) -> bool {
        f.name == "rocBLAS" || f.name.starts_with("librocblas.so")
    }

    /// What an ok row of `f` adds: by which transaction, for rocBLAS's.
    fn fixed(&self, f: &Finding) -> String {
        match (&self.rocblas_fixed_by, Routes::is_rocblas(f)) {
            (Some(by), true) => format!(", fixed by {by}"),
            _ => String::new(),
        }
    }
}

fn rows(findings: &[Finding], judged: &str, routes: &Routes, r: &mut CheckReport) {
    for f in findings {
        match f.kind {
            "miopen-db" => r.push(
                "miopen-db",
                Status::Ok,
                format!("{}: {}", f.path.display(), f.notes.join("; ")),
            ),
            "tensile" => tensile_row(f, judged, routes, r),
            _ => library_row(f, judged, routes, r),
        }
    }
}

fn library_row(f: &Finding, judged: &str, routes: &Routes, r: &mut CheckReport) {
    let notes = if f.notes.is_empty() {
        String::new()
    } else {
        format!("; {}", f.notes.join("; "))
    };
    // Counts, not lists, past a few targets (Debian's librocblas has
    // ten): the list goes under the row.
    let (said, under) = match f.targets.len() {
        0 => ("no target it names".to_owned(), String::new()),
        n if n <= 4 => (f.targets.join(", "), String::new()),
        n => (
            format!("{n} targets"),
            format!("\ntargets: {}", f.targets.join(", ")),
        ),
    };
    let notes = format!("{notes}{under}");
    let head = format!(
        "{} at {} has code for {said}",
        f.name,
        f.path.parent().unwrap_or(Path::new("")).display(),
    );
    match f.card_covered {
        // Where torch falls back without the library, that is information;
        // else whether its ops run on the card is not known: no pass.
        None if falls_back(f) => r.push(
            "library",
            Status::Skip,
            format!("{head}; whether {judged} is among them cannot be told{notes}"),
        ),
        None => r.push_breaks(
            "library",
            Blocking::NotChecked,
            format!("not checked: {head}; whether {judged} is among them cannot be told{notes}"),
            format!(
                "{}: whether it has code for the card cannot be told (see library)",
                f.name
            ),
            None,
        ),
        Some(true) => r.push(
            "library",
            Status::Ok,
            format!("{head}: {judged} among them{}{notes}", routes.fixed(f)),
        ),
        Some(false) => missing(
            "library",
            f,
            format!("{head}, none for {judged}"),
            &notes,
            routes,
            r,
        ),
    }
}

fn tensile_row(f: &Finding, judged: &str, routes: &Routes, r: &mut CheckReport) {
    let (lists, notes): (Vec<&String>, Vec<&String>) = f
        .notes
        .iter()
        .partition(|n| n.starts_with(gpucode::CATALOGUES_READ));
    let notes: Vec<&str> = notes.iter().map(|n| n.as_str()).collect();
    // What it means first, then the counts; the catalogues by name under
    // the row (whole in --detail and the JSON).
    let head = format!("{}'s Tensile directory {}", f.name, f.path.display());
    let notes = format!("\n{}", notes.join("; "));
    let under: String = lists.iter().map(|l| format!("\n{l}")).collect();
    match f.card_covered {
        Some(true) => r.push(
            "tensile",
            Status::Ok,
            format!(
                "{head} has kernels for {judged}{}{notes}{under}",
                routes.fixed(f)
            ),
        ),
        _ => missing(
            "tensile",
            f,
            format!("{head} has no kernels for {judged}"),
            &format!("{notes}{under}"),
            routes,
            r,
        ),
    }
}

/// Whether torch goes on without the library `f` read (hipBLASLt,
/// aotriton): then its missing code is a warning, never a failure.
fn falls_back(f: &Finding) -> bool {
    let lib = f.path.file_name().map(|n| n.to_string_lossy().into_owned());
    therock::project(lib.as_deref().unwrap_or(""))
        .is_some_and(|(project, _)| therock::torch_falls_back(project))
}

/// A library or Tensile directory with no code for the card: what fails,
/// FAIL or (where torch falls back) warn, and TheRock's torch where it
/// builds the library for gfx101x.
fn missing(
    name: &'static str,
    f: &Finding,
    head: String,
    notes: &str,
    routes: &Routes,
    r: &mut CheckReport,
) {
    let mut notes = notes.to_owned();
    let lib = f.path.file_name().map(|n| n.to_string_lossy().into_owned());
    let (project, ops) = therock::project(lib.as_deref().unwrap_or(""))
        .or_else(|| {
            let file = if f.name == "hipBLASLt" {
                "libhipblaslt.so"
            } else {
                "librocblas.so"
            };
            (name == "tensile")
                .then(|| therock::project(file))
                .flatten()
        })
        .unwrap_or((
            "",
            "the ops that call into it fail with `HIP error: invalid device function`",
        ));
    let status = if therock::torch_falls_back(project) {
        Status::Warn
    } else {
        Status::Fail
    };
    let card = &f.card;
    // The exact command for this card: TheRock names a device extra for
    // each RDNA1 target.
    let command = crate::plan::torch_line(&[match gpu::is_rdna1_arch(card) {
        true => card,
        false => "gfx1010",
    }]);
    let fix = if project.is_empty() {
        format!("a torch whose libraries are built for {card}: TheRock's: `{command}`")
    } else if therock::builds_for_gfx101x(project) {
        // Why TheRock's: under the row; the fix is the command.
        notes = format!(
            "{notes}\nTheRock builds {project} for gfx1010, gfx1011 and gfx1012 ({})",
            therock::SOURCE
        );
        let built = match gpu::is_rdna1_arch(card) {
            true => card.as_str(),
            false => "gfx101x",
        };
        format!("TheRock's torch has {project} for {built}: `{command}`")
    } else {
        format!(
            "TheRock builds no {project} for gfx101x either ({}): its torch goes the same way; nothing to install",
            therock::SOURCE
        )
    };
    // A torch its user built gets its rocBLAS built here.
    let fix = match (&routes.rocblas, Routes::is_rocblas(f)) {
        (Some(ours), true) => ours.clone(),
        _ => fix,
    };
    r.push_fix(name, status, format!("{head}: {ops}{notes}"), fix);
}

/// The rows for `t`, judged for the card the topology at `sysfs` shows
/// (or the override's), with the findings kept for the JSON.
pub(crate) fn check(
    t: &torch::Torch,
    gfx_override: Option<&str>,
    sysfs: &std::path::Path,
    r: &mut CheckReport,
) {
    check_with(t, gfx_override, sysfs, &Routes::default(), r);
}

/// [`check`], the rows told the routes doctor knows.
pub(crate) fn check_with(
    t: &torch::Torch,
    gfx_override: Option<&str>,
    sysfs: &std::path::Path,
    routes: &Routes,
    r: &mut CheckReport,
) {
    let cards: Vec<String> = gpu::scan_all(sysfs)
        .gpus
        .iter()
        .map(gpu::Gpu::gfx)
        .collect();
    let (target, judged) = judged_target(gfx_override, &cards);
    let findings = survey(t, &target, r);
    rows(&findings, &judged, routes, r);
    r.libraries = Some(findings);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(kind: &'static str, name: &str, file: &str, covered: Option<bool>) -> Finding {
        Finding {
            kind,
            name: name.to_owned(),
            path: Path::new("/site/torch/lib").join(file),
            targets: vec!["gfx1030".to_owned()],
            card: "gfx1010".to_owned(),
            card_covered: covered,
            notes: Vec::new(),
        }
    }

    /// The rows every finding makes, and how each counts in the answer:
    /// code missing where torch needs it fails, code missing where torch
    /// falls back (hipBLASLt) warns and fails nothing, code that cannot be
    /// read is not checked unless torch would fall back anyway.
    #[test]
    fn each_finding_counts_as_its_row_says() {
        let rocblas = |c| finding("library", "librocblas.so", "librocblas.so", c);
        let blaslt = |c| finding("library", "libhipblaslt.so", "libhipblaslt.so", c);
        let blaslt_dir = finding("tensile", "hipBLASLt", "hipblaslt/library", Some(false));
        let table: [(Finding, Status, bool); 7] = [
            (rocblas(Some(true)), Status::Ok, false),
            (rocblas(Some(false)), Status::Fail, true),
            (rocblas(None), Status::NotChecked, true),
            (blaslt(Some(false)), Status::Warn, false),
            (blaslt(None), Status::Skip, false),
            (blaslt_dir, Status::Warn, false),
            (
                finding("tensile", "rocBLAS", "rocblas/library", Some(false)),
                Status::Fail,
                true,
            ),
        ];
        for (f, status, blocks) in table {
            let mut r = CheckReport::default();
            rows(
                std::slice::from_ref(&f),
                "gfx1010 (the card's)",
                &Routes::default(),
                &mut r,
            );
            let what = format!("{} {:?}: {:?}", f.name, f.card_covered, r.checks);
            assert_eq!(r.checks[0].status, status, "{what}");
            let a = r.answer();
            assert_eq!((a.ok, a.exit == 1), (!blocks, blocks), "{what}");
            assert_eq!(a.verdict.contains("no problem found"), !blocks, "{what}");
        }
    }
}
