//! `cargo xtask demo`: the whole pipeline on the fixture project, in a temp
//! sandbox, one stage at a time, so a newcomer without ROCm can watch it.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::run;

pub fn run_demo(root: &Path) -> Result<()> {
    run(crate::cargo().args(["build", "--quiet", "--bin", "rdna1-patch"]))?;
    let bin = root.join("target/debug/rdna1-patch");
    let keep = std::env::var_os("RDNA1_DEMO_KEEP").is_some();
    let sandbox = tempfile_dir()?;
    let sb = sandbox.as_path();
    println!(
        "demo sandbox: {} ({})",
        sb.display(),
        if keep {
            "kept"
        } else {
            "removed at the end; RDNA1_DEMO_KEEP=1 keeps it"
        }
    );

    let origin = sb.join("origin");
    copy_dir(&root.join("tests/fixtures/miopen-mini"), &origin)?;
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=demo",
            "-c",
            "user.email=demo@rdna1-patch.invalid",
            "commit",
            "-q",
            "-m",
            "MIOpen mini",
        ],
        &[
            "-c",
            "user.name=demo",
            "-c",
            "user.email=demo@rdna1-patch.invalid",
            "tag",
            "-a",
            "rocm-6.2.4",
            "-m",
            "rocm-6.2.4",
        ],
    ] {
        run(Command::new("git").args(args).current_dir(&origin))?;
    }
    let rocm = sb.join("rocm");
    std::fs::create_dir_all(rocm.join(".info"))?;
    std::fs::write(rocm.join(".info/version"), "6.2.4-demo\n")?;
    copy_dir(
        &root.join("tests/fixtures/series/miopen-mini"),
        &sb.join("series"),
    )?;
    let profile = sb.join("mini.toml");
    let text = std::fs::read_to_string(root.join("tests/fixtures/profiles/mini.toml"))?
        .replace("@URL@", origin.to_str().context("non-UTF-8 temp path")?)
        .replace("@PATCHES@", "series")
        .replace(
            "@PREFIX@",
            sb.join("prefix").to_str().context("non-UTF-8 temp path")?,
        );
    std::fs::write(&profile, text)?;

    let base = |extra: &[&str]| {
        let mut c = Command::new(&bin);
        c.current_dir(sb)
            .args([
                "build",
                "--profile",
                "mini.toml",
                "--work-dir",
                "work",
                "--rocm",
                "rocm",
            ])
            .args(extra);
        c
    };
    println!("\n== the plan (--dry-run)");
    run(&mut base(&["--dry-run"]))?;
    for stage in ["fetch", "patch", "configure", "build"] {
        println!("\n== up to stage {stage}");
        run(&mut base(&["--stop-after", stage]))?;
    }
    println!("\n== install");
    run(&mut base(&[]))?;
    println!("\n== md5sum -c, run by coreutils, on what was installed");
    run(Command::new("md5sum")
        .args(["-c", "share/rdna1-patch/MD5SUMS"])
        .current_dir(sb.join("prefix")))?;
    println!("\n== again, with nothing changed: no fetch, no write, no compile");
    run(&mut base(&[]))?;
    println!("\n== the patch series");
    run(Command::new(&bin)
        .current_dir(sb)
        .args(["patches", "list", "--profile", "mini.toml"]))?;
    if keep {
        println!("\nkept {}", sb.display());
    } else {
        std::fs::remove_dir_all(sb)?;
    }
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("rdna1-patch-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}
