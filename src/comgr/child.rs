//! Compiles through comgr in a child process: this binary again, started
//! with [`CHILD_ENV`] set (an entry point no help, completion or man page
//! offers, like the test hooks). The child loads the comgr, reads a
//! [`Batch`] of jobs on stdin and answers one line per job on stdout as it
//! goes; the parent holds every compile to a time limit, killing the
//! child's process group past it. A comgr that hangs, aborts, or answers
//! without bound costs a failed check, not the run, and none of its code
//! runs in the process that writes to torch.
//!
//! What it loads is vetted whole first, and loaded from the very files
//! checked ([`super::vet`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::Comgr;
use super::hiprtc::{self, Hiprtc};
use crate::error::hint;
use crate::verdict::Lang;

/// Set (to anything) in the child's environment: `cli::main` then serves a
/// batch instead of parsing a command line.
pub const CHILD_ENV: &str = "RDNA1_PATCH_COMGR_CHILD";

/// The most a request may be: every kernel text of two libraries is a few MB.
const REQUEST_CAP: u64 = 256 << 20;
/// The most of a compiler's error kept per job: its first lines are what
/// is shown.
const ANSWER_CAP: usize = 4096;

/// Kernel texts and the compiles to make of them, for one child.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Batch {
    pub sources: Vec<Source>,
    pub jobs: Vec<Job>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Source {
    /// The file name comgr compiles it as, e.g. `MIOpenBatchNormFwdTrainSpatial.cl`.
    pub name: String,
    #[serde(with = "base64_bytes")]
    pub text: Vec<u8>,
    /// OpenCL goes to comgr, HIP to hipRTC.
    #[serde(default)]
    pub lang: Lang,
    /// A HIP text's headers, by include name.
    #[serde(default)]
    pub headers: Vec<Header>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub name: String,
    #[serde(with = "base64_bytes")]
    pub text: Vec<u8>,
}

/// One compile: a source of the batch for a target with options.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// Index into [`Batch::sources`].
    pub source: usize,
    /// e.g. `gfx1010`.
    pub target: String,
    /// For OpenCL, all of them (MIOpen's are [`super::MIOPEN_OPTIONS`]);
    /// for HIP, the solver's, after which the child puts MIOpen's own for
    /// the hipRTC it loaded ([`hiprtc::miopen_options`]).
    pub options: Vec<String>,
    /// An earlier job of the batch: this one is skipped unless that one
    /// compiled (the variants of a kernel, after its first failure).
    pub after: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The SHA-256 of the code (`elf::code_digest`): two compiles to the
    /// same machine code say so.
    Compiled(String),
    /// The compiler's first errors, or what failed.
    Failed(String),
    Skipped,
}

/// What a batch came to, and which compilers said so.
#[derive(Debug, Clone)]
pub struct Answers {
    pub version: (usize, usize),
    pub hiprtc: Option<(usize, usize)>,
    pub answers: Vec<Answer>,
}

/// The compilers a child loads: the comgr, and for HIP texts the hipRTC.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Compilers {
    pub comgr: PathBuf,
    pub hiprtc: Option<PathBuf>,
}

impl Batch {
    pub fn add_source(&mut self, name: String, text: Vec<u8>) -> usize {
        self.sources.push(Source {
            name,
            text,
            lang: Lang::OpenCl,
            headers: Vec::new(),
        });
        self.sources.len() - 1
    }

    /// A HIP text with the headers it includes.
    pub fn add_hip_source(
        &mut self,
        name: String,
        text: Vec<u8>,
        headers: &[(String, Vec<u8>)],
    ) -> usize {
        self.sources.push(Source {
            name,
            text,
            lang: Lang::Hip,
            headers: headers
                .iter()
                .map(|(name, text)| Header {
                    name: name.clone(),
                    text: text.clone(),
                })
                .collect(),
        });
        self.sources.len() - 1
    }

    pub fn add_job(&mut self, job: Job) -> usize {
        self.jobs.push(job);
        self.jobs.len() - 1
    }

    /// A job, as a person reads it: `MIOpenBatchNormBwdSpatial.cl for gfx1010`.
    pub fn describe(&self, job: usize) -> String {
        let j = &self.jobs[job];
        let name = self.sources.get(j.source).map_or("?", |s| s.name.as_str());
        format!("{name} for {}", j.target)
    }
}

/// Compile `batch` through `comgr` (and `hiprtc` for HIP texts) in this
/// process, the child's, calling `each` with every answer as it comes.
pub fn run_in_process(
    comgr: &Comgr,
    hiprtc: Option<&Hiprtc>,
    batch: &Batch,
    mut each: impl FnMut(&Answer),
) -> Vec<Answer> {
    let mut answers: Vec<Answer> = Vec::with_capacity(batch.jobs.len());
    for (i, job) in batch.jobs.iter().enumerate() {
        let waits_in_vain = job
            .after
            .is_some_and(|a| a >= i || !matches!(answers[a], Answer::Compiled(_)));
        let answer = match batch.sources.get(job.source) {
            _ if waits_in_vain => Answer::Skipped,
            None => Answer::Failed(format!("no source {} in the batch", job.source)),
            Some(s) => match compile_one(comgr, hiprtc, s, job) {
                Ok(object) => Answer::Compiled(crate::elf::code_digest(&object)),
                Err(e) => Answer::Failed(cut(e, ANSWER_CAP)),
            },
        };
        each(&answer);
        answers.push(answer);
    }
    answers
}

fn compile_one(
    comgr: &Comgr,
    hiprtc: Option<&Hiprtc>,
    s: &Source,
    job: &Job,
) -> std::result::Result<Vec<u8>, String> {
    // The names comgr writes files by: only plain relative ones, whoever
    // made the batch (`verdict::Unit::refused` keeps the others out first).
    let names = std::iter::once(&s.name).chain(s.headers.iter().map(|h| &h.name));
    for name in names {
        if let Some(how) = crate::verdict::unplain(name) {
            return Err(format!(
                "{name:?} is {how}, and a compiler is handed only plain relative names"
            ));
        }
    }
    match (s.lang, hiprtc) {
        (Lang::OpenCl, _) => comgr.compile_ocl(&s.name, &s.text, &job.target, &job.options),
        (Lang::Hip, Some(rtc)) => {
            let headers: Vec<(String, Vec<u8>)> = s
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.text.clone()))
                .collect();
            let mut options = hiprtc::miopen_options(&job.target, rtc.version);
            options.extend(job.options.iter().cloned());
            rtc.compile_hip(&s.name, &s.text, &headers, &options)
        }
        (Lang::Hip, None) => Err(format!("{} is HIP, and no hipRTC was loaded", s.name)),
    }
}

fn cut(mut text: String, cap: usize) -> String {
    if text.len() > cap {
        let mut at = cap;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push_str(" [...]");
    }
    text
}

/// The request the parent writes to the child's stdin.
#[derive(Serialize, Deserialize)]
struct Request {
    compilers: Compilers,
    batch: Batch,
    /// The user root acts for under sudo, trusted with their own files
    /// (`owner::invoking_user`): the child's environment has no SUDO_UID.
    trusted: Option<u32>,
}

/// The child's first line: the comgr it loaded, or why it did not.
#[derive(Serialize, Deserialize)]
enum Hello {
    Loaded {
        comgr: (usize, usize),
        hiprtc: Option<(usize, usize)>,
    },
    Refused {
        error: String,
        help: Option<String>,
    },
}

/// Compile `batch` through the comgr at `comgr` in a child process of
/// `exe` (this binary), each compile (and the load) within `limit`.
pub fn compile(exe: &Path, comgr: &Path, batch: &Batch, limit: Duration) -> Result<Answers> {
    let compilers = Compilers {
        comgr: comgr.to_owned(),
        hiprtc: None,
    };
    compile_with(exe, &compilers, batch, limit)
}

/// [`compile`], with a hipRTC for the batch's HIP texts.
pub fn compile_with(
    exe: &Path,
    compilers: &Compilers,
    batch: &Batch,
    limit: Duration,
) -> Result<Answers> {
    let comgr = compilers.comgr.as_path();
    let request = serde_json::to_vec(&Request {
        compilers: compilers.clone(),
        batch: batch.clone(),
        trusted: crate::owner::invoking_user(),
    })?;
    let mut cmd = std::process::Command::new(exe);
    cmd.env(CHILD_ENV, "1");
    let jobs = u32::try_from(batch.jobs.len()).unwrap_or(u32::MAX);
    let total = limit.saturating_mul(jobs.saturating_add(1));
    let out = crate::proc::run_fed(cmd, request, limit, total)?;
    let mut lines = out.stdout.lines();
    let hello: Option<Hello> = lines.next().and_then(|l| serde_json::from_str(l).ok());
    let (version, hiprtc) = match hello {
        Some(Hello::Loaded { comgr, hiprtc }) => (comgr, hiprtc),
        Some(Hello::Refused { error, help }) => {
            return Err(match help {
                Some(help) => hint(error, help),
                None => anyhow!(error),
            });
        }
        None if out.status.is_none() => bail!(
            "comgr {} did not load within {} s, and was stopped",
            comgr.display(),
            limit.as_secs()
        ),
        None => bail!(
            "comgr {} could not be loaded{}",
            comgr.display(),
            ended(&out)
        ),
    };
    let answers: Vec<Answer> = lines
        .map_while(|l| serde_json::from_str(l).ok())
        .take(batch.jobs.len())
        .collect();
    if answers.len() < batch.jobs.len() {
        let at = batch.describe(answers.len());
        if out.status.is_none() {
            return Err(hint(
                format!(
                    "comgr {} did not finish compiling {at} within {} s, and was stopped",
                    comgr.display(),
                    limit.as_secs()
                ),
                "a compile takes seconds: this comgr hangs on MIOpen's kernels (--timeout SECS gives each compile longer)",
            ));
        }
        bail!(
            "comgr {} failed compiling {at}{}",
            comgr.display(),
            ended(&out)
        );
    }
    Ok(Answers {
        version,
        hiprtc,
        answers,
    })
}

/// How a child that stopped short ended, and the last thing it said.
fn ended(out: &crate::proc::Output) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match out.status {
        Some(s) => match s.signal() {
            Some(sig) => format!(": the compile died of signal {sig} ({})", signal_name(sig)),
            None => format!(
                ": the compile exited with status {}",
                s.code().unwrap_or(-1)
            ),
        },
        None => String::new(),
    };
    let said = out.stderr.lines().rev().find(|l| !l.trim().is_empty());
    match said {
        Some(l) => format!("{how}; it said: {}", cut(l.trim().to_owned(), 500)),
        None => how,
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}

/// The child's side: load the comgr the request names, compile its batch,
/// one answer a line. Its own stdout is kept for the answers; anything the
/// comgr prints goes to stderr, which the parent reads apart.
pub fn serve() -> std::process::ExitCode {
    use std::os::fd::FromRawFd;
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    // SAFETY: plain descriptor calls at the start of the process, before
    // any thread or library uses descriptors 1 and 2. The kept copy is
    // close-on-exec: a program comgr starts never writes to it.
    let mut answers = unsafe {
        let kept = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if kept < 0 || libc::dup2(2, 1) < 0 {
            return std::process::ExitCode::from(2);
        }
        std::fs::File::from_raw_fd(kept)
    };
    let mut say = |line: String| {
        // A parent gone (killed, or past its limit) ends the child too.
        if writeln!(answers, "{line}")
            .and_then(|()| answers.flush())
            .is_err()
        {
            std::process::exit(2);
        }
    };
    let refused = |e: &anyhow::Error| {
        serde_json::to_string(&Hello::Refused {
            error: format!("{e:#}"),
            help: crate::error::help(e).map(str::to_owned),
        })
        .unwrap_or_default()
    };
    let loaded = read_request().and_then(load);
    let (comgr, rtc, batch) = match loaded {
        Ok(l) => l,
        Err(e) => {
            say(refused(&e));
            return std::process::ExitCode::from(2);
        }
    };
    let hello = Hello::Loaded {
        comgr: comgr.version,
        hiprtc: rtc.as_ref().map(|r| r.version),
    };
    say(serde_json::to_string(&hello).unwrap_or_default());
    run_in_process(&comgr, rtc.as_ref(), &batch, |a| {
        say(serde_json::to_string(a).unwrap_or_default());
    });
    std::process::ExitCode::SUCCESS
}

/// Vet what the request names and everything it needs, holding each file
/// open; load what was vetted.
fn load(r: Request) -> Result<(Comgr, Option<Hiprtc>, Batch)> {
    let wanted: Vec<&Path> = std::iter::once(r.compilers.comgr.as_path())
        .chain(r.compilers.hiprtc.as_deref())
        .collect();
    let vetted = super::vet::vet(&wanted, r.trusted)?;
    super::swap_point();
    let handles = vetted.load()?;
    let comgr = Comgr::from_handle(&r.compilers.comgr, handles[0])?;
    let rtc = match &r.compilers.hiprtc {
        Some(p) => Some(Hiprtc::from_handle(p, vetted.real(1), handles[1])?),
        None => None,
    };
    Ok((comgr, rtc, r.batch))
}

fn read_request() -> Result<Request> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(REQUEST_CAP + 1)
        .read_to_end(&mut bytes)
        .context("cannot read the compile request")?;
    if bytes.len() as u64 > REQUEST_CAP {
        bail!("the compile request is over {} MiB", REQUEST_CAP >> 20);
    }
    serde_json::from_slice(&bytes).context("the compile request does not parse")
}

/// Bytes as base64 in JSON: kernel texts need not be UTF-8.
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}
