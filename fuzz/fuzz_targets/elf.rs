//! The readers of files the user points us at that are not ours: a torch
//! library's `.hip_fatbin` (read from an offset, as from disk), and the ELF
//! parse of MIOpen and torch libraries (SONAME, NEEDED, markers).
//!
//! Inputs are at most 1 MiB (`-max_len`), so no legitimate read allocates
//! more than that: an allocation over 64 MiB means a size from the input was
//! trusted, and aborts here, where libFuzzer counts it, instead of passing
//! unseen on a machine with memory to spare.

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
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            eprintln!("fuzz: an allocation of {} bytes", layout.size());
            std::process::abort();
        }
        unsafe { System.alloc_zeroed(layout) }
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
    let read_at = |buf: &mut [u8], offset: u64| -> std::io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::UnexpectedEof)?;
        let bytes = start
            .checked_add(buf.len())
            .and_then(|end| data.get(start..end))
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    };
    let _ = rdna1_patch::fatbin::read_from(&read_at, data.len() as u64);
    let _ = rdna1_patch::fatbin::parse(data);
    if let Ok(lib) = rdna1_patch::elf::parse(data) {
        let _ = lib.check_shared_object(std::path::Path::new("fuzz"), "libMIOpen.so.1");
    }
    let _ = rdna1_patch::elf::find_markers(data, &["rdna1-patch", "MIO_BN_GFX101X"]);
});
