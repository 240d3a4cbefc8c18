//! The system route (issue 44): a torch with no MIOpen of its own, whose
//! libtorch_hip.so loads the system's libMIOpen.so.1 (AMD's ROCm packages
//! under /opt/rocm, a distribution's libmiopen1), gets a fixed copy in
//! torch/lib; the system's file is only read. Ownership is dpkg's answer:
//! real dpkg, pointed with DPKG_ADMINDIR at an admin dir each test writes
//! to dpkg's own shape.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rdna1_testkit::{FakeTorch, TorchKind, fat_library_linking};

use crate::in_place::HIP64;
use crate::support::{Run, Sandbox, contains_bytes, runtime, snapshot};

const MARKER: &str = "[RDNA1 PATCH] batchnorm: gfx101x has no DPP row_bcast";

/// A torch built for gfx1010 against a system ROCm, as jc1122's and
/// Efenstor's are: torch/lib has no libMIOpen and no HIP runtime.
pub(crate) struct SystemTorch {
    pub torch: FakeTorch,
    /// The "system" lib dir: root's (the tests run as root, as CI does).
    pub sys: PathBuf,
    /// The system's library file, as ROCm's package names it.
    pub real: PathBuf,
    /// dpkg's admin dir for this test.
    pub admin: PathBuf,
}

impl SystemTorch {
    pub fn new(sb: &Sandbox, origin_first: bool) -> SystemTorch {
        let torch = FakeTorch::create(
            &sb.root.join("site"),
            runtime(),
            TorchKind::Rocm,
            "2.9.1+rocm6.4",
            HIP64,
        );
        let sys = sb.root.join("opt/rocm-6.4.0/lib");
        std::fs::create_dir_all(&sys).unwrap();
        // The system's MIOpen as the package lays it out: the file, its
        // SONAME's link and the development link.
        let real = sys.join("libMIOpen.so.1.0.60400");
        std::fs::copy(torch.lib.join("libMIOpen.so"), &real).unwrap();
        patchelf(&["--set-soname", "libMIOpen.so.1"], &real);
        std::os::unix::fs::symlink("libMIOpen.so.1.0.60400", sys.join("libMIOpen.so.1")).unwrap();
        std::os::unix::fs::symlink("libMIOpen.so.1", sys.join("libMIOpen.so")).unwrap();
        std::fs::rename(torch.lib.join("libamdhip64.so"), sys.join("libamdhip64.so")).unwrap();
        std::fs::remove_file(torch.lib.join("libMIOpen.so")).unwrap();
        // The compiler MIOpen uses is the system ROCm's: here Debian 12's.
        std::os::unix::fs::symlink(
            crate::diagnosis::DEBIAN_COMGR,
            sys.join("libamd_comgr.so.2"),
        )
        .unwrap();
        let s = sys.display().to_string();
        let rpath = if origin_first {
            format!("-Wl,-rpath,$ORIGIN:{s}")
        } else {
            format!("-Wl,-rpath,{s}")
        };
        let built = fat_library_linking(
            &sb.root,
            &["gfx1010"],
            &["-L", &s, "-lMIOpen", "-lamdhip64", &rpath],
        );
        std::fs::copy(built, torch.lib.join("libtorch_hip.so")).unwrap();
        let admin = sb.root.join("dpkg");
        std::fs::create_dir_all(admin.join("info")).unwrap();
        std::fs::write(admin.join("status"), "").unwrap();
        SystemTorch {
            torch,
            sys,
            real,
            admin,
        }
    }

    pub fn hip(&self) -> PathBuf {
        self.torch.lib.join("libtorch_hip.so")
    }

    pub fn copy(&self) -> PathBuf {
        self.torch.lib.join("libMIOpen.so.1")
    }

    /// Register `files` as the dpkg package `name`'s, with their MD5s
    /// (`dpkg --verify` reads them), as dpkg's status, .list and .md5sums.
    pub fn own(&self, name: &str, files: &[&Path]) {
        let mut status = std::fs::read_to_string(self.admin.join("status")).unwrap();
        status.push_str(&format!(
            "Package: {name}\nStatus: install ok installed\nPriority: optional\nSection: libs\nMaintainer: Test <test@example.org>\nArchitecture: amd64\nVersion: 6.4.0-1\nDescription: test package\n\n"
        ));
        std::fs::write(self.admin.join("status"), status).unwrap();
        let list: String = files.iter().map(|f| format!("{}\n", f.display())).collect();
        std::fs::write(self.admin.join(format!("info/{name}.list")), list).unwrap();
        let sums: String = files
            .iter()
            .filter(|f| f.is_file() && !f.is_symlink())
            .map(|f| {
                format!(
                    "{}  {}\n",
                    md5(f),
                    f.display().to_string().trim_start_matches('/')
                )
            })
            .collect();
        std::fs::write(self.admin.join(format!("info/{name}.md5sums")), sums).unwrap();
    }

    /// `args` run with this test's dpkg database.
    pub fn run(&self, sb: &Sandbox, args: &[&str]) -> Run {
        let mut c = sb.cmd();
        c.env("DPKG_ADMINDIR", &self.admin).args(args);
        Run::from(c.output().unwrap())
    }

    pub fn install(&self, sb: &Sandbox, extra: &[&str]) -> Run {
        let prefix = sb.prefix.display().to_string();
        let state = sb.state();
        let mut args = vec![
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
        args.extend(extra);
        self.run(sb, &args)
    }
}

fn patchelf(args: &[&str], file: &Path) {
    let out = std::process::Command::new("patchelf")
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn readelf_d(file: &Path) -> String {
    let out = std::process::Command::new("readelf")
        .arg("-d")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

fn md5(path: &Path) -> String {
    let out = std::process::Command::new("md5sum")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..32].to_owned()
}

/// Install, `import torch`, verify, rollback, for one run-path shape.
fn round_trip(origin_first: bool) {
    let sb = Sandbox::new();
    let st = SystemTorch::new(&sb, origin_first);
    st.own("miopen-hip", &[&st.real, &st.sys.join("libMIOpen.so.1")]);
    let hip_before = std::fs::read(st.hip()).unwrap();
    let system_before = snapshot(&st.sys);
    let real_before = std::fs::read(&st.real).unwrap();
    // As a plain user the "system" file is theirs: the route is the same.
    let owner = std::fs::metadata(&st.real).unwrap().uid();
    if crate::other_user::root_for("a root-owned system file") {
        assert_eq!(owner, 0, "a root-owned system file");
    }
    // Before: torch maps the system's file.
    let maps = sb.maps_after_import();
    assert!(maps.contains(&st.real.display().to_string()), "{maps}");

    let doctor = || st.run(&sb, &["doctor", "--need-space", "0", "--python", "python3"]);
    doctor().prints(&format!(
        "system route: torch 2.9.1+rocm6.4 loads the system's {} (the dpkg package miopen-hip); `install --into-torch` adds a fixed copy as {}",
        st.real.display(),
        st.copy().display()
    ));
    let run = st.install(&sb, &[]).ok();
    let how = if origin_first {
        format!(
            "libtorch_hip.so's RUNPATH $ORIGIN:{} searches torch/lib first: the copy goes there, libtorch_hip.so is not edited",
            st.sys.display()
        )
    } else {
        format!(
            "libtorch_hip.so's RUNPATH {} does not search torch/lib first: the copy goes there and the RUNPATH gains $ORIGIN ahead (patchelf, journaled)",
            st.sys.display()
        )
    };
    run.says(&how)
        .says("4 of 5 kernel texts fixed")
        .says(&format!(
            "the system's {} (the dpkg package miopen-hip) is only read",
            st.real.display()
        ))
        .says("a fixed copy")
        .says("which is unchanged");
    // The system's files: byte for byte, mtimes too.
    assert_eq!(snapshot(&st.sys), system_before);
    assert_eq!(std::fs::read(&st.real).unwrap(), real_before);
    // The copy: fixed, its run path the system's dir; torch maps it.
    let copy = std::fs::read(st.copy()).unwrap();
    assert!(contains_bytes(&copy, MARKER));
    // The prefix holds the fix, a same-length edit of the system's file.
    let fixed = std::fs::read(sb.prefix.join("lib/libMIOpen.so.1")).unwrap();
    assert_eq!(fixed.len(), real_before.len());
    assert_ne!(fixed, real_before);
    assert!(
        readelf_d(&st.copy()).contains(&format!("[{}]", st.sys.display())),
        "{}",
        readelf_d(&st.copy())
    );
    let maps = sb.maps_after_import();
    assert!(maps.contains(&st.copy().display().to_string()), "{maps}");
    assert!(!maps.contains(&st.real.display().to_string()), "{maps}");
    let hip_after = std::fs::read(st.hip()).unwrap();
    if origin_first {
        assert_eq!(hip_after, hip_before, "libtorch_hip.so is not edited");
    } else {
        assert_ne!(hip_after, hip_before);
        assert!(
            readelf_d(&st.hip()).contains(&format!("[$ORIGIN:{}]", st.sys.display())),
            "{}",
            readelf_d(&st.hip())
        );
    }
    doctor().prints(&format!(
        "system route: torch loads rdna1-patch's fixed copy {}, made from the system's {}",
        st.copy().display(),
        st.real.display()
    ));
    // Installing again changes nothing.
    st.install(&sb, &[]).ok().says("already holds this fix");

    let verify = st.run(
        &sb,
        &[
            "verify",
            "--runtime",
            "--compile",
            "--python",
            "python3",
            "--state-dir",
            &sb.state(),
            "--prefix",
            sb.prefix.to_str().unwrap(),
        ],
    );
    let verify = verify.ok();
    verify
        .prints(&format!(
            "import torch maps the patched {}",
            st.copy().display()
        ))
        .prints(&format!("{} unchanged (SHA-256", st.real.display()))
        .prints("dpkg --verify miopen-hip: clean")
        // --compile: the copy's kernels through the system's comgr, and the
        // system file's as the original.
        .prints(&format!(
            "2 batch-norm kernels compile for gfx1010 (no RDNA1 card found: for gfx1010) through comgr 2.4 ({}); the original's: 2 of 2 fail",
            st.sys.join("libamd_comgr.so.2").display()
        ))
        .prints(&format!(
            "the copy {} searches {}",
            st.copy().display(),
            st.sys.display()
        ))
        .prints("no problem found");
    let status = st
        .run(
            &sb,
            &[
                "status",
                "--state-dir",
                &sb.state(),
                "--prefix",
                sb.prefix.to_str().unwrap(),
            ],
        )
        .ok();
    status
        .prints(&format!("installed:  {} (transaction 1, ", st.copy().display()))
        .prints("layout system")
        .prints(&format!(
            "system route: a fixed copy of {} (dpkg miopen-hip), which is only read; libtorch_hip.so {}",
            st.real.display(),
            if origin_first {
                "not edited".to_owned()
            } else {
                format!("run path {0} -> $ORIGIN:{0}", st.sys.display())
            }
        ));
    assert!(
        !status.stdout.contains("changed since"),
        "{}",
        status.stdout
    );

    st.run(&sb, &["rollback", "--state-dir", &sb.state()])
        .ok()
        .says(&format!(
            "Restored transaction 1: took the fixed copy {} out",
            st.copy().display()
        ));
    assert_eq!(
        std::fs::read(st.hip()).unwrap(),
        hip_before,
        "byte for byte"
    );
    assert!(!st.copy().exists(), "the copy is gone");
    assert_eq!(snapshot(&st.sys), system_before);
    let maps = sb.maps_after_import();
    assert!(maps.contains(&st.real.display().to_string()), "{maps}");
    let left: Vec<_> = std::fs::read_dir(&st.torch.lib)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("rdna1-patch") || n.starts_with("libMIOpen"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn system_route_origin_first_adds_a_copy_beside_libtorch_hip() {
    round_trip(true);
}

#[test]
fn system_route_fixed_run_path_gains_origin_journaled() {
    round_trip(false);
}

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
help: make a venv with a torch of your own and fix that one: TheRock's native torch (`pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\"`), then `rdna1-patch install --into-torch`; or a torch you built for gfx1010 against this system's ROCm",
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
    status.prints("`rdna1-patch install --into-torch` takes the old copy out and fixes the library the system has now");
    st.run(
        &sb,
        &[
            "verify",
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
        "python3",
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
