//! Terminal output: stage headers, warnings and progress.
//!
//! Progress goes to stderr. On a terminal it is one indicatif bar; otherwise
//! (CI logs, pipes, tests) each step becomes a plain line, so logs stay
//! readable and nothing is redrawn.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug, Clone, Copy)]
pub struct Ui {
    tty: bool,
}

impl Default for Ui {
    fn default() -> Self {
        Ui::new()
    }
}

impl Ui {
    pub fn new() -> Ui {
        Ui {
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// One line per stage, right-aligned the way cargo prints "Compiling".
    pub fn stage(&self, stage: &str, msg: impl std::fmt::Display) {
        crate::errln!("{stage:>10} {msg}");
    }

    pub fn warn(&self, msg: impl std::fmt::Display) {
        crate::errln!("warning: {msg}");
    }

    pub fn note(&self, msg: impl std::fmt::Display) {
        crate::errln!("{:>10} {msg}", "");
    }

    /// A bar over `len` steps (0 when unknown yet).
    pub fn progress(&self, len: u64, template: &str) -> Progress {
        if !self.tty {
            return Progress {
                bar: ProgressBar::hidden(),
                plain: true,
            };
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar, plain: false }
    }
}

/// Templates for the two kinds of progress we show.
pub const STEPS: &str = "{prefix:>10} [{bar:30}] {pos}/{len} eta {eta} {wide_msg}";
pub const BYTES: &str = "{prefix:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}";

pub struct Progress {
    bar: ProgressBar,
    plain: bool,
}

impl Progress {
    pub fn set_prefix(&self, prefix: &'static str) {
        self.bar.set_prefix(prefix);
    }

    pub fn update(&self, pos: u64, len: u64, msg: &str) {
        self.bar.set_length(len);
        self.bar.set_position(pos);
        self.bar.set_message(msg.to_owned());
    }

    /// A step: on a terminal it moves the bar, otherwise it is printed as a line.
    pub fn step(&self, pos: u64, len: u64, msg: &str) {
        if self.plain {
            crate::errln!("{:>10} [{pos}/{len}] {msg}", "");
        } else {
            self.update(pos, len, msg);
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
