//! Compressed offload bundles (CCOB) as clang's offload bundler writes
//! them, in each header version (1: no total size; 2: 32-bit sizes; 3:
//! 64-bit sizes), zstd-compressed: what the e2e tests put in a fake torch
//! and what `cargo xtask ccob` hands to a real clang-offload-bundler.

use std::path::Path;

/// The offset and size of `elf`'s `.hip_fatbin` section.
pub fn hip_fatbin(elf: &[u8]) -> (usize, usize) {
    let e = goblin::elf::Elf::parse(elf).unwrap();
    let s = e
        .section_headers
        .iter()
        .find(|s| e.shdr_strtab.get_at(s.sh_name) == Some(".hip_fatbin"))
        .expect("clang's library has a .hip_fatbin");
    (s.sh_offset as usize, s.sh_size as usize)
}

/// `bundle` (a plain offload bundle) compressed as header `version`:
/// magic, version, method (1: zstd), the sizes, an 8-byte hash (zero: only
/// caches read it), the compressed bytes.
pub fn ccob(bundle: &[u8], version: u16) -> Vec<u8> {
    let z = zstd::encode_all(bundle, 19).unwrap();
    let sizes: Vec<u8> = match version {
        1 => (bundle.len() as u32).to_le_bytes().to_vec(),
        2 => [
            ((24 + z.len()) as u32).to_le_bytes(),
            (bundle.len() as u32).to_le_bytes(),
        ]
        .concat(),
        _ => [
            ((32 + z.len()) as u64).to_le_bytes(),
            (bundle.len() as u64).to_le_bytes(),
        ]
        .concat(),
    };
    [
        &b"CCOB"[..],
        &version.to_le_bytes(),
        &1u16.to_le_bytes(),
        &sizes,
        &[0u8; 8],
        &z,
    ]
    .concat()
}

/// Rewrite `lib`'s `.hip_fatbin` in place as a CCOB of `version`, padded
/// with zeros to the section's size.
pub fn compress_fatbin_as(lib: &Path, version: u16) {
    let mut elf = std::fs::read(lib).unwrap();
    let (offset, size) = hip_fatbin(&elf);
    let mut ccob = ccob(&elf[offset..offset + size], version);
    assert!(ccob.len() <= size, "{} bytes in {size}", ccob.len());
    ccob.resize(size, 0);
    elf[offset..offset + size].copy_from_slice(&ccob);
    std::fs::write(lib, &elf).unwrap();
}
