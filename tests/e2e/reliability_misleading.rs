//! The defects an adversarial run found (issue 16), continued: misleading
//! results, and the smaller ones.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::reliability::{crash, install_args, journal, md5, strs};
use crate::support::{HIP, Run, Sandbox, Tmpfs, TorchKind};

fn free_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed struct for the kernel to fill.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_bavail as u64 * s.f_frsize as u64
}

// 6. Misleading results.

#[test]
fn a_lost_state_dir_does_not_make_a_patched_torch_look_clean() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    std::fs::remove_dir_all(sb.state()).unwrap();
    let run = sb.rollback(&[]).fails_with(
        r#"error: [..]/site/torch/lib/libMIOpen.so is an rdna1-patch build, but no transaction in [..]/state installed it, so there is no original here to put back
help: if another --state-dir installed it, run `rdna1-patch rollback --state-dir DIR` with that one; if that state is lost, `pip install --force-reinstall torch==2.5.1+rocm6.2` (from the index you installed it from) brings torch's own library back"#,
    );
    run.says(&format!(
        "{} is an rdna1-patch build, but no transaction in {} installed it",
        torch.miopen().canonicalize().unwrap().display(),
        sb.state()
    ));
    run.says("pip install --force-reinstall torch==2.5.1+rocm6.2");
    let run = sb.verify(&["--python", "python3"]).check_fails();
    let line = run
        .stdout
        .lines()
        .find(|l| l.get(6..).is_some_and(|r| r.starts_with("torch ")))
        .unwrap()
        .to_owned();
    assert!(line.contains("is an rdna1-patch build"), "{line}");
    // A second state dir does not stack a new "original" on top of it.
    let run = sb.install(&[]).fails_with(
        r#"error: [..]/site/torch/lib/libMIOpen.so is already an rdna1-patch build (it carries [RDNA1 PATCH] markers), but no transaction in [..]/state put it there, so there is no original to go back to
help: if another --state-dir installed it, run this with that one. If that state is lost, reinstall torch to get its own library back (`pip install --force-reinstall torch==2.5.1+rocm6.2` from the index you installed it from), then install again"#,
    );
    run.says("is already an rdna1-patch build");
}

#[test]
fn a_damaged_journal_is_named_with_a_fix() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    let installed = md5(&torch.miopen());
    let bad = journal(&sb, 2);
    std::fs::write(&bad, "state = [not toml").unwrap();
    let run = sb.rollback(&[]).fails_with(
        r#"error: 1 transaction journal(s) cannot be trusted, so rdna1-patch will not change torch:
  [..]/state/transactions/0002.toml: TOML parse error at line 1, column 18   | 1 | state = [not toml   |                  ^ unclosed array, expected `]`
help: if you edited it, undo the edit; otherwise check that torch's libMIOpen.so is the one you want, then set the journal aside (`mv [..]/state/transactions/0002.toml [..]/state/transactions/0002.toml.damaged`) and run this again"#,
    );
    run.says("cannot be trusted, so rdna1-patch will not change torch");
    run.says(&format!("`mv {0} {0}.damaged`", bad.display()));
    assert_eq!(md5(&torch.miopen()), installed);
    let list = sb.rollback(&["--list"]).ok();
    list.says("0002.toml is damaged");
    list.prints("installed");
    std::fs::rename(&bad, bad.with_extension("toml.damaged")).unwrap();
    sb.rollback(&[]).ok();
    // A new transaction does not reuse the damaged one's number.
    sb.install(&[]).ok();
    assert!(journal(&sb, 3).is_file());
}

#[test]
fn a_full_disk_leaves_no_partial_file_and_no_open_transaction() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    // A 1 MiB original (an ELF file with data after its end, as loadable as before).
    let mut big = std::fs::read(torch.miopen()).unwrap();
    big.resize(1 << 20, 0);
    std::fs::write(torch.miopen(), &big).unwrap();
    let before = md5(&torch.miopen());
    let state = PathBuf::from(sb.state());
    let Some(_mount) = Tmpfs::mount(&state, "4m") else {
        return;
    };
    for d in ["transactions", "backups", "staging"] {
        std::fs::create_dir(state.join(d)).unwrap();
    }
    std::fs::write(state.join("lock"), "pid 0").unwrap();
    // Room for the staged (relinked) library and the journals, not for the backup too.
    let staged = std::fs::metadata(sb.prefix.join("lib/libMIOpen.so.1.0.0"))
        .unwrap()
        .len();
    let room = staged + (256 << 10);
    let filler = free_bytes(&state) - room;
    std::fs::write(state.join("filler"), vec![0u8; filler as usize]).unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: cannot write [..].so.tmp: no space left on device; torch was not changed and the partial copy was removed
help: free space on the disk holding [..]/state (or pass a --state-dir on a disk with room), then run this again"#,
    );
    run.says("the partial copy was removed");
    run.says("free space on the disk holding");
    assert_eq!(md5(&torch.miopen()), before);
    let partial: Vec<_> = std::fs::read_dir(state.join("backups"))
        .unwrap()
        .chain(std::fs::read_dir(state.join("staging")).unwrap())
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(partial.is_empty(), "{partial:?}");
    let list = sb.rollback(&["--list"]).ok().stdout;
    assert!(list.contains("aborted"), "{list}");
    std::fs::remove_file(state.join("filler")).unwrap();
    sb.install(&[]).ok();
    sb.rollback(&[]).ok();
    assert_eq!(md5(&torch.miopen()), before);
}

/// Issue 61: a full disk in torch's own directory (where the new library
/// is written beside the old) is the disk the help names; a --state-dir
/// elsewhere would not help, so it is not offered.
#[test]
fn a_full_disk_in_torchs_directory_names_that_disk() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let lib = torch.miopen().parent().unwrap().to_owned();
    let aside = sb.root.join("lib-aside");
    std::fs::rename(&lib, &aside).unwrap();
    let Some(_mount) = Tmpfs::mount(&lib, "4m") else {
        return;
    };
    for e in std::fs::read_dir(&aside).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), lib.join(e.file_name())).unwrap();
    }
    let before = md5(&torch.miopen());
    // Less room than the staged (relinked) library takes.
    let staged = std::fs::metadata(sb.prefix.join("lib/libMIOpen.so.1.0.0"))
        .unwrap()
        .len();
    let filler = free_bytes(&lib).saturating_sub(staged / 2);
    std::fs::write(lib.join("filler"), vec![0u8; filler as usize]).unwrap();
    let run = sb.install(&[]).fails_with(&format!(
        "error: cannot write [..]: no space left on device; torch was not changed and the partial copy was removed
help: free space on the disk holding {} (the new library is written beside the one it replaces), then run this again",
        lib.display()
    ));
    assert_eq!(md5(&torch.miopen()), before);
    assert!(!run.stderr.contains("--state-dir"), "{}", run.stderr);
    std::fs::remove_file(lib.join("filler")).unwrap();
    sb.install(&[]).ok();
    sb.rollback(&[]).ok();
    assert_eq!(md5(&torch.miopen()), before);
}

// 7. Smaller.

#[test]
fn a_prefix_that_is_a_file_is_refused_before_the_build() {
    let sb = Sandbox::new();
    let file = sb.root.join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let run = sb.build(&["--prefix", file.to_str().unwrap()]).fails_with(
        r#"error: the install prefix [..]/not-a-dir cannot be a directory: [..]/not-a-dir is a file
help: choose another --prefix; nothing was fetched or built"#,
    );
    run.says(&format!(
        "the install prefix {} cannot be a directory: {} is a file",
        file.display(),
        file.display()
    ));
    assert!(!run.stderr.contains("Fetching"), "{}", run.stderr);
    assert!(!sb.src().exists());
}

#[test]
fn a_huge_profile_is_refused_without_reading_it() {
    let sb = Sandbox::new();
    let f = std::fs::File::options()
        .append(true)
        .open(&sb.profile)
        .unwrap();
    f.set_len(300 << 20).unwrap();
    let start = Instant::now();
    let run = sb.build(&["--dry-run"]).fails_with("error: reading a profile: [..]/mini.toml is [..] bytes; it should be a small text file (at most 1024 KiB)");
    assert!(start.elapsed() < Duration::from_secs(5));
    run.says("is 314572800 bytes; it should be a small text file (at most 1024 KiB)");
}

#[test]
fn two_state_dirs_never_change_one_torch_at_once() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let other = sb.root.join("other-state").display().to_string();
    let prefix = sb.prefix.display().to_string();
    let install_other = || -> Run {
        sb.run(&[
            "install",
            "--into-torch",
            "--prefix",
            &prefix,
            "--state-dir",
            &other,
        ])
    };
    // While one run holds torch's lib dir, a run with another state dir waits for nothing.
    let held = std::fs::File::open(&torch.lib).unwrap();
    held.lock().unwrap();
    let before = md5(&torch.miopen());
    let run = install_other().fails_with(
        r#"error: another rdna1-patch run is changing [..]/site/torch/lib right now (perhaps with another --state-dir)
help: wait for it to finish and run this again"#,
    );
    run.says("another rdna1-patch run is changing");
    assert_eq!(md5(&torch.miopen()), before);
    drop(held);
    // One after the other: the second sees the first's build and stops.
    sb.install(&[]).ok();
    let run = install_other().fails_with(
        r#"error: [..]/site/torch/lib/libMIOpen.so is already an rdna1-patch build (it carries [RDNA1 PATCH] markers), but no transaction in [..]/other-state put it there, so there is no original to go back to
help: if another --state-dir installed it, run this with that one. If that state is lost, reinstall torch to get its own library back (`pip install --force-reinstall torch==2.5.1+rocm6.2` from the index you installed it from), then install again"#,
    );
    run.says("is already an rdna1-patch build");
    sb.rollback(&[]).ok();
    assert_eq!(md5(&torch.miopen()), before);
}

/// Found by `cargo xtask killtest`: a relinked install over an as-built one
/// took the SONAME of the file in place (ours) instead of torch's original,
/// so the same build went in as a third, different file.
#[test]
fn a_relinked_install_over_our_own_keeps_torchs_soname() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    let relinked = md5(&torch.miopen());
    sb.install(&["--no-relink"]).ok();
    sb.install(&[]).ok();
    let elf = rdna1_patch::elf::read(&torch.miopen()).unwrap();
    assert_eq!(elf.soname.as_deref(), Some("libMIOpen.so"));
    assert_eq!(md5(&torch.miopen()), relinked);
    sb.rollback(&[]).ok();
}

/// A reinstall removes what the previous MD5SUMS listed and the new build
/// does not; an edited MD5SUMS must not make that reach outside the prefix.
#[test]
fn a_reinstall_never_removes_a_file_outside_the_prefix() {
    let sb = Sandbox::new();
    sb.build(&[]).ok();
    let victim = sb.root.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, sb.prefix.join("link-out")).unwrap();
    let sums = sb.prefix.join("share/rdna1-patch/MD5SUMS");
    let text = std::fs::read_to_string(&sums).unwrap();
    let zero = "d41d8cd98f00b204e9800998ecf8427e";
    std::fs::write(
        &sums,
        format!("{text}{zero}  ../victim\n{zero}  link-out/x\n"),
    )
    .unwrap();
    let run = sb.build(&[]).ok();
    run.says("checksums written");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}

/// Found by `cargo xtask killtest`: a kill between "installed" and marking
/// the transaction an install went over as replaced left that one
/// "installed" after a rollback brought torch's original back.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --features failpoints (cargo xtask ci does)"
)]
fn a_kill_right_after_an_install_over_our_own_leaves_one_installed() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let original = std::fs::read(torch.miopen()).unwrap();
    sb.install(&[]).ok();
    let mut again = install_args(&sb);
    again.push("--no-relink".to_owned());
    crash(&sb, &strs(&again), "install-installed");
    let run = sb.rollback(&[]).ok();
    run.says("went over transaction 1 before a run was stopped; 1 is now replaced");
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    // Rolled back: nothing installed, which status says with exit 3.
    let prefix = sb.prefix.display().to_string();
    let status = sb.run_with_state(&["status", "--prefix", &prefix], &[]);
    assert_eq!(status.code, Some(3), "{}", status.stdout);
    status.prints("installed:  nowhere");
}
