//! What root writes into a place another user controls is never changed
//! by name (issue 59): a name swapped for a symlink while root writes
//! changes nothing of root's, and nothing root-owned is left behind.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::in_place::{HIP64, torch_of};
use crate::other_user::{NOBODY, as_sudo_for, chown, root_for};
use crate::support::{Run, Sandbox};

/// The first of our temp files (`.rdna1-patch-*`) to appear in `dir`.
fn wait_for_temp(dir: &Path, limit: Duration) -> Option<PathBuf> {
    let start = Instant::now();
    while start.elapsed() < limit {
        let found = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(".rdna1-patch-"))
            });
        if let Some(e) = found {
            return Some(e.path());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// The user renames root's temp file aside while root syncs it (the
/// failpoint holds it there) and puts a symlink to a root-only file in its
/// place. The old write chmodded by name and made that file the page's
/// mode (0644); now nothing of root's changes and the write is refused.
#[test]
fn a_temp_name_swapped_for_a_symlink_changes_no_file_of_roots() {
    if !root_for("root's write into a user's directory, raced") {
        return;
    }
    let sb = Sandbox::new();
    let victim = sb.root.join("roots-secret");
    std::fs::write(&victim, "root's\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let theirs = sb.root.join("their-man");
    std::fs::create_dir(&theirs).unwrap();
    chown(&theirs, NOBODY);

    let mut c = sb.cmd();
    c.args(["man", "--install"])
        .arg(&theirs)
        .env("SUDO_UID", NOBODY.to_string())
        .env("SUDO_GID", NOBODY.to_string())
        .env("FAILPOINTS", "write-atomic-synced=sleep(1500)");
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let man1 = theirs.join("man1");
    let start = Instant::now();
    while !man1.is_dir() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let temp = wait_for_temp(&man1, Duration::from_secs(20)).expect("root's temp file");
    std::fs::rename(&temp, man1.join("aside")).unwrap();
    std::os::unix::fs::symlink(&victim, &temp).unwrap();
    let run = Run::from(child.wait_with_output().unwrap());

    let m = std::fs::metadata(&victim).unwrap();
    assert_eq!(
        (m.mode() & 0o7777, m.uid()),
        (0o600, 0),
        "root's file kept its mode"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");
    run.fails_with(&format!(
        "error: writing the manual page rdna1-patch.1: cannot write {}/rdna1-patch.1: another program replaced the file being written as rdna1-patch.1 in {0} (whoever can write in that directory); nothing of theirs was changed
help: stop whatever else writes in {0} (under sudo, a directory another user owns is written as that user), then run this again",
        man1.display()
    ));
    // What root made there is the user's.
    for e in std::fs::read_dir(&man1).unwrap().flatten() {
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        if e.path() != temp {
            assert_eq!(meta.uid(), NOBODY, "{}", e.path().display());
        }
    }
    assert_eq!(std::fs::metadata(&man1).unwrap().uid(), NOBODY);
}

/// Root's install with the user's state dir (`sudo -E`, or `--state-dir`
/// a user owns) leaves everything it makes there the user's: the
/// journals, backups, staging, and the lock.
#[test]
fn roots_install_leaves_nothing_of_roots_in_a_users_state_dir() {
    if !root_for("root's install with a user's state dir") {
        return;
    }
    let Some(python) = crate::other_user::python_for_sudo("root's install with a user's state dir")
    else {
        return;
    };
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    chown(&sb.root.join("site"), NOBODY);
    let state = PathBuf::from(sb.state());
    std::fs::create_dir_all(&state).unwrap();
    chown(&state, NOBODY);
    let prefix = sb.prefix.display().to_string();
    let mut c = sb.cmd();
    c.args(["install", "--into-torch", "--prefix", &prefix])
        .args(["--profile", "rocm-6.4.3", "--state-dir", &sb.state()])
        .args(["--python", python])
        .env("SUDO_UID", NOBODY.to_string())
        .env("SUDO_GID", NOBODY.to_string())
        .env("SUDO_USER", "nobody");
    Run::from(c.output().unwrap()).ok().says("Installed");
    assert_ne!(std::fs::read(torch.miopen()).unwrap().len(), 0);
    let mut roots = Vec::new();
    let mut seen = 0;
    for e in walkdir(&state) {
        seen += 1;
        if std::fs::symlink_metadata(&e).unwrap().uid() != NOBODY {
            roots.push(e.display().to_string());
        }
    }
    assert!(seen >= 5, "the state dir holds its own: {seen} entries");
    assert!(
        roots.is_empty(),
        "root's in the user's state dir: {roots:#?}"
    );
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

/// `verify --runtime` as sudo runs it, on the sandbox's torch, with the
/// system's python (one the other user can run wherever the clone lies).
fn runtime_as_sudo(sb: &Sandbox) -> Run {
    let mut c = sb.cmd();
    c.args([
        "verify",
        "--detail",
        "--runtime",
        "--python",
        "/usr/bin/python3",
    ])
    .args(["--state-dir", &sb.state()])
    .env("SUDO_UID", NOBODY.to_string())
    .env("SUDO_GID", NOBODY.to_string())
    .env("SUDO_USER", "nobody");
    Run::from(c.output().unwrap())
}

/// torch's import, planted to leave `RAN-<euid>` beside the package.
fn plant_euid_marker(torch_dir: &Path) {
    let init = torch_dir.join("__init__.py");
    let mut text = std::fs::read_to_string(&init).unwrap();
    text.push_str(
        "\nimport os as _os\nopen(_os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), 'RAN-%d' % _os.geteuid()), 'w').close()\n",
    );
    std::fs::write(&init, text).unwrap();
}

fn markers(site: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(site)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("RAN-"))
        .collect();
    found.sort();
    found
}

/// Under sudo, torch is imported as sudo's user, never as root; and a
/// torch a third user can change (a world-writable `__init__.py`) is not
/// imported at all (issue 59: it ran as euid 0).
#[test]
fn under_sudo_torch_is_imported_as_its_user_and_never_when_others_can_change_it() {
    if !root_for("torch's import under sudo") {
        return;
    }
    if crate::other_user::python_for_sudo("torch's import under sudo").is_none() {
        return;
    }
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    plant_euid_marker(&torch.dir);
    let site = sb.root.join("site");
    chown(&site, NOBODY);

    let run = runtime_as_sudo(&sb);
    assert_eq!(
        markers(&site),
        [format!("RAN-{NOBODY}")],
        "imported as sudo's user: {}{}",
        run.stdout,
        run.stderr
    );
    std::fs::remove_file(site.join(format!("RAN-{NOBODY}"))).unwrap();

    let init = torch.dir.join("__init__.py");
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o646)).unwrap();
    let run = runtime_as_sudo(&sb);
    assert!(
        markers(&site).is_empty(),
        "nothing of torch's ran: {:?}",
        markers(&site)
    );
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    run.prints(&format!(
        "FAIL  runtime   {} can be changed by every user; run as root, rdna1-patch neither runs nor changes a torch that another user controls; nothing was run or changed
                fix: run rdna1-patch as the user who owns that torch, without sudo (a torch in a venv is its owner's), or take the write bits away from others (`chmod -R go-w` on that torch)",
        init.display()
    ));
}

/// Under sudo, every python the tool asks something of (where torch is,
/// whether it is a python, rocm_sdk's paths) runs as sudo's user: python
/// runs a `sitecustomize` on its path and a venv's `.pth` files as it
/// starts, and those are the user's code. Before, doctor and install ran
/// them as root (the marker was RAN-0).
#[test]
fn under_sudo_python_is_asked_about_torch_as_its_user() {
    let Some((sb, python, site)) =
        crate::other_user::sudo_with_torch("python's questions under sudo")
    else {
        return;
    };
    std::fs::write(
        site.join("sitecustomize.py"),
        "import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'RAN-%d' % os.geteuid()), 'w').close()\n",
    )
    .unwrap();
    chown(&site, NOBODY);

    for args in [
        &["doctor"][..],
        &["install", "--into-torch", "--dry-run"][..],
    ] {
        let mut c = sb.cmd();
        // Lines whole (--detail): at a glance a path may lose its middle.
        c.args(args)
            .args(["--python", python, "--state-dir", &sb.state(), "--detail"]);
        let run = Run::from(as_sudo_for(&mut c, NOBODY).output().unwrap());
        assert_eq!(
            markers(&site),
            [format!("RAN-{NOBODY}")],
            "{args:?} asked python as sudo's user only: {}{}",
            run.stdout,
            run.stderr
        );
        assert!(
            run.stdout.contains("torch"),
            "{args:?} found torch: {}{}",
            run.stdout,
            run.stderr
        );
    }
}

/// A torch only root can read is not found under sudo, and the row says
/// why: python runs as the user who ran sudo.
#[test]
fn under_sudo_a_torch_only_root_can_read_is_named_as_such() {
    let Some((sb, python, site)) =
        crate::other_user::sudo_with_torch("python's questions under sudo")
    else {
        return;
    };
    std::fs::set_permissions(&site, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut c = sb.cmd();
    c.args(["install", "--into-torch", "--python", python])
        .args(["--state-dir", &sb.state()]);
    Run::from(as_sudo_for(&mut c, NOBODY).output().unwrap()).fails_with(
        "error: /usr/bin/python3 (/usr/bin/python3) has no torch that nobody (uid 65534, who ran sudo) can import (python runs as that user)
help: run rdna1-patch without sudo, as the user whose python and torch these are (a venv is its owner's), or make them readable by that user; or install the torch built for gfx1010 [..]",
    );
}
