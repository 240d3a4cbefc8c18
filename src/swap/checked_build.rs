//! The build `install` puts into torch, checked before anything is
//! touched: its prefix against MD5SUMS and its records, its library's ELF
//! and SONAME, and its ROCm against torch's. Shared by the MIOpen and the
//! rocBLAS install.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::elf::{self, Library};
use crate::error::hint;
use crate::fsutil;
use crate::prefix::{OpenError, Prefix, Provenance};
use crate::torch::{self, Torch};
use crate::ui::Ui;

/// A build in a prefix that checks out.
pub struct Build {
    pub prefix: PathBuf,
    pub provenance: Provenance,
    pub library: PathBuf,
    /// The library's MD5, as MD5SUMS has it and the check found it.
    pub md5: String,
    pub elf: Library,
    /// The library's stamp when this run wrote it and took `md5` of the
    /// bytes written (the in-place route); None for a build read back.
    pub written: Option<fsutil::Stamp>,
}

impl Build {
    /// The ROCm version the library was built against.
    pub fn rocm(&self) -> &str {
        let r = &self.provenance.rocm;
        r.found.as_deref().unwrap_or(&r.version)
    }
}

/// The prefix's records are readable, every file matches MD5SUMS, and the
/// library is an x86-64 shared object with the SONAME the build declared.
pub fn check_build(prefix: &Path, jobs: usize) -> Result<Build> {
    check_build_of(prefix, jobs, "miopen")
}

/// [`check_build`] of a build of `component`, whose command the help names.
pub fn check_build_of(prefix: &Path, jobs: usize, component: &str) -> Result<Build> {
    let build = crate::shell::tool(["build", component]); // the help's command
    let opened = Prefix::open(prefix).map_err(|e| match e {
        OpenError::Provenance(e) => hint(
            format!("no usable build: {e:#}"),
            format!("run `{build}` first, or point --prefix at the prefix it installed to"),
        ),
        OpenError::Md5sums(e, _) => e,
    })?;
    if let Err(list) = opened.check(jobs) {
        return Err(hint(
            format!(
                "the build in {} does not match its MD5SUMS:\n  {}",
                prefix.display(),
                list.join("\n  ")
            ),
            format!(
                "rebuild and reinstall it with `{build}` (a no-op build reinstalls the prefix from the build dir)"
            ),
        ));
    }
    let Prefix {
        provenance,
        entries,
        ..
    } = opened;
    if provenance.library.path.is_empty() {
        anyhow::bail!(
            "the build in {} installed no {}",
            prefix.display(),
            provenance.library.soname
        );
    }
    let library = prefix.join(&provenance.library.path);
    let elf = elf::read(&library)?;
    elf.check_shared_object(&library, &provenance.library.soname)?;
    let md5 = entries
        .iter()
        .find(|e| e.path == provenance.library.path)
        .map(|e| e.md5.clone())
        .with_context(|| {
            format!(
                "the build in {} does not list {} in its MD5SUMS",
                prefix.display(),
                provenance.library.path
            )
        })?;
    Ok(Build {
        prefix: prefix.to_owned(),
        provenance,
        library,
        md5,
        elf,
        written: None,
    })
}

/// The build's ROCm major.minor must be torch's; a patch level that differs
/// is only worth a warning.
pub fn check_versions(build: &Build, torch: &Torch, force: bool, ui: &Ui) -> Result<()> {
    let (ours, theirs) = (build.rocm(), torch.rocm());
    if crate::version::major_minor(ours) != crate::version::major_minor(theirs) {
        let msg = format!(
            "the build is for ROCm {ours} but torch {} is built for {}: a library built for another ROCm major.minor crashes with memory faults that look like GPU bugs",
            torch.version,
            torch.rocm_label()
        );
        if !force {
            return Err(hint(
                msg,
                format!(
                    "build with a profile for ROCm {} (`rdna1-patch profiles list`), or install a torch for ROCm {}; --force installs anyway",
                    crate::version::major_minor(theirs),
                    crate::version::major_minor(ours)
                ),
            ));
        }
        ui.warn(format!("{msg} (installing anyway: --force)"));
        return Ok(());
    }
    let ours_patch = ours
        .split(['.', '-'])
        .nth(2)
        .and_then(|p| p.parse::<u32>().ok());
    let theirs_patch = match &torch.layout {
        torch::Layout::Bundled | torch::Layout::System(_) => torch::rocm_patch(&torch.version),
        torch::Layout::RocmSdk(sdk) => sdk.version.split('.').nth(2).and_then(|p| p.parse().ok()),
    };
    if let (Some(a), Some(b)) = (ours_patch, theirs_patch)
        && a != b
    {
        ui.warn(format!(
            "the build is for ROCm {ours}, torch {} for ROCm {}.{b}: same major.minor, so this usually works",
            torch.version,
            crate::version::major_minor(ours)
        ));
    }
    Ok(())
}
