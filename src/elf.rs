//! What an ELF shared library says about itself: machine, SONAME, NEEDED,
//! RUNPATH, GNU build-id, and whether its read-only data holds given strings;
//! and [`read_dynamic`], what the dynamic loader reads of a file to load it.
//! The files are hostile input: `cargo xtask fuzz` runs these readers.

use std::path::Path;

use anyhow::{Context, Result, bail};
use goblin::container::Ctx;
use goblin::elf::dynamic::{DF_1_NODEFLIB, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME, Dynamic};
use goblin::elf::header::{EM_X86_64, ET_DYN, machine_to_str};
use goblin::elf::note::NT_GNU_BUILD_ID;
use goblin::elf::program_header::{PT_DYNAMIC, ProgramHeader};
use goblin::elf::section_header::{SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE, SHT_NOBITS};

use crate::checksum;
use crate::fsutil::At;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    pub machine: String,
    pub x86_64: bool,
    pub shared: bool,
    pub soname: Option<String>,
    pub needed: Vec<String>,
    pub runpath: Vec<String>,
    pub rpath: Vec<String>,
    /// Hex; it names the linked code, so it survives a patchelf relink.
    pub build_id: Option<String>,
}

/// Read and parse `path`. The whole file is read: goblin parses from memory,
/// and the libraries here are read at most once per command.
pub fn read(path: &Path) -> Result<Library> {
    let bytes = read_file(path)?;
    parse(&bytes).with_context(|| format!("{} is not a usable ELF library", path.display()))
}

/// A library's whole bytes; a FIFO or a device where a library should be
/// fails, not blocks.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    crate::tally::read(path);
    crate::fsutil::open_regular(path)?
        .read_to_end(&mut bytes)
        .at("read", path)?;
    Ok(bytes)
}

pub fn parse(bytes: &[u8]) -> Result<Library> {
    let elf = goblin::elf::Elf::parse(bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let build_id = elf
        .iter_note_sections(bytes, Some(".note.gnu.build-id"))
        .into_iter()
        .flatten()
        .filter_map(|n| n.ok())
        .find(|n| n.n_type == NT_GNU_BUILD_ID && n.name == "GNU")
        .map(|n| checksum::hex(n.desc));
    let split = |v: &[&str]| -> Vec<String> {
        v.iter()
            .flat_map(|s| s.split(':'))
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    Ok(Library {
        machine: machine_to_str(elf.header.e_machine).to_owned(),
        x86_64: elf.header.e_machine == EM_X86_64 && elf.is_64,
        shared: elf.header.e_type == ET_DYN && elf.dynamic.is_some(),
        soname: elf.soname.map(str::to_owned),
        needed: elf.libraries.iter().map(|s| s.to_string()).collect(),
        runpath: split(&elf.runpaths),
        rpath: split(&elf.rpaths),
        build_id,
    })
}

/// The SHA-256 of the code a compile gave: of each GPU code object's
/// allocated sections (their names and bytes), leaving out the symbol,
/// string and hash tables, the dynamic section and the notes. A HIP
/// compile names a variable after a hash of its input text
/// (`__hip_cuid_<hash>`), so an edit of a comment changes that name and
/// nothing the GPU runs. Each code object of an offload bundle is taken;
/// bytes that are no ELF are hashed whole.
/// The code objects of a compile's answer: the ELF itself, or each
/// non-empty entry of an offload bundle.
fn code_objects(object: &[u8]) -> Vec<&[u8]> {
    let bundled = crate::fatbin::entries(object);
    match bundled.is_empty() {
        true => vec![object],
        false => bundled
            .into_iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(_, b)| b)
            .collect(),
    }
}

/// What `object` is when it is not an AMD GPU code object (an ELF for
/// EM_AMDGPU, or an offload bundle of such): "64 bytes of no ELF", say.
/// None for a code object.
pub fn not_code_object(object: &[u8]) -> Option<String> {
    const EM_AMDGPU: u16 = 224;
    let objects = code_objects(object);
    if objects.is_empty() {
        return Some("an offload bundle with no code object in it".to_owned());
    }
    objects
        .into_iter()
        .find_map(|o| match goblin::elf::Elf::parse_header(o) {
            Ok(h) if h.e_machine == EM_AMDGPU => None,
            Ok(h) => Some(format!("an ELF file for machine {}", h.e_machine)),
            Err(_) => Some(format!("{} bytes that are no ELF file", o.len())),
        })
}

pub fn code_digest(object: &[u8]) -> String {
    use goblin::elf::section_header::{
        SHF_ALLOC, SHT_DYNAMIC, SHT_DYNSYM, SHT_GNU_HASH, SHT_HASH, SHT_NOTE, SHT_STRTAB,
        SHT_SYMTAB,
    };
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let objects = code_objects(object);
    for o in objects {
        let Ok(elf) = goblin::elf::Elf::parse(o) else {
            h.update(o);
            continue;
        };
        for sh in &elf.section_headers {
            let skip = [
                SHT_DYNSYM,
                SHT_SYMTAB,
                SHT_STRTAB,
                SHT_HASH,
                SHT_GNU_HASH,
                SHT_DYNAMIC,
                SHT_NOTE,
            ];
            if sh.sh_flags & u64::from(SHF_ALLOC) == 0 || skip.contains(&sh.sh_type) {
                continue;
            }
            h.update(elf.shdr_strtab.get_at(sh.sh_name).unwrap_or("").as_bytes());
            if let Some(bytes) = sh.file_range().and_then(|r| o.get(r)) {
                h.update(bytes);
            }
        }
    }
    checksum::hex(&h.finalize())
}

/// Whether the library in `bytes` defines the dynamic symbol `name`.
pub fn exports(bytes: &[u8], name: &str) -> Result<bool> {
    let elf = goblin::elf::Elf::parse(bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(elf
        .dynsyms
        .iter()
        .any(|s| s.st_shndx != 0 && elf.dynstrtab.get_at(s.st_name) == Some(name)))
}

impl Library {
    /// Refuse anything but an x86-64 shared object named `soname`.
    pub fn check_shared_object(&self, path: &Path, soname: &str) -> Result<()> {
        if !self.x86_64 {
            bail!(
                "{} is built for {}, not x86-64",
                path.display(),
                self.machine
            );
        }
        if !self.shared {
            bail!("{} is not a shared library", path.display());
        }
        if self.soname.as_deref() != Some(soname) {
            bail!(
                "{} has SONAME {}, expected {soname}",
                path.display(),
                self.soname.as_deref().unwrap_or("(none)")
            );
        }
        Ok(())
    }
}

/// ELF class, byte order and machine.
pub type Kind = (u8, u8, u16);

/// What the dynamic loader reads of a file to load it, and nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loadable {
    /// The loader passes over a file of another kind and searches on.
    pub kind: Kind,
    pub soname: Option<String>,
    pub needed: Vec<String>,
    /// DT_RUNPATH as written ($ORIGIN unexpanded).
    pub runpath: Option<String>,
    /// DT_RPATH, None when a DT_RUNPATH is there too (the loader then
    /// ignores it).
    pub rpath: Option<String>,
    /// DF_1_NODEFLIB: what it needs is not looked for in ld.so.cache or
    /// the default directories.
    pub nodeflib: bool,
}

/// The most of the program headers, and of the dynamic segment, read: a
/// real one is under a few KB; a header that claims more is refused
/// before anything is allocated for it.
const DYNAMIC_CAP: u64 = 1 << 20;
/// The longest name or path read from the string table (PATH_MAX).
const NAME_CAP: u64 = 4096;

/// [`Loadable`] of `path`, read as the loader reads it: the ELF header,
/// the program headers, the dynamic segment and the strings it names. No
/// section header, no symbol: a gigabyte library costs a few small reads.
pub fn read_dynamic(path: &Path) -> Result<Loadable> {
    use std::os::unix::fs::FileExt;
    let file = crate::fsutil::open_regular(path)?;
    let len = file.metadata().at("read", path)?.len();
    dynamic_from(&|buf, offset| file.read_exact_at(buf, offset), len)
        .with_context(|| format!("{} is not a loadable ELF file", path.display()))
}

type ReadAt<'a> = &'a dyn Fn(&mut [u8], u64) -> std::io::Result<()>;

/// `size` bytes at `offset` of a file of `len`, checked against its end
/// and [`DYNAMIC_CAP`] before anything is allocated.
fn bounded(read_at: ReadAt, len: u64, what: &str, offset: u64, size: u64) -> Result<Vec<u8>> {
    if offset.checked_add(size).is_none_or(|end| end > len) {
        bail!(
            "its {what} ({size} bytes at offset {offset}) lies past the end of the file ({len} bytes)"
        );
    }
    if size > DYNAMIC_CAP {
        bail!("its {what} is {size} bytes, more than any real one");
    }
    let mut buf = vec![0u8; usize::try_from(size)?];
    read_at(&mut buf, offset).with_context(|| format!("cannot read its {what}"))?;
    Ok(buf)
}

/// The ELF header's kind (class, byte order, machine), the context to
/// parse the rest with, and the program headers.
fn program_headers(read_at: ReadAt, len: u64) -> Result<(Kind, Ctx, Vec<ProgramHeader>)> {
    let header = bounded(read_at, len, "ELF header", 0, len.min(64))?;
    if !header.starts_with(b"\x7fELF") {
        bail!("not an ELF file");
    }
    let (header, ctx) = crate::fatbin::elf_header(&header)?;
    let entry = ProgramHeader::size(ctx);
    if header.e_phnum > 0 && usize::from(header.e_phentsize) != entry {
        bail!(
            "its program headers are {} bytes each, not {entry}",
            header.e_phentsize
        );
    }
    let table = bounded(
        read_at,
        len,
        "program header table",
        header.e_phoff,
        u64::from(header.e_phnum) * entry as u64,
    )?;
    let phdrs = ProgramHeader::parse(&table, 0, usize::from(header.e_phnum), ctx)
        .map_err(|e| anyhow::anyhow!("bad program headers: {e}"))?;
    let kind = (header.e_ident[4], header.e_ident[5], header.e_machine);
    Ok((kind, ctx, phdrs))
}

/// [`read_dynamic`] on an open file of `len` bytes. Every offset and size
/// the file states is checked against `len` and the caps before a byte is
/// allocated for it.
pub fn dynamic_from(read_at: ReadAt, len: u64) -> Result<Loadable> {
    let (kind, ctx, mut phdrs) = program_headers(read_at, len)?;
    let Some(dynamic) = phdrs.iter_mut().find(|p| p.p_type == PT_DYNAMIC) else {
        bail!("it has no dynamic segment");
    };
    let bytes = bounded(
        read_at,
        len,
        "dynamic segment",
        dynamic.p_offset,
        dynamic.p_filesz,
    )?;
    // The segment is parsed from its own bytes; the loads still map the
    // string table's address to its offset in the file.
    dynamic.p_offset = 0;
    let Some(dynamic) = Dynamic::parse(&bytes, &phdrs, ctx)
        .map_err(|e| anyhow::anyhow!("bad dynamic segment: {e}"))?
    else {
        bail!("it has no dynamic segment");
    };
    let (strtab, strsz) = (dynamic.info.strtab as u64, dynamic.info.strsz as u64);
    let string = |offset: u64| -> Result<String> {
        // goblin maps an address no load holds to 0, the ELF header.
        if strtab == 0 || offset >= strsz {
            bail!("a name lies outside its string table");
        }
        let start = strtab.saturating_add(offset);
        let size = (strsz - offset)
            .min(NAME_CAP)
            .min(len.saturating_sub(start));
        let bytes = bounded(read_at, len, "string table", start, size)?;
        let Some(end) = bytes.iter().position(|b| *b == 0) else {
            bail!("a name in its string table is longer than {NAME_CAP} bytes or unterminated");
        };
        Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    };
    let mut out = Loadable {
        kind,
        soname: None,
        needed: Vec::new(),
        runpath: None,
        rpath: None,
        nodeflib: dynamic.info.flags_1 & DF_1_NODEFLIB != 0,
    };
    for d in &dynamic.dyns {
        match d.d_tag {
            DT_NEEDED => out.needed.push(string(d.d_val)?),
            DT_SONAME => out.soname = Some(string(d.d_val)?),
            DT_RUNPATH => out.runpath = Some(string(d.d_val)?),
            DT_RPATH => out.rpath = Some(string(d.d_val)?),
            _ => {}
        }
    }
    if out.runpath.is_some() {
        out.rpath = None;
    }
    Ok(out)
}

/// For each of `markers`, whether it occurs in the file's allocated,
/// read-only, non-code sections (.rodata and friends), where a C string
/// literal ends up. Takes the file's bytes, so a caller that also parses
/// the library reads it once.
pub fn find_markers(bytes: &[u8], markers: &[&str]) -> Result<Vec<bool>> {
    let elf =
        goblin::elf::Elf::parse(bytes).map_err(|e| anyhow::anyhow!("not an ELF file: {e}"))?;
    let mut found = vec![false; markers.len()];
    for range in read_only_data(&elf) {
        let Some(data) = bytes.get(range) else {
            continue;
        };
        for (hit, marker) in found.iter_mut().zip(markers) {
            *hit = *hit || memfind(data, marker.as_bytes());
        }
    }
    Ok(found)
}

/// The file ranges of the allocated, read-only, non-code sections.
pub fn read_only_data(elf: &goblin::elf::Elf) -> Vec<std::ops::Range<usize>> {
    elf.section_headers
        .iter()
        .filter(|sh| {
            let flags = sh.sh_flags as u32;
            sh.sh_type != SHT_NOBITS
                && flags & SHF_ALLOC != 0
                && flags & (SHF_EXECINSTR | SHF_WRITE) == 0
        })
        .filter_map(|sh| sh.file_range())
        .collect()
}

fn memfind(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && memchr::memmem::find(haystack, needle).is_some()
}

/// The part of a library file name before ".so": the name a bundled copy
/// keeps when a wheel renames it (libamdhip64.so.6 -> libamdhip64).
pub fn stem(name: &str) -> &str {
    name.find(".so").map_or(name, |i| &name[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems() {
        assert_eq!(stem("libamdhip64.so.6"), "libamdhip64");
        assert_eq!(stem("libamdhip64.so"), "libamdhip64");
        assert_eq!(stem("libMIOpen.so.1.0.0"), "libMIOpen");
        assert_eq!(stem("ld-linux"), "ld-linux");
    }

    #[test]
    fn a_text_file_is_not_elf() {
        assert!(parse(b"#!/bin/sh\necho hi\n").is_err());
    }

    #[test]
    fn a_fifo_where_a_library_should_be_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libMIOpen.so");
        crate::fsutil::mkfifo(&fifo);
        let err = read(&fifo).unwrap_err().to_string();
        assert!(err.ends_with("is a FIFO, not a regular file"), "{err}");
    }
}
