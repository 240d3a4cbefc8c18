//! `cargo xtask bench --only inplace`: the in-place route on a 400 MB
//! library (the fake runtime's libMIOpen, which embeds the tests' batch-norm
//! kernel texts, padded with a section of 400 MB of library-like bytes by
//! objcopy), against `cp` plus `md5sum` of the same file. The whole user
//! command is timed: read, fix, prefix with MD5SUMS, backup, swap and
//! the checks around it (not the setup before each run); once where the
//! swap can link, once where it copies.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

use super::measure::{Row, quiet, time_after, write_library_like};

pub fn in_place(bin: &Path, dir: &Path, runtime: &Path, runs: usize) -> Result<Vec<Row>> {
    // After the first run, the diagnosis and the proof of these very bytes
    // come from the cache, as for a user installing again.
    let torch = torch_with_compilers(dir, runtime)?;
    let pad = dir.join("pad");
    let big = dir.join("libMIOpen-400MB.so");
    write_library_like(&pad, 400_000_000)?;
    quiet(
        Command::new("objcopy")
            .arg("--add-section")
            .arg(format!(".rdna1_bench_pad={}", pad.display()))
            .args(["--set-section-flags", ".rdna1_bench_pad=readonly"])
            .arg(torch.miopen())
            .arg(&big),
    )?;
    std::fs::remove_file(&pad)?;
    let size = std::fs::metadata(&big)?.len();
    let (prefix, state) = (dir.join("prefix"), dir.join("state"));
    // `mode` is torch's library's: 0o755 as pip leaves it, so the swap links
    // on this one filesystem; 0o775 (group-writable) makes it copy both
    // ways, as it does across filesystems.
    let fix = |mode: u32| {
        let setup = || {
            // A fresh file: the last run left torch's name on the prefix's.
            let _ = std::fs::remove_file(torch.miopen());
            std::fs::copy(&big, torch.miopen())?;
            std::fs::set_permissions(torch.miopen(), std::fs::Permissions::from_mode(mode))?;
            for d in [&prefix, &state] {
                let _ = std::fs::remove_dir_all(d);
            }
            Ok(())
        };
        time_after(runs, setup, || {
            let out = quiet(&mut install_in_place(bin, &torch, &prefix, &state, dir))?;
            if !out.contains("kernel texts fixed") {
                bail!("the in-place fix did not run: {out}");
            }
            Ok(())
        })
    };
    let linked = fix(0o755)?;
    let copied = fix(0o775)?;
    let copy = dir.join("copy.so");
    let remove = || {
        let _ = std::fs::remove_file(&copy);
        Ok(())
    };
    let cp = time_after(runs, remove, || {
        quiet(Command::new("cp").arg(&big).arg(&copy))?;
        quiet(Command::new("md5sum").arg(&copy))?;
        Ok(())
    })?;
    let ratio = linked.median / cp.median;
    let mb = size as f64 / 1e6;
    Ok(vec![
        Row {
            name: "Fix a 400 MB libMIOpen in place and swap it into torch (`install --into-torch --in-place`)",
            ours: linked,
            reference: cp,
            reference_name: "`cp` of the same file + `md5sum`".into(),
            target: "<= 2x cp + md5sum".into(),
            met: ratio <= 2.0,
            note: format!(
                "{ratio:.2}x; a {mb:.0} MB library, a new file each run: read once, its kernel texts' digest keys the verdicts and the proof (known from the first run: the texts are the same), the fix made in memory from those bytes, then three passes on three threads (the library's MD5; its SHA-256, the provenance's, then the fixed library's write to the prefix; the fixed library's MD5); torch's file and the prefix on one filesystem, so the backup is torch's original file (a hard link) and the new library the prefix's, linked in without a read back while the stamp this run wrote it with holds"
            ),
            why: "the original is hashed twice (SHA-256 for the provenance, MD5 for the backup) beside the fixed library's MD5 and its write, and copied in memory to edit it, where cp + md5sum writes once and hashes once".into(),
        },
        Row {
            name: "The same where nothing can be linked (across filesystems, or a library others could write)",
            ours: copied,
            reference: cp,
            reference_name: "`cp` of the same file + `md5sum`".into(),
            target: "reported, no target".into(),
            met: true,
            note: format!(
                "{:.2}x; torch's library group-writable (0775), so the backup and the new file are copies on two threads, each read back (MD5) before it takes its name",
                copied.median / cp.median
            ),
            why: "".into(),
        },
    ])
}

/// `install --into-torch --in-place` of `torch` (every line whole),
/// installing into `prefix`.
pub(super) fn install_in_place(
    bin: &Path,
    torch: &rdna1_testkit::FakeTorch,
    prefix: &Path,
    state: &Path,
    home: &Path,
) -> Command {
    let mut c = on_torch(
        bin,
        &["install", "--into-torch", "--in-place"],
        torch,
        state,
        home,
    );
    c.arg("--prefix").arg(prefix);
    c
}

/// `doctor` of that torch, as [`install_in_place`] runs the install: its
/// diagnosis alone, every line whole.
pub(super) fn doctor_of(
    bin: &Path,
    torch: &rdna1_testkit::FakeTorch,
    state: &Path,
    home: &Path,
) -> Command {
    on_torch(bin, &["doctor"], torch, state, home)
}

/// `bin VERB --profile rocm-6.4.3` on `torch`, every line whole (the rows
/// read the summaries' numbers), on the RX 5600 XT's recorded KFD
/// topology: one card, gfx1010, so the fix is proven for the card in the
/// machine, as a user's would be.
fn on_torch(
    bin: &Path,
    verb: &[&str],
    torch: &rdna1_testkit::FakeTorch,
    state: &Path,
    home: &Path,
) -> Command {
    let mut c = Command::new(bin);
    c.arg("--detail")
        .args(verb)
        .args(["--profile", "rocm-6.4.3", "--torch-dir"])
        .arg(&torch.dir)
        .arg("--state-dir")
        .arg(state)
        .env("HOME", home)
        .env(
            rdna1_testkit::SYSFS_ENV,
            rdna1_testkit::gpus("rx5600xt-gfx1010"),
        );
    c
}

/// A ROCm 6.4 torch with the compilers that prove the fix beside its
/// MIOpen: Debian 12's comgr and hipRTC (HIP 5.2 kept it in the runtime
/// library), as the tests use.
pub(super) fn torch_with_compilers(dir: &Path, runtime: &Path) -> Result<rdna1_testkit::FakeTorch> {
    let torch = rdna1_testkit::FakeTorch::create(
        &dir.join("site"),
        runtime,
        rdna1_testkit::TorchKind::Rocm,
        "2.6.0+rocm6.4",
        "6.4.43484-123eb5128",
    );
    for name in ["libamd_comgr.so.2", "libamdhip64.so.5"] {
        std::os::unix::fs::symlink(
            Path::new("/usr/lib/x86_64-linux-gnu").join(name),
            torch.lib.join(name),
        )?;
    }
    Ok(torch)
}

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    eprintln!("bench: the in-place fix of a 400 MB library");
    let mem = super::measure::mem_or_tmp()?;
    in_place(cx.bin, mem.path(), cx.runtime, cx.runs)
}
