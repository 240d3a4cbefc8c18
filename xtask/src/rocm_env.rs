//! `cargo xtask rocm-env`: a real ROCm toolchain, one command away. Debian
//! unstable packages ROCm 6.4 (hipcc on clang 21, rocBLAS, comgr, hipRTC,
//! rocm-cmake); this builds a chroot with them once (mmdebstrap, about a
//! minute and 5.5 GB), keeps it under target/, and runs a command in it with
//! this checkout's release binary as /usr/local/bin/rdna1-patch and, with
//! --miopen-src, a MIOpen tree at /src. `--suite experimental` builds a
//! second chroot whose ROCm comes from Debian experimental (7.2.4), for the
//! 7.x profiles. Not part of `cargo xtask ci`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::run;

/// What the chroot holds: ROCm's development packages and what the MIOpen
/// and rocBLAS builds need besides (rocBLAS: roctx's header, msgpack, and
/// Tensile's python modules; Debian's rocblas 6.4.4 build-depends on
/// them). A change here rebuilds the chroot.
const PACKAGES: &[&str] = &[
    "hipcc",
    "libamdhip64-dev",
    "librocblas-dev",
    "rocm-cmake",
    "libhipblas-dev",
    "librocrand-dev",
    "libhalf-dev",
    "libamd-comgr-dev",
    "cmake",
    "ninja-build",
    "g++",
    "git",
    "bzip2",
    "libbz2-dev",
    "nlohmann-json3-dev",
    "libboost-dev",
    "libboost-filesystem-dev",
    "libsqlite3-dev",
    "zlib1g-dev",
    "pkg-config",
    "python3",
    "patchelf",
    "ccache",
    "libroctx-dev",
    "libhsa-runtime-dev",
    "libmsgpack-cxx-dev",
    "python3-joblib",
    "python3-msgpack",
    "python3-yaml",
    "python3-venv",
];

/// The mirror serves a dated snapshot whose Release file has expired.
const APT_OPTION: &str = "Acquire::Check-Valid-Until \"false\"";

pub struct Env {
    pub chroot: PathBuf,
}

/// Which Debian suite's ROCm: unstable's (6.4), or experimental's (7.2.4)
/// over unstable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    Unstable,
    Experimental,
}

impl Suite {
    fn parse(s: &str) -> Result<Suite> {
        match s {
            "unstable" | "sid" => Ok(Suite::Unstable),
            "experimental" => Ok(Suite::Experimental),
            other => bail!("--suite {other}: expected unstable or experimental"),
        }
    }

    fn chroot_name(self) -> &'static str {
        match self {
            Suite::Unstable => "chroot",
            Suite::Experimental => "chroot-experimental",
        }
    }
}

/// Build the chroot unless it is there with the same package list.
pub fn ensure(root: &Path) -> Result<Env> {
    ensure_suite(root, Suite::Unstable)
}

pub fn ensure_suite(root: &Path, suite: Suite) -> Result<Env> {
    let dir = root.join("target/rocm-env");
    let chroot = dir.join(suite.chroot_name());
    let stamp = dir.join(format!("{}.packages", suite.chroot_name()));
    let wanted = PACKAGES.join(",");
    // The unstable chroot's stamp had no suite in its name.
    let old_stamp = dir.join("packages");
    let stamped = |p: &Path| std::fs::read_to_string(p).ok().as_deref() == Some(wanted.as_str());
    if (stamped(&stamp) || (suite == Suite::Unstable && stamped(&old_stamp)))
        && chroot.join("usr/bin/hipcc").exists()
    {
        return Ok(Env { chroot });
    }
    if Command::new("mmdebstrap")
        .arg("--version")
        .output()
        .is_err()
    {
        bail!(
            "mmdebstrap is not installed: `apt-get install mmdebstrap` (Debian/Ubuntu), then run this again"
        );
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "building the ROCm chroot needs root (mmdebstrap, chroot and bind mounts): run it with sudo"
        );
    }
    let _ = std::fs::remove_dir_all(&chroot);
    std::fs::create_dir_all(&dir)?;
    // Measured on a first run (DEVELOPING.md).
    let cost = match suite {
        Suite::Unstable => "about 11 minutes and 5.7 GB",
        Suite::Experimental => "about 3 minutes and 5.5 GB",
    };
    eprintln!(
        "rocm-env: building {} with Debian {suite:?}'s ROCm ({cost})",
        chroot.display()
    );
    let mut mm = Command::new("mmdebstrap");
    mm.arg("--variant=apt")
        .arg(format!("--aptopt={APT_OPTION}"))
        .arg(format!("--include={wanted}"));
    if suite == Suite::Experimental {
        // Every package experimental has comes from there (ROCm 7.2.4 and
        // what it needs); the rest from unstable.
        mm.arg("--aptopt=APT::Default-Release \"experimental\"");
    }
    mm.arg("sid").arg(&chroot);
    mm.arg("deb http://deb.debian.org/debian sid main");
    if suite == Suite::Experimental {
        mm.arg("deb http://deb.debian.org/debian experimental main");
    }
    run(&mut mm)
        .context("mmdebstrap could not build the chroot; is Debian's package mirror reachable?")?;
    // Debian's libhalf-dev installs half.hpp where MIOpen does not look
    // (half/half.hpp); -D HALF_INCLUDE_DIR=/compat finds it here.
    let compat = chroot.join("compat/half");
    std::fs::create_dir_all(&compat)?;
    let _ = std::fs::remove_file(compat.join("half.hpp"));
    std::os::unix::fs::symlink("/usr/include/half.hpp", compat.join("half.hpp"))?;
    std::fs::write(&stamp, wanted)?;
    Ok(Env { chroot })
}

impl Env {
    /// Run `cmd` (a shell command line) in the chroot, in a private mount
    /// namespace, with the release binary and `src` (at /src) bound in.
    pub fn run(&self, root: &Path, src: Option<&Path>, cmd: &str) -> Result<()> {
        run(crate::cargo().args(["build", "--quiet", "--release", "--bin", "rdna1-patch"]))?;
        let bin = root.join("target/release/rdna1-patch");
        run(&mut self.command(&bin, src, cmd)?)
    }

    /// What [`Env::run`] runs, with `bin` as the chroot's rdna1-patch:
    /// for a caller that times it or reads its output.
    pub fn command(&self, bin: &Path, src: Option<&Path>, cmd: &str) -> Result<Command> {
        let c = &self.chroot;
        std::fs::create_dir_all(c.join("src"))?;
        let target_bin = c.join("usr/local/bin/rdna1-patch");
        if !target_bin.exists() {
            std::fs::write(&target_bin, b"")?;
        }
        let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
        let mut script = format!(
            "set -e\nmount --bind {} {}\nmount -t proc proc {}\n",
            q(bin),
            q(&target_bin),
            q(&c.join("proc"))
        );
        if let Some(src) = src {
            let src = src
                .canonicalize()
                .with_context(|| format!("no MIOpen tree at {}", src.display()))?;
            script.push_str(&format!("mount --bind {} {}\n", q(&src), q(&c.join("src"))));
        }
        script.push_str(&format!(
            "exec chroot {} /bin/bash -c {}\n",
            q(c),
            q(Path::new(cmd))
        ));
        let mut unshare = Command::new("unshare");
        unshare
            .args(["--mount", "--propagation", "private", "/bin/sh", "-c"])
            .arg(script);
        Ok(unshare)
    }
}

/// `cargo xtask rocm-env [--miopen-src DIR] [-- COMMAND...]`
pub fn rocm_env(root: &Path, args: &[String]) -> Result<()> {
    let mut src = None;
    let mut suite = Suite::Unstable;
    let mut cmd = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--miopen-src" => src = Some(PathBuf::from(it.next().context("--miopen-src DIR")?)),
            "--suite" => suite = Suite::parse(it.next().context("--suite unstable|experimental")?)?,
            "--" => cmd.extend(it.by_ref().cloned()),
            other => bail!(
                "unknown argument {other}: cargo xtask rocm-env [--suite unstable|experimental] [--miopen-src DIR] [-- COMMAND...]"
            ),
        }
    }
    let env = ensure_suite(root, suite)?;
    let cmd = if cmd.is_empty() {
        "hipcc --version | head -1; \"$(hipconfig --hipclangpath)/clang++\" --version | head -1; rdna1-patch doctor --rocm /usr --need-space 0 || true".to_owned()
    } else {
        cmd.join(" ")
    };
    env.run(root, src.as_deref(), &cmd)
}
