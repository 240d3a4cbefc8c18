//! What an ELF shared library says about itself: machine, SONAME, NEEDED,
//! RUNPATH, GNU build-id, and whether its read-only data holds given strings.

use std::path::Path;

use anyhow::{Context, Result, bail};
use goblin::elf::header::{EM_X86_64, ET_DYN, machine_to_str};
use goblin::elf::note::NT_GNU_BUILD_ID;
use goblin::elf::section_header::{SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE, SHT_NOBITS};

use crate::checksum;

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
    crate::fsutil::open_regular(path)?
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
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
