//! Where a same-length edit finds its room: the text's comments, whose
//! runs of decoration and spaces can shrink without changing what the
//! compiler sees.

use std::ops::Range;

/// The byte ranges of comments (`//` to the line's end, `/* */`), with
/// string and character literals skipped so that a quote cannot open one.
pub(super) fn comments(text: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match (text[i], text.get(i + 1)) {
            (b'/', Some(b'/')) => {
                let end = memchr::memchr(b'\n', &text[i..]).map_or(text.len(), |n| i + n);
                out.push(i..end);
                i = end;
            }
            (b'/', Some(b'*')) => {
                let end = memchr::memmem::find(&text[i + 2..], b"*/")
                    .map_or(text.len(), |n| i + 2 + n + 2);
                out.push(i..end);
                i = end;
            }
            (q @ (b'"' | b'\''), _) => {
                i += 1;
                while i < text.len() && text[i] != q && text[i] != b'\n' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// `comments` are in order and do not overlap: a binary search, so a
/// text of many comments and many directives stays linear.
pub(super) fn in_comment(comments: &[Range<usize>], at: usize) -> bool {
    let i = comments.partition_point(|c| c.end <= at);
    comments.get(i).is_some_and(|c| c.contains(&at))
}

/// Byte ranges of comments that can go without changing what the compiler
/// sees: each run of two or more of the same decoration character, or of
/// spaces, keeps one.
pub(super) fn room(text: &[u8], comments: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for c in comments {
        // Inside the delimiters only: `/*`, `*/` and `//` stay whole.
        let body = if text[c.start + 1] == b'*' {
            c.start + 2..c.end.saturating_sub(2).max(c.start + 2)
        } else {
            c.start + 2..c.end
        };
        let mut i = body.start;
        while i < body.end {
            let b = text[i];
            let mut j = i;
            while j < body.end && text[j] == b {
                j += 1;
            }
            let keep = match b {
                b'*' | b'=' | b'-' | b'#' | b'/' | b'~' | b'_' | b'+' | b' ' => 1,
                _ => j - i,
            };
            if j - i > keep {
                runs.push(i + keep..j);
            }
            i = j;
        }
    }
    runs
}

/// `needed` bytes of `runs`, from the longest runs first; sorted by
/// position.
pub(super) fn take(mut runs: Vec<Range<usize>>, needed: usize) -> Vec<Range<usize>> {
    runs.sort_by_key(|r| std::cmp::Reverse(r.len()));
    let mut left = needed;
    let mut cuts = Vec::new();
    for r in runs {
        if left == 0 {
            break;
        }
        let take = r.len().min(left);
        cuts.push(r.end - take..r.end);
        left -= take;
    }
    cuts.sort_by_key(|r| r.start);
    cuts
}
