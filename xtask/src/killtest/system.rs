//! `--route system`: kill -9 in install and rollback on the system route
//! (issue 44): a torch with no MIOpen of its own whose libtorch_hip.so
//! loads a "system" libMIOpen.so.1 through a fixed RUNPATH, so that
//! install adds a fixed copy to torch/lib and edits libtorch_hip.so. After
//! each kill the loader's answer (the crate's own resolver, as `import
//! torch` would load) must be the system file or a whole fixed copy, never
//! nothing, and the system file never changed; after the next run
//! libtorch_hip.so and the copy are what the journals say.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};
use rdna1_patch::checksum::md5_file;
use rdna1_patch::swap::linker;
use rdna1_patch::swap::txn::{Journals, State};
use rdna1_testkit::FakeTorch;

use super::{Base, Op, Route};
use crate::run;

const COMGR: &str = "/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2";

pub(super) struct System {
    base: Base,
    prefix: PathBuf,
    torch: FakeTorch,
    /// The system's library file, and its MD5.
    real: (PathBuf, String),
    /// libtorch_hip.so's MD5 as it was, and as install edits it.
    hip: [String; 2],
    /// The fixed copy's MD5, once the warm-up installed it.
    copy_md5: String,
}

/// The system route's kill test diagnoses through Debian 12's comgr.
pub(super) fn needs() -> Result<()> {
    if !Path::new(COMGR).exists() {
        bail!(
            "the system route's kill test diagnoses through Debian 12's comgr, {COMGR}: apt install libamd-comgr2"
        );
    }
    Ok(())
}

/// The sandbox: the fake runtime's MIOpen as the system's
/// libMIOpen.so.1.0.60400 (padded to `size_mb`), HIP beside it, Debian's
/// comgr; a torch for gfx1010 whose libtorch_hip.so has RUNPATH of that
/// directory only; an empty dpkg database.
pub(super) fn sandbox(dir: &Path, bin: PathBuf, size_mb: u64) -> Result<System> {
    let (_, torch) = super::fake_torch(dir, "2.9.1+rocm6.4", "6.4.43484-123eb5128");
    let sys = dir.join("opt/rocm-6.4.0/lib");
    std::fs::create_dir_all(&sys)?;
    let real = sys.join("libMIOpen.so.1.0.60400");
    std::fs::copy(torch.lib.join("libMIOpen.so"), &real)?;
    super::pad(&real, size_mb << 20, 0)?;
    run(Command::new("patchelf")
        .args(["--set-soname", "libMIOpen.so.1"])
        .arg(&real))?;
    std::os::unix::fs::symlink("libMIOpen.so.1.0.60400", sys.join("libMIOpen.so.1"))?;
    std::os::unix::fs::symlink("libMIOpen.so.1", sys.join("libMIOpen.so"))?;
    std::fs::rename(torch.lib.join("libamdhip64.so"), sys.join("libamdhip64.so"))?;
    std::fs::remove_file(torch.lib.join("libMIOpen.so"))?;
    std::os::unix::fs::symlink(COMGR, sys.join("libamd_comgr.so.2"))?;
    let s = sys.display().to_string();
    let rpath = format!("-Wl,-rpath,{s}");
    let built = rdna1_testkit::fat_library_linking(
        dir,
        &["gfx1010"],
        &["-L", &s, "-lMIOpen", "-lamdhip64", &rpath],
    );
    std::fs::copy(built, torch.lib.join("libtorch_hip.so"))?;
    std::fs::create_dir_all(dir.join("dpkg/info"))?;
    std::fs::write(dir.join("dpkg/status"), "")?;
    let mut base = Base::new(dir, bin, "no-gpu")?;
    base.title = "killtest --route system";
    base.sizes = format!("a {size_mb} MiB system library");
    let hip = md5_file(&torch.lib.join("libtorch_hip.so"))?;
    Ok(System {
        base,
        prefix: dir.join("prefix"),
        real: (real.canonicalize()?, md5_file(&real)?),
        torch,
        hip: [hip.clone(), hip],
        copy_md5: String::new(),
    })
}

impl Route for System {
    fn base(&self) -> &Base {
        &self.base
    }

    fn ops(&self) -> &'static [Op] {
        &[Op::Install, Op::Rollback]
    }

    fn args(&self, op: Op, c: &mut Command) {
        if op == Op::Install {
            c.args(["install", "--into-torch", "--profile", "rocm-6.4.3"])
                .arg("--prefix")
                .arg(&self.prefix);
        } else {
            c.arg("rollback");
        }
        c.arg("--state-dir")
            .arg(&self.base.state)
            .args(["--python", "python3"])
            .env("PYTHONPATH", self.base.root.join("site"))
            .env("HOME", self.base.root.join("home"))
            .env("DPKG_ADMINDIR", self.base.root.join("dpkg"));
    }

    fn warmed(&mut self, op: Op) -> Result<()> {
        if op == Op::Install {
            self.copy_md5 = md5_file(&self.copy())?;
            self.hip[1] = md5_file(&self.hip())?;
        } else if !self.holds(false)? {
            bail!("the warm-up rollback did not restore torch");
        }
        Ok(())
    }

    /// Never neither: the loader finds the system file or a whole copy.
    fn killed(&mut self, what: &str, _: &mut Vec<String>) -> Result<()> {
        match self.loads()? {
            Some(p) if p == self.real.0 => {}
            Some(p) if p == self.copy() && md5_file(&p)? == self.copy_md5 => {}
            other => bail!(
                "{what}: libtorch_hip.so loads {other:?}, neither the system's file nor the fixed copy"
            ),
        }
        if md5_file(&self.real.0)? != self.real.1 {
            bail!("{what}: the system's library changed");
        }
        Ok(())
    }

    fn leftovers(&self, _: Op) -> Vec<PathBuf> {
        self.base.left_in(std::slice::from_ref(&self.torch.lib))
    }

    fn as_journals_say(&self, what: &str, journals: &Journals) -> Result<()> {
        let installed = journals.list.iter().any(|j| j.state == State::Installed);
        if !self.holds(installed)? {
            bail!(
                "{what}: torch is not what the journals say (installed: {installed}, copy there: {})",
                self.copy().exists()
            );
        }
        Ok(())
    }

    fn finish(&mut self, _: &mut Vec<String>) -> Result<bool> {
        self.holds(false)
    }
}

impl System {
    fn hip(&self) -> PathBuf {
        self.torch.lib.join("libtorch_hip.so")
    }

    fn copy(&self) -> PathBuf {
        self.torch.lib.join("libMIOpen.so.1")
    }

    /// Whether torch is as install left it (libtorch_hip.so edited, the
    /// copy there) or, not `installed`, as it was.
    fn holds(&self, installed: bool) -> Result<bool> {
        let hip = &self.hip[usize::from(installed)];
        Ok(md5_file(&self.hip())? == *hip && self.copy().exists() == installed)
    }

    /// What libtorch_hip.so loads as libMIOpen.so.1 now.
    fn loads(&self) -> Result<Option<PathBuf>> {
        Ok(linker::resolve(&self.hip(), &[])?
            .into_iter()
            .find(|d| d.name == "libMIOpen.so.1")
            .and_then(|d| d.path)
            .map(|p| p.canonicalize().unwrap_or(p)))
    }
}
