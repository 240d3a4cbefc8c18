//! A Tensile catalogue is read within a bound (issue 69): at the
//! unchanged 256 MiB limit, its reading takes at most twice the file's
//! size plus 64 MB. On main (84ed257) a 64 MiB catalogue of nils, one
//! array, took 2.1 GiB: every value became a 32-byte node of a tree.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use crate::support::Sandbox;

/// The peak RSS of `c` run to its end, in bytes (wait4's ru_maxrss).
// The child is reaped by wait4 itself, which std's wait does not offer.
#[allow(clippy::zombie_processes)]
fn peak_rss(mut c: std::process::Command) -> u64 {
    let child = c
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, valid out pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    let status = std::process::ExitStatus::from_raw(status);
    assert!(status.signal().is_none(), "it was killed: {status:?}");
    u64::try_from(usage.ru_maxrss).unwrap() * 1024
}

/// Make the prefix's MD5SUMS agree with its files.
fn rehash(prefix: &Path) {
    use rdna1_patch::checksum::{format_md5sums, md5_file, parse_md5sums};
    let sums = prefix.join("share/rdna1-patch/MD5SUMS");
    let mut entries = parse_md5sums(&std::fs::read_to_string(&sums).unwrap()).unwrap();
    for e in &mut entries {
        e.md5 = md5_file(&prefix.join(&e.path)).unwrap();
    }
    std::fs::write(&sums, format_md5sums(&entries)).unwrap();
}

#[test]
fn a_catalogue_bomb_is_read_within_twice_its_size_and_64_mb() {
    let (sb, _torch, prefix) = crate::rocblas_swap::sandbox("2.6.0+rocm6.4");
    let p = prefix.display().to_string();
    let run = |sb: &Sandbox| {
        let mut c = sb.cmd();
        c.args([
            "install",
            "rocblas",
            "--into-torch",
            "--dry-run",
            "--prefix",
            &p,
        ])
        .args(["--state-dir", &sb.state()]);
        peak_rss(c)
    };
    let before = run(&sb);
    // One array of 64 Mi nils.
    const N: usize = 64 << 20;
    let mut bomb = Vec::with_capacity(N + 5);
    bomb.push(0xdd);
    bomb.extend(u32::try_from(N).unwrap().to_be_bytes());
    bomb.resize(N + 5, 0xc0);
    std::fs::write(
        prefix.join("lib/rocblas/library/TensileLibrary_lazy_gfx1012.dat"),
        &bomb,
    )
    .unwrap();
    drop(bomb);
    rehash(&prefix);
    let after = run(&sb);
    let bound = 2 * (N as u64 + 5) + 64_000_000;
    eprintln!(
        "peak RSS: {} MiB without the bomb, {} MiB with it",
        before >> 20,
        after >> 20
    );
    assert!(
        after.saturating_sub(before) <= bound,
        "reading a {} MiB catalogue took {} MiB more than the run without it ({} MiB), over {} MiB",
        N >> 20,
        after.saturating_sub(before) >> 20,
        before >> 20,
        bound >> 20
    );
}
