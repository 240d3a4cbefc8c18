//! rdna1-patch: build a patched MIOpen for RDNA1 GPUs and swap it into PyTorch.
//!
//! The folders follow the flow: `builder` (profile -> source -> patch ->
//! cmake -> prefix), `share` (publish and pull a prefix), `inplace` (a
//! prefix from the user's own library), all writing the `prefix` they
//! share; `swap` (torch -> relink -> txn), `inspect` (verify, doctor,
//! status), and `commands`, the thin CLI front ends.

// One step per function: clippy.toml sets the limit at 80 lines.
#![warn(clippy::too_many_lines)]

pub mod builder;
pub mod cache;
pub mod checksum;
pub(crate) mod clean;
pub mod cli;
pub mod comgr;
pub(crate) mod commands;
pub mod compile;
pub mod compiler;
pub(crate) mod diagnosis;
pub mod elf;
pub mod embedded;
pub(crate) mod error;
pub mod fatbin;
pub(crate) mod fsutil;
pub(crate) mod gpu;
pub mod gpucode;
pub mod inplace;
pub(crate) mod inspect;
pub(crate) mod interrupt;
pub mod kernel_text;
/// Public for the tests that hold its answers against `ldd`'s.
pub mod loader;
pub(crate) mod output;
pub(crate) mod owner;
pub(crate) mod packages;
pub(crate) mod plan;
pub(crate) mod prefix;
pub(crate) mod proc;
pub(crate) mod reaper;
pub(crate) mod rocm_sdk;
pub(crate) mod select;
pub(crate) mod share;
pub(crate) mod shell;
pub(crate) mod spawned;
pub(crate) mod stack;
pub mod swap;
pub(crate) mod tally;
pub(crate) mod torch;
pub(crate) mod ui;
pub mod verdict;
pub(crate) mod version;
pub(crate) mod which_python;

/// The pull's readers, and the readers of a libMIOpen's kernel texts, for
/// the fuzz targets (built with --cfg=fuzzing).
#[cfg(fuzzing)]
pub use share::fuzz_pull;
#[cfg(fuzzing)]
pub use verdict::fuzz_kernels;
