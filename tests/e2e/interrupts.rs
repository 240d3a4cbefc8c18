//! Ctrl-C at any instant, and a closed stdout (issue 72, item 2): an
//! interrupted run exits 130 with "interrupted" and the help to run it
//! again, says no verdict it did not reach, and a reader that goes away
//! never changes the status the answer has.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

use crate::in_place::torch_with_code;
use crate::support::{Run, Sandbox};

const STOPPED: &str = "error: rdna1-patch was stopped: interrupted
help: nothing was left half-done; run the same command again to finish";

/// A native gfx1010 torch whose batch norm fails on an RX 5600 XT.
fn failing() -> (Sandbox, rdna1_testkit::FakeTorch) {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let torch = torch_with_code(&sb, &["gfx1010"]);
    (sb, torch)
}

/// `args` with Ctrl-C arriving while the diagnosis's compile child runs
/// (a failpoint raises SIGINT then: no timing).
fn interrupted(sb: &Sandbox, args: &[&str]) -> Run {
    let mut c = sb.cmd();
    c.args(args)
        .args(["--state-dir", &sb.state()])
        .env("FAILPOINTS", "interrupt-while-compiling=return");
    Run::from(c.output().unwrap())
}

#[track_caller]
fn stopped_without_a_verdict(run: &Run) {
    assert_eq!(run.code, Some(130), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.stdout, "", "a verdict the run did not reach");
    run.error_is(STOPPED);
    assert!(!run.stderr.contains("/proc/self/exe"), "{}", run.stderr);
}

/// On 84ed257 doctor printed "could not be compiled" and install exited 2
/// with `error: /proc/self/exe was stopped` and no help line.
#[test]
fn ctrl_c_in_the_diagnosis_is_interrupted_and_says_no_verdict() {
    let (sb, torch) = failing();
    let original = std::fs::read(torch.miopen()).unwrap();
    let py = ["--python", "python3", "--profile", "rocm-6.4.3"];
    for verb in [
        &["doctor"][..],
        &["install", "--into-torch"],
        &["verify", "--compile"],
    ] {
        let args: Vec<&str> = verb.iter().chain(&py).copied().collect();
        let run = interrupted(&sb, &args);
        stopped_without_a_verdict(&run);
    }
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    // Nothing was left open: status says nothing is installed (exit 3),
    // and doctor answers as before.
    let status = sb.run_with_state(&["status"], &[]);
    assert_eq!(status.code, Some(3), "{}", status.stdout);
    assert!(!status.stdout.contains("unfinished"), "{}", status.stdout);
    sb.run_with_state(&["doctor", "--python", "python3"], &[])
        .check_fails();
}

/// stdout whose reader closed before the first write: EPIPE on every
/// write, as `doctor | head -0` gives.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two new descriptors, each owned once below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] and fds[1] were just opened and are owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

/// A failing stack's doctor with its reader gone still exits 1, and a
/// passing status 0: on 84ed257 the first exited 0, and `set -o pipefail`
/// lost README's "its exit status says it".
#[test]
fn a_closed_stdout_never_changes_the_exit_status() {
    let (sb, _torch) = failing();
    let mut c = sb.cmd();
    c.args(["doctor", "--python", "python3", "--profile", "rocm-6.4.3"])
        .stdout(closed_pipe());
    let run = Run::from(c.output().unwrap());
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(!run.stderr.contains("error"), "{}", run.stderr);
    let mut c = sb.cmd();
    c.args(["profiles", "list"]).stdout(closed_pipe());
    assert_eq!(Run::from(c.output().unwrap()).code, Some(0));
}
