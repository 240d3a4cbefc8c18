//! The diagnosis's readers of a libMIOpen's kernel texts: the batch-norm
//! texts and the HIP include names (and headers) it hands a compiler, the
//! cases and defines it compiles them in, the copy with the row_bcast
//! lines blanked, and the in-place edit; each held to its property in
//! `rdna1_patch::fuzz_kernels` (src/verdict/fuzz.rs). Allocations are
//! bounded by guard.rs, shared with the other targets.

#![no_main]

#[path = "guard.rs"]
mod guard;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdna1_patch::fuzz_kernels(data);
});
