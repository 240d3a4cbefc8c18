//! The terminal reporter: stage headers, warnings and progress on stderr.
//!
//! On a terminal progress is one indicatif bar; otherwise (CI logs, pipes,
//! tests) each step becomes a plain line, so logs stay readable and nothing
//! is redrawn.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::ui::{Progress, Reporter, Units};

#[derive(Debug, Clone, Copy)]
pub struct Term {
    tty: bool,
}

impl Default for Term {
    fn default() -> Term {
        Term::new()
    }
}

impl Term {
    pub fn new() -> Term {
        Term {
            tty: std::io::stderr().is_terminal(),
        }
    }
}

const STEPS: &str = "{prefix:>10} [{bar:30}] {pos}/{len} eta {eta} {wide_msg}";
const BYTES: &str = "{prefix:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}";

impl Reporter for Term {
    /// Right-aligned the way cargo prints "Compiling".
    fn stage(&self, stage: &str, msg: &str) {
        crate::errln!("{stage:>10} {msg}");
    }

    fn warn(&self, msg: &str) {
        crate::errln!("warning: {msg}");
    }

    fn note(&self, msg: &str) {
        crate::errln!("{:>10} {msg}", "");
    }

    fn progress(&self, len: u64, kind: Units) -> Box<dyn Progress> {
        if !self.tty {
            return Box::new(Bar {
                bar: ProgressBar::hidden(),
                plain: true,
            });
        }
        let template = match kind {
            Units::Steps => STEPS,
            Units::Bytes => BYTES,
        };
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Box::new(Bar { bar, plain: false })
    }
}

struct Bar {
    bar: ProgressBar,
    plain: bool,
}

impl Progress for Bar {
    fn set_prefix(&self, prefix: &'static str) {
        self.bar.set_prefix(prefix);
    }

    fn update(&self, pos: u64, len: u64, msg: &str) {
        self.bar.set_length(len);
        self.bar.set_position(pos);
        self.bar.set_message(msg.to_owned());
    }

    fn step(&self, pos: u64, len: u64, msg: &str) {
        if self.plain {
            crate::errln!("{:>10} [{pos}/{len}] {msg}", "");
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
