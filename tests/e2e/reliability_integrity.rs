//! The defects an adversarial run found (issue 16), continued: integrity
//! that could be fooled, and hangs.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::reliability::md5;
use crate::support::{HIP, Sandbox, TorchKind, fixtures, md5sum_c};

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
help: rebuild and reinstall it with `rdna1-patch build miopen[..]` (a no-op build reinstalls the prefix from the build dir)"#,
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
help: rebuild and reinstall it with `rdna1-patch build miopen[..]` (a no-op build reinstalls the prefix from the build dir)"#,
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
help: rebuild and reinstall it with `rdna1-patch build miopen[..]` (a no-op build reinstalls the prefix from the build dir)"#,
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
help: nothing was changed. To build with them, pass --keep-local (they are recorded in the prefix's provenance); to make them part of a patch, `rdna1-patch patches refresh[..]`; to drop them, `git -C [..]/work/mini/miopen/src checkout -- .` and `git -C [..]/work/mini/miopen/src clean -fd`"#,
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
