//! The system route (issue 44): a torch with no MIOpen of its own, whose
//! libtorch_hip.so loads the system's libMIOpen.so.1 (AMD's ROCm packages
//! under /opt/rocm, a distribution's libmiopen1), gets a fixed copy in
//! torch/lib; the system's file is only read. Ownership is dpkg's answer:
//! real dpkg, pointed with DPKG_ADMINDIR at an admin dir each test writes
//! to dpkg's own shape. Where the system's file meets its owners (a
//! package, a package manager's upgrade, sudo's user) is in
//! `system_route_owners`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rdna1_testkit::{FakeTorch, TorchKind, fat_library_linking};

use crate::in_place::HIP64;
use crate::support::{Run, Sandbox, contains_bytes, runtime, snapshot};

pub(crate) const MARKER: &str = "[RDNA1 PATCH] batchnorm: gfx101x has no DPP row_bcast";

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
        // install's and rollback's lines whole, as the tests hold them.
        if matches!(args.first(), Some(&("install" | "rollback" | "build"))) {
            c.arg("--detail");
        }
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

pub(crate) fn patchelf(args: &[&str], file: &Path) {
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

pub(crate) fn md5(path: &Path) -> String {
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

    let doctor = || {
        st.run(
            &sb,
            &[
                "doctor",
                "--detail",
                "--need-space",
                "0",
                "--python",
                "python3",
            ],
        )
    };
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
            "--detail",
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
            "2 batch-norm kernels judged compile for gfx1010 (no RDNA1 card found: for gfx1010) through comgr 2.4 ({}); the original's: 2 of 2 fail",
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
                "--detail",
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
