//! The readers of files the user points us at that are not ours: a torch
//! library's `.hip_fatbin` (read from an offset, as from disk, bundle
//! header by bundle header), and the ELF
//! parse of MIOpen and torch libraries (SONAME, NEEDED, markers), and what
//! the loader reads of a library to find its dependencies.
//! Allocations are bounded by guard.rs, shared with the pull target.

#![no_main]

#[path = "guard.rs"]
mod guard;

use libfuzzer_sys::fuzz_target;

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
    // The one reader of GPU code: the walk of a library's `.hip_fatbin`
    // (torch's libtorch_hip.so and every other library), bundle header by
    // bundle header, compressed ones too; of a bundle file whole; and a
    // compile's answer cut into its code objects.
    let _ = rdna1_patch::fatbin::walk_library(&read_at, data.len() as u64);
    let _ = rdna1_patch::fatbin::walk(&read_at, 0, data.len() as u64);
    let _ = rdna1_patch::fatbin::entries(data);
    let _ = rdna1_patch::elf::dynamic_from(&read_at, data.len() as u64);
    if let Ok(lib) = rdna1_patch::elf::parse(data) {
        let _ = lib.check_shared_object(std::path::Path::new("fuzz"), "libMIOpen.so.1");
    }
    let _ = rdna1_patch::elf::find_markers(data, &["rdna1-patch", "MIO_BN_GFX101X"]);
});
