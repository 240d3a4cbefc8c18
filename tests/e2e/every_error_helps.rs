//! Every error has a help line (issue 72, item 5): each verb given a file
//! where a directory is expected, a directory that is not there, and a
//! read-only one.

use crate::in_place::torch_with_code;
use crate::support::{Run, Sandbox, Tmpfs};

/// An error (exit 2) ends with its help line; any other status is one of
/// the table's.
#[track_caller]
fn helps(run: &Run, what: &str) {
    match run.code {
        Some(0 | 1 | 3) => {}
        Some(2) => {
            let last = run.stderr.lines().last().unwrap_or_default();
            assert!(
                last.starts_with("help: ") && run.stderr.contains("error: "),
                "{what}: an error with no help line:\n{}",
                run.stderr
            );
        }
        other => panic!("{what}: exit {other:?}\n{}", run.stderr),
    }
}

/// The verbs with each option that names a directory, `DIR` in place of
/// its value.
const DIR_ARGS: [&[&str]; 14] = [
    &[
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--state-dir",
        "DIR",
    ],
    &[
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--prefix",
        "DIR",
    ],
    &["rollback", "--state-dir", "DIR"],
    &["status", "--state-dir", "DIR"],
    &["status", "--prefix", "DIR"],
    &["verify", "--state-dir", "DIR"],
    &["verify", "--prefix", "DIR"],
    &["doctor", "--state-dir", "DIR"],
    &["doctor", "--work-dir", "DIR"],
    &["clean", "--work-dir", "DIR"],
    &["build", "--dry-run", "--work-dir", "DIR"],
    &["build", "--dry-run", "--prefix", "DIR"],
    &["publish", "--prefix", "DIR", "/nonexistent-layout-dir"],
    &["patches", "check", "--source", "DIR"],
];

fn each(sb: &Sandbox, dir: &str, case: &str) {
    for args in DIR_ARGS {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "DIR" { dir } else { a })
            .collect();
        let run = sb.run(&args);
        helps(&run, &format!("{} ({case})", args.join(" ")));
    }
}

/// On 84ed257 `status`, `rollback` and `install` with `--state-dir` a
/// file said "not a directory" and no help.
#[test]
fn a_file_where_a_directory_is_expected_is_said_with_what_to_do() {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    torch_with_code(&sb, &["gfx1010"]);
    let file = sb.root.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    each(&sb, file.to_str().unwrap(), "a file");
    let run = sb.run(&["status", "--state-dir", file.to_str().unwrap()]);
    run.error_is(&format!(
        "error: cannot read {0}/transactions: not a directory\nhelp: {0} is a file where a directory is expected: name a directory (or one to be made) instead, or move the file away",
        file.display()
    ));
}

/// A directory that is not there: made where it is made, else said.
/// `--torch-dir /nonexistent` says it does not exist (on 84ed257: "it has
/// no version.py").
#[test]
fn a_missing_directory_is_said_as_missing() {
    let sb = Sandbox::new();
    let missing = sb.root.join("not-there");
    each(&sb, missing.to_str().unwrap(), "missing");
    for verb in [&["install", "--into-torch"][..], &["rollback"], &["verify"]] {
        let args: Vec<&str> = verb
            .iter()
            .copied()
            .chain(["--torch-dir", "/nonexistent"])
            .collect();
        sb.run(&args)
            .fails()
            .says("--torch-dir /nonexistent does not exist");
    }
}

#[test]
fn a_read_only_directory_is_said_with_what_to_do() {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    torch_with_code(&sb, &["gfx1010"]);
    let ro = sb.root.join("ro");
    let Some(_mount) = Tmpfs::read_only(&ro) else {
        return;
    };
    each(&sb, ro.to_str().unwrap(), "read-only");
}

/// Debian 12's ROCm 5.2 has no libroctracer-dev: `build rocblas` names the
/// ROCm release first, as `build miopen` does (on 84ed257 it said to
/// install libroctracer-dev, which Debian 12 does not have).
#[test]
fn a_rocm_no_profile_is_for_is_named_before_a_package_it_lacks() {
    let sb = Sandbox::new();
    let rocm = sb.root.join("usr");
    rdna1_testkit::copy_dir(&sb.rocm, &rocm);
    std::fs::create_dir_all(rocm.join(".info")).unwrap();
    std::fs::write(rocm.join(".info/version"), "5.2.3\n").unwrap();
    let _ = std::fs::remove_file(rocm.join("include/roctracer/roctx.h"));
    let r = rocm.to_str().unwrap();
    for component in ["miopen", "rocblas"] {
        let run = sb.run(&[
            "build",
            component,
            "--profile",
            "rocm-6.4.3",
            "--rocm",
            r,
            "--dry-run",
        ]);
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(
            all.contains("no profile is for ROCm 5.2") && !all.contains("libroctracer-dev"),
            "build {component}:\n{all}"
        );
    }
}
