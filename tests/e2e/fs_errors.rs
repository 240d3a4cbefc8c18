//! Every verb that writes, against each file-system cause a user meets: a
//! read-only mount, a directory another user owns, a full disk. The error
//! names the path and says in words what is wrong, with no `(os error N)`,
//! and its help fits the cause; nothing is left half-made.

use std::path::Path;

use rdna1_testkit::TorchKind;

use crate::other_user::{NOBODY, chown, root_for};
use crate::support::{HIP, Run, Sandbox, Tmpfs};

/// A public key `trust` takes (minisign's format; its secret is nowhere).
const KEY: &str = "RWTczyekpYeyIdQouYpUTRVSJeA9nUlRmiUsH/ETl6iJHhwyIZl/Vs6x";

#[derive(Clone, Copy, PartialEq)]
enum Cause {
    ReadOnly,
    Foreign,
    Full,
}

/// Run each verb so that it writes under `dir`; the error it gives.
fn runs(sb: &Sandbox, dir: &Path, cause: Cause) -> Vec<(&'static str, Run)> {
    let d = dir.display().to_string();
    let run = |args: &[&str], env: Option<(&str, String)>| {
        let mut c = match cause {
            // Root without the capabilities that let it write anywhere:
            // another user's directory is then as closed as it is to a user.
            Cause::Foreign => {
                let mut c = std::process::Command::new("setpriv");
                c.args([
                    "--bounding-set=-dac_override,-dac_read_search,-fowner",
                    crate::support::BIN,
                ]);
                sb.env(&mut c);
                c
            }
            _ => sb.cmd(),
        };
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        Run::from(c.args(args).output().unwrap())
    };
    let prefix = format!("{d}/prefix");
    let build = sb.build_args(&["--prefix", &prefix]);
    let build: Vec<&str> = build.iter().map(String::as_str).collect();
    let built = sb.prefix.display().to_string();
    let state = format!("{d}/state");
    vec![
        ("man", run(&["man", "--install", &format!("{d}/man")], None)),
        (
            "profiles",
            run(
                &["profiles", "export", "rocm-6.4.3", &format!("{d}/prof")],
                None,
            ),
        ),
        (
            "trust",
            run(
                &["trust", KEY],
                Some(("XDG_CONFIG_HOME", format!("{d}/cfg"))),
            ),
        ),
        ("rollback", run(&["rollback", "--state-dir", &state], None)),
        (
            "install",
            run(
                &[
                    "install",
                    "--into-torch",
                    "--prefix",
                    &built,
                    "--state-dir",
                    &state,
                ],
                None,
            ),
        ),
        ("build", run(&build, None)),
    ]
}

/// What each verb's error is, for `dir` and the help `why` gives.
fn expected(verb: &str, d: &str, cause: Cause) -> String {
    let (words, help) = match cause {
        Cause::ReadOnly => (
            "read-only file system",
            format!(
                "{d} is on a read-only file system: choose another place on a writable one, or remount it read-write"
            ),
        ),
        Cause::Foreign => (
            "permission denied",
            format!(
                "{d} belongs to nobody, not you (root): run this as nobody, or choose another place you own"
            ),
        ),
        Cause::Full => ("no space left on device", String::new()),
    };
    let full = |at: &str| {
        format!(
            "help: the file system of {d}/{at} is full (0 B free): free space there, or choose another place on another disk"
        )
    };
    match (verb, cause) {
        ("man", Cause::Full) => format!(
            "error: writing the manual page rdna1-patch.1: cannot write {d}/man/man1/rdna1-patch.1: {words}\n{}",
            full("man/man1")
        ),
        ("man", _) => format!("error: cannot create {d}/man/man1: {words}\nhelp: {help}"),
        ("profiles", Cause::Full) => format!(
            "error: cannot write {d}/prof/[..]: {words}\n{}",
            full("prof")
        ),
        ("profiles", _) => format!("error: cannot create {d}/prof: {words}\nhelp: {help}"),
        ("trust", Cause::Full) => format!(
            "error: cannot write {d}/cfg/rdna1-patch/[..]: {words}\n{}",
            full("cfg/rdna1-patch")
        ),
        ("trust", _) => format!("error: cannot create {d}/cfg/rdna1-patch: {words}\nhelp: {help}"),
        ("rollback" | "install", Cause::Full) => format!(
            "error: cannot write {d}/state/lock: {words}\n{}",
            full("state")
        ),
        ("rollback" | "install", _) => {
            format!("error: cannot create {d}/state: {words}\nhelp: {help}")
        }
        // cmake --install's own words, then the help fitted to them.
        ("build", Cause::Full) => format!(
            "help: the file system of {d}/prefix/.rdna1-patch-staging is full (0 B free): free space there, or choose another place on another disk; the full log is [..]"
        ),
        ("build", _) => format!(
            "error: cannot write to the install prefix {d}/prefix: {d} is not writable ({words})\nhelp: {}",
            help.replace("another place", "another --prefix DIR")
        ),
        _ => unreachable!("{verb}"),
    }
}

fn check(cause: Cause) {
    let sb = Sandbox::built();
    sb.torch(TorchKind::Rocm, HIP);
    let dir = sb.root.join("place");
    let _mount = match cause {
        Cause::ReadOnly => Tmpfs::read_only(&dir),
        Cause::Full => Tmpfs::full(&dir, "64k"),
        // Root writes in another user's directory as that user (issue 59),
        // so the directory is one its owner cannot write in either.
        Cause::Foreign => {
            std::fs::create_dir(&dir).unwrap();
            chown(&dir, NOBODY);
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
            None
        }
    };
    if cause != Cause::Foreign && _mount.is_none() {
        return;
    }
    let before = crate::support::snapshot(&dir);
    let d = dir.display().to_string();
    for (verb, run) in runs(&sb, &dir, cause) {
        let want = expected(verb, &d, cause);
        let run = match (verb, cause) {
            ("build", Cause::Full) => {
                let run = run.fails();
                let lines = crate::support_run::unwrapped_error(&run.stderr);
                let last = lines.last().map(String::as_str).unwrap_or_default();
                assert!(crate::support::line_matches(&want, last), "{}", run.stderr);
                assert!(
                    run.stderr.contains("No space left on device"),
                    "{}",
                    run.stderr
                );
                run
            }
            _ => run.fails_with(&want),
        };
        assert!(!run.stderr.contains("os error"), "{verb}: {}", run.stderr);
    }
    if cause != Cause::Full {
        assert_eq!(crate::support::snapshot(&dir), before, "nothing was made");
    }
}

#[test]
fn a_read_only_mount_is_said_with_what_to_do_by_every_verb_that_writes() {
    check(Cause::ReadOnly);
}

#[test]
fn a_full_disk_is_said_with_its_free_space_by_every_verb_that_writes() {
    check(Cause::Full);
}

#[test]
fn a_directory_another_user_owns_is_said_with_whose_it_is() {
    if root_for("a directory another user owns (chowns one to nobody)") {
        check(Cause::Foreign);
    }
}
