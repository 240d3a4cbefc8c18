//! First contact's rough edges: each said plainly, in a whole message.

use crate::support::Sandbox;

#[test]
fn install_says_it_has_no_json_instead_of_a_parser_riddle() {
    let sb = Sandbox::new();
    let run = sb.run(&["install", "--into-torch", "--json"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    // A --json run that fails still prints its error as JSON.
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        doc["error"]["message"],
        "install has no JSON report: it says what it does as it goes"
    );
    assert_eq!(
        doc["error"]["help"],
        "run it without --json; then `rdna1-patch status --json` reports what was installed, and `rdna1-patch verify --json` checks it"
    );
}

#[test]
fn every_argument_of_export_and_completions_is_described() {
    let sb = Sandbox::new();
    let export = sb.run(&["profiles", "export", "--help"]).ok();
    for line in [
        "  <NAME>  The built-in profile to export (`profiles list` names them)",
        "  <DIR>   The directory to write NAME.toml and its series into (made if missing)",
    ] {
        assert!(export.stdout.contains(line), "{line}\n{}", export.stdout);
    }
    let completions = sb.run(&["completions", "--help"]).ok();
    assert!(
        completions
            .stdout
            .contains("  <SHELL>  The shell to complete for"),
        "{}",
        completions.stdout
    );
}

#[test]
fn publish_names_the_missing_build_before_any_key() {
    let sb = Sandbox::new();
    let prefix = sb.root.join("nothing-here");
    let dir = sb.root.join("layout");
    sb.run(&[
        "publish",
        &dir.display().to_string(),
        "--prefix",
        &prefix.display().to_string(),
    ])
    .fails_with(&format!(
        "error: no build to publish: [..]{}[..]
help: run `rdna1-patch build miopen[..]` first, or point --prefix at the prefix it installed to",
        prefix.display()
    ));
}

#[test]
fn a_zero_time_limit_is_refused_by_the_parser() {
    let sb = Sandbox::new();
    let run = sb.run(&["verify", "--smoke", "--timeout", "0"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.starts_with(
            "error: invalid value '0' for '--timeout <SECS>': 0 seconds would stop every check before it starts: give 1 or more"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn a_dry_run_from_a_registry_shows_the_pull_not_a_compile() {
    let sb = Sandbox::new();
    let run = sb.run(&[
        "build",
        "--from",
        "oci://127.0.0.1:1/you/miopen-rdna1",
        "--dry-run",
        // No torch here to choose for: the profile of the build to pull.
        "--profile",
        "rocm-6.2.4",
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let want = [
        "profile:   rocm-6.2.4 (built-in)",
        "compile:   never: --from pulls the build or stops (leave out --from for the local build's plan)",
        "install:   [..]/rdna1-patch/rocm-6.2.4",
        "key:       [..] (tag rocm-6.2.4-[..])",
        "shared:    would stop: see the error below",
        "stop after: Install",
        "preflight: would stop: see the error below",
        "(dry run: nothing was changed)",
    ];
    assert!(
        lines.len() == want.len()
            && lines
                .iter()
                .zip(want)
                .all(|(l, w)| crate::support::line_matches(w, l)),
        "{}",
        run.stdout
    );
}

/// The binary's size README quotes is the one `cargo xtask figures`
/// measured (the figure binary-size: what `cargo install` installs, which
/// the_docs_quote_the_figures_xtask_measured holds to FIGURES.md), never
/// a figure typed by hand. On 84ed257 it quoted BENCHMARKS.md's 10.6 MiB
/// of target/release where `cargo install` gave 11.7 MiB.
#[test]
fn readme_quotes_the_binary_size_figures_measured() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let figures = std::fs::read_to_string(root.join("FIGURES.md")).unwrap();
    let size = rdna1_testkit::figures::table(&figures)
        .remove("binary-size")
        .expect("FIGURES.md has the binary-size row");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("one {size}<!-- figure:binary-size --> binary")),
        "README quotes another binary size than FIGURES.md's {size}"
    );
}

/// The figures the docs quote beyond the bench (install and demo times,
/// disk use, the binary's size) are the ones `cargo xtask figures`
/// measured and wrote into FIGURES.md: each quote equals its row, and each
/// row is quoted.
#[test]
fn the_docs_quote_the_figures_xtask_measured() {
    use rdna1_testkit::figures;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let md = std::fs::read_to_string(root.join("FIGURES.md")).expect("FIGURES.md");
    let table = figures::table(&md);
    for key in [
        "install-time",
        "install-target",
        "demo-time",
        "demo-in-place-time",
        "demo-in-place-steps",
        "clone-target",
        "binary-size",
    ] {
        assert!(table.contains_key(key), "FIGURES.md has no {key} row");
    }
    let mut quoted = std::collections::BTreeSet::new();
    for doc in figures::docs(root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        for q in figures::quotes(&text) {
            assert_eq!(
                Some(&q.value),
                table.get(&q.key),
                "{} quotes {} as {:?}: run `cargo xtask figures`, or quote FIGURES.md's value",
                doc.display(),
                q.key,
                q.value
            );
            quoted.insert(q.key);
        }
    }
    let rows: std::collections::BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(quoted, rows, "every figure is quoted where the docs say it");
}

#[test]
fn status_refuses_a_state_dir_that_is_not_one() {
    let sb = Sandbox::new();
    let dir = sb.root.join("not-a-state-dir");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let d = dir.display().to_string();
    sb.run(&["status", "--state-dir", &d]).fails_with(&format!(
        "error: {d} is not an rdna1-patch state dir: it holds files, and no transactions, backups or lock
help: pass the --state-dir that install used, or leave it out for the default ($XDG_STATE_HOME/rdna1-patch)"
    ));
    // An empty or missing one is a state dir with nothing in it yet:
    // nothing installed, said as nothing checked (exit 3), no error.
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    let run = sb.run(&["status", "--state-dir", &d]);
    assert_eq!(run.code, Some(3), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.stderr, "");
}
