//! `cargo xtask demo --in-place`: README's main promise, watched without
//! the card. A fake ROCm 6.4 torch whose libtorch_hip.so carries real
//! gfx1010 code objects and whose libMIOpen.so embeds the fixture's
//! batch-norm kernel texts (our own, to MIOpen's shape); Debian's real
//! comgr beside it, as torch bundles its own; the KFD topology recorded
//! from an RX 5600 XT. doctor judges the kernels by compiling them, the
//! in-place fix is proven and swapped in, verify compiles it again, and
//! rollback puts torch's file back.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

use crate::demo::step;

/// Debian's comgr (libamd-comgr2), the compiler MIOpen loads.
const COMGR: &str = rdna1_testkit::DEBIAN_COMGR;

/// What a run of the demo gives `cargo xtask figures`: the time its steps
/// took (after the fake torch is built), and doctor's report on the torch
/// before the fix and after it, with the sandbox's path as `~`.
pub struct Ran {
    pub steps: std::time::Duration,
    pub before: String,
    pub after: String,
}

/// Runs the demo.
pub fn run(root: &Path, keep: bool) -> Result<Ran> {
    if !Path::new(COMGR).is_file() {
        bail!(
            "the in-place demo compiles kernels with Debian's comgr, which is not at {COMGR}: `sudo apt-get install libamd-comgr2 libclang-common-15-dev`, then run this again"
        );
    }
    eprintln!("demo: building rdna1-patch (cargo shows its progress)");
    crate::run(crate::cargo().args(["build", "--bin", "rdna1-patch"]))?;
    let bin = crate::target_dir(root).join("debug/rdna1-patch");
    let dir = tempfile::Builder::new()
        .prefix("rdna1-patch-demo-")
        .tempdir()?;
    let sb = dir.path();
    println!(
        "THIS IS A DEMO: no GPU runs. The torch is a fake one (real ELF files), its MIOpen's batch-norm kernels are the fixture's own texts, the card is an RX 5600 XT's recorded KFD topology; the compiles are real, through Debian's comgr."
    );
    println!("demo sandbox: {}", sb.display());
    println!("building the fake ROCm and torch runtime libraries (a small CMake project)");
    let runtime = rdna1_testkit::build_runtime(&sb.join("fake-runtime"));
    rdna1_testkit::FakeTorch::native(
        &sb.join("site"),
        &runtime,
        sb,
        "2.6.0+rocm6.4",
        "6.4.43484-123eb5128",
        &["gfx1010"],
    );
    let verb = |args: &[&str]| {
        let mut c = Command::new(&bin);
        c.current_dir(sb)
            .args(args)
            .env("PYTHONPATH", sb.join("site"))
            .env("HOME", sb.join("home"))
            .env_remove("XDG_STATE_HOME")
            .env("XDG_CACHE_HOME", sb.join("cache"))
            .env(
                rdna1_testkit::SYSFS_ENV,
                rdna1_testkit::gpus("rx5600xt-gfx1010"),
            );
        c
    };
    // The default state dir (under the sandbox's HOME): the commands the
    // tool prints then carry no --state-dir (README's answer block shows
    // doctor as a user types it).
    let state = sb
        .join("home/.local/state/rdna1-patch")
        .display()
        .to_string();
    let prefix = sb.join("prefix").display().to_string();
    let with_state = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--state-dir", &state]);
        verb(&all)
    };
    let start = std::time::Instant::now();
    println!("\n== doctor: the torch, its kernels compiled for the card, its route");
    let doctor = || verb(&["doctor", "--state-dir", &state]);
    // Exit 1: a problem to fix, which the fix below fixes.
    let before = report(sb, &mut doctor(), 1)?;
    let install = |extra: &[&str]| {
        let mut args = vec![
            "install",
            "--into-torch",
            "--in-place",
            "--profile",
            "rocm-6.4.3",
        ];
        args.extend(["--prefix", &prefix]);
        args.extend(extra);
        with_state(&args)
    };
    println!("\n== the dry run: the diagnosis, the proven fix it would make, nothing written");
    step(sb, &mut install(&["--dry-run"]))?;
    println!("\n== the in-place fix, proven by compiling, swapped in (journaled)");
    step(sb, &mut install(&[]))?;
    println!("\n== doctor again: the same torch, fixed");
    let after = report(sb, &mut doctor(), 0)?;
    println!("\n== verify --compile: torch's kernels compiled again, through torch's comgr");
    step(
        sb,
        &mut with_state(&["verify", "--prefix", &prefix, "--compile"]),
    )?;
    println!("\n== rollback: torch's own library, byte for byte");
    step(sb, &mut with_state(&["rollback"]))?;
    let took = start.elapsed();
    println!(
        "\ndemo done in {:.0} s (the compiles above are real; nothing ran on a GPU)",
        took.as_secs_f64()
    );
    if keep {
        let kept = dir.keep();
        println!(
            "kept {0}; its fake torch is on PYTHONPATH={0}/site",
            kept.display()
        );
    }
    Ok(Ran {
        steps: took,
        before,
        after,
    })
}

/// `cmd` shown and run as [`step`] does, its report printed and returned
/// with the sandbox's path as `~`; it must exit with `code`.
fn report(sb: &Path, cmd: &mut Command, code: i32) -> Result<String> {
    let out = crate::demo::shown_output(sb, cmd)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if out.status.code() != Some(code) {
        bail!("doctor exited with {}, not {code}", out.status);
    }
    Ok(stdout.replace(&*sb.to_string_lossy(), "~"))
}
