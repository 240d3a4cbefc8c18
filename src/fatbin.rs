//! Which GPUs a library carries code for: the clang offload bundles in its
//! `.hip_fatbin` section, whose entries are named like
//! `hipv4-amdgcn-amd-amdhsa--gfx1030`. Read by doctor and by the swap (a
//! torch whose libtorch_hip.so has no gfx101x entry needs
//! HSA_OVERRIDE_GFX_VERSION on an RDNA1 card; see `swap::advice`).
//! The file is hostile input: `cargo xtask fuzz` runs this reader.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use goblin::container::{Container, Ctx, Endian};
use goblin::elf::SectionHeader;

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// A compressed bundle (clang --offload-compress).
const COMPRESSED_MAGIC: &[u8] = b"CCOB";

/// What a library's offload bundles hold.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CodeObjects {
    /// GPU targets with code, e.g. "gfx1030" (feature flags like `:xnack-` dropped).
    pub archs: BTreeSet<String>,
    /// Compressed bundles, whose targets are not read.
    pub compressed: usize,
}

impl CodeObjects {
    pub fn has_gfx101x(&self) -> bool {
        self.archs.iter().any(|a| a.starts_with("gfx101"))
    }
}

/// The offload bundles of `path`'s `.hip_fatbin` section; `None` when it has
/// no such section (a library with no GPU code). Only the ELF headers and
/// that section are read, not the whole (often gigabyte) file.
pub fn read(path: &Path) -> Result<Option<CodeObjects>> {
    use std::os::unix::fs::FileExt;
    let file = crate::fsutil::open_regular(path)?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    read_from(&|buf, offset| file.read_exact_at(buf, offset), len)
        .with_context(|| format!("{} is not a usable ELF file", path.display()))
}

/// [`read`] on an open file of `len` bytes. Every offset and size the file
/// states is checked against `len` before a byte is allocated for it, so a
/// header that lies (a section of 2^63 bytes) is an error, not a crash.
pub fn read_from(
    read_at: &dyn Fn(&mut [u8], u64) -> std::io::Result<()>,
    len: u64,
) -> Result<Option<CodeObjects>> {
    let Some((offset, size)) = section(read_at, len)? else {
        return Ok(None);
    };
    let mut bytes = vec![0u8; usize::try_from(size)?];
    read_at(&mut bytes, offset).context("cannot read its .hip_fatbin section")?;
    Ok(Some(parse(&bytes)))
}

/// Where an ELF file's `.hip_fatbin` section lies (offset, size), read from
/// its ELF header and section headers alone; `None` when it has none. The
/// section is checked to lie inside the file's `len` bytes.
pub fn section(
    read_at: &dyn Fn(&mut [u8], u64) -> std::io::Result<()>,
    len: u64,
) -> Result<Option<(u64, u64)>> {
    let found = section_unchecked(read_at, len)?;
    if let Some((offset, size)) = found
        && offset.checked_add(size).is_none_or(|end| end > len)
    {
        bail!(
            "its .hip_fatbin section ({size} bytes at offset {offset}) lies past the end of the file ({len} bytes)"
        );
    }
    Ok(found)
}

fn section_unchecked(
    read_at: &dyn Fn(&mut [u8], u64) -> std::io::Result<()>,
    len: u64,
) -> Result<Option<(u64, u64)>> {
    let at = |what: &str, offset: u64, size: u64| -> Result<Vec<u8>> {
        if offset.checked_add(size).is_none_or(|end| end > len) {
            bail!(
                "its {what} ({size} bytes at offset {offset}) lies past the end of the file ({len} bytes)"
            );
        }
        let mut buf = vec![0u8; usize::try_from(size)?];
        read_at(&mut buf, offset).with_context(|| format!("cannot read its {what}"))?;
        Ok(buf)
    };
    let header_bytes = at("ELF header", 0, 64)?;
    let header = goblin::elf::Elf::parse_header(&header_bytes)
        .map_err(|e| anyhow::anyhow!("not an ELF file: {e}"))?;
    let ctx = Ctx::new(
        if header.e_ident[4] == 2 {
            Container::Big
        } else {
            Container::Little
        },
        if header.e_ident[5] == 2 {
            Endian::Big
        } else {
            Endian::Little
        },
    );
    let entry = SectionHeader::size(ctx);
    if header.e_shnum > 0 && usize::from(header.e_shentsize) != entry {
        bail!(
            "its section headers are {} bytes each, not {entry}",
            header.e_shentsize
        );
    }
    let table = at(
        "section header table",
        header.e_shoff,
        u64::from(header.e_shnum) * entry as u64,
    )?;
    let sections = SectionHeader::parse_from(&table, 0, usize::from(header.e_shnum), ctx)
        .map_err(|e| anyhow::anyhow!("bad section headers: {e}"))?;
    let Some(names) = sections.get(usize::from(header.e_shstrndx)) else {
        bail!("it has no section names");
    };
    let names = at("section name table", names.sh_offset, names.sh_size)?;
    let name_of = |s: &SectionHeader| {
        names
            .get(s.sh_name..)
            .and_then(|n| n.split(|b| *b == 0).next())
            .unwrap_or_default()
    };
    Ok(sections
        .iter()
        .find(|s| name_of(s) == b".hip_fatbin")
        .map(|s| (s.sh_offset, s.sh_size)))
}

/// Every bundle in a `.hip_fatbin` section: one per translation unit, each
/// aligned, back to back. Linear in the section's size: the search for the
/// next bundle starts after the entry table just read, so no byte is read
/// as part of more than one table, whatever the counts say.
pub fn parse(section: &[u8]) -> CodeObjects {
    let mut out = CodeObjects::default();
    let finder = memchr::memmem::Finder::new(BUNDLE_MAGIC);
    let mut from = 0;
    while let Some(found) = finder.find(&section[from..]) {
        let start = from + found;
        let (triples, table_end) = bundle_triples(&section[start..]);
        for triple in triples {
            if let Some(arch) = triple
                .rsplit("--")
                .next()
                .filter(|_| triple.contains("amdgcn"))
            {
                let arch = arch.split(':').next().unwrap_or(arch);
                out.archs.insert(arch.to_owned());
            }
        }
        from = start + table_end.max(BUNDLE_MAGIC.len());
    }
    out.compressed = memchr::memmem::find_iter(section, COMPRESSED_MAGIC).count();
    out
}

/// The entry names of one uncompressed bundle, and where its entry table
/// ends: after the magic, a u64 count, then per entry u64 offset, u64 size,
/// u64 name length and the name. The count is only believed as far as the
/// bytes go.
fn bundle_triples(bundle: &[u8]) -> (Vec<&str>, usize) {
    let u64_at = |pos: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            bundle.get(pos..pos.checked_add(8)?)?.try_into().ok()?,
        ))
    };
    let mut pos = BUNDLE_MAGIC.len();
    let Some(count) = u64_at(pos) else {
        return (Vec::new(), pos);
    };
    pos += 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let Some(len) = u64_at(pos + 16) else {
            break;
        };
        let name_start = pos + 24;
        let Some(name) = usize::try_from(len)
            .ok()
            .and_then(|len| bundle.get(name_start..name_start.checked_add(len)?))
        else {
            break;
        };
        pos = name_start + name.len();
        out.push(std::str::from_utf8(name).unwrap_or(""));
    }
    (out, pos)
}

/// The entries of one uncompressed bundle that starts `bundle`: each
/// name with its bytes, as far as the table and the bytes go.
pub fn entries(bundle: &[u8]) -> Vec<(&str, &[u8])> {
    if !bundle.starts_with(BUNDLE_MAGIC) {
        return Vec::new();
    }
    let u64_at = |pos: usize| -> Option<usize> {
        let b = bundle.get(pos..pos.checked_add(8)?)?;
        usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok()
    };
    let mut pos = BUNDLE_MAGIC.len();
    let Some(count) = u64_at(pos) else {
        return Vec::new();
    };
    pos += 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let (Some(offset), Some(size), Some(len)) =
            (u64_at(pos), u64_at(pos + 8), u64_at(pos + 16))
        else {
            break;
        };
        let name_start = pos + 24;
        let Some(name) = name_start
            .checked_add(len)
            .and_then(|end| bundle.get(name_start..end))
        else {
            break;
        };
        pos = name_start + name.len();
        if let Some(bytes) = offset
            .checked_add(size)
            .and_then(|end| bundle.get(offset..end))
        {
            out.push((std::str::from_utf8(name).unwrap_or(""), bytes));
        }
    }
    out
}

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
    /// their header states, their targets not read.
    pub compressed: usize,
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
fn table_of(bundle: &[u8]) -> (Vec<(&str, u64, u64)>, u64, bool) {
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

    fn bundle(triples: &[&str]) -> Vec<u8> {
        let mut b = BUNDLE_MAGIC.to_vec();
        b.extend((triples.len() as u64).to_le_bytes());
        for t in triples {
            b.extend(0u64.to_le_bytes());
            b.extend(0u64.to_le_bytes());
            b.extend((t.len() as u64).to_le_bytes());
            b.extend(t.as_bytes());
        }
        b
    }

    #[test]
    fn reads_every_bundle_and_drops_feature_flags() {
        let mut section = bundle(&[
            "host-x86_64-unknown-linux-gnu-",
            "hipv4-amdgcn-amd-amdhsa--gfx1030",
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
        ]);
        section.resize(4096, 0);
        section.extend(bundle(&["hipv4-amdgcn-amd-amdhsa--gfx1010"]));
        let c = parse(&section);
        assert_eq!(
            c.archs.iter().map(String::as_str).collect::<Vec<_>>(),
            ["gfx1010", "gfx1030", "gfx90a"]
        );
        assert!(c.has_gfx101x());
        assert_eq!(c.compressed, 0);
        // A truncated bundle gives what it has, and no panic.
        let cut = bundle(&["hipv4-amdgcn-amd-amdhsa--gfx1030"]);
        assert!(parse(&cut[..cut.len() - 5]).archs.is_empty());
    }

    /// 10 MB of entries whose 32-byte names each hold a bundle header (the
    /// magic and a count of 4096): every bundle found in a name reads on
    /// through the entries after it, so this was quadratic (78 s). Now the
    /// search goes on after the table just read, and each byte is read once.
    #[test]
    fn overlapping_bundle_tables_are_read_once() {
        let mut header = BUNDLE_MAGIC.to_vec();
        header.extend(4096u64.to_le_bytes());
        let mut section = header.clone();
        let name = b"hipv4-amdgcn-amd-amdhsa--gfx1010";
        section.extend([0u8; 16]);
        section.extend((name.len() as u64).to_le_bytes());
        section.extend(name);
        while section.len() < 10 << 20 {
            section.extend([0u8; 16]);
            section.extend((header.len() as u64).to_le_bytes());
            section.extend(&header);
        }
        let c = parse(&section);
        assert_eq!(c.archs.iter().collect::<Vec<_>>(), ["gfx1010"]);
        // A count past the bytes, and a name length of u64::MAX: no panic.
        let mut huge = BUNDLE_MAGIC.to_vec();
        huge.extend(u64::MAX.to_le_bytes());
        huge.extend([0u8; 16]);
        huge.extend(u64::MAX.to_le_bytes());
        assert!(parse(&huge).archs.is_empty());
    }
}
