//! The user's stack, established once per command and handed down: the
//! torch (found, or why not), where the card is read from, and the
//! diagnosis of torch's MIOpen, made the first time a step asks and the
//! same one after. Each verb builds one at its top; the steps read it
//! instead of looking for torch or judging its kernels again (the tally
//! test holds them to that).

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::diagnosis::Diagnosis;
use crate::torch::{self, Locator, Torch};

pub struct Stack {
    /// How torch is looked for: --python, --torch-dir, else python3.
    pub locator: Locator,
    /// The torch found, or why none was.
    pub torch: Result<Torch>,
    /// Where the KFD topology is read from (`/sys`; tests give a
    /// recorded tree).
    pub sysfs: PathBuf,
    /// The targets asked for (doctor's --target): judged for in place of
    /// this machine's cards.
    pub asked: Vec<String>,
    /// The diagnosis, with the library it judged.
    diagnosis: OnceCell<(PathBuf, Diagnosis)>,
}

impl Stack {
    /// Look for torch, once.
    pub fn establish(locator: Locator, sysfs: PathBuf) -> Stack {
        let torch = torch::locate(&locator);
        Stack {
            locator,
            torch,
            sysfs,
            asked: Vec::new(),
            diagnosis: OnceCell::new(),
        }
    }

    /// The stack, judged for `targets` in place of this machine's cards.
    pub fn asking(self, targets: Vec<String>) -> Stack {
        Stack {
            asked: targets,
            ..self
        }
    }

    /// The diagnosis of `library` (torch's MIOpen, or the original one of
    /// ours replaced) for the card: made on the first ask, the same one
    /// after. A command judges one library; asking of another is a bug.
    pub fn diagnosis(&self, torch: &Torch, library: &Path) -> Result<&Diagnosis> {
        if let Some((judged, d)) = self.diagnosis.get() {
            anyhow::ensure!(
                judged == library,
                "one diagnosis a command: {} was judged, not {}",
                judged.display(),
                library.display()
            );
            return Ok(d);
        }
        let d = crate::diagnosis::diagnose(torch, library, &self.sysfs, &self.asked)?;
        Ok(&self.diagnosis.get_or_init(|| (library.to_owned(), d)).1)
    }
}

impl Stack {
    /// The stack, when torch was found; else the error that says why not,
    /// as the look gave it (its help line and exit status with it).
    pub fn with_torch(self) -> Result<Stack> {
        match self.torch {
            Err(e) => Err(e),
            Ok(t) => Ok(Stack {
                torch: Ok(t),
                ..self
            }),
        }
    }

    /// The torch found. A verb that needs one establishes it first
    /// ([`Stack::with_torch`]); asked of a stack without one, this says
    /// the look's error again.
    pub fn found(&self) -> Result<&Torch> {
        self.torch
            .as_ref()
            .map_err(|e| match crate::error::help(e) {
                Some(h) => crate::error::hint(format!("{e}"), h),
                None => anyhow::anyhow!("{e:#}"),
            })
    }
}
