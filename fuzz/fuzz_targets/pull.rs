//! The pull's readers of what a registry or a layout dir sends (manifests,
//! configs, zstd tar layers), and the in-place fix's readers of a user's
//! libMIOpen (its embedded kernel texts). Allocations are bounded by
//! guard.rs, shared with the ELF target; a layer may unpack to 8 MiB.

#![no_main]

#[path = "guard.rs"]
mod guard;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdna1_patch::fuzz_pull(data);
    let _ = rdna1_patch::kernel_text::fix(data, true);
    let _ = rdna1_patch::embedded::fix(data);
});
