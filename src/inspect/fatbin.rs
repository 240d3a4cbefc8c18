//! Which GPUs a library carries code for: the clang offload bundles in its
//! `.hip_fatbin` section, whose entries are named like
//! `hipv4-amdgcn-amd-amdhsa--gfx1030`. A torch whose libtorch_hip.so has no
//! gfx101x entry cannot run on an RDNA1 card without
//! HSA_OVERRIDE_GFX_VERSION; one that has it must run without.

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
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
    let file = crate::fsutil::open_regular(path)?;
    let at = |offset: u64, len: usize| -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, offset)
            .with_context(|| format!("{} is cut short", path.display()))?;
        Ok(buf)
    };
    let header_bytes = at(0, 64)?;
    let header = goblin::elf::Elf::parse_header(&header_bytes)
        .map_err(|e| anyhow::anyhow!("{} is not an ELF file: {e}", path.display()))?;
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
    let table = at(
        header.e_shoff,
        usize::from(header.e_shnum) * usize::from(header.e_shentsize),
    )?;
    let sections = SectionHeader::parse_from(&table, 0, usize::from(header.e_shnum), ctx)
        .map_err(|e| anyhow::anyhow!("{}: bad section headers: {e}", path.display()))?;
    let Some(names) = sections.get(usize::from(header.e_shstrndx)) else {
        bail!("{} has no section names", path.display());
    };
    let names = at(names.sh_offset, names.sh_size as usize)?;
    let name_of = |s: &SectionHeader| {
        let start = s.sh_name;
        names
            .get(start..)
            .and_then(|n| n.split(|b| *b == 0).next())
            .unwrap_or_default()
    };
    let Some(fatbin) = sections.iter().find(|s| name_of(s) == b".hip_fatbin") else {
        return Ok(None);
    };
    let bytes = at(fatbin.sh_offset, fatbin.sh_size as usize)?;
    Ok(Some(parse(&bytes)))
}

/// Every bundle in a `.hip_fatbin` section: one per translation unit, each
/// aligned, back to back.
pub fn parse(section: &[u8]) -> CodeObjects {
    let mut out = CodeObjects::default();
    let finder = memchr::memmem::Finder::new(BUNDLE_MAGIC);
    for start in finder.find_iter(section) {
        for triple in bundle_triples(&section[start..]) {
            if let Some(arch) = triple
                .rsplit("--")
                .next()
                .filter(|_| triple.contains("amdgcn"))
            {
                let arch = arch.split(':').next().unwrap_or(arch);
                out.archs.insert(arch.to_owned());
            }
        }
    }
    out.compressed = memchr::memmem::find_iter(section, COMPRESSED_MAGIC).count();
    out
}

/// The entry names of one uncompressed bundle: after the magic, a u64 count,
/// then per entry u64 offset, u64 size, u64 name length and the name.
fn bundle_triples(bundle: &[u8]) -> Vec<String> {
    let u64_at = |pos: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            bundle.get(pos..pos + 8)?.try_into().ok()?,
        ))
    };
    let mut pos = BUNDLE_MAGIC.len();
    let Some(count) = u64_at(pos) else {
        return Vec::new();
    };
    pos += 8;
    let mut out = Vec::new();
    for _ in 0..count.min(4096) {
        let (Some(_offset), Some(_size), Some(len)) =
            (u64_at(pos), u64_at(pos + 8), u64_at(pos + 16))
        else {
            break;
        };
        pos += 24;
        let Some(name) = bundle.get(pos..pos.saturating_add(len as usize)) else {
            break;
        };
        pos += len as usize;
        out.push(String::from_utf8_lossy(name).into_owned());
    }
    out
}

/// What to do about HSA_OVERRIDE_GFX_VERSION, given the code objects of
/// torch's libtorch_hip.so (`None`: not known) and the cards in the KFD
/// topology.
pub struct Advice {
    /// Nothing to change.
    pub fine: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// It is needed exactly when torch has no code for the card: with a
/// pytorch.org ROCm wheel (no gfx101x) it must stay set, and MIOpen then sees
/// gfx1030; with a torch built for gfx101x it must go.
pub fn override_advice(
    code: Option<&CodeObjects>,
    value: Option<&str>,
    cards: &[String],
) -> Advice {
    let cards = if cards.is_empty() {
        "unknown".to_owned()
    } else {
        cards.join(", ")
    };
    let reports = |v: &str| {
        crate::inspect::gpu::override_gfx(v).unwrap_or_else(|| "an unreadable value".into())
    };
    let inert = "MIOpen then sees gfx1030: the batch-norm patch (0004) changes nothing, while the fast-find patch (0003) still acts, since its detection reads the real chip from the KFD topology";
    match (value, code.map(CodeObjects::has_gfx101x)) {
        (Some(v), Some(false)) => Advice {
            fine: true,
            detail: format!(
                "HSA_OVERRIDE_GFX_VERSION={v} (ROCm reports {}, the card is {cards}): required, torch has no gfx101x code. {inert}",
                reports(v)
            ),
            fix: None,
        },
        (Some(v), Some(true)) => Advice {
            fine: false,
            detail: format!(
                "HSA_OVERRIDE_GFX_VERSION={v} makes ROCm report {} and load code built for that chip, but torch carries gfx101x code of its own",
                reports(v)
            ),
            fix: Some("unset HSA_OVERRIDE_GFX_VERSION: with this torch, MIOpen sees the real gfx101x and every patch acts".into()),
        },
        (Some(v), None) => Advice {
            fine: false,
            detail: format!(
                "HSA_OVERRIDE_GFX_VERSION={v}: ROCm reports {} while the card is {cards}; whether your torch needs it depends on the GPU code it carries",
                reports(v)
            ),
            fix: Some("run `rdna1-patch doctor --python PATH` with the python of your torch to find out".into()),
        },
        (None, Some(false)) => Advice {
            fine: false,
            detail: "HSA_OVERRIDE_GFX_VERSION is not set, and torch has no gfx101x code: on an RDNA1 card its GPU operators will not load".into(),
            fix: Some(format!(
                "export HSA_OVERRIDE_GFX_VERSION=10.3.0 ({inert}); or install a torch built for gfx101x (TheRock's `pip install \"torch[device-gfx1010]\"`), which needs no override"
            )),
        },
        (None, _) => Advice {
            fine: true,
            detail: "HSA_OVERRIDE_GFX_VERSION is not set".into(),
            fix: None,
        },
    }
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
}
