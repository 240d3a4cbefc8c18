//! What verify checks of torch: the install the journal records, the
//! versions, and what the library links against.

use std::path::Path;

use crate::checksum;
use crate::elf;
use crate::inspect::checks::{CheckReport, Status};
use crate::prefix::Provenance;
use crate::swap::linker;
use crate::swap::txn::{Journal, State, StateDir};
use crate::torch::Torch;

pub(super) fn check_torch(
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
    match &j.system {
        Some(s) => super::system::check(&j, s, prov, r),
        None => check_source(&j, prov, r),
    }
    Some(j)
}

/// A library fixed in place must have been made from the original the
/// install kept: torch upgraded between the fix and the swap would hold a
/// fix of a library it no longer has.
fn check_source(j: &Journal, prov: &Provenance, r: &mut CheckReport) {
    let Some(in_place) = &prov.in_place else {
        return;
    };
    let kept = crate::elf::read_file(&j.backup).map(|b| crate::prefix::sha256_hex(&b));
    match kept {
        Ok(sha) if sha == in_place.source_sha256 => r.push(
            "source",
            Status::Ok,
            format!(
                "the fix was made from the library transaction {} kept as torch's original (SHA-256 {})",
                j.id,
                &sha[..16]
            ),
        ),
        Ok(sha) => r.push_fix(
            "source",
            Status::Fail,
            format!(
                "the fix was made from a library with SHA-256 {}, but torch's original, kept by transaction {}, is {sha}",
                in_place.source_sha256, j.id
            ),
            "torch changed between the fix and the install: `rdna1-patch rollback`, then `rdna1-patch install --into-torch` fixes the library torch has now",
        ),
        Err(e) => r.push("source", Status::Fail, format!("{e:#}")),
    }
}

/// torch's HIP major.minor against the build's ROCm.
pub(super) fn check_versions(torch: &Torch, prov: &Provenance, r: &mut CheckReport) {
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
pub(super) fn untracked(state: &StateDir, torch: &Torch, r: &mut CheckReport) {
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
pub(super) fn check_installed(
    torch: &Torch,
    j: &Journal,
    built: Option<&elf::Library>,
    r: &mut CheckReport,
) {
    let md5 = checksum::md5_file(&torch.target).unwrap_or_else(|e| format!("{e:#}"));
    let id = elf::read(&torch.target).ok().and_then(|e| e.build_id);
    let want_id = built.and_then(|b| b.build_id.clone());
    if md5 != j.new.md5 && crate::swap::txn::linked_to_prefix(j) {
        r.push_fix(
            "torch",
            Status::Fail,
            format!(
                "{} has MD5 {md5}, transaction {} installed {}: it is the same file as the prefix's {}, which was changed after the install",
                torch.target.display(),
                j.id,
                j.new.md5,
                j.build.library.display()
            ),
            "`rdna1-patch rollback` puts torch's original back from its backup; then `rdna1-patch install --into-torch` installs the prefix as it is now",
        );
    } else if md5 != j.new.md5 {
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

pub(super) fn check_links(library: &Path, torch: Option<&Torch>, r: &mut CheckReport) {
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
                "{} {} needs {}",
                crate::output::all(deps.len(), "library", "libraries"),
                library.display(),
                if deps.len() == 1 {
                    "resolves"
                } else {
                    "resolve"
                }
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
                "{} {}; none is a second copy of a library in {}",
                crate::output::all(deps.len(), "library", "libraries"),
                if deps.len() == 1 {
                    "resolves"
                } else {
                    "resolve"
                },
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
