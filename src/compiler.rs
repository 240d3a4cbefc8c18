//! The compiler MIOpen loads, as the diagnosis asks it (`verdict::Compiler`):
//! comgr for OpenCL texts and hipRTC for HIP ones, loaded in a child
//! process of this binary (`comgr::child`) and held to a time limit per
//! compile, every job of a round sent in one batch.

use std::path::PathBuf;
use std::time::Duration;

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
        })
    }
}

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

/// How many children to compile `jobs` jobs in: one per core, each with
/// at least [`JOBS_PER_CHILD`] jobs.
fn children_for(jobs: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(jobs / JOBS_PER_CHILD).max(1)
}

/// Whether two jobs are the same compile: the same text and headers, the
/// same defines, for the same target.
fn same_job(a: &crate::verdict::Job, b: &crate::verdict::Job) -> bool {
    a.arch == b.arch
        && a.lang == b.lang
        && a.defines == b.defines
        && (std::ptr::eq(a.text, b.text) || a.text == b.text)
        && a.headers == b.headers
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

    /// Every job, each distinct compile once (identical jobs share one
    /// answer), in as many children as the machine has cores, each child
    /// a batch in which a text is sent once however many define sets it
    /// is compiled with.
    fn compile_all(
        &self,
        jobs: &[crate::verdict::Job],
    ) -> anyhow::Result<Vec<crate::verdict::Compiled>> {
        let mut distinct: Vec<&crate::verdict::Job> = Vec::new();
        let mut of: Vec<usize> = Vec::with_capacity(jobs.len());
        for j in jobs {
            match distinct.iter().position(|d| same_job(d, j)) {
                Some(p) => of.push(p),
                None => {
                    of.push(distinct.len());
                    distinct.push(j);
                }
            }
        }
        let per = distinct.len().div_ceil(children_for(distinct.len())).max(1);
        let batches: Vec<Batch> = distinct
            .chunks(per)
            .map(|c| self.batch_of(c))
            .collect::<anyhow::Result<_>>()?;
        let spawner = self.spawner();
        let answered: Vec<anyhow::Result<Answers>> = std::thread::scope(|s| {
            let running: Vec<_> = batches
                .iter()
                .map(|b| s.spawn(|| spawner.compile(b)))
                .collect();
            running
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a compile thread panicked")))
                })
                .collect()
        });
        let mut compiled = Vec::with_capacity(distinct.len());
        for (batch, answers) in batches.iter().zip(answered) {
            compiled.extend(self.answered(batch, answers?)?);
        }
        Ok(of.into_iter().map(|p| compiled[p].clone()).collect())
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
            let options = match job.lang {
                Lang::OpenCl => crate::comgr::MIOPEN_OPTIONS
                    .iter()
                    .map(|o| (*o).to_owned())
                    .chain(job.defines.iter().cloned())
                    .collect(),
                Lang::Hip => job.defines.to_vec(),
            };
            batch.add_job(Job {
                source,
                target: job.arch.to_owned(),
                options,
                after: None,
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
