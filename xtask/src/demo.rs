//! `cargo xtask demo`: the whole pipeline on the fixture project, in a temp
//! sandbox, one stage at a time, so a newcomer without ROCm can watch it.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use rdna1_testkit::Fixture;

/// Run a step and show it as a person would type it: the program's name
/// and its arguments, the sandbox written `$SANDBOX` (not Command's debug
/// form, four lines of paths and environment a step).
pub(crate) fn step(sandbox: &Path, cmd: &mut Command) -> Result<()> {
    let shown = show(sandbox, cmd);
    let status = cmd.status()?;
    if !status.success() {
        anyhow::bail!("`{shown}` failed: {status}");
    }
    Ok(())
}

/// `cmd` shown as [`step`] does, then run with its output kept.
pub(crate) fn shown_output(sandbox: &Path, cmd: &mut Command) -> Result<std::process::Output> {
    show(sandbox, cmd);
    Ok(cmd.output()?)
}

/// Prints `cmd` as a user would type it: the tool by its name, the
/// sandbox as $SANDBOX; returns what it printed after the `$ `.
fn show(sandbox: &Path, cmd: &Command) -> String {
    let shown: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let a = a.to_string_lossy();
            let name = Path::new(&*a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            match name {
                Some(n) if n == "rdna1-patch" => n,
                _ => a.replace(&*sandbox.to_string_lossy(), "$SANDBOX"),
            }
        })
        .collect();
    let shown = shown.join(" ");
    println!("$ {shown}");
    shown
}

/// The demo's flags: --in-place (main.rs runs that demo) and --keep.
pub fn check_args(args: &[String]) -> Result<()> {
    match args.iter().find(|a| *a != "--keep" && *a != "--in-place") {
        Some(other) => anyhow::bail!(
            "cargo xtask demo takes --in-place (the diagnosis and the in-place fix) and --keep (keep the sandbox), not {other}"
        ),
        None => Ok(()),
    }
}

pub fn run_demo(root: &Path, args: &[String]) -> Result<()> {
    check_args(args)?;
    eprintln!("demo: building rdna1-patch (cargo shows its progress)");
    crate::run(crate::cargo().args(["build", "--bin", "rdna1-patch"]))?;
    let bin = crate::target_dir(root).join("debug/rdna1-patch");
    let keep = !args.is_empty();
    let dir = tempfile::Builder::new()
        .prefix("rdna1-patch-demo-")
        .tempdir()?;
    let sb = dir.path();
    println!(
        "demo sandbox: {} ({})",
        sb.display(),
        if keep {
            "kept"
        } else {
            "removed at the end; `cargo xtask demo --keep` keeps it"
        }
    );
    println!(
        "building the fake ROCm and torch runtime libraries (a small CMake project, about 10 s)"
    );
    let runtime = rdna1_testkit::build_runtime(&sb.join("fake-runtime"));
    let fx = Fixture::create(sb, &runtime);

    let build = |extra: &[&str]| {
        let mut c = fx.command(&bin);
        c.current_dir(sb).args(fx.build_args()).args(extra);
        c
    };
    println!("\n== the plan (--dry-run)");
    step(sb, &mut build(&["--dry-run"]))?;
    for stage in ["fetch", "patch", "configure", "build"] {
        println!("\n== up to stage {stage}");
        step(sb, &mut build(&["--stop-after", stage]))?;
    }
    println!("\n== install");
    step(sb, &mut build(&[]))?;
    println!("\n== md5sum -c, run by coreutils, on what was installed");
    step(
        sb,
        Command::new("md5sum")
            .args(["-c", "share/rdna1-patch/MD5SUMS"])
            .current_dir(&fx.prefix),
    )?;
    println!("\n== again, with nothing changed: no fetch, no write, no compile");
    step(sb, &mut build(&[]))?;
    println!(
        "\n== the fixture's own patch series (`rdna1-patch patches list` shows the real ones)"
    );
    step(
        sb,
        Command::new(&bin)
            .current_dir(sb)
            .args(["patches", "list", "--profile"])
            .arg(&fx.profile),
    )?;
    println!("\n== a fake ROCm torch (real ELF libraries), and the swap into it");
    let torch = rdna1_testkit::FakeTorch::create(
        &sb.join("site"),
        &runtime,
        rdna1_testkit::TorchKind::Rocm,
        "2.5.1+rocm6.2",
        "6.2.41133-dd7f95766",
    );
    let verb = |args: &[&str]| {
        let mut c = Command::new(&bin);
        c.current_dir(sb)
            .args(args)
            .arg("--state-dir")
            .arg(sb.join("state"))
            .env("PYTHONPATH", sb.join("site"));
        c
    };
    let prefix = fx.prefix.display().to_string();
    step(
        sb,
        &mut verb(&["install", "--into-torch", "--prefix", &prefix]),
    )?;
    println!("\n== ldd: the swapped library loads torch's bundled HIP runtime");
    step(sb, Command::new("ldd").arg(torch.miopen()))?;
    println!("\n== verify, importing torch in a subprocess");
    step(sb, &mut verb(&["verify", "--prefix", &prefix, "--runtime"]))?;
    println!("\n== rollback: torch's own library, byte for byte");
    step(sb, &mut verb(&["rollback"]))?;
    step(sb, &mut verb(&["rollback", "--list"]))?;
    if keep {
        let kept = dir.keep();
        println!(
            "\nkept {0}; its fake torch is on PYTHONPATH={0}/site, e.g.\n  PYTHONPATH={0}/site {1} install --into-torch --prefix {2} --state-dir {0}/state",
            kept.display(),
            bin.display(),
            prefix
        );
    }
    Ok(())
}
