//! Make the patched library load torch's bundled runtimes, not a second copy
//! from /opt/rocm: two HIP runtimes in one process is a known way to get
//! memory faults. The edit is patchelf's, the ecosystem's tool for it.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::elf::{self, Library};
use crate::error::hint;

/// The edits that fit a library to a torch/lib directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Relink {
    /// (as built, as bundled), e.g. ("libamdhip64.so.6", "libamdhip64.so").
    pub replace_needed: Vec<(String, String)>,
    /// The SONAME of the library it replaces, so the loader sees one MIOpen.
    pub soname: Option<String>,
    pub runpath: String,
}

pub const ORIGIN: &str = "$ORIGIN";

/// The run path libtorch_hip.so gets so that torch/lib comes first.
pub fn edited_run_path(old: Option<&str>) -> String {
    match old.filter(|o| !o.is_empty()) {
        Some(o) => format!("{ORIGIN}:{o}"),
        None => ORIGIN.to_owned(),
    }
}

/// Plan the edits for `lib` going into `lib_dir` in place of `original`.
pub fn plan(lib: &Library, original: Option<&Library>, lib_dir: &Path) -> Result<Relink> {
    let bundled = crate::swap::linker::bundled_names(lib_dir)?;
    let mut replace_needed = Vec::new();
    for needed in &lib.needed {
        if bundled.contains(needed) {
            continue;
        }
        let stem = elf::stem(needed);
        // The shortest name is the one the wheel's own libraries link to.
        if let Some(b) = bundled
            .iter()
            .filter(|b| elf::stem(b) == stem)
            .min_by_key(|b| b.len())
        {
            replace_needed.push((needed.clone(), b.clone()));
        }
    }
    Ok(Relink {
        replace_needed,
        soname: original
            .and_then(|o| o.soname.clone())
            .filter(|s| lib.soname.as_ref() != Some(s)),
        runpath: ORIGIN.to_owned(),
    })
}

impl Relink {
    /// Edit `file` in place, one patchelf run per edit: patchelf 0.14
    /// (Debian 12) garbles SONAME and RUNPATH when given several at once.
    pub fn apply(&self, file: &Path) -> Result<()> {
        let mut edits: Vec<Vec<OsString>> = Vec::new();
        for (from, to) in &self.replace_needed {
            edits.push(vec!["--replace-needed".into(), from.into(), to.into()]);
        }
        if let Some(s) = &self.soname {
            edits.push(vec!["--set-soname".into(), s.into()]);
        }
        edits.push(vec!["--set-rpath".into(), (&self.runpath).into()]);
        for mut args in edits {
            args.push(file.into());
            patchelf(&args)?;
        }
        let after = elf::read(file).context("re-reading the relinked library")?;
        let mut wrong = Vec::new();
        for (from, to) in &self.replace_needed {
            if after.needed.contains(from) || !after.needed.contains(to) {
                wrong.push(format!("NEEDED {:?}", after.needed));
            }
        }
        if self.soname.is_some() && after.soname != self.soname {
            wrong.push(format!("SONAME {:?}", after.soname));
        }
        if after.runpath != [self.runpath.clone()] {
            wrong.push(format!("RUNPATH {:?}", after.runpath));
        }
        if !wrong.is_empty() {
            bail!(
                "patchelf did not make the edits asked of it on {}: {}",
                file.display(),
                wrong.join(", ")
            );
        }
        Ok(())
    }

    /// One line for the user.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .replace_needed
            .iter()
            .map(|(a, b)| format!("NEEDED {a} -> {b}"))
            .collect();
        if let Some(s) = &self.soname {
            parts.push(format!("SONAME -> {s}"));
        }
        parts.push(format!("RUNPATH -> {}", self.runpath));
        parts.join(", ")
    }
}

/// Set `file`'s run path to `path`, as a DT_RPATH when `rpath` (the kind
/// the file had: RPATH is searched before LD_LIBRARY_PATH, RUNPATH
/// after), and read it back.
pub fn set_run_path(file: &Path, path: &str, rpath: bool) -> Result<()> {
    let mut args: Vec<OsString> = vec!["--set-rpath".into(), path.into()];
    if rpath {
        args.push("--force-rpath".into());
    }
    args.push(file.into());
    patchelf(&args)?;
    let after = elf::read_dynamic(file).context("re-reading the edited library")?;
    let got = if rpath { after.rpath } else { after.runpath };
    if got.as_deref() != Some(path) {
        bail!(
            "patchelf did not set the run path of {} to {path}: it reads {got:?}",
            file.display()
        );
    }
    Ok(())
}

/// The system route's copy of `library`, staged at `to`, with the run
/// path a copy beside the system's `sys.library` needs (that library's
/// directory first, so that what it needs resolves as the system's did,
/// and of the kind the system's file has); the run path.
pub fn copy_beside(library: &Path, sys: &crate::torch::System, to: &Path) -> Result<String> {
    crate::fsutil::copy_synced(library, to, 0o755)?;
    let own = elf::read_dynamic(&sys.library)?;
    let kind_rpath = own.runpath.is_none() && own.rpath.is_some();
    let run_path =
        crate::torch::system::copy_run_path(&sys.library, own.runpath.or(own.rpath).as_deref());
    set_run_path(to, &run_path, kind_rpath)?;
    Ok(run_path)
}

/// libtorch_hip.so with `$ORIGIN` ahead in its run path, staged at `to`,
/// when torch/lib is not searched first (None: it needs no edit, or a
/// copy of ours already had it made).
pub fn hip_with_origin<'a>(sys: &crate::torch::System, to: &'a Path) -> Result<Option<&'a Path>> {
    if sys.origin_first || sys.copy.is_some() {
        return Ok(None);
    }
    crate::fsutil::copy_synced(&sys.hip, to, 0o755)?;
    set_run_path(to, &edited_run_path(sys.run_path.as_deref()), sys.rpath)?;
    Ok(Some(to))
}

fn patchelf(args: &[OsString]) -> Result<()> {
    // Run from an absolute PATH entry only, and as root only from one no
    // one else can change (`owner::find_program`).
    let Some(program) = crate::owner::find_program("patchelf") else {
        let where_ = match crate::owner::is_root() {
            true => "in a PATH directory only root can change",
            false => "in PATH (its absolute directories)",
        };
        return Err(hint(
            format!("cannot run patchelf: there is none {where_}"),
            "install patchelf (Debian/Ubuntu: sudo apt install patchelf), or pass --no-relink to install the library as built",
        ));
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    let out = crate::proc::helper(cmd).map_err(|e| {
        hint(
            format!("cannot run patchelf: {e:#}"),
            "install patchelf (Debian/Ubuntu: sudo apt install patchelf), or pass --no-relink to install the library as built",
        )
    })?;
    if !out.status.success() {
        bail!("patchelf {:?} failed: {}", args, out.stderr.trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_paths() {
        assert_eq!(edited_run_path(None), "$ORIGIN");
        assert_eq!(
            edited_run_path(Some("/opt/rocm/lib")),
            "$ORIGIN:/opt/rocm/lib"
        );
    }
}
