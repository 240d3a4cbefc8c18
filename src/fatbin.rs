//! Which GPUs a library carries code for: the clang offload bundles in its
//! `.hip_fatbin` section, whose entries are named like
//! `hipv4-amdgcn-amd-amdhsa--gfx1030`. Read by doctor and by the swap (a
//! torch whose libtorch_hip.so has no gfx101x entry needs
//! HSA_OVERRIDE_GFX_VERSION on an RDNA1 card; see `swap::advice`).
//! The file is hostile input: `cargo xtask fuzz` runs this reader.

use std::collections::BTreeSet;
use std::path::Path;

use crate::fsutil::At;
use anyhow::{Context, Result, bail};
use goblin::container::Ctx;
use goblin::elf::SectionHeader;

mod walk;
pub use walk::{Entry, ReadAt, Walked, code_object_target, walk};

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
    let len = file.metadata().at("read", path)?.len();
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

/// An ELF header and the container and byte order it declares, as
/// goblin reads them (a value ELF does not define is refused). The
/// libraries' reader (elf.rs) reads its headers through this too.
pub(crate) fn elf_header(bytes: &[u8]) -> Result<(goblin::elf::Header, Ctx)> {
    let header = goblin::elf::Elf::parse_header(bytes)
        .map_err(|e| anyhow::anyhow!("not an ELF file: {e}"))?;
    let not_elf = |e: goblin::error::Error| anyhow::anyhow!("not an ELF file: {e}");
    let ctx = Ctx::new(
        header.container().map_err(not_elf)?,
        header.endianness().map_err(not_elf)?,
    );
    Ok((header, ctx))
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
    let (header, ctx) = elf_header(&header_bytes)?;
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
