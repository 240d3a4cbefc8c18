//! The child's side: read the request, vet and open what it names, drop
//! to sudo's user, load the compilers, and answer each job of the batch
//! on a line of its own as it is compiled.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};

use super::{Answer, Hello, Job, KeptStderr, Request, Source, Work, cut};
use crate::comgr::Comgr;
use crate::comgr::hiprtc::{self, Hiprtc};
use crate::compile::Lang;
use crate::error::hint;

/// The most a line of the request may be, and all the texts it sends
/// together: every kernel text of two libraries is a few MB.
const REQUEST_CAP: u64 = 256 << 20;
/// The most of a compiler's error kept per job: its first lines are what
/// is shown.
const ANSWER_CAP: usize = 4096;

/// The child's side: load the comgr the request names, then answer each
/// job as it comes, a line each, until stdin ends. Its own stdout is kept for the answers; anything the
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
    // Before any compiler is loaded: its handlers, if it installs any,
    // come after ours and hand on to them.
    let stderr = KeptStderr::new();
    let mut input = std::io::BufReader::new(std::io::stdin().lock());
    let loaded = read_line::<Request>(&mut input, "the compile request").and_then(load);
    let (comgr, rtc) = match loaded {
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
    serve_jobs(&mut input, &comgr, rtc.as_ref(), stderr.as_ref(), say)
}

/// Keep each text sent and answer each job, a line each, until stdin ends.
fn serve_jobs(
    input: &mut impl BufRead,
    comgr: &Comgr,
    rtc: Option<&Hiprtc>,
    stderr: Option<&KeptStderr>,
    mut say: impl FnMut(String),
) -> std::process::ExitCode {
    let mut sources: HashMap<usize, Source> = HashMap::new();
    let mut held = 0u64;
    let mut answers: Vec<Answer> = Vec::new();
    loop {
        let work = match read_line::<Work>(input, "a compile job") {
            Ok(Some(w)) => w,
            // Its stdin ended: the run has no more compiles.
            Ok(None) => return std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rdna1-patch: {e:#}");
                return std::process::ExitCode::from(2);
            }
        };
        match work {
            Work::Source { id, source } => {
                held += source.text.len() as u64
                    + source
                        .headers
                        .iter()
                        .map(|h| h.text.len() as u64)
                        .sum::<u64>();
                if held > REQUEST_CAP {
                    eprintln!(
                        "rdna1-patch: the compile's texts are over {} MiB",
                        REQUEST_CAP >> 20
                    );
                    return std::process::ExitCode::from(2);
                }
                sources.insert(id, source);
            }
            Work::Job(job) => {
                let answer = answer(comgr, rtc, &sources, &job, &answers, stderr);
                say(serde_json::to_string(&answer).unwrap_or_default());
                answers.push(answer);
            }
        }
    }
}

/// Vet what the request names and everything it needs, holding each file
/// open; drop to sudo's user; load what was vetted.
fn load(r: Option<Request>) -> Result<(Comgr, Option<Hiprtc>)> {
    let r = r.context("the compile request is empty")?;
    let wanted: Vec<&Path> = std::iter::once(r.compilers.comgr.as_path())
        .chain(r.compilers.hiprtc.as_deref())
        .collect();
    // As root, another user's files are trusted only when the compile
    // drops to that very user: a request naming one while it stays root
    // (what a hand-made request on stdin would say) trusts root's alone.
    let trusted = match (r.trusted, r.run_as) {
        (Some(t), Some((uid, _))) if t == uid => Some(t),
        (t, None) if !crate::owner::is_root() => t,
        _ => None,
    };
    let vetted = crate::comgr::vet::vet(&wanted, trusted)?;
    crate::comgr::swap_point();
    if let Some((uid, gid)) = r.run_as {
        become_user(uid, gid)?;
    }
    let handles = vetted.load()?;
    let comgr = Comgr::from_handle(&r.compilers.comgr, handles[0])?;
    let rtc = match &r.compilers.hiprtc {
        Some(p) => Some(Hiprtc::from_handle(p, vetted.real(1), handles[1])?),
        None => None,
    };
    Ok((comgr, rtc))
}

/// The next line of stdin, parsed: None at its end. A line is held to
/// [`REQUEST_CAP`].
fn read_line<T: serde::de::DeserializeOwned>(
    input: &mut impl BufRead,
    what: &str,
) -> Result<Option<T>> {
    let mut bytes = Vec::new();
    input
        .take(REQUEST_CAP + 1)
        .read_until(b'\n', &mut bytes)
        .with_context(|| format!("cannot read {what}"))?;
    if bytes.is_empty() {
        return Ok(None);
    }
    if bytes.len() as u64 > REQUEST_CAP {
        bail!("{what} is over {} MiB", REQUEST_CAP >> 20);
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .with_context(|| format!("{what} does not parse"))
}

/// The answer to `job`, compiled through `comgr` (or `hiprtc` for a HIP
/// text) in this process, the child's, after the `earlier` answers.
/// With `stderr`, what the compiler writes to descriptor 2 during the
/// compile is kept and, for a failure, put after its log: comgr's log
/// says only "cannot compile inline asm" where LLVM's assembler writes
/// the operand it rejected, with its line, to stderr.
fn answer(
    comgr: &Comgr,
    hiprtc: Option<&Hiprtc>,
    sources: &HashMap<usize, Source>,
    job: &Job,
    earlier: &[Answer],
    stderr: Option<&KeptStderr>,
) -> Answer {
    let waits_in_vain = job
        .after
        .is_some_and(|a| !matches!(earlier.get(a), Some(Answer::Compiled(_))));
    match sources.get(&job.source) {
        _ if waits_in_vain => Answer::Skipped,
        None => Answer::Failed(format!("no source {} was sent", job.source)),
        Some(s) => {
            let kept = stderr.map(KeptStderr::start);
            let compiled = compile_one(comgr, hiprtc, s, job);
            let said = kept.map(|k| k.finish()).unwrap_or_default();
            match compiled {
                Ok(ir) if job.front_end => Answer::Compiled(crate::comgr::ir_digest(&ir)),
                Ok(object) => match crate::elf::not_code_object(&object) {
                    None => Answer::Compiled(crate::elf::code_digest(&object)),
                    Some(what) => Answer::Broken(what),
                },
                Err(e) if said.trim().is_empty() => Answer::Failed(cut(e, ANSWER_CAP)),
                Err(e) => Answer::Failed(cut(format!("{e}\n{}", said.trim_end()), ANSWER_CAP)),
            }
        }
    }
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
        if let Some(how) = crate::compile::unplain(name) {
            return Err(format!(
                "{name:?} is {how}, and a compiler is handed only plain relative names"
            ));
        }
    }
    match (s.lang, hiprtc) {
        (Lang::OpenCl, _) if job.front_end => {
            comgr.front_end_ocl(&s.name, &s.text, &job.target, &job.options)
        }
        (Lang::OpenCl, _) => comgr.compile_ocl(&s.name, &s.text, &job.target, &job.options),
        (Lang::Hip, Some(rtc)) => {
            let headers: Vec<(String, Vec<u8>)> = s
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.text.clone()))
                .collect();
            let mut options = hiprtc::miopen_options(&job.target, rtc.version);
            options.extend(job.options.iter().cloned());
            match job.front_end {
                true => rtc.front_end_hip(&s.name, &s.text, &headers, &options),
                false => rtc.compile_hip(&s.name, &s.text, &headers, &options),
            }
        }
        (Lang::Hip, None) => Err(format!("{} is HIP, and no hipRTC was loaded", s.name)),
    }
}

/// Drop to `uid` and `gid` for good, in the order that leaves nothing of
/// root's: no supplementary group, the group, the user; then checked,
/// root's ids gone from every slot and not to be had back.
fn become_user(uid: u32, gid: u32) -> Result<()> {
    let help = "run rdna1-patch as that user, without sudo";
    let failed = |what: &str| {
        hint(
            format!(
                "the compile could not drop to uid {uid} gid {gid} (sudo's user): {what} failed: {}; nothing was loaded",
                std::io::Error::last_os_error()
            ),
            help,
        )
    };
    // SAFETY: plain credential calls, in the child before any library
    // of the compiler's is loaded; out-pointers to locals.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(failed("setgroups"));
        }
        if libc::setgid(gid) != 0 {
            return Err(failed("setgid"));
        }
        if libc::setuid(uid) != 0 {
            return Err(failed("setuid"));
        }
        let (mut r, mut e, mut s) = (0, 0, 0);
        let (mut rg, mut eg, mut sg) = (0, 0, 0);
        let dropped = libc::getresuid(&raw mut r, &raw mut e, &raw mut s) == 0
            && [r, e, s] == [uid; 3]
            && libc::getresgid(&raw mut rg, &raw mut eg, &raw mut sg) == 0
            && [rg, eg, sg] == [gid; 3]
            && libc::getgroups(0, std::ptr::null_mut()) == 0
            && (uid == 0 || libc::setuid(0) != 0);
        if !dropped {
            return Err(hint(
                format!(
                    "the compile kept more than uid {uid} gid {gid} (sudo's user) after dropping to them; nothing was loaded"
                ),
                help,
            ));
        }
    }
    Ok(())
}
