//! Errors the user can act on.
//!
//! Everything else travels as `anyhow::Error`; these types exist so that the
//! top level can print a "help:" line and pick an exit code.

use std::fmt;

/// An error with a suggestion of what to do about it.
#[derive(Debug)]
pub struct Hint {
    pub message: String,
    pub help: String,
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\nhelp: {}", self.message, self.help)
    }
}

impl std::error::Error for Hint {}

/// Build an `anyhow::Error` carrying a message and what to do next.
pub fn hint(message: impl Into<String>, help: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Hint {
        message: message.into(),
        help: help.into(),
    })
}

/// The user pressed Ctrl-C (or sent SIGINT/SIGTERM); exit 130 like a shell would.
#[derive(Debug)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Exit codes: 1 for a failure, 2 for bad usage (clap's own), 130 for an interrupt.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.is::<Interrupted>()) {
        130
    } else {
        1
    }
}
