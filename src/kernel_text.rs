//! The batch-norm fix as an edit of kernel text: one definition for a
//! source file (the text may grow) and for a text embedded in a built
//! libMIOpen (same length: `MIOPEN_KERNEL_<NAME>_SIZE` fixes it).
//!
//! MIOpen decides in its batch-norm kernels whether to reduce with GCN DPP
//! row_bcast, which gfx10 does not have:
//!
//! ```text
//! #if defined(__AMDGCN__) && !(MIO_BN_GFX103X || MIO_BN_GFX110X || MIO_BN_GFX120X)
//! ```
//!
//! (`batchnorm_functions.h` spells each term `(defined(X) && X)` over three
//! continued lines; later releases add families to the list). The fix adds
//! `__has_builtin(__builtin_amdgcn_permlanex16)` to the list: true exactly
//! for gfx10 and later, none of which has row_bcast, so a kernel compiled
//! for gfx1010..gfx1013 takes the generic reduction, as gfx103x does (the
//! later families are in the list already).
//!
//! Why not clang's `__gfx1010__` macros: MIOpen compiles its OpenCL kernels
//! through comgr with a precompiled OpenCL header, and the header's
//! predefines replace the target's. Compiled as MIOpen does it (ADD_
//! PRECOMPILED_HEADERS, then COMPILE_SOURCE_WITH_DEVICE_LIBS_TO_BC), no
//! per-target macro is defined, with Debian 12's comgr 5.2.3 and with
//! ROCm 6.4's comgr 3 alike, while `__has_builtin` is answered for the
//! target of the compile. `__GFX10__` is absent the same way, and older
//! compilers lack it.
//!
//! 7.x's HIP batch-norm kernels decide in `configuration.hpp`, in C++:
//!
//! ```text
//! #ifdef __AMDGCN__
//!     static constexpr bool use_amdgnc =
//!         MiopenConfig::use_amdgnc &&
//!         !(target_arch == architecture::gfx103x || ...) && ...;
//! #else
//!     static constexpr bool use_amdgnc = false;
//! ```
//!
//! (`use_amdgcn` in later texts). `__has_builtin` is a preprocessor
//! question, so there the fix is on the guard: `#if defined(__AMDGCN__) &&
//! !TERM`. Every target the list names has the builtin, so for them the
//! `#else` gives what the list gave; gfx101x now gets it too, and GCN is
//! unchanged. hipRTC answers per target as comgr does (7.2.4's: false for
//! gfx906, true for gfx1010, gfx1012 and gfx1030).
//!
//! A decision no rule knows (Debian's `#if defined(__AMDGCN__) &&
//! !defined(__gfx90a__)`, true on gfx101x and gfx1030 alike) is left as it
//! is: what it switches on is made portable instead. Where its block sets
//! MIOpen's switch to the DPP reduction, `#define MIOPEN_USE_AMDGCN 1`,
//! the 1 becomes `(!TERM)`: the reduction is then the generic one on
//! gfx10 and later whatever the decision says, and GCN's is unchanged.
//! What it does not know how to make portable (a DPP reduction written
//! under the decision itself) it leaves, and the proof names the line.
//!
//! In a built library the text cannot grow: the room comes from the same
//! text's comments (runs of decoration such as a licence banner's
//! asterisks, runs of spaces), never from code and never from another text.

use std::ops::Range;

/// What a library carries when it is one of ours, built or fixed in place:
/// every patch of the series declares a marker that starts so, and so does
/// [`MARKER`].
pub const MARKER_PREFIX: &str = "[RDNA1 PATCH]";

/// What every fixed text carries, once, as a comment: `verify` looks for
/// it, and the series' patch carries the same.
pub const MARKER: &str = "[RDNA1 PATCH] batchnorm: gfx101x has no DPP row_bcast";

/// The term the fix adds to the decision's list: "this target is gfx10 or
/// later", asked of the compiler in a way comgr's precompiled header does
/// not hide.
pub const TERM: &str = "__has_builtin(__builtin_amdgcn_permlanex16)";

/// The HIP guard as MIOpen ships it.
const HIP_GUARD: &str = "#ifdef __AMDGCN__";

/// The fixed HIP guard.
pub fn hip_guard() -> String {
    format!("#if defined(__AMDGCN__) && !{TERM}")
}

/// MIOpen's switch to the DPP reduction, set to 1 where a decision takes
/// it.
const SWITCH: &str = "#define MIOPEN_USE_AMDGCN";

/// The switch's value once fixed: off on gfx10 and later.
pub fn switch_value() -> String {
    format!("(!{TERM})")
}

/// clang's per-arch macros, which a fix by hand may have put in the list.
/// They are terms like any other, never a sign that the text is fixed:
/// comgr's precompiled OpenCL header leaves them undefined, so such a text
/// still reaches the DPP reduction on gfx101x (the compile says so).
const ARCH_TERMS: [&str; 4] = [
    "defined(__gfx1010__)",
    "defined(__gfx1011__)",
    "defined(__gfx1012__)",
    "defined(__gfx1013__)",
];

/// What was done to one text.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The text makes no batch-norm decision: nothing to do.
    Untouched,
    /// Every decision already names the gfx101x targets.
    AlreadyFixed,
    /// The fixed text, and how many decisions were changed.
    Fixed { text: Vec<u8>, decisions: usize },
}

/// Why a text was not fixed; nothing was changed.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A batch-norm decision of a shape this fix does not know (line is
    /// 1-based), and the shape expected.
    Unrecognised {
        line: usize,
        found: String,
        expected: &'static str,
    },
    /// Some decisions are fixed and some not: not a text MIOpen shipped.
    Mixed,
    /// The comments do not free enough bytes for a same-length edit.
    NoRoom { needed: usize, available: usize },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unrecognised {
                line,
                found,
                expected,
            } => write!(
                f,
                "line {line} decides on the batch-norm reduction as `{found}`, not as `{expected}`"
            ),
            Refusal::Mixed => write!(
                f,
                "some of its batch-norm decisions name gfx101x and some do not"
            ),
            Refusal::NoRoom { needed, available } => write!(
                f,
                "the fix needs {needed} bytes and the text's comments free only {available}"
            ),
        }
    }
}

/// The clause added inside the decision's `!( ... )`.
pub fn clause() -> String {
    format!(" || {TERM}")
}

/// Fix `text`. `same_length`: the result has exactly `text`'s length.
pub fn fix(text: &[u8], same_length: bool) -> Result<Outcome, Refusal> {
    let comments = comments(text);
    let decisions = decisions(text, &comments)?;
    if decisions.is_empty() {
        return Ok(Outcome::Untouched);
    }
    let fixed = decisions.iter().filter(|d| d.fixed).count();
    if fixed == decisions.len() {
        return Ok(Outcome::AlreadyFixed);
    }
    if fixed > 0 {
        return Err(Refusal::Mixed);
    }
    let clause = clause();
    let marker = format!("// {MARKER}\n");
    // Insertions, as (position, bytes): the clause before each decision's
    // closing paren, and the marker on its own line before the first
    // decision where there is room for it too (a lone header may have only
    // enough for the clause; the kernels that inline it carry the marker).
    let guard = hip_guard();
    let switch = switch_value();
    // Edits, as (position, bytes, bytes replaced): the clause before each
    // OpenCL decision's closing paren, the fixed guard over a HIP one.
    let mut inserts: Vec<(usize, &[u8], usize)> = decisions
        .iter()
        .map(|d| match d.kind {
            Kind::OpenCl { close } => (close, clause.as_bytes(), 0),
            Kind::Hip { guard: at } => (at, guard.as_bytes(), HIP_GUARD.len()),
            Kind::Switch { value } => (value, switch.as_bytes(), 1),
        })
        .collect();
    let bare: usize = inserts.iter().map(|(_, b, r)| b.len() - r).sum();
    let runs = if same_length {
        room(text, &comments)
    } else {
        Vec::new()
    };
    let available = if same_length {
        runs.iter().map(Range::len).sum()
    } else {
        usize::MAX
    };
    if available < bare {
        return Err(Refusal::NoRoom {
            needed: bare,
            available,
        });
    }
    if available - bare >= marker.len() {
        inserts.insert(0, (decisions[0].line_start, marker.as_bytes(), 0));
    }
    let needed: usize = inserts.iter().map(|(_, b, r)| b.len() - r).sum();
    let cuts = if same_length {
        take(runs, needed)
    } else {
        Vec::new()
    };
    let mut out = Vec::with_capacity(text.len() + needed);
    let mut at = 0;
    // A replacement is its bytes, then a cut of what they replace.
    let mut events: Vec<(usize, Option<&[u8]>, usize)> = inserts
        .iter()
        .flat_map(|(p, b, r)| {
            let cut = (*r > 0).then_some((*p, None, p + r));
            std::iter::once((*p, Some(*b), 0)).chain(cut)
        })
        .chain(cuts.iter().map(|r| (r.start, None, r.end)))
        .collect();
    events.sort_by_key(|e| (e.0, e.1.is_none()));
    for (pos, insert, end) in events {
        out.extend_from_slice(&text[at..pos]);
        at = pos;
        match insert {
            Some(b) => out.extend_from_slice(b),
            None => at = end,
        }
    }
    out.extend_from_slice(&text[at..]);
    debug_assert!(!same_length || out.len() == text.len());
    Ok(Outcome::Fixed {
        text: out,
        decisions: decisions.len(),
    })
}

/// One batch-norm decision: where its line starts, where the fix goes, and
/// whether it names gfx101x already.
struct Decision {
    line_start: usize,
    kind: Kind,
    fixed: bool,
}

enum Kind {
    /// Where the `!( ... )` list closes.
    OpenCl { close: usize },
    /// Where the `#ifdef __AMDGCN__` guard starts.
    Hip { guard: usize },
    /// Where the 1 of `#define MIOPEN_USE_AMDGCN 1` is, under a decision
    /// no rule knows.
    Switch { value: usize },
}

const OPENCL_SHAPE: &str = "#if defined(__AMDGCN__) && !(MIO_BN_GFX103X || ...)";
const HIP_SHAPE: &str = "#ifdef __AMDGCN__ before `static constexpr bool use_amdgnc =`";

/// Every `#if`/`#elif` outside comments that mentions both `__AMDGCN__`
/// and an `MIO_BN_GFX` family, and every conditional on `__AMDGCN__` that
/// guards HIP's `use_amdgnc`/`use_amdgcn`; each must be of its known shape.
fn decisions(text: &[u8], comments: &[Range<usize>]) -> Result<Vec<Decision>, Refusal> {
    let mut out = Vec::new();
    let mut ahead = (
        Ahead::new(text, b"#else"),
        Ahead::new(text, b"MIO_BN_GFX101X"),
    );
    let mut line_start = 0;
    let mut line_no = 1;
    // The open conditionals: whether each (its innermost branch) is a
    // decision a rule knows, and the refusal of one of a shape no rule
    // knows, withdrawn when its block sets the switch, which is fixed.
    let mut open: Vec<(bool, Option<Refusal>)> = Vec::new();
    let mut refusals: Vec<Refusal> = Vec::new();
    while line_start < text.len() {
        let (directive_end, lines) = logical_line(text, line_start);
        let raw = &text[line_start..directive_end];
        let trimmed = raw.trim_ascii_start();
        let word =
            if trimmed.starts_with(b"#") && !in_comment(comments, directive_end - trimmed.len()) {
                std::str::from_utf8(&trimmed[1..]).ok().and_then(|s| {
                    s.trim_start()
                        .split(|c: char| !c.is_ascii_alphabetic())
                        .next()
                })
            } else {
                None
            };
        let mentions = |n: &[u8]| memchr::memmem::find(raw, n).is_some();
        let refused = |expected| Refusal::Unrecognised {
            line: line_no,
            found: normalized(raw),
            expected,
        };
        let mut known = false;
        let mut pending = None;
        if matches!(word, Some("if" | "elif")) && mentions(b"__AMDGCN__") && mentions(b"MIO_BN_GFX")
        {
            match decision(text, line_start, directive_end) {
                Some(d) => {
                    out.push(d);
                    known = true;
                }
                None => pending = Some(refused(OPENCL_SHAPE)),
            }
        } else if matches!(word, Some("if" | "ifdef" | "elif"))
            && mentions(b"__AMDGCN__")
            && guards_use_amdgcn(text, directive_end)
        {
            out.push(
                hip_decision(text, line_start, directive_end, &mut ahead)
                    .ok_or_else(|| refused(HIP_SHAPE))?,
            );
            known = true;
        }
        if word == Some("define") {
            if let Some(d) = switch(text, line_start, directive_end, &open) {
                if let Some((_, p)) = open.last_mut() {
                    *p = None;
                }
                out.push(d);
            }
        } else {
            nest(word, (known, pending), &mut open, &mut refusals);
        }
        line_no += lines;
        line_start = directive_end + 1;
    }
    refusals.extend(open.into_iter().filter_map(|(_, p)| p));
    match refusals.into_iter().min_by_key(|r| match r {
        Refusal::Unrecognised { line, .. } => *line,
        _ => 0,
    }) {
        Some(r) => Err(r),
        None => Ok(out),
    }
}

/// Follow a conditional directive (`word`) in `open`; a refusal pending on
/// a branch that closes without setting the switch stands.
fn nest(
    word: Option<&str>,
    branch: (bool, Option<Refusal>),
    open: &mut Vec<(bool, Option<Refusal>)>,
    refusals: &mut Vec<Refusal>,
) {
    match word {
        Some("if" | "ifdef" | "ifndef") => open.push(branch),
        Some(w @ ("elif" | "else" | "endif")) => {
            if let Some((_, Some(r))) = open.pop() {
                refusals.push(r);
            }
            if w != "endif" {
                open.push(branch);
            }
        }
        _ => {}
    }
}

/// The switch to the DPP reduction set to 1 (or, fixed, to
/// [`switch_value`]) where no decision a rule knows sets it: the 1 is what
/// the fix makes portable.
fn switch(
    text: &[u8],
    start: usize,
    end: usize,
    open: &[(bool, Option<Refusal>)],
) -> Option<Decision> {
    if open.last().is_some_and(|(known, _)| *known) {
        return None;
    }
    let norm = normalized(&text[start..end]);
    let value = norm.strip_prefix(SWITCH)?.trim();
    let fixed = value == switch_value();
    if value != "1" && !fixed {
        return None;
    }
    let at = start + memchr::memmem::rfind(&text[start..end], value.as_bytes())?;
    Some(Decision {
        line_start: start,
        kind: Kind::Switch { value: at },
        fixed,
    })
}

/// The end (at its newline, or the text's end) of the logical line that
/// starts at `start`, following backslash continuations; and how many
/// physical lines it has.
fn logical_line(text: &[u8], start: usize) -> (usize, usize) {
    let mut i = start;
    let mut lines = 1;
    loop {
        let Some(n) = memchr::memchr(b'\n', &text[i..]) else {
            return (text.len(), lines);
        };
        let end = i + n;
        let body = &text[start..end];
        if body.trim_ascii_end().ends_with(b"\\")
            && text[start..].trim_ascii_start().starts_with(b"#")
        {
            i = end + 1;
            lines += 1;
        } else {
            return (end, lines);
        }
    }
}

/// The directive with continuations joined and white space folded.
fn normalized(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw)
        .replace("\\\r\n", " ")
        .replace("\\\n", " ");
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The known shape: `#if defined(__AMDGCN__) && !( TERM || TERM ... )`
/// where each term is `MIO_BN_GFX<n>X`, `(defined(MIO_BN_GFX<n>X) &&
/// MIO_BN_GFX<n>X)`, one of `ARCH_TERMS`, or, once fixed, [`TERM`].
fn decision(text: &[u8], start: usize, end: usize) -> Option<Decision> {
    let norm = normalized(&text[start..end]);
    let expr = norm
        .strip_prefix('#')?
        .trim_start()
        .strip_prefix("if")?
        .trim_start();
    let inner = expr
        .strip_prefix("defined(__AMDGCN__) && !(")
        .or_else(|| expr.strip_prefix("defined(__AMDGCN__) &&!("))?
        .strip_suffix(')')?;
    let mut fixed = false;
    for term in inner.split("||").map(str::trim) {
        let family = |t: &str| {
            t.strip_prefix("MIO_BN_GFX")
                .and_then(|r| r.strip_suffix('X'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        let guarded = term
            .strip_prefix("(defined(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.split_once(") &&"))
            .is_some_and(|(a, b)| family(a) && a == b.trim());
        let ours = term == TERM;
        fixed |= ours;
        if !(family(term) || guarded || ours || ARCH_TERMS.contains(&term)) {
            return None;
        }
    }
    // The `!(` group's closing paren in the raw bytes.
    let open = start + memchr::memmem::find(&text[start..end], b"!(")? + 1;
    let mut depth = 0i32;
    for (i, b) in text[open..end].iter().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(Decision {
                        line_start: start,
                        kind: Kind::OpenCl { close: open + i },
                        fixed,
                    });
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether the first non-blank line after `end` declares HIP's switch.
fn guards_use_amdgcn(text: &[u8], end: usize) -> bool {
    let rest = text.get(end + 1..).unwrap_or_default();
    let line = rest
        .split(|&b| b == b'\n')
        .find(|l| !l.trim_ascii().is_empty())
        .unwrap_or_default();
    let line = normalized(line);
    line.starts_with("static constexpr bool use_amdgnc")
        || line.starts_with("static constexpr bool use_amdgcn")
}

/// The next place a word starts, at or after a point that only moves
/// forward, as the directives are met in order. A text of many guards and
/// no `#else` then costs one search, not one to its end per guard.
struct Ahead<'a> {
    text: &'a [u8],
    word: &'static [u8],
    /// The last search: where it started, and what it found (the text's
    /// length for nothing).
    last: Option<(usize, usize)>,
}

impl<'a> Ahead<'a> {
    fn new(text: &'a [u8], word: &'static [u8]) -> Ahead<'a> {
        Ahead {
            text,
            word,
            last: None,
        }
    }

    fn next(&mut self, from: usize) -> usize {
        match self.last {
            // Nothing lies between the last search's start and its find.
            Some((searched, found)) if searched <= from && from <= found => found,
            _ => {
                let found =
                    memchr::memmem::find(self.text.get(from..).unwrap_or_default(), self.word)
                        .map_or(self.text.len(), |n| from + n);
                self.last = Some((from, found));
                found
            }
        }
    }
}

/// The HIP guard, pristine (`#ifdef __AMDGCN__`) or fixed; fixed too when
/// the block it opens reads the source series' `MIO_BN_GFX101X`.
fn hip_decision(
    text: &[u8],
    start: usize,
    end: usize,
    (elses, series): &mut (Ahead, Ahead),
) -> Option<Decision> {
    let norm = normalized(&text[start..end]);
    let at = start + memchr::memchr(b'#', &text[start..end])?;
    let block_end = elses.next(end);
    let series = series.next(end) + series.word.len() <= block_end;
    if norm == HIP_GUARD && text[at..].starts_with(HIP_GUARD.as_bytes()) {
        return Some(Decision {
            line_start: start,
            kind: Kind::Hip { guard: at },
            fixed: series,
        });
    }
    (norm == hip_guard()).then_some(Decision {
        line_start: start,
        kind: Kind::Hip { guard: at },
        fixed: true,
    })
}

mod room;
use room::{comments, in_comment, room, take};

#[cfg(test)]
mod tests;
