//! What fails in the user's stack, known before anything is decided: the
//! libMIOpen torch loads (its original, when a fix of ours is in place),
//! the compiler MIOpen loads beside it, the card's target from the KFD
//! topology, and each batch-norm kernel's verdict from compiling it
//! (`verdict`). Established once per command and handed to what decides.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::comgr::Comgr;
use crate::error::hint;
use crate::swap::torch::Torch;
use crate::ui::Ui;
use crate::verdict::{self, Compiler, Judgement, Outcome};

pub struct Diagnosis {
    /// The library judged.
    pub library: PathBuf,
    /// The target judged for, and why that one.
    pub target: String,
    pub target_from: String,
    /// The compiler MIOpen loads; None when torch has none beside it.
    pub compiler: Option<Comgr>,
    /// Where the compiler was looked for.
    pub looked_in: Vec<PathBuf>,
    /// The verdicts; None without a compiler.
    pub judgement: Option<Judgement>,
}

/// The target to judge for: the RDNA1 card of this machine, else gfx1010.
pub fn target(sysfs: &Path) -> (String, String) {
    match crate::gpu::rdna1_targets(sysfs).into_iter().next() {
        Some(t) => (t, "the card in this machine".into()),
        None => (
            "gfx1010".into(),
            "no RDNA1 card in the KFD topology: judged for gfx1010".into(),
        ),
    }
}

/// Judge `library` (torch's original MIOpen) for this machine's card,
/// through the comgr beside torch's MIOpen.
pub fn diagnose(torch: &Torch, library: &Path, sysfs: &Path) -> Result<Diagnosis> {
    let (target, target_from) = target(sysfs);
    let looked_in = torch.runtime_dirs();
    let compiler = match crate::comgr::find(&looked_in) {
        Some(path) => Some(Comgr::open(&path)?),
        None => None,
    };
    let judgement = match &compiler {
        Some(c) => {
            let bytes = crate::elf::read_file(library)?;
            let judged = verdict::judge(c, &bytes, &target).map_err(|e| {
                e.context(format!(
                    "{} is not a library whose kernel texts can be read",
                    library.display()
                ))
            })?;
            Some(judged)
        }
        None => None,
    };
    Ok(Diagnosis {
        library: library.to_owned(),
        target,
        target_from,
        compiler,
        looked_in,
        judgement,
    })
}

impl Diagnosis {
    pub fn compiler(&self) -> Option<&dyn Compiler> {
        self.compiler.as_ref().map(|c| c as &dyn Compiler)
    }

    /// One line per kernel: "MIOPEN_KERNEL_X: fails at the DPP reduction
    /// (fp32 NCHW: ...)".
    pub fn lines(&self) -> Vec<String> {
        let Some(j) = &self.judgement else {
            return Vec::new();
        };
        j.kernels
            .iter()
            .map(|k| {
                let left = match k.left_out.len() {
                    0 => String::new(),
                    n => format!("; {n} case(s) fail for {} too, left out", verdict::CONTROL),
                };
                format!("{}: {}{left}", k.name, k.verdict.describe())
            })
            .collect()
    }

    /// The stack's verdict in a line, for the target judged.
    pub fn summary(&self) -> String {
        let Some(j) = &self.judgement else {
            return "not compiled: no compiler library beside torch's MIOpen".into();
        };
        let failing = j.failing().count();
        format!(
            "{failing} of {} batch-norm kernels of {} fail for {} ({}), through {} ({} compiles)",
            j.kernels.len(),
            self.library.display(),
            self.target,
            self.target_from,
            j.compiler,
            j.compiles
        )
    }

    /// The error for a stack the fix cannot help, or none.
    pub fn refusal(&self) -> Option<anyhow::Error> {
        let j = self.judgement.as_ref()?;
        match j.outcome() {
            Outcome::NotFixable { kernel, error } => Some(hint(
                format!(
                    "batch norm of {} is not fixable here: {kernel} {error} for {}, and not at the DPP reduction the fix removes; nothing was changed",
                    self.library.display(),
                    self.target
                ),
                "this needs more than the in-place fix: build the profile from source (`rdna1-patch build miopen`), and report the kernel and its error",
            )),
            Outcome::NoKernels => Some(hint(
                format!(
                    "{} embeds no batch-norm kernel text; nothing was changed",
                    self.library.display()
                ),
                "it is not a MIOpen whose batch norm this fix knows",
            )),
            Outcome::Fixable | Outcome::NothingToFix => None,
        }
    }

    pub fn nothing_to_fix(&self) -> bool {
        self.judgement
            .as_ref()
            .is_some_and(|j| j.outcome() == Outcome::NothingToFix)
    }

    /// Say the diagnosis, and make the fix it calls for in memory, proven
    /// by compiling: None when there is nothing to fix (said, exit 0).
    pub fn plan_fix(&self, unproven: bool, ui: &Ui) -> Result<Option<crate::inplace::Planned>> {
        for line in self.lines() {
            ui.stage("Kernel", line);
        }
        ui.stage("Diagnosis", self.summary());
        if self.compiler.is_none() && !unproven {
            return Err(self.no_compiler());
        }
        if let Some(e) = self.refusal() {
            return Err(e);
        }
        if self.nothing_to_fix() {
            ui.stage(
                "Nothing",
                format!(
                    "to fix: every batch-norm kernel of {} compiles for {}; torch was left as it is",
                    self.library.display(),
                    self.target
                ),
            );
            return Ok(None);
        }
        let planned = crate::inplace::plan(&self.library, self.compiler())?;
        if self.compiler.is_none() {
            ui.warn("--unproven: the fix is installed without a compile to prove it");
        }
        Ok(Some(planned))
    }

    /// The error for no compiler, unless an unproven fix was asked for.
    pub fn no_compiler(&self) -> anyhow::Error {
        let dirs: Vec<String> = self
            .looked_in
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        hint(
            format!(
                "no compiler library (libamd_comgr.so*) beside torch's MIOpen ({}), so whether its batch norm fails, and whether a fix works, cannot be proven; nothing was changed",
                dirs.join(", ")
            ),
            "torch bundles comgr with its MIOpen (reinstall torch if it is missing), a system ROCm has one (its lib dir on LD_LIBRARY_PATH); or pass --unproven to install the fix uncompiled, which the provenance and `status` then say",
        )
    }
}
