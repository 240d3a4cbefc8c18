//! rdna1-patch: build a patched MIOpen for RDNA1 GPUs and swap it into PyTorch.
//!
//! The folders follow the flow: `build` (profile -> source -> patch -> cmake
//! -> prefix), `swap` (torch -> relink -> txn), `inspect` (verify, doctor,
//! status), and `commands`, the thin CLI front ends.

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
