//! Shared by the fuzz targets: inputs are at most 1 MiB (`-max_len`), so
//! no legitimate read allocates more than 64 MiB; an allocation over that
//! means a size from the input was trusted, and aborts here, where
//! libFuzzer counts it, instead of passing unseen on a machine with memory
//! to spare.

use std::alloc::{GlobalAlloc, Layout, System};

pub struct Guard;

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
