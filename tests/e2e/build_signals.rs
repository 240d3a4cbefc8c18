//! A build stopped by a signal: Ctrl-C and SIGTERM reach the compilers,
//! say what was stopped, and the next build resumes.

use crate::support::Sandbox;

/// Start a build whose compiles hang in a slow launcher, send `sig` to our
/// process alone (as `kill` would: it must pass it on), and return how the
/// run ended and the launchers' pids.
fn stop_a_build(sb: &Sandbox, sig: i32) -> (crate::support::Run, String) {
    let launcher = sb.root.join("slow-cc.sh");
    let pids = sb.root.join("pids");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\necho $$ >> {}\nsleep 60\nexec \"$@\"\n",
            pids.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&launcher)
        .status()
        .unwrap();
    let define = format!("CMAKE_CXX_COMPILER_LAUNCHER={}", launcher.display());
    let child = sb
        .cmd()
        .args(sb.build_args(&["-D", &define]))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !pids.exists() || std::fs::read_to_string(&pids).unwrap().lines().count() < 2 {
        assert!(start.elapsed().as_secs() < 60, "the compile never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, sig) };
    let run = crate::support::Run::from(child.wait_with_output().unwrap());
    let launched = std::fs::read_to_string(&pids).unwrap();
    for pid in launched.lines() {
        assert!(!alive(pid), "compiler launcher {pid} still runs");
    }
    (run, launched)
}

fn alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[test]
fn ctrl_c_stops_the_compilers_and_the_build_resumes() {
    let sb = Sandbox::new();
    let (run, launched) = stop_a_build(&sb, libc::SIGINT);
    assert_eq!(run.code, Some(130), "{}", run.stderr);
    // The error, then its help as the very last line, each once.
    run.error_is(
        "error: the build was stopped: interrupted
help: the work dir is kept as it was; run the same command again to resume",
    );
    assert!(!sb.prefix.exists());
    // Without the slow launcher the same work dir finishes the build: the
    // dropped define is unset in CMake's cache, not silently kept.
    let run = sb.build(&["--launcher", "none"]).ok();
    run.says("-UCMAKE_CXX_COMPILER_LAUNCHER");
    assert_eq!(
        std::fs::read_to_string(sb.root.join("pids")).unwrap(),
        launched,
        "the launcher ran again"
    );
    assert!(sb.prefix.join("lib/libMIOpen.so.1.0.0").is_file());
}

/// Issue 46, 2: Ctrl-C during configure names the step in a few words;
/// the cmake command line (about 500 characters) is in the log, not in
/// the error.
#[test]
fn ctrl_c_during_configure_says_briefly_what_was_stopped() {
    let sb = Sandbox::new();
    // A compiler that hangs: CMake runs it while it configures.
    let pids = sb.root.join("pids");
    let cxx = sb.root.join("slow-c++");
    std::fs::write(
        &cxx,
        format!(
            "#!/bin/sh\necho $$ >> {}\nsleep 60\nexec c++ \"$@\"\n",
            pids.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cxx, std::fs::Permissions::from_mode(0o755)).unwrap();
    let define = format!("CMAKE_CXX_COMPILER={}", cxx.display());
    let child = sb
        .cmd()
        .args(sb.build_args(&["-D", &define]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !pids.exists() {
        assert!(
            start.elapsed().as_secs() < 60,
            "configure never ran the compiler"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let run = crate::support::Run::from(child.wait_with_output().unwrap());
    assert_eq!(run.code, Some(130), "{}", run.stderr);
    run.error_is(
        "error: cmake configure was stopped: interrupted
help: the work dir is kept as it was; run the same command again to resume",
    );
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        assert!(!alive(pid), "the compiler {pid} still runs");
    }
}

#[test]
fn sigterm_is_reported_and_exits_143() {
    let sb = Sandbox::new();
    let (run, _) = stop_a_build(&sb, libc::SIGTERM);
    assert_eq!(run.code, Some(143), "{}", run.stderr);
    run.error_is(
        "error: the build was stopped: terminated (SIGTERM)
help: the work dir is kept as it was; run the same command again to resume",
    );
    // A helper program (here a python that hangs) is stopped the same way.
    let python = sb.root.join("hung-python");
    let pid_file = sb.root.join("python.pid");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\necho $$ > {}\nexec sleep 60\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&python)
        .status()
        .unwrap();
    let child = sb
        .cmd()
        .args(["doctor", "--detail", "--python", python.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !pid_file.exists() {
        assert!(start.elapsed().as_secs() < 60, "python never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let run = crate::support::Run::from(child.wait_with_output().unwrap());
    assert_eq!(run.code, Some(143), "{}", run.stderr);
    // doctor reports a failed probe as a check; the run still ends as stopped.
    run.error_is(
        "error: rdna1-patch was stopped: terminated (SIGTERM)
help: nothing was left half-done; run the same command again to finish",
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(!alive(pid.trim()), "the hung python still runs");
}
