//! The one way this tool runs git: the user's own `git`, in a fixed
//! environment so that it behaves the same on every machine.
//!
//! The git CLI is used, not libgit2, because only git itself does a partial
//! (blobless) clone and a sparse checkout, which a monorepo's one project
//! needs; one code path serves every source.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::error::hint;
use crate::proc;

/// `sparse-checkout set --cone` and fetching by commit id over protocol v2.
const MIN_VERSION: (u32, u32) = (2, 25);

/// Every git run gets these, over the user's own config: the settings that
/// would change the bytes checked out (the patches must match them
/// exactly) or run code of the user's or of the origin's. One list, so that
/// each is tested (tests/e2e/hostile.rs) and none is forgotten on one path.
/// (The upload-pack program is set on the fetch itself: see source.rs.)
pub const SETTINGS: &[&str] = &[
    "core.autocrlf=false",
    "core.eol=lf",
    // Hooks (post-checkout, reference-transaction, ...) run programs.
    "core.hooksPath=/dev/null",
    // `git status` and checkout would run the user's file-system monitor.
    "core.fsmonitor=false",
    // ext:: runs an arbitrary command as the "transport"; fd:: talks to a
    // file descriptor: neither is a way to fetch MIOpen.
    "protocol.ext.allow=never",
    "protocol.fd.allow=never",
    // Smudge/clean filters named by the origin's .gitattributes are also
    // switched off by the attributes file `protect` writes; this is LFS's
    // own switch, for a git that reads the filter before the attributes.
    "filter.lfs.required=false",
    "advice.detachedHead=false",
    // The work dir is a cache: no repack of 20k fresh objects (a second)
    // after a fetch.
    "gc.auto=0",
    "maintenance.auto=false",
];

/// `.git/info/attributes`, which wins over every .gitattributes in the
/// tree: no filter (smudge runs a program the origin names and the user's
/// config defines), no eol or encoding conversion, no `$Id$` expansion.
/// The files are then the commit's bytes exactly.
pub const INFO_ATTRIBUTES: &str = "* -filter -text -eol -ident -working-tree-encoding\n";

/// The last lines of a streamed git command kept for its error message.
const MESSAGES_KEPT: usize = 200;

pub struct Git {
    dir: PathBuf,
}

/// What a streamed git command did: its exit, and the lines that were not
/// progress (for the error message).
pub struct Streamed {
    /// None when it printed nothing for the silence limit and was killed.
    pub success: Option<bool>,
    pub messages: Vec<String>,
}

impl Git {
    pub fn new(dir: &Path) -> Git {
        Git {
            dir: dir.to_owned(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("git");
        c.arg("-C").arg(&self.dir);
        for setting in SETTINGS {
            c.args(["-c", setting]);
        }
        c.args(args);
        // A repository named by the environment would win over `-C`.
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_NAMESPACE",
        ] {
            c.env_remove(var);
        }
        // English messages to read, no password prompt to hang on, and no
        // Git LFS download of MIOpen's kernel databases.
        c.env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_LFS_SKIP_SMUDGE", "1");
        c
    }

    /// Write [`INFO_ATTRIBUTES`] into this repository (once; it is kept).
    pub fn protect(&self) -> Result<()> {
        let dir = self.dir.join(".git/info");
        let path = dir.join("attributes");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(INFO_ATTRIBUTES) {
            crate::fsutil::create_dir_all(&dir)?;
            crate::fsutil::write_atomic(&path, INFO_ATTRIBUTES.as_bytes(), Some(0o644))?;
        }
        Ok(())
    }

    /// Run git to the end; its stdout, or an error with what it said.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        Ok(self.succeeded(args)?.stdout)
    }

    /// [`Git::run`] for output that must be UTF-8 text as it is: None when
    /// it is not.
    pub fn run_text(&self, args: &[&str]) -> Result<Option<String>> {
        let out = self.succeeded(args)?;
        Ok((!out.stdout_lossy).then_some(out.stdout))
    }

    fn succeeded(&self, args: &[&str]) -> Result<proc::Finished> {
        let out = proc::helper(self.command(args))?;
        if !out.status.success() {
            bail!(
                "`git {}` in {} failed: {}",
                args.join(" "),
                self.dir.display(),
                last_message(out.stderr.lines())
            );
        }
        Ok(out)
    }

    /// Commit every file of the work tree (ignored ones too) as one
    /// commit with no parent, by a fixed author at a fixed date: the same
    /// tree always makes the same commit. Its id.
    pub fn commit_all_fixed(&self, message: &str) -> Result<String> {
        self.run(&["add", "-A", "-f", "--", "."])?;
        let tree = self.run(&["write-tree"])?;
        let mut c = self.command(&["commit-tree", tree.trim(), "-m", message]);
        for (who, what) in [("AUTHOR", "NAME"), ("COMMITTER", "NAME")] {
            c.env(format!("GIT_{who}_{what}"), "rdna1-patch");
        }
        for who in ["AUTHOR", "COMMITTER"] {
            c.env(format!("GIT_{who}_EMAIL"), "rdna1-patch@localhost");
            c.env(format!("GIT_{who}_DATE"), "1970-01-01T00:00:00Z");
        }
        let out = proc::helper(c)?;
        if !out.status.success() {
            bail!(
                "`git commit-tree` in {} failed: {}",
                self.dir.display(),
                last_message(out.stderr.lines())
            );
        }
        Ok(out.stdout.trim().to_owned())
    }

    /// Run git to the end; None when it exits non-zero (a query whose
    /// answer is "no", like `rev-parse --verify -q`).
    pub fn query(&self, args: &[&str]) -> Result<Option<String>> {
        let out = proc::helper(self.command(args))?;
        Ok(out
            .status
            .success()
            .then(|| out.stdout.trim_end().to_owned()))
    }

    /// Run a long git command (fetch, checkout) with `--progress`, handing
    /// each progress line `(label, done, total)` to `on_progress`; killed
    /// when it prints nothing for `silence`.
    pub fn stream(
        &self,
        args: &[&str],
        silence: Duration,
        mut on_progress: impl FnMut(&str, u64, u64),
    ) -> Result<Streamed> {
        let mut messages = Vec::new();
        let streamed =
            proc::stream_watched(
                self.command(args),
                Some(silence),
                |line| match parse_progress(line) {
                    Some((label, done, total)) => on_progress(label, done, total),
                    None if !line.trim().is_empty() => {
                        // The error is read from the last lines; a server
                        // that talks without end must not grow us.
                        if messages.len() == MESSAGES_KEPT {
                            messages.remove(0);
                        }
                        messages.push(line.to_owned());
                    }
                    None => {}
                },
            )?;
        if let Some(sig) = crate::interrupt::interrupted() {
            return Err(crate::interrupt::stopped("git", sig));
        }
        Ok(Streamed {
            success: streamed.status.map(|s| s.success()),
            messages,
        })
    }
}

/// A commit id as messages show it: its first 12 digits.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// The line of git's output that says what went wrong: its last `fatal:` or
/// `error:`, else its last line.
pub fn last_message<'a>(lines: impl Iterator<Item = &'a str>) -> String {
    let lines: Vec<&str> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
    lines
        .iter()
        .rev()
        .find_map(|l| {
            l.strip_prefix("fatal: ")
                .or_else(|| l.strip_prefix("error: "))
        })
        .or(lines.last().copied())
        .unwrap_or("no message")
        .to_owned()
}

/// `Receiving objects:  45% (9/20), 1.20 MiB | 2.00 MiB/s` ->
/// ("Receiving objects", 9, 20); `remote: ` lines count too.
fn parse_progress(line: &str) -> Option<(&str, u64, u64)> {
    let line = line.strip_prefix("remote: ").unwrap_or(line);
    let (label, rest) = line.split_once(": ")?;
    let inner = rest.split_once('(')?.1.split_once(')')?.0;
    let (done, total) = inner.split_once('/')?;
    Some((label.trim(), done.parse().ok()?, total.parse().ok()?))
}

/// The installed git's version, or why it cannot be used.
pub fn check_version() -> Result<(u32, u32, u32)> {
    let mut c = Command::new("git");
    c.arg("--version");
    let out = proc::helper(c).map_err(|e| {
        // Judged by where git is, not by the words of the error.
        if which::which("git").is_err() {
            return hint(
                "git is not installed (not found)",
                "install it (Debian/Ubuntu: sudo apt install git) and run this again; sources are fetched with git",
            );
        }
        e
    })?;
    let version = parse_version(&out.stdout)
        .ok_or_else(|| anyhow::anyhow!("cannot read git's version from `{}`", out.stdout.trim()))?;
    if (version.0, version.1) < MIN_VERSION {
        return Err(hint(
            format!(
                "git {}.{}.{} is too old: fetching needs git {}.{} or newer (sparse checkout, partial clone)",
                version.0, version.1, version.2, MIN_VERSION.0, MIN_VERSION.1
            ),
            "install a newer git (Debian 11 and Ubuntu 20.04 or newer have one) and run this again",
        ));
    }
    Ok(version)
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.trim().strip_prefix("git version ")?;
    let mut parts = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_and_versions_are_read() {
        assert_eq!(
            parse_progress("Receiving objects:  45% (9/20), 1.20 MiB | 2.00 MiB/s"),
            Some(("Receiving objects", 9, 20))
        );
        assert_eq!(
            parse_progress("remote: Counting objects: 100% (63/63), done."),
            Some(("Counting objects", 63, 63))
        );
        assert_eq!(
            parse_progress("Updating files: 100% (13/13), done."),
            Some(("Updating files", 13, 13))
        );
        assert_eq!(parse_progress("From file:///tmp/x"), None);
        assert_eq!(parse_progress(" * [new tag] v1 -> v1"), None);
        assert_eq!(parse_version("git version 2.39.5\n"), Some((2, 39, 5)));
        assert_eq!(
            parse_version("git version 2.47.3.windows.1"),
            Some((2, 47, 3))
        );
        assert_eq!(parse_version("git version 2.25"), Some((2, 25, 0)));
        assert_eq!(parse_version("hub 1.0"), None);
        assert_eq!(
            last_message("Cloning\nfatal: couldn't find remote ref refs/tags/x\n".lines()),
            "couldn't find remote ref refs/tags/x"
        );
    }
}
