//! What verify checks of the system route: the chain from torch's
//! libtorch_hip.so to the fixed copy it loads and the system library that
//! copy was made from, which must be unchanged, by its SHA-256 and by its
//! package manager's own verify.

use crate::inspect::checks::{CheckReport, Status};
use crate::packages::{self, Manager};
use crate::prefix::Provenance;
use crate::swap::txn::{Journal, SystemRec};

pub(super) fn check(j: &Journal, s: &SystemRec, prov: &Provenance, r: &mut CheckReport) {
    check_source(j, s, prov, r);
    check_package(s, r);
    let hip = crate::elf::read_dynamic(&s.hip).ok();
    let copy = crate::elf::read_dynamic(&j.torch.target).ok();
    let run_path = |d: Option<crate::elf::Loadable>| {
        d.and_then(|d| d.runpath.or(d.rpath))
            .unwrap_or_else(|| "(none)".into())
    };
    r.push(
        "runpath",
        Status::Ok,
        format!(
            "{} searches {}{}; the copy {} searches {}",
            s.hip.display(),
            run_path(hip),
            match &s.edit {
                Some(e) => format!(
                    " (was {}, transaction {} added $ORIGIN)",
                    if e.before.is_empty() {
                        "(none)"
                    } else {
                        &e.before
                    },
                    j.id
                ),
                None => " (not edited)".into(),
            },
            j.torch.target.display(),
            run_path(copy)
        ),
    );
}

/// The system library must still be the file the fix was made from: a
/// package upgrade since leaves torch on a fix of the old library.
fn check_source(j: &Journal, s: &SystemRec, prov: &Provenance, r: &mut CheckReport) {
    let want = prov
        .in_place
        .as_ref()
        .map_or(s.sha256.as_str(), |p| p.source_sha256.as_str());
    match crate::swap::txn::source_changed(j) {
        None if want == s.sha256 => r.push(
            "source",
            Status::Ok,
            format!(
                "{} unchanged (SHA-256 {}): the system library the copy was made from, only ever read",
                s.library.display(),
                &s.sha256[..16.min(s.sha256.len())]
            ),
        ),
        None => r.push_fix(
            "source",
            Status::Fail,
            format!(
                "the prefix's fix was made from SHA-256 {want}, torch's copy (transaction {}) from {}",
                j.id, s.sha256
            ),
            "`rdna1-patch install --into-torch` makes the fix again and puts it in",
        ),
        Some((lib, now)) => r.push_fix(
            "source",
            Status::Fail,
            format!(
                "{} changed since the fix was made (a package upgrade?): it was SHA-256 {}, it is {now}; torch loads a fix of the old library",
                lib.display(),
                s.sha256
            ),
            "`rdna1-patch install --into-torch` takes the old copy out and fixes the library the system has now",
        ),
    }
}

fn check_package(s: &SystemRec, r: &mut CheckReport) {
    let Some((program, package)) = s.package.split_once(' ') else {
        let owner = packages::owner(&s.library);
        return r.push(
            "package",
            Status::Ok,
            format!(
                "{}: {} (its SHA-256 above is the check)",
                s.library.display(),
                crate::torch::system::describe_owner(&owner, &s.library)
            ),
        );
    };
    let manager = match program {
        "rpm" => Manager::Rpm,
        "pacman" => Manager::Pacman,
        _ => Manager::Dpkg,
    };
    match packages::verify(manager, package) {
        None => r.push(
            "package",
            Status::Ok,
            format!("{}: clean", manager.verify_command(package)),
        ),
        Some(said) => r.push_fix(
            "package",
            Status::Warn,
            format!("{}: {said}", manager.verify_command(package)),
            format!(
                "rdna1-patch only reads that package's files; reinstall it if they were changed (e.g. `apt install --reinstall {package}`)"
            ),
        ),
    }
}
