//! The system route (issue 44) where the system's file meets its owners:
//! a torch a package owns is refused, a library the package manager
//! upgrades is fixed again, with no package manager the file is judged by
//! its writers, a kill at any step leaves torch loading one of the two,
//! and under sudo the user's files stay the user's.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::support::{Run, Sandbox, contains_bytes, snapshot};
use crate::system_route::{MARKER, SystemTorch, md5};

/// A distribution's torch (dpkg says python3-torch-rocm owns it) on the
/// system's MIOpen is refused before anything is written, with the routes
/// that work; nothing of torch or the system changes.
#[test]
fn system_route_refuses_a_torch_a_package_owns() {
    let sb = Sandbox::new();
    let st = SystemTorch::new(&sb, true);
    let dir = st.torch.dir.canonicalize().unwrap();
    st.own("python3-torch-rocm", &[&dir, &st.hip()]);
    let torch_before = snapshot(&st.torch.dir);
    let system_before = snapshot(&st.sys);
    st.install(&sb, &[]).fails_with(&format!(
        "error: torch 2.9.1+rocm6.4 at {} belongs to the dpkg package python3-torch-rocm: rdna1-patch never changes a file a package manager owns; nothing was changed
help: make a venv with a torch of your own and fix that one: TheRock's native torch (`pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`), then `rdna1-patch install --into-torch[..]`; or a torch you built for gfx1010 against this system's ROCm",
        dir.display()
    ));
    assert_eq!(snapshot(&st.torch.dir), torch_before);
    assert_eq!(snapshot(&st.sys), system_before);
    assert!(!sb.prefix.join("share/rdna1-patch/MD5SUMS").exists());
}

/// The package manager upgrades the system's MIOpen after the install:
/// status and verify say the copy is a fix of the old file, and install
/// again takes the old copy out and fixes the new one.
#[test]
fn system_route_detects_an_upgraded_system_library_and_redoes_the_fix() {
    let sb = Sandbox::new();
    let st = SystemTorch::new(&sb, false);
    st.install(&sb, &[]).ok();
    let old_copy = md5(&st.copy());
    // The upgrade: a new file under the same name, as dpkg unpacks it
    // (a new inode), still loadable (data after an ELF file's end).
    let mut bytes = std::fs::read(&st.real).unwrap();
    bytes.extend_from_slice(b"6.4.1 upgrade");
    let tmp = st.sys.join(".libMIOpen.dpkg-new");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, &st.real).unwrap();
    let state = sb.state();
    let prefix = sb.prefix.display().to_string();
    let status = st
        .run(&sb, &["status", "--state-dir", &state, "--prefix", &prefix])
        .ok();
    status.prints(&format!(
        "but {} changed since the copy was made",
        st.real.display()
    ));
    status.prints("`rdna1-patch install --into-torch[..]` takes the old copy out and fixes the library the system has now");
    // Rows whole: at a glance their paths lose their middle.
    st.run(
        &sb,
        &[
            "verify",
            "--detail",
            "--state-dir",
            &state,
            "--prefix",
            &prefix,
            "--python",
            "python3",
        ],
    )
    .prints(&format!(
        "FAIL  source    {} changed since the fix was made (a package upgrade?)",
        st.real.display()
    ));

    let hip_edited = std::fs::read(st.hip()).unwrap();
    st.install(&sb, &[])
        .ok()
        .says("Rolled back transaction 1: its copy was made from an earlier")
        .says("Installed");
    assert_ne!(md5(&st.copy()), old_copy);
    assert_eq!(
        std::fs::read(st.hip()).unwrap(),
        hip_edited,
        "edited the same way again"
    );
    let copy = std::fs::read(st.copy()).unwrap();
    assert!(contains_bytes(&copy, "6.4.1 upgrade") && contains_bytes(&copy, MARKER));
    let status = st
        .run(&sb, &["status", "--state-dir", &state, "--prefix", &prefix])
        .ok();
    assert!(
        !status.stdout.contains("changed since"),
        "{}",
        status.stdout
    );
    assert!(
        sb.maps_after_import()
            .contains(&st.copy().display().to_string())
    );
}

/// With no package manager to ask (none on PATH), the system library is
/// still only read, judged by who can write it: root alone, here. The
/// route goes on and says so.
#[test]
fn system_route_without_a_package_manager_judges_the_file_by_its_writers() {
    let sb = Sandbox::new();
    let st = SystemTorch::new(&sb, true);
    // This PATH's programs but dpkg, rpm and pacman (and their helpers).
    let bin = sb.root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap()) {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let manager = ["dpkg", "rpm", "pacman"]
                .iter()
                .any(|m| name.starts_with(m));
            if !manager && !bin.join(&name).exists() {
                let _ = std::os::unix::fs::symlink(e.path(), bin.join(&name));
            }
        }
    }
    assert!(bin.join("python3").exists() && !bin.join("dpkg").exists());
    let state = sb.state();
    let prefix = sb.prefix.display().to_string();
    let run = |args: &[&str]| {
        let mut c = sb.cmd();
        c.env("PATH", &bin).args(args);
        Run::from(c.output().unwrap())
    };
    let system_before = snapshot(&st.sys);
    // Root's "system" file is root's; a plain user's test file is theirs.
    let who = match crate::other_user::as_root() {
        true => "only root can change it".to_owned(),
        // SAFETY: geteuid has no preconditions.
        false => format!("uid {} can change it", unsafe { libc::geteuid() }),
    };
    run(&[
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--prefix",
        &prefix,
        "--state-dir",
        &state,
        "--in-place",
        "--python",
        "python3",
    ])
    .ok()
    .says(&format!(
        "the system's {} (no package manager here to ask; {who}) is only read",
        st.real.display()
    ));
    assert_eq!(snapshot(&st.sys), system_before);
    run(&[
        "verify",
        "--detail",
        "--state-dir",
        &state,
        "--prefix",
        &prefix,
        "--python",
        "python3",
    ])
    .ok()
    .prints(&format!(
        "ok    package   {}: no package manager here to ask; {who}",
        st.real.display()
    ));
    run(&["rollback", "--state-dir", &state]).ok();
    assert!(!st.copy().exists());
}

/// kill -9 (an abort at a failpoint: no cleanup runs) between every pair
/// of steps of install and of rollback, on the shape that edits
/// libtorch_hip.so: torch then imports and maps the system's library or
/// the fixed copy, never neither, and the next rollback leaves
/// libtorch_hip.so byte for byte as it was and no copy or temp behind.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --features failpoints (cargo xtask ci does)"
)]
fn system_route_a_kill_at_any_step_leaves_torch_loading_one_of_the_two() {
    let sb = Sandbox::new();
    let st = SystemTorch::new(&sb, false);
    let hip_before = std::fs::read(st.hip()).unwrap();
    let state = sb.state();
    let crash = |args: &[&str], point: &str| {
        let mut c = sb.cmd();
        c.env("DPKG_ADMINDIR", &st.admin)
            .env("FAILPOINTS", format!("{point}=return"))
            .args(args);
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            None,
            "{point}: expected an abort: {out:?}"
        );
        let maps = sb.maps_after_import();
        let copy = maps.contains(&st.copy().display().to_string());
        let system = maps.contains(&st.real.display().to_string());
        assert!(
            copy ^ system,
            "{point}: torch maps copy {copy}, system {system}"
        );
    };
    let settled = |point: &str| {
        st.run(&sb, &["rollback", "--state-dir", &state]).ok();
        assert_eq!(std::fs::read(st.hip()).unwrap(), hip_before, "{point}");
        let left: Vec<_> = std::fs::read_dir(&st.torch.lib)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("rdna1-patch") || n.starts_with("libMIOpen"))
            .collect();
        assert!(left.is_empty(), "{point}: {left:?}");
        let journals = std::fs::read_dir(sb.root.join("state/transactions")).unwrap();
        for j in journals.flatten() {
            let text = std::fs::read_to_string(j.path()).unwrap();
            for open in ["begun", "backed-up", "swapping", "rolling-back"] {
                assert!(
                    !text.contains(&format!("state = \"{open}\"")),
                    "{point}: {text}"
                );
            }
        }
    };
    let prefix = sb.prefix.display().to_string();
    let install = [
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--prefix",
        &prefix,
        "--state-dir",
        &state,
        "--python",
        "python3",
    ];
    for point in [
        "system-begun",
        "system-temps-written",
        "system-swapping",
        "system-copy-added",
        "system-hip-edited",
        "system-installed",
    ] {
        crash(&install, point);
        settled(point);
    }
    for point in [
        "system-rollback-begun",
        "system-rollback-hip-restored",
        "system-rollback-copy-removed",
    ] {
        st.install(&sb, &[]).ok();
        crash(&["rollback", "--state-dir", &state], point);
        settled(point);
    }
}

/// Under sudo (root, SUDO_UID of the user whose torch it is), what the
/// route writes into the user's torch/lib is the user's: the copy and the
/// edited libtorch_hip.so get torch/lib's owner, and so does the
/// libtorch_hip.so rollback puts back. The system file stays root's.
#[test]
fn system_route_under_sudo_leaves_the_users_files_the_users() {
    if !crate::other_user::root_for("the system route under sudo") {
        return;
    }
    let Some(python) = crate::other_user::python_for_sudo("the system route under sudo") else {
        return;
    };
    use crate::other_user::NOBODY;
    let sb = Sandbox::new();
    let st = SystemTorch::new(&sb, false);
    let ok = std::process::Command::new("chown")
        .args(["-R", &format!("{NOBODY}:{NOBODY}")])
        .arg(sb.root.join("site"))
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let hip_before = std::fs::read(st.hip()).unwrap();
    let owner = |p: &Path| std::fs::metadata(p).unwrap().uid();
    let sudo = |args: &[&str]| {
        let mut c = sb.cmd();
        c.env("DPKG_ADMINDIR", &st.admin)
            .env("SUDO_UID", NOBODY.to_string())
            .env("SUDO_GID", NOBODY.to_string())
            .env("SUDO_USER", "nobody")
            .args(args)
            .args(["--state-dir", &sb.state()]);
        Run::from(c.output().unwrap())
    };
    let prefix = sb.prefix.display().to_string();
    sudo(&[
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--prefix",
        &prefix,
        "--python",
        python,
    ])
    .ok()
    .says("Installed");
    assert_eq!(owner(&st.copy()), NOBODY, "the copy");
    assert_eq!(owner(&st.hip()), NOBODY, "the edited libtorch_hip.so");
    assert_eq!(owner(&st.real), 0, "the system file");
    sudo(&["rollback"]).ok();
    assert_eq!(std::fs::read(st.hip()).unwrap(), hip_before);
    assert_eq!(owner(&st.hip()), NOBODY, "libtorch_hip.so put back");
    assert!(!st.copy().exists());
}
