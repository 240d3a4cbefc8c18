//! The pull's readers of what a registry or a layout dir sends (manifests,
//! configs, zstd tar layers), and the in-place fix's readers of a user's
//! libMIOpen (its embedded kernel texts). The same allocation guard as the
//! ELF target: inputs are at most 1 MiB, and a layer may unpack to 8 MiB.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};

use libfuzzer_sys::fuzz_target;

struct Guard;

const LIMIT: usize = 64 << 20;

unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            eprintln!("fuzz: an allocation of {} bytes", layout.size());
            std::process::abort();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LIMIT {
            eprintln!("fuzz: an allocation of {new_size} bytes");
            std::process::abort();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GUARD: Guard = Guard;

fuzz_target!(|data: &[u8]| {
    rdna1_patch::fuzz_pull(data);
    let _ = rdna1_patch::kernel_text::fix(data, true);
    let mut copy = data.to_vec();
    let _ = rdna1_patch::embedded::fix(&mut copy);
});
