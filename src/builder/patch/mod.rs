//! The patch stage: apply a quilt-style series of git-style patches.
//!
//! The whole series is applied in memory first; nothing is written unless
//! every hunk of every patch applies (at any line offset, never with fuzz).
//! Only files whose final content differs from what is on disk are written,
//! so an unchanged series touches nothing and a changed patch rewrites only
//! the files it affects, and the next build recompiles only those.

//!
//! `series` parses a series and its patches, `apply` applies them, `refresh`
//! writes one back from an edited tree, and `verbs` holds what the `patches`
//! command does with a profile's series.

mod apply;
mod refresh;
mod series;
pub(crate) mod verbs;

pub use apply::*;
pub use refresh::*;
pub use series::{ApplyOutcome, FileSummary, PatchFile, Series};

#[cfg(test)]
mod tests;
