//! doctor's GPU side: the cards the kernel driver reports, the torch
//! python runs and the code it carries, and the route for it.

use super::*;
use crate::diagnosis::Standing;
use crate::inspect::checks::Blocking;

/// Which rows doctor shows beyond the torch's: the route's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// No ROCm torch: a torch first, then a route for it.
    TorchFirst,
    /// torch's own MIOpen fixed in place: no build.
    InPlace,
    /// A build (or a pull) is the way.
    Build,
    /// Nothing to do: every fix is inert for this torch.
    Inert,
}

/// What the torch side found: the route, and whether torch carries
/// gfx101x code (`None` when that cannot be told).
pub(super) struct TorchSide {
    pub route: Route,
    pub gfx101x: Option<bool>,
}

/// The torch found (`req.stack`, the command's one look) and its route:
/// no ROCm torch is a torch problem, said first with the torch for the
/// card; then whether it carries gfx101x code, by its libtorch_hip.so's
/// code objects, else by its layout (`route::chip`), as the route row says.
pub(super) fn torch_checks(req: &DoctorRequest, r: &mut CheckReport) -> TorchSide {
    let t = match &req.stack.torch {
        Ok(t) => t,
        Err(e) => {
            r.push_error("torch", Status::Fail, e);
            r.push(
                "route",
                Status::Skip,
                "a torch first: the route (the in-place fix, a build, or nothing to do) is chosen for the torch it is to fix",
            );
            return TorchSide {
                route: Route::TorchFirst,
                gfx101x: None,
            };
        }
    };
    if crate::version::major_minor(t.rocm()) == req.profile.rocm.torch_hip {
        r.push(
            "torch",
            Status::Ok,
            // What matters first: which torch, where, found by which
            // python; its layout last, which the other rows say again.
            format!(
                "{} ({}) at {}{}; {}",
                t.version,
                t.rocm_label(),
                t.dir.display(),
                asked(req),
                crate::inspect::verify::layout_detail(t),
            ),
        );
    } else {
        r.push_fix(
            "torch",
            Status::Warn,
            format!(
                "{} ({}) at {}{}, but profile {} is for torch built with ROCm {}; {}",
                t.version,
                t.rocm_label(),
                t.dir.display(),
                asked(req),
                req.profile.name,
                req.profile.rocm.torch_hip,
                crate::inspect::verify::layout_detail(t),
            ),
            "use the profile for torch's ROCm, or the torch for the profile's",
        );
    }
    if let Some(sys) = t.system() {
        system_route(t, sys, r);
    }
    // Whether a fix of ours is what torch holds: asked by the route and
    // the kernels rows, the library read for it once.
    let fixed = std::cell::OnceCell::new();
    let fixed = || fixed.get_or_init(|| fixed_by(req, t)).clone();
    let route = route(req, t, r, &fixed);
    if route == Route::InPlace {
        kernels(req, t, r, &fixed);
    }
    if let (torch::Layout::RocmSdk(_), torch::Locator::Python(python), true) = (
        &t.layout,
        &req.stack.locator,
        req.all || route == Route::Build,
    ) {
        devel_sdk(python, r);
    }
    use crate::swap::route::Chip;
    let gfx101x = match (torch_code(t, r), crate::swap::route::chip(t)) {
        (Some(code), _) => Some(code.has_gfx101x()),
        (None, Chip::Native(_)) => Some(true),
        (None, Chip::Override(_)) => Some(false),
        (None, Chip::Unknown(_) | Chip::NoCodeFor { .. }) => None,
    };
    TorchSide { route, gfx101x }
}

/// The python that found torch, and why that one: run from pipx's or uv's
/// environment, the tool passes its own python over.
fn asked(req: &DoctorRequest) -> String {
    req.python
        .as_ref()
        .map_or_else(String::new, |p| format!(", found by {p}"))
}

/// The system route: torch loads the system's MIOpen (or our copy of it),
/// which is only ever read.
fn system_route(t: &torch::Torch, sys: &torch::System, r: &mut CheckReport) {
    let owner = crate::torch::system::describe_owner(&sys.owner, &sys.library);
    let detail = match &sys.copy {
        Some(copy) => format!(
            "system route: torch loads rdna1-patch's fixed copy {}, made from the system's {} ({owner}); `rdna1-patch status` says whether that file changed since",
            copy.display(),
            sys.library.display()
        ),
        None => format!(
            "system route: torch {} loads the system's {} ({owner}); `install --into-torch` adds a fixed copy as {} and never edits the system's file: {}",
            t.version,
            sys.library.display(),
            t.library.display(),
            sys.how()
        ),
    };
    r.push("system", Status::Ok, detail);
}

/// On the rocm-sdk layout the build wants that environment's devel SDK:
/// `python -m rocm_sdk path --root` names it (and expands it on first use).
fn devel_sdk(python: &Path, r: &mut CheckReport) {
    let asked = crate::proc::python(python).and_then(|mut cmd| {
        cmd.args(["-m", "rocm_sdk", "path", "--root"]);
        crate::proc::helper(cmd)
    });
    match asked {
        Ok(out) if out.status.success() => r.push(
            "rocm-sdk",
            Status::Ok,
            format!("devel SDK at {}: build with --rocm {0}", out.stdout.trim()),
        ),
        Ok(out) => r.push_fix(
            "rocm-sdk",
            Status::Warn,
            format!(
                "{} -m rocm_sdk path --root failed: {}",
                python.display(),
                out.stderr.lines().last().unwrap_or("").trim()
            ),
            "install the devel SDK into the same environment: pip install \"rocm[devel]\"",
        ),
        Err(e) => r.push("rocm-sdk", Status::Warn, format!("{e:#}")),
    }
}

/// The torch-gpu row for code torch has: ok when it runs on every card,
/// else a failure naming the cards and the plan's one next step.
fn judge_torch_code(lib: &std::path::Path, c: &gpucode::Code, r: &mut CheckReport) {
    use crate::swap::route;
    let notes = gpucode::library_notes(c);
    let has = format!(
        "{} has code for {}",
        lib.display(),
        c.all_targets().join(", ")
    );
    let notes: String = notes.iter().map(|n| format!("; {n}")).collect();
    let missing = route::cards_without_code(c);
    if missing.is_empty() {
        let gfx101x = if c.has_gfx101x() { "" } else { " (no gfx101x)" };
        r.push("torch-gpu", Status::Ok, format!("{has}{gfx101x}{notes}"));
        return;
    }
    let said = route::missing_said(&missing);
    let (breaks, fix) = crate::plan::no_code_row(c, &missing, &said);
    r.push_breaks(
        "torch-gpu",
        Blocking::Fail,
        format!("{has} and none for {said}: torch runs nothing on that card{notes}"),
        breaks,
        Some(fix),
    );
}

/// A torch-gpu row that could not read torch's code: where the route is
/// chosen from that reading (a bundled or system torch), whether torch
/// runs on the card is not known, which is no pass; a rocm-sdk torch's
/// family says it instead, and the row is information.
fn unread(t: &torch::Torch, detail: String, r: &mut CheckReport) {
    match t.layout {
        torch::Layout::RocmSdk(_) => r.push("torch-gpu", Status::Skip, detail),
        torch::Layout::Bundled | torch::Layout::System(_) => r.push_breaks(
            "torch-gpu",
            Blocking::NotChecked,
            format!("not checked: {detail}, so whether torch runs on the card is not known"),
            "whether torch has code for the card: its libtorch_hip.so's GPU code could not be read (see torch-gpu)",
            None,
        ),
    }
}

/// Which GPUs torch's own GPU code is for: the offload bundles of
/// torch/lib/libtorch_hip.so, read as every library is (compressed ones
/// too). `None` when that cannot be told.
fn torch_code(t: &torch::Torch, r: &mut CheckReport) -> Option<gpucode::Code> {
    let lib = t.dir.join("lib/libtorch_hip.so");
    match t.gpu_code() {
        Ok(Some(c)) if !c.all_targets().is_empty() => {
            judge_torch_code(&lib, c, r);
            Some(c.clone())
        }
        Ok(Some(c)) if c.compressed > 0 => {
            unread(
                t,
                format!(
                    "{} holds {} compressed offload bundle(s) whose entry IDs could not be read",
                    lib.display(),
                    c.compressed
                ),
                r,
            );
            None
        }
        Ok(Some(c)) if c.code_objects > 0 => {
            unread(
                t,
                format!(
                    "{} has {} bundle entries for a GPU, none an AMD GPU code object: {}",
                    lib.display(),
                    c.code_objects,
                    c.mislabelled.join(", ")
                ),
                r,
            );
            None
        }
        Ok(_) => {
            unread(
                t,
                format!(
                    "{} carries no GPU code objects (.hip_fatbin)",
                    lib.display()
                ),
                r,
            );
            None
        }
        // torch's own library, there but unreadable: torch is damaged (a
        // download or copy cut short), whatever the route.
        Err(e) if lib.is_file() => {
            r.push_fix(
                "torch-gpu",
                Status::Fail,
                format!("torch is damaged: {e}"),
                torch::REINSTALL,
            );
            None
        }
        Err(e) => {
            unread(t, e.to_owned(), r);
            None
        }
    }
}

pub(super) fn gpus(req: &DoctorRequest, r: &mut CheckReport) -> Vec<String> {
    let scan = gpu::scan_all(&req.stack.sysfs);
    for p in &scan.problems {
        r.push_fix(
            "gpu",
            Status::Warn,
            format!("a KFD topology node was skipped: {p}"),
            "in a container, pass the GPU's /dev/dri/renderD* and /dev/kfd through; otherwise report this with the file attached",
        );
    }
    let all = scan.gpus;
    if all.is_empty() {
        r.push_fix(
            "gpu",
            Status::Warn,
            format!(
                "no GPU visible: the KFD topology ({}) shows none, as in a container without /dev/kfd or with no amdgpu driver; batch norm is judged for every RDNA1 target",
                gpu::topology(&req.stack.sysfs).display()
            ),
            "in a container, pass /dev/kfd and /dev/dri through; on the GPU machine, check `lsmod | grep amdgpu` and that your user is in the render and video groups",
        );
    }
    for g in &all {
        let what = format!(
            "{} {} at {} (node {}, gfx_target_version {})",
            g.gfx(),
            g.model(),
            g.pci,
            g.node,
            g.gfx_target_version
        );
        if g.is_rdna1() {
            r.push(
                "gpu",
                Status::Ok,
                format!("{what}: RDNA1, what this tool is for"),
            );
        } else {
            r.push(
                "gpu",
                Status::Warn,
                format!("{what}: not RDNA1 (gfx1010/1011/1012); the patches only change behaviour on RDNA1"),
            );
        }
    }
    let params = gpu::amdgpu_params(&req.stack.sysfs);
    if params.iter().all(|(_, v)| v.is_none()) {
        r.push(
            "amdgpu",
            Status::Skip,
            "module parameters not readable (amdgpu not loaded)",
        );
    } else {
        let shown: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("?")))
            .collect();
        r.push("amdgpu", Status::Ok, shown.join(" "));
    }
    all.iter().map(gpu::Gpu::gfx).collect()
}

/// The override row. Where it says torch's operators will not load (no
/// gfx101x code and no override; or an override that makes ROCm look for
/// code torch has not), it is a failure: under torch-gpu's when that row
/// fails for it, else its own (no GPU visible: judged for every RDNA1
/// card). A machine with no RDNA1 card needs no override.
pub(super) fn gfx_override(
    req: &DoctorRequest,
    cards: &[String],
    gfx101x: Option<bool>,
    r: &mut CheckReport,
) {
    let value = req.gfx_override.as_deref();
    if value.is_none() && !cards.is_empty() && !cards.iter().any(|c| gpu::is_rdna1_arch(c)) {
        return r.push(
            "override",
            Status::Ok,
            "HSA_OVERRIDE_GFX_VERSION is not set (no RDNA1 card here needs it)",
        );
    }
    let a = advice::override_for(gfx101x, value, cards, true);
    let torch_gpu_fails = r
        .checks
        .iter()
        .any(|c| c.name == "torch-gpu" && c.status == Status::Fail);
    let fails = match (value, gfx101x) {
        (None, Some(false)) => true,
        (Some(_), Some(true)) => torch_gpu_fails,
        _ => false,
    };
    let status = if a.fine { Status::Ok } else { Status::Warn };
    match (fails, a.fix) {
        // One cause, one fix: torch-gpu's.
        (true, _) if torch_gpu_fails => {
            r.push("override", Status::Fail, a.detail);
            r.follows_from("torch-gpu", &["override"]);
        }
        (true, fix) => r.push_breaks(
            "override",
            Blocking::Fail,
            a.detail,
            "everything on an RDNA1 card: torch has no gfx101x code and HSA_OVERRIDE_GFX_VERSION is not set (see override)",
            fix,
        ),
        (false, Some(fix)) => r.push_fix("override", status, a.detail, fix),
        (false, None) => r.push("override", status, a.detail),
    }
}

/// The batch-norm kernels of the MIOpen torch loads, judged by compiling
/// them for this machine's card through the comgr beside it. A failure the
/// in-place fix removes is a failure until it is fixed; a compile check
/// that cannot run is "not checked", never a pass.
fn kernels(
    req: &DoctorRequest,
    t: &torch::Torch,
    r: &mut CheckReport,
    fixed: &dyn Fn() -> Option<String>,
) {
    let d = match req.stack.diagnosis(t, &t.target) {
        Ok(d) => d,
        Err(e) => {
            return r.push_breaks(
                "kernels",
                Blocking::NotChecked,
                format!("not checked: {}", crate::error::chain(&e)),
                "batch norm: its kernels could not be compiled to judge them (see kernels)",
                crate::error::help(&e).map(str::to_owned),
            );
        }
    };
    let detail = || format!("{}\n{}", d.summary(), d.lines().join("\n"));
    let failing = || d.failing();
    match d.standing() {
        Standing::NoCompiler => r.push_breaks(
            "kernels",
            Blocking::NotChecked,
            "not checked: no compiler library (libamd_comgr.so*) beside torch's MIOpen, so whether its batch norm fails cannot be told",
            "batch norm: no comgr beside torch's MIOpen to judge its kernels",
            Some("torch bundles comgr with its MIOpen; reinstall torch if it is missing".into()),
        ),
        Standing::NothingToFix(line) => match fixed() {
            Some(by) => r.push(
                "kernels",
                Status::Ok,
                format!("fixed by {by}: {}\nnothing {line}", detail()),
            ),
            None => r.push(
                "kernels",
                Status::Ok,
                format!("{}\nnothing {line}", detail()),
            ),
        },
        Standing::Fixable => {
            let (breaks, fix) = crate::plan::miopen_breaks(failing(), &d.targets, false);
            r.push_breaks("kernels", Blocking::Fail, detail(), breaks, Some(fix));
        }
        Standing::Refused(e) => r.push_breaks(
            "kernels",
            Blocking::Fail,
            crate::error::chain(&e),
            format!(
                "batch-norm training: {} for {}, and not where the in-place fix reaches (see kernels)",
                crate::output::count(failing(), "kernel fails", "kernels fail"),
                d.said_targets()
            ),
            crate::error::help(&e).map(str::to_owned),
        ),
    }
}

/// The transaction whose fixed library torch holds now ("transaction 1
/// of 2026-11-28T06:51:01Z"), if one does: read from install's journals.
fn fixed_by(req: &DoctorRequest, t: &torch::Torch) -> Option<String> {
    let journals = req.state.as_ref()?.read().ok()?;
    let installed = |j: &&crate::swap::txn::Journal| {
        j.state == crate::swap::txn::State::Installed && j.torch.target == t.target
    };
    // The library is read for its MD5 only when a fix of it was installed:
    // the route row asks too, and a cold doctor reads it once.
    journals.list.iter().rev().find(installed)?;
    let md5 = crate::checksum::md5_file(&t.target).ok()?;
    journals
        .list
        .iter()
        .rev()
        .filter(installed)
        .find(|j| j.new.md5 == md5)
        .map(|j| format!("transaction {} of {}", j.id, j.created))
}

/// On the in-place route no ROCm SDK is needed: what a build would need
/// is shown, never failed.
pub(super) fn needs_no_sdk(r: &mut CheckReport) {
    for c in &mut r.checks {
        if matches!(c.name, "rocm" | "compiler" | "hipcc" | "compat" | "disk")
            && c.status == Status::Fail
        {
            c.status = Status::Skip;
            c.detail = format!(
                "{} (not needed: the route for this torch fixes its own MIOpen in place, with no build)",
                c.detail
            );
            c.cause = None;
        }
    }
}

/// The route for this torch, as build and install take it (`select::plan`).
fn route(
    req: &DoctorRequest,
    t: &torch::Torch,
    r: &mut CheckReport,
    fixed: &dyn Fn() -> Option<String>,
) -> Route {
    // GPUs, none of them RDNA1 (an RX 6800): nothing to fix, and nothing
    // proposed for a gfx1010 that is not here, unless --target asks.
    let scan = gpu::scan_all(&req.stack.sysfs);
    if !scan.gpus.is_empty() && scan.rdna1_targets().is_empty() && req.stack.asked.is_empty() {
        let cards: Vec<String> = scan.gpus.iter().map(gpu::Gpu::gfx).collect();
        r.push(
            "route",
            Status::Ok,
            format!(
                "nothing to do: no RDNA1 card in this machine ({}), so nothing for this tool to fix on it (--target gfx1010 judges for one)",
                cards.join(", ")
            ),
        );
        return Route::Inert;
    }
    let plan = crate::select::plan(&req.profile, t);
    let route = match &plan {
        crate::select::Plan::InPlace(_) => Route::InPlace,
        crate::select::Plan::Build(_) => Route::Build,
        crate::select::Plan::Inert(_) => Route::Inert,
        crate::select::Plan::TorchFirst(_) => Route::TorchFirst,
    };
    match plan {
        // torch-gpu is the failure, with the torch for the card as its fix.
        crate::select::Plan::TorchFirst(why) => r.push("route", Status::Skip, why),
        // Nothing fails that the fix would mend: information, no fix line.
        crate::select::Plan::Inert(why) => r.push(
            "route",
            Status::Ok,
            format!(
                "nothing to do: under HSA_OVERRIDE_GFX_VERSION=10.3.0 MIOpen compiles for gfx1030, where batch norm works and the fix changes nothing\n{why}\na torch with gfx101x code (TheRock's torch[device-{}]) needs no override; with it, the fix acts",
                crate::diagnosis::target(&req.stack.sysfs)
            ),
        ),
        // The real chip is what MIOpen sees once the override is gone; the
        // override row says to unset it.
        other => match (&req.gfx_override, crate::swap::route::chip(t)) {
            (Some(v), crate::swap::route::Chip::Native(_)) => r.push(
                "route",
                Status::Warn,
                format!(
                    "{} (once HSA_OVERRIDE_GFX_VERSION is unset: while it is {v}, MIOpen sees {} instead; see override)",
                    other.detail(),
                    gpu::override_gfx(v).unwrap_or_else(|| "another chip".into())
                ),
            ),
            // After the fix, the present: fixed, and by which transaction.
            (_, crate::swap::route::Chip::Native(what)) if route == Route::InPlace => match fixed() {
                Some(by) => r.push(
                    "route",
                    Status::Ok,
                    format!(
                        "fixed in place by {by}: MIOpen sees the real chip ({what})"
                    ),
                ),
                None => r.push("route", Status::Ok, other.detail()),
            },
            _ => r.push("route", Status::Ok, other.detail()),
        },
    }
    route
}
