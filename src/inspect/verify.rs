//! `verify`: prove what is installed, loaded and linked, one check a line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::checksum;
use crate::elf;
use crate::gpu;
use crate::inspect::checks::{CheckReport, Status};
use crate::prefix::{OpenError, Prefix, Provenance};
use crate::proc;
use crate::swap::linker;
use crate::swap::torch::{self, Locator, Torch};
use crate::swap::txn::{Journal, State, StateDir};

pub struct VerifyRequest {
    pub prefix: PathBuf,
    /// Given with --python/--torch-dir; otherwise the last install's torch.
    pub torch: Option<Locator>,
    pub python: PathBuf,
    pub state: StateDir,
    pub runtime: bool,
    pub smoke: bool,
    pub timeout: Duration,
    pub sysfs: PathBuf,
    pub jobs: usize,
    /// Compile torch's batch-norm kernels through its comgr.
    pub compile: bool,
    /// The targets to compile for; empty: the machine's RDNA1 cards.
    pub compile_for: Vec<String>,
}

pub fn run(req: &VerifyRequest) -> Result<CheckReport> {
    let mut r = CheckReport::default();
    let Some((prov, library)) = check_prefix(req, &mut r) else {
        return Ok(r);
    };
    // Read once: the library can be hundreds of MB.
    let bytes =
        std::fs::read(&library).with_context(|| format!("cannot read {}", library.display()));
    check_markers(&prov, &library, &bytes, &mut r);
    check_targets(&prov, &req.sysfs, &mut r);
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
    let torch = find_torch(req, &journals, &mut r);
    let install = torch
        .as_ref()
        .and_then(|t| check_torch(&req.state, t, &journals, &prov, built.as_ref(), &mut r));
    check_links(
        torch.as_ref().map_or(&library, |t| &t.target),
        torch.as_ref(),
        &mut r,
    );
    if req.compile {
        match &torch {
            Some(t) => {
                crate::inspect::kernels::check(t, &journals, &req.sysfs, &req.compile_for, &mut r)
            }
            None => r.push(
                "kernels",
                Status::Skip,
                "no torch to compile the kernels of",
            ),
        }
    }
    if req.runtime {
        match &torch {
            Some(t) => check_runtime(req, t, install.as_ref(), &mut r),
            None => r.push("runtime", Status::Skip, "no torch to import"),
        }
    }
    if req.smoke {
        smoke(req, torch.as_ref(), &mut r);
    }
    Ok(r)
}

fn check_prefix(req: &VerifyRequest, r: &mut CheckReport) -> Option<(Provenance, PathBuf)> {
    let prov = match Prefix::open(&req.prefix) {
        Ok(opened) => {
            match opened.check(req.jobs) {
                Ok(()) => r.push(
                    "prefix",
                    Status::Ok,
                    format!(
                        "{}: all {} files match MD5SUMS; provenance: {} {} ({})",
                        req.prefix.display(),
                        opened.entries.len(),
                        opened.provenance.component,
                        opened.provenance.source.tag,
                        crate::builder::git::short(&opened.provenance.source.commit)
                    ),
                ),
                Err(bad) => r.push_fix(
                    "prefix",
                    Status::Fail,
                    format!("{}: {}", req.prefix.display(), bad.join("; ")),
                    "reinstall the prefix with `rdna1-patch build miopen`",
                ),
            }
            opened.provenance
        }
        Err(OpenError::Provenance(e)) => {
            r.push_fix(
                "prefix",
                Status::Fail,
                format!("{e:#}"),
                "run `rdna1-patch build miopen`, or point --prefix at the prefix it installed to",
            );
            return None;
        }
        Err(OpenError::Md5sums(e, prov)) => {
            r.push_fix(
                "prefix",
                Status::Fail,
                format!("{e:#}"),
                "rebuild with `rdna1-patch build miopen`",
            );
            *prov
        }
    };
    if !prov.local_edits.is_empty() {
        r.push(
            "source",
            Status::Warn,
            format!(
                "built with local edits to {} {} (--keep-local): {}",
                prov.source.tag,
                crate::builder::git::short(&prov.source.commit),
                prov.local_edits.join(", ")
            ),
        );
    }
    let library = req.prefix.join(&prov.library.path);
    Some((prov, library))
}

/// A card of this machine whose arch the build left out of GPU_TARGETS.
fn check_targets(prov: &Provenance, sysfs: &Path, r: &mut CheckReport) {
    let Some(targets) = prov.cmake.defines.get("GPU_TARGETS") else {
        return;
    };
    match gpu::targets_warning(targets, sysfs) {
        Some((detail, fix)) => r.push_fix("targets", Status::Warn, detail, fix),
        None => r.push(
            "targets",
            Status::Ok,
            format!("built for {}", targets.replace(';', ", ")),
        ),
    }
}

fn check_markers(prov: &Provenance, library: &Path, bytes: &Result<Vec<u8>>, r: &mut CheckReport) {
    let declared: Vec<(&str, &str)> = prov
        .patches
        .iter()
        .filter_map(|p| p.marker.as_deref().map(|m| (p.name.as_str(), m)))
        .collect();
    if declared.is_empty() {
        r.push(
            "patches",
            Status::Warn,
            "no patch declares a marker to look for",
        );
        return;
    }
    let markers: Vec<&str> = declared.iter().map(|(_, m)| *m).collect();
    let found = match bytes {
        Ok(b) => elf::find_markers(b, &markers)
            .with_context(|| format!("{} is not a usable ELF library", library.display())),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    match found {
        Err(e) => r.push("patches", Status::Fail, format!("{e:#}")),
        Ok(found) => {
            let missing: Vec<String> = declared
                .iter()
                .zip(&found)
                .filter(|(_, f)| !**f)
                .map(|((name, m), _)| format!("{m:?} ({name})"))
                .collect();
            if missing.is_empty() {
                r.push(
                    "patches",
                    Status::Ok,
                    format!(
                        "all {} markers are in {}'s read-only data",
                        markers.len(),
                        library.display()
                    ),
                );
            } else {
                r.push_fix(
                    "patches",
                    Status::Fail,
                    format!(
                        "{} lacks {}",
                        library.display(),
                        missing.join(", ")
                    ),
                    "the library was not built from the patched source: rebuild with `rdna1-patch build miopen`",
                );
            }
        }
    }
}

fn find_torch(req: &VerifyRequest, journals: &[Journal], r: &mut CheckReport) -> Option<Torch> {
    let loc = match &req.torch {
        Some(l) => l.clone(),
        None => match journals.iter().rev().find(|j| j.state == State::Installed) {
            Some(j) => Locator::Dir(j.torch.dir.clone()),
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
    match torch::locate(&loc) {
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

fn check_torch(
    state: &StateDir,
    torch: &Torch,
    journals: &[Journal],
    prov: &Provenance,
    built: Option<&elf::Library>,
    r: &mut CheckReport,
) -> Option<Journal> {
    check_versions(torch, prov, r);
    let install = journals
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == torch.target)
        .cloned();
    let Some(j) = install else {
        untracked(state, torch, r);
        return None;
    };
    check_installed(torch, &j, built, r);
    Some(j)
}

/// torch's HIP major.minor against the build's ROCm.
fn check_versions(torch: &Torch, prov: &Provenance, r: &mut CheckReport) {
    let ours =
        crate::version::major_minor(prov.rocm.found.as_deref().unwrap_or(&prov.rocm.version));
    if crate::version::major_minor(torch.rocm()) == ours {
        r.push(
            "versions",
            Status::Ok,
            format!(
                "torch {} ({}) and the build (ROCm {ours})",
                torch.version,
                torch.rocm_label()
            ),
        );
    } else {
        r.push_fix(
            "versions",
            Status::Fail,
            format!(
                "torch {} is for {}, the build for ROCm {ours}",
                torch.version,
                torch.rocm_label()
            ),
            "build with the profile for torch's ROCm, or install the torch for the build's",
        );
    }
}

/// torch holds no library of ours by the journals: its own, or one a lost
/// or other state dir installed.
fn untracked(state: &StateDir, torch: &Torch, r: &mut CheckReport) {
    if crate::swap::txn::is_patched(&torch.target) {
        r.push_fix(
            "torch",
            Status::Fail,
            format!(
                "{} is an rdna1-patch build (it carries {} markers), but no transaction in {} installed it",
                torch.target.display(),
                crate::kernel_text::MARKER_PREFIX,
                state.root().display()
            ),
            "pass the --state-dir of the install that put it there; if that state is lost, reinstall torch to get its own library back, then install again",
        );
    } else {
        r.push_fix(
            "torch",
            Status::Fail,
            format!(
                "{} is torch's own: no installed transaction put the patched library there",
                torch.library.display()
            ),
            "rdna1-patch install --into-torch",
        );
    }
}

/// torch holds what transaction `j` installed, by MD5 and build-id.
fn check_installed(torch: &Torch, j: &Journal, built: Option<&elf::Library>, r: &mut CheckReport) {
    let md5 = checksum::md5_file(&torch.target).unwrap_or_else(|e| format!("{e:#}"));
    let id = elf::read(&torch.target).ok().and_then(|e| e.build_id);
    let want_id = built.and_then(|b| b.build_id.clone());
    if md5 != j.new.md5 {
        r.push_fix(
            "torch",
            Status::Fail,
            format!(
                "{} has MD5 {md5}, transaction {} installed {}",
                torch.target.display(),
                j.id,
                j.new.md5
            ),
            "something replaced it (a pip install?): run `rdna1-patch install --into-torch` again",
        );
    } else if id != want_id {
        r.push_fix(
            "torch",
            Status::Fail,
            format!(
                "{} has build-id {}, the prefix's library {}: transaction {} installed another build",
                torch.target.display(),
                id.as_deref().unwrap_or("(none)"),
                want_id.as_deref().unwrap_or("(none)"),
                j.id
            ),
            "run `rdna1-patch install --into-torch` to install this build",
        );
    } else {
        r.push(
            "torch",
            Status::Ok,
            format!(
                "{} is what transaction {} installed (MD5 {md5}, build-id {})",
                torch.library.display(),
                j.id,
                id.as_deref().unwrap_or("(none)")
            ),
        );
    }
}

fn check_links(library: &Path, torch: Option<&Torch>, r: &mut CheckReport) {
    let preloaded = torch.map(Torch::preloaded_dirs).unwrap_or_default();
    let deps = match linker::resolve(library, &preloaded) {
        Ok(d) => d,
        Err(e) => return r.push("links", Status::Fail, format!("{e:#}")),
    };
    let missing = linker::missing(&deps);
    if !missing.is_empty() {
        return r.push_fix(
            "links",
            Status::Fail,
            format!("{}: not found: {}", library.display(), missing.join(", ")),
            "install the missing libraries, or reinstall with `rdna1-patch install --into-torch` (which relinks to torch's)",
        );
    }
    let Some(torch) = torch else {
        return r.push(
            "links",
            Status::Ok,
            format!(
                "all {} libraries {} needs resolve",
                deps.len(),
                library.display()
            ),
        );
    };
    match linker::second_copies(&deps, &torch.runtime_dirs()) {
        Err(e) => r.push("links", Status::Fail, format!("{e:#}")),
        Ok(dups) if !dups.is_empty() => {
            let list: Vec<String> = dups
                .iter()
                .map(|(b, p)| format!("{} besides torch's {b}", p.display()))
                .collect();
            r.push_fix(
                "links",
                Status::Fail,
                format!(
                    "{} loads a second copy: {}",
                    library.display(),
                    list.join(", ")
                ),
                "reinstall without --no-relink: `rdna1-patch install --into-torch`",
            );
        }
        Ok(_) => r.push(
            "links",
            Status::Ok,
            format!(
                "all {} libraries resolve; none is a second copy of a library in {}",
                deps.len(),
                torch
                    .runtime_dirs()
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        ),
    }
}

const MAPS: &str = r#"
import json
import torch
paths = set()
for line in open("/proc/self/maps"):
    parts = line.split(None, 5)
    if len(parts) == 6 and ".so" in parts[5]:
        paths.add(parts[5].strip())
print(json.dumps({"torch": torch.__file__, "maps": sorted(paths)}))
"#;

#[derive(Deserialize)]
struct Maps {
    maps: Vec<PathBuf>,
}

/// A python that imports exactly `torch`: its parent dir goes first on
/// PYTHONPATH.
fn python(req: &VerifyRequest, torch: &Torch, script: &str) -> Command {
    let mut c = Command::new(&req.python);
    let mut path = std::ffi::OsString::from(torch.dir.parent().unwrap_or(Path::new("/")));
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        path.push(":");
        path.push(old);
    }
    c.arg("-c").arg(script).env("PYTHONPATH", path);
    c
}

fn failed_run(out: &proc::Output, what: &str, limit: Duration) -> String {
    match out.status {
        None => format!(
            "{what} did not finish: killed after {:.1} s (limit {} s)",
            out.elapsed.as_secs_f64(),
            limit.as_secs()
        ),
        Some(s) => format!(
            "{what} failed ({s}): {}",
            out.stderr.lines().last().unwrap_or("").trim()
        ),
    }
}

fn check_runtime(
    req: &VerifyRequest,
    torch: &Torch,
    install: Option<&Journal>,
    r: &mut CheckReport,
) {
    let out = match proc::run(python(req, torch, MAPS), req.timeout) {
        Ok(o) => o,
        Err(e) => return r.push("runtime", Status::Fail, format!("{e:#}")),
    };
    if out.status.is_none_or(|s| !s.success()) {
        return r.push(
            "runtime",
            Status::Fail,
            failed_run(&out, "import torch", req.timeout),
        );
    }
    let maps: Maps = match serde_json::from_str(out.stdout.trim()) {
        Ok(m) => m,
        Err(e) => return r.push("runtime", Status::Fail, format!("unreadable answer: {e}")),
    };
    let mapped = |stem: &str| -> Vec<&PathBuf> {
        maps.maps
            .iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| elf::stem(n) == stem)
            })
            .collect()
    };
    let miopen = mapped("libMIOpen");
    let hip = mapped("libamdhip64");
    let mut problems = Vec::new();
    match miopen.as_slice() {
        [one] => {
            let real = one.canonicalize().unwrap_or(one.to_path_buf());
            if real != torch.target {
                problems.push(format!(
                    "the mapped libMIOpen is {}, not torch's {}",
                    one.display(),
                    torch.target.display()
                ));
            } else if let Some(j) = install {
                let md5 = checksum::md5_file(&real).unwrap_or_default();
                if md5 != j.new.md5 {
                    problems.push(format!(
                        "the mapped {} is not the patched library (MD5 {md5})",
                        one.display()
                    ));
                }
            } else {
                problems.push(format!(
                    "{} is mapped but is torch's own library",
                    one.display()
                ));
            }
        }
        [] => problems.push("no libMIOpen is mapped after import torch".to_owned()),
        many => problems.push(format!(
            "{} copies of libMIOpen are mapped: {many:?}",
            many.len()
        )),
    }
    if hip.len() != 1 {
        problems.push(format!("{} HIP runtimes are mapped: {hip:?}", hip.len()));
    }
    if problems.is_empty() {
        r.push(
            "runtime",
            Status::Ok,
            format!(
                "import torch maps the patched {} and one HIP runtime, {}",
                miopen[0].display(),
                hip[0].display()
            ),
        );
    } else {
        r.push_fix(
            "runtime",
            Status::Fail,
            problems.join("; "),
            "run `rdna1-patch install --into-torch` (it relinks to torch's runtime), then verify again",
        );
    }
}

const SMOKE: &str = r#"
import json, time
import torch
start = time.time()
dev = torch.device("cuda")
x = torch.randn(2, 3, 32, 32, device=dev, requires_grad=True)
conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(dev)
y = conv(x)
y.sum().backward()
torch.cuda.synchronize()
print(json.dumps({"device": torch.cuda.get_device_name(0), "seconds": time.time() - start}))
"#;

#[derive(Deserialize)]
struct Smoke {
    device: String,
    seconds: f64,
}

fn smoke(req: &VerifyRequest, torch: Option<&Torch>, r: &mut CheckReport) {
    let gpus: Vec<gpu::Gpu> = gpu::scan(&req.sysfs)
        .into_iter()
        .filter(|g| g.is_amd())
        .collect();
    if gpus.is_empty() {
        return r.push(
            "smoke",
            Status::Skip,
            format!(
                "no AMD GPU in the KFD topology ({}), so there is nothing to run a convolution on",
                gpu::topology(&req.sysfs).display()
            ),
        );
    }
    let Some(torch) = torch else {
        return r.push("smoke", Status::Skip, "no torch to run it with");
    };
    let out = match proc::run(python(req, torch, SMOKE), req.timeout) {
        Ok(o) => o,
        Err(e) => return r.push("smoke", Status::Fail, format!("{e:#}")),
    };
    let ok = out.status.is_some_and(|s| s.success());
    match serde_json::from_str::<Smoke>(out.stdout.trim()) {
        Ok(s) if ok => r.push(
            "smoke",
            Status::Ok,
            format!(
                "Conv2d forward+backward ran on {} ({}) in {:.2} s",
                s.device,
                gpus[0].gfx(),
                s.seconds
            ),
        ),
        _ => r.push_fix(
            "smoke",
            Status::Fail,
            failed_run(&out, "a Conv2d forward+backward", req.timeout),
            if out.status.is_none() {
                "MIOpen hangs like this in its Find step on unpatched RDNA1: check that `verify --runtime` is all ok, and try MIOPEN_FIND_MODE=FAST"
            } else {
                "run it by hand with MIOPEN_ENABLE_LOGGING=1 MIOPEN_LOG_LEVEL=5 to see where it fails"
            },
        ),
    }
}
