//! The reader of rocBLAS's Tensile catalogues (`gpucode::catalogue`),
//! which a Tensile directory of torch's or of a prefix hands it: it must
//! not fail on any input but with an error, and it must hold its bound
//! (issue 69): its allocations, at their peak, at most twice the input's
//! size plus 1 MiB (on main a catalogue of nils took 33 times its size).
//! The allocator here counts what is live and its peak, and aborts, as
//! guard.rs does, on one allocation over 64 MiB.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;

struct Peak;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
const LIMIT: usize = 64 << 20;

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn too_big(size: usize) {
    if size > LIMIT {
        eprintln!("fuzz: an allocation of {size} bytes");
        std::process::abort();
    }
}

unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        too_big(layout.size());
        grew(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        too_big(layout.size());
        grew(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        too_big(new_size);
        grew(new_size);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static PEAK_ALLOC: Peak = Peak;

fuzz_target!(|data: &[u8]| {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let read = rdna1_patch::gpucode::catalogue::parse(data);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    // The process's bound is twice the file plus 64 MB (the binary and
    // its libraries); here, with inputs of at most 1 MiB, 64 MB of slack
    // would pass a reader that takes 33 times its input (main's before
    // ba23acb), so what the reader itself allocates gets 1 MiB of slack.
    assert!(
        peak <= 2 * data.len() + (1 << 20),
        "reading {} bytes took {peak} bytes at the peak",
        data.len()
    );
    if let Ok(c) = read {
        // Every placeholder kept is a string of the input's.
        assert!(c.placeholders.iter().map(String::len).sum::<usize>() <= data.len());
    }
});
