//! `install --into-torch`: check the build and the torch before touching
//! anything, fit the library to torch's bundled runtimes, then swap it in
//! through a journaled transaction.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::checksum;
use crate::elf;
use crate::error::hint;
use crate::fsutil;
use crate::prefix::Provenance;
use crate::swap::checked_build::{Build, check_build, check_versions};
use crate::swap::relink::{self, Relink};
use crate::swap::route::{self, Choice};
use crate::swap::txn::{self, BuildRec, StateDir, Swap, SwapOutcome};
use crate::torch::{self, Torch};
use crate::ui::Ui;

pub struct InstallRequest {
    pub prefix: PathBuf,
    /// The user's stack, established once by the command (with a torch
    /// found) and handed down: every step reads this one.
    pub stack: crate::stack::Stack,
    pub state: StateDir,
    /// Install over a ROCm major.minor mismatch.
    pub force: bool,
    /// Rewrite NEEDED/RUNPATH for torch's bundled libraries.
    pub relink: bool,
    pub jobs: usize,
    /// The profile the prefix is for (the in-place route records it).
    pub profile: Option<crate::builder::profile::Profile>,
    /// The route the user forced (`--in-place`, `--built`), if any.
    pub route: Option<Choice>,
    /// Say the route and why, change nothing.
    pub dry_run: bool,
    /// Install an in-place fix with no compiler to prove it.
    pub unproven: bool,
}

pub fn run(req: &InstallRequest, ui: &Ui) -> Result<()> {
    // One lock from the in-place route's fix to the swap: what it derives
    // is what goes in, with no other run's prefix in between. Taken where
    // something is about to be written, so a refusal before leaves no
    // state dir behind.
    let mut locked = None;
    let Some((build, target_known)) = prepare(req, &mut locked, ui)? else {
        return Ok(());
    };
    let torch = req.stack.found()?;
    announce(&build, torch, ui);
    // A library fixed in place is torch's own: its ROCm is torch's.
    if build.provenance.in_place.is_none() {
        check_versions(&build, torch, req.force, ui)?;
    }
    warn_about_override(torch, ui);
    if let Some(targets) = build.provenance.cmake.defines.get("GPU_TARGETS")
        && let Some((detail, fix)) = crate::gpu::targets_warning(targets, &req.stack.sysfs)
    {
        ui.warn(format!("{detail}; {fix}"));
    }

    let locked = match locked {
        Some(l) => l,
        None => req.state.lock()?,
    };
    settle(&locked, torch, ui)?;
    if torch.system().is_some() {
        let fix = crate::swap::into_system::Fix {
            rec: build_rec(&build, String::new()),
            library: &build.library,
            source_sha256: build
                .provenance
                .in_place
                .as_ref()
                .map(|p| p.source_sha256.as_str()),
        };
        return crate::swap::into_system::install(
            &req.stack.locator,
            &locked,
            fix,
            torch.clone(),
            ui,
        );
    }
    let _torch_lock = locked.lock_target(&torch.target)?;
    let name = torch
        .target
        .file_name()
        .context("torch's library has no file name")?
        .to_string_lossy();
    let staging = locked.state.staged_path(&name);
    let relink = match stage(req, &locked, &build, torch, &staging, ui) {
        Ok(r) => r,
        Err(e) => {
            let _ = fsutil::remove_own_file(&staging);
            return Err(txn::out_of_space(
                e,
                locked.state.root(),
                "torch was not changed",
            ));
        }
    };
    let (staged, staged_md5) = source_of(&build, relink.as_ref(), &staging);
    let staged_written = relink.is_none().then_some(build.written.as_ref()).flatten();
    let check = |temp: &Path| crate::swap::links::check_links(temp, torch, relink.as_ref(), ui);
    let swap = Swap {
        torch,
        build: build_rec(
            &build,
            relink.as_ref().map(Relink::describe).unwrap_or_default(),
        ),
        staged,
        staged_md5,
        staged_written,
        check: &check,
        derived_from: build
            .provenance
            .in_place
            .as_ref()
            .map(|p| p.source_sha256.as_str()),
        target_known: target_known.as_ref(),
    };
    let outcome = txn::swap(&locked, &swap);
    let _ = fsutil::remove_own_file(&staging);
    report(&outcome?, torch, &req.stack.locator, ui);
    Ok(())
}

fn build_rec(build: &Build, relink: String) -> BuildRec {
    BuildRec {
        prefix: build.prefix.clone(),
        library: build.library.clone(),
        profile: build.provenance.profile.clone(),
        rocm: build.rocm().to_owned(),
        commit: build.provenance.source.commit.clone(),
        build_id: build.elf.build_id.clone(),
        relink,
    }
}

/// Say what goes where: the build, and the torch it goes into.
fn announce(build: &Build, torch: &Torch, ui: &Ui) {
    ui.stage(
        "Build",
        format!(
            "{} ({} {} at {}, ROCm {}), MD5SUMS ok",
            build.library.display(),
            build.provenance.source.tag,
            crate::builder::git::short(&build.provenance.source.commit),
            build.provenance.profile,
            build.rocm()
        ),
    );
    ui.stage(
        "Torch",
        format!(
            "{} {} ({}), {}",
            torch.dir.display(),
            torch.version,
            torch.rocm_label(),
            describe_target(torch)
        ),
    );
    if let torch::Layout::RocmSdk(sdk) = &torch.layout {
        ui.note(format!(
            "MIOpen is in the rocm-sdk package {} (found by {}), which every program in this environment that uses rocm_sdk shares",
            sdk.package.display(),
            sdk.found_by
        ));
    }
}

/// The build to install: the prefix's, after the in-place route made it
/// when that is the route, with what that route read of torch's library.
/// None: a dry run, which has said what it would do.
fn prepare<'a>(
    req: &'a InstallRequest,
    locked: &mut Option<txn::Locked<'a>>,
    ui: &Ui,
) -> Result<Option<(Build, Option<checksum::Known>)>> {
    match in_place(req, locked, ui)? {
        InPlace::NotTaken => {}
        InPlace::Done => return Ok(None),
        InPlace::Made(build, known) => return Ok(Some((*build, known))),
    }
    let build = check_build(&req.prefix, req.jobs)?;
    // What the real run refuses first, the dry run refuses too: a python
    // with no torch has nothing to install into, and a fix made from
    // another library is not this torch's.
    let torch = req.stack.found()?;
    crate::swap::source::check(&build.prefix, &build.provenance, torch, &req.state)?;
    if req.dry_run {
        // A library fixed in place is torch's own: its ROCm is torch's.
        if build.provenance.in_place.is_none() {
            check_versions(&build, torch, req.force, ui)?;
        }
        crate::swap::dry_run::check(&req.state, torch, None)?;
        // Why this route: the prefix holds a build (not an in-place fix)
        // for torch's ROCm line, which `check_versions` has just checked.
        let why = format!(
            ", as the prefix holds a build of profile {} for ROCm {}, torch's line",
            build.provenance.profile,
            crate::version::major_minor(&build.provenance.rocm.version)
        );
        ui.answer(
            "Route",
            format!(
                "would install the build in {} into torch {} at {}{why} (dry run: nothing was changed)",
                req.prefix.display(),
                torch.version,
                torch.dir.display()
            ),
        );
        return Ok(None);
    }
    Ok(Some((build, None)))
}

/// The file the swap copies into torch, and its MD5 when known. A library
/// installed as it is goes from the prefix itself, with the MD5 its check
/// found; the swap proves the copy in torch against it.
fn source_of<'a>(
    build: &'a Build,
    relink: Option<&Relink>,
    staging: &'a Path,
) -> (&'a Path, Option<&'a str>) {
    match relink {
        Some(_) => (staging, None),
        None => (&build.library, Some(&build.md5)),
    }
}

/// Whether the in-place route was taken, what it made, and what it read.
enum InPlace {
    NotTaken,
    /// A dry run, or nothing to fix: said, and nothing written.
    Done,
    Made(Box<Build>, Option<checksum::Known>),
}

/// The in-place route, when it is the one (`route::choose`): torch's own
/// library (the original, even over an install of ours) fixed into the
/// prefix, then swapped in as a build is. A prefix made in place before is
/// made again: torch may have been upgraded since, and it costs seconds.
fn in_place<'a>(
    req: &'a InstallRequest,
    locked: &mut Option<txn::Locked<'a>>,
    ui: &Ui,
) -> Result<InPlace> {
    let Some(profile) = &req.profile else {
        return Ok(InPlace::NotTaken);
    };
    if req.route == Some(Choice::Built) {
        return Ok(InPlace::NotTaken);
    }
    let built = Provenance::read(&req.prefix).is_ok_and(|p| p.in_place.is_none());
    if built && req.route.is_none() {
        return Ok(InPlace::NotTaken);
    }
    let torch = req.stack.found()?;
    let route = route::choose(req.route, built, &req.prefix, torch, profile)?;
    if route.choice != Choice::InPlace {
        return Ok(InPlace::NotTaken);
    }
    route::check_in_place_prefix(&req.prefix, torch, profile)?;
    // Another user's torch is refused before its comgr is even looked at.
    ensure_may_change(torch)?;
    ui.stage("Route", &route.why);
    // What fails is established from the library itself before anything
    // is decided; the fix is made and proven in memory, dry run or not.
    // The system route's source is the system's library, only ever read.
    let source = match torch.system() {
        Some(s) => s.library.clone(),
        None => txn::original_of(&req.state.read()?, &torch.target),
    };
    // The fixed library loads what torch's own does: what cannot be found
    // for it is said before anything is fixed or written.
    crate::swap::links::needs_found(&source, torch)?;
    let diagnosis = req.stack.diagnosis(torch, &source)?;
    let Some(planned) = diagnosis.plan_fix(req.unproven, ui)? else {
        return Ok(InPlace::Done);
    };
    if req.dry_run {
        crate::swap::dry_run::check(&req.state, torch, Some(&req.prefix))?;
        ui.answer(
            "Route",
            format!(
                "would fix {} in place into {} ({}), then swap it in (dry run: nothing was changed)",
                torch.target.display(),
                req.prefix.display(),
                planned.proof
            ),
        );
        return Ok(InPlace::Done);
    }
    let locked = locked.insert(req.state.lock()?);
    settle(locked, torch, ui)?;
    if torch.system().is_none() && txn::original_of(&locked.journals()?, &torch.target) != source {
        return Err(hint(
            format!(
                "another run changed {} while this one was fixing it; nothing was changed",
                torch.target.display()
            ),
            "run this again",
        ));
    }
    let derived = crate::inplace::derive(
        &crate::inplace::Request {
            library: source.clone(),
            prefix: req.prefix.clone(),
            profile,
            rocm: torch.rocm().to_owned(),
            jobs: req.jobs,
        },
        planned,
        ui,
    )?;
    // A test's pause between the fix and the swap (cargo feature failpoints).
    #[cfg(feature = "failpoints")]
    let _ = fail::eval("in-place-derived", |_| -> () { std::process::abort() });
    let summary = derived.summary();
    ui.stage("Prefix", format!("{}: {summary}", req.prefix.display()));
    // The library was hashed as it was written and parsed from the same
    // bytes: the prefix need not be read again before the swap.
    let known = (source == torch.target).then_some(derived.source);
    Ok(InPlace::Made(
        Box::new(Build {
            prefix: req.prefix.clone(),
            provenance: Provenance::read(&req.prefix)?,
            library: derived.library,
            md5: derived.md5,
            elf: derived.elf,
            written: Some(derived.written),
        }),
        known,
    ))
}

/// What HSA_OVERRIDE_GFX_VERSION must be with this torch, when its GPU code says.
pub(crate) fn warn_about_override(torch: &Torch, ui: &Ui) {
    if let Ok(Some(code)) = torch.gpu_code()
        && !code.all_targets().is_empty()
    {
        let value = std::env::var("HSA_OVERRIDE_GFX_VERSION").ok();
        let a = crate::plan::advice::override_advice(Some(code), value.as_deref(), &[]);
        if !a.fine {
            ui.warn(format!("{}; {}", a.detail, a.fix.unwrap_or_default()));
        }
    }
}

/// What refuses a torch before anything is written: one another user
/// controls (its library, or any file of the package, run as root), or
/// one whose path is not UTF-8, which its journal could not record.
pub(crate) fn ensure_may_change(torch: &Torch) -> Result<()> {
    txn::ensure_root_may_change(torch.system().map_or(&torch.target, |s| &s.hip))?;
    crate::owner::ensure_root_may_trust_torch(&torch.dir)?;
    ensure_text_path(torch)
}

/// A torch whose path is not UTF-8 is refused before anything is written:
/// the journal that makes a change reversible records its paths as text.
fn ensure_text_path(torch: &Torch) -> Result<()> {
    if [&torch.dir, &torch.target]
        .iter()
        .all(|p| p.to_str().is_some())
    {
        return Ok(());
    }
    Err(crate::error::hint(
        format!(
            "torch's path {} is not UTF-8; rdna1-patch records the paths it changes as text, so it does not change this torch; nothing was changed",
            torch.dir.to_string_lossy()
        ),
        "move the environment to a path whose name is UTF-8 (`mv` it, or make the venv again there), then run this again",
    ))
}

/// Settle what killed runs left; refuse a torch whose transaction is open.
pub(crate) fn settle(locked: &txn::Locked, torch: &Torch, ui: &Ui) -> Result<()> {
    ensure_may_change(torch)?;
    let recovery = txn::recover(locked)?;
    for note in &recovery.notes {
        ui.stage("Recovered", note);
    }
    recovery.check_target(crate::swap::into_system::settled_target(torch))?;
    for (j, what) in &recovery.unsettled {
        ui.warn(format!(
            "transaction {} on {} is left open: that file is {what}, which no transaction wrote (`{}` closes it)",
            j.id,
            j.torch.target.display(),
            crate::shell::tool(["rollback", "--abandon", &j.id.to_string()])
        ));
    }
    Ok(())
}

/// Copy the build into the staging dir and fit it to torch, unless it goes
/// in as it is (fixed in place, rocm-sdk, --no-relink); the relink made.
fn stage(
    req: &InstallRequest,
    locked: &txn::Locked,
    build: &Build,
    torch: &Torch,
    staged: &Path,
    ui: &Ui,
) -> Result<Option<Relink>> {
    if build.provenance.in_place.is_some() {
        ui.note("fixed in place: torch's own library, installed as it is (no relink)");
        return Ok(None);
    }
    if let torch::Layout::RocmSdk(_) = &torch.layout {
        // A build against the rocm-sdk devel SDK already names the SONAMEs
        // the preload provides; TheRock's own libraries are never rewritten.
        ui.note("rocm-sdk layout: installing the library as built (no relink)");
        return Ok(None);
    }
    if !req.relink {
        ui.note("--no-relink: installing the library as built");
        return Ok(None);
    }
    fsutil::copy_synced(&build.library, staged, 0o755)?;
    // The SONAME to keep is torch's own: over our own install, that is the
    // backed-up original's, not the file in place.
    let original = elf::read(&txn::original_of(&locked.journals()?, &torch.target)).ok();
    let r = relink::plan(&build.elf, original.as_ref(), &torch.lib_dir)?;
    r.apply(staged)?;
    ui.stage("Relink", r.describe());
    Ok(Some(r))
}

/// Say what was done; after a real swap, MIOpen's cached batch-norm
/// kernels are forgotten (`kernel_cache`).
fn report(outcome: &SwapOutcome, torch: &Torch, loc: &torch::Locator, ui: &Ui) {
    match outcome {
        SwapOutcome::Installed(j) => {
            ui.stage(
                "Installed",
                format!(
                    "{} (transaction {}): MD5 {} -> {}",
                    torch.library.display(),
                    j.id,
                    j.original.md5,
                    j.new.md5
                ),
            );
            ui.note(format!(
                "the original is kept in {}; `rdna1-patch rollback` puts it back",
                j.backup.display()
            ));
            crate::swap::kernel_cache::after_swap(loc, ui);
        }
        SwapOutcome::AlreadyInstalled(j) => ui.stage(
            "Installed",
            format!(
                "{} already holds this build (transaction {}, {}); nothing to do",
                torch.library.display(),
                j.id,
                j.created
            ),
        ),
    }
}

fn describe_target(torch: &Torch) -> String {
    if torch.target == torch.library {
        format!("{}", torch.library.display())
    } else {
        format!("{} -> {}", torch.library.display(), torch.target.display())
    }
}
