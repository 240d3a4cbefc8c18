//! The defects an adversarial run found (issue 16), one test each: state
//! that nothing could undo, files that were not ours, and leaving torch.
//! Integrity that could be fooled and hangs are in `reliability_integrity`,
//! misleading results and the smaller ones in `reliability_misleading`.

use std::path::{Path, PathBuf};

use crate::support::{FakeTorch, HIP, Sandbox, Tmpfs, TorchKind, contains_bytes};

pub(crate) fn md5(path: &Path) -> String {
    rdna1_patch::checksum::md5_file(path).unwrap()
}

pub(crate) fn journal(sb: &Sandbox, id: u32) -> PathBuf {
    Path::new(&sb.state()).join(format!("transactions/{id:04}.toml"))
}

/// Run the binary and abort it at a failpoint, as kill -9 would.
pub(crate) fn crash(sb: &Sandbox, args: &[&str], point: &str) {
    let out = sb
        .cmd()
        .args(args)
        .env("FAILPOINTS", format!("{point}=return"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None, "{point}: expected an abort");
}

pub(crate) fn install_args(sb: &Sandbox) -> Vec<String> {
    [
        "install",
        "--into-torch",
        "--prefix",
        sb.prefix.to_str().unwrap(),
        "--state-dir",
        &sb.state(),
    ]
    .map(String::from)
    .to_vec()
}

pub(crate) fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// 1. State that nothing could undo.

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --features failpoints (cargo xtask ci does)"
)]
fn a_kill_during_an_install_over_our_own_is_settled() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let original = std::fs::read(torch.miopen()).unwrap();
    let mut again = install_args(&sb);
    again.push("--no-relink".to_owned());
    for point in [
        "install-begun",
        "install-backed-up",
        "install-temp-written",
        "install-swapping",
    ] {
        sb.install(&[]).ok();
        let first = md5(&torch.miopen());
        crash(&sb, &strs(&again), point);
        assert_eq!(md5(&torch.miopen()), first, "{point}");
        let run = sb.rollback(&[]).ok();
        assert!(
            run.stderr
                .contains("torch still holds the build of transaction"),
            "{point}: {}",
            run.stderr
        );
        assert_eq!(std::fs::read(torch.miopen()).unwrap(), original, "{point}");
        // Every install rolled back: nothing installed (exit 3), nothing open.
        let prefix = sb.prefix.display().to_string();
        let status = sb.run_with_state(&["status", "--prefix", &prefix], &[]);
        assert_eq!(status.code, Some(3), "{point}: {}", status.stdout);
        assert!(
            !status.stdout.contains("unfinished"),
            "{point}: {}",
            status.stdout
        );
    }
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --features failpoints (cargo xtask ci does)"
)]
fn abandon_always_works_and_a_deleted_torch_blocks_nothing() {
    let sb = Sandbox::built();
    let a = sb.torch(TorchKind::Rocm, HIP);
    let b = FakeTorch::create(
        &sb.root.join("site-b"),
        crate::support::runtime(),
        TorchKind::Rocm,
        "2.5.1+rocm6.2",
        HIP,
    );
    let b_dir = b.dir.to_str().unwrap().to_owned();
    // Killed mid-install, then torch A's library replaced by something else
    // (a pip install of another build).
    crash(&sb, &strs(&install_args(&sb)), "install-swapping");
    std::fs::remove_file(a.miopen()).unwrap();
    std::fs::write(a.miopen(), b"another torch build").unwrap();
    // Another torch is not held up by it.
    let run = sb.install(&["--torch-dir", &b_dir]).ok();
    run.says("warning: transaction 1 on ").says("is left open");
    // Torch A itself is refused, with the fix; and the fix works.
    let run = sb.install(&[]).fails_with(
        r#"error: [..]/site/torch/lib/libMIOpen.so (MD5 [..]) is neither the original (MD5 [..]) nor the library transaction 1 installed (MD5 [..]): something else changed it, perhaps a pip install
help: rdna1-patch does not overwrite a file it did not put there. If torch was reinstalled, its own library is back and `rdna1-patch rollback --abandon 1[..]` closes the transaction without touching torch; the original stays in [..].so"#,
    );
    run.says("something else changed it");
    run.says("rollback --abandon 1");
    let run = sb.rollback(&["--abandon", "1"]).ok();
    run.says("Abandoned transaction 1");
    assert_eq!(std::fs::read(a.miopen()).unwrap(), b"another torch build");

    // Killed mid-install again, then torch A deleted altogether.
    std::fs::remove_dir_all(&a.dir).unwrap();
    let a2 = sb.torch(TorchKind::Rocm, HIP);
    crash(&sb, &strs(&install_args(&sb)), "install-backed-up");
    std::fs::remove_dir_all(&a2.dir).unwrap();
    let run = sb.rollback(&[]).ok();
    run.says("is gone now, so it is closed");
    run.says("Restored transaction 2");
    let list = sb.rollback(&["--list"]).ok().stdout;
    assert!(!list.contains("backed-up"), "{list}");
}

// 2. Files that are not ours.

#[test]
fn files_in_the_state_dir_that_are_not_ours_are_never_touched() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let state = Path::new(&sb.state()).to_owned();
    for (rel, text) in [
        ("staging/notes.txt", "mine"),
        ("staging/libMIOpen.so", "mine too"),
        ("backups/old.so.tmp", "and this"),
        ("transactions/README", "keep"),
    ] {
        std::fs::create_dir_all(state.join(rel).parent().unwrap()).unwrap();
        std::fs::write(state.join(rel), text).unwrap();
    }
    sb.install(&[]).ok();
    sb.rollback(&[]).ok();
    sb.install(&[]).ok();
    for rel in [
        "staging/notes.txt",
        "staging/libMIOpen.so",
        "backups/old.so.tmp",
        "transactions/README",
    ] {
        assert!(state.join(rel).is_file(), "{rel} was removed");
    }
    sb.rollback(&[]).ok();

    // A symlinked staging dir is refused, and what it points at is kept.
    let elsewhere = sb.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("precious"), "x").unwrap();
    std::fs::rename(state.join("staging"), sb.root.join("old-staging")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, state.join("staging")).unwrap();
    let before = md5(&torch.miopen());
    let run = sb.install(&[]).fails_with(
        r#"error: [..]/state/staging is a symlink; rdna1-patch only writes into directories it created
help: remove the symlink (`rm [..]/state/staging`) and run again; nothing was changed"#,
    );
    run.says("staging is a symlink");
    assert!(elsewhere.join("precious").is_file());
    assert_eq!(md5(&torch.miopen()), before);
    std::fs::remove_file(state.join("staging")).unwrap();

    // A lock that is a symlink is not followed, so its target is not truncated.
    let victim = sb.root.join("victim");
    std::fs::write(&victim, "important").unwrap();
    std::fs::remove_file(state.join("lock")).unwrap();
    std::os::unix::fs::symlink(&victim, state.join("lock")).unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: cannot open the lock file [..]/state/lock: Too many levels of symbolic links
help: it must be a plain file that rdna1-patch created; if it is a symlink or something else, remove it (`rm [..]/state/lock`) and run again"#,
    );
    run.says("cannot open the lock file");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "important");
    std::fs::remove_file(state.join("lock")).unwrap();
    sb.install(&[]).ok();
}

#[test]
fn an_edited_journal_never_names_a_file_to_delete_or_overwrite() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    let installed = std::fs::read(torch.miopen()).unwrap();
    let j = journal(&sb, 1);
    let text = std::fs::read_to_string(&j).unwrap();

    // `temp` planted on another file, with the transaction left mid-swap.
    let victim = sb.root.join("victim.so");
    std::fs::write(&victim, &installed).unwrap();
    std::fs::write(
        &j,
        text.replace("state = \"installed\"", "state = \"swapping\"")
            .replacen(
                "\n[torch]",
                &format!("temp = \"{}\"\n\n[torch]", victim.display()),
                1,
            ),
    )
    .unwrap();
    let run = sb.rollback(&[]).ok();
    run.says("interrupted after the swap");
    assert!(
        victim.is_file(),
        "the file named in the journal was deleted"
    );
    sb.install(&[]).ok();

    // `target` edited to point at a copy of our library outside torch.
    let j = journal(&sb, 2);
    let text = std::fs::read_to_string(&j).unwrap();
    let target = torch.miopen().canonicalize().unwrap();
    std::fs::write(
        &j,
        text.replace(target.to_str().unwrap(), victim.to_str().unwrap()),
    )
    .unwrap();
    let run = sb.rollback(&[]).fails_with(
        r#"error: 1 transaction journal(s) cannot be trusted, so rdna1-patch will not change torch:
  [..]/state/transactions/0002.toml: its target [..]/victim.so is not a libMIOpen inside [..]/site/torch
help: if you edited it, undo the edit; otherwise check that torch's libMIOpen.so is the one you want, then set the journal aside (`mv [..]/state/transactions/0002.toml [..]/state/transactions/0002.toml.damaged`) and run this again"#,
    );
    run.says("cannot be trusted");
    run.says("is not a libMIOpen inside");
    run.says(&format!("mv {}", j.display()));
    assert_eq!(std::fs::read(&victim).unwrap(), installed);
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), installed);
    // The read-only views still work, and say what is wrong.
    // A damaged journal fails status's answer (the rule doctor takes).
    let status = sb
        .run_with_state(&["status", "--prefix", sb.prefix.to_str().unwrap()], &[])
        .check_fails();
    status.prints("damaged: ");
    assert!(
        status
            .stdout
            .starts_with("verdict: 1 problem to fix: damaged\n")
    );
    std::fs::write(&j, text).unwrap();
    sb.rollback(&[]).ok();
}

#[test]
fn a_profile_name_cannot_leave_the_work_dir() {
    let sb = Sandbox::new();
    for bad in ["../escape", "/tmp/escape", "..", ".hidden"] {
        sb.write_profile(|t| t.replace("name = \"mini\"", &format!("name = \"{bad}\"")));
        let run = sb.build(&["--stop-after", "fetch"]).fails();
        assert!(
            run.stderr
                .contains(&format!("name `{bad}` is not a plain name")),
            "{bad}: {}",
            run.stderr
        );
    }
    assert!(!sb.root.join("escape").exists());
    assert!(!sb.work.exists());
}

// 3. Leaving torch.

#[test]
fn a_library_symlinked_out_of_torch_is_refused() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let system = sb.root.join("system-rocm/lib");
    std::fs::create_dir_all(&system).unwrap();
    std::fs::rename(torch.miopen(), system.join("libMIOpen.so")).unwrap();
    std::os::unix::fs::symlink(system.join("libMIOpen.so"), torch.miopen()).unwrap();
    let before = md5(&system.join("libMIOpen.so"));
    let run = sb.install(&[]).fails_with(
        r#"error: [..]/site/torch/lib/libMIOpen.so is a symlink to [..]/system-rocm/lib/libMIOpen.so, outside torch at [..]/site/torch: rdna1-patch only replaces a file that belongs to torch
help: that file may be used by other programs (a system ROCm, say). To patch this torch alone, replace the symlink with a copy (`cp --remove-destination [..]/system-rocm/lib/libMIOpen.so [..]/site/torch/lib/libMIOpen.so`) and install again"#,
    );
    run.says("outside torch at");
    run.says("cp --remove-destination");
    assert_eq!(md5(&system.join("libMIOpen.so")), before);
}

/// A library that lives on another filesystem inside torch: the new file
/// is written next to it, so the swap is one rename there, never EXDEV.
#[test]
fn a_library_on_another_filesystem_inside_torch_is_swapped_there() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let real = torch.dir.join("real");
    let Some(_mount) = Tmpfs::mount(&real, "4m") else {
        return;
    };
    std::fs::copy(torch.miopen(), real.join("libMIOpen.so")).unwrap();
    std::fs::remove_file(torch.miopen()).unwrap();
    std::os::unix::fs::symlink("../real/libMIOpen.so", torch.miopen()).unwrap();
    let original = std::fs::read(real.join("libMIOpen.so")).unwrap();
    let run = sb.install(&[]).ok();
    run.says("Installed");
    let installed = std::fs::read(real.join("libMIOpen.so")).unwrap();
    assert!(contains_bytes(&installed, "[RDNA1 PATCH]"));
    assert!(torch.miopen().is_symlink());
    // torch still imports through the symlink.
    sb.maps_after_import();
    sb.rollback(&[]).ok();
    assert_eq!(std::fs::read(real.join("libMIOpen.so")).unwrap(), original);
    let leftovers: Vec<_> = std::fs::read_dir(&real)
        .unwrap()
        .chain(std::fs::read_dir(&torch.lib).unwrap())
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("rdna1-patch"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
