//! The compiler MIOpen loads, as the diagnosis asks it (`verdict::Compiler`):
//! comgr for OpenCL texts and hipRTC for HIP ones, loaded in a child
//! process of this binary (`comgr::child`) and held to a time limit per
//! compile, a round's jobs in batches of about equal cost that a thread
//! per core takes from one queue. Each distinct compile
//! runs once: identical jobs share one answer within a run, and answers
//! are kept across runs by the compile's whole input (`job_key`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::cache::Cache;
use crate::comgr::child::{self, Answer, Answers, Batch, Job};

/// Where a batch is compiled.
pub trait Compiler {
    fn compile(&self, batch: &Batch) -> anyhow::Result<Answers>;
}

/// The comgr at `comgr` (and for HIP texts the hipRTC at `hiprtc`),
/// loaded in a child process of `exe` (this binary), each compile within
/// `limit`.
pub struct Child {
    pub exe: PathBuf,
    pub comgr: PathBuf,
    pub hiprtc: Option<PathBuf>,
    pub limit: Duration,
    /// The comgr's version, once a child has loaded it.
    pub version: std::cell::Cell<Option<(usize, usize)>>,
    /// The hipRTC's, likewise.
    pub hiprtc_version: std::cell::Cell<Option<(usize, usize)>>,
    /// Answers already had, by [`job_key`]: this run's, and with a cache
    /// the earlier runs' (`remember`).
    known: RefCell<HashMap<String, crate::verdict::Compiled>>,
    /// The compile cache and the compilers' identity (their SHA-256s),
    /// which every key holds; None: this run's answers only.
    kept: Option<(Cache, String)>,
    /// Compiles run in a child, and answers had without one (an identical
    /// job of this run or a cached one), since the start.
    pub ran: Cell<usize>,
    pub reused: Cell<usize>,
}

impl Child {
    /// A child of this very program.
    pub fn new(comgr: PathBuf, limit: Duration) -> anyhow::Result<Child> {
        Ok(Child {
            exe: this_program()?,
            comgr,
            hiprtc: None,
            limit,
            version: std::cell::Cell::new(None),
            hiprtc_version: std::cell::Cell::new(None),
            known: RefCell::new(HashMap::new()),
            kept: None,
            ran: Cell::new(0),
            reused: Cell::new(0),
        })
    }

    /// Keep answers in `cache` across runs, for the compilers whose
    /// identity (the SHA-256s of comgr and hipRTC) is `compilers`: an
    /// answer is a function of the compilers and the compile's input.
    /// The versions the compilers said are kept too, so that a run whose
    /// every answer is known still names them.
    pub fn remember(&mut self, cache: Cache, compilers: String) {
        let versions = cache.get(&format!("versions-{compilers}"), 64);
        if let Some((comgr, rtc)) = versions.as_deref().and_then(|v| v.split_once(' ')) {
            self.version.set(parse_version(comgr));
            self.hiprtc_version.set(parse_version(rtc));
        }
        self.kept = Some((cache, compilers));
    }
}

fn parse_version(v: &str) -> Option<(usize, usize)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn show_version(v: Option<(usize, usize)>) -> String {
    v.map_or("-".into(), |(a, b)| format!("{a}.{b}"))
}

/// The key of a compile: its whole input as the compiler is handed it
/// (the language, the target, every option in order, the text and each
/// header by name and content), and the compilers' identity. Two jobs of
/// one key are one compile. The preprocessed text would key more jobs
/// together, but costs a compile-sized call per job to make; the exact
/// input costs a hash. The text's own name is left out: comgr's code does
/// not depend on it, and its errors name it only as a position, which a
/// verdict drops (`verdict::first_error`).
pub fn job_key(compilers: &str, job: &crate::verdict::Job) -> String {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(compilers.as_bytes());
    field(format!("{:?}", job.lang).as_bytes());
    field(job.arch.as_bytes());
    if job.front_end {
        field(b"front end");
    }
    for o in options_of(job) {
        field(o.as_bytes());
    }
    field(b"text");
    field(job.text);
    for (name, text) in job.headers {
        field(name.as_bytes());
        field(text);
    }
    crate::checksum::hex(&h.finalize())
}

/// Every option a job is compiled with, as the child is handed them.
fn options_of(job: &crate::verdict::Job) -> Vec<String> {
    match job.lang {
        crate::verdict::Lang::OpenCl => crate::comgr::MIOPEN_OPTIONS
            .iter()
            .map(|o| (*o).to_owned())
            .chain(job.defines.iter().cloned())
            .collect(),
        crate::verdict::Lang::Hip => job.defines.to_vec(),
    }
}

/// An answer as kept: "o DIGEST" or "f LOG".
fn kept_text(c: &crate::verdict::Compiled) -> String {
    match c {
        crate::verdict::Compiled::Object(d) => format!("o {}", String::from_utf8_lossy(d)),
        crate::verdict::Compiled::Failed(log) => format!("f {log}"),
    }
}

fn from_kept(text: &str) -> Option<crate::verdict::Compiled> {
    use crate::verdict::Compiled;
    match text.split_at_checked(2)? {
        ("o ", d) if d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(Compiled::Object(d.as_bytes().to_vec()))
        }
        ("f ", log) => Some(Compiled::Failed(log.to_owned())),
        _ => None,
    }
}

/// Answers are kept as `compile2-KEY`: a failure's log holds the compile's
/// stderr after comgr's own (`comgr::child::KeptStderr`), which answers
/// kept before (`compile-KEY`) lack.
///
/// The most a kept answer may be: a compile's log is a few KiB.
const KEPT_LIMIT: u64 = 1 << 20;

/// This very program, to start again as the compile child: through
/// /proc/self/exe, which still runs it when its file was replaced while it
/// ran (an upgrade, a rebuild); its path would then name another program,
/// or none ("... (deleted)").
fn this_program() -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let proc = PathBuf::from("/proc/self/exe");
    if proc.exists() {
        return Ok(proc);
    }
    std::env::current_exe().context("cannot find this program to run the compile")
}

impl Compiler for Child {
    fn compile(&self, batch: &Batch) -> anyhow::Result<Answers> {
        self.spawner().compile(batch)
    }
}

/// What starts a child, without the answers' cells: shared by the threads
/// that each run a child.
struct Spawner<'a> {
    exe: &'a std::path::Path,
    comgr: &'a std::path::Path,
    hiprtc: Option<&'a std::path::Path>,
    limit: Duration,
}

impl Spawner<'_> {
    fn compile(&self, batch: &Batch) -> anyhow::Result<Answers> {
        // hipRTC is loaded only for HIP texts: a torch whose MIOpen has
        // none may carry a hipRTC that does not load here.
        let hip = batch
            .sources
            .iter()
            .any(|s| s.lang == crate::verdict::Lang::Hip);
        let compilers = child::Compilers {
            comgr: self.comgr.to_owned(),
            hiprtc: self.hiprtc.filter(|_| hip).map(|p| p.to_owned()),
        };
        child::compile_with(self.exe, &compilers, batch, self.limit)
    }
}

impl Child {
    fn spawner(&self) -> Spawner<'_> {
        Spawner {
            exe: &self.exe,
            comgr: &self.comgr,
            hiprtc: self.hiprtc.as_deref(),
            limit: self.limit,
        }
    }
}

/// The fewest jobs worth a child of their own: loading comgr costs about
/// what a few compiles do.
const JOBS_PER_CHILD: usize = 4;

/// Batches per core: enough that the cores finish together when batches
/// take unequal times (one core's last batch is a quarter of its share).
const BATCHES_PER_CORE: usize = 4;

/// What a HIP compile costs against an OpenCL one: hipRTC compiles a
/// text with HIP's headers, about ten times comgr's OpenCL compile of a
/// batch-norm kernel (Debian's 6.4.3, comgr 2.4 and hipRTC 5.2).
const HIP_COST: usize = 10;

/// `jobs` (each the cost of one) in batches: about [`BATCHES_PER_CORE`]
/// a core, each of about the same cost, at least [`JOBS_PER_CHILD`] jobs
/// a batch, the costliest (HIP) first so that no core is left with one at
/// the end. Indices into `costs`, by batch, in the order to run them.
fn batches(costs: &[usize], cores: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(costs[i]));
    let count = (cores * BATCHES_PER_CORE)
        .min(costs.len() / JOBS_PER_CHILD)
        .max(1);
    let per = costs.iter().sum::<usize>().div_ceil(count).max(1);
    let mut out: Vec<Vec<usize>> = Vec::new();
    let (mut batch, mut cost) = (Vec::new(), 0);
    for i in order {
        batch.push(i);
        cost += costs[i];
        if cost >= per && out.len() + 1 < count {
            out.push(std::mem::take(&mut batch));
            cost = 0;
        }
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// One compile at a time through the child, for the diagnosis, which
/// decides each next compile from the last answer. A child that cannot be
/// run, hangs past the limit or dies is an error, never a verdict.
impl crate::verdict::Compiler for Child {
    fn describe(&self) -> String {
        let comgr = match self.version.get() {
            Some((a, b)) => format!("comgr {a}.{b} ({})", self.comgr.display()),
            None => format!("comgr ({})", self.comgr.display()),
        };
        match (&self.hiprtc, self.hiprtc_version.get()) {
            (Some(p), Some((a, b))) => format!("{comgr}, hipRTC {a}.{b} ({})", p.display()),
            (Some(p), None) => format!("{comgr}, hipRTC ({})", p.display()),
            (None, _) => comgr,
        }
    }

    fn compile(&self, job: &crate::verdict::Job) -> anyhow::Result<crate::verdict::Compiled> {
        let mut one = crate::verdict::Compiler::compile_all(self, std::slice::from_ref(job))?;
        Ok(one.remove(0))
    }

    /// Every job, each distinct compile once (jobs of one [`job_key`]
    /// share one answer, within this run and, with a cache, across runs),
    /// in batches of about equal cost run by a thread per core
    /// ([`Child::run`]), each child a batch in which a text is sent once
    /// however many define sets it is compiled with.
    fn compile_all(
        &self,
        jobs: &[crate::verdict::Job],
    ) -> anyhow::Result<Vec<crate::verdict::Compiled>> {
        let compilers = self.kept.as_ref().map_or("", |(_, c)| c.as_str());
        let keys: Vec<String> = jobs.iter().map(|j| job_key(compilers, j)).collect();
        // The jobs to run: one per key no answer is known for.
        let mut todo: Vec<usize> = Vec::new();
        {
            let mut known = self.known.borrow_mut();
            for (i, key) in keys.iter().enumerate() {
                if known.contains_key(key) || todo.iter().any(|&t| keys[t] == *key) {
                    continue;
                }
                let kept = self.kept.as_ref().and_then(|(cache, _)| {
                    cache
                        .get(&format!("compile2-{key}"), KEPT_LIMIT)
                        .and_then(|t| from_kept(&t))
                });
                match kept {
                    Some(c) => {
                        known.insert(key.clone(), c);
                    }
                    None => todo.push(i),
                }
            }
        }
        self.ran.set(self.ran.get() + todo.len());
        self.reused.set(self.reused.get() + jobs.len() - todo.len());
        if !todo.is_empty() {
            let run: Vec<&crate::verdict::Job> = todo.iter().map(|&i| &jobs[i]).collect();
            let answers = self.run(&run)?;
            let mut known = self.known.borrow_mut();
            for (&i, answer) in todo.iter().zip(answers) {
                if let Some((cache, _)) = &self.kept {
                    cache.put(&format!("compile2-{}", keys[i]), &kept_text(&answer));
                }
                known.insert(keys[i].clone(), answer);
            }
            if let Some((cache, compilers)) = &self.kept {
                let versions = format!(
                    "{} {}",
                    show_version(self.version.get()),
                    show_version(self.hiprtc_version.get())
                );
                cache.put(&format!("versions-{compilers}"), &versions);
            }
        }
        let known = self.known.borrow();
        Ok(keys.iter().map(|k| known[k].clone()).collect())
    }
}

impl Child {
    /// `distinct` (no two of one key), in batches of about equal cost
    /// ([`batches`]), taken from one queue by a thread per core, each
    /// batch in a child of its own. Once a batch fails, no more are
    /// started.
    fn run(
        &self,
        distinct: &[&crate::verdict::Job],
    ) -> anyhow::Result<Vec<crate::verdict::Compiled>> {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let costs: Vec<usize> = distinct
            .iter()
            .map(|j| match j.lang {
                crate::verdict::Lang::Hip => HIP_COST,
                crate::verdict::Lang::OpenCl => 1,
            })
            .collect();
        let groups = batches(&costs, cores);
        let batches: Vec<Batch> = groups
            .iter()
            .map(|g| self.batch_of(&g.iter().map(|&i| distinct[i]).collect::<Vec<_>>()))
            .collect::<anyhow::Result<_>>()?;
        let spawner = self.spawner();
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let answered: Vec<std::sync::Mutex<Option<anyhow::Result<Answers>>>> = batches
            .iter()
            .map(|_| std::sync::Mutex::new(None))
            .collect();
        std::thread::scope(|s| {
            for _ in 0..cores.min(batches.len()) {
                s.spawn(|| {
                    while !stop.load(Ordering::SeqCst) {
                        let k = next.fetch_add(1, Ordering::SeqCst);
                        let Some(batch) = batches.get(k) else { break };
                        let answer = spawner.compile(batch);
                        if answer.is_err() {
                            stop.store(true, Ordering::SeqCst);
                        }
                        *answered[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
                    }
                });
            }
        });
        let mut compiled: Vec<Option<crate::verdict::Compiled>> = vec![None; distinct.len()];
        for ((group, batch), answer) in groups.iter().zip(&batches).zip(answered) {
            let answer = answer.into_inner().unwrap_or_else(|e| e.into_inner());
            // A batch not started: another failed first, and says why.
            let Some(answer) = answer else { continue };
            for (&i, c) in group.iter().zip(self.answered(batch, answer?)?) {
                compiled[i] = Some(c);
            }
        }
        compiled
            .into_iter()
            .map(|c| c.ok_or_else(|| anyhow::anyhow!("a batch of compiles was never run")))
            .collect()
    }
}

impl Child {
    /// One child's batch of `jobs`.
    fn batch_of(&self, jobs: &[&crate::verdict::Job]) -> anyhow::Result<Batch> {
        use crate::verdict::Lang;
        let mut batch = Batch::default();
        let mut sent: Vec<(&[u8], usize)> = Vec::new();
        for job in jobs {
            let source = match sent.iter().find(|(t, _)| std::ptr::eq(*t, job.text)) {
                Some((_, s)) => *s,
                None => {
                    let s = match job.lang {
                        Lang::OpenCl => batch.add_source(job.name.to_owned(), job.text.to_vec()),
                        Lang::Hip if self.hiprtc.is_none() => {
                            return Err(crate::error::hint(
                                format!(
                                    "{} is a HIP kernel, and no hipRTC was found beside {}",
                                    job.name,
                                    self.comgr.display()
                                ),
                                "MIOpen compiles its HIP kernels with hipRTC (libhiprtc.so), which ROCm and torch's ROCm libraries carry beside comgr: install it (Debian: libhiprtc7), or, for install, pass --unproven to install without the proof",
                            ));
                        }
                        Lang::Hip => batch.add_hip_source(
                            job.name.to_owned(),
                            job.text.to_vec(),
                            job.headers,
                        ),
                    };
                    sent.push((job.text, s));
                    s
                }
            };
            batch.add_job(Job {
                source,
                target: job.arch.to_owned(),
                options: options_of(job),
                after: None,
                front_end: job.front_end,
            });
        }
        Ok(batch)
    }

    /// What one child answered for `batch`, as the diagnosis reads it.
    fn answered(&self, batch: &Batch, a: Answers) -> anyhow::Result<Vec<crate::verdict::Compiled>> {
        use crate::verdict::Compiled;
        self.version.set(Some(a.version));
        // A batch without HIP texts loads no hipRTC: what it said stays.
        if a.hiprtc.is_some() {
            self.hiprtc_version.set(a.hiprtc);
        }
        a.answers
            .into_iter()
            .enumerate()
            .map(|(i, answer)| match answer {
                Answer::Compiled(digest) => Ok(Compiled::Object(digest.into_bytes())),
                Answer::Failed(e) => Ok(Compiled::Failed(e)),
                Answer::Broken(what) => Err(crate::error::hint(
                    format!(
                        "comgr {} answered the compile of {} with {what}, not an AMD GPU code object: no verdict of it can be believed",
                        self.comgr.display(),
                        batch.describe(i)
                    ),
                    "reinstall torch (it bundles its comgr) or the ROCm whose comgr this is, then run this again; nothing was changed or kept",
                )),
                Answer::Skipped => anyhow::bail!(
                    "comgr {} gave no answer for {}",
                    self.comgr.display(),
                    batch.describe(i)
                ),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// About four batches a core, of about equal cost, the HIP ones
    /// (ten times an OpenCL compile) first; every job in one batch.
    #[test]
    fn batches_are_of_equal_cost_and_the_costliest_go_first() {
        let mut costs = vec![1; 200];
        costs.extend([HIP_COST; 12]);
        let b = batches(&costs, 2);
        assert_eq!(b.len(), 8);
        let cost = |g: &Vec<usize>| g.iter().map(|&i| costs[i]).sum::<usize>();
        let total: usize = costs.iter().sum();
        for g in &b[..7] {
            assert!(
                cost(g) >= total / 8 && cost(g) < total / 8 + HIP_COST,
                "{}",
                cost(g)
            );
        }
        assert!(b[0].iter().all(|&i| costs[i] == HIP_COST));
        let mut all: Vec<usize> = b.concat();
        all.sort_unstable();
        assert_eq!(all, (0..costs.len()).collect::<Vec<_>>());
        // Few jobs: one batch each of at least four, or one in all.
        assert_eq!(batches(&[1; 3], 2).len(), 1);
        assert_eq!(batches(&[1; 9], 2).len(), 2);
    }
}
