//! The one place that writes to the terminal: `outln!` for results
//! (reports, lists, JSON) on stdout, `errln!` for progress, warnings and
//! errors on stderr.
//!
//! A stdout closed early (`rdna1-patch doctor | head -1`) is written no
//! more, and the run ends with the status its answer has: a pipeline under
//! `set -o pipefail` still hears a failing check. A stderr that cannot be written is
//! ignored: the work a message reports on goes on.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

use anstyle::{AnsiColor, Style};

/// How much to say, and whether in colour: the global `-q`, `-v`,
/// `--detail` and `--color`, set once by the CLI before any output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    pub quiet: bool,
    pub verbose: bool,
    /// Every line whole: no path shortened, no line wrapped at a glance.
    pub detail: bool,
    pub color: bool,
}

impl Settings {
    /// Lines are printed whole (`--detail` or `-v`), not one glance each.
    pub fn whole(&self) -> bool {
        self.detail || self.verbose
    }
}

/// The longest line a person reads at a glance, a whole command aside:
/// rows, progress and errors. `--detail` (and the JSON) give lines whole.
pub const GLANCE: usize = 160;

static SETTINGS: OnceLock<Settings> = OnceLock::new();

pub fn configure(settings: Settings) {
    let _ = SETTINGS.set(settings);
}

pub fn settings() -> Settings {
    SETTINGS.get().copied().unwrap_or_default()
}

/// `--color`: `forced` is Some for always/never. For auto, the conventions
/// of no-color.org and bixense.com/clicolors: NO_COLOR turns colour off,
/// CLICOLOR_FORCE on; else colour on a terminal.
pub fn use_color(forced: Option<bool>) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0");
    match forced {
        Some(on) => on,
        None if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) => false,
        None if set("CLICOLOR_FORCE") => true,
        None => std::io::stderr().is_terminal(),
    }
}

/// The styles of the line heads: cargo's colours.
pub const ERROR: Style = AnsiColor::Red.on_default().bold();
pub const WARNING: Style = AnsiColor::Yellow.on_default().bold();
pub const HELP: Style = AnsiColor::Cyan.on_default().bold();
pub const STAGE: Style = AnsiColor::Green.on_default().bold();

/// `text` in `style` when colour is on.
pub fn paint(style: Style, text: &str) -> String {
    if settings().color {
        format!("{style}{text}{style:#}")
    } else {
        text.to_owned()
    }
}

/// Whether stdout's reader has gone.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One line to stdout.
pub fn out(args: fmt::Arguments<'_>) {
    if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let text = args.to_string();
    // Every command of the tool printed is this run's (shell.rs).
    let json = text.trim_start().starts_with(['{', '[']);
    let text = match json {
        true => crate::shell::rewrite_json(&text),
        false => crate::shell::rewrite(&text),
    };
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            // The reader has gone (`| head -1`): nothing more is written,
            // and the run ends with the status its answer has.
            STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let _ = writeln!(std::io::stderr(), "error: cannot write to stdout: {e}");
        std::process::exit(2);
    }
}

/// An error, the one way errors are printed (`error::render`): each line
/// wrapped at a [`GLANCE`] under its head (`error: `, `help: `), a command
/// never broken; whole with `--detail` or `-v`.
pub fn error(err: &anyhow::Error) {
    let text = crate::error::render(err);
    let text = match settings().whole() {
        true => text,
        false => wrap(&text, GLANCE, |line| {
            if line.starts_with("help:") {
                "      "
            } else {
                "       "
            }
        }),
    };
    for line in text.lines() {
        let line = if let Some(rest) = line.strip_prefix("error:") {
            format!("{}{rest}", paint(ERROR, "error:"))
        } else if let Some(rest) = line.strip_prefix("help:") {
            format!("{}{rest}", paint(HELP, "help:"))
        } else {
            line.to_owned()
        };
        err_line(format_args!("{line}"));
    }
}

/// One line to stderr.
pub fn err_line(args: fmt::Arguments<'_>) {
    let text = args.to_string();
    let _ = writeln!(std::io::stderr().lock(), "{}", crate::shell::rewrite(&text));
}

/// Each line of `text` wrapped to `width` (at least 40), never mid-word
/// and never inside a `command`: a command is copied and pasted, and a
/// line break in it would run half of it, so one longer than the width
/// stands whole on a line of its own. Continuation lines are indented as
/// `indent` says for that line.
pub fn wrap<'a>(text: &str, width: usize, indent: impl Fn(&str) -> &'a str) -> String {
    // Inside backticks a space is held as a character no separator splits
    // and that is as wide as a space (a private-use one: never in a row).
    const HELD: char = '\u{e000}';
    let mut out = Vec::new();
    for line in text.lines() {
        let mut quoted = false;
        let held: String = line
            .chars()
            .map(|c| {
                quoted ^= c == '`';
                if quoted && c == ' ' { HELD } else { c }
            })
            .collect();
        let opts = textwrap::Options::new(width.max(40))
            .subsequent_indent(indent(line))
            .break_words(false)
            .word_separator(textwrap::WordSeparator::AsciiSpace)
            // A command's `device-gfx1012` stays one word.
            .word_splitter(textwrap::WordSplitter::NoHyphenation);
        out.extend(
            textwrap::wrap(&held, opts)
                .into_iter()
                .map(|l| l.replace(HELD, " ")),
        );
    }
    out.join("\n")
}

/// Like `println!`, through [`out`].
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::out(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::out(format_args!($($arg)*))
    };
}

/// Like `eprintln!`, through [`err_line`].
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::err_line(format_args!($($arg)*))
    };
}

/// "gfx1010", "gfx1010 and gfx1012", "gfx1010, gfx1011 and gfx1012".
pub fn and<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// "1 decision", "2 decisions"; "the marker", "all 3 markers": counts said
/// as a person says them.
pub fn count(n: usize, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        _ => format!("{n} {many}"),
    }
}

/// "the 1 marker is" reads wrong: "the marker", or "all 3 markers".
pub fn all(n: usize, one: &str, many: &str) -> String {
    match n {
        1 => format!("the {one}"),
        _ => format!("all {n} {many}"),
    }
}
