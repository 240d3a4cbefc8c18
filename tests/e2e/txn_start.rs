//! A transaction that cannot start leaves nothing open (issue 72, item
//! 4): a full or read-only state dir before the first write closes it as
//! aborted or never opens it, status and rollback work afterwards, and
//! the error names each path once.

use crate::in_place::{install, torch_with_code};
use crate::support::{Run, Sandbox, Tmpfs};

fn sandbox() -> (Sandbox, Vec<u8>, std::path::PathBuf) {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let torch = torch_with_code(&sb, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    (sb, original, torch.miopen())
}

/// After a failed install: torch as it was, status says nothing is
/// installed (never "unfinished"), and rollback's list and rollback
/// itself answer without asking for space.
#[track_caller]
fn nothing_left_open(sb: &Sandbox, failed: &Run, original: &[u8], lib: &std::path::Path, ro: bool) {
    assert_eq!(failed.code, Some(2), "{}", failed.stderr);
    assert!(
        failed
            .stderr
            .lines()
            .last()
            .unwrap_or("")
            .starts_with("help: "),
        "no help line:\n{}",
        failed.stderr
    );
    assert_eq!(std::fs::read(lib).unwrap(), original, "torch changed");
    let status = sb.run_with_state(&["status"], &[]);
    assert_eq!(status.code, Some(3), "{}\n{}", status.stdout, status.stderr);
    assert!(!status.stdout.contains("unfinished"), "{}", status.stdout);
    sb.rollback(&["--list"]).ok();
    let rollback = sb.rollback(&[]);
    if ro {
        // A read-only state dir takes no rollback either: said so, with
        // what to do.
        rollback.fails().says("read-only file system");
        return;
    }
    let said = format!("{}{}", rollback.stdout, rollback.stderr);
    assert!(
        !said.contains("space") && !said.contains("unfinished") && !said.contains("read-only"),
        "rollback after the failed install:\n{said}"
    );
}

/// An 8 KiB state dir: the journal fits, the backup does not. On 84ed257
/// transaction 1 stayed `begun`: status exited 1 ("unfinished") and
/// rollback failed until space was freed.
#[test]
fn a_full_state_dir_leaves_no_transaction_open() {
    let (sb, original, lib) = sandbox();
    let state = std::path::PathBuf::from(sb.state());
    let Some(_mount) = Tmpfs::mount(&state, "8k") else {
        return;
    };
    let run = install(&sb, &[]);
    nothing_left_open(&sb, &run, &original, &lib, false);
}

#[test]
fn a_read_only_state_dir_leaves_no_transaction_open() {
    let (sb, original, lib) = sandbox();
    let state = std::path::PathBuf::from(sb.state());
    let Some(_mount) = Tmpfs::read_only(&state) else {
        return;
    };
    let run = install(&sb, &[]);
    nothing_left_open(&sb, &run, &original, &lib, true);
}

/// A full --prefix: the error names the library where it was to go, once;
/// on 84ed257 it read `PREFIX/.rdna1-patch-staging/PREFIX/lib/...`.
#[test]
fn a_full_prefix_is_named_once() {
    let (sb, original, lib) = sandbox();
    let Some(_mount) = Tmpfs::full(&sb.prefix, "64k") else {
        return;
    };
    let run = install(&sb, &[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        !run.stderr.contains(".rdna1-patch-staging"),
        "{}",
        run.stderr
    );
    let prefix = sb.prefix.display().to_string();
    for line in run.stderr.lines().filter(|l| l.starts_with("error: ")) {
        assert!(
            line.matches(&prefix).count() <= 1,
            "the prefix twice in one path: {line}"
        );
    }
    assert_eq!(std::fs::read(&lib).unwrap(), original);
}
