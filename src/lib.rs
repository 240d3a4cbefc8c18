//! rdna1-patch: build a patched MIOpen for RDNA1 GPUs and swap it into PyTorch.
//!
//! The modules follow the pipeline, one stage each:
//! profile -> source -> patch -> cmake -> prefix -> torch -> txn, with
//! `pipeline` tying the build stages together, `install` the checks before a
//! swap, and `commands` holding the thin CLI front ends.

// One step per function: clippy.toml sets the limit at 80 lines.
#![warn(clippy::too_many_lines)]

pub mod checks;
pub mod checksum;
pub mod cli;
pub mod cmake;
pub mod commands;
pub mod doctor;
pub mod elf;
pub mod error;
pub mod fatbin;
pub mod fsutil;
pub mod gpu;
pub mod install;
pub mod interrupt;
pub mod launcher;
pub mod linker;
pub mod output;
pub mod patch;
pub mod pipeline;
pub mod prefix;
pub mod proc;
pub mod profile;
pub mod relink;
pub mod source;
pub mod status;
pub mod tools;
pub mod torch;
pub mod txn;
pub mod ui;
pub mod verify;
pub mod workdir;
