//! rdna1-patch: build a patched MIOpen for RDNA1 GPUs and swap it into PyTorch.
//!
//! The modules follow the pipeline, one stage each:
//! profile -> source -> patch -> cmake -> prefix, with `pipeline` tying them
//! together for `build` and `commands` holding the thin CLI front ends.

pub mod checksum;
pub mod cli;
pub mod cmake;
pub mod commands;
pub mod error;
pub mod fsutil;
pub mod interrupt;
pub mod patch;
pub mod pipeline;
pub mod prefix;
pub mod profile;
pub mod source;
pub mod tools;
pub mod ui;
pub mod workdir;
