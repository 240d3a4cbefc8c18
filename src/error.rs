//! Errors the user can act on, and how the top level reports them.
//!
//! Everything travels as `anyhow::Error`. A [`Hint`] somewhere in the chain
//! carries what to do about it; the top level prints the chain once, on one
//! `error:` line, and the hint as its own last `help:` line, as cargo does.
//! Exit codes are part of the contract (README, `--help`).

use std::fmt;

/// An error with a suggestion of what to do about it. Its Display is the
/// message alone: the help is printed once, last, by [`report`].
#[derive(Debug)]
pub struct Hint {
    pub message: String,
    pub help: String,
    /// What a layer above acts on besides the words (the python asked,
    /// where torch is missing): `downcast_ref` by its type. Never said.
    pub data: Option<Data>,
}

/// A [`Hint`]'s data for a layer above, of any type.
pub struct Data(pub Box<dyn std::any::Any + Send + Sync>);

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Data(..)")
    }
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Hint {}

/// Build an `anyhow::Error` carrying a message and what to do next.
pub fn hint(message: impl Into<String>, help: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Hint::new(message, help))
}

impl Hint {
    /// As a context layer over another error: `err.context(Hint::new(..))`.
    pub fn new(message: impl Into<String>, help: impl Into<String>) -> Hint {
        Hint {
            message: message.into(),
            help: help.into(),
            data: None,
        }
    }

    /// With `data` for a layer above ([`Hint::data`]).
    pub fn with<T: std::any::Any + Send + Sync>(self, data: T) -> Hint {
        Hint {
            data: Some(Data(Box::new(data))),
            ..self
        }
    }

    /// The data of the first hint in `err`'s chain, when it is a `T`.
    pub fn data_of<T: std::any::Any>(err: &anyhow::Error) -> Option<&T> {
        err.downcast_ref::<Hint>()?
            .data
            .as_ref()?
            .0
            .downcast_ref::<T>()
    }
}

/// A file-system error in words: the path, what is wrong ("read-only file
/// system", "permission denied", "no space left on device"), and a help
/// fitted to the cause, worked out when it happened (`fsutil::At`). A
/// [`Hint`] above it, which knows what the command was doing, says more.
#[derive(Debug)]
pub struct FsError {
    pub message: String,
    pub help: Option<String>,
    /// The OS's error, for what asks its kind (`is_not_found`, a full
    /// disk); not a source in the chain: the message has its words.
    pub io: std::io::Error,
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FsError {}

/// Every OS error in `err`'s chain, a file-system error's too.
pub fn io_errors(err: &anyhow::Error) -> impl Iterator<Item = &std::io::Error> {
    err.chain().filter_map(|c| {
        c.downcast_ref::<std::io::Error>()
            .or_else(|| c.downcast_ref::<FsError>().map(|f| &f.io))
    })
}

/// An OS error's words, as a user reads them: "permission denied", not
/// "Permission denied (os error 13)".
pub fn words(text: &str) -> String {
    let bare = strip_os_error(text);
    let mut chars = bare.chars();
    match chars.next() {
        Some(c) if chars.clone().next().is_some_and(char::is_lowercase) => {
            c.to_lowercase().chain(chars).collect()
        }
        _ => bare,
    }
}

/// `text` without every " (os error N)".
fn strip_os_error(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" (os error ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + " (os error ".len()..];
        match after.find(')') {
            Some(end) if after[..end].bytes().all(|b| b.is_ascii_digit()) => {
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(" (os error ");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A signal stopped the run: Ctrl-C (SIGINT), SIGTERM or SIGHUP. The exit
/// status is 128 + the signal, as a shell reports it (130, 143, 129).
#[derive(Debug)]
pub struct Interrupted(pub i32);

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            libc::SIGINT => f.write_str("interrupted"),
            libc::SIGTERM => f.write_str("terminated (SIGTERM)"),
            libc::SIGHUP => f.write_str("the terminal hung up (SIGHUP)"),
            sig => write!(f, "signal {sig}"),
        }
    }
}

impl std::error::Error for Interrupted {}

/// A check found a problem (`verify`, `doctor`, `patches check`).
pub const CHECK_FAILED: u8 = 1;
/// Bad usage, or the tool could not do its job.
pub const FAILED: u8 = 2;
/// Interrupted by Ctrl-C; SIGTERM gives 143, SIGHUP 129.
pub const INTERRUPTED: u8 = 130;

/// `verify` checked nothing: a `--smoke` whose every case was not run (no
/// GPU, no torch). Never a pass (docs/rows.md).
pub const NOTHING_CHECKED: u8 = 3;

/// What stopped the run, in words: "Ctrl-C" for SIGINT.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "Ctrl-C".to_owned(),
        libc::SIGTERM => "SIGTERM".to_owned(),
        libc::SIGHUP => "SIGHUP".to_owned(),
        n => format!("signal {n}"),
    }
}

/// The status for signal `sig`, as a shell reports it: 128 + `sig`.
pub fn signal_status(sig: i32) -> u8 {
    u8::try_from(128 + sig).unwrap_or(INTERRUPTED)
}

/// The documented exit statuses, for `--help`.
pub const EXIT_STATUS_HELP: &str = "Exit status: 0 done, every check passed; 1 a check found a problem (doctor, verify, status, patches check: a FAIL row, or a check the answer needs that could not run); 2 bad usage, or the command could not do its job (the error says why and what to do); 3 nothing to check and nothing failed (verify and status with nothing of rdna1-patch's installed, a verify --smoke that ran no case), never a pass; 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP). Every verb follows it.";

pub fn exit_code(err: &anyhow::Error) -> u8 {
    match err.chain().find_map(|e| e.downcast_ref::<Interrupted>()) {
        Some(Interrupted(sig)) => signal_status(*sig),
        None => FAILED,
    }
}

/// Whether the error comes from a file or directory that is not there.
pub fn is_not_found(err: &anyhow::Error) -> bool {
    io_errors(err).any(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// What to do about `err`: the help of the first hint in its chain.
pub fn help(err: &anyhow::Error) -> Option<&str> {
    // anyhow finds a Hint as the root or as any context layer.
    err.downcast_ref::<Hint>()
        .map(|h| h.help.as_str())
        .or_else(|| {
            err.downcast_ref::<FsError>()
                .and_then(|f| f.help.as_deref())
        })
}

/// The JSON document a `--json` run prints when it fails: the message, its
/// causes outermost first, the help, and the exit status.
pub fn json(err: &anyhow::Error, code: u8) -> String {
    let doc = serde_json::json!({
        "schema_version": crate::version::SCHEMA_VERSION,
        "ok": false,
        "error": {
            "message": crate::shell::rewrite(&chain(err)),
            "causes": err.chain().map(|e| words(&e.to_string())).collect::<Vec<_>>(),
            "help": help(err).map(crate::shell::fix),
            "exit_code": code,
        },
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// The causes of `err` joined by `: `, as `{:#}` joins them, less a cause
/// that the one before it already ends with: some errors (walkdir's, say)
/// print their source themselves and return it as their source too, which
/// would say "No such file or directory" twice. No "(os error N)" is
/// said: the words are.
pub fn chain(err: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in err.chain() {
        let text = match cause.downcast_ref::<std::io::Error>() {
            Some(e) => words(&e.to_string()),
            None => strip_os_error(&cause.to_string()),
        };
        if !last.is_empty() && last.to_lowercase().ends_with(&text.to_lowercase()) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

/// The text the top level prints for `err`: the chain on one line, then
/// the first hint's help on its own line (`output::error` prints it).
pub fn render(err: &anyhow::Error) -> String {
    let mut text = format!("error: {}", chain(err));
    if let Some(help) = help(err) {
        text.push_str("\nhelp: ");
        text.push_str(&crate::shell::fix(help));
    }
    crate::shell::rewrite(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_line_comes_last_once_even_under_context() {
        let err = anyhow::Error::new(Interrupted(libc::SIGINT)).context(Hint::new(
            "ninja was stopped",
            "the work dir is kept as it was; run the same command again to resume",
        ));
        assert_eq!(
            render(&err),
            "error: ninja was stopped: interrupted\nhelp: the work dir is kept as it was; run the same command again to resume"
        );
        assert_eq!(exit_code(&err), INTERRUPTED);
        let err = hint("no prefix", "pass --prefix").context("cannot install");
        assert_eq!(
            render(&err),
            "error: cannot install: no prefix\nhelp: pass --prefix"
        );
        assert_eq!(exit_code(&err), FAILED);
    }

    #[test]
    fn a_cause_that_repeats_its_own_source_is_said_once() {
        let walk = walkdir::WalkDir::new("/nonexistent-rdna1-patch-test")
            .into_iter()
            .next()
            .unwrap()
            .unwrap_err();
        let err = anyhow::Error::new(walk).context("cannot walk /nope");
        let text = render(&err);
        assert!(!text.contains("(os error"), "{text}");
        assert_eq!(
            text.to_lowercase()
                .matches("no such file or directory")
                .count(),
            1,
            "{text}"
        );
        assert!(text.starts_with("error: cannot walk /nope: IO error for operation on /nonexistent-rdna1-patch-test: "), "{text}");
    }
}
