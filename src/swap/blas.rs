//! `install rocblas --into-torch`: a rocBLAS build, checked again as its
//! build checked it before install (the library's GPU code and the Tensile
//! directory's, for the build's targets and this machine's cards), goes
//! where torch's loader takes librocblas from: over the set torch bundles
//! (`txn::set`: the library and torch/lib/rocblas/library as one), or, for
//! a torch on the system's rocBLAS, beside it in torch/lib (`txn::system`:
//! a copy and its Tensile directory added, `$ORIGIN` first in
//! libtorch_hip.so's run path; the system's files only read).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::builder::pipeline::checks;
use crate::error::hint;
use crate::fsutil;
use crate::swap::checked_build::{self, Build};
use crate::swap::into_torch;
use crate::swap::relink::{self, Relink};
use crate::swap::txn::tree::{self, Entry};
use crate::swap::txn::{
    self, BuildRec, Journal, ROCBLAS, State, StateDir, SwapOutcome, TENSILE_DIR,
};
use crate::torch::Torch;
use crate::torch::system::{Loads, System};
use crate::ui::Ui;

/// Where a rocBLAS prefix keeps its Tensile directory: beside its
/// library, where rocBLAS itself looks (`<lib>/rocblas/library`).
pub const PREFIX_TENSILE: &str = "lib/rocblas/library";

pub struct BlasRequest {
    pub prefix: PathBuf,
    pub stack: crate::stack::Stack,
    pub state: StateDir,
    /// Install over a ROCm major.minor mismatch.
    pub force: bool,
    /// Fit NEEDED/RUNPATH/SONAME to torch's bundled libraries.
    pub relink: bool,
    pub jobs: usize,
    /// Say the route and what it replaces, change nothing.
    pub dry_run: bool,
}

/// A rocBLAS build that passed its checks again, as it is now.
pub struct Checked {
    pub build: Build,
    /// The prefix's Tensile directory and its entries (MD5s from MD5SUMS).
    pub tensile: PathBuf,
    pub entries: Vec<Entry>,
    /// What the check found, for the user.
    pub said: String,
}

/// Where torch takes rocBLAS from.
pub enum Place {
    /// torch's own, in torch/lib: `target` its file by its real path.
    Bundled { target: PathBuf },
    /// The system's (`copy` is ours when one is installed).
    System(System),
}

/// The prefix holds a rocBLAS build whose files match its MD5SUMS, and
/// the set passes the check its build made before install, with code for
/// each of this machine's RDNA1 cards.
pub fn check(prefix: &Path, jobs: usize, sysfs: &Path) -> Result<Checked> {
    let build = checked_build::check_build_of(prefix, jobs, "rocblas")?;
    let p = &build.provenance;
    if p.component != "rocblas" {
        return Err(hint(
            format!(
                "the prefix {} holds a {} build (profile {}), not rocBLAS's; nothing was changed",
                prefix.display(),
                p.component,
                p.profile
            ),
            format!(
                "`{}` installs that one; for rocBLAS, name the prefix `rdna1-patch build rocblas` installed to (its last line says)",
                crate::shell::tool(["install", &p.component, "--into-torch"])
            ),
        ));
    }
    let targets = checks::targets_of(p.cmake.defines.get("GPU_TARGETS"));
    let set = checks::Set {
        root: prefix,
        files: &p.files,
        soname: &p.library.soname,
        tensile: Some(PREFIX_TENSILE),
        targets: &targets,
    };
    let refused = |problems: String| {
        hint(
            format!(
                "the rocBLAS build in {} does not pass the check its build makes before install: {problems}; nothing was changed",
                prefix.display()
            ),
            format!(
                "build it again (`{}`): a build installs only a set that passes, so this prefix was changed since",
                crate::shell::tool(["build", "rocblas", "--profile", &p.profile])
            ),
        )
    };
    let said = match set.check() {
        Ok(said) if !targets.is_empty() => said,
        Ok(_) => return Err(refused("it records no GPU_TARGETS".into())),
        Err(r) => return Err(refused(r.to_string())),
    };
    let missing = crate::gpu::rdna1_targets_missing(&targets.join(";"), sysfs);
    if !missing.is_empty() {
        return Err(hint(
            format!(
                "the rocBLAS build in {} has code for {}, none for {}, the card(s) in this machine; nothing was changed",
                prefix.display(),
                targets.join(", "),
                missing.join(", ")
            ),
            format!("build it for this machine: `{}`", {
                let all: Vec<&str> = targets.iter().chain(&missing).map(String::as_str).collect();
                let all = all.join(",");
                crate::shell::tool([
                    "build",
                    "rocblas",
                    "--profile",
                    &p.profile,
                    "--gpu-targets",
                    &all,
                ])
            }),
        ));
    }
    let tensile = prefix.join(PREFIX_TENSILE);
    let under = format!("{PREFIX_TENSILE}/");
    let known: BTreeMap<String, String> = crate::prefix::read_md5sums(prefix)?
        .into_iter()
        .filter_map(|e| Some((e.path.strip_prefix(&under)?.to_owned(), e.md5)))
        .collect();
    let entries = tree::read_known(&tensile, &known)?;
    Ok(Checked {
        build,
        tensile,
        entries,
        said,
    })
}

/// Where torch loads rocBLAS from now, by libtorch_hip.so's NEEDED and
/// the loader's search: its own file in torch/lib, the system's, or our
/// copy of the system's (an installed transaction says).
pub fn place(torch: &Torch, journals: &[Journal]) -> Result<(Loads, Place)> {
    let Some(l) = crate::torch::system::loads(&torch.dir, ROCBLAS)? else {
        return Err(hint(
            format!(
                "torch {} at {} loads no rocBLAS: its libtorch_hip.so needs no librocblas.so*, or the loader finds none for it",
                torch.version,
                torch.dir.display()
            ),
            "`rdna1-patch doctor` says what torch loads; a torch that bundles rocBLAS has torch/lib/librocblas.so",
        ));
    };
    let ours = journals.iter().rev().find(|j| {
        j.state == State::Installed
            && j.system.is_some()
            && j.set.is_some()
            && j.torch.dir == torch.dir
            && j.torch.target == l.loaded
    });
    if let Some(j) = ours {
        let s = j.system.as_ref().expect("a system journal");
        let (library, copy) = (s.library.clone(), l.loaded.clone());
        return Ok((l.clone(), Place::System(l.system(library, Some(copy)))));
    }
    if !l.loaded.starts_with(&torch.dir) {
        crate::torch::refuse_packaged_torch(&torch.dir, &torch.version)?;
        let library = l.loaded.clone();
        return Ok((l.clone(), Place::System(l.system(library, None))));
    }
    let lib_dir = torch.dir.join("lib");
    if l.loaded.parent() != Some(lib_dir.as_path()) {
        return Err(hint(
            format!(
                "torch loads rocBLAS from {}, not from {}: rdna1-patch replaces a rocBLAS in torch/lib, beside its {TENSILE_DIR}; nothing was changed",
                l.loaded.display(),
                lib_dir.display()
            ),
            format!(
                "put torch's own rocBLAS back in torch/lib (`pip install --force-reinstall torch=={}` from the index you installed it from), then run this again",
                torch.version
            ),
        ));
    }
    let target = l.loaded.clone();
    Ok((l, Place::Bundled { target }))
}

pub fn run(req: &BlasRequest, ui: &Ui) -> Result<()> {
    let torch = req.stack.found()?;
    if let crate::torch::Layout::RocmSdk(sdk) = &torch.layout {
        return Err(hint(
            format!(
                "torch {} loads its ROCm libraries from the rocm-sdk packages ({}), whose rocBLAS TheRock builds for gfx1010, gfx1011 and gfx1012; rdna1-patch puts no rocBLAS under it; nothing was changed",
                torch.version,
                sdk.package.display()
            ),
            "`rdna1-patch doctor` says whether its rocBLAS has code for your card",
        ));
    }
    let checked = check(&req.prefix, req.jobs, &req.stack.sysfs)?;
    let (loads, place) = place(torch, &req.state.read()?.list)?;
    checked_build::check_versions(&checked.build, torch, req.force, ui)?;
    if req.dry_run {
        into_torch::ensure_may_change(torch)?;
        crate::swap::txn::ensure_writable(&torch.dir.join("lib"))?;
        req.state.can_lock()?;
        ui.answer("Route", would(req, &checked, torch, &loads, &place));
        return Ok(());
    }
    announce(&checked, torch, &place, ui);
    into_torch::warn_about_override(torch, ui);
    let locked = req.state.lock()?;
    settle(&locked, torch, &loads, ui)?;
    // What the recovery settled may be another set: look again.
    let (loads, place) = self::place(torch, &locked.journals()?.list)?;
    let _lock = locked.lock_target(&loads.in_lib())?;
    let rec = BuildRec {
        prefix: checked.build.prefix.clone(),
        library: checked.build.library.clone(),
        profile: checked.build.provenance.profile.clone(),
        rocm: checked.build.rocm().to_owned(),
        commit: checked.build.provenance.source.commit.clone(),
        build_id: checked.build.elf.build_id.clone(),
        relink: String::new(),
    };
    let outcome = match &place {
        Place::Bundled { target } => {
            bundled(req, &locked, &checked, torch, target, &loads, rec, ui)
        }
        Place::System(sys) => system(&locked, &checked, torch, sys, rec, ui),
    }?;
    report(&outcome, ui);
    Ok(())
}

/// Settle what killed runs left; refuse a torch whose rocBLAS is in an
/// open transaction.
fn settle(locked: &txn::Locked, torch: &Torch, loads: &Loads, ui: &Ui) -> Result<()> {
    into_torch::ensure_may_change(torch)?;
    let recovery = txn::recover(locked)?;
    for note in &recovery.notes {
        ui.stage("Recovered", note);
    }
    recovery.check_target(&loads.loaded)?;
    recovery.check_target(&loads.in_lib())
}

/// What the dry run says the real run would do.
fn would(req: &BlasRequest, c: &Checked, torch: &Torch, loads: &Loads, place: &Place) -> String {
    let from = format!(
        "would install the rocBLAS build in {} (profile {}, ROCm {}, for {}) into torch {} at {}",
        req.prefix.display(),
        c.build.provenance.profile,
        c.build.rocm(),
        checks::targets_of(c.build.provenance.cmake.defines.get("GPU_TARGETS")).join(", "),
        torch.version,
        torch.dir.display()
    );
    let how = match place {
        Place::Bundled { target } => format!(
            "in place of the set torch bundles, {} and {} ({}), as one transaction",
            target.display(),
            target.with_file_name(TENSILE_DIR).display(),
            files_of(&target.with_file_name(TENSILE_DIR))
        ),
        Place::System(sys) => format!(
            "beside the system's {} ({}), which is only read: a copy as {} with its Tensile directory {}; {}",
            sys.library.display(),
            crate::torch::system::describe_owner(&sys.owner, &sys.library),
            loads.in_lib().display(),
            loads.in_lib().with_file_name(TENSILE_DIR).display(),
            sys.how()
        ),
    };
    format!(
        "{from}: {how}; `rdna1-patch rollback` puts every file back (dry run: nothing was changed)"
    )
}

/// "N files", or "none there".
fn files_of(dir: &Path) -> String {
    match tree::found(dir, &[], 1) {
        Ok(Some(t)) => format!("{} file(s)", t.files),
        Ok(None) => "none there yet".to_owned(),
        Err(e) => format!("{e:#}"),
    }
}

fn announce(c: &Checked, torch: &Torch, place: &Place, ui: &Ui) {
    let p = &c.build.provenance;
    ui.stage(
        "Build",
        format!(
            "{} ({} {} at {}, ROCm {}), MD5SUMS ok",
            c.build.library.display(),
            p.source.tag,
            crate::builder::git::short(&p.source.commit),
            p.profile,
            c.build.rocm()
        ),
    );
    ui.stage("Checked", &c.said);
    let loads = match place {
        Place::Bundled { target } => format!("its own {}", target.display()),
        Place::System(s) => match &s.copy {
            Some(copy) => format!(
                "rdna1-patch's {} beside the system's {}",
                copy.display(),
                s.library.display()
            ),
            None => format!("the system's {}", s.library.display()),
        },
    };
    ui.stage(
        "Torch",
        format!(
            "{} {} ({}), rocBLAS: {loads}",
            torch.dir.display(),
            torch.version,
            torch.rocm_label()
        ),
    );
}

/// Over the set torch bundles: the library fitted to torch/lib (as
/// MIOpen's is) and the Tensile directory, swapped as one.
#[allow(clippy::too_many_arguments)]
fn bundled(
    req: &BlasRequest,
    locked: &txn::Locked,
    c: &Checked,
    torch: &Torch,
    target: &Path,
    loads: &Loads,
    mut rec: BuildRec,
    ui: &Ui,
) -> Result<SwapOutcome> {
    let staging = locked.state.staged_path(&loads.needed);
    let relink = match stage(req, locked, c, torch, target, &staging, ui) {
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
    rec.relink = relink.as_ref().map(Relink::describe).unwrap_or_default();
    let (staged, staged_md5) = match &relink {
        Some(_) => (staging.as_path(), None),
        None => (c.build.library.as_path(), Some(c.build.md5.as_str())),
    };
    let check = |temp: &Path| crate::swap::links::check_links(temp, torch, relink.as_ref(), ui);
    let swap = txn::SetSwap {
        torch,
        target,
        loads: &loads.needed,
        build: rec,
        staged,
        staged_md5,
        check: &check,
        tensile: &c.tensile,
        entries: &c.entries,
    };
    let outcome = txn::swap_set(locked, &swap);
    let _ = fsutil::remove_own_file(&staging);
    outcome
}

/// Copy the library into the staging dir and fit it to torch/lib, unless
/// `--no-relink`; the relink made.
fn stage(
    req: &BlasRequest,
    locked: &txn::Locked,
    c: &Checked,
    torch: &Torch,
    target: &Path,
    staged: &Path,
    ui: &Ui,
) -> Result<Option<Relink>> {
    if !req.relink {
        ui.note("--no-relink: installing the library as built");
        return Ok(None);
    }
    fsutil::copy_synced(&c.build.library, staged, 0o755)?;
    // The SONAME to keep is torch's own: over our own install, the
    // backed-up original's.
    let original = crate::elf::read(&txn::original_of(&locked.journals()?, target)).ok();
    let r = relink::plan(&c.build.elf, original.as_ref(), &torch.dir.join("lib"))?;
    r.apply(staged)?;
    ui.stage("Relink", r.describe());
    Ok(Some(r))
}

/// Beside the system's rocBLAS: the build as a copy in torch/lib whose run
/// path names the system library's directory first (so what it needs
/// resolves as the system's did), its Tensile directory beside it, and
/// `$ORIGIN` ahead in libtorch_hip.so's run path when torch/lib is not
/// searched first.
fn system(
    locked: &txn::Locked,
    c: &Checked,
    torch: &Torch,
    sys: &System,
    mut rec: BuildRec,
    ui: &Ui,
) -> Result<SwapOutcome> {
    if let Some(copy) = &sys.copy {
        let copy_md5 = crate::checksum::md5_file(copy)?;
        let journals = locked.journals()?;
        if let Some(j) = journals
            .list
            .iter()
            .rev()
            .find(|j| j.state == State::Installed && j.set.is_some() && j.torch.target == *copy)
            .filter(|j| j.new.md5 == copy_md5 && j.build.prefix == c.build.prefix)
        {
            return Ok(SwapOutcome::AlreadyInstalled(j.clone()));
        }
        return Err(hint(
            format!(
                "torch already loads an rdna1-patch rocBLAS, {}; nothing was changed",
                copy.display()
            ),
            "`rdna1-patch rollback` takes it out; then install this one",
        ));
    }
    let staged = locked.state.staged_path("rocblas-copy");
    let hip_staged = locked.state.staged_path("libtorch_hip.so");
    let result = (|| -> Result<SwapOutcome> {
        let run_path = relink::copy_beside(&c.build.library, sys, &staged)?;
        ui.stage("Route", sys.how());
        ui.note(format!(
            "the system's {} ({}) is only read; the copy's run path is {run_path}",
            sys.library.display(),
            crate::torch::system::describe_owner(&sys.owner, &sys.library)
        ));
        let hip_edited = relink::hip_with_origin(sys, &hip_staged)?;
        rec.relink = format!("RUNPATH -> {run_path}");
        let sha = crate::prefix::sha256_hex(&crate::elf::read_file(&sys.library)?);
        let copy_at = sys.hip.with_file_name(&sys.needed);
        let add = txn::AddSystem {
            torch,
            sys,
            copy_at: &copy_at,
            build: rec,
            copy: &staged,
            copy_run_path: run_path,
            hip_edited,
            derived_from: &sha,
            tensile: Some((&c.tensile, &c.entries)),
        };
        txn::add_system(locked, &add)
    })();
    let _ = fsutil::remove_own_file(&staged);
    let _ = fsutil::remove_own_file(&hip_staged);
    result.context("torch was not changed")
}

fn report(outcome: &SwapOutcome, ui: &Ui) {
    match outcome {
        SwapOutcome::Installed(j) => {
            let set = j.set.as_ref().expect("a rocBLAS journal");
            let files = |t: Option<&tree::TreeRec>| t.map_or(0, |t| t.files);
            match &j.system {
                None => ui.stage(
                    "Installed",
                    format!(
                        "{} and {} (transaction {}): MD5 {} -> {}, Tensile files {} -> {}",
                        j.torch.target.display(),
                        set.dir.display(),
                        j.id,
                        j.original.md5,
                        j.new.md5,
                        files(set.original.as_ref()),
                        files(Some(&set.new))
                    ),
                ),
                Some(s) => ui.stage(
                    "Installed",
                    format!(
                        "{} and {} ({} Tensile files) (transaction {}): added beside the system's {}, which is unchanged{}",
                        j.torch.target.display(),
                        set.dir.display(),
                        files(Some(&set.new)),
                        j.id,
                        s.library.display(),
                        match &s.edit {
                            Some(e) => format!("; libtorch_hip.so's run path {} -> {}", if e.before.is_empty() { "(none)" } else { &e.before }, e.after),
                            None => String::new(),
                        }
                    ),
                ),
            }
            ui.note(format!(
                "{}; `rdna1-patch rollback` puts every file back",
                match (&j.system, &set.original) {
                    (None, Some(_)) => format!(
                        "the originals are kept in {}",
                        j.backup.parent().unwrap_or(Path::new("")).display()
                    ),
                    (None, None) =>
                        format!("the original library is kept as {}", j.backup.display()),
                    (Some(_), _) => "nothing of torch's or the system's was replaced".to_owned(),
                }
            ));
        }
        SwapOutcome::AlreadyInstalled(j) => ui.stage(
            "Installed",
            format!(
                "{} already holds this rocBLAS (transaction {}, {}); nothing to do",
                j.torch.target.display(),
                j.id,
                j.created
            ),
        ),
    }
}

/// What an installed rocBLAS transaction's files are now: torch's against
/// what the journal says it installed, and the prefix it came from
/// against its MD5SUMS (the Tensile files torch holds among them).
pub struct Standing {
    pub torch: std::result::Result<(), String>,
    pub prefix: std::result::Result<String, String>,
}

/// Whether torch holds what rocBLAS transaction `j` installed, its
/// library and its Tensile directory; else what is there.
pub fn in_torch(j: &Journal, jobs: usize) -> std::result::Result<(), String> {
    let set = j.set.as_ref().expect("a rocBLAS journal");
    let lib = crate::checksum::md5_file(&j.torch.target).map_err(|e| format!("{e:#}"));
    let dir = tree::found(&set.dir, &[&set.new], jobs).map_err(|e| format!("{e:#}"));
    match (lib, dir) {
        (Ok(m), Ok(Some(t))) if m == j.new.md5 && t == set.new => Ok(()),
        (Ok(m), _) if m != j.new.md5 => Err(format!("{} is MD5 {m}", j.torch.target.display())),
        (Ok(_), Ok(None)) => Err(format!("{} is gone", set.dir.display())),
        (Ok(_), Ok(Some(t))) => Err(format!(
            "{} holds {} file(s), {} bytes, not the {} transaction {} put there",
            set.dir.display(),
            t.files,
            t.bytes,
            set.new.files,
            j.id
        )),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

pub fn standing(j: &Journal, jobs: usize) -> Standing {
    let set = j.set.as_ref().expect("a rocBLAS journal");
    let torch = in_torch(j, jobs);
    let prefix = (|| {
        let opened = crate::prefix::Prefix::open(&j.build.prefix).map_err(|e| e.to_string())?;
        opened.check(jobs).map_err(|bad| {
            let n = bad.len();
            let shown: Vec<String> = bad.into_iter().take(3).collect();
            format!("{n} problem(s) against its MD5SUMS: {}", shown.join("; "))
        })?;
        let under = format!("{PREFIX_TENSILE}/");
        let known: BTreeMap<String, String> = opened
            .entries
            .iter()
            .filter_map(|e| Some((e.path.strip_prefix(&under)?.to_owned(), e.md5.clone())))
            .collect();
        let ours = tree::read_known(&j.build.prefix.join(PREFIX_TENSILE), &known)
            .map(|e| tree::record(&e))
            .map_err(|e| format!("{e:#}"))?;
        if ours != set.new {
            return Err(format!(
                "its {PREFIX_TENSILE} is not the one torch holds (rebuilt since transaction {}?)",
                j.id
            ));
        }
        let p = &opened.provenance;
        Ok(format!(
            "{} {} ({}), profile {}, ROCm {}: its {} files match its MD5SUMS, the {} Tensile files torch holds among them",
            p.component,
            p.source.tag,
            crate::builder::git::short(&p.source.commit),
            p.profile,
            p.rocm.found.as_deref().unwrap_or(&p.rocm.version),
            opened.entries.len(),
            set.new.files
        ))
    })();
    Standing { torch, prefix }
}
