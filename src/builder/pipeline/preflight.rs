//! What a build checks before it fetches or writes anything: the tools
//! and the ROCm line (a missing tool is said before the long fetch, a
//! ROCm of another line than torch's before an hour of compiling), the
//! work dirs reached without a symlink, and a prefix that is not another
//! component's.

use super::*;

impl BuildPlan<'_> {
    /// A prefix holding another component's build (a profile's own
    /// `prefix`, or --prefix) is not this build's to replace.
    pub(super) fn refuse_other_component(&self) -> Result<()> {
        let Ok(there) = Provenance::read(&self.prefix) else {
            return Ok(());
        };
        if there.component == self.opts.component {
            return Ok(());
        }
        Err(hint(
            format!(
                "the prefix {} holds a {} build (profile {}); installing {} there would replace it; nothing was built",
                self.prefix.display(),
                there.component,
                there.profile,
                self.opts.component
            ),
            format!(
                "give this build a prefix of its own: --prefix DIR (e.g. {}-{})",
                self.prefix.display(),
                self.opts.component
            ),
        ))
    }

    /// Every dir of this build that the tool writes must be reached from
    /// the work dir without a symlink.
    pub(super) fn check_work_dirs(&self) -> Result<()> {
        for (dir, what) in [
            (&self.dirs.src, "checkout"),
            (&self.dirs.build, "build dir"),
            (&self.dirs.logs, "log dir"),
            (&self.dirs.state, "build state"),
        ] {
            self.opts.work_dir.check_confined(dir, what)?;
        }
        Ok(())
    }

    /// The project's directory is the origin's content: patches and CMake
    /// may go there only when no symlink in it leads elsewhere.
    pub(super) fn check_tree(&self) -> Result<()> {
        self.opts
            .work_dir
            .check_confined(&self.tree, "project directory")?;
        if !self.tree.is_dir() {
            return Err(hint(
                format!(
                    "{} {} has no directory {}",
                    self.component.url,
                    self.component.pin(),
                    self.component.subdir.as_deref().unwrap_or(".")
                ),
                "check the profile's `subdir`: it names the project's directory inside the repository",
            ));
        }
        Ok(())
    }

    /// The tools configure and build need, with warnings about what differs
    /// from the profile.
    pub(super) fn toolchain(&self, ui: &Ui) -> Result<tools::Toolchain> {
        let mut t = self.preflight()?;
        if let Some((_, env)) = &self.tensile_tools {
            t.env = env.clone();
        }
        if t.generator_fallback {
            ui.warn(format!(
                "{} is not installed; using {} instead",
                self.generator.cmake_name(),
                t.generator.cmake_name()
            ));
        }
        match &t.rocm.version {
            Some(v) if crate::version::major_minor(v) != crate::version::major_minor(&self.opts.profile.rocm.version) => {
                ui.warn(format!(
                    "ROCm at {} is {v}, the profile targets {}; the library may not match your torch",
                    self.rocm.display(),
                    self.opts.profile.rocm.version
                ))
            }
            None => ui.warn(format!("cannot tell the ROCm version at {}", self.rocm.display())),
            _ => {}
        }
        Ok(t)
    }

    /// What the build tells Tensile, for the plan and the stages.
    pub(super) fn tensile_note(&self) -> Option<String> {
        let (dir, _) = self.tensile_tools.as_ref()?;
        Some(format!(
            "assembler and offload bundler from HIP's clang in {} ({} has no llvm/bin, where Tensile looks)",
            dir.display(),
            self.rocm.display()
        ))
    }

    /// The tools configure and build need, and a ROCm some profile is for:
    /// one no profile serves (Debian 12's 5.2) would fail most of an hour
    /// in, and one of another line than the torch's would make a library
    /// `install` refuses an hour later, so either stops the build before
    /// the fetch.
    pub(super) fn preflight(&self) -> Result<tools::Toolchain> {
        self.check_served()?;
        let t = tools::preflight(self.generator, &self.rocm, &self.defines)?;
        self.check_requires()?;
        let Some(v) = t.rocm.version.as_deref() else {
            return Ok(t);
        };
        let line = crate::version::major_minor(v);
        match &self.opts.torch {
            Some(torch) if crate::version::major_minor(&torch.rocm) != line => Err(hint(
                format!(
                    "ROCm {v} at {} would build {} for ROCm {line}, but {} is for ROCm {}: `install --into-torch` refuses a library of another ROCm major.minor (the mix crashes with memory faults)",
                    self.rocm.display(),
                    self.project(),
                    torch.label,
                    crate::version::major_minor(&torch.rocm)
                ),
                format!(
                    "build with ROCm {} (AMD's packages put it at /opt/rocm; or --rocm DIR), or compile nothing: pull a published build (`rdna1-patch trust KEY`, then `rdna1-patch build --from REF`); to build for another torch anyway, name the profile with --profile",
                    crate::version::major_minor(&torch.rocm)
                ),
            )),
            _ => Ok(t),
        }
    }
}
