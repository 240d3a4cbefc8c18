//! `rollback` does what it says: the torch named is the one whose
//! transaction is undone, and transaction numbers never wrap.

use std::path::Path;

use crate::support::{HIP, Sandbox, TorchKind};

fn md5(path: &Path) -> String {
    rdna1_patch::checksum::md5_file(path).unwrap()
}

/// Issue 42, 8: `--torch-dir A` undoes A's install, not the state dir's
/// newest, which is B's.
#[test]
fn the_torch_named_is_the_one_rolled_back() {
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
    sb.install(&["--torch-dir", a.dir.to_str().unwrap()]).ok();
    sb.install(&["--torch-dir", b.dir.to_str().unwrap()]).ok();
    let fixed_b = md5(&b.miopen());
    sb.rollback(&["--torch-dir", a.dir.to_str().unwrap()])
        .ok()
        .says("transaction 1:");
    assert_eq!(md5(&a.miopen()), orig_a);
    assert_eq!(md5(&b.miopen()), fixed_b, "B is left as it is");
    // A transaction of another torch is not undone under A's name.
    sb.rollback(&["--torch-dir", a.dir.to_str().unwrap(), "--to", "2"])
        .fails_with(&format!(
            "error: transaction 2 is of the torch at {}, not of the one you named
help: `rdna1-patch rollback --list[..]` shows which torch each transaction is of; name that torch, or leave out --python and --torch-dir",
            b.dir.canonicalize().unwrap().display()
        ));
    assert_eq!(md5(&b.miopen()), fixed_b);
    sb.rollback(&["--torch-dir", a.dir.to_str().unwrap()])
        .ok()
        .says("nothing to roll back");
    sb.rollback(&[]).ok().says("transaction 2:");
    assert_eq!(md5(&b.miopen()), orig_b);
}

/// Issue 42, 15: a journal set aside under the highest number there is
/// stops the next install with what to do, instead of wrapping to 0.
#[test]
fn a_journal_numbered_u32_max_stops_the_next_install_unwrapped() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let original = md5(&torch.miopen());
    let dir = Path::new(&sb.state()).join("transactions");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{}.toml.damaged", u32::MAX)),
        "set aside\n",
    )
    .unwrap();
    sb.install(&[]).fails_with(&format!(
        "error: the journals in {} already use transaction number {max}, the highest there is; nothing was changed
help: move the journal numbered {max} out of {} (it was set aside or edited by hand), then run this again",
        sb.state(),
        dir.display(),
        max = u32::MAX
    ));
    assert_eq!(md5(&torch.miopen()), original);
}

/// Wait (a bounded while) for `path` to appear: the sign that a run in
/// the background got past a step.
fn wait_for(path: &Path, child: &mut std::process::Child) {
    // Up to 60 s: before the file appears the run diagnoses and proves the
    // fix (16 comgr compiles), which took over 12 s at a load of 11 on 2
    // cores, three engineers' suites at once.
    for _ in 0..3000 {
        if path.exists() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the run ended ({status}) before {} appeared",
                path.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{} never appeared", path.display());
}

fn in_place_install(
    sb: &Sandbox,
    torch: &rdna1_testkit::FakeTorch,
    failpoint: Option<&str>,
) -> std::process::Command {
    let mut c = sb.cmd();
    c.args(["install", "--into-torch", "--profile", "rocm-6.4.3"])
        .args(["--prefix", sb.prefix.to_str().unwrap()])
        .args(["--state-dir", &sb.state()])
        .args(["--torch-dir", torch.dir.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(f) = failpoint {
        c.env("FAILPOINTS", f);
    }
    c
}

/// Issue 42, 3: the decision and the swap are made under one lock, so two
/// venvs sharing the profile's prefix never trade libraries: the second
/// run is told to wait, and the first installs what it derived.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature (cargo xtask ci turns it on)"
)]
fn two_torches_sharing_a_prefix_never_get_each_others_fix() {
    use crate::in_place::{HIP64, torch_in};
    let sb = Sandbox::new();
    let a = torch_in(&sb, "site", "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let b = torch_in(&sb, "site-b", "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    // B's library is another build's: its fix is other bytes than A's.
    let mut other = std::fs::read(b.miopen()).unwrap();
    other.extend_from_slice(b"another build of libMIOpen");
    std::fs::write(b.miopen(), &other).unwrap();
    // B's diagnosis and proof are made once beforehand (its dry run keeps
    // them), so B's real run reaches the lock at once while A holds it.
    let mut dry = in_place_install(&sb, &b, None);
    crate::support::Run::from(dry.arg("--dry-run").output().unwrap()).ok();
    let sums = sb.prefix.join("share/rdna1-patch/MD5SUMS");
    let mut first = in_place_install(&sb, &a, Some("in-place-derived=sleep(5000)"))
        .spawn()
        .unwrap();
    wait_for(&sums, &mut first);
    let second = crate::support::Run::from(in_place_install(&sb, &b, None).output().unwrap());
    second.fails().says("another rdna1-patch run");
    crate::support::Run::from(first.wait_with_output().unwrap())
        .ok()
        .says("Installed");
    let got = std::fs::read(a.miopen()).unwrap();
    assert!(
        !got.ends_with(b"another build of libMIOpen"),
        "torch A holds the fix of B's library"
    );
    assert_eq!(
        std::fs::read(b.miopen()).unwrap(),
        other,
        "B was not changed"
    );
    sb.verify(&["--torch-dir", a.dir.to_str().unwrap()]).ok();
}

/// Issue 42, 4: torch's library replaced (a pip upgrade) after the fix
/// read it and before the swap: the swap refuses, nothing changes.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature (cargo xtask ci turns it on)"
)]
fn a_library_upgraded_during_the_fix_is_not_swapped_for_the_old_ones_fix() {
    use crate::in_place::{HIP64, torch_of};
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let sums = sb.prefix.join("share/rdna1-patch/MD5SUMS");
    let mut run = in_place_install(&sb, &torch, Some("in-place-derived=sleep(2000)"))
        .spawn()
        .unwrap();
    wait_for(&sums, &mut run);
    let mut upgraded = std::fs::read(torch.miopen()).unwrap();
    upgraded.extend_from_slice(b"the upgrade");
    let tmp = torch.lib.join(".upgrade");
    std::fs::write(&tmp, &upgraded).unwrap();
    std::fs::rename(&tmp, torch.miopen()).unwrap();
    crate::support::Run::from(run.wait_with_output().unwrap())
        .fails()
        .says("torch's library changed while it was being fixed");
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), upgraded);
}

/// Issue 51's 400 MB row: the swap links the prefix's library in without
/// reading it back when this run wrote it and its stamp still holds. A
/// library written into after the fix (same size, in place, as patchelf
/// or an editor would) moves the stamp: it is read back and refused, and
/// torch keeps its own file.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature (cargo xtask ci turns it on)"
)]
fn a_prefix_written_into_after_the_fix_is_read_back_and_refused() {
    use crate::in_place::{HIP64, torch_of};
    use std::io::{Seek, Write};
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    let sums = sb.prefix.join("share/rdna1-patch/MD5SUMS");
    let mut run = in_place_install(&sb, &torch, Some("in-place-derived=sleep(2000)"))
        .spawn()
        .unwrap();
    wait_for(&sums, &mut run);
    let lib = sb.prefix.join("lib/libMIOpen.so");
    let mut f = std::fs::OpenOptions::new().write(true).open(&lib).unwrap();
    f.seek(std::io::SeekFrom::End(-1)).unwrap();
    f.write_all(b"X").unwrap();
    drop(f);
    crate::support::Run::from(run.wait_with_output().unwrap())
        .fails()
        .says("reads back as MD5");
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
}

/// Issue 42, 10: after a linked install, the prefix's library edited in
/// place (patchelf) changed torch's too; verify says so and how, and
/// rollback still puts torch's original back from its backup.
#[test]
fn a_linked_install_whose_prefix_was_edited_still_rolls_back() {
    use crate::in_place::{HIP64, torch_of};
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    sb.install(&["--profile", "rocm-6.4.3"])
        .ok()
        .says("Installed");
    let lib = sb.prefix.join("lib/libMIOpen.so");
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&lib), ino(&torch.miopen()), "a linked install");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&lib)
        .unwrap()
        .write_all(b"edited in the prefix")
        .unwrap();
    let report = sb.verify(&[]).check_fails().stdout;
    let row = crate::support::check_row(&report, "torch");
    assert!(row.contains("it is the same file as the prefix's"), "{row}");
    assert!(
        crate::support_run::contains(
            &report,
            "fix: `rdna1-patch rollback[..]` puts torch's original back from its backup"
        ),
        "{report}"
    );
    sb.rollback(&[]).ok().says("copied back from the backup");
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
}
