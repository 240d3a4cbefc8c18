//! `cargo xtask killtest --route system`: kill -9 at random instants of
//! install and rollback on the system route (issue 44): a torch with no
//! MIOpen of its own whose libtorch_hip.so loads a "system" libMIOpen.so.1
//! through a fixed RUNPATH, so that install adds a fixed copy to torch/lib
//! and edits libtorch_hip.so. After each kill the loader's answer (the
//! crate's own resolver, as `import torch` would load) must be the system
//! file or a whole fixed copy, never nothing; the next run settles; then
//! nothing is stuck or left behind, the system file never changed, and
//! libtorch_hip.so and the copy are what the journals say.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Result, bail};
use rdna1_patch::checksum::md5_file;
use rdna1_patch::swap::linker;
use rdna1_patch::swap::txn::State;
use rdna1_testkit::{FakeTorch, TorchKind};

use crate::run;

const COMGR: &str = "/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2";

struct Sandbox {
    bin: PathBuf,
    root: PathBuf,
    prefix: PathBuf,
    state: PathBuf,
    torch: FakeTorch,
    /// The system's library file.
    real: PathBuf,
    tmp: PathBuf,
}

impl Sandbox {
    fn cmd(&self, install: bool) -> Command {
        let mut c = rdna1_testkit::binary_with_gpus(&self.bin, "no-gpu");
        c.current_dir(&self.root);
        if install {
            c.args([
                "install",
                "--into-torch",
                "--profile",
                "rocm-6.4.3",
                "--prefix",
            ])
            .arg(&self.prefix);
        } else {
            c.arg("rollback");
        }
        c.arg("--state-dir")
            .arg(&self.state)
            .args(["--python", "python3"])
            .env("PYTHONPATH", self.root.join("site"))
            .env("HOME", self.root.join("home"))
            .env("DPKG_ADMINDIR", self.root.join("dpkg"))
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null());
        c
    }

    fn settle(&self, install: bool) -> Result<Duration> {
        let what = if install { "install" } else { "rollback" };
        crate::rng::to_the_end(&mut self.cmd(install), what)
    }

    fn hip(&self) -> PathBuf {
        self.torch.lib.join("libtorch_hip.so")
    }

    fn copy(&self) -> PathBuf {
        self.torch.lib.join("libMIOpen.so.1")
    }

    /// What libtorch_hip.so loads as libMIOpen.so.1 now.
    fn loads(&self) -> Result<Option<PathBuf>> {
        Ok(linker::resolve(&self.hip(), &[])?
            .into_iter()
            .find(|d| d.name == "libMIOpen.so.1")
            .and_then(|d| d.path)
            .map(|p| p.canonicalize().unwrap_or(p)))
    }

    fn leftovers(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for dir in [self.torch.lib.clone(), self.state.join("staging")] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains("rdna1-patch") || name.ends_with(".tmp") {
                    out.push(e.path());
                }
            }
        }
        out.extend(
            std::fs::read_dir(&self.tmp)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path()),
        );
        out
    }
}

/// The sandbox: the fake runtime's MIOpen as the system's
/// libMIOpen.so.1.0.60400 (padded to `size_mb`), HIP beside it, Debian's
/// comgr; a torch for gfx1010 whose libtorch_hip.so has RUNPATH of that
/// directory only; an empty dpkg database.
fn sandbox(dir: &Path, bin: PathBuf, size_mb: u64) -> Result<Sandbox> {
    let runtime = rdna1_testkit::build_runtime(&dir.join("fake-runtime"));
    let torch = FakeTorch::create(
        &dir.join("site"),
        &runtime,
        TorchKind::Rocm,
        "2.9.1+rocm6.4",
        "6.4.43484-123eb5128",
    );
    let sys = dir.join("opt/rocm-6.4.0/lib");
    std::fs::create_dir_all(&sys)?;
    let real = sys.join("libMIOpen.so.1.0.60400");
    let mut lib = std::fs::read(torch.lib.join("libMIOpen.so"))?;
    lib.resize((size_mb << 20) as usize, 0);
    std::fs::write(&real, &lib)?;
    drop(lib);
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
    std::fs::create_dir_all(dir.join("tmp"))?;
    Ok(Sandbox {
        bin,
        root: dir.to_owned(),
        prefix: dir.join("prefix"),
        state: dir.join("state"),
        torch,
        real,
        tmp: dir.join("tmp"),
    })
}

pub fn killtest(bin: PathBuf, runs: u32, size_mb: u64, seed: u64) -> Result<()> {
    if !Path::new(COMGR).exists() {
        bail!(
            "the system route's kill test diagnoses through Debian 12's comgr, {COMGR}: apt install libamd-comgr2"
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("rdna1-patch-killtest-system-")
        .tempdir()?;
    let sb = sandbox(dir.path(), bin, size_mb)?;
    let hip_original = md5_file(&sb.hip())?;
    let real_md5 = md5_file(&sb.real)?;
    let real_path = sb.real.canonicalize()?;
    let took_install = sb.settle(true)?;
    let copy_md5 = md5_file(&sb.copy())?;
    let hip_edited = md5_file(&sb.hip())?;
    let took_rollback = sb.settle(false)?;
    if md5_file(&sb.hip())? != hip_original || sb.copy().exists() {
        bail!("the warm-up rollback did not restore torch");
    }
    eprintln!(
        "killtest --route system: seed {seed}, {runs} runs, a {size_mb} MiB system library; unkilled: install {} ms, rollback {} ms",
        took_install.as_millis(),
        took_rollback.as_millis()
    );
    let mut rng = crate::rng::Rng(seed);
    let (mut killed, mut finished) = (0u32, 0u32);
    let mut problems = Vec::new();
    for i in 0..runs {
        let install = rng.below(2) == 0;
        let took = if install { took_install } else { took_rollback };
        let delay = rng.instant(took);
        if crate::rng::kill_at(&mut sb.cmd(install), delay)? {
            killed += 1;
        } else {
            finished += 1;
        }
        let what = format!(
            "run {i}: {} killed at {delay:?}",
            if install { "install" } else { "rollback" }
        );
        // Never neither: the loader finds the system file or a whole copy.
        match sb.loads()? {
            Some(p) if p == real_path => {}
            Some(p) if p == sb.copy() && md5_file(&p)? == copy_md5 => {}
            other => bail!(
                "{what}: libtorch_hip.so loads {other:?}, neither the system's file nor the fixed copy"
            ),
        }
        if md5_file(&sb.real)? != real_md5 {
            bail!("{what}: the system's library changed");
        }
        let next = rng.below(2) == 0;
        if let Err(e) = sb.settle(next) {
            problems.push(format!("{what}, then {e:#}"));
            break;
        }
        let left = sb.leftovers();
        if !left.is_empty() {
            problems.push(format!("{what}: left {left:?}"));
            for f in left {
                let _ = std::fs::remove_file(&f);
            }
        }
        let journals = crate::rng::settled(&sb.state, &what, &mut problems)?;
        let installed = journals.list.iter().any(|j| j.state == State::Installed);
        let (want_hip, want_copy) = if installed {
            (&hip_edited, true)
        } else {
            (&hip_original, false)
        };
        if md5_file(&sb.hip())? != *want_hip || sb.copy().exists() != want_copy {
            bail!(
                "{what}: torch is not what the journals say (installed: {installed}, copy there: {})",
                sb.copy().exists()
            );
        }
    }
    sb.settle(false)?;
    let restored = md5_file(&sb.hip())? == hip_original && !sb.copy().exists();
    println!(
        "killtest --route system: {runs} runs (seed {seed}): {killed} killed mid-run, {finished} finished before the kill; problems: {}; libtorch_hip.so restored at the end: {restored}",
        problems.len()
    );
    for p in &problems {
        println!("  {p}");
    }
    if !problems.is_empty() || !restored {
        bail!("the kill test found problems");
    }
    Ok(())
}

/// The release binary `cargo build --release` made, in CARGO_TARGET_DIR
/// when it is set.
pub fn release_binary(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("release/rdna1-patch")
}
