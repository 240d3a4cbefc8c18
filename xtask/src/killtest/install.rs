//! The install route's kill test (the default): kill -9 in install,
//! install over our own install, rollback, publish (to an OCI layout dir)
//! and pull (`build --from` over an earlier pull), with a large library;
//! after each kill torch's library is one of the files an install can put
//! there and the earlier pulled prefix is whole.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Result, bail};
use rdna1_patch::checksum::md5_file;
use rdna1_patch::swap::txn::Journals;
use rdna1_testkit::{FakeTorch, Fixture};

use super::{Base, Known, Op, Route};
use crate::run;

pub(super) struct Install {
    base: Base,
    prefix: PathBuf,
    torch: FakeTorch,
    /// `build` as the fixture runs it, without a --prefix.
    build_args: Vec<String>,
    key: PathBuf,
    layout: PathBuf,
    /// A config that trusts `key`.
    config: PathBuf,
    pulled: PathBuf,
    /// torch's library's MD5s.
    known: Known<String>,
}

/// The fixture built, a torch whose library is `size_mb` large, and the
/// build made publishable.
pub(super) fn sandbox(dir: &Path, bin: PathBuf, size_mb: u64) -> Result<Install> {
    let (runtime, torch) = super::fake_torch(dir, "2.5.1+rocm6.2", "6.2.41133-dd7f95766");
    let fx = Fixture::create(dir, &runtime);
    run(fx
        .command(&bin)
        .current_dir(dir)
        .args(fx.build_args())
        .stderr(Stdio::null()))?;
    super::pad(&torch.miopen(), size_mb << 20, 0)?;
    let mut base = Base::new(dir, bin, "no-gpu")?;
    base.sizes = format!("a {size_mb} MiB library");
    let sb = Install {
        base,
        prefix: fx.prefix.clone(),
        known: Known::new(md5_file(&torch.miopen())?),
        torch,
        build_args: pull_args(&fx, dir),
        key: dir.join("k.key"),
        layout: dir.join("layout"),
        config: dir.join("config.toml"),
        pulled: dir.join("pulled"),
    };
    publishable(&sb, size_mb)?;
    Ok(sb)
}

impl Route for Install {
    fn base(&self) -> &Base {
        &self.base
    }

    fn ops(&self) -> &'static [Op] {
        &[
            Op::Install,
            Op::InstallOver,
            Op::Rollback,
            Op::Publish,
            Op::Pull,
        ]
    }

    /// The next command of the same kind: torch's, or the registry's.
    fn next_after(&self, op: Op) -> &'static [Op] {
        match op {
            Op::Publish | Op::Pull => &[Op::Publish, Op::Pull],
            _ => &[Op::Install, Op::InstallOver, Op::Rollback],
        }
    }

    fn args(&self, op: Op, c: &mut Command) {
        let state = [OsStr::new("--state-dir"), self.base.state.as_os_str()];
        match op {
            Op::Install => c
                .args(["install", "--into-torch", "--prefix"])
                .arg(&self.prefix)
                .args(state),
            Op::InstallOver => c
                .args(["install", "--into-torch", "--no-relink", "--prefix"])
                .arg(&self.prefix)
                .args(state),
            Op::Rollback => c.arg("rollback").args(state),
            Op::Publish => c
                .args(["publish", "--prefix"])
                .arg(&self.prefix)
                .arg("--sign-key")
                .arg(&self.key)
                .arg(&self.layout),
            Op::Pull => c
                .args(&self.build_args)
                .arg("--prefix")
                .arg(&self.pulled)
                .arg("--from")
                .arg(&self.layout)
                .env("RDNA1_PATCH_CONFIG", &self.config),
        };
        c.env("PYTHONPATH", self.base.root.join("site"));
    }

    fn warmed(&mut self, op: Op) -> Result<()> {
        self.known.warmed(op, md5_file(&self.torch.miopen())?)?;
        match self.pulled_damage() {
            Some(d) if op == Op::Pull => bail!("the warm-up pull is not whole: {d}"),
            _ => Ok(()),
        }
    }

    /// torch's library is one the known files; a pull killed anywhere
    /// leaves the earlier pulled prefix or the new, whole.
    fn killed(&mut self, what: &str, problems: &mut Vec<String>) -> Result<()> {
        let now = md5_file(&self.torch.miopen())?;
        if self.known.name(&now).is_none() {
            bail!("{what}: torch's library is neither file (MD5 {now})");
        }
        if let Some(d) = self.pulled_damage() {
            problems.push(format!("{what}: the pulled prefix is damaged: {d}"));
        }
        Ok(())
    }

    fn leftovers(&self, next: Op) -> Vec<PathBuf> {
        let mut left = self.base.left_in(std::slice::from_ref(&self.torch.lib));
        if next == Op::Pull {
            left.extend(self.pull_leftovers());
        }
        left
    }

    fn as_journals_say(&self, what: &str, journals: &Journals) -> Result<()> {
        let now = md5_file(&self.torch.miopen())?;
        self.known
            .as_journals_say(what, now, journals, |j| j.new.md5.clone())
    }

    /// A last publish and pull, to the end: the layout and the prefix work.
    fn finish(&mut self, problems: &mut Vec<String>) -> Result<bool> {
        let restored = md5_file(&self.torch.miopen())? == *self.known.original();
        self.settle(Op::Publish)?;
        self.settle(Op::Pull)?;
        let left = self.pull_leftovers().into_iter();
        problems.extend(left.map(|f| format!("after the last pull: {}", f.display())));
        Ok(restored)
    }
}

impl Install {
    /// What makes the pulled prefix other than whole (`md5sum -c` of its
    /// MD5SUMS).
    fn pulled_damage(&self) -> Option<String> {
        let out = Command::new("md5sum")
            .args(["-c", "--quiet", "share/rdna1-patch/MD5SUMS"])
            .current_dir(&self.pulled)
            .output();
        match out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )),
            Err(e) => Some(e.to_string()),
        }
    }

    /// What a pull leaves when it ends: nothing of ours beside the pulled
    /// prefix or in it.
    fn pull_leftovers(&self) -> Vec<PathBuf> {
        let parent = self.pulled.parent().unwrap_or(Path::new("/"));
        [parent, self.pulled.as_path()]
            .into_iter()
            .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("rdna1-patch"))
            })
            .collect()
    }
}

/// The fixture's build arguments for a pull into another work dir, with no
/// ROCm there: what a user with a trusted key and no SDK runs.
fn pull_args(fx: &Fixture, dir: &Path) -> Vec<String> {
    let mut args = fx.build_args();
    for (flag, value) in [("--rocm", "no-rocm"), ("--work-dir", "pull-work")] {
        if let Some(at) = args.iter().position(|a| a == flag) {
            args[at + 1] = dir.join(value).display().to_string();
        }
    }
    args
}

/// The built prefix with a `size_mb` library (so kills land inside the
/// pull's download, unpacking and commit), its MD5SUMS rewritten, a
/// signing key and a config that trusts it.
fn publishable(sb: &Install, size_mb: u64) -> Result<()> {
    // Library-like bytes after the ELF file's end: it stays loadable, and
    // the layer does not compress to nothing.
    let lib = sb.prefix.join("lib/libMIOpen.so.1.0.0");
    let tail = sb.base.root.join("tail");
    crate::bench::measure::write_library_like(&tail, (size_mb << 20) as usize / 2)?;
    let mut bytes = std::fs::read(&lib)?;
    bytes.extend(std::fs::read(&tail)?);
    std::fs::write(&lib, bytes)?;
    std::fs::remove_file(&tail)?;
    crate::bench::measure::rehash(&sb.prefix)?;
    let key = crate::bench::measure::keypair(&sb.base.root.join("k.pub"), &sb.key)?;
    Ok(std::fs::write(
        &sb.config,
        format!("trusted-keys = [{key:?}]\n"),
    )?)
}
