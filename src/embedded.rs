//! The kernel source texts a built libMIOpen embeds, and the batch-norm
//! fix made to them inside the library.
//!
//! MIOpen's build turns each kernel file into `const char
//! MIOPEN_KERNEL_<NAME>[]` (NUL-terminated) and `const size_t
//! MIOPEN_KERNEL_<NAME>_SIZE` (its length without the NUL; headers end in
//! `_INCLUDE`), and compiles them at run time from those bytes, with no
//! hash of the text anywhere. So a text can be fixed where it lies, as long
//! as its length stays `_SIZE`. The texts are found by their dynamic
//! symbols; a build that hides them is searched for the texts themselves
//! (NUL-delimited strings in read-only data that make a batch-norm
//! decision).

use std::ops::Range;

use anyhow::{Result, anyhow};
use goblin::elf::section_header::{SHT_NOBITS, SectionHeader};

use crate::kernel_text::{self, Outcome, Refusal};

const PREFIX: &str = "MIOPEN_KERNEL_";

/// One embedded text: its name and where its bytes are in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    /// `MIOPEN_KERNEL_<NAME>`, or for a hidden text `text at 0x<offset>`.
    pub name: String,
    pub range: Range<usize>,
}

/// How the texts were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    Symbols,
    Scan,
}

impl FoundBy {
    pub fn name(self) -> &'static str {
        match self {
            FoundBy::Symbols => "dynamic symbols",
            FoundBy::Scan => "a search of the read-only data (the symbols are hidden)",
        }
    }
}

/// What the fix did to a library, text by text.
#[derive(Debug)]
pub struct Edit {
    /// The texts changed, each with its decisions changed.
    pub changed: Vec<(Text, usize)>,
    /// Texts that already name gfx101x.
    pub already: Vec<Text>,
    /// How many embedded texts there are in all.
    pub texts: usize,
    pub found_by: FoundBy,
}

/// A text the fix does not recognise, or cannot fit: the whole library is
/// left as it was.
#[derive(Debug)]
pub struct Refused {
    pub text: String,
    pub why: Refusal,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kernel text {}: {}", self.text, self.why)
    }
}

/// What [`fix`] made of a library it could read.
#[derive(Debug)]
pub enum Fix {
    /// The library with its texts fixed (the same bytes when no text
    /// needed it), and what was done.
    Fixed { bytes: Vec<u8>, edit: Edit },
    /// A text it does not know: nothing was fixed.
    Refused(Refused),
}

/// `original` (a whole library file) with every batch-norm text fixed,
/// and what was done; proven to differ from it inside those texts alone.
/// An error is a library whose texts cannot be read at all.
pub fn fix(original: &[u8]) -> Result<Fix> {
    fix_except(original, &[])
}

/// As [`fix`], leaving the texts named in `skip` as they are.
pub fn fix_except(original: &[u8], skip: &[String]) -> Result<Fix> {
    let (texts, found_by) = locate(original)?;
    let edit = Edit {
        changed: Vec::new(),
        already: Vec::new(),
        texts: texts.len(),
        found_by,
    };
    let texts: Vec<Text> = texts
        .into_iter()
        .filter(|t| !skip.contains(&t.name))
        .collect();
    fix_texts(original, texts, edit)
}

/// As [`fix`], of `texts` located in `original` (each range inside it,
/// none overlapping another), adding to `edit`.
pub(crate) fn fix_texts(original: &[u8], texts: Vec<Text>, mut edit: Edit) -> Result<Fix> {
    let mut fixed = Vec::new();
    for t in texts {
        match kernel_text::fix(&original[t.range.clone()], true) {
            Ok(Outcome::Untouched) => {}
            Ok(Outcome::AlreadyFixed) => edit.already.push(t),
            Ok(Outcome::Fixed { text, decisions }) => fixed.push((t, text, decisions)),
            Err(why) => return Ok(Fix::Refused(Refused { text: t.name, why })),
        }
    }
    let mut bytes = original.to_vec();
    for (t, text, decisions) in fixed {
        bytes[t.range.clone()].copy_from_slice(&text);
        edit.changed.push((t, decisions));
    }
    let ranges: Vec<Range<usize>> = edit.changed.iter().map(|(t, _)| t.range.clone()).collect();
    prove_confined(original, &bytes, &ranges)?;
    Ok(Fix::Fixed { bytes, edit })
}

/// Every byte that differs lies inside one of `ranges`, and the length is
/// the same: the rest of the file is the original's, byte for byte.
pub fn prove_confined(before: &[u8], after: &[u8], ranges: &[Range<usize>]) -> Result<()> {
    if before.len() != after.len() {
        return Err(anyhow!(
            "the fixed library is {} bytes, the original {}",
            after.len(),
            before.len()
        ));
    }
    let mut at = 0;
    let mut sorted = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    for r in sorted
        .iter()
        .chain(std::iter::once(&(before.len()..before.len())))
    {
        // Ranges may overlap: what lies before this one and after the last.
        let upto = r.start.max(at);
        if before[at..upto] != after[at..upto] {
            let off = at
                + before[at..upto]
                    .iter()
                    .zip(&after[at..upto])
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
            return Err(anyhow!(
                "byte 0x{off:x} changed outside every kernel text; nothing was written"
            ));
        }
        at = at.max(r.end);
    }
    Ok(())
}

/// The embedded texts: by symbol where the library exports them, else by
/// searching its read-only data.
pub fn locate(bytes: &[u8]) -> Result<(Vec<Text>, FoundBy)> {
    let elf = goblin::elf::Elf::parse(bytes).map_err(|e| anyhow!("not an ELF file: {e}"))?;
    let by_symbol = by_symbols(&elf, bytes)?;
    if !by_symbol.is_empty() {
        disjoint(&by_symbol)?;
        return Ok((by_symbol, FoundBy::Symbols));
    }
    let scanned = by_scan(&elf, bytes);
    disjoint(&scanned)?;
    Ok((scanned, FoundBy::Scan))
}

/// A build lays its texts side by side; texts that overlap (symbols that
/// say so, read-only sections over the same bytes) name a damaged file,
/// whose texts no edit can be trusted on: each is fixed on its own, and
/// one fixed over another would leave neither whole.
fn disjoint(texts: &[Text]) -> Result<()> {
    let mut by_start: Vec<&Text> = texts.iter().collect();
    by_start.sort_by_key(|t| t.range.start);
    match by_start
        .windows(2)
        .find(|w| w[0].range.end > w[1].range.start)
    {
        Some(w) => Err(anyhow!(
            "{} and {} overlap in the file (damaged)",
            w[0].name,
            w[1].name
        )),
        None => Ok(()),
    }
}

/// The file range of `len` bytes at virtual address `addr`, when a
/// section with file contents holds all of it.
/// Every sum is checked: a damaged or hostile header's offsets can be
/// anything (`cargo xtask fuzz --target pull` found one that overflowed).
fn file_range(sections: &[SectionHeader], addr: u64, len: u64) -> Option<Range<usize>> {
    sections.iter().find_map(|sh| {
        let inside = sh.sh_type != SHT_NOBITS
            && addr >= sh.sh_addr
            && addr.checked_add(len)? <= sh.sh_addr.checked_add(sh.sh_size)?;
        inside.then(|| {
            let start = usize::try_from(sh.sh_offset.checked_add(addr - sh.sh_addr)?).ok()?;
            Some(start..start.checked_add(usize::try_from(len).ok()?)?)
        })?
    })
}

fn by_symbols(elf: &goblin::elf::Elf, bytes: &[u8]) -> Result<Vec<Text>> {
    let mut arrays = std::collections::BTreeMap::new();
    let mut sizes = std::collections::BTreeMap::new();
    for sym in elf.dynsyms.iter() {
        let Some(name) = elf.dynstrtab.get_at(sym.st_name) else {
            continue;
        };
        if !name.starts_with(PREFIX) || sym.st_shndx == 0 {
            continue;
        }
        match name.strip_suffix("_SIZE") {
            Some(base) => sizes.insert(base.to_owned(), sym.st_value),
            None => arrays.insert(name.to_owned(), sym.st_value),
        };
    }
    let mut texts = Vec::new();
    for (name, addr) in arrays {
        let Some(size_addr) = sizes.get(&name) else {
            continue;
        };
        let size = file_range(&elf.section_headers, *size_addr, 8)
            .and_then(|r| bytes.get(r))
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| anyhow!("{name}_SIZE is not in the file"))?;
        // The text and its NUL.
        let range = file_range(&elf.section_headers, addr, size.saturating_add(1))
            .filter(|r| bytes.get(r.end - 1) == Some(&0))
            .ok_or_else(|| {
                anyhow!("{name} is not {size} bytes and a NUL inside one section of the file (truncated or damaged)")
            })?;
        texts.push(Text {
            name,
            range: range.start..range.end - 1,
        });
    }
    Ok(texts)
}

/// Hidden texts: the NUL-delimited strings of the read-only data that
/// mention an `MIO_BN_GFX` family; only those can need the fix.
fn by_scan(elf: &goblin::elf::Elf, bytes: &[u8]) -> Vec<Text> {
    let mut texts: Vec<Text> = Vec::new();
    for section in crate::elf::read_only_data(elf) {
        let Some(data) = bytes.get(section.clone()) else {
            continue;
        };
        for hit in memchr::memmem::find_iter(data, b"MIO_BN_GFX") {
            let start = memchr::memrchr(0, &data[..hit]).map_or(0, |n| n + 1);
            let end = memchr::memchr(0, &data[hit..]).map_or(data.len(), |n| hit + n);
            let range = section.start + start..section.start + end;
            if texts.last().is_none_or(|t| t.range != range) {
                texts.push(Text {
                    name: format!("text at 0x{:x}", range.start),
                    range,
                });
            }
        }
    }
    texts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A section whose file offset is near the top of the address space
    /// holds no text: no range, no overflow.
    #[test]
    fn a_section_at_an_absurd_offset_gives_no_range() {
        let sh = SectionHeader {
            sh_type: goblin::elf::section_header::SHT_PROGBITS,
            sh_addr: 0x1000,
            sh_size: 0x100,
            sh_offset: u64::MAX - 8,
            ..Default::default()
        };
        assert_eq!(file_range(std::slice::from_ref(&sh), 0x1010, 8), None);
        let fine = SectionHeader {
            sh_offset: 0x2000,
            ..sh
        };
        assert_eq!(file_range(&[fine], 0x1010, 8), Some(0x2010..0x2018));
    }

    /// Overlapping ranges (a hostile file's symbols) are judged without a
    /// panic: a change inside their union is confined, one past it is not.
    #[test]
    fn overlapping_ranges_are_judged_without_a_panic() {
        let before = vec![0u8; 64];
        let mut after = before.clone();
        after[20] = 1;
        let ranges = [10..30, 15..25];
        assert!(prove_confined(&before, &after, &ranges).is_ok());
        after[40] = 1;
        let err = prove_confined(&before, &after, &ranges).unwrap_err();
        assert_eq!(
            err.to_string(),
            "byte 0x28 changed outside every kernel text; nothing was written"
        );
    }

    /// Texts that overlap (read-only sections over the same bytes, found
    /// twice by the search) are a damaged file: each would be fixed on
    /// its own, and one written over the other.
    #[test]
    fn overlapping_texts_are_refused() {
        let t = |name: &str, range: Range<usize>| Text {
            name: name.into(),
            range,
        };
        assert!(disjoint(&[t("a", 0..10), t("b", 10..20)]).is_ok());
        let err = disjoint(&[t("b", 50..60), t("a", 40..60)]).unwrap_err();
        assert_eq!(err.to_string(), "a and b overlap in the file (damaged)");
    }
}
