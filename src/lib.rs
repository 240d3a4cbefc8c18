//! rdna1-patch: build a patched MIOpen for RDNA1 GPUs and swap it into PyTorch.
//!
//! The modules follow the pipeline, one stage each:
//! profile -> source -> patch -> cmake -> prefix -> torch -> txn, with
//! `pipeline` tying the build stages together, `install` the checks before a
//! swap, and `commands` holding the thin CLI front ends.

// One step per function: clippy.toml sets the limit at 80 lines.
#![warn(clippy::too_many_lines)]

pub mod build;
pub mod checksum;
pub mod cli;
pub mod commands;
pub mod elf;
pub mod error;
pub mod fsutil;
pub mod inspect;
pub mod interrupt;
pub mod output;
pub mod proc;
pub mod swap;
pub mod ui;
