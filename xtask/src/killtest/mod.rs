//! `cargo xtask killtest`: kill -9 at random instants of a route's
//! commands and, after each kill, run one of them to the end, which must
//! settle what the kill left: torch is then what the journals say, nothing
//! is stuck, nothing partial or in $TMPDIR is left. One driver; a [`Route`]
//! supplies only what differs: [`install`] (the default: install, install
//! over it, rollback, publish and pull), [`system`] (MIOpen's system
//! route, `--route system`), [`rocblas`] (rocBLAS's set, `--route
//! rocblas`). Not in CI: it runs for minutes and its point is the random
//! instants.

mod install;
mod rocblas;
mod system;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rdna1_patch::swap::txn::{Journal, Journals, State};
use rdna1_testkit::{FakeTorch, TorchKind};

use crate::rng::Rng;
use crate::run;

/// The commands a route is killed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Install,
    /// A build not relinked over whatever is installed.
    InstallOver,
    Rollback,
    /// The built prefix, signed, to an OCI layout dir.
    Publish,
    /// The published build into the pulled prefix, over the earlier pull.
    Pull,
}

/// What every route's sandbox has.
struct Base {
    /// How the reports name the route: `killtest --route system`.
    title: &'static str,
    /// What the first report says of the libraries' sizes.
    sizes: String,
    bin: PathBuf,
    gpus: &'static str,
    root: PathBuf,
    state: PathBuf,
    /// The children's $TMPDIR, to be left empty.
    tmp: PathBuf,
}

impl Base {
    fn new(dir: &Path, bin: PathBuf, gpus: &'static str) -> Result<Base> {
        std::fs::create_dir_all(dir.join("tmp"))?;
        Ok(Base {
            title: "killtest",
            sizes: String::new(),
            bin,
            gpus,
            root: dir.to_owned(),
            state: dir.join("state"),
            tmp: dir.join("tmp"),
        })
    }

    /// Files a killed run left that nothing will remove: ours in `dirs`
    /// and the state's staging and backups, and anything in $TMPDIR.
    fn left_in(&self, dirs: &[PathBuf]) -> Vec<PathBuf> {
        let ours = |n: &str| n.contains("rdna1-patch") || n.ends_with(".tmp");
        let state = [self.state.join("staging"), self.state.join("backups")];
        let list = |d: &PathBuf| std::fs::read_dir(d).into_iter().flatten().flatten();
        (dirs.iter().chain(&state))
            .flat_map(list)
            .filter(|e| ours(&e.file_name().to_string_lossy()))
            .chain(list(&self.tmp))
            .map(|e| e.path())
            .collect()
    }
}

/// What differs between the kill tests: the sandbox, the commands, and
/// what torch must hold after a kill and after the next run.
trait Route {
    fn base(&self) -> &Base;
    /// The commands killed, in the warm-up's order.
    fn ops(&self) -> &'static [Op];
    /// Those of which one, run after a kill of `op`, must settle it.
    fn next_after(&self, _op: Op) -> &'static [Op] {
        self.ops()
    }
    /// `op`'s arguments and environment.
    fn args(&self, op: Op, c: &mut Command);
    /// Note (or check) what `op` left, run unkilled in the warm-up.
    fn warmed(&mut self, op: Op) -> Result<()>;
    /// Right after the kill `what`: an error when torch is broken, a
    /// problem when something is damaged, a count of what is allowed.
    fn killed(&mut self, what: &str, problems: &mut Vec<String>) -> Result<()>;
    /// Files left that nothing will remove once `next` ran to the end.
    fn leftovers(&self, next: Op) -> Vec<PathBuf>;
    /// An error unless torch holds what the settled journals say.
    fn as_journals_say(&self, what: &str, journals: &Journals) -> Result<()>;
    /// After the last rollback: whether torch is as it was at first.
    fn finish(&mut self, problems: &mut Vec<String>) -> Result<bool>;
    /// What the last report counts besides the problems, if anything.
    fn noted(&self) -> Option<String> {
        None
    }

    fn cmd(&self, op: Op) -> Command {
        let b = self.base();
        let mut c = rdna1_testkit::binary_with_gpus(&b.bin, b.gpus);
        c.current_dir(&b.root);
        self.args(op, &mut c);
        c.env("TMPDIR", &b.tmp).stdin(Stdio::null());
        c
    }

    /// Run `op` to the end; stderr on failure.
    fn settle(&self, op: Op) -> Result<Duration> {
        crate::rng::to_the_end(&mut self.cmd(op), &format!("{op:?}"))
    }
}

/// What torch may hold, by name: the original, then what each warm-up
/// install left.
struct Known<T>(Vec<(&'static str, T)>);

impl<T: PartialEq + std::fmt::Debug> Known<T> {
    fn new(original: T) -> Known<T> {
        Known(vec![("the original", original)])
    }

    fn original(&self) -> &T {
        &self.0[0].1
    }

    /// What the warm-up's `op` left torch holding.
    fn warmed(&mut self, op: Op, now: T) -> Result<()> {
        match op {
            Op::Install => self.0.push(("the relinked build", now)),
            Op::InstallOver => self.0.push(("the build as built", now)),
            Op::Rollback if now != *self.original() => {
                bail!("the warm-up rollback did not restore the original")
            }
            _ => {}
        }
        Ok(())
    }

    fn name(&self, t: &T) -> Option<&'static str> {
        self.0.iter().find(|(_, k)| k == t).map(|(n, _)| *n)
    }

    /// An error unless torch holds `now`, what the journals say: the last
    /// installed one's `new`, else the original.
    fn as_journals_say(
        &self,
        what: &str,
        now: T,
        journals: &Journals,
        new: fn(&Journal) -> T,
    ) -> Result<()> {
        let installed = journals
            .list
            .iter()
            .rev()
            .find(|j| j.state == State::Installed);
        let want = installed.map(new);
        let want = want.as_ref().unwrap_or(self.original());
        if now != *want {
            let name = |t| self.name(t).unwrap_or("unknown");
            bail!(
                "{what}: torch holds {} ({now:?}), the journals say {} ({want:?})",
                name(&now),
                name(want)
            );
        }
        Ok(())
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
    match route.as_str() {
        "rocblas" => rocblas::needs()?,
        "system" => system::needs()?,
        _ => {}
    }
    // Release: the runs are bound by hashing and copying a large file.
    run(crate::cargo().args(["build", "--quiet", "--release", "--bin", "rdna1-patch"]))?;
    let bin = release_binary(root);
    let dir = tempfile::Builder::new()
        .prefix(&format!("rdna1-patch-killtest-{route}-"))
        .tempdir()?;
    let mut sb: Box<dyn Route> = match route.as_str() {
        "system" => Box::new(system::sandbox(dir.path(), bin, size_mb)?),
        "rocblas" => Box::new(rocblas::sandbox(dir.path(), bin, size_mb)?),
        _ => Box::new(install::sandbox(dir.path(), bin, size_mb)?),
    };
    drive(sb.as_mut(), runs, seed)
}

/// The warm-up (each command unkilled, to learn how long it takes), the
/// kills, the last rollback and the report.
fn drive(sb: &mut dyn Route, runs: u32, seed: u64) -> Result<()> {
    let mut took: BTreeMap<Op, Duration> = BTreeMap::new();
    for &op in sb.ops() {
        took.insert(op, sb.settle(op)?);
        sb.warmed(op)?;
    }
    let title = sb.base().title;
    eprintln!(
        "{title}: seed {seed}, {runs} runs, {}; unkilled: {}",
        sb.base().sizes,
        list(
            &took
                .iter()
                .map(|(op, d)| (*op, format!("{} ms", d.as_millis())))
                .collect()
        )
    );
    let mut rng = Rng(seed);
    let pick = |rng: &mut Rng, ops: &[Op]| ops[rng.below(ops.len() as u64) as usize];
    let (mut killed, mut finished) = (BTreeMap::<Op, u32>::new(), 0u32);
    let mut problems = Vec::new();
    for i in 0..runs {
        let op = pick(&mut rng, sb.ops());
        let delay = rng.instant(took[&op]);
        if crate::rng::kill_at(&mut sb.cmd(op), delay)? {
            *killed.entry(op).or_default() += 1;
        } else {
            finished += 1;
        }
        let what = format!("run {i}: {op:?} killed at {delay:?}");
        sb.killed(&what, &mut problems)?;
        let next = pick(&mut rng, sb.next_after(op));
        let what = format!("{what}, then {next:?}");
        if let Err(e) = sb.settle(next) {
            problems.push(format!("{what}: {e:#}"));
            break;
        }
        let left = sb.leftovers(next);
        if !left.is_empty() {
            problems.push(format!("{what}: left {left:?}"));
            for f in left {
                let _ = std::fs::remove_dir_all(&f).or_else(|_| std::fs::remove_file(&f));
            }
        }
        let journals = crate::rng::settled(&sb.base().state, &what, &mut problems)?;
        sb.as_journals_say(&what, &journals)?;
    }
    sb.settle(Op::Rollback)?;
    let restored = sb.finish(&mut problems)?;
    println!(
        "{title}: {runs} runs (seed {seed}): {} killed mid-run ({}), {finished} finished before the kill; {}problems: {}; torch restored at the end: {restored}",
        killed.values().sum::<u32>(),
        list(&killed),
        sb.noted().map(|n| n + "; ").unwrap_or_default(),
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

/// `Install 3, Rollback 2`.
fn list<V: std::fmt::Display>(m: &BTreeMap<Op, V>) -> String {
    let each = m.iter().map(|(op, v)| format!("{op:?} {v}"));
    each.collect::<Vec<_>>().join(", ")
}

/// The fake runtime built in `dir`, and on it a ROCm torch `version`
/// (HIP `hip`) in dir/site.
fn fake_torch(dir: &Path, version: &str, hip: &str) -> (PathBuf, FakeTorch) {
    let runtime = rdna1_testkit::build_runtime(&dir.join("fake-runtime"));
    let site = dir.join("site");
    let torch = FakeTorch::create(&site, &runtime, TorchKind::Rocm, version, hip);
    (runtime, torch)
}

/// Grow `file` to `len` with bytes after its ELF end (it stays loadable),
/// so that kills land inside its copies and checksums; `seed` makes two
/// files' tails differ.
fn pad(file: &Path, len: u64, seed: u8) -> Result<()> {
    let mut bytes = std::fs::read(file)?;
    let at = bytes.len();
    bytes.resize(len.max(at as u64) as usize, 0);
    for (i, b) in bytes[at..].iter_mut().enumerate().step_by(4096) {
        *b = (i as u8).wrapping_add(seed);
    }
    Ok(std::fs::write(file, bytes)?)
}

/// The release binary `cargo build --release` made, in CARGO_TARGET_DIR
/// when it is set.
fn release_binary(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("release/rdna1-patch")
}
