//! The rocBLAS fixture: tests/fixtures/rocblas-mini as Debian ships
//! rocBLAS's source (a tarball unpacking to `rocBLAS-rocm-6.4.4/`, pinned
//! by its SHA-256 and served through file://), tests/fixtures/tensile-mini
//! as a tagged git origin, a fake ROCm whose amdclang++ is the machine's
//! clang++, and a profile pointing at them.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{copy_dir, fixtures, git, run};

/// The tag the Tensile origin carries, which the profile pins.
pub const TENSILE_TAG: &str = "rocm-6.4.4";

pub struct RocblasFixture {
    pub root: PathBuf,
    /// The tarball the profile's file:// URL names.
    pub tarball: PathBuf,
    /// The Tensile stand-in's git origin.
    pub tensile: PathBuf,
    pub rocm: PathBuf,
    pub profile: PathBuf,
    pub work: PathBuf,
    pub prefix: PathBuf,
}

impl RocblasFixture {
    pub fn create(root: &Path) -> RocblasFixture {
        // Made as GitHub makes a tag's tarball (and Debian's orig tarball
        // of rocBLAS is one): `git archive`, whose first member is a pax
        // global header holding the commit, beside the one top directory.
        let staged = root.join("tarball-tree");
        copy_dir(&fixtures().join("rocblas-mini"), &staged);
        git(&staged, &["init", "-q", "-b", "main"]);
        git(&staged, &["add", "-A"]);
        git(&staged, &["commit", "-q", "-m", "rocBLAS mini"]);
        let tarball = root.join("rocblas_6.4.4.orig.tar.gz");
        git(
            &staged,
            &[
                "archive",
                "--format=tar.gz",
                "--prefix=rocBLAS-rocm-6.4.4/",
                "-o",
                &tarball.display().to_string(),
                "HEAD",
            ],
        );
        let tensile = root.join("tensile-origin");
        copy_dir(&fixtures().join("tensile-mini"), &tensile);
        git(&tensile, &["init", "-q", "-b", "main"]);
        git(&tensile, &["add", "-A"]);
        git(&tensile, &["commit", "-q", "-m", "Tensile mini"]);
        git(&tensile, &["tag", "-a", TENSILE_TAG, "-m", TENSILE_TAG]);
        let rocm = root.join("rocm");
        std::fs::create_dir_all(rocm.join(".info")).unwrap();
        std::fs::write(rocm.join(".info/version"), "6.4.4-1\n").unwrap();
        // What the profile requires of ROCm: roctx's header.
        let roctx = rocm.join("include/roctracer");
        std::fs::create_dir_all(&roctx).unwrap();
        std::fs::write(
            roctx.join("roctx.h"),
            "/* roctx, as the fixture needs it: present */\n",
        )
        .unwrap();
        // The profile names AMD's amdclang++; here it is the machine's clang.
        let clang = which("clang++");
        let bin = rocm.join("llvm/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let shim = bin.join("amdclang++");
        std::fs::write(
            &shim,
            format!("#!/bin/sh\nexec {} \"$@\"\n", clang.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let fx = RocblasFixture {
            root: root.to_owned(),
            profile: root.join("rocblas-mini.toml"),
            work: root.join("work"),
            prefix: root.join("prefix"),
            tarball,
            tensile,
            rocm,
        };
        fx.write_profile(|t| t);
        fx
    }

    /// The tarball's SHA-256, as the profile pins it.
    pub fn sha256(&self) -> String {
        let bytes = std::fs::read(&self.tarball).unwrap();
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Write the profile, letting the caller edit the template text first.
    pub fn write_profile(&self, edit: impl FnOnce(String) -> String) {
        let commit = git(
            &self.tensile,
            &["rev-parse", &format!("{TENSILE_TAG}^{{commit}}")],
        );
        let text = std::fs::read_to_string(fixtures().join("profiles/rocblas-mini.toml"))
            .unwrap()
            .replace("@URL@", &format!("file://{}", self.tarball.display()))
            .replace("@SHA256@", &self.sha256())
            .replace(
                "@TENSILE_URL@",
                &format!("file://{}", self.tensile.display()),
            )
            .replace("@TENSILE_COMMIT@", &commit)
            .replace("@PREFIX@", self.prefix.to_str().unwrap());
        std::fs::write(&self.profile, edit(text)).unwrap();
    }

    /// Arguments for `rdna1-patch build rocblas` on this fixture.
    pub fn build_args(&self) -> Vec<String> {
        [
            "build",
            "rocblas",
            "--profile",
            self.profile.to_str().unwrap(),
            "--work-dir",
            self.work.to_str().unwrap(),
            "--rocm",
            self.rocm.to_str().unwrap(),
            "--jobs",
            "2",
        ]
        .map(String::from)
        .to_vec()
    }
}

/// Where `program` is on the harness's PATH.
fn which(program: &str) -> PathBuf {
    let out = run(Command::new("sh").args(["-c", &format!("command -v {program}")]));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}
