//! Compiles through comgr in a child process: this binary again, started
//! with [`CHILD_ENV`] set (an entry point no help, completion or man page
//! offers, like the test hooks). The child loads the comgr, reads a
//! [`Batch`] of jobs on stdin and answers one line per job on stdout as it
//! goes; the parent holds every compile to a time limit, killing the
//! child's process group past it. A comgr that hangs, aborts, or answers
//! without bound costs a failed check, not the run, and none of its code
//! runs in the process that writes to torch.
//!
//! The child runs with no more privilege than the files it reads: under
//! sudo it drops to sudo's user (no supplementary groups, then the group,
//! then the user, checked) once it has vetted and opened what it loads
//! ([`super::vet`]) and before any of it runs. It starts in an empty
//! directory of its own, its cwd, TMPDIR and HOME, removed afterwards,
//! with an environment the tool builds ([`CHILD_PATH`] and those three,
//! nothing of the caller's: no `AMD_COMGR_*`, no `LD_*`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

use crate::compile::Lang;

/// Set (to anything) in the child's environment: `cli::main` then serves a
/// batch instead of parsing a command line.
pub const CHILD_ENV: &str = "RDNA1_PATCH_COMGR_CHILD";

/// The child's PATH: the system's programs, none of the caller's.
pub const CHILD_PATH: &str = "/usr/bin:/bin";

mod serve;
mod stderr;
mod warm;
pub use serve::serve;
pub use stderr::KeptStderr;
pub use warm::Warm;

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
    /// The front end alone: the answer is the SHA-256 of an OpenCL text's
    /// IR before any pass ([`Comgr::front_end_ocl`]), or of a HIP text as
    /// hipRTC preprocesses it ([`hiprtc::Hiprtc::front_end_hip`]), not
    /// of a code object.
    #[serde(default)]
    pub front_end: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The SHA-256 of the code (`elf::code_digest`): two compiles to the
    /// same machine code say so.
    Compiled(String),
    /// The compiler's first errors, or what failed.
    Failed(String),
    /// The compile succeeded and answered something that is no AMD GPU
    /// code object (what it is): a compiler not to be believed.
    Broken(String),
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

/// The request the parent writes first to the child's stdin, a line:
/// what to load, and as whom. [`Work`] lines follow, as many as the run
/// has compiles; the child ends when its stdin does.
#[derive(Serialize, Deserialize)]
struct Request {
    compilers: Compilers,
    /// The user root acts for under sudo, trusted with their own files
    /// (`owner::invoking_user`): the child's environment has no SUDO_UID.
    trusted: Option<u32>,
    /// Whom to compile as (`owner::sudo_identity`): None stays as is.
    run_as: Option<(u32, u32)>,
}

/// A line after the [`Request`]: a text to keep, by an id the parent
/// chose, or a job to answer (its `source` an id sent before); each job
/// is answered with a line.
#[derive(Serialize, Deserialize)]
enum Work {
    Source { id: usize, source: Source },
    Job(Job),
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

/// [`compile`], with a hipRTC for the batch's HIP texts: one child for
/// the batch, answering job by job.
pub fn compile_with(
    exe: &Path,
    compilers: &Compilers,
    batch: &Batch,
    limit: Duration,
) -> Result<Answers> {
    let mut warm = Warm::start(exe, compilers, limit)?;
    let mut answers = Vec::with_capacity(batch.jobs.len());
    for (i, job) in batch.jobs.iter().enumerate() {
        let source = batch
            .sources
            .get(job.source)
            .ok_or_else(|| anyhow!("no source {} in the batch", job.source))?;
        warm.send_source(job.source, source)?;
        answers.push(warm.ask(job, &batch.describe(i))?);
    }
    Ok(Answers {
        version: warm.version,
        hiprtc: warm.hiprtc,
        answers,
    })
}

/// The child's own empty directory: in the temp dir, or under sudo in
/// /tmp, which the user it runs as can enter wherever torch lies; theirs
/// (`run_as`); removed when it goes.
fn own_dir(run_as: Option<(u32, u32)>) -> Result<tempfile::TempDir> {
    let base = match run_as {
        Some(_) => PathBuf::from("/tmp"),
        None => std::env::temp_dir(),
    };
    let cannot = |e: std::io::Error| {
        crate::error::hint(
            format!(
                "cannot make a directory for the compile in {}: {e}",
                base.display()
            ),
            format!(
                "let rdna1-patch make a directory in {} (or set TMPDIR to one it can), then run this again",
                base.display()
            ),
        )
    };
    let dir = tempfile::Builder::new()
        .prefix("rdna1-patch-compile-")
        .tempdir_in(&base)
        .map_err(cannot)?;
    if let Some((uid, gid)) = run_as {
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).map_err(cannot)?;
    }
    Ok(dir)
}

/// How a child that stopped short ended, and the last thing it said.
fn ended(out: &crate::proc::Ended) -> String {
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
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "a signal",
    }
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
