//! `cargo xtask killtest --route rocblas`: kill -9 at random instants of
//! `install rocblas --into-torch`, of an install over our own (as built,
//! not relinked) and of rollback, on a torch that bundles a rocBLAS: its
//! library (padded to `--size-mb`) and a Tensile directory of 300 files
//! (as many MiB again). After each kill the next run, whichever it is,
//! must settle: then torch holds one whole set, the library and the
//! directory of the same build (the original, or a build the journals say
//! is installed), nothing is stuck and nothing partial is left. How often
//! a kill left the two halves of two sets on disk (between the two
//! renames, which the next run finishes) is counted too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rdna1_patch::checksum::md5_file;
use rdna1_patch::swap::txn::State;
use rdna1_patch::swap::txn::tree;
use rdna1_testkit::{FakeTorch, RocblasFixture, TorchKind};

use crate::rng::Rng;
use crate::run;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Install,
    /// The build as built (not relinked) over whatever is installed.
    InstallOver,
    Rollback,
}

const ALL: [Op; 3] = [Op::Install, Op::InstallOver, Op::Rollback];

/// A set as torch holds it: its library's MD5 and its directory's digest.
type Set = (String, String);

struct Sandbox {
    bin: PathBuf,
    root: PathBuf,
    prefix: PathBuf,
    state: PathBuf,
    torch: FakeTorch,
    tmp: PathBuf,
}

impl Sandbox {
    fn cmd(&self, op: Op) -> Command {
        let mut c = rdna1_testkit::binary_with_gpus(&self.bin, "rx5500xt-gfx1012");
        c.current_dir(&self.root);
        match op {
            Op::Install | Op::InstallOver => {
                c.args(["install", "rocblas", "--into-torch", "--prefix"])
                    .arg(&self.prefix);
                if op == Op::InstallOver {
                    c.arg("--no-relink");
                }
            }
            Op::Rollback => {
                c.arg("rollback");
            }
        }
        c.arg("--state-dir")
            .arg(&self.state)
            .arg("--torch-dir")
            .arg(&self.torch.dir)
            .env("HOME", self.root.join("home"))
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null());
        c
    }

    fn settle(&self, op: Op) -> Result<Duration> {
        crate::rng::to_the_end(&mut self.cmd(op), &format!("{op:?}"))
    }

    fn dir(&self) -> PathBuf {
        self.torch.lib.join("rocblas/library")
    }

    /// What torch holds now.
    fn set(&self) -> Result<Set> {
        let lib = md5_file(&self.torch.lib.join("librocblas.so"))?;
        let dir = tree::record(&tree::read(&self.dir(), 2)?).digest;
        Ok((lib, dir))
    }

    /// Files a killed run left that nothing will remove.
    fn leftovers(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for dir in [
            self.torch.lib.clone(),
            self.torch.lib.join("rocblas"),
            self.state.join("staging"),
            self.state.join("backups"),
            self.tmp.clone(),
        ] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if dir == self.tmp || name.contains("rdna1-patch") || name.ends_with(".tmp") {
                    out.push(e.path());
                }
            }
        }
        out
    }
}

/// The sandbox: the rocblas-mini fixture built for gfx1012 (its library
/// padded to `size_mb`), and a torch bundling an older build's library as
/// torch/lib/librocblas.so (padded alike) with 300 Tensile files.
fn sandbox(dir: &Path, bin: PathBuf, size_mb: u64) -> Result<Sandbox> {
    let rb = RocblasFixture::create(&dir.join("rb"));
    run(rdna1_testkit::binary_with_gpus(&bin, "rx5500xt-gfx1012")
        .current_dir(dir)
        .args(rb.build_args())
        .env("HOME", dir.join("home"))
        .stderr(Stdio::null()))?;
    let runtime = rdna1_testkit::build_runtime(&dir.join("fake-runtime"));
    let torch = FakeTorch::create(
        &dir.join("site"),
        &runtime,
        TorchKind::Rocm,
        "2.6.0+rocm6.4",
        "6.4.43484-123eb5128",
    );
    let built = rb.prefix.join("lib/librocblas.so.4.4.1");
    let lib = torch.lib.join("librocblas.so");
    std::fs::copy(&built, &lib)?;
    run(Command::new("patchelf")
        .args(["--set-soname", "librocblas.so"])
        .arg(&lib))?;
    pad(&lib, size_mb << 20, 1)?;
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
    pad(&built, size_mb << 20, 2)?;
    crate::bench::measure::rehash(&rb.prefix)?;
    std::fs::create_dir_all(dir.join("tmp"))?;
    Ok(Sandbox {
        bin,
        root: dir.to_owned(),
        prefix: rb.prefix,
        state: dir.join("state"),
        torch,
        tmp: dir.join("tmp"),
    })
}

/// Grow `file` to `len` with bytes after its ELF end (it stays loadable);
/// `seed` makes two files' tails differ.
fn pad(file: &Path, len: u64, seed: u8) -> Result<()> {
    let mut bytes = std::fs::read(file)?;
    let at = bytes.len();
    bytes.resize(len.max(at as u64) as usize, 0);
    for (i, b) in bytes[at..].iter_mut().enumerate().step_by(4096) {
        *b = (i as u8).wrapping_add(seed);
    }
    Ok(std::fs::write(file, bytes)?)
}

pub fn killtest(bin: PathBuf, runs: u32, size_mb: u64, seed: u64) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("rdna1-patch-killtest-rocblas-")
        .tempdir()?;
    let sb = sandbox(dir.path(), bin, size_mb)?;
    let original = sb.set()?;
    let mut took: BTreeMap<Op, Duration> = BTreeMap::new();
    took.insert(Op::Install, sb.settle(Op::Install)?);
    let relinked = sb.set()?;
    took.insert(Op::InstallOver, sb.settle(Op::InstallOver)?);
    let as_built = sb.set()?;
    took.insert(Op::Rollback, sb.settle(Op::Rollback)?);
    if sb.set()? != original {
        bail!("the warm-up rollback did not restore the original set");
    }
    let names = [
        ("the original", &original),
        ("the relinked build", &relinked),
        ("the build as built", &as_built),
    ];
    let name = |s: &Set| {
        names
            .iter()
            .find(|(_, k)| *k == s)
            .map_or("no whole set", |(n, _)| n)
    };
    eprintln!(
        "killtest --route rocblas: seed {seed}, {runs} runs, a {size_mb} MiB library and 300 Tensile files of {size_mb} MiB; unkilled: {}",
        took.iter()
            .map(|(op, d)| format!("{op:?} {} ms", d.as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut rng = Rng(seed);
    let (mut killed, mut finished, mut halves) = (BTreeMap::<Op, u32>::new(), 0u32, 0u32);
    let mut problems = Vec::new();
    for i in 0..runs {
        let op = ALL[rng.below(ALL.len() as u64) as usize];
        let delay = rng.instant(took[&op]);
        if crate::rng::kill_at(&mut sb.cmd(op), delay)? {
            *killed.entry(op).or_default() += 1;
        } else {
            finished += 1;
        }
        let what = format!("run {i}: {op:?} killed at {delay:?}");
        // Right after the kill: a whole set, or the halves of two (the
        // one instant between the renames), never anything else.
        let now = sb.set()?;
        let whole = names.iter().any(|(_, k)| **k == now);
        let half =
            names.iter().any(|(_, a)| a.0 == now.0) && names.iter().any(|(_, b)| b.1 == now.1);
        match (whole, half) {
            (true, _) => {}
            (false, true) => halves += 1,
            (false, false) => bail!("{what}: torch holds a library and a directory of no build"),
        }
        let next = ALL[rng.below(ALL.len() as u64) as usize];
        if let Err(e) = sb.settle(next) {
            problems.push(format!("{what}, then {e:#}"));
            break;
        }
        let left = sb.leftovers();
        if !left.is_empty() {
            problems.push(format!("{what}, then {next:?}: left {left:?}"));
            for f in left {
                let _ = std::fs::remove_dir_all(&f).or_else(|_| std::fs::remove_file(&f));
            }
        }
        let journals = crate::rng::settled(&sb.state, &what, &mut problems)?;
        let want: Set = journals
            .list
            .iter()
            .rev()
            .find(|j| j.state == State::Installed)
            .map_or(original.clone(), |j| {
                let set = j.set.as_ref().expect("a rocBLAS journal");
                (j.new.md5.clone(), set.new.digest.clone())
            });
        let now = sb.set()?;
        if now != want {
            bail!(
                "{what}, then {next:?}: torch holds {}, the journals say {}",
                name(&now),
                name(&want)
            );
        }
    }
    sb.settle(Op::Rollback)?;
    let restored = sb.set()? == original;
    let total: u32 = killed.values().sum();
    println!(
        "killtest --route rocblas: {runs} runs (seed {seed}): {total} killed mid-run ({}), {finished} finished before the kill; left as two halves by a kill (finished by the next run): {halves}; problems: {}; the original set restored at the end: {restored}",
        killed
            .iter()
            .map(|(op, n)| format!("{op:?} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
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

/// What the rocBLAS route's kill test needs to build its fixture, said
/// before anything is built.
pub fn needs() -> Result<()> {
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
