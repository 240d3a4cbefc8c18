//! The offload bundles of a file read header by header: each bundle's
//! entry table and each code object's ELF header, never the code itself,
//! so a gigabyte library costs a few reads per bundle.

use std::collections::BTreeSet;

use anyhow::{Context, Result};

use super::{BUNDLE_MAGIC, COMPRESSED_MAGIC};

/// How the reader reads a file: fill the buffer from the offset.
pub type ReadAt<'a> = &'a dyn Fn(&mut [u8], u64) -> std::io::Result<()>;

/// One code object of an offload bundle, as its headers say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The target the bundle's entry ID names (`hipv4-amdgcn-amd-amdhsa--gfx1010`
    /// names gfx1010), feature flags dropped.
    pub named: String,
    /// The target the code object declares in its ELF header (e_flags);
    /// None when its bytes are no AMD GPU code object.
    pub declared: Option<String>,
}

/// What the bundles between two offsets hold, read header by header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walked {
    pub entries: Vec<Entry>,
    /// Compressed bundles (clang --offload-compress): skipped by the size
    /// their header states.
    pub compressed: usize,
    /// The targets the entry IDs of compressed bundles name, read from the
    /// first 64 KiB their zstd stream gives (the entry table); their code
    /// objects are not decompressed, so what they declare is not read.
    pub compressed_named: BTreeSet<String>,
}

/// Reads per bundle: its 32-byte head, its entry table (grown as its count
/// asks, up to 1 MiB) and 64 bytes of each code object's ELF header.
const TABLE_START: u64 = 4 << 10;
const TABLE_MAX: u64 = 1 << 20;
/// The search for the next bundle (padding between bundles) reads this much at a time.
const SCAN: u64 = 64 << 10;

/// The code objects of the offload bundles in `start..end` of a file
/// (a `.hip_fatbin` section, or a whole bundle file), read from headers
/// only: each bundle's entry table and each code object's ELF header, the
/// next bundle sought after the end the table states. A gigabyte section
/// costs a few reads per bundle, not a read of its bytes.
pub fn walk(read_at: ReadAt, start: u64, end: u64) -> Result<Walked> {
    let mut out = Walked::default();
    let mut pos = start;
    while let Some(at) = next_bundle(read_at, pos, end)? {
        let mut head = [0u8; 32];
        let avail = usize::try_from((end - at).min(32))?;
        read_at(&mut head[..avail], at).context("cannot read an offload bundle's header")?;
        if head.starts_with(COMPRESSED_MAGIC) {
            out.compressed += 1;
            let version = u16::from_le_bytes([head[4], head[5]]);
            let total = match version {
                2 => u64::from(u32::from_le_bytes(head[8..12].try_into()?)),
                3 => u64::from_le_bytes(head[8..16].try_into()?),
                _ => 0,
            };
            let data = match version {
                2 => 24,
                3 => 32,
                _ => 20,
            };
            let stop = if total > data {
                at.saturating_add(total).min(end)
            } else {
                end
            };
            out.compressed_named
                .extend(compressed_ids(read_at, at.saturating_add(data), stop));
            pos = at.saturating_add(total.max(COMPRESSED_MAGIC.len() as u64));
            continue;
        }
        let mut size = TABLE_START.min(end - at);
        let (table, table_end) = loop {
            let mut buf = vec![0u8; usize::try_from(size)?];
            read_at(&mut buf, at).context("cannot read an offload bundle's entry table")?;
            let (table, table_end, whole) = table_of(&buf);
            let most = TABLE_MAX.min(end - at);
            if whole || size >= most {
                let table: Vec<(String, u64, u64)> = table
                    .into_iter()
                    .map(|(n, o, l)| (n.to_owned(), o, l))
                    .collect();
                break (table, table_end);
            }
            size = (size * 4).min(most);
        };
        let mut bundle_end = table_end.max(BUNDLE_MAGIC.len() as u64);
        for (name, offset, len) in table {
            bundle_end = bundle_end.max(offset.saturating_add(len));
            if !name.contains("amdgcn") {
                continue;
            }
            let named = name.rsplit("--").next().unwrap_or("");
            let named = named.split(':').next().unwrap_or(named).to_owned();
            let mut elf = [0u8; 64];
            let declared = match at.checked_add(offset) {
                Some(o) if len >= 64 && o.checked_add(64).is_some_and(|e| e <= end) => {
                    read_at(&mut elf, o).context("cannot read a code object's ELF header")?;
                    code_object_target(&elf)
                }
                _ => None,
            };
            out.entries.push(Entry { named, declared });
        }
        pos = at.saturating_add(bundle_end);
    }
    Ok(out)
}

/// The targets a compressed bundle's entry IDs name: its zstd stream from
/// `from` decompressed only as far as its first 64 KiB (the entry table).
/// Nothing when the stream is not zstd or does not decompress.
fn compressed_ids(read_at: ReadAt, from: u64, end: u64) -> Vec<String> {
    struct At<'a> {
        read_at: ReadAt<'a>,
        pos: u64,
        end: u64,
    }
    impl std::io::Read for At<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = (buf.len() as u64).min(self.end.saturating_sub(self.pos)) as usize;
            (self.read_at)(&mut buf[..n], self.pos)?;
            self.pos += n as u64;
            Ok(n)
        }
    }
    use std::io::Read;
    let src = At {
        read_at,
        pos: from,
        end,
    };
    // A frame may ask for a window of up to 2^31 bytes: one over 16 MiB
    // is refused rather than allocated (clang's use 2^21 to 2^23).
    let Ok(mut dec) = zstd::stream::read::Decoder::new(src) else {
        return Vec::new();
    };
    if dec.window_log_max(24).is_err() {
        return Vec::new();
    }
    let mut head = Vec::new();
    let _ = dec.take(TABLE_START * 16).read_to_end(&mut head);
    let (table, _, _) = table_of(&head);
    table
        .into_iter()
        .filter(|(name, _, _)| name.contains("amdgcn"))
        .filter_map(|(name, _, _)| name.rsplit("--").next())
        .map(|t| t.split(':').next().unwrap_or(t).to_owned())
        .collect()
}

/// The first bundle (either magic) at or after `from`, before `end`.
fn next_bundle(read_at: ReadAt, from: u64, end: u64) -> Result<Option<u64>> {
    let overlap = BUNDLE_MAGIC.len() as u64;
    let mut pos = from;
    while pos < end {
        let size = SCAN.min(end - pos);
        let mut buf = vec![0u8; usize::try_from(size)?];
        read_at(&mut buf, pos).context("cannot read between offload bundles")?;
        let first = [
            memchr::memmem::find(&buf, BUNDLE_MAGIC),
            memchr::memmem::find(&buf, COMPRESSED_MAGIC),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(i) = first {
            return Ok(Some(pos + i as u64));
        }
        if pos + size >= end {
            break;
        }
        pos += size - overlap;
    }
    Ok(None)
}

/// One bundle's entry table from its first bytes: (name, offset, size) per
/// entry, where the table ends, and whether the count was met.
pub(super) fn table_of(bundle: &[u8]) -> (Vec<(&str, u64, u64)>, u64, bool) {
    let u64_at = |pos: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            bundle.get(pos..pos.checked_add(8)?)?.try_into().ok()?,
        ))
    };
    let mut pos = BUNDLE_MAGIC.len();
    let Some(count) = u64_at(pos) else {
        return (Vec::new(), pos as u64, false);
    };
    pos += 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let (Some(offset), Some(size), Some(len)) =
            (u64_at(pos), u64_at(pos + 8), u64_at(pos + 16))
        else {
            return (out, pos as u64, false);
        };
        let name_start = pos + 24;
        let Some(name) = usize::try_from(len)
            .ok()
            .and_then(|len| bundle.get(name_start..name_start.checked_add(len)?))
        else {
            return (out, pos as u64, false);
        };
        pos = name_start + name.len();
        out.push((std::str::from_utf8(name).unwrap_or(""), offset, size));
    }
    (out, pos as u64, true)
}

/// The target an AMD GPU code object declares: the `EF_AMDGPU_MACH` in
/// the e_flags of its 64-bit little-endian ELF header ("gfx1010", or
/// "mach 0x99" for a value this table does not name). None when the bytes
/// are no ELF file for EM_AMDGPU.
pub fn code_object_target(header: &[u8]) -> Option<String> {
    const EM_AMDGPU: u16 = 224;
    if !header.starts_with(b"\x7fELF") || header.len() < 52 || header[4] != 2 || header[5] != 1 {
        return None;
    }
    if u16::from_le_bytes([header[18], header[19]]) != EM_AMDGPU {
        return None;
    }
    let mach = u32::from_le_bytes(header[48..52].try_into().ok()?) & 0xff;
    Some(mach_name(mach).map_or_else(|| format!("mach 0x{mach:x}"), str::to_owned))
}

/// LLVM's EF_AMDGPU_MACH values (llvm/BinaryFormat/ELF.h; AMDGPUUsage's
/// "AMDGPU EF_AMDGPU_MACH Values"), for the targets ROCm builds for.
fn mach_name(mach: u32) -> Option<&'static str> {
    Some(match mach {
        0x2a => "gfx803",
        0x2c => "gfx900",
        0x2d => "gfx902",
        0x2e => "gfx904",
        0x2f => "gfx906",
        0x30 => "gfx908",
        0x31 => "gfx909",
        0x32 => "gfx90c",
        0x33 => "gfx1010",
        0x34 => "gfx1011",
        0x35 => "gfx1012",
        0x36 => "gfx1030",
        0x37 => "gfx1031",
        0x38 => "gfx1032",
        0x39 => "gfx1033",
        0x3d => "gfx1035",
        0x3e => "gfx1034",
        0x3f => "gfx90a",
        0x40 => "gfx940",
        0x41 => "gfx1100",
        0x42 => "gfx1013",
        0x43 => "gfx1150",
        0x44 => "gfx1103",
        0x45 => "gfx1036",
        0x46 => "gfx1101",
        0x47 => "gfx1102",
        0x48 => "gfx1200",
        0x4a => "gfx1151",
        0x4b => "gfx941",
        0x4c => "gfx942",
        0x4e => "gfx1201",
        0x4f => "gfx950",
        0x51 => "gfx9-generic",
        0x52 => "gfx10-1-generic",
        0x53 => "gfx10-3-generic",
        0x54 => "gfx11-generic",
        0x55 => "gfx1152",
        0x58 => "gfx1153",
        0x59 => "gfx12-generic",
        0x5f => "gfx9-4-generic",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle with real entry offsets: one code object per name, each a
    /// 64-byte ELF header for EM_AMDGPU with EF_AMDGPU_MACH `mach`.
    fn bundle_with_code(entries: &[(&str, u32)]) -> Vec<u8> {
        let mut table = BUNDLE_MAGIC.to_vec();
        table.extend((entries.len() as u64).to_le_bytes());
        let table_len: usize =
            table.len() + entries.iter().map(|(n, _)| 24 + n.len()).sum::<usize>();
        let mut code = Vec::new();
        for (i, (name, mach)) in entries.iter().enumerate() {
            table.extend(((table_len + i * 64) as u64).to_le_bytes());
            table.extend(64u64.to_le_bytes());
            table.extend((name.len() as u64).to_le_bytes());
            table.extend(name.as_bytes());
            let mut elf = vec![0u8; 64];
            elf[..4].copy_from_slice(b"\x7fELF");
            elf[4] = 2;
            elf[5] = 1;
            elf[18..20].copy_from_slice(&224u16.to_le_bytes());
            elf[48..52].copy_from_slice(&mach.to_le_bytes());
            code.extend(elf);
        }
        table.extend(code);
        table
    }

    fn walk_bytes(bytes: &[u8]) -> Walked {
        let read_at = |buf: &mut [u8], at: u64| {
            let at = at as usize;
            buf.copy_from_slice(&bytes[at..at + buf.len()]);
            Ok(())
        };
        walk(&read_at, 0, bytes.len() as u64).unwrap()
    }

    #[test]
    fn the_walk_reads_what_each_code_object_declares() {
        let mut file = vec![0u8; 100];
        file.extend(bundle_with_code(&[
            ("host-x86_64-unknown-linux-gnu-", 0),
            ("hipv4-amdgcn-amd-amdhsa--gfx1010", 0x33),
            ("hipv4-amdgcn-amd-amdhsa--gfx1012:xnack-", 0x36),
        ]));
        file.resize(file.len().next_multiple_of(4096), 0);
        file.extend(bundle_with_code(&[(
            "hipv4-amdgcn-amd-amdhsa--gfx10-1-generic",
            0x52,
        )]));
        let w = walk_bytes(&file);
        let seen: Vec<(&str, Option<&str>)> = w
            .entries
            .iter()
            .map(|e| (e.named.as_str(), e.declared.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("gfx1010", Some("gfx1010")),
                ("gfx1012", Some("gfx1030")),
                ("gfx10-1-generic", Some("gfx10-1-generic")),
            ]
        );
        // A table that lies about its entry's offset: no panic, no read
        // past the end.
        let mut lying = bundle_with_code(&[("hipv4-amdgcn-amd-amdhsa--gfx1010", 0x33)]);
        lying[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(walk_bytes(&lying).entries[0].declared, None);
    }

    /// clang --offload-compress's format, version 2: the magic, version,
    /// method, total size, uncompressed size, hash, then the zstd stream.
    #[test]
    fn compressed_bundles_are_named_by_their_entry_ids() {
        let inner = bundle_with_code(&[
            ("host-x86_64-unknown-linux-gnu-", 0),
            ("hipv4-amdgcn-amd-amdhsa--gfx1010", 0x33),
            ("hipv4-amdgcn-amd-amdhsa--gfx1030", 0x36),
        ]);
        let z = zstd::encode_all(&inner[..], 3).unwrap();
        let mut ccob = COMPRESSED_MAGIC.to_vec();
        ccob.extend(2u16.to_le_bytes());
        ccob.extend(1u16.to_le_bytes());
        ccob.extend(((24 + z.len()) as u32).to_le_bytes());
        ccob.extend((inner.len() as u32).to_le_bytes());
        ccob.extend(0u64.to_le_bytes());
        ccob.extend(&z);
        let mut file = ccob.clone();
        file.extend(bundle_with_code(&[(
            "hipv4-amdgcn-amd-amdhsa--gfx1012",
            0x35,
        )]));
        let w = walk_bytes(&file);
        assert_eq!(w.compressed, 1);
        assert_eq!(
            w.compressed_named.iter().collect::<Vec<_>>(),
            ["gfx1010", "gfx1030"]
        );
        assert_eq!(w.entries.len(), 1, "the bundle after it is read too");
        // A stream that is no zstd: counted, nothing named.
        let mut bad = ccob[..24].to_vec();
        bad.extend([0u8; 64]);
        let w = walk_bytes(&bad);
        assert_eq!((w.compressed, w.compressed_named.len()), (1, 0));
    }
}
