use std::collections::BTreeMap;

use anyhow::Result;

use super::*;
use crate::builder::profile::SeriesDir;

fn base_of(files: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>> + use<> {
    let map: BTreeMap<String, String> = files
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |p| Ok(map.get(p).cloned())
}

const ORIG: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n";

fn modify_patch() -> PatchFile {
    let text = format!(
        "Subject: [PATCH] change three\n\nWhy.\n\nMarker: [RDNA1 PATCH] t\n---\n{}",
        render_diff("a.txt", Some(ORIG), Some(&ORIG.replace("three", "THREE")))
    );
    PatchFile::parse("0001-t.patch", text).unwrap()
}

#[test]
fn header_fields() {
    let p = modify_patch();
    assert_eq!(p.subject, "change three");
    assert_eq!(p.marker.as_deref(), Some("[RDNA1 PATCH] t"));
    assert_eq!(p.files, vec!["a.txt"]);
}

#[test]
fn applies_at_an_offset_and_detects_already_applied() {
    let p = modify_patch();
    let shifted = format!("zero\nzero\n{ORIG}");
    let base = base_of(&[("a.txt", &shifted)]);
    let mut ws = Workspace::new(&base);
    assert_eq!(ws.apply(&p).unwrap(), ApplyOutcome::Applied);
    assert!(
        ws.get("a.txt")
            .unwrap()
            .unwrap()
            .contains("zero\nzero\none\ntwo\nTHREE")
    );
    assert_eq!(ws.apply(&p).unwrap(), ApplyOutcome::AlreadyApplied);
}

#[test]
fn failure_names_patch_file_and_hunk() {
    let p = modify_patch();
    let base = base_of(&[("a.txt", "something else entirely\n")]);
    let mut ws = Workspace::new(&base);
    let err = ws.apply(&p).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("0001-t.patch"), "{msg}");
    assert!(msg.contains("a.txt"), "{msg}");
    assert!(msg.contains("hunk #1 (@@ -1,6 +1,6 @@)"), "{msg}");
}

#[test]
fn paths_outside_the_tree_are_rejected() {
    for bad in ["../x", "/etc/passwd", ".git/config", "a/../../b"] {
        let text =
            format!("diff --git a/{bad} b/{bad}\n--- a/{bad}\n+++ b/{bad}\n@@ -1 +1 @@\n-a\n+b\n");
        let err = PatchFile::parse("evil.patch", text).unwrap_err();
        assert!(
            format!("{err:#}").contains("outside the source tree"),
            "{bad}: {err:#}"
        );
    }
}

#[test]
fn a_mode_change_an_empty_change_or_a_symlink_is_refused() {
    let cases = [
        (
            "diff --git a/a.sh b/a.sh\nold mode 100644\nnew mode 100755\n",
            "patch p: the change to a.sh has no hunks (only its mode changes, which is not supported); it would record a marker for a change that is not there",
        ),
        (
            "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
            "patch p: link is a symlink in the patch; only regular text files can be patched",
        ),
    ];
    for (diff, want) in cases {
        let text = format!("Subject: x\n\nMarker: [RDNA1 PATCH] x\n---\n{diff}");
        let err = PatchFile::parse("p", text).unwrap_err();
        assert_eq!(format!("{err:#}"), want);
    }
}

#[test]
fn create_and_refresh_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), ORIG.replace("three", "THREE")).unwrap();
    std::fs::write(dir.path().join("series"), "0001-t.patch\n").unwrap();
    std::fs::write(dir.path().join("0001-t.patch"), &modify_patch().text).unwrap();
    let series = Series::load(&SeriesDir::Disk(dir.path().to_owned())).unwrap();
    // The user edits the tree further and adds a new file to the patch.
    std::fs::write(
        dir.path().join("a.txt"),
        ORIG.replace("three", "3").replace("six", "6"),
    )
    .unwrap();
    std::fs::write(dir.path().join("new.h"), "#pragma once\n").unwrap();
    let base = base_of(&[("a.txt", ORIG)]);
    let text = refresh(
        &series,
        "0001-t.patch",
        dir.path(),
        &base,
        &["new.h".into()],
    )
    .unwrap();
    assert!(text.starts_with("Subject: [PATCH] change three"), "{text}");
    let p = PatchFile::parse("0001-t.patch", text).unwrap();
    assert_eq!(p.files, vec!["a.txt", "new.h"]);
    let mut ws = Workspace::new(&base);
    ws.apply(&p).unwrap();
    assert_eq!(
        ws.get("a.txt").unwrap().unwrap(),
        ORIG.replace("three", "3").replace("six", "6")
    );
    assert_eq!(ws.get("new.h").unwrap().unwrap(), "#pragma once\n");
}
