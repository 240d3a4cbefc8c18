//! `--route rocblas`: kill -9 in `install rocblas --into-torch`, in an
//! install over our own (as built, not relinked) and in rollback, on a
//! torch that bundles a rocBLAS: its library (padded to `--size-mb`) and a
//! Tensile directory of 300 files (as many MiB again). After each kill
//! torch holds one whole set or the halves of two (between the two
//! renames, which the next run finishes; counted); after the next run,
//! whichever it is, one whole set, the one the journals say.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use rdna1_patch::checksum::md5_file;
use rdna1_patch::swap::txn::{Journal, Journals, tree};
use rdna1_testkit::{FakeTorch, RocblasFixture};

use super::{Base, Known, Op, Route};
use crate::run;

/// A set as torch holds it: its library's MD5 and its directory's digest.
type Set = (String, String);

pub(super) struct Rocblas {
    base: Base,
    prefix: PathBuf,
    torch: FakeTorch,
    known: Known<Set>,
    /// Kills that left the halves of two sets.
    halves: u32,
}

/// The sandbox: the rocblas-mini fixture built for gfx1012 (its library
/// padded to `size_mb`), and a torch bundling an older build's library as
/// torch/lib/librocblas.so (padded alike) with 300 Tensile files.
pub(super) fn sandbox(dir: &Path, bin: PathBuf, size_mb: u64) -> Result<Rocblas> {
    let rb = RocblasFixture::create(&dir.join("rb"));
    run(rdna1_testkit::binary_with_gpus(&bin, "rx5500xt-gfx1012")
        .current_dir(dir)
        .args(rb.build_args())
        .env("HOME", dir.join("home"))
        .stderr(Stdio::null()))?;
    let (_, torch) = super::fake_torch(dir, "2.6.0+rocm6.4", "6.4.43484-123eb5128");
    let built = rb.prefix.join("lib/librocblas.so.4.4.1");
    let lib = torch.lib.join("librocblas.so");
    std::fs::copy(&built, &lib)?;
    run(Command::new("patchelf")
        .args(["--set-soname", "librocblas.so"])
        .arg(&lib))?;
    super::pad(&lib, size_mb << 20, 1)?;
    let l = torch.lib.display().to_string();
    let hip = rdna1_testkit::fat_library_linking(
        dir,
        &["gfx1012"],
        &[
            "-L",
            &l,
            "-lrocblas",
            "-lMIOpen",
            "-lamdhip64",
            "-Wl,-rpath,$ORIGIN",
        ],
    );
    std::fs::copy(hip, torch.lib.join("libtorch_hip.so"))?;
    let tensile = torch.lib.join("rocblas/library");
    std::fs::create_dir_all(&tensile)?;
    let each = ((size_mb << 20) / 300) as usize;
    for i in 0..300 {
        let f = tensile.join(format!(
            "TensileLibrary_Type_SS_Contraction_{i}_fallback.dat"
        ));
        crate::bench::measure::write_library_like(&f, each.max(4096))?;
    }
    // The new library as large, so that kills land inside its copies.
    super::pad(&built, size_mb << 20, 2)?;
    crate::bench::measure::rehash(&rb.prefix)?;
    let mut base = Base::new(dir, bin, "rx5500xt-gfx1012")?;
    base.title = "killtest --route rocblas";
    base.sizes = format!("a {size_mb} MiB library and 300 Tensile files of {size_mb} MiB");
    let mut sb = Rocblas {
        base,
        prefix: rb.prefix,
        torch,
        known: Known::new(Default::default()),
        halves: 0,
    };
    sb.known = Known::new(sb.set()?);
    Ok(sb)
}

impl Route for Rocblas {
    fn base(&self) -> &Base {
        &self.base
    }

    fn ops(&self) -> &'static [Op] {
        &[Op::Install, Op::InstallOver, Op::Rollback]
    }

    fn args(&self, op: Op, c: &mut Command) {
        if op == Op::Rollback {
            c.arg("rollback");
        } else {
            c.args(["install", "rocblas", "--into-torch", "--prefix"])
                .arg(&self.prefix);
        }
        if op == Op::InstallOver {
            c.arg("--no-relink");
        }
        c.arg("--state-dir")
            .arg(&self.base.state)
            .arg("--torch-dir")
            .arg(&self.torch.dir)
            .env("HOME", self.base.root.join("home"));
    }

    fn warmed(&mut self, op: Op) -> Result<()> {
        let now = self.set()?;
        self.known.warmed(op, now)
    }

    /// A whole set, or the halves of two (the one instant between the
    /// renames), never anything else.
    fn killed(&mut self, what: &str, _: &mut Vec<String>) -> Result<()> {
        let now = self.set()?;
        let sets = || self.known.0.iter().map(|(_, s)| s);
        let half = sets().any(|s| s.0 == now.0) && sets().any(|s| s.1 == now.1);
        match (self.known.name(&now), half) {
            (Some(_), _) => {}
            (None, true) => self.halves += 1,
            (None, false) => bail!("{what}: torch holds a library and a directory of no build"),
        }
        Ok(())
    }

    fn leftovers(&self, _: Op) -> Vec<PathBuf> {
        self.base
            .left_in(&[self.torch.lib.clone(), self.torch.lib.join("rocblas")])
    }

    fn as_journals_say(&self, what: &str, journals: &Journals) -> Result<()> {
        let set = |j: &Journal| {
            let digest = &j.set.as_ref().expect("a rocBLAS journal").new.digest;
            (j.new.md5.clone(), digest.clone())
        };
        self.known.as_journals_say(what, self.set()?, journals, set)
    }

    fn finish(&mut self, _: &mut Vec<String>) -> Result<bool> {
        Ok(self.set()? == *self.known.original())
    }

    fn noted(&self) -> Option<String> {
        let halves = self.halves;
        Some(format!(
            "left as two halves by a kill (finished by the next run): {halves}"
        ))
    }
}

impl Rocblas {
    /// What torch holds now.
    fn set(&self) -> Result<Set> {
        let lib = md5_file(&self.torch.lib.join("librocblas.so"))?;
        let dir = self.torch.lib.join("rocblas/library");
        Ok((lib, tree::record(&tree::read(&dir, 2)?).digest))
    }
}

/// What the rocBLAS route's kill test needs to build its fixture, said
/// before anything is built.
pub(super) fn needs() -> Result<()> {
    for tool in ["clang++", "patchelf", "cmake", "ninja"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .context("sh")?
            .status
            .success();
        if !found {
            bail!("the rocBLAS kill test builds the rocblas-mini fixture, which needs {tool}");
        }
    }
    Ok(())
}
