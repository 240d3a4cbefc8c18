//! `cargo xtask killtest`: kill -9 at random instants of install, install
//! over our own install, rollback, publish (to an OCI layout dir) and pull
//! (`build --from` over an earlier pull), with a large library, and after
//! each kill check that nothing is stuck, nothing is partial, the earlier
//! pulled prefix is whole, and nothing is left in $TMPDIR. Not in CI: it
//! runs for minutes and its point is the random instants. `--route
//! system` is MIOpen's system route (`killtest_system`), `--route rocblas`
//! rocBLAS's set (`killtest_rocblas`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rdna1_patch::checksum::md5_file;
use rdna1_patch::swap::txn::State;
use rdna1_testkit::{FakeTorch, Fixture, TorchKind};

use crate::rng::Rng;
use crate::run;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Install,
    /// A different file (not relinked) over whatever is installed.
    InstallOver,
    Rollback,
    /// The built prefix, signed, to the layout dir.
    Publish,
    /// The published build into the pulled prefix, over the earlier pull.
    Pull,
}

impl Op {
    const ALL: [Op; 5] = [
        Op::Install,
        Op::InstallOver,
        Op::Rollback,
        Op::Publish,
        Op::Pull,
    ];
}

struct Sandbox {
    bin: PathBuf,
    root: PathBuf,
    prefix: PathBuf,
    state: PathBuf,
    torch: FakeTorch,
    /// `build` as the fixture runs it, without a --prefix.
    build_args: Vec<String>,
    key: PathBuf,
    layout: PathBuf,
    /// A config that trusts `key`.
    config: PathBuf,
    pulled: PathBuf,
    /// The children's $TMPDIR, to be left empty.
    tmp: PathBuf,
}

impl Sandbox {
    fn cmd(&self, op: Op) -> Command {
        let mut c = rdna1_testkit::binary_with_gpus(&self.bin, "no-gpu");
        c.current_dir(&self.root);
        let state = || ["--state-dir".into(), self.state.clone().into_os_string()];
        match op {
            Op::Install => c
                .args(["install", "--into-torch", "--prefix"])
                .arg(&self.prefix)
                .args(state()),
            Op::InstallOver => c
                .args(["install", "--into-torch", "--no-relink", "--prefix"])
                .arg(&self.prefix)
                .args(state()),
            Op::Rollback => c.arg("rollback").args(state()),
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
        c.env("PYTHONPATH", self.root.join("site"))
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null());
        c
    }

    /// What makes the pulled prefix other than whole (`md5sum -c` of its
    /// MD5SUMS): a pull killed anywhere leaves the earlier one or the new.
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

    /// What the children left in their $TMPDIR.
    fn in_tmp(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.tmp)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect()
    }

    /// Run to the end; stderr on failure.
    fn settle(&self, op: Op) -> Result<Duration> {
        crate::rng::to_the_end(&mut self.cmd(op), &format!("{op:?}"))
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
    let mut route = "swap".to_owned();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().context("a value after the flag");
        match a.as_str() {
            "--route" => match value()?.as_str() {
                r @ ("system" | "swap" | "rocblas") => route = r.to_owned(),
                other => bail!("unknown route {other}: swap (the default), system or rocblas"),
            },
            "--runs" => runs = value()?.parse()?,
            "--size-mb" => size_mb = value()?.parse()?,
            "--seed" => seed = value()?.parse::<u64>()? | 1,
            other => {
                bail!(
                    "unknown argument {other}: --runs N --size-mb M --seed S --route swap|system|rocblas"
                )
            }
        }
    }
    if route == "rocblas" {
        crate::killtest_rocblas::needs()?;
    }
    // Release: the runs are bound by hashing and copying a large file.
    run(crate::cargo().args(["build", "--quiet", "--release", "--bin", "rdna1-patch"]))?;
    let bin = crate::killtest_system::release_binary(root);
    match route.as_str() {
        "system" => return crate::killtest_system::killtest(bin, runs, size_mb, seed),
        "rocblas" => return crate::killtest_rocblas::killtest(bin, runs, size_mb, seed),
        _ => {}
    }
    let dir = tempfile::Builder::new()
        .prefix("rdna1-patch-killtest-")
        .tempdir()?;
    let sbdir = dir.path();
    let runtime = rdna1_testkit::build_runtime(&sbdir.join("fake-runtime"));
    let fx = Fixture::create(sbdir, &runtime);
    run(fx
        .command(&bin)
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
        build_args: pull_args(&fx, sbdir),
        key: sbdir.join("k.key"),
        layout: sbdir.join("layout"),
        config: sbdir.join("config.toml"),
        pulled: sbdir.join("pulled"),
        tmp: sbdir.join("tmp"),
    };
    publishable(&sb, size_mb)?;
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
    took.insert(Op::Publish, sb.settle(Op::Publish)?);
    took.insert(Op::Pull, sb.settle(Op::Pull)?);
    if let Some(d) = sb.pulled_damage() {
        bail!("the warm-up pull is not whole: {d}");
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
    let mut damaged = Vec::new();
    let mut left_in_tmp = Vec::new();
    for i in 0..runs {
        let op = Op::ALL[rng.below(Op::ALL.len() as u64) as usize];
        let delay = rng.instant(took[&op]);
        if crate::rng::kill_at(&mut sb.cmd(op), delay)? {
            *mid_run.entry(op).or_default() += 1;
        } else {
            finished_first += 1;
        }
        let now = md5_file(&sb.torch.miopen())?;
        if !known.contains(&&now) {
            bail!(
                "run {i} ({op:?} killed at {delay:?}): torch's library is neither file (MD5 {now})"
            );
        }
        if let Some(d) = sb.pulled_damage() {
            damaged.push(format!("run {i}: {op:?} killed at {delay:?}: {d}"));
        }
        // The next command of the same kind (torch's, or the registry's),
        // run to the end, must settle whatever was left.
        let kind: &[Op] = match op {
            Op::Publish | Op::Pull => &[Op::Publish, Op::Pull],
            _ => &[Op::Install, Op::InstallOver, Op::Rollback],
        };
        let next = kind[rng.below(kind.len() as u64) as usize];
        if let Err(e) = sb.settle(next) {
            stuck.push(format!("run {i}: {op:?} killed at {delay:?}, then {e:#}"));
            break;
        }
        let tmp = sb.in_tmp();
        if !tmp.is_empty() {
            left_in_tmp.push(format!("run {i}: {op:?} killed at {delay:?}: {tmp:?}"));
            for t in tmp {
                let _ = std::fs::remove_dir_all(&t).or_else(|_| std::fs::remove_file(&t));
            }
        }
        let mut files = sb.partial_files();
        if next == Op::Pull {
            files.extend(sb.pull_leftovers());
        }
        if !files.is_empty() {
            partial.push(format!("run {i}: {op:?} killed at {delay:?}: {files:?}"));
        }
        let journals = crate::rng::settled(&sb.state, &format!("run {i}"), &mut stuck)?;
        let want = journals
            .list
            .iter()
            .rev()
            .find(|j| j.state == State::Installed)
            .map_or(&original, |j| &j.new.md5);
        let now = md5_file(&sb.torch.miopen())?;
        if &now != want {
            let known = |m: &String| {
                [
                    ("the original", &original),
                    ("the relinked build", &relinked),
                    ("the build as built", &as_built),
                ]
                .into_iter()
                .find(|(_, k)| *k == m)
                .map_or("unknown", |(n, _)| n)
            };
            bail!(
                "run {i} ({op:?} killed at {delay:?}, then {next:?}): torch holds MD5 {now} ({}), the journals say {want} ({})",
                known(&now),
                known(want)
            );
        }
    }
    sb.settle(Op::Rollback)?;
    let restored = md5_file(&sb.torch.miopen())? == original;
    // A last publish and pull, to the end: the layout and the prefix work.
    sb.settle(Op::Publish)?;
    sb.settle(Op::Pull)?;
    partial.extend(
        sb.pull_leftovers()
            .into_iter()
            .map(|f| format!("after the last pull: {}", f.display())),
    );
    let total: u32 = mid_run.values().sum();
    println!(
        "killtest: {runs} runs (seed {seed}): {total} killed mid-run ({}), {finished_first} finished before the kill; stuck states: {}; damaged pulled prefixes: {}; partial files: {}; runs leaving files in $TMPDIR: {}; original restored at the end: {restored}",
        mid_run
            .iter()
            .map(|(op, n)| format!("{op:?} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        stuck.len(),
        damaged.len(),
        partial.len(),
        left_in_tmp.len()
    );
    for s in stuck
        .iter()
        .chain(&damaged)
        .chain(&partial)
        .chain(&left_in_tmp)
    {
        println!("  {s}");
    }
    if !stuck.is_empty()
        || !damaged.is_empty()
        || !partial.is_empty()
        || !left_in_tmp.is_empty()
        || !restored
    {
        bail!("the kill test found problems");
    }
    Ok(())
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
/// signing key, a config that trusts it, and an empty $TMPDIR.
fn publishable(sb: &Sandbox, size_mb: u64) -> Result<()> {
    // Library-like bytes after the ELF file's end: it stays loadable, and
    // the layer does not compress to nothing.
    let lib = sb.prefix.join("lib/libMIOpen.so.1.0.0");
    let tail = sb.root.join("tail");
    crate::bench::measure::write_library_like(&tail, (size_mb << 20) as usize / 2)?;
    let mut bytes = std::fs::read(&lib)?;
    bytes.extend(std::fs::read(&tail)?);
    std::fs::write(&lib, bytes)?;
    std::fs::remove_file(&tail)?;
    crate::bench::measure::rehash(&sb.prefix)?;
    let key = crate::bench::measure::keypair(&sb.root.join("k.pub"), &sb.key)?;
    std::fs::write(&sb.config, format!("trusted-keys = [{key:?}]\n"))?;
    Ok(std::fs::create_dir_all(&sb.tmp)?)
}
