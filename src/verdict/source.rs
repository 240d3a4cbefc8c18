//! The batch-norm kernel texts of a library as the compiler is handed
//! them: an OpenCL text whole (MIOpen's build inlines its headers), a HIP
//! text with every header it includes, by include name, as MIOpen hands
//! them to hipRTC.

use std::collections::{HashMap, HashSet};

use super::{Case, Job, cases};
use crate::compile::{Lang, unplain};
use crate::embedded::{self, Text};

/// A batch-norm kernel text of a library: where its bytes are, and for a
/// HIP text where each header it includes is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: String,
    pub range: std::ops::Range<usize>,
    pub lang: Lang,
    pub headers: Vec<(String, std::ops::Range<usize>)>,
}

impl Source {
    /// Its headers' bytes in `library`, by include name.
    pub fn headers_in(&self, library: &[u8]) -> Vec<(String, Vec<u8>)> {
        self.headers
            .iter()
            .map(|(n, r)| (n.clone(), library[r.clone()].to_vec()))
            .collect()
    }

    /// Whether `a` and `b` (a library before and after an edit) differ in
    /// this text or a header it includes.
    pub(super) fn differs(&self, a: &[u8], b: &[u8]) -> bool {
        std::iter::once(&self.range)
            .chain(self.headers.iter().map(|(_, r)| r))
            .any(|r| a.get(r.clone()) != b.get(r.clone()))
    }
}

/// The batch-norm kernel texts of `library` (a whole file's bytes): the
/// OpenCL texts that define a kernel whose name says batch norm, and the
/// HIP ones, each with the headers it includes.
pub fn kernels(library: &[u8]) -> anyhow::Result<Vec<Source>> {
    let (texts, _) = embedded::locate(library)?;
    let out = kernels_in(&texts, library);
    if out.len() > MAX_KERNELS {
        anyhow::bail!(
            "it embeds more than {MAX_KERNELS} batch-norm kernel texts, where MIOpen has about a dozen"
        );
    }
    Ok(out)
}

/// What every verdict on `library` depends on of it, as a SHA-256: each
/// batch-norm kernel text (its name, its language, its bytes) with the
/// headers it includes, by name and content. Nothing else of the library
/// reaches a compiler, so a library that differs only elsewhere is judged
/// alike, and its fix (made in these texts alone) proven alike.
pub fn digest(library: &[u8]) -> anyhow::Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    for s in kernels(library)? {
        field(s.name.as_bytes());
        field(format!("{:?}", s.lang).as_bytes());
        field(&library[s.range.clone()]);
        for (name, r) in &s.headers {
            field(name.as_bytes());
            field(&library[r.clone()]);
        }
        field(b"end");
    }
    Ok(crate::checksum::hex(&h.finalize()))
}

/// [`kernels`] among `texts`, located in `library` (each range inside it).
pub fn kernels_in(texts: &[Text], library: &[u8]) -> Vec<Source> {
    // The headers by symbol, the first of a name: one look-up per include.
    let mut by_symbol: HashMap<&str, &std::ops::Range<usize>> = HashMap::new();
    for t in texts.iter().filter(|t| t.name.ends_with("_INCLUDE")) {
        by_symbol.entry(t.name.as_str()).or_insert(&t.range);
    }
    // Headers found by their guard, each name searched for once: a
    // search reads the whole library.
    let mut guarded = HashMap::new();
    let mut out = Vec::new();
    for t in texts {
        let text = &library[t.range.clone()];
        if !is_batch_norm(&t.name, text) {
            continue;
        }
        let lang = match memchr::memmem::find(text, b"__global__").is_some() {
            true => Lang::Hip,
            false => Lang::OpenCl,
        };
        let headers = match lang {
            Lang::Hip => includes(&by_symbol, &mut guarded, library, t),
            Lang::OpenCl => Vec::new(),
        };
        out.push(Source {
            name: t.name.clone(),
            range: t.range.clone(),
            lang,
            headers,
        });
    }
    out
}

fn is_batch_norm(name: &str, text: &[u8]) -> bool {
    let find = |n: &[u8]| memchr::memmem::find(text, n).is_some();
    (find(b"__kernel") || find(b"__global__"))
        && !name.ends_with("_INCLUDE")
        && (name.to_ascii_uppercase().contains("BATCHNORM") || find(b"BatchNorm"))
}

/// The headers a HIP text includes (`#include "name"`), and theirs, as
/// MIOpen hands them to hipRTC: by include name, each the embedded
/// `MIOPEN_KERNEL_<STEM>_INCLUDE`, once, by the first name that reaches it
/// (each header's text is read once: a library of many names for one
/// header costs no more than its size). One it includes and the library
/// lacks is left to hipRTC, which says so, as it would at run time. The
/// names are the library's, unchecked: [`Unit::refused`] says which may
/// not reach a compiler.
fn includes(
    by_symbol: &HashMap<&str, &std::ops::Range<usize>>,
    guarded: &mut HashMap<String, Option<std::ops::Range<usize>>>,
    library: &[u8],
    kernel: &Text,
) -> Vec<(String, std::ops::Range<usize>)> {
    let mut out: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    let mut symbols: HashSet<String> = HashSet::new();
    let mut todo = vec![kernel.range.clone()];
    while let Some(range) = todo.pop() {
        for name in include_names(&library[range]) {
            let stem = std::path::Path::new(&name)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(&name);
            let symbol: String = stem
                .chars()
                .map(|c| match c.is_ascii_alphanumeric() {
                    true => c.to_ascii_uppercase(),
                    false => '_',
                })
                .collect();
            let symbol = format!("MIOPEN_KERNEL_{symbol}_INCLUDE");
            // A library whose symbols are hidden names no header: it is
            // found by its include guard instead (`by_guard`).
            let found = match by_symbol.is_empty() {
                false => by_symbol.get(symbol.as_str()).map(|h| (*h).clone()),
                true => guarded
                    .entry(name.clone())
                    .or_insert_with(|| by_guard(library, &name))
                    .clone(),
            };
            if let Some(h) = found
                && symbols.insert(symbol)
            {
                out.push((name, h.clone()));
                todo.push(h);
            }
        }
    }
    out
}

/// The text of the header `name` in a library whose symbols are hidden:
/// the NUL-delimited string that opens with its include guard, `#ifndef
/// X` then `#define X`, where X ends in the name's file name spelled as a
/// guard (`bn_reduction.hpp`: `..._BN_REDUCTION_HPP`), as MIOpen's
/// headers and the tests' are guarded. The first such string; none when
/// no string has it (hipRTC then says the header is missing, as it would
/// at run time).
fn by_guard(library: &[u8], name: &str) -> Option<std::ops::Range<usize>> {
    let file = name.rsplit('/').next().unwrap_or(name);
    let guard: Vec<u8> = file
        .bytes()
        .map(|b| match b.is_ascii_alphanumeric() {
            true => b.to_ascii_uppercase(),
            false => b'_',
        })
        .collect();
    for at in memchr::memmem::find_iter(library, b"#ifndef ") {
        let line = &library[at + 8..];
        let end = line
            .iter()
            .position(|&b| b == b'\n' || b == 0)
            .unwrap_or(line.len());
        let x = line[..end].trim_ascii();
        let named =
            x.ends_with(&guard) && (x.len() == guard.len() || x[x.len() - guard.len() - 1] == b'_');
        if !named {
            continue;
        }
        let next = line[end..]
            .strip_prefix(b"\n")
            .unwrap_or(&[])
            .trim_ascii_start();
        let defined = next
            .strip_prefix(b"#define ")
            .is_some_and(|d| d.trim_ascii_start().starts_with(x));
        if !defined {
            continue;
        }
        let start = memchr::memrchr(0, &library[..at]).map_or(0, |n| n + 1);
        let stop = memchr::memchr(0, &library[at..]).map_or(library.len(), |n| at + n);
        return Some(start..stop);
    }
    None
}

/// The names a text includes in quotes (`#include "name"`), as written:
/// bytes of the library, never yet a path.
fn include_names(text: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(text);
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix('#')?;
            let rest = rest.trim_start().strip_prefix("include")?;
            let name = rest.trim().strip_prefix('"')?.split('"').next()?;
            Some(name.to_owned())
        })
        .collect()
}

/// The most a kernel text with its headers may be: MIOpen's largest
/// batch-norm text, headers and all, is a few hundred KiB.
const TEXT_CAP: usize = 4 << 20;

/// More batch-norm kernel texts than any MIOpen has (13 in 6.4, 14 in
/// 7.2): a library with more is not one the fix knows.
const MAX_KERNELS: usize = 256;

/// How far past `include` a name is looked for: clang opens no path
/// longer (PATH_MAX), and a name it might shorten first is refused.
const READ: usize = 4096;

/// The first name a preprocessor might open for `text` that is not plain,
/// over-read so that no spelling of an include slips by: after every
/// `include`, `include_next`, `import` or `embed` wherever it stands (a
/// directive however spelled: `#` or `%:`, comments, continued lines,
/// lines ended by `\r`; or a word in a comment), past blanks, NULs and
/// comments, a name in quotes or angle brackets. One it
/// cannot read to its end within [`READ`] bytes is refused too. Linear:
/// at most [`READ`] bytes are read past each word.
fn unplain_opened(text: &[u8]) -> Option<(String, &'static str)> {
    const UNREAD: &str = "an include this check cannot read within 4096 bytes";
    // A continuation may split a word (`#inc\<newline>lude`): read the
    // lines joined, as clang does first.
    let joined = joined(text);
    let text = &joined[..];
    for word in [&b"include"[..], b"import", b"embed"] {
        for at in memchr::memmem::find_iter(text, word) {
            let from = at + word.len();
            let end = text.len().min(from + READ);
            let capped = end < text.len();
            let rest = &text[from..end];
            let rest = rest.strip_prefix(b"_next").unwrap_or(rest);
            let rest = skip_blanks(rest);
            let close = match rest.first() {
                Some(b'"') => b'"',
                Some(b'<') => b'>',
                None if capped => return Some((lossy_cut(&text[at..end]), UNREAD)),
                _ => continue,
            };
            match memchr::memchr(close, &rest[1..]) {
                Some(n) => {
                    let name = String::from_utf8_lossy(&rest[1..1 + n]);
                    if let Some(how) = unplain(&name) {
                        return Some((name.into_owned(), how));
                    }
                }
                None if capped => return Some((lossy_cut(&text[at..end]), UNREAD)),
                // Unterminated at the text's end: nothing is opened.
                None => {}
            }
        }
    }
    None
}

/// `text` with every line continuation (a backslash, blanks, a line end)
/// taken out; borrowed when it has none.
fn joined(text: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !text.contains(&b'\\') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            let blanks = text[i + 1..]
                .iter()
                .take_while(|&&b| matches!(b, b' ' | b'\t' | b'\x0b' | b'\x0c'))
                .count();
            let j = i + 1 + blanks;
            let end = match &text[j.min(text.len())..] {
                [b'\r', b'\n', ..] => Some(j + 2),
                [b'\n' | b'\r', ..] => Some(j + 1),
                _ => None,
            };
            if let Some(end) = end {
                i = end;
                continue;
            }
            // Not a continuation: the backslash and its blanks stand.
            out.extend_from_slice(&text[i..j]);
            i = j;
            continue;
        }
        out.push(text[i]);
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

/// `bytes` past blanks (spaces, tabs, form feeds, vertical tabs and NULs,
/// which clang ignores) and block comments.
fn skip_blanks(mut bytes: &[u8]) -> &[u8] {
    loop {
        match bytes {
            [b' ' | b'\t' | b'\x0b' | b'\x0c' | 0, rest @ ..] => bytes = rest,
            [b'/', b'*', rest @ ..] => match memchr::memmem::find(rest, b"*/") {
                Some(n) => bytes = &rest[n + 2..],
                None => return &[],
            },
            _ => return bytes,
        }
    }
}

/// The start of `bytes` as text, for a message.
fn lossy_cut(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(40)]);
    format!("{s}...")
}

/// One kernel text with its headers, as compiled: owned, so that a copy
/// can be changed (the DPP instructions blanked) and compiled again.
pub struct Unit {
    pub name: String,
    pub lang: Lang,
    pub text: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Unit {
    pub fn of(s: &Source, library: &[u8]) -> Unit {
        Unit {
            name: s.name.clone(),
            lang: s.lang,
            text: library[s.range.clone()].to_vec(),
            headers: s.headers_in(library),
        }
    }

    /// All it reads: the text and its headers, one after the other, for
    /// the cases and defines a solver passes.
    fn read(&self) -> Vec<u8> {
        let mut all = self.text.clone();
        for (_, h) in &self.headers {
            all.push(b'\n');
            all.extend_from_slice(h);
        }
        all
    }

    /// Why this text is not compiled at all: a name it would hand a
    /// compiler (its own, a header's, one its text or a header includes)
    /// that is not plain ([`unplain`]). None: every name is plain.
    pub fn refused(&self) -> Option<String> {
        let size = self.text.len() + self.headers.iter().map(|(_, h)| h.len()).sum::<usize>();
        if size > TEXT_CAP {
            return Some(format!(
                "it is {} with its headers, over the {} MiB no batch-norm kernel comes near",
                crate::fsutil::human_bytes(size as u64),
                TEXT_CAP >> 20
            ));
        }
        let why = |what: &str, name: &str, how: &str| {
            format!("{what} {name:?}, {how}, and a compiler is handed only plain relative names")
        };
        if let Some(how) = unplain(&self.name) {
            return Some(why("it is named", &self.name, how));
        }
        let named = self.headers.iter().map(|(n, _)| n);
        if let Some((n, how)) = named
            .filter_map(|n| unplain(n).map(|how| (n.clone(), how)))
            .next()
            .or_else(|| {
                std::iter::once(&self.text)
                    .chain(self.headers.iter().map(|(_, t)| t))
                    .find_map(|t| unplain_opened(t))
            })
        {
            return Some(why("it includes", &n, how));
        }
        std::iter::once(&self.text)
            .chain(self.headers.iter().map(|(_, t)| t))
            .find_map(|t| memchr::memchr(0, t))
            .map(|at| {
                format!(
                    "it holds a NUL byte (at {at}), which no kernel text does: a compiler would read it cut short"
                )
            })
    }

    pub fn cases(&self) -> Vec<Case> {
        cases(&self.read())
    }

    /// The solver's defines for `case`, as the solver that compiles this
    /// text spells them ([`cases::defines_of`]).
    pub fn defines(&self, arch: &str, case: &Case) -> Vec<String> {
        self.defines_all(arch, std::slice::from_ref(case))
            .pop()
            .expect("one case")
    }

    /// [`Unit::defines`] for each of `cases`, the text read once: a text
    /// of many cases costs its size once, not once a case.
    pub fn defines_all(&self, arch: &str, cases: &[Case]) -> Vec<Vec<String>> {
        let families = cases::families(&self.read());
        let solver = cases::Solver::of(&self.text, self.lang == Lang::Hip);
        cases
            .iter()
            .map(|case| cases::defines_of(&families, solver, arch, case))
            .collect()
    }

    /// A copy with every instruction with a `row_bcast` operand blanked,
    /// in the text and its headers (same length); None when there is none.
    /// Debian 12's comgr reports a rejected operand as "cannot compile
    /// inline asm", no more: whether that copy compiles says why.
    pub(super) fn without_row_bcast(&self) -> Option<Unit> {
        let mut b = Unit {
            name: self.name.clone(),
            lang: self.lang,
            text: self.text.clone(),
            headers: self.headers.clone(),
        };
        let mut any = super::blank_row_bcast(&mut b.text);
        for (_, h) in &mut b.headers {
            any |= super::blank_row_bcast(h);
        }
        any.then_some(b)
    }

    pub(super) fn job<'a>(&'a self, arch: &'a str, defines: &'a [String]) -> Job<'a> {
        Job {
            name: &self.name,
            text: &self.text,
            lang: self.lang,
            headers: &self.headers,
            arch,
            defines,
            front_end: false,
            code_of: None,
        }
    }

    /// [`Unit::job`] of the front end alone.
    pub(super) fn front_end_job<'a>(&'a self, arch: &'a str, defines: &'a [String]) -> Job<'a> {
        Job {
            front_end: true,
            ..self.job(arch, defines)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_refused_for_any_name_it_would_hand_a_compiler() {
        let unit = |name: &str, text: &str, headers: &[(&str, &str)]| Unit {
            name: name.into(),
            lang: Lang::Hip,
            text: text.as_bytes().to_vec(),
            headers: headers
                .iter()
                .map(|(n, t)| ((*n).to_owned(), t.as_bytes().to_vec()))
                .collect(),
        };
        assert_eq!(
            unit("K", "#include \"a.hpp\"\n", &[("a.hpp", "")]).refused(),
            None
        );
        assert_eq!(
            unit("K", "#include \"a.hpp\"\n", &[("a.hpp", "#include \"/etc/x\"\n")]).refused(),
            Some("it includes \"/etc/x\", an absolute name, and a compiler is handed only plain relative names".into())
        );
        // Every spelling clang reads as an include is read, angle brackets
        // too: `%:`, a continued line, a line ended by `\r`, comments and
        // NULs between the words.
        for text in [
            "%:include \"../d\"\n",
            "#inc\\\nlude \"../c\"\n",
            "#inc\\ \r\nlude \"../c\"\n",
            "int x;\r#include \"/r\"\n",
            "# /**/ include_next \0 <../n>\n",
            "#import \"../i\"\n#embed </e>\n",
        ] {
            let refused = unit("K", text, &[]).refused();
            assert!(
                refused.is_some_and(|r| r.starts_with("it includes ")),
                "{text:?}"
            );
        }
        // A name it cannot read to its end is refused; a word that is
        // no include is not.
        let far = format!("#include {}\"a\"\n", " ".repeat(5000));
        assert!(unit("K", &far, &[]).refused().is_some());
        let fine = "// this includes <hip/hip_runtime.h> and \"a.hpp\"\n#include<x/y.h>\n";
        assert_eq!(unit("K", fine, &[]).refused(), None);
        assert_eq!(
            unit("../K", "", &[]).refused(),
            Some("it is named \"../K\", a name with a \"..\" component, and a compiler is handed only plain relative names".into())
        );
    }

    /// A header reached by many names is handed once, by the first, and
    /// read once: a library of many names for one header costs its size.
    #[test]
    fn a_header_is_handed_once_whatever_names_reach_it() {
        let mut lib = Vec::new();
        let mut texts = Vec::new();
        let mut add = |name: &str, text: String| {
            let start = lib.len();
            lib.extend_from_slice(text.as_bytes());
            texts.push(Text {
                name: name.into(),
                range: start..lib.len(),
            });
            lib.push(0);
        };
        add(
            "MIOPEN_KERNEL_BN",
            "#include \"h.hpp\"\n__global__ void BatchNorm() {}\n".into(),
        );
        let names: String = (0..3000)
            .map(|i| format!("#include \"d{i}/h.hpp\"\n"))
            .collect();
        add(
            "MIOPEN_KERNEL_H_INCLUDE",
            format!("#include \"h.hpp\"\n{names}"),
        );
        let sources = kernels_in(&texts, &lib);
        assert_eq!(sources.len(), 1);
        let headers: Vec<&str> = sources[0].headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(headers, ["h.hpp"]);
    }
}
