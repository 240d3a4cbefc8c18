//! The one place that writes to the terminal: `outln!` for results
//! (reports, lists, JSON) on stdout, `errln!` for progress, warnings and
//! errors on stderr.
//!
//! A stdout closed early (`rdna1-patch patches list | head -1`) ends the run
//! quietly with status 0, as ripgrep does; only read-only verbs print to
//! stdout, so nothing is left half-done. A stderr that cannot be written is
//! ignored: the work a message reports on goes on.

use std::fmt;
use std::io::Write;

/// One line to stdout.
pub fn out(args: fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{args}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "error: cannot write to stdout: {e}");
        std::process::exit(2);
    }
}

/// An error, the one way errors are printed (`error::render`).
pub fn error(err: &anyhow::Error) {
    err_line(format_args!("{}", crate::error::render(err)));
}

/// One line to stderr.
pub fn err_line(args: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
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
