//! How library code reports progress: stage lines, warnings, notes and
//! progress over steps or bytes, sent to a [`Reporter`]. The library never
//! prints: the CLI's reporter (commands/term.rs) draws them on a terminal,
//! a test or another front end can collect them instead.

use std::fmt::Display;

/// What a long operation has to say while it runs.
pub trait Reporter {
    /// One line per stage ("Fetching", "Patch", "Installed", ...).
    fn stage(&self, stage: &str, msg: &str);
    fn warn(&self, msg: &str);
    /// A line under the previous stage.
    fn note(&self, msg: &str);
    /// What only `-v` shows: a program's own output as it runs.
    fn detail(&self, _msg: &str) {}
    /// A line under the previous stage that is a whole command (one a
    /// user may copy): never wrapped.
    fn command(&self, cmd: &str) {
        self.note(cmd);
    }
    /// The command's answer (what a dry run would do): the result, not
    /// progress, so stdout, under `-q` too.
    fn answer(&self, stage: &str, msg: &str);
    /// Progress over `len` steps (0 while unknown).
    fn progress(&self, len: u64) -> Box<dyn Progress>;
}

pub trait Progress {
    fn set_prefix(&self, prefix: &'static str);
    /// Move to `pos` of `len` (drawn, not logged).
    fn update(&self, pos: u64, len: u64, msg: &str);
    /// A step worth a line when nothing is drawn.
    fn step(&self, pos: u64, len: u64, msg: &str);
    fn finish(&self);
}

/// The handle library code takes: a reporter, with `Display` arguments.
#[derive(Clone, Copy)]
pub struct Ui<'a> {
    reporter: &'a dyn Reporter,
}

impl<'a> Ui<'a> {
    pub fn new(reporter: &'a dyn Reporter) -> Ui<'a> {
        Ui { reporter }
    }

    pub fn stage(&self, stage: &str, msg: impl Display) {
        self.reporter.stage(stage, &msg.to_string());
    }

    pub fn warn(&self, msg: impl Display) {
        self.reporter.warn(&msg.to_string());
    }

    pub fn note(&self, msg: impl Display) {
        self.reporter.note(&msg.to_string());
    }

    pub fn answer(&self, stage: &str, msg: impl Display) {
        self.reporter.answer(stage, &msg.to_string());
    }

    pub fn detail(&self, msg: impl Display) {
        self.reporter.detail(&msg.to_string());
    }

    pub fn command(&self, cmd: impl Display) {
        self.reporter.command(&cmd.to_string());
    }

    pub fn progress(&self, len: u64) -> Box<dyn Progress> {
        self.reporter.progress(len)
    }

    /// A handle that reports nothing, for work too small to report.
    pub fn silent() -> Ui<'static> {
        Ui { reporter: &Silent }
    }
}

struct Silent;

impl Reporter for Silent {
    fn stage(&self, _: &str, _: &str) {}
    fn answer(&self, _: &str, _: &str) {}
    fn warn(&self, _: &str) {}
    fn note(&self, _: &str) {}
    fn progress(&self, _: u64) -> Box<dyn Progress> {
        Box::new(Silent)
    }
}

impl Progress for Silent {
    fn set_prefix(&self, _: &'static str) {}
    fn update(&self, _: u64, _: u64, _: &str) {}
    fn step(&self, _: u64, _: u64, _: &str) {}
    fn finish(&self) {}
}
