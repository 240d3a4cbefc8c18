//! `verify --smoke --report FILE`: the Markdown report a user pastes into
//! an issue, as docs/verify.md shows it, and where it cannot be written.

use std::path::Path;

use crate::battery::{torch_not_fixed, verify_torch};
use crate::smoke::{installed_on_rdna1, smoke};

/// What differs between two runs of one report: the build's commit and
/// date, hashes, times.
fn steady_text(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut line = line.to_owned();
        if let Some(at) = line.find("rdna1-patch 0.1.0 (")
            && let Some(end) = line[at..].find(')')
        {
            line.replace_range(at + "rdna1-patch 0.1.0 (".len()..at + end, "..");
        }
        let mut masked = String::new();
        let mut run = String::new();
        let flush = |run: &mut String, masked: &mut String| {
            // Hashes (12 hex digits or more), and the digits of times.
            if run.len() >= 12 && run.chars().all(|c| c.is_ascii_hexdigit()) {
                masked.push_str("<hex>");
            } else {
                masked.push_str(run);
            }
            run.clear();
        };
        for c in line.chars() {
            if c.is_ascii_alphanumeric() {
                run.push(c);
            } else {
                flush(&mut run, &mut masked);
                masked.push(c);
            }
        }
        flush(&mut run, &mut masked);
        // "first run 0.004 s, second 0.000 s": the times.
        let mut words: Vec<String> = masked.split(' ').map(str::to_owned).collect();
        for i in 1..words.len() {
            if (words[i] == "s" || words[i].starts_with("s,") || words[i].starts_with("s;"))
                && words[i - 1].contains('.')
                && words[i - 1].chars().all(|c| c.is_ascii_digit() || c == '.')
            {
                words[i - 1] = "T".to_owned();
            }
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

/// The report example of docs/verify.md: the ````markdown block after
/// the line that names this test.
fn documented_report() -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/verify.md"))
        .unwrap();
    let at = doc
        .find("the_markdown_report_is_the_one_docs_verify_md_shows")
        .expect("docs/verify.md names the test that checks its example");
    let rest = &doc[at..];
    let start = rest.find("````markdown\n").expect("a ````markdown block") + "````markdown\n".len();
    let end = rest[start..].find("\n````").unwrap();
    rest[start..start + end + 1].to_owned()
}

#[test]
fn the_markdown_report_is_the_one_docs_verify_md_shows() {
    let sb = installed_on_rdna1();
    let root = sb.root.display().to_string();
    let report = sb.root.join("smoke.md");
    // A file of that name is replaced, as cargo and pip would.
    std::fs::write(&report, "an old report").unwrap();
    let misbehave =
        "lstm-fp32=nocode,scatter-add=crash,repr=wrong,bn-eval-16x16-fp16-nchw=times=1.02";
    let run = smoke(
        &sb,
        &["--timeout", "20", "--report", "smoke.md"],
        &[("FAKE_TORCH_SMOKE", misbehave), ("HOME", root.as_str())],
    )
    .check_fails();
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        !text.contains(&root),
        "the sandbox (home) is named:\n{text}"
    );
    // The docs show a run with no options; the sandbox's carries its
    // state dir and prefix, which the printed command repeats.
    let text = text.replace(" --state-dir ~/state --prefix ~/prefix", "");
    assert_eq!(
        steady_text(&text),
        steady_text(&documented_report()),
        "docs/verify.md's example is not what the binary writes; it wrote:\n{text}\nstdout:\n{}",
        run.stdout
    );
    // Nothing else is left beside it: the temp file was renamed.
    let names: Vec<String> = std::fs::read_dir(&sb.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".rdna1-patch-"))
        .collect();
    assert_eq!(names, Vec::<String>::new());
}

#[test]
fn a_report_that_cannot_be_written_is_refused_before_the_battery() {
    let sb = torch_not_fixed();
    let dir = sb.root.join("reports");
    std::fs::create_dir_all(&dir).unwrap();
    verify_torch(&sb, &["--report", dir.to_str().unwrap()], &[]).fails_with(
        "error: --report [..]/reports is a directory
help: name a file, e.g. --report [..]/reports/smoke.md",
    );
    let missing = sb.root.join("no-such-dir/smoke.md");
    verify_torch(&sb, &["--report", missing.to_str().unwrap()], &[]).fails_with(
        "error: cannot write the report [..]/no-such-dir/smoke.md: [..]/no-such-dir is not a directory
help: create it first (mkdir -p [..]/no-such-dir), or name a file in a directory you can write to, e.g. --report ~/smoke.md",
    );
    // A directory the user may not write to (root without the
    // capabilities that let it ignore permission bits, as run_unprivileged
    // runs it).
    let closed = sb.root.join("closed");
    std::fs::create_dir_all(&closed).unwrap();
    std::fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let torch = sb.root.join("site/torch");
    let file = closed.join("smoke.md");
    sb.run_unprivileged(&[
        "verify",
        "--smoke",
        "--torch-dir",
        torch.to_str().unwrap(),
        "--prefix",
        sb.prefix.to_str().unwrap(),
        "--report",
        file.to_str().unwrap(),
    ])
    .fails_with(
        "error: cannot write the report [..]/closed/smoke.md: you may not create files in [..]/closed
help: name a file in a directory you can write to, e.g. --report ~/smoke.md",
    );
    let ro = sb.root.join("read-only");
    let Some(_mount) = crate::support::Tmpfs::mount(&ro, "1M") else {
        return;
    };
    let remounted = std::process::Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&ro)
        .status()
        .unwrap();
    assert!(remounted.success());
    let file = ro.join("smoke.md");
    let run = verify_torch(&sb, &["--report", file.to_str().unwrap()], &[]);
    assert!(
        !run.stdout.contains("smoke battery"),
        "the battery ran:\n{}",
        run.stdout
    );
    run.fails_with(
        "error: cannot write the report [..]/read-only/smoke.md: [..]/read-only is on a read-only file system
help: name a file in a directory you can write to, e.g. --report ~/smoke.md",
    );
    // A disk that fills while the battery runs (full already: the check
    // before it makes an empty file, which takes no room): the write after
    // it says so, in words, with the free space.
    let full = sb.root.join("full");
    let Some(_full) = crate::support::Tmpfs::full(&full, "64k") else {
        return;
    };
    let file = full.join("smoke.md");
    verify_torch(&sb, &["--report", file.to_str().unwrap()], &[]).fails_with(
        "error: cannot write the report [..]/full/smoke.md: no space left in [..]/full
help: the file system of [..]/full is full (0 B free): free space there, or choose another place on another disk (--report FILE)",
    );
}
