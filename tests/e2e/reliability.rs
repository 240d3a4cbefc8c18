//! The defects an adversarial run found (issue 16), one test each: state
//! that nothing could undo, files that were not ours, integrity that could
//! be fooled, hangs, and misleading results.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{
    FakeTorch, HIP, Run, Sandbox, Tmpfs, TorchKind, contains_bytes, fixtures, md5sum_c,
};

fn md5(path: &Path) -> String {
    rdna1_patch::checksum::md5_file(path).unwrap()
}

fn journal(sb: &Sandbox, id: u32) -> PathBuf {
    Path::new(&sb.state()).join(format!("transactions/{id:04}.toml"))
}

/// Run the binary and abort it at a failpoint, as kill -9 would.
fn crash(sb: &Sandbox, args: &[&str], point: &str) {
    let out = sb
        .cmd()
        .args(args)
        .env("FAILPOINTS", format!("{point}=return"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None, "{point}: expected an abort");
}

fn install_args(sb: &Sandbox) -> Vec<String> {
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

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn free_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed struct for the kernel to fill.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_bavail as u64 * s.f_frsize as u64
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
        let status = sb.status();
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
help: rdna1-patch does not overwrite a file it did not put there. If torch was reinstalled, its own library is back and `rdna1-patch rollback --abandon 1` closes the transaction without touching torch; the original stays in [..].so"#,
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
    let status = sb.status();
    status.prints("damaged: ");
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

// 4. Integrity.

#[test]
fn an_md5sums_that_leaves_out_the_library_vouches_for_nothing() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let before = md5(&torch.miopen());
    let sums = sb.prefix.join("share/rdna1-patch/MD5SUMS");
    let full = std::fs::read_to_string(&sums).unwrap();
    // An altered library and an empty MD5SUMS.
    let lib = sb.prefix.join("lib/libMIOpen.so.1.0.0");
    let mut bytes = std::fs::read(&lib).unwrap();
    bytes[200] ^= 0xff;
    std::fs::write(&lib, bytes).unwrap();
    std::fs::write(&sums, "").unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: the build in [..]/prefix does not match its MD5SUMS:
  share/rdna1-patch/MD5SUMS lists no files
help: rebuild and reinstall it with `rdna1-patch build miopen` (a no-op build reinstalls the prefix from the build dir)"#,
    );
    run.says("share/rdna1-patch/MD5SUMS lists no files");
    let run = sb.verify(&[]).check_fails();
    run.prints("MD5SUMS lists no files");
    // Without the library's line.
    let without: String = full
        .lines()
        .filter(|l| !l.ends_with("lib/libMIOpen.so.1.0.0"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&sums, without).unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: the build in [..]/prefix does not match its MD5SUMS:
  share/rdna1-patch/MD5SUMS does not list lib/libMIOpen.so.1.0.0
  lib/libMIOpen.so: MD5 [..], expected [..]
  lib/libMIOpen.so.1: MD5 [..], expected [..]
help: rebuild and reinstall it with `rdna1-patch build miopen` (a no-op build reinstalls the prefix from the build dir)"#,
    );
    run.says("share/rdna1-patch/MD5SUMS does not list lib/libMIOpen.so.1.0.0");
    assert_eq!(md5(&torch.miopen()), before);
}

#[test]
fn md5sums_naming_a_fifo_or_a_device_fails_at_once() {
    let sb = Sandbox::built();
    let sums = sb.prefix.join("share/rdna1-patch/MD5SUMS");
    let full = std::fs::read_to_string(&sums).unwrap();
    let fifo = sb.prefix.join("include/fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let zero = "d41d8cd98f00b204e9800998ecf8427e";
    std::fs::write(
        &sums,
        format!(
            "{full}{zero}  include/fifo\n{zero}  ../../../../../../dev/zero\n{zero}  /dev/zero\n"
        ),
    )
    .unwrap();
    let start = Instant::now();
    let run = sb.verify(&[]).check_fails();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let prefix = run
        .stdout
        .lines()
        .find(|l| l.get(6..).is_some_and(|r| r.starts_with("prefix ")))
        .unwrap()
        .to_owned();
    assert!(
        prefix.contains("include/fifo is a FIFO, not a regular file"),
        "{prefix}"
    );
    assert!(
        prefix.contains("../../../../../../dev/zero: outside the directory it vouches for"),
        "{prefix}"
    );
    assert!(
        prefix.contains("; /dev/zero: outside the directory it vouches for"),
        "{prefix}"
    );
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let before = md5(&torch.miopen());
    let run = sb.install(&[]).fails_with(
        r#"error: the build in [..]/prefix does not match its MD5SUMS:
  share/rdna1-patch/MD5SUMS lists ../../../../../../dev/zero, which the build did not install
  share/rdna1-patch/MD5SUMS lists /dev/zero, which the build did not install
  share/rdna1-patch/MD5SUMS lists include/fifo, which the build did not install
  include/fifo: [..]/prefix/include/fifo is a FIFO, not a regular file
  ../../../../../../dev/zero: outside the directory it vouches for
  /dev/zero: outside the directory it vouches for
help: rebuild and reinstall it with `rdna1-patch build miopen` (a no-op build reinstalls the prefix from the build dir)"#,
    );
    run.says("does not match its MD5SUMS");
    assert_eq!(md5(&torch.miopen()), before);
}

#[test]
fn local_edits_in_the_checkout_are_named_and_kept() {
    let sb = Sandbox::new();
    sb.build(&[]).ok();
    let src = sb.src();
    // An edit to a file no patch touches.
    let cmake = src.join("CMakeLists.txt");
    let edited = format!("{}# my change\n", std::fs::read_to_string(&cmake).unwrap());
    std::fs::write(&cmake, &edited).unwrap();
    // And one to a file the series patched.
    let hip = src.join("src/hip/handlehip.cpp");
    let hip_edited = format!("{}// mine\n", std::fs::read_to_string(&hip).unwrap());
    std::fs::write(&hip, &hip_edited).unwrap();
    let run = sb.build(&[]).fails_with(
        r#"error: the checkout [..]/work/mini/miopen/src has local edits that are not part of miopen rocm-6.2.4 and its patch series: CMakeLists.txt, src/hip/handlehip.cpp
help: nothing was changed. To build with them, pass --keep-local (they are recorded in the prefix's provenance); to make them part of a patch, `rdna1-patch patches refresh`; to drop them, `git -C [..]/work/mini/miopen/src checkout -- .` and `git -C [..]/work/mini/miopen/src clean -fd`"#,
    );
    run.says("has local edits that are not part of miopen rocm-6.2.4 and its patch series: CMakeLists.txt, src/hip/handlehip.cpp");
    run.says("--keep-local");
    assert!(run.compiled().is_empty(), "{:?}", run.compiled());
    assert_eq!(std::fs::read_to_string(&hip).unwrap(), hip_edited);
    assert_eq!(std::fs::read_to_string(&cmake).unwrap(), edited);
    // --keep-local builds them, says so, and records them.
    let run = sb.build(&["--keep-local"]).ok();
    run.says("building with local edits (--keep-local)");
    assert_eq!(std::fs::read_to_string(&hip).unwrap(), hip_edited);
    let prov =
        std::fs::read_to_string(sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    assert!(
        prov.contains("local_edits = [\"CMakeLists.txt\", \"src/hip/handlehip.cpp\"]"),
        "{prov}"
    );
    let run = sb.verify(&[]).ok();
    run.prints("built with local edits");
}

#[test]
fn a_prefix_file_rewritten_with_the_same_size_and_mtime_is_reinstalled() {
    let sb = Sandbox::new();
    sb.build(&[]).ok();
    let header = sb.prefix.join("include/miopen/miopen.h");
    let meta = std::fs::metadata(&header).unwrap();
    let mut bytes = std::fs::read(&header).unwrap();
    bytes[0] = if bytes[0] == b'/' { b'#' } else { b'/' };
    std::fs::write(&header, &bytes).unwrap();
    let f = std::fs::File::options().write(true).open(&header).unwrap();
    f.set_modified(meta.modified().unwrap()).unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(&header).unwrap().len(), meta.len());
    let run = sb.build(&[]).ok();
    assert!(!run.stderr.contains("is up to date"), "{}", run.stderr);
    run.says("checksums written");
    md5sum_c(&sb.prefix);
}

// 5. Hangs.

/// A "git server" on loopback that accepts connections and never answers;
/// it stops by itself.
fn silent_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            if let Ok((c, _)) = listener.accept() {
                held.push(c);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    port
}

#[test]
fn a_git_server_that_never_answers_is_given_up_on() {
    let port = silent_server();
    for scheme in ["http", "https"] {
        let sb = Sandbox::new();
        sb.write_profile(|t| {
            t.replace(
                sb.origin.to_str().unwrap(),
                &format!("{scheme}://127.0.0.1:{port}/MIOpen.git"),
            )
        });
        let start = Instant::now();
        let run = sb
            .build(&["--stop-after", "fetch", "--net-timeout", "2"])
            .fails();
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{scheme}: {:?}",
            start.elapsed()
        );
        assert!(
            run.stderr.contains(&format!(
                "cannot fetch rocm-6.2.4 from {scheme}://127.0.0.1:{port}/MIOpen.git: the server sent nothing for 2 s"
            )),
            "{scheme}: {}",
            run.stderr
        );
        run.says("--net-timeout SECS");
    }
}

#[test]
fn verify_runtime_keeps_its_time_limit_when_the_import_leaves_children() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    let init = torch.dir.join("__init__.py");
    let stock = std::fs::read_to_string(&init).unwrap();
    // A child in the import's process group, and one that left it; both
    // keep stdout and stderr open for 30 s.
    for new_session in ["False", "True"] {
        std::fs::write(
            &init,
            format!(
                "{stock}\nimport subprocess\nsubprocess.Popen(['sleep', '30'], start_new_session={new_session})\n"
            ),
        )
        .unwrap();
        let start = Instant::now();
        let run = sb.verify(&["--runtime", "--timeout", "3"]).ok();
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "new session {new_session}: {took:?}"
        );
        assert!(
            run.stdout.lines().any(|l| l.starts_with("ok    runtime")),
            "{}",
            run.stdout
        );
    }
    let _ = Command::new("pkill").args(["-f", "^sleep 30$"]).status();
}

#[test]
fn doctor_names_a_sysfs_node_it_cannot_read_instead_of_hanging() {
    let sb = Sandbox::new();
    let sys = sb.root.join("sys");
    crate::support::copy_dir(&fixtures().join("sysfs/rx5600xt-gfx1010"), &sys);
    let props = sys.join("class/kfd/kfd/topology/nodes/1/properties");
    std::fs::remove_file(&props).unwrap();
    let c = std::ffi::CString::new(props.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let start = Instant::now();
    sb.set_gpus(&sys);
    let run = sb.run(&["doctor", "--need-space", "0"]);
    assert!(start.elapsed() < Duration::from_secs(20));
    run.prints("a KFD topology node was skipped: node 1: ")
        .prints("is a FIFO, not a regular file");
    // A need that overflows GiB -> bytes is still a need, not "ok".
    let run = sb.run(&["doctor", "--all", "--need-space", "17179869184"]);
    let disk = run
        .stdout
        .lines()
        .find(|l| l.get(6..).is_some_and(|r| r.starts_with("disk ")))
        .unwrap()
        .to_owned();
    assert!(disk.starts_with("FAIL"), "{disk}");
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
    sb.status().prints("installed:  nowhere");
}
