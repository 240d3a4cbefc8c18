//! The one renderer of the commands and paths the tool prints: each word
//! quoted for a POSIX shell, and a command of this tool said as this run
//! would type it, so that a line pasted as printed runs.
//!
//! A command of the tool (`rdna1-patch VERB ...` between backticks, in any
//! text printed) gets: the tool's name as it was started ([`Tool`]: `rdna1-patch`
//! only when that name on PATH is this very file, `uvx rdna1-patch` when the
//! binary lies in uv's cache, its absolute path otherwise); `sudo ` in front
//! when this run was under sudo; and the options that chose this run's
//! torch, state dir, prefix and profile (`--python`, `--torch-dir`,
//! `--state-dir`, `--prefix`, `--profile`) where the verb takes them and the
//! text does not give them itself. Any other command ([`line`],
//! [`as_run`]) is its words, each quoted. The house rule
//! (tests/e2e/house.rs) holds every backticked command with a value in it
//! to these functions.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The options of a run that a printed command carries, in this order.
pub const CARRIED: [&str; 5] = ["python", "torch-dir", "state-dir", "prefix", "profile"];

/// How this run was started: what a printed command repeats.
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    /// The tool as a user types it: `rdna1-patch`, `uvx rdna1-patch`, or a path.
    pub tool: String,
    /// Whether this run was under sudo (root, with SUDO_USER set).
    pub sudo: bool,
    /// The carried options this run was given, each with its value.
    pub options: Vec<(String, String)>,
    /// Each verb (`install`, `build`, `patches check`) with the long options
    /// it takes.
    pub verbs: BTreeMap<String, BTreeSet<String>>,
}

static RUN: OnceLock<Invocation> = OnceLock::new();

/// Set once by the CLI, before anything is printed.
pub fn set(run: Invocation) {
    let _ = RUN.set(run);
}

fn run() -> &'static Invocation {
    static PLAIN: OnceLock<Invocation> = OnceLock::new();
    RUN.get().unwrap_or_else(|| {
        PLAIN.get_or_init(|| Invocation {
            tool: "rdna1-patch".to_owned(),
            ..Default::default()
        })
    })
}

/// `word` as a shell reads it back: as it is when every character is
/// plain; in double quotes when only brackets are not, as pip's extras are
/// written (`"torch[device-gfx1010]"`); else in single quotes (a `'` in it
/// as `'\''`).
pub fn quote(word: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%^~".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        Cow::Borrowed(word)
    } else if !word.is_empty() && word.chars().all(|c| plain(c) || c == '[' || c == ']') {
        Cow::Owned(format!("\"{word}\""))
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// A path, quoted for a shell.
pub fn path(p: &Path) -> String {
    quote(&p.to_string_lossy()).into_owned()
}

/// A command of `words`, each quoted: `rm '/a b/c'`.
pub fn line<I, S>(words: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    words
        .into_iter()
        .map(|w| quote(&w.as_ref().to_string_lossy()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// [`line`], with `sudo ` in front when this run was under sudo: a command
/// on the files this run made (root's, then).
pub fn as_run<I, S>(words: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let text = line(words);
    match run().sudo {
        true => format!("sudo {text}"),
        false => text,
    }
}

/// This tool's command `rdna1-patch WORDS...` (each word quoted) as this
/// run would type it.
pub fn tool<I, S>(words: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    command(&line(words))
}

/// `rest` (the words after `rdna1-patch`, already a shell's text) as this
/// run would type it.
fn command(rest: &str) -> String {
    command_in(run(), rest)
}

fn command_in(run: &Invocation, rest: &str) -> String {
    // A pipe, a redirection or a second command ends this one.
    let end = [" | ", " > ", " && ", " ; ", " 2>"]
        .iter()
        .filter_map(|s| rest.find(s))
        .min()
        .unwrap_or(rest.len());
    let (own, tail) = rest.split_at(end);
    let mut text = String::new();
    if run.sudo {
        text.push_str("sudo ");
    }
    text.push_str(&run.tool);
    if !own.is_empty() {
        text.push(' ');
        text.push_str(own.trim_end());
    }
    let takes = verb_options(run, own);
    for (flag, value) in &run.options {
        let given = own
            .split_whitespace()
            .any(|w| w == format!("--{flag}") || w.starts_with(&format!("--{flag}=")));
        // --python and --torch-dir exclude each other.
        let other = match flag.as_str() {
            "python" => Some("--torch-dir"),
            "torch-dir" => Some("--python"),
            _ => None,
        };
        let excluded = other.is_some_and(|o| own.split_whitespace().any(|w| w == o));
        if takes.contains(flag) && !given && !excluded {
            text.push_str(&format!(" --{flag} {}", quote(value)));
        }
    }
    text.push_str(tail);
    text
}

/// The long options of the verb `own` starts with (its longest match).
fn verb_options<'a>(run: &'a Invocation, own: &str) -> Cow<'a, BTreeSet<String>> {
    let words: Vec<&str> = own.split_whitespace().collect();
    (1..=words.len().min(2))
        .rev()
        .find_map(|n| run.verbs.get(&words[..n].join(" ")))
        .map_or_else(|| Cow::Owned(BTreeSet::new()), Cow::Borrowed)
}

/// `text` with every backticked `rdna1-patch ...` command in it rendered
/// as this run would type it (an already rendered one is left as it is).
pub fn rewrite(text: &str) -> Cow<'_, str> {
    rewrite_with(run(), text, |s| s.to_owned())
}

/// [`rewrite`] for a JSON document: what is put in is escaped as a JSON
/// string's characters.
pub fn rewrite_json(text: &str) -> Cow<'_, str> {
    rewrite_with(run(), text, |s| {
        let quoted = serde_json::to_string(s).unwrap_or_default();
        quoted[1..quoted.len() - 1].to_owned()
    })
}

fn rewrite_with<'a>(
    run: &Invocation,
    text: &'a str,
    escape: impl Fn(&str) -> String,
) -> Cow<'a, str> {
    const HEAD: &str = "`rdna1-patch";
    if !text.contains(HEAD) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(at) = rest.find(HEAD) {
        let after = &rest[at + HEAD.len()..];
        let close = after.find('`').filter(|&c| !after[..c].contains('\n'));
        let next = after.chars().next();
        match close {
            Some(c) if matches!(next, Some(' ') | Some('`')) => {
                out.push_str(&rest[..at]);
                out.push('`');
                out.push_str(&escape(&command_in(run, after[..c].trim_start())));
                out.push('`');
                rest = &after[c + 1..];
            }
            _ => {
                out.push_str(&rest[..at + HEAD.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A fix that is a command of this tool as a whole (`rdna1-patch install
/// --into-torch`, no backticks) rendered as this run would type it; any
/// other text as [`rewrite`] renders it.
pub fn fix(text: &str) -> String {
    fix_in(run(), text)
}

fn fix_in(run: &Invocation, text: &str) -> String {
    match text.strip_prefix("rdna1-patch ") {
        Some(rest) if !text.contains('`') => command_in(run, rest),
        _ => rewrite_with(run, text, |s| s.to_owned()).into_owned(),
    }
}

/// How a user types this tool, running `exe`: `uvx rdna1-patch` when it
/// lies in uv's cache (where uvx runs it from), `rdna1-patch` when that
/// name on `path` is this very file (device and inode), else `exe` itself.
pub fn tool_name(exe: &Path, path: Option<&OsStr>) -> String {
    use std::os::unix::fs::MetadataExt;
    if in_uv_cache(exe) {
        return "uvx rdna1-patch".to_owned();
    }
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let me = id(exe);
    let on_path = path
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .filter(|d| d.is_absolute())
        .map(|d| d.join("rdna1-patch"))
        .find(|p| p.is_file());
    match on_path {
        Some(found) if me.is_some() && id(&found) == me => "rdna1-patch".to_owned(),
        _ => path_of(exe),
    }
}

/// Whether `exe` lies in uv's cache: under `$UV_CACHE_DIR`, or in an
/// `archive-vN` entry of a directory named `uv` (`~/.cache/uv`).
fn in_uv_cache(exe: &Path) -> bool {
    if let Some(cache) = std::env::var_os("UV_CACHE_DIR").filter(|v| !v.is_empty())
        && exe.starts_with(PathBuf::from(cache))
    {
        return true;
    }
    let parts: Vec<String> = exe
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts
        .windows(2)
        .any(|w| w[0] == "uv" && w[1].starts_with("archive-v"))
}

fn path_of(exe: &Path) -> String {
    path(exe)
}

impl Invocation {
    /// This run's, from the command line clap parsed against `cli`;
    /// `python` answers which python the tool takes with no --python (the
    /// CLI asks which_python, which sits above this module), asked only
    /// when --python was given.
    pub fn of(
        cli: &clap::Command,
        matches: &clap::ArgMatches,
        python: impl Fn() -> Option<PathBuf>,
    ) -> Invocation {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("rdna1-patch"));
        let sudo = under_sudo();
        Invocation {
            tool: tool_name(&exe, std::env::var_os("PATH").as_deref()),
            sudo,
            options: given(cli, matches, &python),
            verbs: verbs(cli),
        }
    }
}

/// Whether this run is root's on behalf of a user, as sudo starts it
/// (SUDO_UID naming someone else; what owner::invoking_user reads).
fn under_sudo() -> bool {
    // SAFETY: geteuid only reads the process's credentials.
    let root = unsafe { libc::geteuid() == 0 };
    let user = std::env::var("SUDO_UID")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .is_some_and(|uid| uid != 0);
    root && user
}

/// Each verb and two-word verb of `cli` with the carried options it takes.
fn verbs(cli: &clap::Command) -> BTreeMap<String, BTreeSet<String>> {
    let takes = |c: &clap::Command| -> BTreeSet<String> {
        c.get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| CARRIED.contains(l))
            .map(str::to_owned)
            .collect()
    };
    let mut out = BTreeMap::new();
    for verb in cli.get_subcommands() {
        out.insert(verb.get_name().to_owned(), takes(verb));
        for sub in verb.get_subcommands() {
            out.insert(
                format!("{} {}", verb.get_name(), sub.get_name()),
                takes(sub),
            );
        }
    }
    out
}

/// The carried options on this command line, paths made absolute (a
/// printed command may be pasted in another directory).
fn given(
    cli: &clap::Command,
    matches: &clap::ArgMatches,
    python: &dyn Fn() -> Option<PathBuf>,
) -> Vec<(String, String)> {
    let (mut cmd, mut m) = (cli, matches);
    while let Some((name, sub)) = m.subcommand() {
        match cmd.find_subcommand(name) {
            Some(c) => (cmd, m) = (c, sub),
            None => break,
        }
    }
    let mut out = Vec::new();
    for flag in CARRIED {
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(flag)) else {
            continue;
        };
        let Ok(Some(mut raw)) = m.try_get_raw(arg.get_id().as_str()) else {
            continue;
        };
        if m.value_source(arg.get_id().as_str()) != Some(clap::parser::ValueSource::CommandLine) {
            continue;
        }
        let Some(value) = raw.next() else { continue };
        // A python named bare is looked up on PATH, a profile named bare
        // is a built-in one, unless a file of that name is here.
        let is_path = match flag {
            "python" => value.to_string_lossy().contains('/'),
            "profile" => Path::new(value).exists(),
            _ => true,
        };
        let value: PathBuf = match is_path {
            true => std::path::absolute(value).unwrap_or_else(|_| PathBuf::from(value)),
            false => PathBuf::from(value),
        };
        if is_default(flag, &value, python) {
            continue;
        }
        out.push((flag.to_owned(), value.to_string_lossy().into_owned()));
    }
    out
}

/// Whether `value` of `--flag` is what the run takes without it: the
/// python the tool would choose anyway (`python`, by its path, not the
/// file a venv's python links to), the default state dir. A command
/// without it finds the same.
fn is_default(flag: &str, value: &Path, python: &dyn Fn() -> Option<PathBuf>) -> bool {
    match flag {
        "python" => {
            let given = match value.to_string_lossy().contains('/') {
                true => Some(value.to_owned()),
                false => std::env::var_os("PATH").and_then(|path| {
                    std::env::split_paths(&path)
                        .map(|d| d.join(value))
                        .find(|p| p.is_file())
                }),
            };
            given.is_some_and(|g| python().is_some_and(|p| p == g))
        }
        "state-dir" => directories::ProjectDirs::from("", "", "rdna1-patch")
            .and_then(|d| d.state_dir().map(Path::to_owned))
            .is_some_and(|d| d == value),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install() -> BTreeSet<String> {
        ["python", "torch-dir", "state-dir", "prefix", "profile"]
            .map(str::to_owned)
            .into()
    }

    #[test]
    fn words_are_quoted_only_where_a_shell_needs_it() {
        assert_eq!(quote("/a/b-c.so"), "/a/b-c.so");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("torch[device-gfx1010]"), "\"torch[device-gfx1010]\"");
        assert_eq!(line(["rm", "/x y/z"]), "rm '/x y/z'");
    }

    #[test]
    fn the_runs_options_ride_on_the_commands_of_verbs_that_take_them() {
        // This run's, made here: the process's own is left to the CLI.
        let run = Invocation {
            tool: "uvx rdna1-patch".into(),
            sudo: false,
            options: vec![("python".into(), "/v env/bin/python".into())],
            verbs: [
                ("install".to_owned(), install()),
                ("man".to_owned(), BTreeSet::new()),
            ]
            .into(),
        };
        let rewrite = |t: &str| rewrite_with(&run, t, |s| s.to_owned()).into_owned();
        assert_eq!(
            rewrite("then `rdna1-patch install --into-torch` fixes it"),
            "then `uvx rdna1-patch install --into-torch --python '/v env/bin/python'` fixes it"
        );
        let once = rewrite("`rdna1-patch install --into-torch`");
        assert_eq!(rewrite(&once), once, "rendered twice");
        assert_eq!(
            rewrite("`rdna1-patch man | man -l -`"),
            "`uvx rdna1-patch man | man -l -`"
        );
        assert_eq!(
            fix_in(&run, "rdna1-patch install --into-torch --python /p"),
            "uvx rdna1-patch install --into-torch --python /p"
        );
        assert_eq!(
            rewrite("rdna1-patch 1.0; `rdna1-patchx`"),
            "rdna1-patch 1.0; `rdna1-patchx`"
        );
        let sudo = Invocation {
            tool: "rdna1-patch".into(),
            sudo: true,
            ..run.clone()
        };
        assert_eq!(
            command_in(&sudo, "install --into-torch"),
            "sudo rdna1-patch install --into-torch --python '/v env/bin/python'"
        );
    }
}
