//! A mistyped verb is answered with the closest one (issue 72, item 7):
//! on 84ed257 `stat` suggested `install` and `sttus` `trust` (clap lists
//! its suggestions lowest confidence first, and the first was said).

use crate::support::BIN;

const VERBS: [&str; 13] = [
    "build",
    "install",
    "rollback",
    "status",
    "verify",
    "doctor",
    "patches",
    "profiles",
    "publish",
    "trust",
    "clean",
    "completions",
    "man",
];

/// Edits from `a` to `b`, a swap of neighbours one edit.
fn edits(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// Every one-edit typo of `verb`: a letter left out, doubled, swapped
/// with the next, or another in its place.
fn typos(verb: &str) -> Vec<String> {
    let c: Vec<char> = verb.chars().collect();
    let mut out = Vec::new();
    for i in 0..c.len() {
        let mut v = c.clone();
        v.remove(i);
        out.push(v.iter().collect());
        let mut v = c.clone();
        v.insert(i, c[i]);
        out.push(v.iter().collect());
        let mut v = c.clone();
        v[i] = if c[i] == 'x' { 'q' } else { 'x' };
        out.push(v.iter().collect());
        if i + 1 < c.len() {
            let mut v = c.clone();
            v.swap(i, i + 1);
            out.push(v.iter().collect());
        }
    }
    out.sort();
    out.dedup();
    out.retain(|t: &String| !VERBS.contains(&t.as_str()) && t.len() > 1);
    out
}

/// The verb the help line suggests for `typed`.
fn suggested(typed: &str) -> Option<String> {
    let out = std::process::Command::new(BIN).arg(typed).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{typed}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let help = err.lines().find(|l| l.starts_with("help: "))?;
    let s = help.split("did you mean `").nth(1)?;
    Some(s.split('`').next()?.to_owned())
}

#[test]
fn the_issues_typos_suggest_status() {
    for typed in ["stat", "statuss", "stauts", "sttus"] {
        assert_eq!(suggested(typed).as_deref(), Some("status"), "{typed}");
    }
}

/// Each one-edit typo of each verb suggests a verb one edit away (the
/// verb meant, or another as close), never a farther one; and a
/// suggestion is made.
#[test]
fn every_one_edit_typo_of_every_verb_suggests_the_closest() {
    let mut checked = 0;
    for verb in VERBS {
        for typed in typos(verb) {
            let got = suggested(&typed);
            let best = VERBS.iter().map(|v| edits(&typed, v)).min().unwrap();
            match got {
                Some(s) => assert_eq!(
                    edits(&typed, &s),
                    best,
                    "`{typed}` (a typo of {verb}) suggested `{s}`"
                ),
                None => panic!("`{typed}` (a typo of {verb}) suggested nothing"),
            }
            checked += 1;
        }
    }
    assert!(checked > 300, "{checked}");
}
