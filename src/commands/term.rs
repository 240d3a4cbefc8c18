//! The terminal reporter: stage headers, warnings and progress on stderr.
//!
//! On a terminal progress is one indicatif bar; otherwise (CI logs, pipes,
//! tests), with `-v`, and with colour off (`--color never`, NO_COLOR), each
//! step becomes a plain line, so logs stay readable and nothing is redrawn:
//! a bar redraws with escape sequences, which colour off promises away.
//! `-q` keeps warnings and errors only; `-v` adds the build's own output.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::{STAGE, WARNING, paint, settings};
use crate::ui::{Progress, Reporter};

#[derive(Debug, Clone, Copy)]
pub struct Term {
    /// stderr is a terminal that may take escape sequences (colour on).
    bar: bool,
    quiet: bool,
    verbose: bool,
}

impl Default for Term {
    fn default() -> Term {
        Term::new()
    }
}

impl Term {
    pub fn new() -> Term {
        let s = settings();
        Term {
            bar: std::io::stderr().is_terminal() && s.color,
            quiet: s.quiet,
            verbose: s.verbose,
        }
    }

    /// `head` (padded to the message's column) then `msg`, one glance
    /// long unless lines are whole: the head painted in `style`.
    fn line(&self, head: &str, msg: &str, style: Option<anstyle::Style>) -> String {
        let head = format!("{head:>10}");
        let plain = format!("{head} {msg}");
        let line = glance(&plain, INDENT);
        match style {
            Some(style) => format!("{}{}", paint(style, &head), &line[head.len()..]),
            None => line,
        }
    }
}

/// Where a message starts: after the ten columns of its head and a space.
const INDENT: &str = "           ";

/// `line` one glance long (home as `~`, then wrapped under `indent`, its
/// commands whole: `glance::fit`), or whole with `--detail` or `-v`.
pub fn glance(line: &str, indent: &str) -> String {
    if crate::output::settings().whole() {
        return line.to_owned();
    }
    let home = std::env::var("HOME").ok().filter(|h| h.len() > 1);
    crate::inspect::glance::fit(line, indent, home.as_deref())
}

/// The width of the terminal stdout is, when it is one: reports wrap to
/// it. Piped output is not wrapped.
pub fn stdout_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_size::terminal_size_of(std::io::stdout()).map(|(w, _)| usize::from(w.0))
}

const STEPS: &str = "{prefix:>10} [{bar:30}] {pos}/{len} eta {eta} {wide_msg}";
/// Until the number of steps is known: no bar claiming 0/0.
const SPINNER: &str = "{prefix:>10} {spinner} {elapsed} {wide_msg}";

impl Reporter for Term {
    /// Right-aligned the way cargo prints "Compiling".
    fn stage(&self, stage: &str, msg: &str) {
        if !self.quiet {
            crate::errln!("{}", self.line(stage, msg, Some(STAGE)));
        }
    }

    fn warn(&self, msg: &str) {
        let line = glance(&format!("warning: {msg}"), "         ");
        crate::errln!(
            "{}{}",
            paint(WARNING, "warning:"),
            &line["warning:".len()..]
        );
    }

    fn answer(&self, stage: &str, msg: &str) {
        crate::outln!("{}", self.line(stage, msg, None));
    }

    fn note(&self, msg: &str) {
        if !self.quiet {
            crate::errln!("{}", self.line("", msg, None));
        }
    }

    /// A command line (cmake's configure) is copied whole: never wrapped.
    fn command(&self, cmd: &str) {
        if !self.quiet {
            crate::errln!("{:>10} {cmd}", "");
        }
    }

    fn detail(&self, msg: &str) {
        if self.verbose {
            crate::errln!("{msg}");
        }
    }

    fn progress(&self, len: u64) -> Box<dyn Progress> {
        let lines = !self.quiet && (!self.bar || self.verbose);
        if self.quiet || lines {
            return Box::new(Bar {
                bar: ProgressBar::hidden(),
                lines,
            });
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        set_style(&bar, len);
        bar.enable_steady_tick(Duration::from_millis(200));
        Box::new(Bar { bar, lines: false })
    }
}

fn set_style(bar: &ProgressBar, len: u64) {
    let template = if len == 0 { SPINNER } else { STEPS };
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
}

struct Bar {
    bar: ProgressBar,
    /// Each step as a line, nothing drawn.
    lines: bool,
}

impl Progress for Bar {
    fn set_prefix(&self, prefix: &'static str) {
        self.bar.set_prefix(prefix);
    }

    fn update(&self, pos: u64, len: u64, msg: &str) {
        if self.bar.length() == Some(0) && len > 0 {
            set_style(&self.bar, len);
        }
        self.bar.set_length(len);
        self.bar.set_position(pos);
        self.bar.set_message(msg.to_owned());
    }

    fn step(&self, pos: u64, len: u64, msg: &str) {
        if self.lines {
            let line = format!("{:>10} [{pos}/{len}] {msg}", "");
            crate::errln!("{}", glance(&line, INDENT));
        } else {
            self.update(pos, len, msg);
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
