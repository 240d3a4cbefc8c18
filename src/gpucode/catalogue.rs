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
    let mut prefixes = Vec::new();
    placeholders(&top, &mut prefixes);
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
        let (source, assembly) = kernel_kinds(&lib);
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

/// Parse a catalogue file.
pub fn read(path: &Path) -> Result<Value> {
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
    let mut r = Reader {
        bytes: &bytes,
        at: 0,
    };
    let v = r
        .value(0)
        .map_err(|e| anyhow!("{name} is not a readable catalogue: {e}"))?;
    if r.at != bytes.len() {
        bail!(
            "{name} is not a readable catalogue: {} bytes after its end",
            bytes.len() - r.at
        );
    }
    Ok(v)
}

/// Every placeholder's file prefix under `v`.
fn placeholders(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Map(entries) => {
            if v.get("type").and_then(Value::as_str) == Some("Placeholder")
                && let Some(prefix) = v.get("value").and_then(Value::as_str)
            {
                out.push(prefix.to_owned());
            }
            for (_, x) in entries {
                placeholders(x, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|x| placeholders(x, out)),
        _ => {}
    }
}

/// Whether a library's solutions have source kernels, assembly kernels.
fn kernel_kinds(lib: &Value) -> (bool, bool) {
    let solutions = match lib.get("solutions") {
        Some(Value::Array(s)) => s.as_slice(),
        _ => &[],
    };
    let kind = |want: bool| {
        solutions
            .iter()
            .any(|s| matches!(s.get("sourceKernel"), Some(Value::Bool(b)) if *b == want))
    };
    (kind(true), kind(false))
}

/// A MessagePack value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A map's value for the string key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
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

    fn value(&mut self, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            bail!("values nested over {MAX_DEPTH} deep");
        }
        let b = self.take(1)?[0];
        Ok(match b {
            0x00..=0x7f => Value::Int(i128::from(b)),
            0x80..=0x8f => self.map(usize::from(b & 0x0f), depth)?,
            0x90..=0x9f => self.array(usize::from(b & 0x0f), depth)?,
            0xa0..=0xbf => self.str(usize::from(b & 0x1f))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.len(1 << (b - 0xc4))?;
                Value::Bin(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (b - 0xc7))?;
                self.take(1 + n)?;
                Value::Nil
            }
            0xca => Value::Float(f64::from(f32::from_bits(u32::try_from(self.uint(4)?)?))),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Value::Int(i128::from(self.uint(1 << (b - 0xcc))?)),
            0xd0..=0xd3 => {
                let n = 1usize << (b - 0xd0);
                let raw = self.uint(n)?;
                let shift = 64 - 8 * n as u32;
                Value::Int(i128::from(((raw << shift) as i64) >> shift))
            }
            0xd4..=0xd8 => {
                self.take(1 + (1 << (b - 0xd4)))?;
                Value::Nil
            }
            0xd9..=0xdb => {
                let n = self.len(1 << (b - 0xd9))?;
                self.str(n)?
            }
            0xdc | 0xdd => {
                let n = self.len(if b == 0xdc { 2 } else { 4 })?;
                self.array(n, depth)?
            }
            0xde | 0xdf => {
                let n = self.len(if b == 0xde { 2 } else { 4 })?;
                self.map(n, depth)?
            }
            0xe0..=0xff => Value::Int(i128::from(b as i8)),
            0xc1 => bail!("byte 0xc1 (never used) at {}", self.at - 1),
        })
    }

    fn str(&mut self, n: usize) -> Result<Value> {
        let at = self.at;
        let s = self.take(n)?;
        Ok(Value::Str(
            std::str::from_utf8(s)
                .map_err(|_| anyhow!("a string at byte {at} is not UTF-8"))?
                .to_owned(),
        ))
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value> {
        // Each element is at least a byte: a count beyond what is left is a lie.
        if n > self.bytes.len() - self.at {
            bail!(
                "an array of {n} at byte {} is longer than the file",
                self.at
            );
        }
        (0..n)
            .map(|_| self.value(depth + 1))
            .collect::<Result<_>>()
            .map(Value::Array)
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value> {
        if n.saturating_mul(2) > self.bytes.len() - self.at {
            bail!("a map of {n} at byte {} is longer than the file", self.at);
        }
        (0..n)
            .map(|_| Ok((self.value(depth + 1)?, self.value(depth + 1)?)))
            .collect::<Result<_>>()
            .map(Value::Map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Value> {
        let mut r = Reader { bytes, at: 0 };
        r.value(0)
    }

    #[test]
    fn reads_what_msgpack_writes() {
        // {"type": "Placeholder", "value": "P", "n": -2, "x": [true, 300]}
        let bytes = [
            0x84, 0xa4, b't', b'y', b'p', b'e', 0xab, b'P', b'l', b'a', b'c', b'e', b'h', b'o',
            b'l', b'd', b'e', b'r', 0xa5, b'v', b'a', b'l', b'u', b'e', 0xa1, b'P', 0xa1, b'n',
            0xfe, 0xa1, b'x', 0x92, 0xc3, 0xcd, 0x01, 0x2c,
        ];
        let v = parse(&bytes).unwrap();
        let mut out = Vec::new();
        placeholders(&v, &mut out);
        assert_eq!(out, ["P"]);
        assert_eq!(v.get("n"), Some(&Value::Int(-2)));
        assert_eq!(
            v.get("x"),
            Some(&Value::Array(vec![Value::Bool(true), Value::Int(300)]))
        );
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
