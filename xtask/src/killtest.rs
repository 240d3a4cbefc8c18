//! `cargo xtask killtest`: kill -9 at random instants of install, install
//! over our own install, and rollback, on a fake torch with a large library,
//! and after each kill check that nothing is stuck and nothing is partial.
//! Not in CI: it runs for minutes and its point is the random instants.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdna1_patch::checksum::md5_file;
use rdna1_patch::swap::txn::{State, StateDir};
use rdna1_testkit::{FakeTorch, Fixture, TorchKind};

use crate::run;

/// xorshift64*: reproducible from the seed it prints, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Install,
    /// A different file (not relinked) over whatever is installed.
    InstallOver,
    Rollback,
}

impl Op {
    const ALL: [Op; 3] = [Op::Install, Op::InstallOver, Op::Rollback];

    fn args(self) -> &'static [&'static str] {
        match self {
            Op::Install => &["install", "--into-torch"],
            Op::InstallOver => &["install", "--into-torch", "--no-relink"],
            Op::Rollback => &["rollback"],
        }
    }
}

struct Sandbox {
    bin: PathBuf,
    root: PathBuf,
    prefix: PathBuf,
    state: PathBuf,
    torch: FakeTorch,
}

impl Sandbox {
    fn cmd(&self, op: Op) -> Command {
        let mut c = Command::new(&self.bin);
        c.current_dir(&self.root).args(op.args());
        if op != Op::Rollback {
            c.arg("--prefix").arg(&self.prefix);
        }
        c.arg("--state-dir")
            .arg(&self.state)
            .env("PYTHONPATH", self.root.join("site"))
            .stdin(Stdio::null());
        c
    }

    /// Run to the end; stderr on failure.
    fn settle(&self, op: Op) -> Result<Duration> {
        let start = Instant::now();
        let out = self.cmd(op).output()?;
        if !out.status.success() {
            bail!(
                "{op:?} after a kill failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(start.elapsed())
    }

    /// Files a killed run left that nothing will remove.
    fn partial_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for dir in [
            self.torch.lib.clone(),
            self.state.join("staging"),
            self.state.join("backups"),
        ] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains("rdna1-patch") || name.ends_with(".tmp") {
                    out.push(e.path());
                }
            }
        }
        out
    }
}

pub fn killtest(root: &Path, args: &[String]) -> Result<()> {
    let mut runs = 100u32;
    let mut size_mb = 150u64;
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64
        | 1;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().context("a value after the flag");
        match a.as_str() {
            "--runs" => runs = value()?.parse()?,
            "--size-mb" => size_mb = value()?.parse()?,
            "--seed" => seed = value()?.parse::<u64>()? | 1,
            other => bail!("unknown argument {other}: --runs N --size-mb M --seed S"),
        }
    }
    // Release: the runs are bound by hashing and copying a large file.
    run(crate::cargo().args(["build", "--quiet", "--release", "--bin", "rdna1-patch"]))?;
    let bin = root.join("target/release/rdna1-patch");
    let dir = tempfile::Builder::new()
        .prefix("rdna1-patch-killtest-")
        .tempdir()?;
    let sbdir = dir.path();
    let runtime = rdna1_testkit::build_runtime(&sbdir.join("fake-runtime"));
    let fx = Fixture::create(sbdir, &runtime);
    run(Command::new(&bin)
        .current_dir(sbdir)
        .args(fx.build_args())
        .stderr(Stdio::null()))?;
    let torch = FakeTorch::create(
        &sbdir.join("site"),
        &runtime,
        TorchKind::Rocm,
        "2.5.1+rocm6.2",
        "6.2.41133-dd7f95766",
    );
    // A library as large as a real one, so that kills land inside the copies
    // and checksums; data after an ELF file's end leaves it loadable.
    let mut lib = std::fs::read(torch.miopen())?;
    lib.resize((size_mb << 20) as usize, 0);
    std::fs::write(torch.miopen(), &lib)?;
    drop(lib);
    let sb = Sandbox {
        bin,
        root: sbdir.to_owned(),
        prefix: fx.prefix.clone(),
        state: sbdir.join("state"),
        torch,
    };
    let original = md5_file(&sb.torch.miopen())?;

    // The two files an install can put there, and how long each op takes.
    let mut took: BTreeMap<Op, Duration> = BTreeMap::new();
    took.insert(Op::Install, sb.settle(Op::Install)?);
    let relinked = md5_file(&sb.torch.miopen())?;
    took.insert(Op::InstallOver, sb.settle(Op::InstallOver)?);
    let as_built = md5_file(&sb.torch.miopen())?;
    took.insert(Op::Rollback, sb.settle(Op::Rollback)?);
    if md5_file(&sb.torch.miopen())? != original {
        bail!("the warm-up rollback did not restore the original");
    }
    let known = [&original, &relinked, &as_built];
    eprintln!(
        "killtest: seed {seed}, {runs} runs, a {size_mb} MiB library; unkilled: {}",
        took.iter()
            .map(|(op, d)| format!("{op:?} {} ms", d.as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let mut rng = Rng(seed);
    let mut mid_run: BTreeMap<Op, u32> = BTreeMap::new();
    let mut finished_first = 0u32;
    let mut stuck = Vec::new();
    let mut partial = Vec::new();
    for i in 0..runs {
        let op = Op::ALL[rng.below(3) as usize];
        let window = took[&op].as_micros() as u64 * 5 / 4 + 1;
        let delay = Duration::from_micros(rng.below(window));
        let mut child = sb
            .cmd(op)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        std::thread::sleep(delay);
        if child.try_wait()?.is_none() {
            child.kill()?; // SIGKILL
            *mid_run.entry(op).or_default() += 1;
        } else {
            finished_first += 1;
        }
        child.wait()?;
        let now = md5_file(&sb.torch.miopen())?;
        if !known.contains(&&now) {
            bail!(
                "run {i} ({op:?} killed at {delay:?}): torch's library is neither file (MD5 {now})"
            );
        }
        // The next command, run to the end, must settle whatever was left.
        let next = Op::ALL[rng.below(3) as usize];
        if let Err(e) = sb.settle(next) {
            stuck.push(format!("run {i}: {op:?} killed at {delay:?}, then {e:#}"));
            break;
        }
        let files = sb.partial_files();
        if !files.is_empty() {
            partial.push(format!("run {i}: {op:?} killed at {delay:?}: {files:?}"));
        }
        let journals = StateDir::new(Some(&sb.state))?.read()?;
        if !journals.damaged.is_empty() {
            bail!("run {i}: damaged journals {:?}", journals.damaged);
        }
        if let Some(j) = journals.list.iter().find(|j| j.state.unfinished()) {
            stuck.push(format!(
                "run {i}: transaction {} left {}",
                j.id,
                j.state.name()
            ));
        }
        let want = journals
            .list
            .iter()
            .rev()
            .find(|j| j.state == State::Installed)
            .map_or(&original, |j| &j.new.md5);
        let now = md5_file(&sb.torch.miopen())?;
        if &now != want {
            bail!("run {i}: torch holds MD5 {now}, the journals say {want}");
        }
    }
    sb.settle(Op::Rollback)?;
    let restored = md5_file(&sb.torch.miopen())? == original;
    let total: u32 = mid_run.values().sum();
    println!(
        "killtest: {runs} runs (seed {seed}): {total} killed mid-run ({}), {finished_first} finished before the kill; stuck states: {}; partial files: {}; original restored at the end: {restored}",
        mid_run
            .iter()
            .map(|(op, n)| format!("{op:?} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        stuck.len(),
        partial.len()
    );
    for s in stuck.iter().chain(&partial) {
        println!("  {s}");
    }
    if !stuck.is_empty() || !partial.is_empty() || !restored {
        bail!("the kill test found problems");
    }
    Ok(())
}
