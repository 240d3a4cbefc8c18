//! The readers of a libMIOpen's kernel texts, for the fuzz target
//! (fuzz/fuzz_targets/kernels.rs, built with --cfg=fuzzing): the
//! batch-norm texts and the HIP include names the diagnosis hands a
//! compiler, the cases and defines it compiles them with, the copy with
//! the row_bcast lines blanked, and the in-place edit. Each is held to a
//! property, not only to not crashing:
//!
//! - a unit that is not refused hands a compiler only plain relative
//!   names, and no text of it names one a preprocessor would open that is
//!   not plain (read here independently of [`super::unplain`]);
//! - the blanked copy has the same lengths, differs only on row_bcast
//!   lines, by spaces, and has no `row_bcast:` left;
//! - the edit keeps the library's length, changes bytes only inside the
//!   kernel texts, each changed text reading as its own fix, and a fixed
//!   text is fixed already.

use std::ops::Range;
use std::path::{Component, Path};

use super::{CONTROL, Lang, Unit, kernels, kernels_in, row_bcast_lines};
use crate::embedded::{self, Edit, Fix, FoundBy, Text};
use crate::kernel_text::{self, Outcome};

/// The first byte picks the reading: even, the rest is a library file;
/// odd, the rest is texts, each `name 0x1f text`, separated by 0x1e,
/// read where they lie as a library's located texts are.
pub fn fuzz_kernels(data: &[u8]) {
    let Some((which, rest)) = data.split_first() else {
        return;
    };
    match which % 2 {
        0 => library(rest),
        _ => texts(rest),
    }
}

fn library(bytes: &[u8]) {
    if let Ok(sources) = kernels(bytes) {
        // One unit at a time, as the diagnosis judges them.
        for s in &sources {
            unit(&Unit::of(s, bytes));
        }
    }
    if let Ok(Fix::Fixed { bytes: after, edit }) = embedded::fix(bytes) {
        edited(bytes, &after, &edit);
    }
}

fn texts(data: &[u8]) {
    let mut texts = Vec::new();
    let mut at = 0;
    for record in data.split(|&b| b == 0x1e) {
        if let Some(sep) = memchr::memchr(0x1f, record) {
            texts.push(Text {
                name: String::from_utf8_lossy(&record[..sep]).into_owned(),
                range: at + sep + 1..at + record.len(),
            });
        }
        at += record.len() + 1;
    }
    for s in &kernels_in(&texts, data) {
        unit(&Unit::of(s, data));
    }
    let edit = Edit {
        changed: Vec::new(),
        already: Vec::new(),
        texts: texts.len(),
        found_by: FoundBy::Symbols,
    };
    if let Ok(Fix::Fixed { bytes: after, edit }) = embedded::fix_texts(data, texts, edit) {
        edited(data, &after, &edit);
    }
}

/// A unit's properties: what it hands a compiler, its cases and defines,
/// its blanked copy.
fn unit(u: &Unit) {
    if u.refused().is_none() {
        let handed = std::iter::once(&u.name).chain(u.headers.iter().map(|(n, _)| n));
        for name in handed {
            assert!(plain(name.as_bytes()), "{name:?} is handed to a compiler");
        }
        for t in std::iter::once(&u.text).chain(u.headers.iter().map(|(_, t)| t)) {
            for name in opened(t) {
                assert!(
                    plain(&name),
                    "{:?} would be opened by a compiler",
                    String::from_utf8_lossy(&name)
                );
            }
        }
    }
    let cases = u.cases();
    assert!(!cases.is_empty(), "a text is compiled in one case at least");
    // All cases at once, as the diagnosis asks: the text read once.
    for arch in ["gfx1010", CONTROL] {
        let all = u.defines_all(arch, &cases);
        assert_eq!(all.len(), cases.len());
        assert_eq!(all[0], u.defines(arch, &cases[0]));
        for d in &all {
            assert!(d.iter().all(|d| d.starts_with("-D")), "{d:?}");
            if u.lang == Lang::Hip {
                assert!(
                    d.iter()
                        .any(|d| d.starts_with("-DMIOPEN_READ_TYPE=FP_TYPE"))
                );
            }
        }
    }
    let pairs = |b: &Unit| {
        let mut v = vec![(u.text.clone(), b.text.clone())];
        v.extend(
            u.headers
                .iter()
                .zip(&b.headers)
                .map(|(a, b)| (a.1.clone(), b.1.clone())),
        );
        v
    };
    match u.without_row_bcast() {
        Some(b) => {
            assert_eq!(b.headers.len(), u.headers.len());
            for (before, after) in pairs(&b) {
                blanked(&before, &after);
            }
        }
        None => {
            for t in std::iter::once(&u.text).chain(u.headers.iter().map(|(_, t)| t)) {
                assert!(row_bcast_lines(t).is_empty());
            }
        }
    }
}

/// `after` is `before` with its row_bcast lines blanked: same length,
/// spaces only, only on those lines, and no `row_bcast:` left.
fn blanked(before: &[u8], after: &[u8]) {
    assert_eq!(before.len(), after.len());
    let lines = row_bcast_lines(before);
    if let Some(i) = differs_outside(before, after, &lines) {
        panic!("byte {i} changed off a row_bcast line");
    }
    for line in &lines {
        for (a, b) in before[line.clone()].iter().zip(&after[line.clone()]) {
            assert!(a == b || *b == b' ', "a byte blanked to {b:#x}");
        }
    }
    assert!(
        memchr::memmem::find(after, b"row_bcast:").is_none(),
        "a row_bcast operand is left"
    );
}

/// The edit of a library: same length, changed only inside the changed
/// texts, each of which reads as its own fix and is fixed already then.
fn edited(before: &[u8], after: &[u8], edit: &Edit) {
    assert_eq!(before.len(), after.len(), "the edit changed the length");
    let ranges: Vec<Range<usize>> = edit.changed.iter().map(|(t, _)| t.range.clone()).collect();
    if let Some(i) = differs_outside(before, after, &ranges) {
        panic!("byte {i:#x} changed outside every text");
    }
    for (t, decisions) in &edit.changed {
        let fixed = &after[t.range.clone()];
        match kernel_text::fix(&before[t.range.clone()], true) {
            Ok(Outcome::Fixed { text, decisions: d }) => {
                assert_eq!(text, fixed, "{} is not its own fix", t.name);
                assert_eq!(d, *decisions);
            }
            other => panic!("{} changed, but its fix is {other:?}", t.name),
        }
        assert_eq!(
            kernel_text::fix(fixed, true),
            Ok(Outcome::AlreadyFixed),
            "{} fixed is not fixed already",
            t.name
        );
    }
}

/// The first byte outside every one of `ranges` where `a` and `b`
/// differ, compared a gap at a time (a check linear in the input, as the
/// readers it checks must be, and cheap enough for the scale check).
fn differs_outside(a: &[u8], b: &[u8], ranges: &[Range<usize>]) -> Option<usize> {
    let mut sorted = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut at = 0;
    for r in sorted.iter().chain(std::iter::once(&(a.len()..a.len()))) {
        let upto = r.start.max(at);
        if a[at..upto] != b[at..upto] {
            let off = a[at..upto]
                .iter()
                .zip(&b[at..upto])
                .position(|(x, y)| x != y);
            return Some(at + off.unwrap_or(0));
        }
        at = at.max(r.end);
    }
    None
}

/// A plain relative name, read here apart from `unplain`: not empty, no
/// NUL or backslash, and only normal components (or `.`).
fn plain(name: &[u8]) -> bool {
    let Ok(name) = std::str::from_utf8(name) else {
        // Lossy names are what the library reads; a raw one is held to
        // the same rules on its bytes.
        return plain(String::from_utf8_lossy(name).as_bytes());
    };
    !name.is_empty()
        && !name.contains(['\0', '\\'])
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The names a preprocessor would open for `text`, read as clang does
/// (apart from the library's reading): lines end at `\n` or `\r`, a
/// backslash before one continues the line, NULs are blanks, block
/// comments are blanks; a directive is `#` or `%:`, then `include`,
/// `include_next`, `import` or `embed`, then a name in quotes or angle
/// brackets. (String literals and comments spanning lines are not
/// followed: where that misreads, it reads more directives, not fewer.)
fn opened(text: &[u8]) -> Vec<Vec<u8>> {
    // Continuations joined first, as clang's phase 2 does.
    let mut joined = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            let mut j = i + 1;
            while j < text.len() && matches!(text[j], b' ' | b'\t' | b'\x0b' | b'\x0c') {
                j += 1;
            }
            match text.get(j) {
                Some(b'\r') if text.get(j + 1) == Some(&b'\n') => {
                    i = j + 2;
                    continue;
                }
                Some(b'\n' | b'\r') => {
                    i = j + 1;
                    continue;
                }
                _ => {}
            }
        }
        joined.push(text[i]);
        i += 1;
    }
    let mut out = Vec::new();
    for line in joined.split(|&b| b == b'\n' || b == b'\r') {
        let rest = blanks(line);
        let Some(rest) = rest.strip_prefix(b"#").or_else(|| rest.strip_prefix(b"%:")) else {
            continue;
        };
        let rest = blanks(rest);
        let Some(rest) = ["include_next", "include", "import", "embed"]
            .iter()
            .find_map(|w| rest.strip_prefix(w.as_bytes()))
        else {
            continue;
        };
        let rest = blanks(rest);
        let close = match rest.first() {
            Some(b'"') => b'"',
            Some(b'<') => b'>',
            _ => continue,
        };
        if let Some(n) = rest[1..].iter().position(|&b| b == close) {
            out.push(rest[1..1 + n].to_vec());
        }
    }
    out
}

/// `line` past blanks, NULs and block comments.
fn blanks(mut line: &[u8]) -> &[u8] {
    loop {
        match line {
            [b' ' | b'\t' | b'\x0b' | b'\x0c' | 0, rest @ ..] => line = rest,
            [b'/', b'*', rest @ ..] => match memchr::memmem::find(rest, b"*/") {
                Some(n) => line = &rest[n + 2..],
                None => return &[],
            },
            _ => return line,
        }
    }
}
