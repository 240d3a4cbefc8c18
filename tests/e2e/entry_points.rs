//! The entry points no help offers (the reaper, `RDNA1_PATCH_REAPER`; the
//! compile child, `RDNA1_PATCH_COMGR_CHILD`) serve only a process this
//! binary started (issue 69): set by hand as root, under `sudo -E` say,
//! neither runs anything. On main (84ed257) the reaper ran any argv as
//! root and the child read a request from stdin and answered it.
//! That the tool's own use of them still works is what `root_writes`'
//! sudo tests (`verify --runtime`, `install --dry-run` under sudo) and
//! `compile_child` show.

use std::process::{Command, Stdio};

use crate::other_user::root_for;
use crate::support::{Run, Sandbox};

/// `c` started by python3, which hands it one end of a socketpair it
/// made at the descriptor the binary looks at (197): the peer is the
/// parent, but the parent is not rdna1-patch (nor, in a debug build, a
/// program built beside it).
fn with_a_socket_of_pythons(c: &Command) -> Command {
    let mut p = Command::new("python3");
    p.arg("-c")
        .arg(
            "import os, socket, subprocess, sys\n\
             a, b = socket.socketpair()\n\
             os.dup2(b.fileno(), 197)\n\
             sys.exit(subprocess.run(sys.argv[1:], pass_fds=(197,)).returncode)\n",
        )
        .arg(c.get_program())
        .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => p.env(k, v),
            None => p.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        p.current_dir(d);
    }
    p
}

fn refused(run: &Run, var: &str, what: &str) {
    assert_eq!(run.code, Some(2), "{what}: {}{}", run.stdout, run.stderr);
    assert_eq!(run.stdout, "", "{what}: nothing answered");
    assert_eq!(
        run.stderr,
        format!(
            "error: {var} is set, but rdna1-patch did not start this process; nothing was run\nhelp: that variable is for the processes rdna1-patch starts itself; unset it (`rdna1-patch --help` lists the commands)\n"
        ),
        "{what}"
    );
}

#[test]
fn the_reaper_run_by_hand_as_root_runs_nothing() {
    if !root_for("the reaper's entry point run by hand as root") {
        return;
    }
    let sb = Sandbox::new();
    let marker = sb.root.join("ran-as-root");
    for socket in [false, true] {
        let mut c = sb.cmd();
        c.env("RDNA1_PATCH_REAPER", "1")
            .args(["/bin/sh", "-c"])
            .arg(format!("id -u > {}", marker.display()));
        if socket {
            c = with_a_socket_of_pythons(&c);
        }
        let run = Run::from(c.output().unwrap());
        assert!(!marker.exists(), "the reaper ran its argv as root");
        refused(&run, "RDNA1_PATCH_REAPER", &format!("socket: {socket}"));
    }
}

#[test]
fn the_compile_child_run_by_hand_as_root_reads_no_request() {
    if !root_for("the compile child's entry point run by hand as root") {
        return;
    }
    let sb = Sandbox::new();
    let lib = sb.root.join("theirs.so");
    std::fs::write(&lib, "not a library").unwrap();
    let request = format!(
        r#"{{"compilers":{{"comgr":"{}","hiprtc":null}},"batch":{{"jobs":[]}},"trusted":65534,"run_as":null}}"#,
        lib.display()
    );
    for socket in [false, true] {
        let mut c = sb.cmd();
        c.env("RDNA1_PATCH_COMGR_CHILD", "1");
        if socket {
            c = with_a_socket_of_pythons(&c);
        }
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write;
        let _ = child.stdin.take().unwrap().write_all(request.as_bytes());
        let run = Run::from(child.wait_with_output().unwrap());
        refused(
            &run,
            "RDNA1_PATCH_COMGR_CHILD",
            &format!("socket: {socket}"),
        );
    }
}

/// A file only root may read, its one line a secret.
fn roots_secret(sb: &Sandbox) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let f = sb.root.join("roots-secret");
    std::fs::write(&f, "SECRET-OF-ROOTS = = =\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

/// `RDNA1_PATCH_SYSFS` (the tests' hook) under sudo, its amdgpu
/// parameter a symlink of the user's to a file only root may read:
/// doctor reads the tree as sudo's user and shows nothing of that file.
/// On main doctor printed its first line as the parameter's value.
#[test]
fn a_sysfs_hook_under_sudo_discloses_no_file_of_roots() {
    use crate::other_user::{NOBODY, as_sudo_for, sudo_with_torch};
    let Some((sb, python, _)) = sudo_with_torch("the sysfs hook under sudo") else {
        return;
    };
    let secret = roots_secret(&sb);
    let sysfs = sb.root.join("sysfs");
    crate::support::copy_dir(&crate::support::gpus("rx5600xt-gfx1010"), &sysfs);
    let noretry = sysfs.join("module/amdgpu/parameters/noretry");
    std::fs::remove_file(&noretry).unwrap();
    std::os::unix::fs::symlink(&secret, &noretry).unwrap();
    sb.set_gpus(&sysfs);
    let mut c = sb.cmd();
    c.args(["doctor", "--python", python, "--state-dir", &sb.state()]);
    let run = Run::from(as_sudo_for(&mut c, NOBODY).output().unwrap());
    assert!(
        run.stdout.contains("torch"),
        "doctor ran: {}{}",
        run.stdout,
        run.stderr
    );
    assert!(
        !run.stdout.contains("SECRET") && !run.stderr.contains("SECRET"),
        "root's file was shown:\n{}{}",
        run.stdout,
        run.stderr
    );
}

/// `RDNA1_PATCH_CONFIG` under sudo naming a file only root may read: it
/// is read as sudo's user, so it is not read at all, and nothing of it is
/// quoted. On main `trust --list` quoted its first line.
#[test]
fn a_config_named_under_sudo_is_read_as_its_user_and_never_quoted() {
    use crate::other_user::{NOBODY, as_sudo_for};
    if !root_for("the config hook under sudo") {
        return;
    }
    let sb = Sandbox::new();
    let secret = roots_secret(&sb);
    let mut c = sb.cmd();
    c.args(["trust", "--list"])
        .env("RDNA1_PATCH_CONFIG", &secret);
    let run = Run::from(as_sudo_for(&mut c, NOBODY).output().unwrap());
    assert!(
        !run.stdout.contains("SECRET") && !run.stderr.contains("SECRET"),
        "root's file was quoted:\n{}{}",
        run.stdout,
        run.stderr
    );
    run.fails().error_is(&format!(
        "error: cannot read the config {}: nobody (uid 65534, who ran sudo) may not read it, and under sudo the config is read as that user
help: make it readable by nobody, or name one they can read in RDNA1_PATCH_CONFIG; nothing was read",
        secret.display()
    ));
    // Root's own config that does not parse is named, with the line, and
    // not quoted either.
    let mut c = sb.cmd();
    c.args(["trust", "--list"])
        .env("RDNA1_PATCH_CONFIG", &secret);
    let run = Run::from(c.output().unwrap());
    assert!(
        !run.stderr.contains("SECRET"),
        "the config was quoted: {}",
        run.stderr
    );
    run.fails().error_is(&format!(
        "error: {} is not a valid rdna1-patch config (line 1): extra `=`, expected nothing
help: it may set caches = [\"oci://...\"] and trusted-keys = [\"RW...\"]; fix the file, or move it away to run without it",
        secret.display()
    ));
}
