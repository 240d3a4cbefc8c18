//! The clang offload bundles of a library's `.hip_fatbin` section, whose
//! entries are named like `hipv4-amdgcn-amd-amdhsa--gfx1030`: one search
//! for the bundle magic and one reader of a bundle's entry table
//! (`walk`), for every caller. `gpucode` reads what they hold for torch's
//! libtorch_hip.so and every other library; a compile's answer is split
//! into its code objects by [`entries`]. The file is hostile input:
//! `cargo xtask fuzz` runs these readers.

use anyhow::{Context, Result, bail};
use goblin::container::Ctx;
use goblin::elf::SectionHeader;

mod walk;
pub use walk::{Entry, ReadAt, Walked, code_object_target, walk};

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// A compressed bundle (clang --offload-compress).
const COMPRESSED_MAGIC: &[u8] = b"CCOB";

/// Whether `bytes` start with an offload bundle, compressed or not.
pub fn starts_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(BUNDLE_MAGIC) || bytes.starts_with(COMPRESSED_MAGIC)
}

/// The code objects of the offload bundles in an ELF file's `.hip_fatbin`
/// section ([`section`], then [`walk`] over it); `None` when it has no
/// such section (a library with no GPU code). Only the ELF headers, the
/// bundles' entry tables and each code object's ELF header are read, not
/// the whole (often gigabyte) file.
pub fn walk_library(read_at: ReadAt, len: u64) -> Result<Option<Walked>> {
    let Some((offset, size)) = section(read_at, len)? else {
        return Ok(None);
    };
    Ok(Some(walk(read_at, offset, offset + size)?))
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

/// The entries of one uncompressed bundle that starts `bundle`: each
/// name with its bytes, as far as the table and the bytes go. The table is
/// read by the walk's own reader.
pub fn entries(bundle: &[u8]) -> Vec<(&str, &[u8])> {
    if !bundle.starts_with(BUNDLE_MAGIC) {
        return Vec::new();
    }
    let (table, _, _) = walk::table_of(bundle);
    table
        .into_iter()
        .filter_map(|(name, offset, size)| {
            let start = usize::try_from(offset).ok()?;
            let end = start.checked_add(usize::try_from(size).ok()?)?;
            Some((name, bundle.get(start..end)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle whose entries hold `code`, each after the table.
    fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = BUNDLE_MAGIC.to_vec();
        b.extend((entries.len() as u64).to_le_bytes());
        let table = b.len() + entries.iter().map(|(n, _)| 24 + n.len()).sum::<usize>();
        let mut at = table;
        for (name, code) in entries {
            b.extend((at as u64).to_le_bytes());
            b.extend((code.len() as u64).to_le_bytes());
            b.extend((name.len() as u64).to_le_bytes());
            b.extend(name.as_bytes());
            at += code.len();
        }
        for (_, code) in entries {
            b.extend(*code);
        }
        b
    }

    #[test]
    fn entries_are_cut_from_the_bundle_as_its_table_says() {
        let b = bundle(&[
            ("host-x86_64-unknown-linux-gnu-", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx1010", b"code for 1010"),
            ("hipv4-amdgcn-amd-amdhsa--gfx1030", b"for 1030"),
        ]);
        let got = entries(&b);
        assert_eq!(
            got,
            [
                ("host-x86_64-unknown-linux-gnu-", &b""[..]),
                ("hipv4-amdgcn-amd-amdhsa--gfx1010", &b"code for 1010"[..]),
                ("hipv4-amdgcn-amd-amdhsa--gfx1030", &b"for 1030"[..]),
            ]
        );
        assert!(starts_bundle(&b));
        // Cut short: the entries whose bytes are there, and no panic.
        assert_eq!(entries(&b[..b.len() - 1]).len(), 2);
        assert!(entries(&b[..30]).is_empty());
        assert!(entries(b"no bundle").is_empty());
        // A count past the bytes, and a name length of u64::MAX: no panic.
        let mut huge = BUNDLE_MAGIC.to_vec();
        huge.extend(u64::MAX.to_le_bytes());
        huge.extend([0u8; 16]);
        huge.extend(u64::MAX.to_le_bytes());
        assert!(entries(&huge).is_empty());
    }
}
