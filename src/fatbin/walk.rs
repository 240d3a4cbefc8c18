//! The offload bundles of a file read header by header: each bundle's
//! entry table and each code object's ELF header, never the code itself,
//! so a gigabyte library costs a few reads per bundle.

use std::collections::BTreeSet;

use anyhow::{Context, Result};

use super::{BUNDLE_MAGIC, COMPRESSED_MAGIC};

mod compressed;
#[cfg(test)]
use compressed::DECODERS;

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

/// Reads per bundle: its 32-byte head, its entry table (grown as its
/// entries ask, up to 1 MiB) and 64 bytes of each code object's ELF header.
const TABLE_START: u64 = 4 << 10;
const TABLE_MAX: u64 = 1 << 20;
/// The file is read through a window of this much at a time: the search
/// for the next bundle, and the heads and tables of bundles close together,
/// are served from it, so a file of tiny bundles is read about once.
const SCAN: u64 = 64 << 10;

/// A window on `start..end` of a file: reads inside it are copied, a read
/// past it moves it (a small read far away, a code object's ELF header, is
/// made alone). Every byte is read about once however the bundles lie.
struct Window<'a> {
    read_at: ReadAt<'a>,
    end: u64,
    buf: Vec<u8>,
    at: u64,
}

impl Window<'_> {
    /// The bytes from `pos` on that the window holds, at least `want` (or
    /// what is left before the end), moving it there when it must.
    fn from(&mut self, pos: u64, want: u64) -> Result<&[u8]> {
        let want = want.min(self.end.saturating_sub(pos));
        let held = pos >= self.at && pos + want <= self.at + self.buf.len() as u64;
        if !held {
            let size = want.max(SCAN).min(self.end - pos);
            self.buf.resize(usize::try_from(size)?, 0);
            (self.read_at)(&mut self.buf, pos).context("cannot read an offload bundle")?;
            self.at = pos;
        }
        Ok(&self.buf[usize::try_from(pos - self.at)?..])
    }

    /// `buf.len()` bytes at `pos`: from the window when it holds them, else
    /// read alone (small reads) or by moving the window.
    fn read(&mut self, buf: &mut [u8], pos: u64) -> Result<()> {
        let len = buf.len() as u64;
        let held = pos >= self.at && pos + len <= self.at + self.buf.len() as u64;
        if !held && len <= 64 {
            return (self.read_at)(buf, pos).context("cannot read a code object's ELF header");
        }
        let got = self.from(pos, len)?;
        buf.copy_from_slice(&got[..buf.len()]);
        Ok(())
    }
}

/// The code objects of the offload bundles in `start..end` of a file
/// (a `.hip_fatbin` section, or a whole bundle file), read from headers
/// only: each bundle's entry table and each code object's ELF header, the
/// next bundle sought after the end the table states. A gigabyte section
/// costs a few reads per bundle, not a read of its bytes; a section of
/// tiny bundles (4 bytes each) costs about one read of its bytes, and one
/// zstd decoder serves every compressed bundle.
pub fn walk(read_at: ReadAt, start: u64, end: u64) -> Result<Walked> {
    let mut out = Walked::default();
    let mut win = Window {
        read_at,
        end,
        buf: Vec::new(),
        at: 0,
    };
    let mut decoder = None;
    let mut pos = start;
    while let Some(at) = next_bundle(&mut win, pos, end)? {
        let mut head = [0u8; 32];
        let avail = usize::try_from((end - at).min(32))?;
        win.read(&mut head[..avail], at)?;
        if head.starts_with(COMPRESSED_MAGIC) {
            out.compressed += 1;
            pos = compressed::read(&head, at, end, read_at, &mut decoder, &mut out)?;
            continue;
        }
        let most = TABLE_MAX.min(end - at);
        let mut size = TABLE_START.min(most);
        let (table, table_end) = loop {
            let buf = win.from(at, size)?;
            let buf = &buf[..usize::try_from(size.min(buf.len() as u64))?];
            let (table, table_end, needs) = table_of(buf);
            // Grown only to what the entries read so far ask for, so a
            // table is read no further than where the walk goes on from.
            match needs {
                Some(n) if n > size && n <= most => size = n.max(size * 2).min(most),
                _ => {
                    let table: Vec<(String, u64, u64)> = table
                        .into_iter()
                        .map(|(n, o, l)| (n.to_owned(), o, l))
                        .collect();
                    break (table, table_end);
                }
            }
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
                    win.read(&mut elf, o)?;
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

/// The first bundle (either magic) at or after `from`, before `end`: the
/// window searched as far as it holds, then moved on.
fn next_bundle(win: &mut Window, from: u64, end: u64) -> Result<Option<u64>> {
    let overlap = BUNDLE_MAGIC.len() as u64;
    let mut pos = from;
    while pos < end {
        let buf = win.from(pos, overlap)?;
        // Either magic, the first met: the search stops there, so finding
        // the next of many tiny bundles costs their bytes, not the window's.
        let first = memchr::memchr2_iter(BUNDLE_MAGIC[0], COMPRESSED_MAGIC[0], buf).find(|&i| {
            buf[i..].starts_with(BUNDLE_MAGIC) || buf[i..].starts_with(COMPRESSED_MAGIC)
        });
        if let Some(i) = first {
            return Ok(Some(pos + i as u64));
        }
        let len = buf.len() as u64;
        if pos + len >= end {
            break;
        }
        pos += len.saturating_sub(overlap).max(1);
    }
    Ok(None)
}

/// A bundle's entries: (name, offset, size) each.
pub(super) type Table<'a> = Vec<(&'a str, u64, u64)>;

/// One bundle's entry table from its first bytes: (name, offset, size) per
/// entry, where the table read ends, and, when the count was not met, how
/// many bytes the next entry needs (None: the table is whole).
pub(super) fn table_of(bundle: &[u8]) -> (Table<'_>, u64, Option<u64>) {
    let u64_at = |pos: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            bundle.get(pos..pos.checked_add(8)?)?.try_into().ok()?,
        ))
    };
    let mut pos = BUNDLE_MAGIC.len();
    let Some(count) = u64_at(pos) else {
        return (Vec::new(), pos as u64, Some(pos as u64 + 8));
    };
    pos += 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let (Some(offset), Some(size), Some(len)) =
            (u64_at(pos), u64_at(pos + 8), u64_at(pos + 16))
        else {
            return (out, pos as u64, Some(pos as u64 + 24));
        };
        let name_start = pos + 24;
        let Some(name) = usize::try_from(len)
            .ok()
            .and_then(|len| bundle.get(name_start..name_start.checked_add(len)?))
        else {
            let needs = (name_start as u64).saturating_add(len);
            return (out, pos as u64, Some(needs));
        };
        pos = name_start + name.len();
        out.push((std::str::from_utf8(name).unwrap_or(""), offset, size));
    }
    (out, pos as u64, None)
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

    /// The walk of `bytes`, with the bytes it read and the decoders it
    /// started.
    fn counted_walk(bytes: &[u8]) -> (Walked, u64, usize) {
        let read = std::cell::Cell::new(0u64);
        let read_at = |buf: &mut [u8], at: u64| {
            read.set(read.get() + buf.len() as u64);
            let at = at as usize;
            buf.copy_from_slice(&bytes[at..at + buf.len()]);
            Ok(())
        };
        DECODERS.with(|d| d.set(0));
        let walked = walk(&read_at, 0, bytes.len() as u64).unwrap();
        (walked, read.get(), DECODERS.with(|d| d.get()))
    }

    /// Issue 59: a file of 4-byte compressed bundles (the bare magic), or
    /// of bare bundle magics with garbage tables, is read about once, with
    /// at most one decoder, not 64 KiB and a decoder per bundle.
    #[test]
    fn a_file_of_tiny_bundles_is_read_about_once() {
        const MIB: usize = 1 << 20;
        let ccob: Vec<u8> = COMPRESSED_MAGIC.iter().copied().cycle().take(MIB).collect();
        let (w, read, decoders) = counted_walk(&ccob);
        assert_eq!(w.compressed, MIB / COMPRESSED_MAGIC.len());
        assert!(read <= 2 * MIB as u64, "read {read} bytes of {MIB}");
        assert!(decoders <= 1, "{decoders} decoders");

        // Each stating a size of 40 bytes: a stream too short to be worth much.
        let mut sized = Vec::new();
        while sized.len() + 40 <= MIB {
            let mut b = COMPRESSED_MAGIC.to_vec();
            b.extend(2u16.to_le_bytes());
            b.extend(1u16.to_le_bytes());
            b.extend(40u32.to_le_bytes());
            b.resize(40, 0x28);
            sized.extend(b);
        }
        let (w, read, decoders) = counted_walk(&sized);
        assert_eq!(w.compressed, sized.len() / 40);
        assert!(read <= 3 * MIB as u64, "read {read} bytes of {MIB}");
        assert!(decoders <= 1, "{decoders} decoders");

        // Bare bundle magics, each table's count huge and its entry cut short.
        let mut plain = Vec::new();
        while plain.len() + 64 <= MIB {
            let mut b = BUNDLE_MAGIC.to_vec();
            b.extend(u64::MAX.to_le_bytes());
            b.extend(0u64.to_le_bytes());
            b.extend(0u64.to_le_bytes());
            b.extend((1u64 << 40).to_le_bytes());
            b.resize(64, 0);
            plain.extend(b);
        }
        let (w, read, _) = counted_walk(&plain);
        assert!(w.entries.is_empty());
        assert!(read <= 3 * MIB as u64, "read {read} bytes of {MIB}");
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

    /// A compressed bundle (clang --offload-compress) of `inner` in format
    /// `version`: version 1 states no total size, 2 states it as a u32, 3
    /// as a u64 (clang's CompressedOffloadBundle).
    fn ccob(version: u16, inner: &[u8]) -> Vec<u8> {
        let z = zstd::encode_all(inner, 3).unwrap();
        let mut out = COMPRESSED_MAGIC.to_vec();
        out.extend(version.to_le_bytes());
        out.extend(1u16.to_le_bytes());
        match version {
            1 => out.extend((inner.len() as u32).to_le_bytes()),
            2 => {
                out.extend(((24 + z.len()) as u32).to_le_bytes());
                out.extend((inner.len() as u32).to_le_bytes());
            }
            _ => {
                out.extend(((32 + z.len()) as u64).to_le_bytes());
                out.extend((inner.len() as u64).to_le_bytes());
            }
        }
        out.extend(0u64.to_le_bytes());
        out.extend(&z);
        out
    }

    /// Versions 1, 2 and 3 of the compressed format are read alike: named
    /// by their entry IDs, and the bundle after each read too. Version 1
    /// (no total size) was skipped by its magic before issue 70.
    #[test]
    fn every_compressed_version_is_read() {
        let inner = bundle_with_code(&[
            ("host-x86_64-unknown-linux-gnu-", 0),
            ("hipv4-amdgcn-amd-amdhsa--gfx1010", 0x33),
            ("hipv4-amdgcn-amd-amdhsa--gfx1030", 0x36),
        ]);
        for version in [1, 2, 3] {
            let mut file = ccob(version, &inner);
            file.extend(bundle_with_code(&[(
                "hipv4-amdgcn-amd-amdhsa--gfx1012",
                0x35,
            )]));
            let w = walk_bytes(&file);
            assert_eq!(w.compressed, 1, "version {version}");
            assert_eq!(
                w.compressed_named.iter().collect::<Vec<_>>(),
                ["gfx1010", "gfx1030"],
                "version {version}"
            );
            let after: Vec<&str> = w.entries.iter().map(|e| e.named.as_str()).collect();
            assert_eq!(after, ["gfx1012"], "version {version}");
        }
    }

    /// A compressed bundle whose stream is no zstd: counted, nothing named.
    #[test]
    fn compressed_bundles_are_named_by_their_entry_ids() {
        let ccob = ccob(
            2,
            &bundle_with_code(&[("hipv4-amdgcn-amd-amdhsa--gfx1010", 0x33)]),
        );
        let mut bad = ccob[..24].to_vec();
        bad.extend([0u8; 64]);
        let w = walk_bytes(&bad);
        assert_eq!((w.compressed, w.compressed_named.len()), (1, 0));
    }
}
