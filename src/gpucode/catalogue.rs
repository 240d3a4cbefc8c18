//! A Tensile directory's catalogues, read: which catalogue rocBLAS opens
//! for a card (the order of its tensile_host.cpp: `TensileLibrary_lazy_
//! gfxNNNN`, `TensileLibrary_gfxNNNN`, `TensileLibrary`), and the files it
//! names. A lazy catalogue names placeholder libraries
//! (`{type: Placeholder, value: PREFIX}`); rocBLAS then opens `PREFIX.dat`
//! and, by Tensile's PlaceholderLibrary, the code object
//! `PREFIX_gfxNNNN.hsaco` (source kernels of a fallback library),
//! `PREFIX.hsaco` (other source kernels) or `PREFIX.co` (assembly
//! kernels). A catalogue that is not lazy names no file: rocBLAS loads
//! every `*gfxNNNN*co` of the directory. Catalogues are MessagePack
//! (`.dat`, rocBLAS's default); YAML ones are not read here.

use std::path::Path;

use anyhow::{Result, anyhow, bail};

/// A catalogue is at most a few MB (rocBLAS 6.4's largest: 9 MB).
const CATALOGUE_LIMIT: u64 = 256 << 20;

/// What a card's catalogue asks of its directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardCatalogue {
    /// The catalogue rocBLAS would open for the card: None when there is
    /// none (rocBLAS aborts: "Cannot read .../TensileLibrary.dat").
    pub catalogue: Option<String>,
    /// Files it names (directly, or through its placeholders' catalogues)
    /// that are not in the directory: (named by, file).
    pub missing: Vec<(String, String)>,
    /// Files it names that are there.
    pub present: usize,
}

/// Read the card's catalogue in `dir` and every file it names.
pub fn for_card(dir: &Path, card: &str) -> Result<CardCatalogue> {
    let mut out = CardCatalogue::default();
    let candidates = [
        (format!("TensileLibrary_lazy_{card}"), true),
        (format!("TensileLibrary_{card}"), false),
        ("TensileLibrary".to_owned(), false),
    ];
    let found = candidates.iter().find_map(|(stem, lazy)| {
        [".dat", ".yaml"]
            .iter()
            .map(|ext| format!("{stem}{ext}"))
            .find(|name| dir.join(name).is_file())
            .map(|name| (name, *lazy))
    });
    let Some((name, lazy)) = found else {
        return Ok(out);
    };
    out.catalogue = Some(name.clone());
    let top = read(&dir.join(&name))?;
    if !lazy {
        let code = std::fs::read_dir(dir)?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(card) && n.ends_with("co"))
            .count();
        if code == 0 {
            out.missing
                .push((name, format!("a code object named for {card} (*{card}*co)")));
        } else {
            out.present += code;
        }
        return Ok(out);
    }
    let mut prefixes = top.placeholders.clone();
    prefixes.sort();
    prefixes.dedup();
    for prefix in prefixes {
        if prefix.contains('/') || prefix.starts_with('.') || prefix.chars().any(char::is_control) {
            bail!(
                "{name} names the library `{}`, which is not a file name",
                super::shown(&prefix)
            );
        }
        let inner = format!("{prefix}.dat");
        let need = |file: String, by: &str, out: &mut CardCatalogue| {
            if dir.join(&file).is_file() {
                out.present += 1;
            } else {
                out.missing.push((by.to_owned(), file));
            }
        };
        if !dir.join(&inner).is_file() {
            need(inner, &name, &mut out);
            continue;
        }
        out.present += 1;
        let lib = read(&dir.join(&inner))?;
        let (source, assembly) = (lib.source, lib.assembly);
        if source {
            let file = if prefix.contains("fallback") {
                format!("{prefix}_{card}.hsaco")
            } else {
                format!("{prefix}.hsaco")
            };
            need(file, &inner, &mut out);
        }
        if assembly {
            need(format!("{prefix}.co"), &inner, &mut out);
        }
    }
    Ok(out)
}

/// What the tool needs of a catalogue, read as it streams by (issue 69:
/// a tree of every value took 33 times the file's size, 2.1 GiB for a
/// 64 MiB file of nils): its placeholders' file prefixes, and whether its
/// solutions have source kernels, assembly kernels. Nothing else is kept,
/// so reading one takes the file's bytes and the names it holds, at most
/// twice its size.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Catalogue {
    pub placeholders: Vec<String>,
    pub source: bool,
    pub assembly: bool,
}

/// A value as its parent needs it.
enum Seen {
    Str(String),
    Bool(bool),
    /// A map, and its `sourceKernel` when it has a boolean one.
    Map(Option<bool>),
    Other,
}

/// Where a value sits: a map's key (nothing in it is collected, as a
/// tree's walk never looked into keys), the top map's `solutions`, or
/// anywhere else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Key,
    Solutions,
    Plain,
}

/// Read a catalogue file.
pub fn read(path: &Path) -> Result<Catalogue> {
    let name = super::shown(&path.file_name().unwrap_or_default().to_string_lossy());
    if !name.ends_with(".dat") {
        bail!(
            "{name} is not MessagePack (.dat): this version reads only rocBLAS's default catalogue format (Tensile_LIBRARY_FORMAT=msgpack)"
        );
    }
    let file = crate::fsutil::open_regular(path)?;
    let len = file.metadata()?.len();
    if len > CATALOGUE_LIMIT {
        bail!("{name} is {len} bytes, over {CATALOGUE_LIMIT}: not a catalogue");
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len)?);
    std::io::Read::read_to_end(&mut &file, &mut bytes)?;
    parse(&bytes).map_err(|e| anyhow!("{name} is not a readable catalogue: {e}"))
}

/// [`read`] of the bytes themselves.
pub fn parse(bytes: &[u8]) -> Result<Catalogue> {
    let mut r = Reader { bytes, at: 0 };
    let mut out = Catalogue::default();
    r.value(0, Role::Plain, true, &mut out)?;
    if r.at != bytes.len() {
        bail!("{} bytes after its end", bytes.len() - r.at);
    }
    Ok(out)
}

/// Nesting deeper than this is refused (Tensile's trees are tens deep).
const MAX_DEPTH: usize = 256;

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| anyhow!("it ends inside a value at byte {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn len(&mut self, n: usize) -> Result<usize> {
        Ok(usize::try_from(self.uint(n)?)?)
    }

    /// The next value, what `out` needs of it noted (when `top`, it is
    /// the whole catalogue's map).
    fn value(&mut self, depth: usize, role: Role, top: bool, out: &mut Catalogue) -> Result<Seen> {
        if depth > MAX_DEPTH {
            bail!("values nested over {MAX_DEPTH} deep");
        }
        let b = self.take(1)?[0];
        Ok(match b {
            0x80..=0x8f => self.map(usize::from(b & 0x0f), depth, role, top, out)?,
            0x90..=0x9f => self.array(usize::from(b & 0x0f), depth, role, out)?,
            0xa0..=0xbf => self.str(usize::from(b & 0x1f))?,
            0xc2 => Seen::Bool(false),
            0xc3 => Seen::Bool(true),
            0xc4..=0xc6 => {
                let n = self.len(1 << (b - 0xc4))?;
                self.take(n)?;
                Seen::Other
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (b - 0xc7))?;
                self.take(1 + n)?;
                Seen::Other
            }
            0xca => self.take(4).map(|_| Seen::Other)?,
            0xcb => self.take(8).map(|_| Seen::Other)?,
            0xcc..=0xcf => self.take(1 << (b - 0xcc)).map(|_| Seen::Other)?,
            0xd0..=0xd3 => self.take(1 << (b - 0xd0)).map(|_| Seen::Other)?,
            0xd4..=0xd8 => self.take(1 + (1 << (b - 0xd4))).map(|_| Seen::Other)?,
            0xd9..=0xdb => {
                let n = self.len(1 << (b - 0xd9))?;
                self.str(n)?
            }
            0xdc | 0xdd => {
                let n = self.len(if b == 0xdc { 2 } else { 4 })?;
                self.array(n, depth, role, out)?
            }
            0xde | 0xdf => {
                let n = self.len(if b == 0xde { 2 } else { 4 })?;
                self.map(n, depth, role, top, out)?
            }
            0xc1 => bail!("byte 0xc1 (never used) at {}", self.at - 1),
            // Fixints and nil.
            _ => Seen::Other,
        })
    }

    fn str(&mut self, n: usize) -> Result<Seen> {
        let at = self.at;
        let s = self.take(n)?;
        Ok(Seen::Str(
            std::str::from_utf8(s)
                .map_err(|_| anyhow!("a string at byte {at} is not UTF-8"))?
                .to_owned(),
        ))
    }

    fn array(&mut self, n: usize, depth: usize, role: Role, out: &mut Catalogue) -> Result<Seen> {
        // Each element is at least a byte: a count beyond what is left is a lie.
        if n > self.bytes.len() - self.at {
            bail!(
                "an array of {n} at byte {} is longer than the file",
                self.at
            );
        }
        let inner = match role {
            Role::Key => Role::Key,
            _ => Role::Plain,
        };
        for _ in 0..n {
            let item = self.value(depth + 1, inner, false, out)?;
            // The top map's solutions: each one's kind of kernel.
            if role == Role::Solutions
                && let Seen::Map(Some(source)) = item
            {
                match source {
                    true => out.source = true,
                    false => out.assembly = true,
                }
            }
        }
        Ok(Seen::Other)
    }

    fn map(
        &mut self,
        n: usize,
        depth: usize,
        role: Role,
        top: bool,
        out: &mut Catalogue,
    ) -> Result<Seen> {
        if n.saturating_mul(2) > self.bytes.len() - self.at {
            bail!("a map of {n} at byte {} is longer than the file", self.at);
        }
        let inner = match role {
            Role::Key => Role::Key,
            _ => Role::Plain,
        };
        // A key's first value counts, as a lookup in the map would find it.
        let (mut kind, mut value, mut source, mut solutions) = (None, None, None, false);
        for _ in 0..n {
            let key = match self.value(depth + 1, Role::Key, false, out)? {
                Seen::Str(k) => Some(k),
                _ => None,
            };
            let role = match key.as_deref() {
                Some("solutions") if top && !solutions && inner == Role::Plain => {
                    solutions = true;
                    Role::Solutions
                }
                _ => inner,
            };
            let v = self.value(depth + 1, role, false, out)?;
            match (key.as_deref(), v) {
                (Some("type"), v) if kind.is_none() => {
                    kind = Some(matches!(v, Seen::Str(s) if s == "Placeholder"))
                }
                (Some("value"), v) if value.is_none() => {
                    value = Some(match v {
                        Seen::Str(s) => Some(s),
                        _ => None,
                    })
                }
                (Some("sourceKernel"), v) if source.is_none() => {
                    source = Some(match v {
                        Seen::Bool(b) => Some(b),
                        _ => None,
                    })
                }
                _ => {}
            }
        }
        if inner == Role::Plain
            && kind == Some(true)
            && let Some(Some(prefix)) = value
        {
            out.placeholders.push(prefix);
        }
        Ok(Seen::Map(source.flatten()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_msgpack_writes() {
        // {"type": "Placeholder", "value": "P", "n": -2, "x": [true, 300]}
        let bytes = [
            0x84, 0xa4, b't', b'y', b'p', b'e', 0xab, b'P', b'l', b'a', b'c', b'e', b'h', b'o',
            b'l', b'd', b'e', b'r', 0xa5, b'v', b'a', b'l', b'u', b'e', 0xa1, b'P', 0xa1, b'n',
            0xfe, 0xa1, b'x', 0x92, 0xc3, 0xcd, 0x01, 0x2c,
        ];
        let c = parse(&bytes).unwrap();
        assert_eq!(c.placeholders, ["P"]);
        assert!(!c.source && !c.assembly);
    }

    #[test]
    fn the_top_maps_solutions_say_their_kernels() {
        // {"solutions": [{"sourceKernel": true}, {"sourceKernel": false}],
        //  {"type": "Placeholder", "value": "K"}: 1}: a key's placeholder
        // is not one.
        let mut bytes = vec![0x82, 0xa9];
        bytes.extend(b"solutions");
        bytes.extend([0x92, 0x81, 0xac]);
        bytes.extend(b"sourceKernel");
        bytes.extend([0xc3, 0x81, 0xac]);
        bytes.extend(b"sourceKernel");
        bytes.extend([0xc2, 0x82, 0xa4]);
        bytes.extend(b"type");
        bytes.push(0xab);
        bytes.extend(b"Placeholder");
        bytes.push(0xa5);
        bytes.extend(b"value");
        bytes.extend([0xa1, b'K', 0x01]);
        let c = parse(&bytes).unwrap();
        assert!(c.source && c.assembly);
        assert!(c.placeholders.is_empty(), "{:?}", c.placeholders);
    }

    #[test]
    fn a_truncated_or_lying_file_is_an_error_not_a_panic() {
        for bad in [
            &[0x92u8, 0xc3][..],
            &[0xdd, 0xff, 0xff, 0xff, 0xff],
            &[0xa3, b'a'],
            &[0xc1],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let mut deep = vec![0x91u8; MAX_DEPTH + 2];
        deep.push(0xc0);
        assert!(parse(&deep).is_err());
    }
}
