//! Project automation, run as `cargo xtask <task>` (see .cargo/config.toml).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

mod bench;
mod demo;
mod demo_in_place;
mod fidelity;
mod fidelity_ccob;
mod fidelity_glance;
mod fidelity_harness;
mod fidelity_hip;
mod fidelity_more;
mod fidelity_render;
mod fidelity_rocblas;
mod figures;
mod fuzz;
mod gpucode;
mod killtest;
mod needs;
mod rng;
mod rocm_env;
mod smoke_cpu;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The chroot tasks need mmdebstrap; say so before anything is done
    // (rendering FIDELITY.md from a run's results needs no chroot).
    if matches!(
        args.first().map(String::as_str),
        Some("rocm-env" | "fidelity")
    ) && !args.iter().any(|a| a == "--render-only")
        && !on_path("mmdebstrap")
    {
        eprintln!(
            "xtask: {} builds a Debian chroot with mmdebstrap, which is not installed: `apt-get install mmdebstrap`, then run this again",
            args[0]
        );
        return ExitCode::FAILURE;
    }
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("demo") if args.iter().any(|a| a == "--in-place") => demo::check_args(&args[1..])
            .and_then(|()| demo_in_place::run(&root(), args.iter().any(|a| a == "--keep")))
            .map(drop),
        Some("demo") => demo::run_demo(&root(), &args[1..]),
        Some("bench") => bench::bench(&root(), &args[1..]),
        Some("figures") => figures::figures(&root(), &args[1..]),
        Some("fuzz") => fuzz::fuzz(&root(), &args[1..]),
        Some("killtest") => killtest::killtest(&root(), &args[1..]),
        Some("fidelity") => fidelity::fidelity(&root(), &args[1..]),
        Some("rocm-env") => rocm_env::rocm_env(&root(), &args[1..]),
        Some("smoke-cpu") => smoke_cpu::smoke_cpu(&root(), &args[1..]),
        Some("gpucode") => gpucode::gpucode(&args[1..]),
        _ => {
            eprintln!("{}", usage());
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Every task with every flag it takes (a test holds this list to the
/// flags the tasks parse).
fn usage() -> String {
    format!(
        "usage: cargo xtask <task> [flags]

tasks:
  ci         fmt check, clippy -D warnings, all tests
  demo       run the whole pipeline on the fixture project in a temp sandbox;
             --in-place: doctor's diagnosis by compile, the in-place fix,
             verify --compile and rollback, on an RX 5600 XT's topology
             [--in-place] [--keep]
  bench      measure every performance target, write BENCHMARKS.md
             [--miopen-src DIR] [--miopen-lib PATH] [--against BIN] [--quick]
             [--only GROUP],
             GROUP one of:
{}
  figures    measure what the docs quote beyond the bench (the install's and
             the demos' times, target/'s and the binary's size), write
             FIGURES.md and set the docs' quotes of it
             [--only install|demos|clone|binary]
  fuzz       libFuzzer on the ELF and offload-bundle readers, the pull's, or
             the readers of a libMIOpen's kernel texts and include names;
             fails on any crash, abort, broken property or slow input
             [--seconds N] [--jobs J] [--target elf|pull|kernels|catalogue]
  killtest   kill -9 installs, rollbacks, publishes and pulls at random
             instants, check nothing is stuck, damaged or left behind
             [--runs N] [--size-mb M] [--seed S] [--route system|rocblas]
  rocm-env   a Debian chroot with ROCm (built once under target/, with
             mmdebstrap), and a command run in it with the release binary
             [--suite unstable|experimental] [--miopen-src DIR] [-- COMMAND...]
  fidelity   in that chroot: configure real MIOpen through rdna1-patch, compile
             what the series touches and the batch-norm kernels pristine and
             patched; writes FIDELITY.md
             --miopen-src DIR [--profile NAME]
             --full [--resume] --profile NAME (--mirror GITDIR | --miopen-src DIR)
             --render-only [--full] [--profile NAME]
             --release VERSION
             --upstream DIR (upstream's texts, read from the index)
             --system (the system route on Debian's libmiopen1)
             --rocblas --tensile-mirror GITDIR [--resume | --redo BUILD |
               --render-only] (real rocBLAS 6.4.4 for gfx1012 through `build
               rocblas`, into a torch bundling Debian's librocblas, and back;
               its cost beside rocBLAS's own build and a warm rebuild; about
               50 minutes; --redo tool|own|warm measures one build again)
             --ccob (the tests' compressed offload bundles, versions 1-3,
               listed by the chroot's clang-offload-bundler)
             --hip-front-end (the e2e test of the HIP proof by hipRTC's
               preprocessor, against the chroot's hipRTC 6.4)
  smoke-cpu  verify --smoke's battery on PyPI's real torch, on the CPU (a 2.8 GB
             venv under target/)
             [--torch VERSION]
  gpucode    doctor's reading of GPU code over unpacked packages (dpkg-deb -x):
             each library's targets, gfx101x's Tensile files
             DIR...",
        bench::groups_help("               ")
    )
}

/// `program` is a file in a directory of PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Where cargo builds: CARGO_TARGET_DIR when it is set.
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// A nested cargo, run from the workspace's root. `cargo xtask` is `cargo
/// run`, which gives xtask the variables of a running package
/// (CARGO_MANIFEST_DIR, CARGO_PKG_*, ...); passed down, a build script that
/// watches one (ring's watches CARGO_MANIFEST_DIR) sees it change between
/// this build and the next plain one, and each undoes the other's (113 s a
/// demo). The user's own (CARGO_HOME, CARGO_TARGET_DIR, CARGO_BUILD_*)
/// stay.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_a_running_package) {
            c.env_remove(name);
        }
    }
    c
}

/// The variables cargo sets for the package it runs, builds or tests
/// (cargo's "Environment variables Cargo sets for crates").
fn set_for_a_running_package(name: &str) -> bool {
    const EXACT: [&str; 7] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
    ];
    EXACT.contains(&name)
        || ["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_RUSTC_CURRENT_DIR"]
            .iter()
            .any(|p| name.starts_with(p))
}

fn ci() -> Result<()> {
    needs::check(&root())?;
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    // Not --all-features: vendored-openssl would compile OpenSSL once more
    // for a check; the wheel's build below compiles that code.
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        "rdna1-patch/failpoints",
        "--",
        "-D",
        "warnings",
    ]))?;
    let wheel = wheel()?;
    run(cargo()
        .args([
            "test",
            "--workspace",
            "--features",
            "rdna1-patch/failpoints",
        ])
        .env("RDNA1_PATCH_WHEEL", &wheel))?;
    Ok(())
}

/// The wheel users install, built once for the run's tests
/// (tests/e2e/wheel.rs): maturin from the clone's venv (.ci/needs),
/// linking through zig for manylinux_2_28 (pyproject.toml), its auditwheel
/// check on. Its path.
fn wheel() -> Result<PathBuf> {
    let root = root();
    let pytools = root.join(needs::PYTOOLS).join("bin");
    let out = root.join("target/wheel");
    let _ = std::fs::remove_dir_all(&out);
    // maturin finds zig as ziglang's module in the python on PATH.
    let path = std::env::join_paths(std::iter::once(pytools.clone()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))?;
    let t0 = std::time::Instant::now();
    run(Command::new(pytools.join("maturin"))
        .current_dir(&root)
        .env("PATH", path)
        .args([
            "build",
            "--release",
            "--zig",
            "--auditwheel",
            "check",
            "--out",
        ])
        .arg(&out))?;
    let wheel = std::fs::read_dir(&out)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("maturin left no wheel in {}", out.display()))?;
    eprintln!(
        "xtask: built {} in {:.0} s",
        wheel.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(wheel)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole list: what goes and what stays.
    #[test]
    fn nested_cargo_drops_the_running_packages_variables() {
        let names = [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "CARGO_INCREMENTAL",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_BIN_EXE_xtask",
            "CARGO_TARGET_TMPDIR",
        ];
        let dropped: Vec<&str> = names
            .into_iter()
            .filter(|n| set_for_a_running_package(n))
            .collect();
        assert_eq!(
            dropped,
            [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_PKG_NAME",
                "CARGO_PKG_VERSION_MAJOR",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_BIN_EXE_xtask",
                "CARGO_TARGET_TMPDIR",
            ]
        );
        // This test runs under cargo, which set CARGO_MANIFEST_DIR and
        // CARGO_PKG_NAME: the command removes both.
        let c = cargo();
        let removed: Vec<_> = c
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert!(
            removed.iter().any(|k| k == "CARGO_MANIFEST_DIR"),
            "{removed:?}"
        );
        assert!(removed.iter().any(|k| k == "CARGO_PKG_NAME"), "{removed:?}");
    }
}
