//! A torch with no MIOpen of its own, whose libtorch_hip.so loads the
//! system's (AMD's ROCm packages under /opt/rocm, a distribution's
//! libmiopen1): what it loads, from where, and who owns it. The system
//! file is only ever read; the route adds a fixed copy where
//! libtorch_hip.so looks first (`swap::txn::system`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::hint;
use crate::packages::{self, Owner};

/// A torch that loads a libMIOpen from outside itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct System {
    /// The system's library, by its real path: what the fix is made from.
    pub library: PathBuf,
    /// The name libtorch_hip.so needs (DT_NEEDED), e.g. libMIOpen.so.1:
    /// the copy's name in torch/lib.
    pub needed: String,
    /// torch/lib/libtorch_hip.so.
    pub hip: PathBuf,
    /// Its run path as written, and whether it is a DT_RPATH (searched
    /// before LD_LIBRARY_PATH) rather than a DT_RUNPATH.
    pub run_path: Option<String>,
    pub rpath: bool,
    /// torch's lib dir comes first in that run path: a copy beside
    /// libtorch_hip.so is loaded with no edit.
    pub origin_first: bool,
    /// The fixed copy torch loads now (our install), if any.
    pub copy: Option<PathBuf>,
    /// Who owns the system library.
    pub owner: Owner,
}

impl System {
    /// The directory the system library lies in: the copy's run path.
    pub fn dir(&self) -> &Path {
        self.library.parent().unwrap_or(Path::new("/"))
    }

    /// How the copy is reached: "torch/lib is first in libtorch_hip.so's
    /// RUNPATH" or "libtorch_hip.so's RUNPATH gains $ORIGIN".
    pub fn how(&self) -> String {
        let kind = if self.rpath { "RPATH" } else { "RUNPATH" };
        let was = self.run_path.as_deref().unwrap_or("(none)");
        if self.origin_first {
            format!(
                "libtorch_hip.so's {kind} {was} searches torch/lib first: the copy goes there, libtorch_hip.so is not edited"
            )
        } else {
            format!(
                "libtorch_hip.so's {kind} {was} does not search torch/lib first: the copy goes there and the {kind} gains $ORIGIN ahead (patchelf, journaled)"
            )
        }
    }
}

/// Who owns `library`, for the user: its package, or, when no package
/// manager claims it, who could change it (the owners along its path and
/// any group or world write bit): the file is only read either way.
pub fn describe_owner(owner: &Owner, library: &Path) -> String {
    if owner.package().is_some() {
        return owner.describe();
    }
    let who = match crate::owner::Writers::of(library) {
        Ok(w) => match w.others_than(None) {
            others if others.is_empty() => "only root can change it".to_owned(),
            others => format!("{} can change it", crate::owner::describe(&others)),
        },
        Err(e) => format!("cannot tell who can change it: {e}"),
    };
    format!("{}; {who}", owner.describe())
}

/// The run path the copy gets: the system library's directory first,
/// then its own entries with `$ORIGIN` read as that directory, so that
/// everything it needs resolves where it did.
pub fn copy_run_path(system: &Path, own: Option<&str>) -> String {
    let dir = system
        .parent()
        .unwrap_or(Path::new("/"))
        .display()
        .to_string();
    let mut out = vec![dir.clone()];
    for e in own.unwrap_or("").split(':').filter(|e| !e.is_empty()) {
        let e = e.replace("${ORIGIN}", &dir).replace("$ORIGIN", &dir);
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out.join(":")
}

fn first_is_origin(run_path: Option<&str>, lib_dir: &Path) -> bool {
    let Some(first) = run_path.and_then(|r| r.split(':').next()) else {
        return false;
    };
    let first = first.trim_end_matches('/');
    first == "$ORIGIN"
        || first == "${ORIGIN}"
        || first == "$ORIGIN/."
        || matches!(
            (Path::new(first).canonicalize(), lib_dir.canonicalize()),
            (Ok(a), Ok(b)) if a == b
        )
}

/// What torch's libtorch_hip.so loads by a name starting with `stem`
/// (`libMIOpen.so`, `librocblas.so`), as the loader would find it: read
/// from the ELF files, nothing run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loads {
    /// The name libtorch_hip.so needs (DT_NEEDED), e.g. librocblas.so.4.
    pub needed: String,
    /// The file the loader takes for it, by its real path.
    pub loaded: PathBuf,
    /// torch/lib/libtorch_hip.so.
    pub hip: PathBuf,
    /// Its run path as written, and whether it is a DT_RPATH.
    pub run_path: Option<String>,
    pub rpath: bool,
    /// torch's lib dir comes first in that run path.
    pub origin_first: bool,
}

impl Loads {
    /// torch/lib/<needed>: the bundled file's name, or where a copy goes.
    pub fn in_lib(&self) -> PathBuf {
        self.hip
            .parent()
            .unwrap_or(Path::new("/"))
            .join(&self.needed)
    }

    /// The system layout's record for `library` (the system's file, only
    /// read) and `copy` (ours in torch/lib, when installed).
    pub fn system(self, library: PathBuf, copy: Option<PathBuf>) -> System {
        System {
            owner: packages::owner(&library),
            library,
            needed: self.needed,
            hip: self.hip,
            run_path: self.run_path,
            rpath: self.rpath,
            origin_first: self.origin_first,
            copy,
        }
    }
}

/// What torch's libtorch_hip.so loads by `stem`; None when torch has no
/// libtorch_hip.so, it needs no such library, or nothing is found for it.
pub fn loads(torch_dir: &Path, stem: &str) -> Result<Option<Loads>> {
    let lib_dir = torch_dir.join("lib");
    let hip = lib_dir.join("libtorch_hip.so");
    if !hip.is_file() {
        return Ok(None);
    }
    let dynamic = crate::elf::read_dynamic(&hip)?;
    let Some(needed) = dynamic.needed.iter().find(|n| n.starts_with(stem)).cloned() else {
        return Ok(None);
    };
    let deps = crate::loader::resolve(&hip, &[])?;
    let Some(loaded) = deps
        .into_iter()
        .find(|d| d.name == needed)
        .and_then(|d| d.path)
    else {
        return Ok(None);
    };
    let run_path = dynamic.runpath.clone().or(dynamic.rpath.clone());
    Ok(Some(Loads {
        loaded: loaded.canonicalize().unwrap_or(loaded),
        origin_first: first_is_origin(run_path.as_deref(), &lib_dir),
        rpath: dynamic.runpath.is_none() && dynamic.rpath.is_some(),
        run_path,
        needed,
        hip,
    }))
}

/// What torch's libtorch_hip.so loads as its MIOpen when that is not
/// torch's own: the system's file, or our fixed copy of it (whose run
/// path names the system's directory). None when torch has no
/// libtorch_hip.so, it needs no MIOpen, or torch's own is what it loads.
pub fn detect(torch_dir: &Path) -> Result<Option<System>> {
    let Some(l) = loads(torch_dir, "libMIOpen.so")? else {
        return Ok(None);
    };
    if !l.loaded.starts_with(torch_dir) {
        let library = l.loaded.clone();
        return Ok(Some(l.system(library, None)));
    }
    // Ours only: a file named as torch needs it, carrying our markers.
    if l.loaded != l.in_lib()
        || !crate::checksum::scan_file(&l.loaded, crate::kernel_text::MARKER_PREFIX.as_bytes())
            .is_ok_and(|k| k.holds)
    {
        return Ok(None);
    }
    let library = source_of_copy(&l.loaded, &l.needed)?;
    let copy = l.loaded.clone();
    Ok(Some(l.system(library, Some(copy))))
}

/// The system library a copy of ours was made from: the first directory
/// of its run path (`copy_run_path`) holding the name torch needs.
fn source_of_copy(copy: &Path, needed: &str) -> Result<PathBuf> {
    let d = crate::elf::read_dynamic(copy)?;
    let run_path = d.runpath.or(d.rpath).unwrap_or_default();
    run_path
        .split(':')
        .filter(|e| Path::new(e).is_absolute())
        .map(|e| Path::new(e).join(needed))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
        .with_context(|| {
            hint(
                format!(
                    "{} is rdna1-patch's fixed copy of a system MIOpen, but no {needed} is left in the directories its run path names ({run_path})",
                    copy.display()
                ),
                "the system's MIOpen was removed: reinstall its package, or `rdna1-patch rollback` to take the copy away",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_paths() {
        assert_eq!(
            copy_run_path(
                Path::new("/opt/rocm/lib/libMIOpen.so.1"),
                Some("$ORIGIN/../lib:$ORIGIN")
            ),
            "/opt/rocm/lib:/opt/rocm/lib/../lib"
        );
        assert_eq!(
            copy_run_path(Path::new("/usr/lib/x86_64-linux-gnu/libMIOpen.so.1"), None),
            "/usr/lib/x86_64-linux-gnu"
        );
        assert!(first_is_origin(
            Some("$ORIGIN:/opt/rocm/lib"),
            Path::new("/nonexistent")
        ));
        assert!(!first_is_origin(
            Some("/opt/rocm/lib:$ORIGIN"),
            Path::new("/nonexistent")
        ));
        assert!(!first_is_origin(None, Path::new("/nonexistent")));
    }
}
