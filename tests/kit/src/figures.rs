//! FIGURES.md and the docs' quotes of it, read one way for the two that
//! must agree: `cargo xtask figures`, which measures the figures and
//! rewrites the quotes, and the test that holds the docs to them.
//!
//! A doc quotes a figure as its value followed by a marker,
//! `8 min 40 s<!-- figure:install-time -->`: the marker renders as
//! nothing, and the value is the run of `NUMBER UNIT` pairs just before
//! it, so a quote edited by hand (or left behind by a new measurement)
//! is found without any other punctuation in the prose.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The start of a quote's marker; the key and ` -->` follow.
pub const MARK: &str = "<!-- figure:";

/// The units a quoted value may use, as the docs write them.
const UNITS: &[&str] = &["ms", "s", "min", "h", "kB", "MB", "GB", "KiB", "MiB", "GiB"];

/// One quote of a figure in a doc: its key, the value as written, and
/// where that value lies (whitespace between its words may be a line
/// break).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quote {
    pub key: String,
    pub value: String,
    pub span: Range<usize>,
}

/// Every quote in `doc`, in order. A marker with no value before it is a
/// quote whose value is empty.
pub fn quotes(doc: &str) -> Vec<Quote> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = doc[from..].find(MARK).map(|i| i + from) {
        let rest = &doc[i + MARK.len()..];
        let Some(end) = rest.find("-->") else { break };
        let key = rest[..end].trim().to_owned();
        let start = value_start(&doc[..i]);
        out.push(Quote {
            key,
            value: doc[start..i]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            span: start..i,
        });
        from = i + MARK.len() + end;
    }
    out
}

/// Where the run of `NUMBER UNIT` pairs that ends `text` begins (the
/// length of `text` when none does).
fn value_start(text: &str) -> usize {
    let mut start = text.len();
    let mut rest = text;
    while let Some((unit_at, unit)) = last_word(rest) {
        if !UNITS.contains(&unit) {
            break;
        }
        let Some((word_at, word)) = last_word(&rest[..unit_at]) else {
            break;
        };
        // The number may follow punctuation that opens the quote: "(300".
        let num_at = word_at + word.len()
            - word
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .count();
        if !is_number(&rest[num_at..word_at + word.len()]) {
            break;
        }
        start = num_at;
        if num_at != word_at {
            break;
        }
        rest = &rest[..num_at];
    }
    start
}

/// The last word of `text` and where it starts, when whitespace (or the
/// start of the text) is before it; `None` when `text` ends in anything
/// but a word.
fn last_word(text: &str) -> Option<(usize, &str)> {
    let trimmed = text.trim_end();
    let at = trimmed
        .rfind(char::is_whitespace)
        .map(|i| i + 1)
        .unwrap_or(0);
    let word = &trimmed[at..];
    (!word.is_empty()).then_some((at, word))
}

fn is_number(word: &str) -> bool {
    !word.is_empty()
        && word.chars().all(|c| c.is_ascii_digit() || c == '.')
        && word.chars().filter(|c| *c == '.').count() <= 1
        && !word.starts_with('.')
        && !word.ends_with('.')
}

/// A value is one or more `NUMBER UNIT` pairs, single-spaced.
pub fn is_value(value: &str) -> bool {
    let words: Vec<&str> = value.split(' ').collect();
    !words.is_empty()
        && words.len().is_multiple_of(2)
        && words
            .chunks(2)
            .all(|p| is_number(p[0]) && UNITS.contains(&p[1]))
}

/// The figures of FIGURES.md's table: key -> value. Its rows are
/// `` | `key` | value | ... | ``.
pub fn table(figures_md: &str) -> BTreeMap<String, String> {
    figures_md
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.split(" | ");
            let key = cells.next()?.strip_suffix('`')?;
            let value = cells.next()?;
            Some((key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// The docs that may quote a figure: README.md, DEVELOPING.md and every
/// page of docs/, under the repository `root`.
pub fn docs(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md"), root.join("DEVELOPING.md")];
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        let mut pages: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        pages.sort();
        out.extend(pages);
    }
    out
}

/// `doc` with every quote of a key in `figures` set to its value.
pub fn rewrite(doc: &str, figures: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut at = 0;
    for q in quotes(doc) {
        if let Some(v) = figures.get(&q.key) {
            out.push_str(&doc[at..q.span.start]);
            out.push_str(v);
            at = q.span.end;
        }
    }
    out.push_str(&doc[at..]);
    out
}

/// Where README's block of doctor's first lines starts and ends (a
/// failing torch, then the same torch fixed), written by `cargo xtask
/// figures` from the in-place demo and held to the binary's output by a
/// test.
pub const ANSWER_START: &str = "<!-- answer: written by `cargo xtask figures` -->";
pub const ANSWER_END: &str = "<!-- /answer -->";

/// The lines of a doctor report the block shows: the verdict (the first
/// line: the answer) and the kernels row's first line (what fails, or
/// that it is fixed), as printed.
pub fn answer_lines(report: &str) -> Vec<&str> {
    let mut lines = report.lines();
    let verdict = lines.next().into_iter();
    verdict
        .chain(lines.find(|l| l.get(6..).is_some_and(|r| r.starts_with("kernels "))))
        .collect()
}

/// README's block from doctor's report before the fix and after it.
pub fn answer_block(before: &str, after: &str) -> String {
    format!(
        "{ANSWER_START}\n```text\n$ rdna1-patch doctor\n{}\n$ rdna1-patch install --into-torch\n$ rdna1-patch doctor\n{}\n```\n{ANSWER_END}",
        answer_lines(before).join("\n"),
        answer_lines(after).join("\n")
    )
}

/// The block in `readme`, markers included; `None` when it has none.
pub fn find_answer(readme: &str) -> Option<&str> {
    let start = readme.find(ANSWER_START)?;
    let end = readme[start..].find(ANSWER_END)? + start + ANSWER_END.len();
    Some(&readme[start..end])
}

/// `readme` with its block replaced by `block`.
pub fn set_answer(readme: &str, block: &str) -> Option<String> {
    let old = find_answer(readme)?;
    Some(readme.replacen(old, block, 1))
}

/// `text` with what differs from run to run made plain: a time like
/// `4.37 s` becomes `N.N s`, a date-time `2026-11-28T10:34:31Z` `DATE`.
/// Everything else (counts, targets, names) must be as printed.
pub fn steady(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split(' ')
                .map(|w| {
                    let open = w.trim_start_matches('(');
                    let head = &w[..w.len() - open.len()];
                    let core = open.trim_end_matches([':', ',', ')', ';']);
                    let tail = &open[core.len()..];
                    let digits = |c: char| c.is_ascii_digit();
                    if core.len() >= 20
                        && core.contains('T')
                        && core.ends_with('Z')
                        && core.starts_with(digits)
                    {
                        format!("{head}DATE{tail}")
                    } else if core.contains('.') && is_number(core) {
                        format!("{head}N.N{tail}")
                    } else {
                        w.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_is_the_pairs_before_its_marker() {
        let doc = "about 9 minutes, most of it compiling: 8 min\n40 s<!-- figure:install-time -->; \
                   the demo took 37 s<!-- figure:demo-time --> and 2.5 x<!-- figure:odd -->";
        let q = quotes(doc);
        assert_eq!(q[0].key, "install-time");
        assert_eq!(q[0].value, "8 min 40 s");
        assert_eq!(q[1].value, "37 s");
        assert_eq!(q[2].value, "", "x is no unit: nothing is taken");
        let q = quotes("the target (300 MB<!-- figure:t --> after");
        assert_eq!((q[0].value.as_str(), q[0].span.start), ("300 MB", 12));
    }

    #[test]
    fn rewriting_changes_only_the_values_known() {
        let doc = "took 37 s<!-- figure:demo-time --> and 5.0 GB<!-- figure:other -->.";
        let figures = BTreeMap::from([("demo-time".to_owned(), "41 s".to_owned())]);
        assert_eq!(
            rewrite(doc, &figures),
            "took 41 s<!-- figure:demo-time --> and 5.0 GB<!-- figure:other -->."
        );
    }

    #[test]
    fn values_are_number_unit_pairs() {
        assert!(is_value("8 min 40 s"));
        assert!(is_value("5.0 GB"));
        assert!(!is_value("8 min 40"));
        assert!(!is_value("about 9 min"));
        assert!(!is_value(""));
    }

    #[test]
    fn the_answer_block_keeps_the_verdict_and_the_kernels_row() {
        let before = "verdict: 1 problem to fix\nok    torch     x\nFAIL  kernels   2 of 2 fail (4.37 s)\ndetail\nok    gpu       y\n";
        let after = "verdict: no problem found\nok    kernels   fixed by transaction 1 of 2026-11-28T10:34:31Z: 0 of 2\n";
        let block = answer_block(before, after);
        assert!(block.contains("verdict: 1 problem to fix\nFAIL  kernels   2 of 2 fail (4.37 s)\n$ rdna1-patch install"), "{block}");
        let readme = format!("top\n{}\nbottom\n", answer_block("verdict: old\n", ""));
        let new = set_answer(&readme, &block).unwrap();
        assert_eq!(find_answer(&new), Some(block.as_str()));
        assert_eq!(
            steady(&block),
            steady(&answer_block(
                &before.replace("4.37", "10.5"),
                &after.replace("10:34:31", "09:00:00")
            ))
        );
        assert_ne!(steady(&block), steady(&block.replace("2 of 2", "1 of 2")));
    }
}
