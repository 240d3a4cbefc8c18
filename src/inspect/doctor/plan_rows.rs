//! doctor's rows told the plan (`plan`): the route row holds its steps,
//! each failing row's fix line is its step, the first line its count and
//! first step, the JSON its steps. Nothing here decides what to do next:
//! the plan does; this says it in the rows.

use crate::inspect::checks::{Check, CheckReport, Status};
use crate::plan::{self, Facts, Kind, Miopen, MiopenRoute, Plan};

use super::DoctorRequest;

/// The plan for the stack doctor read, said in its rows.
pub(super) fn apply(req: &DoctorRequest, r: &mut CheckReport) {
    let facts = Facts::of(&req.stack, miopen(req, r));
    let p = plan::plan(&facts);
    if !p.steps.is_empty() {
        said(&p, &facts, r);
    }
    r.plan = Some(p);
}

/// The diagnosis as the kernels row has it (made once: the stack keeps
/// it).
fn miopen(req: &DoctorRequest, r: &CheckReport) -> Miopen {
    let Some(row) = row(r, "kernels") else {
        return Miopen::Unknown;
    };
    let Ok(t) = &req.stack.torch else {
        return Miopen::Unknown;
    };
    match row.status {
        Status::Ok => Miopen::Fine,
        Status::Fail => match req.stack.diagnosis(t, &t.target) {
            Ok(d) => Miopen::Fails {
                cards: d.targets.clone(),
                route: match d.standing() {
                    crate::diagnosis::Standing::Refused(e) => {
                        MiopenRoute::Refused(crate::error::help(&e).unwrap_or_default().to_owned())
                    }
                    _ => MiopenRoute::InPlace,
                },
            },
            Err(_) => Miopen::Unknown,
        },
        _ => Miopen::Unknown,
    }
}

fn row<'a>(r: &'a CheckReport, name: &str) -> Option<&'a Check> {
    r.checks.iter().find(|c| c.name == name)
}

fn row_mut<'a>(r: &'a mut CheckReport, name: &str) -> Option<&'a mut Check> {
    r.checks.iter_mut().find(|c| c.name == name)
}

fn said(p: &Plan, f: &Facts, r: &mut CheckReport) {
    route_row(p, r);
    if let Some(step) = p.first(Kind::Torch) {
        torch_rows(step, f, r);
    }
    if let Some(step) = p.first(Kind::Rocblas) {
        rocblas_rows(step, r);
    }
    // MIOpen's fix waits for the step before it: nothing is proven now for
    // a torch that step replaces, or an override that hides the chip.
    if let Some(step) = p.first(Kind::Miopen).filter(|s| s.after.is_some())
        && let Some(row) = row_mut(r, "kernels").filter(|c| c.status == Status::Fail)
    {
        row.status = Status::Warn;
        row.breaks = None;
        row.fix = Some(step.line());
    }
}

/// The route row: the plan, in order, where it is more than the MIOpen
/// fix the row already names.
fn route_row(p: &Plan, r: &mut CheckReport) {
    let first = &p.steps[0];
    let replaced = first.replaces_torch();
    if let Some(route) = row_mut(r, "route") {
        if (replaced || first.kind == Kind::Override)
            && (route.detail.contains("install --into-torch")
                || route.detail.starts_with("nothing to do")
                || (first.kind == Kind::Override && route.detail.starts_with("torch first")))
        {
            route.status = if replaced { Status::Skip } else { Status::Warn };
            route.detail = format!("{} first: {}", first.short(), first.fixes);
        }
        if p.steps.len() > 1 || first.kind != Kind::Miopen {
            route.detail = format!("{}\n{}", route.detail, p.lines().join("\n"));
        }
    }
}

/// torch's own code: the torch step, naming every card.
fn torch_rows(step: &plan::Step, f: &Facts, r: &mut CheckReport) {
    if let Some(row) = row_mut(r, "torch-gpu").filter(|c| c.status == Status::Fail) {
        row.fix = Some(step.fix());
        if let Some(b) = &mut row.breaks
            && let Some((head, _)) = b.split_once("; ")
        {
            *b = format!("{head}; {} first (see torch-gpu)", step.short());
        }
    }
    // Under the override, torch runs on what ROCm reports; the real
    // card needs its own torch, never "unset" alone.
    if let (Some((v, target)), Some(row)) = (&f.overridden, row_mut(r, "override"))
        && row.cause.is_none()
        && row.status != Status::Fail
    {
        row.status = Status::Warn;
        row.detail = format!(
            "HSA_OVERRIDE_GFX_VERSION={v} (ROCm reports {target}, the card is {}): {}",
            plan::and(&f.cards),
            step.fixes
        );
        row.fix = Some(step.fix());
    }
}

/// rocBLAS: what breaks (every matmul), and its step.
fn rocblas_rows(step: &plan::Step, r: &mut CheckReport) {
    let rocblas = |c: &Check| {
        c.status == Status::Fail
            && (c.detail.starts_with("librocblas.so") || c.detail.starts_with("rocBLAS"))
    };
    for c in r.checks.iter_mut().filter(|c| rocblas(c)) {
        c.fix = Some(step.fix());
    }
    // The library's row says it, else its Tensile directory's.
    let first = r
        .checks
        .iter()
        .position(|c| c.name == "library" && rocblas(c))
        .or_else(|| {
            r.checks
                .iter()
                .position(|c| c.name == "tensile" && rocblas(c))
        });
    if let Some(i) = first {
        let row = &mut r.checks[i];
        row.breaks = Some(format!(
            "{}: rocBLAS has no code for {}; {} (see {})",
            step.fixes
                .replacen("every matmul on", "every matmul fails on", 1),
            plan::and(&step.cards),
            step.short(),
            row.name
        ));
    }
    // The Tensile directory's row, when the library's says it: its
    // kernels, in a few words (its counts stay under it).
    if first.is_some()
        && let Some(t) = r
            .checks
            .iter_mut()
            .find(|c| c.name == "tensile" && rocblas(c) && c.breaks.is_none())
    {
        t.breaks = Some(format!(
            "rocBLAS's Tensile kernels: none for {} (see tensile)",
            plan::and(&step.cards)
        ));
    }
}
