//! `install --into-torch`, `rollback` and `status` against fake torch
//! packages with real ELF libraries, found through a real python3.

use std::path::Path;
use std::process::Command;

use crate::support::{Sandbox, TorchKind};

use crate::support::HIP;

fn md5(path: &Path) -> String {
    rdna1_patch::checksum::md5_file(path).unwrap()
}

fn ldd(path: &Path) -> String {
    let out = Command::new("ldd").arg(path).output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn install_then_rollback_restores_the_original_bytes() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let lib = torch.miopen();
    let original = std::fs::read(&lib).unwrap();
    // As built, the library loads ROCm's runtime, not torch's.
    let built = ldd(&sb.prefix.join("lib/libMIOpen.so.1"));
    assert!(built.contains("/rocm/lib/libamdhip64.so.6"), "{built}");

    let run = sb.install(&[]).ok();
    run.says("Installed");
    let installed = std::fs::read(&lib).unwrap();
    assert_ne!(installed, original);
    assert!(crate::support::contains_bytes(&installed, "[RDNA1 PATCH]"));
    let elf = rdna1_patch::elf::read(&lib).unwrap();
    assert_eq!(elf.runpath, ["$ORIGIN"]);
    assert_eq!(elf.soname.as_deref(), Some("libMIOpen.so"));
    assert!(
        elf.needed.contains(&"libamdhip64.so".to_owned()),
        "{:?}",
        elf.needed
    );
    let deps = ldd(&lib);
    assert!(
        deps.contains(&format!(
            "libamdhip64.so => {}/libamdhip64.so",
            torch.lib.display()
        )),
        "{deps}"
    );
    assert!(!deps.contains("/rocm/lib"), "{deps}");
    // torch still imports, and maps the patched library.
    let maps = sb.maps_after_import();
    assert!(maps.contains(&lib.display().to_string()), "{maps}");

    let status = sb.status();
    assert!(
        status
            .stdout
            .contains(&format!("installed:  {}", lib.display())),
        "{}",
        status.stdout
    );

    let run = sb.rollback(&[]).ok();
    run.says("copied back from the backup");
    assert_eq!(std::fs::read(&lib).unwrap(), original);
    let run = sb.rollback(&[]).ok();
    run.says("nothing to roll back");
    assert_eq!(std::fs::read(&lib).unwrap(), original);
    assert_eq!(
        md5(&lib),
        rdna1_patch::checksum::md5_bytes(&original).unwrap()
    );
}

#[test]
fn installing_twice_keeps_the_first_original() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let original = std::fs::read(torch.miopen()).unwrap();
    sb.install(&[]).ok();
    let first = md5(&torch.miopen());
    // Same build again: nothing to do.
    let again = sb.install(&[]).ok();
    again.says("already holds this build");
    // A different library (as built, not relinked) over our own install.
    sb.install(&["--no-relink"]).ok();
    assert_ne!(md5(&torch.miopen()), first);
    let list = sb.rollback(&["--list"]).ok().stdout;
    assert!(
        list.contains("   1  ") && list.contains("replaced"),
        "{list}"
    );
    assert!(
        list.contains("   2  ") && list.contains("installed"),
        "{list}"
    );
    // One rollback returns to torch's own library, not to the first install.
    let run = sb.rollback(&[]).ok();
    run.says("transaction 2");
    run.says("transaction 1");
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    let list = sb.rollback(&["--list"]).ok().stdout;
    assert_eq!(list.matches("rolled-back").count(), 2, "{list}");
}

#[test]
fn rollback_to_undoes_installs_into_several_torches() {
    let sb = Sandbox::built();
    let a = sb.torch(TorchKind::Rocm, HIP);
    let b = rdna1_testkit::FakeTorch::create(
        &sb.root.join("site-b"),
        crate::support::runtime(),
        TorchKind::Rocm,
        "2.5.1+rocm6.2",
        HIP,
    );
    let (orig_a, orig_b) = (md5(&a.miopen()), md5(&b.miopen()));
    sb.install(&[]).ok();
    sb.install(&["--torch-dir", b.dir.to_str().unwrap()]).ok();
    assert_ne!(md5(&a.miopen()), orig_a);
    assert_ne!(md5(&b.miopen()), orig_b);
    sb.rollback(&["--to", "1"]).ok();
    assert_eq!(md5(&a.miopen()), orig_a);
    assert_eq!(md5(&b.miopen()), orig_b);
    // Again, as uninstall's first line may be: nothing to do, said, exit 0.
    let again = sb.rollback(&["--to", "1"]).ok();
    assert!(
        again.stderr.contains(
            "nothing to roll back: no transaction is installed (the last, 2, is rolled-back since "
        ),
        "{}",
        again.stderr
    );
    sb.rollback(&["--to", "3"]).fails_with(
        "error: there is no transaction 3: the newest is 2
help: `rdna1-patch rollback --list[..]` shows them",
    );
    // Transaction 1 undone, a later one in: "1 and later" undoes that one.
    sb.install(&[]).ok();
    assert_ne!(md5(&a.miopen()), orig_a);
    sb.rollback(&["--to", "1"]).ok().says("transaction 3");
    assert_eq!(md5(&a.miopen()), orig_a);
}

#[test]
fn a_rocm_version_mismatch_is_refused_unless_forced() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, "6.1.40091-a8dbc0c19");
    let before = md5(&torch.miopen());
    let run = sb.install(&[]).fails_with(
        r#"error: the build is for ROCm 6.2.4 but torch 2.5.1+rocm6.2 is built for HIP 6.1.40091-a8dbc0c19: a library built for another ROCm major.minor crashes with memory faults that look like GPU bugs
help: build with a profile for ROCm 6.1 (`rdna1-patch profiles list`), or install a torch for ROCm 6.2; --force installs anyway"#,
    );
    run.error_is(
        "error: the build is for ROCm 6.2.4 but torch 2.5.1+rocm6.2 is built for HIP 6.1.40091-a8dbc0c19: a library built for another ROCm major.minor crashes with memory faults that look like GPU bugs
help: build with a profile for ROCm 6.1 (`rdna1-patch profiles list`), or install a torch for ROCm 6.2; --force installs anyway",
    );
    run.says(
        "the build is for ROCm 6.2.4 but torch 2.5.1+rocm6.2 is built for HIP 6.1.40091-a8dbc0c19",
    );
    run.says("--force");
    assert_eq!(md5(&torch.miopen()), before);
    assert!(!Path::new(&sb.state()).join("transactions").exists());
    let run = sb.install(&["--force"]).ok();
    run.says("warning: the build is for ROCm 6.2.4");
    assert_ne!(md5(&torch.miopen()), before);
}

#[test]
fn a_cpu_torch_is_refused_by_name() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Cpu, HIP);
    let which = "no RDNA1 card is seen here; an RX 5500's is gfx1012";
    let or = "; or pass the python torch is in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir";
    sb.install(&[]).fails_with(&format!(
        "error: torch 2.5.1+rocm6.2 at {} is a CPU-only build, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so
help: {}",
        torch.dir.display(),
        crate::help_lines::python3_help("gfx1010", which, true, "")
    ));
    // A python without torch at all.
    std::fs::remove_dir_all(&torch.dir).unwrap();
    sb.install(&[]).fails_with(&format!(
        "error: [..]/python3 ([..]) has no torch installed
help: {}",
        crate::help_lines::python3_help("gfx1010", which, false, or)
    ));
}

#[test]
fn a_read_only_torch_lib_is_a_clear_error_and_changes_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let before = crate::support::snapshot(&torch.dir);
    std::fs::set_permissions(&torch.lib, std::fs::Permissions::from_mode(0o555)).unwrap();
    let state = sb.state();
    let run = sb
        .run_unprivileged(&[
            "install",
            "--into-torch",
            "--torch-dir",
            torch.dir.to_str().unwrap(),
            "--prefix",
            sb.prefix.to_str().unwrap(),
            "--state-dir",
            &state,
        ])
        .fails_with(
            r#"error: cannot write to [..]/site/torch/lib: permission denied; nothing was changed
help: you own [..]/site/torch/lib, but its mode (555) does not let you write there: `chmod u+w [..]/site/torch/lib`, or choose a torch in a virtualenv you own"#,
        );
    std::fs::set_permissions(&torch.lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        run.stderr
            .contains(&format!("cannot write to {}", torch.lib.display())),
        "{}",
        run.stderr
    );
    run.says("nothing was changed");
    assert_eq!(crate::support::snapshot(&torch.dir), before);
    let list = sb.rollback(&["--list"]).ok().stdout;
    assert!(list.contains("no transactions"), "{list}");
}

#[test]
fn a_tampered_backup_is_never_restored() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    let installed = md5(&torch.miopen());
    let backups = Path::new(&sb.state()).join("backups");
    let backup = std::fs::read_dir(&backups)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&backup).unwrap();
    bytes[100] ^= 0xff;
    std::fs::remove_file(&backup).unwrap();
    std::fs::write(&backup, bytes).unwrap();
    let run = sb.rollback(&[]).fails_with(
        r#"error: the backup of the original [..]/site/torch/lib/libMIOpen.so is not the file transaction 1 saved: its MD5 is [..], the journal says [..]; nothing was changed
help: rdna1-patch will not restore a damaged original. Reinstall torch 2.5.1+rocm6.2 to get a clean one (e.g. `pip install --force-reinstall torch==2.5.1+rocm6.2` with the index you installed it from)"#,
    );
    run.says("is not the file transaction 1 saved");
    run.says("nothing was changed");
    assert!(
        run.stderr
            .contains("pip install --force-reinstall torch==2.5.1+rocm6.2"),
        "{}",
        run.stderr
    );
    assert_eq!(md5(&torch.miopen()), installed);
}

#[test]
fn a_second_run_is_blocked_by_the_lock() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let before = md5(&torch.miopen());
    let state = Path::new(&sb.state()).to_owned();
    std::fs::create_dir_all(&state).unwrap();
    // Held the way another rdna1-patch holds it (flock on the lock file).
    let lock = std::fs::File::create(state.join("lock")).unwrap();
    lock.lock().unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: another rdna1-patch run () is changing torch right now; its lock is [..]/state/lock
help: wait for it to finish and run this again (the lock is released when that process exits, even if it is killed)"#,
    );
    run.says("another rdna1-patch run");
    run.says("is changing torch right now");
    let run = sb.rollback(&[]).fails_with(
        r#"error: another rdna1-patch run () is changing torch right now; its lock is [..]/state/lock
help: wait for it to finish and run this again (the lock is released when that process exits, even if it is killed)"#,
    );
    run.says("another rdna1-patch run");
    assert_eq!(md5(&torch.miopen()), before);
    drop(lock);
    sb.install(&[]).ok();
}

#[test]
fn a_prefix_that_fails_its_checksums_is_refused() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let before = md5(&torch.miopen());
    std::fs::write(sb.prefix.join("include/miopen/miopen.h"), "tampered").unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: the build in [..]/prefix does not match its MD5SUMS:
  include/miopen/miopen.h: MD5 [..], expected [..]
help: rebuild and reinstall it with `rdna1-patch build miopen[..]` (a no-op build reinstalls the prefix from the build dir)"#,
    );
    run.says("does not match its MD5SUMS");
    run.says("include/miopen/miopen.h: MD5");
    assert_eq!(md5(&torch.miopen()), before);
}

#[test]
fn a_symlinked_library_is_swapped_at_its_target() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let real = torch.lib.join("libMIOpen.so.1.0");
    std::fs::rename(torch.miopen(), &real).unwrap();
    std::os::unix::fs::symlink("libMIOpen.so.1.0", torch.miopen()).unwrap();
    let original = std::fs::read(&real).unwrap();
    sb.install(&[]).ok();
    assert_eq!(
        std::fs::read_link(torch.miopen()).unwrap(),
        Path::new("libMIOpen.so.1.0")
    );
    assert_ne!(std::fs::read(&real).unwrap(), original);
    sb.rollback(&[]).ok();
    assert_eq!(std::fs::read(&real).unwrap(), original);
    assert_eq!(
        std::fs::read_link(torch.miopen()).unwrap(),
        Path::new("libMIOpen.so.1.0")
    );
}

/// A crash (abort, as kill -9: no cleanup runs) between every pair of steps
/// of install and of rollback; then `rollback` must bring back the original
/// bytes, and the open transaction must be reported meanwhile.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --features failpoints (cargo xtask ci does)"
)]
fn a_crash_at_any_step_is_recovered_by_rollback() {
    let install_points = [
        "install-begun",
        "install-backup-written",
        "install-backed-up",
        "install-temp-written",
        "install-swapping",
        "install-renamed",
    ];
    let rollback_points = [
        "rollback-begun",
        "rollback-temp-written",
        "rollback-renamed",
    ];
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let original = std::fs::read(torch.miopen()).unwrap();
    let original_md5 = md5(&torch.miopen());
    let state = sb.state();
    // An open transaction fails status's answer (exit 1; issue 64);
    // nothing installed (every transaction closed) is exit 3 (issue 72).
    let prefix = sb.prefix.display().to_string();
    let status = || {
        let run = sb.run_with_state(&["status", "--prefix", &prefix], &[]);
        let open = run.stdout.contains("unfinished: transaction");
        let none =
            run.stdout.contains("installed:  nowhere") || run.stdout.contains("no transactions in");
        let want = if open {
            1
        } else if none {
            3
        } else {
            0
        };
        assert_eq!(run.code, Some(want), "{}", run.stdout);
        run.stdout
    };
    let crash = |args: &[&str], point: &str| {
        let mut cmd = sb.cmd();
        cmd.args(args).env("FAILPOINTS", format!("{point}=return"));
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            None,
            "{point}: expected an abort, got {:?}",
            out.status
        );
    };
    let install_args = [
        "install",
        "--into-torch",
        "--prefix",
        sb.prefix.to_str().unwrap(),
        "--state-dir",
        &state,
    ];
    for point in install_points {
        crash(&install_args, point);
        let now = md5(&torch.miopen());
        let listed = status();
        assert!(
            listed.contains("unfinished: transaction"),
            "{point}: {listed}"
        );
        if point == "install-renamed" {
            assert_ne!(now, original_md5, "{point}");
        } else {
            assert_eq!(now, original_md5, "{point}");
        }
        let run = sb.rollback(&[]).ok();
        assert!(
            run.stderr.contains("was interrupted"),
            "{point}: {}",
            run.stderr
        );
        assert_eq!(std::fs::read(torch.miopen()).unwrap(), original, "{point}");
        let leftovers: Vec<_> = std::fs::read_dir(&torch.lib)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains("rdna1-patch"))
            .collect();
        assert!(leftovers.is_empty(), "{point}: {leftovers:?}");
        assert!(!status().contains("unfinished"), "{point}");
    }
    for point in rollback_points {
        sb.install(&[]).ok();
        let mut args = vec!["rollback", "--state-dir", &state];
        crash(&args, point);
        assert!(status().contains("unfinished: transaction"), "{point}");
        args.truncate(3);
        sb.rollback(&[]).ok();
        assert_eq!(std::fs::read(torch.miopen()).unwrap(), original, "{point}");
    }
    // An install killed after the swap is finished by the next install.
    crash(&install_args, "install-renamed");
    let run = sb.install(&[]).ok();
    run.says("it is now installed");
    run.says("already holds this build");
    sb.rollback(&[]).ok();
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);

    // A real kill -9, while the run waits just before the rename.
    let mut child = sb
        .cmd()
        .args(install_args)
        .env("FAILPOINTS", "install-swapping=sleep(20000)")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let journals = Path::new(&state).join("transactions");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_dir(&journals).unwrap().any(|e| {
        std::fs::read_to_string(e.unwrap().path()).is_ok_and(|t| t.contains("state = \"swapping\""))
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "never reached the swap"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(md5(&torch.miopen()), original_md5);
    assert!(status().contains("unfinished: transaction"));
    sb.rollback(&[]).ok();
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
}
