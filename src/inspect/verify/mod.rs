//! `verify`: prove what is installed, loaded and linked, one check a line.

use std::path::PathBuf;
use std::time::Duration;

use crate::elf;
use crate::fsutil::At;
use crate::inspect::checks::{CheckReport, Status};
use crate::swap::txn::{Journal, State, StateDir};
use crate::torch::{self, Locator, Torch};
use anyhow::Result;

mod battery;
mod blas;
mod cases;
mod installed;
mod judge;
mod prefix;
mod report;
mod runtime;
mod smoke;
mod summary;
mod system;

pub use battery::{Battery, BatteryStatus};
use installed::{check_links, check_torch};
use prefix::{check_markers, check_prefix, check_targets};
pub use report::LibraryRow;
use runtime::check_runtime;

/// Where `--smoke` runs its battery: the GPU, or under the tests' hook the
/// CPU, which proves the comparisons on a real torch without a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Gpu,
    Cpu,
}

pub struct VerifyRequest {
    pub prefix: PathBuf,
    /// --prefix was given: one that holds no build is then a FAIL.
    pub prefix_named: bool,
    /// Given with --python/--torch-dir; otherwise the last install's torch.
    pub torch: Option<Locator>,
    pub python: PathBuf,
    pub state: StateDir,
    pub runtime: bool,
    pub smoke: bool,
    pub smoke_device: Device,
    /// The variables that change what ROCm and MIOpen do
    /// (HSA_OVERRIDE_GFX_VERSION, *_VISIBLE_DEVICES, MIOPEN_*), as set.
    pub env: Vec<(String, String)>,
    /// The limit of --runtime's import and of each --smoke case.
    pub timeout: Duration,
    pub sysfs: PathBuf,
    pub jobs: usize,
    /// Compile torch's batch-norm kernels through its comgr.
    pub compile: bool,
    /// The targets to compile for; empty: the machine's RDNA1 cards.
    pub compile_for: Vec<String>,
}

/// verify's checks, and with `--smoke` the battery.
pub struct VerifyReport {
    pub checks: CheckReport,
    pub smoke: Option<Battery>,
}

impl VerifyReport {
    /// The signal that interrupted the battery, if one did.
    pub fn interrupted(&self) -> Option<i32> {
        self.smoke
            .as_ref()
            .filter(|b| b.status == BatteryStatus::Interrupted)
            .and_then(|b| b.interrupted_by)
    }

    /// The report for a person, each row wrapped to `width`; with `home`,
    /// that directory written `~` (a report made to be shared).
    pub fn text(&self, width: Option<usize>, home: Option<&str>, detail: bool) -> String {
        let mut checks = self.checks.clone();

        if let Some(h) = home {
            for c in &mut checks.checks {
                c.detail = battery::tilde(&c.detail, h);
                c.fix = c.fix.as_deref().map(|f| battery::tilde(f, h));
            }
        }
        let mut text = checks.text_wrapped(width, detail);
        // A battery that ran no case has said why in its check.
        if let Some(b) = self
            .smoke
            .as_ref()
            .filter(|b| b.status != BatteryStatus::NothingRun)
        {
            text.push_str("\n\n");
            text.push_str(&b.text_wrapped(width, home));
        }
        text
    }

    /// The Markdown report to paste into an issue (`--report FILE`), its
    /// "Libraries" section from the battery's maps.
    pub fn markdown(&self, home: Option<&str>) -> String {
        // The targets are this tool's own reading of torch's load closure
        // (never of a path the battery's process printed), matched to the
        // mapped library by its real path.
        let read = self.checks.libraries.as_deref().unwrap_or_default();
        let libraries: Vec<LibraryRow> = self
            .smoke
            .iter()
            .filter_map(|b| b.place.as_ref())
            .flat_map(|w| w.libraries.iter().map(LibraryRow::from))
            .map(|mut row| {
                if let Some(f) = read.iter().find(|f| {
                    f.kind == "library"
                        && f.path
                            .canonicalize()
                            .is_ok_and(|p| p.as_os_str() == row.path.as_str())
                }) {
                    row.targets = Some(f.targets.clone());
                    row.has_card = f.card_covered;
                }
                row
            })
            .collect();
        report::markdown(self, &libraries, home)
    }

    /// The JSON document: the checks' object, with `smoke` when asked for;
    /// with `home`, that directory written `~` in every string.
    pub fn json(&self, home: Option<&str>) -> String {
        let mut v = self.checks.json_value();
        if let (Some(b), Some(map)) = (&self.smoke, v.as_object_mut()) {
            map.insert(
                "smoke".to_owned(),
                serde_json::to_value(b).unwrap_or_default(),
            );
        }
        if let Some(h) = home {
            battery::tilde_json(&mut v, h);
        }
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
}

pub fn run(req: &VerifyRequest) -> Result<VerifyReport> {
    if let Some(Locator::Dir(dir)) = &req.torch {
        check_torch_dir(dir)?;
    }
    // With --smoke a signal does not end the run where it lands: the
    // battery sees it and ends as `interrupted`, so that the report, the
    // one JSON document of --json, is still printed whole.
    let _hold = req.smoke.then(crate::interrupt::Hold::start);
    let mut r = CheckReport::default();
    let rocblas = blas::installed(&req.state);
    // The battery runs without a prefix too: on a torch never fixed, it
    // says what the fix is for.
    let (torch, install) = match check_prefix(req, &mut r) {
        // A rocBLAS prefix named: its install, as torch holds it.
        Some((prov, _)) if prov.component == "rocblas" => {
            blas::named(req, &rocblas, &mut r);
            return Ok(VerifyReport {
                checks: r,
                smoke: None,
            });
        }
        Some((prov, library)) => {
            let (t, i) = installed(req, &prov, &library, &mut r)?;
            blas::rows(&rocblas, t.as_ref(), req.jobs, &mut r);
            if i.is_none() && rocblas.is_empty() && all_rolled_back(req) {
                r.unfinished = Some(NOTHING_INSTALLED.into());
            }
            (t, i)
        }
        None if req.smoke => {
            let journals = req.state.read().map(|a| a.list).unwrap_or_default();
            let torch = find_torch(req, &journals, &mut r);
            let install = torch.as_ref().and_then(|t| {
                journals
                    .into_iter()
                    .rev()
                    .find(|j| j.state == State::Installed && j.torch.target == t.target)
            });
            (torch, install)
        }
        None => {
            // The torch named is still said, with what it is (a CUDA torch
            // is no ROCm torch), and imported under --runtime.
            // With nothing of ours installed, --compile judges its own
            // kernels as they are.
            // --compile with no torch named judges the one install would
            // use: python3's (or --python's).
            // --runtime too, as its help says: python3's torch (or
            // --python's), as every other verb finds it.
            let named = req.torch.clone().or_else(|| {
                (req.compile || req.runtime).then(|| Locator::Python(req.python.clone()))
            });
            // Only rocBLAS installed: its torch.
            let named =
                named.or_else(|| rocblas.first().map(|j| Locator::Dir(j.torch.dir.clone())));
            if let Some(loc) = named
                && let Some(t) = torch_at(&loc, &mut r)
            {
                blas::rows(&rocblas, Some(&t), req.jobs, &mut r);
                libraries(req, &t, &mut r);
                if req.compile {
                    let k = &req.compile_for;
                    crate::inspect::kernels::check(&t, &[], &req.sysfs, k, req.timeout, &mut r);
                }
                if req.runtime {
                    check_runtime(req, &t, None, &mut r);
                }
            }
            // Nothing of ours is installed: a check of an install found
            // nothing to check, which is no pass.
            if !req.compile
                && !req.prefix_named
                && req.state.installed_prefix().is_none()
                && rocblas.is_empty()
            {
                r.unfinished = Some(NOTHING_INSTALLED.into());
            }
            return Ok(VerifyReport {
                checks: r,
                smoke: None,
            });
        }
    };
    let smoke = req.smoke.then(|| {
        // A torch that is no ROCm build (the tests' CPU torch) still runs.
        let found = req
            .torch
            .as_ref()
            .filter(|_| torch.is_none())
            .and_then(|l| crate::torch::find_dir(l).ok());
        let subject = smoke::Subject {
            req,
            torch_dir: torch.as_ref().map(|t| t.dir.as_path()).or(found.as_deref()),
            torch: torch.as_ref(),
            install: install.as_ref(),
        };
        smoke::run(&subject, &mut r)
    });
    Ok(VerifyReport { checks: r, smoke })
}

/// `--torch-dir` names a torch package, or verify has nothing to check:
/// an error (exit 2), never a path silently ignored.
fn check_torch_dir(dir: &std::path::Path) -> Result<()> {
    const WHICH: &str = "pass the torch package directory, the one `python -c 'import torch; print(torch.__path__[0])'` prints, or the python with --python";
    if !dir.exists() {
        return Err(crate::error::hint(
            format!("--torch-dir {} does not exist", dir.display()),
            WHICH,
        ));
    }
    if !dir.is_dir() {
        return Err(crate::error::hint(
            format!("--torch-dir {} is not a directory", dir.display()),
            WHICH,
        ));
    }
    torch::find_dir(&Locator::Dir(dir.to_path_buf())).map(drop)
}

/// The checks of a prefix and the torch it went into: the torch, and the
/// Every install here was rolled back (and only the install is asked
/// about): the build is as it was, but nothing of ours is in torch, which
/// doctor judges.
fn all_rolled_back(req: &VerifyRequest) -> bool {
    let journals = req.state.read().map(|a| a.list).unwrap_or_default();
    let closed = |j: &Journal| {
        matches!(
            j.state,
            State::RolledBack | State::Aborted | State::Abandoned | State::Replaced
        )
    };
    !req.smoke
        && !req.compile
        && !req.runtime
        && !journals.is_empty()
        && journals.iter().all(closed)
}

/// What verify says where nothing of ours is in torch: doctor says what
/// this torch needs.
const NOTHING_INSTALLED: &str = "nothing of rdna1-patch's is installed to verify: `rdna1-patch doctor` says what this torch needs";

/// install that put the prefix's library there.
fn installed(
    req: &VerifyRequest,
    prov: &crate::prefix::Provenance,
    library: &std::path::Path,
    r: &mut CheckReport,
) -> Result<(Option<Torch>, Option<Journal>)> {
    // Read once: the library can be hundreds of MB.
    crate::tally::read(library);
    let bytes = std::fs::read(library).at("read", library);
    check_markers(prov, library, &bytes, r);
    check_targets(prov, &req.sysfs, r);
    let built = bytes.ok().and_then(|b| elf::parse(&b).ok());
    let all = req.state.read()?;
    for d in &all.damaged {
        r.push_fix(
            "journal",
            Status::Fail,
            format!("{} is damaged: {}", d.path.display(), d.error),
            "if you edited it, undo the edit; otherwise set it aside (mv FILE FILE.damaged) once torch is as you want it",
        );
    }
    let journals = all.list;
    let torch = find_torch(req, &journals, r);
    let install = torch
        .as_ref()
        .and_then(|t| check_torch(&req.state, t, &journals, prov, built.as_ref(), r));
    check_links(
        torch.as_ref().map_or(library, |t| &t.target),
        torch.as_ref(),
        r,
    );
    if let Some(t) = &torch {
        libraries(req, t, r);
    }
    if req.compile {
        match &torch {
            Some(t) => crate::inspect::kernels::check(
                t,
                &journals,
                &req.sysfs,
                &req.compile_for,
                req.timeout,
                r,
            ),
            None => r.push(
                "kernels",
                Status::Skip,
                "no torch to compile the kernels of",
            ),
        }
    }
    if req.runtime {
        match &torch {
            Some(t) => check_runtime(req, t, install.as_ref(), r),
            None => r.push("runtime", Status::Skip, "no torch to import"),
        }
    }
    Ok((torch, install))
}

/// Every GPU library torch loads, read for the card, as doctor reads them.
fn libraries(req: &VerifyRequest, t: &Torch, r: &mut CheckReport) {
    let over = req
        .env
        .iter()
        .find(|(k, _)| k == "HSA_OVERRIDE_GFX_VERSION")
        .map(|(_, v)| v.as_str());
    crate::inspect::libraries::check(t, over, &req.sysfs, r);
}

fn find_torch(req: &VerifyRequest, journals: &[Journal], r: &mut CheckReport) -> Option<Torch> {
    let loc = match &req.torch {
        Some(l) => l.clone(),
        // No install recorded: --runtime and --smoke take python3's torch
        // (or --python's), as every other verb finds it.
        None => match journals.iter().rev().find(|j| j.state == State::Installed) {
            Some(j) => Locator::Dir(j.torch.dir.clone()),
            None if req.runtime || req.smoke => Locator::Python(req.python.clone()),
            None => {
                r.push(
                    "torch",
                    Status::Skip,
                    "no --python/--torch-dir given and no install recorded",
                );
                return None;
            }
        },
    };
    torch_at(&loc, r)
}

/// The torch `loc` finds, its layout said; a torch that cannot be had is
/// a FAIL saying why.
fn torch_at(loc: &Locator, r: &mut CheckReport) -> Option<Torch> {
    match torch::locate(loc) {
        Ok(t) => {
            r.push("layout", Status::Ok, layout_detail(&t));
            Some(t)
        }
        Err(e) => {
            r.push_error("torch", Status::Fail, &e);
            None
        }
    }
}

/// Which layout torch loads MIOpen from, and how it was found.
pub fn layout_detail(t: &Torch) -> String {
    match &t.layout {
        torch::Layout::Bundled => format!("torch/lib: torch loads {}", t.library.display()),
        torch::Layout::System(sys) => format!(
            "system: libtorch_hip.so loads {} ({}), made from the system's {} ({})",
            t.target.display(),
            if sys.copy.is_some() {
                "rdna1-patch's fixed copy"
            } else {
                "no copy of ours yet"
            },
            sys.library.display(),
            sys.owner.describe()
        ),
        torch::Layout::RocmSdk(sdk) => format!(
            "rocm-sdk {} ({}): torch's preload loads {} (found by {}{})",
            sdk.version,
            sdk.family,
            sdk.library.display(),
            sdk.found_by,
            sdk.note
                .as_deref()
                .map(|n| format!("; python's rocm_sdk: {n}"))
                .unwrap_or_default()
        ),
    }
}
