//! /etc/ld.so.cache as glibc's loader reads it: which file ldconfig found
//! for a library name. The file is root's, but read as any input is:
//! bounded, every offset checked.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
/// The header of the new format: magic and version, nlibs, len_strings,
/// flags and padding, extension_offset, three unused words.
const NEW_HEADER: usize = 48;
/// flags, key, value, osversion, hwcap.
const NEW_ENTRY: usize = 24;
const OLD_ENTRY: usize = 12;
/// A real cache is tens of KB; a bigger one is not read.
const CAP: u64 = 64 << 20;

/// Each (library name, file) the cache holds, in its order.
pub(super) type Cache = Vec<(String, PathBuf)>;

/// The cache at `path`; an empty one when there is none.
pub(super) fn read(path: &Path) -> Result<Cache> {
    use std::io::Read;
    let file = match crate::fsutil::open_regular(path) {
        Ok(f) => f,
        Err(_) if !path.exists() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.take(CAP + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > CAP {
        bail!("{} is over {} MiB", path.display(), CAP >> 20);
    }
    parse(&bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

fn c_str(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let rest = bytes.get(at..)?;
    Some(&rest[..rest.iter().position(|b| *b == 0)?])
}

/// The new format, alone (glibc 2.32 on) or after the old one (which then
/// names the same files, and is skipped).
pub(super) fn parse(bytes: &[u8]) -> Result<Cache> {
    let mut start = 0;
    if bytes.starts_with(OLD_MAGIC) {
        let Some(n) = u32_at(bytes, 12) else {
            bail!("the cache ends in its header");
        };
        // The new header follows, aligned as its struct is (8 bytes).
        start = (16 + n as usize * OLD_ENTRY).next_multiple_of(8);
    }
    let Some(new) = bytes.get(start..).filter(|b| b.starts_with(NEW_MAGIC)) else {
        bail!("not a glibc ld.so.cache of format 1.1");
    };
    let Some(count) = u32_at(new, 20) else {
        bail!("the cache ends in its header");
    };
    let mut out = Vec::new();
    for i in 0..count as usize {
        let at = NEW_HEADER + i * NEW_ENTRY;
        // glibc-hwcaps entries (copies in subdirectories the loader picks
        // by CPU level) are kept: their paths say their level, and the
        // resolver ranks them (`linker::hwcaps`).
        let (Some(key), Some(value), Some(_hwcap)) = (
            u32_at(new, at + 4),
            u32_at(new, at + 8),
            u64_at(new, at + 16),
        ) else {
            bail!("the cache ends in entry {i} of {count}");
        };
        // Strings are counted from the new header's start.
        let (Some(key), Some(value)) = (c_str(new, key as usize), c_str(new, value as usize))
        else {
            bail!("entry {i} of the cache names a string past its end");
        };
        use std::os::unix::ffi::OsStrExt;
        out.push((
            String::from_utf8_lossy(key).into_owned(),
            PathBuf::from(std::ffi::OsStr::from_bytes(value)),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machines_cache_names_its_libc() {
        let cache = read(Path::new("/etc/ld.so.cache")).unwrap();
        let libc: Vec<_> = cache.iter().filter(|(k, _)| k == "libc.so.6").collect();
        assert!(
            libc.iter().any(|(_, p)| p.is_file()),
            "{libc:?} of {} entries",
            cache.len()
        );
    }

    #[test]
    fn a_cut_or_lying_cache_is_an_error_not_a_crash() {
        let real = std::fs::read("/etc/ld.so.cache").unwrap();
        for cut in [0, 10, 30, NEW_HEADER + 5] {
            assert!(parse(&real[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = real.clone();
        lying[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse(&lying).is_err());
        let mut lying = real;
        lying[NEW_HEADER + 8..NEW_HEADER + 12].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse(&lying).is_err());
    }
}
