//! One exit-status table (issue 72, item 3): `--help` and docs/commands.md
//! give the same one, and every verb follows it.

use crate::in_place::{install, torch_with_code};
use crate::support::{BIN, Run, Sandbox};

/// What each status means, as the table says it: the words each must have.
const TABLE: [(i32, &str); 7] = [
    (0, "0 done, every check passed"),
    (1, "1 a check found a problem"),
    (2, "2 bad usage, or the command could not do its job"),
    (3, "3 nothing to check and nothing failed"),
    (130, "130 interrupted (Ctrl-C)"),
    (143, "143 terminated (SIGTERM)"),
    (129, "129 hung up (SIGHUP)"),
];

fn words(text: &str) -> String {
    text.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn help_and_the_docs_give_the_same_table() {
    let help = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .unwrap();
    let help = words(&String::from_utf8_lossy(&help.stdout));
    let docs = words(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/commands.md"),
        )
        .unwrap(),
    );
    for (_, says) in TABLE {
        assert!(help.contains(says), "--help lacks {says:?}:\n{help}");
        assert!(docs.contains(says), "docs/commands.md lacks {says:?}");
    }
}

#[track_caller]
fn exits(run: &Run, code: i32, what: &str) {
    assert_eq!(
        run.code,
        Some(code),
        "{what}: the table says {code}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    let known = TABLE.iter().any(|(c, _)| Some(*c) == run.code);
    assert!(known, "{what}: a status the table does not give");
}

/// Every verb, where each status of the table is cheap to reach.
#[test]
fn every_verb_follows_the_table() {
    let sb = Sandbox::new();
    let cases: [(&[&str], i32); 17] = [
        (&["doctor", "--python", "python3"], 1),
        (&["verify"], 3),
        // No torch is a failing torch row: a problem found, not nothing
        // checked (on 84ed257 --help said 3 here, the run gave 1).
        (&["verify", "--smoke"], 1),
        (&["status"], 3),
        (
            &["install", "--into-torch", "--torch-dir", "/nonexistent"],
            2,
        ),
        (&["rollback"], 2),
        (&["patches", "list"], 0),
        (&["patches", "check", "--source", "/nonexistent-src"], 2),
        (&["profiles", "list"], 0),
        (&["profiles", "show", "rocm-9"], 2),
        (&["trust", "not-a-key"], 2),
        (&["clean", "--dry-run"], 0),
        (&["completions", "bash"], 0),
        (&["man"], 0),
        (&["publish", "/nonexistent-registry-dir"], 2),
        (&["bogus-verb"], 2),
        (&["build", "--bogus"], 2),
    ];
    for (args, code) in cases {
        let run = sb.run(args);
        exits(&run, code, &args.join(" "));
    }
    let dry = sb.build(&["--dry-run"]);
    exits(&dry, 0, "build --dry-run");
}

/// After a rollback of the only install, verify and status say that
/// nothing of this tool's is installed and point at doctor (exit 3), as
/// before any install: on 84ed257 both said "no problem found" (exit 0)
/// while doctor said the kernels fail again.
#[test]
fn after_a_rollback_verify_and_status_point_at_doctor() {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    torch_with_code(&sb, &["gfx1010"]);
    install(&sb, &[]).ok();
    exits(&sb.verify(&[]), 0, "verify after install");
    let status = sb.run_with_state(&["status", "--prefix", sb.prefix.to_str().unwrap()], &[]);
    exits(&status, 0, "status after install");
    sb.rollback(&[]).ok();
    let doctor = format!("`rdna1-patch doctor --state-dir {}`", sb.state());
    for (what, run) in [
        ("verify", sb.verify(&[])),
        (
            "status",
            sb.run_with_state(&["status", "--prefix", sb.prefix.to_str().unwrap()], &[]),
        ),
    ] {
        exits(&run, 3, &format!("{what} after rollback"));
        let first = run.stdout.lines().next().unwrap_or_default();
        assert!(
            first.contains("nothing of rdna1-patch's is installed") && first.contains(&doctor),
            "{what} after rollback: {first}"
        );
    }
}
