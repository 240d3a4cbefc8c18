//! The compiler MIOpen loads, as the diagnosis asks it (`verdict::Compiler`):
//! comgr for OpenCL texts and hipRTC for HIP ones, loaded in child
//! processes of this binary (`comgr::child`), one per core kept warm for
//! the run (`pool`), each compile held to a time limit. A job the
//! diagnosis asks after an answer (the second round's) is queued the
//! moment that answer is in. Each distinct compile runs once: identical
//! jobs share one answer within a run, and answers are kept across runs
//! by the compile's whole input (`job_key`).

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::cache::Cache;
use crate::comgr::child::{self, Answer};
use crate::verdict::Compiled;

mod pool;

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
    /// The children, once a compile needs them.
    pool: OnceCell<pool::Pool>,
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
            pool: OnceCell::new(),
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
/// one key are one compile. A compile to code whose front end was asked
/// first ([`crate::verdict::Job::code_of`]) is keyed by that front end
/// and the options that are not a `-D` (which the front end has taken
/// in) instead of its text: cases whose preprocessed text or IR is the
/// same compile once. The text's own name is left out: comgr's code does
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
    if let Some(front) = &job.code_of {
        field(b"code of front end");
        field(front);
        for o in options_of(job).iter().filter(|o| !o.starts_with("-D")) {
            field(o.as_bytes());
        }
        return crate::checksum::hex(&h.finalize());
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

/// What a HIP compile costs against an OpenCL one: hipRTC compiles a
/// text with HIP's headers, about ten times comgr's OpenCL compile of a
/// batch-norm kernel (Debian's 6.4.3, comgr 2.4 and hipRTC 5.2).
const HIP_COST: usize = 10;

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

    /// Every job, each distinct compile once: [`Compiler::compile_then`]
    /// with nothing after.
    fn compile_all(
        &self,
        jobs: &[crate::verdict::Job],
    ) -> anyhow::Result<Vec<crate::verdict::Compiled>> {
        crate::verdict::Compiler::compile_then(self, jobs, &mut |_, _| Vec::new())
    }

    /// Every job, and the ones `then` asks after each answer, each
    /// distinct compile once (jobs of one [`job_key`] share one answer,
    /// within this run and, with a cache, across runs), on the warm
    /// children of the run ([`pool`]), a job `then` asks queued as soon as
    /// the answer it follows is in. At the first error nothing more is
    /// started; the jobs running end, and the error of the first job
    /// asked is the one said.
    fn compile_then<'a>(
        &self,
        jobs: &[crate::verdict::Job<'a>],
        then: &mut dyn FnMut(usize, &Compiled) -> Vec<crate::verdict::Job<'a>>,
    ) -> anyhow::Result<Vec<Compiled>> {
        let mut run = Run {
            child: self,
            compilers: self
                .kept
                .as_ref()
                .map_or("", |(_, c)| c.as_str())
                .to_owned(),
            answers: Vec::new(),
            keys: Vec::new(),
            names: Vec::new(),
            waiting: HashMap::new(),
            sent: Vec::new(),
            cancelled: Arc::new(AtomicBool::new(false)),
            reply: std::sync::mpsc::channel(),
            running: 0,
            failed: None,
            ready: std::collections::VecDeque::new(),
        };
        for job in jobs {
            run.ask(job);
        }
        run.drain(then)?;
        Ok(run
            .answers
            .into_iter()
            .map(|a| a.expect("every job answered"))
            .collect())
    }
}

/// A text sent this call: the addresses of the text and its headers (a
/// unit's), its id, and the text as a child is sent it.
type Sent = (
    (*const u8, *const (String, Vec<u8>)),
    usize,
    Arc<child::Source>,
);

/// One [`Compiler::compile_then`] call's state.
struct Run<'c> {
    child: &'c Child,
    compilers: String,
    /// By number: None until answered.
    answers: Vec<Option<Compiled>>,
    keys: Vec<String>,
    /// "NAME for TARGET", by number.
    names: Vec<String>,
    /// The numbers waiting on a key being compiled.
    waiting: HashMap<String, Vec<usize>>,
    /// The texts sent this call, by the addresses of the text and its
    /// headers, with their ids.
    sent: Vec<Sent>,
    cancelled: Arc<AtomicBool>,
    reply: (
        std::sync::mpsc::Sender<pool::Reply>,
        std::sync::mpsc::Receiver<pool::Reply>,
    ),
    /// Tasks queued and not yet answered.
    running: usize,
    /// The first error, by the number of the job it came from.
    failed: Option<(usize, anyhow::Error)>,
    /// Numbers answered whose `then` is yet to be called, in order.
    ready: std::collections::VecDeque<usize>,
}

impl Run<'_> {
    /// Number `job` and answer it: at once when its key is known, with
    /// the job of the same key when one is being compiled, else by a
    /// child. After an error, nothing more is started.
    fn ask(&mut self, job: &crate::verdict::Job) {
        let n = self.answers.len();
        let key = job_key(&self.compilers, job);
        self.answers.push(None);
        self.keys.push(key.clone());
        self.names.push(format!("{} for {}", job.name, job.arch));
        if self.failed.is_some() {
            return;
        }
        let child = self.child;
        if let Some(c) = child.known(&key) {
            child.reused.set(child.reused.get() + 1);
            self.answers[n] = Some(c);
            self.ready.push_back(n);
            return;
        }
        if let Some(w) = self.waiting.get_mut(&key) {
            child.reused.set(child.reused.get() + 1);
            w.push(n);
            return;
        }
        let source = match self.source_of(job) {
            Ok(s) => s,
            Err(e) => {
                self.fail(n, e);
                return;
            }
        };
        child.ran.set(child.ran.get() + 1);
        self.waiting.insert(key, vec![n]);
        let task = pool::Task::new(
            source,
            child::Job {
                source: 0,
                target: job.arch.to_owned(),
                options: options_of(job),
                after: None,
                front_end: job.front_end,
            },
            self.names[n].clone(),
            (n, self.reply.0.clone()),
            self.cancelled.clone(),
        );
        child.pool().push(task);
        self.running += 1;
    }

    /// The text of `job` as a child is sent it, with its id: made once a
    /// call, however many define sets it is compiled with.
    fn source_of(
        &mut self,
        job: &crate::verdict::Job,
    ) -> anyhow::Result<(usize, Arc<child::Source>)> {
        use crate::verdict::Lang;
        let at = (job.text.as_ptr(), job.headers.as_ptr());
        if let Some((_, id, s)) = self.sent.iter().find(|(t, ..)| *t == at) {
            return Ok((*id, s.clone()));
        }
        if job.lang == Lang::Hip && self.child.hiprtc.is_none() {
            return Err(crate::error::hint(
                format!(
                    "{} is a HIP kernel, and no hipRTC was found beside {}",
                    job.name,
                    self.child.comgr.display()
                ),
                "MIOpen compiles its HIP kernels with hipRTC (libhiprtc.so), which ROCm and torch's ROCm libraries carry beside comgr: install it (Debian: libhiprtc7), or, for install, pass --unproven to install without the proof",
            ));
        }
        let source = Arc::new(child::Source {
            name: job.name.to_owned(),
            text: job.text.to_vec(),
            lang: job.lang,
            headers: job
                .headers
                .iter()
                .map(|(name, text)| child::Header {
                    name: name.clone(),
                    text: text.clone(),
                })
                .collect(),
        });
        let id = self.child.pool().id();
        self.sent.push((at, id, source.clone()));
        Ok((id, source))
    }

    /// Keep the error of the first job asked.
    fn fail(&mut self, n: usize, e: anyhow::Error) {
        self.cancelled.store(true, Ordering::SeqCst);
        if self.failed.as_ref().is_none_or(|(first, _)| n < *first) {
            self.failed = Some((n, e));
        }
    }

    /// Answer what was asked, and what `then` asks after each answer,
    /// until nothing is left running.
    fn drain<'a>(
        &mut self,
        then: &mut dyn FnMut(usize, &Compiled) -> Vec<crate::verdict::Job<'a>>,
    ) -> anyhow::Result<()> {
        loop {
            while let Some(n) = self.ready.pop_front() {
                if self.failed.is_some() {
                    break;
                }
                let answer = self.answers[n].clone().expect("answered");
                for job in then(n, &answer) {
                    self.ask(&job);
                }
            }
            if self.running == 0 {
                break;
            }
            let Ok(r) = self.reply.1.recv() else { break };
            self.running -= 1;
            self.received(r);
            // Stopped by a signal: nothing more is started.
            if crate::interrupt::interrupted().is_some() {
                self.cancelled.store(true, Ordering::SeqCst);
            }
        }
        if let Some(sig) = crate::interrupt::interrupted() {
            return Err(crate::interrupt::stopped("rdna1-patch", sig));
        }
        if let Some((_, e)) = self.failed.take() {
            return Err(e);
        }
        let child = self.child;
        if let Some((cache, compilers)) = &child.kept {
            let versions = format!(
                "{} {}",
                show_version(child.version.get()),
                show_version(child.hiprtc_version.get())
            );
            cache.put(&format!("versions-{compilers}"), &versions);
        }
        Ok(())
    }

    fn received(&mut self, r: pool::Reply) {
        let child = self.child;
        if let Some((comgr, rtc)) = r.versions {
            child.version.set(Some(comgr));
            // A child without HIP texts loads no hipRTC: what it said stays.
            if rtc.is_some() {
                child.hiprtc_version.set(rtc);
            }
        }
        // Answered unrun, after another's error.
        if matches!(r.answer, Ok(Answer::Skipped)) && self.cancelled.load(Ordering::SeqCst) {
            return;
        }
        let key = self.keys[r.index].clone();
        let waiting = self.waiting.remove(&key).unwrap_or_default();
        match r
            .answer
            .and_then(|a| child.compiled(a, &self.names[r.index]))
        {
            Ok(c) => {
                child.learn(&key, &c);
                for w in waiting {
                    self.answers[w] = Some(c.clone());
                    self.ready.push_back(w);
                }
            }
            Err(e) => self.fail(r.index, e),
        }
    }
}

impl Child {
    /// The children, started at the first compile.
    fn pool(&self) -> &pool::Pool {
        self.pool.get_or_init(|| {
            pool::Pool::new(pool::Spawn {
                exe: self.exe.clone(),
                comgr: self.comgr.clone(),
                hiprtc: self.hiprtc.clone(),
                limit: self.limit,
            })
        })
    }

    /// The answer of `key` had before: this run's, or a kept one.
    fn known(&self, key: &str) -> Option<Compiled> {
        if let Some(c) = self.known.borrow().get(key) {
            return Some(c.clone());
        }
        let (cache, _) = self.kept.as_ref()?;
        let c = cache
            .get(&format!("compile2-{key}"), KEPT_LIMIT)
            .and_then(|t| from_kept(&t))?;
        self.known.borrow_mut().insert(key.to_owned(), c.clone());
        Some(c)
    }

    /// Remember the answer of `key`, for this run and, with a cache, the next.
    fn learn(&self, key: &str, c: &Compiled) {
        if let Some((cache, _)) = &self.kept {
            cache.put(&format!("compile2-{key}"), &kept_text(c));
        }
        self.known.borrow_mut().insert(key.to_owned(), c.clone());
    }

    /// A child's answer to the compile `at` ("NAME for TARGET"), as the
    /// diagnosis reads it.
    fn compiled(&self, answer: Answer, at: &str) -> anyhow::Result<Compiled> {
        match answer {
            Answer::Compiled(digest) => Ok(Compiled::Object(digest.into_bytes())),
            Answer::Failed(e) => Ok(Compiled::Failed(e)),
            Answer::Broken(what) => Err(crate::error::hint(
                format!(
                    "comgr {} answered the compile of {at} with {what}, not an AMD GPU code object: no verdict of it can be believed",
                    self.comgr.display(),
                ),
                "reinstall torch (it bundles its comgr) or the ROCm whose comgr this is, then run this again; nothing was changed or kept",
            )),
            Answer::Skipped => {
                anyhow::bail!("comgr {} gave no answer for {at}", self.comgr.display(),)
            }
        }
    }
}
