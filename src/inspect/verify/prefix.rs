//! What verify checks of the prefix: its files against MD5SUMS, the
//! patches' markers in the library, the GPU targets it was built for.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::VerifyRequest;
use crate::elf;
use crate::gpu;
use crate::inspect::checks::{Blocking, CheckReport, Status};
use crate::prefix::{OpenError, Prefix, Provenance};

pub(super) fn check_prefix(
    req: &VerifyRequest,
    r: &mut CheckReport,
) -> Option<(Provenance, PathBuf)> {
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
        Err(OpenError::Provenance(e)) if no_prefix_needed(req, &e, r) => return None,
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
pub(super) fn check_targets(prov: &Provenance, sysfs: &Path, r: &mut CheckReport) {
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

pub(super) fn check_markers(
    prov: &Provenance,
    library: &Path,
    bytes: &Result<Vec<u8>>,
    r: &mut CheckReport,
) {
    let declared: Vec<(&str, &str)> = prov
        .patches
        .iter()
        .filter_map(|p| p.marker.as_deref().map(|m| (p.name.as_str(), m)))
        .collect();
    if declared.is_empty() {
        // Whether the fix is in the library cannot be told: no pass.
        return r.push_breaks(
            "patches",
            Blocking::NotChecked,
            "not checked: no patch of the build declares a marker to look for in the library",
            "whether the patches are in the library: none declares a marker (see patches)",
            Some("give each patch of the profile a `Marker:` line, and build again (docs/patches.md, Adding a patch)".into()),
        );
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
                        "{} {} in {}'s read-only data",
                        crate::output::all(markers.len(), "marker", "markers"),
                        if markers.len() == 1 { "is" } else { "are" },
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

/// No prefix where none is needed: the battery judges a torch not yet
/// fixed too, and with nothing of ours installed (the diagnosis found
/// nothing to fix, or no install yet) --compile judges the torch's own
/// kernels. Said as a skip; true when so.
fn no_prefix_needed(req: &VerifyRequest, e: &anyhow::Error, r: &mut CheckReport) -> bool {
    let nothing_installed = !req.prefix_named && req.state.installed_prefix().is_none();
    let then = match (req.smoke, req.compile) {
        (true, _) => "--smoke judges the torch as it is",
        (false, true) => "--compile judges the torch's own kernels as they are",
        (false, false) => "`verify --compile` judges the torch's own kernels as they are",
    };
    let detail = if nothing_installed {
        // Not the default profile's prefix: a build the user's torch may
        // not need is not named.
        let what = match super::blas::installed(&req.state).is_empty() {
            true => "rdna1-patch install",
            false => "MIOpen of rdna1-patch's (rocBLAS's has its own row)",
        };
        format!(
            "no {what} in {} to check; {then}",
            req.state.root().display()
        )
    } else if req.smoke {
        format!(
            "{}: no prefix of rdna1-patch to check; {then}",
            crate::error::chain(e)
        )
    } else {
        return false;
    };
    r.push("prefix", Status::Skip, detail);
    true
}
