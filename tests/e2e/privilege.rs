//! Run with sudo, the tool crosses no privilege line: nothing it writes
//! into a user's place is setuid or root's, nothing a user controls steers
//! it, and no code of theirs runs (issue 42's findings, each here failing
//! on the code before the fix). The root cases run as root, as CI does.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::in_place::{HIP64, torch_of};
use crate::in_place_cache::kernel_cache;
use crate::other_user::{NOBODY, chown, root_for};
use crate::support::{Run, Sandbox};

/// `args` with the sandbox's state dir, run as root as sudo would for
/// `sudo_uid` (its SUDO_UID, SUDO_GID and SUDO_USER; None: a root shell).
fn run_as(sb: &Sandbox, sudo_uid: Option<u32>, args: &[&str]) -> Run {
    let mut c = sb.cmd();
    c.args(args).args(["--state-dir", &sb.state()]);
    if let Some(uid) = sudo_uid {
        c.env("SUDO_UID", uid.to_string())
            .env("SUDO_GID", uid.to_string())
            .env("SUDO_USER", "nobody");
    }
    Run::from(c.output().unwrap())
}

fn install_args(sb: &Sandbox) -> Vec<String> {
    let prefix = sb.prefix.display().to_string();
    [
        "install",
        "--into-torch",
        "--prefix",
        &prefix,
        "--profile",
        "rocm-6.4.3",
    ]
    .map(String::from)
    .to_vec()
}

fn mode_and_owner(path: &Path) -> (u32, u32) {
    let m = std::fs::metadata(path).unwrap();
    (m.mode() & 0o7777, m.uid())
}

/// The user made their own library setuid; root's install and rollback
/// leave that user a plain 0755 file of their own, never a setuid-root
/// one. From a root shell (no sudo), their torch is not root's to change.
#[test]
fn root_never_writes_a_setuid_or_root_owned_library_into_a_users_torch() {
    if !root_for("root's install into a user's setuid library") {
        return;
    }
    let Some(python) =
        crate::other_user::python_for_sudo("root's install into a user's setuid library")
    else {
        return;
    };
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    // chown clears a setuid bit: the user's chmod comes after.
    chown(&sb.root.join("site"), NOBODY);
    std::fs::set_permissions(torch.miopen(), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let args = install_args(&sb);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let refused = run_as(&sb, None, &args).fails_with(&format!(
        "error: {} can be changed by uid {NOBODY}; run as root, rdna1-patch does not change a torch that another user controls; nothing was changed
help: run rdna1-patch as the user who owns that torch, without sudo (a torch in a venv is its owner's to change)",
        torch.miopen().display()
    ));
    assert!(
        !refused.stderr.contains("Diagnosis"),
        "refused before the comgr is looked at"
    );
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    assert_eq!(mode_and_owner(&torch.miopen()), (0o4755, NOBODY));

    let as_sudo = [&args[..], &["--python", python]].concat();
    run_as(&sb, Some(NOBODY), &as_sudo).ok().says("Installed");
    assert_ne!(std::fs::read(torch.miopen()).unwrap(), original);
    assert_eq!(
        mode_and_owner(&torch.miopen()),
        (0o755, NOBODY),
        "the user's plain file, not a setuid-root one"
    );
    run_as(&sb, Some(NOBODY), &["rollback"]).ok();
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    assert_eq!(mode_and_owner(&torch.miopen()), (0o755, NOBODY));
}

/// A state dir the user can write (`sudo -E`, `--state-dir ~user/...`)
/// holds journals that user could have written: root follows none that
/// names a torch the user could not change themselves.
#[test]
fn root_follows_no_journal_a_user_could_have_written_about_roots_torch() {
    if !root_for("root and a journal a user could have written") {
        return;
    }
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let args = install_args(&sb);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_as(&sb, None, &args).ok().says("Installed");
    let fixed = std::fs::read(torch.miopen()).unwrap();
    chown(Path::new(&sb.state()), NOBODY);
    run_as(&sb, None, &["rollback"]).fails_with(&format!(
        "error: 1 transaction journal(s) cannot be trusted, so rdna1-patch will not change torch:
  {state}/transactions/0001.toml: it can be changed by uid {NOBODY}, who cannot change {}; run as root, rdna1-patch does not follow it
help: run rdna1-patch as the user who owns that state dir, without sudo, or give root a state dir only root can write (the default, with sudo's own environment)",
        torch.miopen().display(),
        state = sb.state(),
    ));
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), fixed);
    // Given back to root, the same journal is followed.
    chown(Path::new(&sb.state()), 0);
    run_as(&sb, None, &["rollback"]).ok();
}

/// Python modules in the directory the user runs the tool from (a torch
/// source checkout, a `json.py`): none is imported by the pythons the tool
/// starts, whichever verb starts them.
#[test]
fn no_python_module_in_the_current_directory_runs() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    kernel_cache(&sb.root.join("home/.cache/miopen/3.4.0.abc/gfx1010_18.ukdb"));
    let planted = "import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'RAN-' + __name__), 'w').close()\nraise ImportError('planted')\n";
    for module in [
        "json.py",
        "sqlite3.py",
        "torch/__init__.py",
        "rocm_sdk/__init__.py",
    ] {
        let file = sb.root.join(module);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, planted).unwrap();
    }
    let prefix = sb.prefix.display().to_string();
    let python = ["--python", "python3"];
    let install = install_args(&sb);
    let install: Vec<&str> = install.iter().map(String::as_str).collect();
    run_as(&sb, None, &install)
        .ok()
        .says("Installed")
        .says("Cache forgot 2 batch-norm kernels");
    sb.run(&[&["doctor"], &python[..]].concat())
        .prints(&format!(
            "2.6.0+rocm6.4 (HIP {HIP64}) at {}",
            torch.dir.display()
        ));
    sb.verify(&[&["--runtime"], &python[..]].concat()).ok();
    run_as(&sb, None, &["rollback"]).ok();
    let ran: Vec<String> = std::fs::read_dir(&sb.root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("RAN-"))
        .collect();
    assert!(ran.is_empty(), "planted modules ran: {ran:?} ({prefix})");
}

/// Issue 42, 14: a `gfx1010*.ukdb` symlink in MIOpen's cache dir is not
/// followed: the SQLite file it names keeps every row.
#[test]
fn the_kernel_cache_cleanup_follows_no_symlink() {
    let sb = Sandbox::new();
    torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let elsewhere = sb.root.join("elsewhere/precious.db");
    kernel_cache(&elsewhere);
    let before = std::fs::read(&elsewhere).unwrap();
    let dir = sb.root.join("home/.cache/miopen/3.4.0.abc");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("gfx1010_18.ukdb")).unwrap();
    let install = install_args(&sb);
    let install: Vec<&str> = install.iter().map(String::as_str).collect();
    let run = run_as(&sb, None, &install).ok();
    assert!(!run.stderr.contains("Cache forgot"), "{}", run.stderr);
    assert_eq!(std::fs::read(&elsewhere).unwrap(), before);
}

/// Finding 8 of issue 55: with `.` and a user's directory on root's PATH,
/// the tool runs no `dpkg`, `rpm`, `pacman` or `patchelf` from either: a
/// program it runs as root comes from an absolute PATH entry no one but
/// root can change.
#[test]
fn root_runs_no_program_from_a_directory_a_user_can_write() {
    if !root_for("root and a user's programs on PATH") {
        return;
    }
    let sb = Sandbox::built();
    sb.torch(crate::support::TorchKind::Rocm, crate::support::HIP);
    let marks = sb.root.join("marks");
    std::fs::create_dir(&marks).unwrap();
    std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (cwd, theirs) = (sb.root.join("cwd"), sb.root.join("their-bin"));
    for dir in [&cwd, &theirs] {
        std::fs::create_dir(dir).unwrap();
        for name in ["dpkg", "rpm", "pacman", "patchelf"] {
            let p = dir.join(name);
            std::fs::write(
                &p,
                format!("#!/bin/sh\ntouch {}/{name}\nexit 1\n", marks.display()),
            )
            .unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        chown(dir, NOBODY);
    }
    let path = format!(
        ".:{}:{}",
        theirs.display(),
        crate::support::tools().display()
    );
    let run = |args: &[&str]| {
        let mut c = sb.cmd();
        c.current_dir(&cwd).env("PATH", &path).args(args);
        Run::from(c.output().unwrap())
    };
    let prefix = sb.prefix.display().to_string();
    let state = sb.state();
    run(&[
        "install",
        "--into-torch",
        "--prefix",
        &prefix,
        "--state-dir",
        &state,
    ])
    .ok();
    run(&["doctor", "--python", "python3"]);
    run(&["verify", "--prefix", &prefix, "--state-dir", &state]);
    let ran: Vec<_> = std::fs::read_dir(&marks)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(ran.is_empty(), "ran as root: {ran:?}");
}

/// Under sudo, HOME is root's, and MIOpen's cache there is not the one the
/// user's torch reads: install neither edits it (before: its batch-norm
/// rows were deleted, by root's python) nor warns that it could not (python
/// runs as the user, who may not write root's files). The user's own cache, in
/// their home from the password database, is the one cleaned.
#[test]
fn under_sudo_roots_kernel_cache_is_not_the_one_cleaned() {
    let Some((sb, python, site)) = crate::other_user::sudo_with_torch("MIOpen's cache under sudo")
    else {
        return;
    };
    chown(&site, NOBODY);
    let roots = sb.root.join("home/.cache/miopen/3.4.0.abc/gfx1010_18.ukdb");
    kernel_cache(&roots);
    let before = std::fs::read(&roots).unwrap();
    let install = install_args(&sb);
    let install: Vec<&str> = install.iter().map(String::as_str).collect();
    let as_sudo = [&install[..], &["--python", python]].concat();
    let run = run_as(&sb, Some(NOBODY), &as_sudo).ok();
    run.says("Installed");
    for not in ["Cache forgot", "MIOpen's cache"] {
        assert!(!run.stderr.contains(not), "{}", run.stderr);
    }
    assert_eq!(std::fs::read(&roots).unwrap(), before, "root's cache kept");
}
