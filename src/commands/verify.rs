use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::{PrefixArg, ReportArgs, StateArg, TorchArg};
use crate::inspect::verify::{self, VerifyRequest};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    prefix: PrefixArg,
    #[command(flatten)]
    torch: TorchArg,
    #[command(flatten)]
    state: StateArg,
    /// Also import torch in a subprocess and check what it maps
    #[arg(long)]
    runtime: bool,
    /// Also run the battery on the GPU, if there is one: convolutions, batch
    /// norm, LSTM/GRU and the ops that break on gfx101x (matmul, nonzero,
    /// unique, sort, attention...) checked against the CPU, each case in a
    /// process of its own; with no GPU nothing is checked (exit 3); home is
    /// written ~ in the report
    #[arg(long)]
    smoke: bool,
    /// Also compile torch's batch-norm kernels for the card through the comgr
    /// torch loads, as MIOpen does at run time (no GPU needed)
    #[arg(long)]
    compile: bool,
    /// With --compile: compile for this target instead of the machine's
    /// RDNA1 cards (repeat it for more, e.g. a gfx1030 control)
    #[arg(long, value_name = "GFX", requires = "compile")]
    compile_for: Vec<String>,
    /// Time limit for --runtime's import, for each --smoke case and for
    /// each compile of --compile, in seconds; the smoke battery as a whole
    /// stops at 10 times this
    #[arg(long, default_value_t = 120, value_name = "SECS", value_parser = seconds)]
    timeout: u64,
    /// With --smoke: also write the battery as Markdown to FILE, a report
    /// to paste into an issue (card, driver, torch, libraries, each case's
    /// class); a file of that name is replaced whole
    #[arg(long = "report", value_name = "FILE", requires = "smoke")]
    report_file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
}

/// The variables that change what ROCm and MIOpen do, as the battery's
/// children inherit them: the report names them.
fn rocm_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            k == "HSA_OVERRIDE_GFX_VERSION"
                || k.ends_with("_VISIBLE_DEVICES")
                || k.starts_with("MIOPEN_")
        })
        .collect()
}

pub fn run(args: Args) -> Result<ExitCode> {
    // Refused before the battery runs, not after: a battery's minutes are
    // not lost to a report that cannot be written.
    // Absolute: a bare `smoke.md` has an empty parent, where no temp file
    // can be made.
    let report_file = match &args.report_file {
        Some(f) => Some(std::path::absolute(f).map_err(|e| {
            crate::error::hint(
                format!("cannot name the report {}: {e}", f.display()),
                "name a file in a directory you can write to, e.g. --report ~/smoke.md",
            )
        })?),
        None => None,
    };
    if let Some(file) = &report_file {
        writable(file)?;
    }
    let state = args.state.open()?;
    let req = VerifyRequest {
        prefix: args.prefix.resolve_installed(&state)?,
        prefix_named: args.prefix.prefix.is_some(),
        torch: args
            .torch
            .given()
            .then(|| args.torch.locator())
            .transpose()?,
        python: args
            .torch
            .python
            .clone()
            .unwrap_or_else(|| "python3".into()),
        state,
        runtime: args.runtime,
        smoke: args.smoke,
        smoke_device: super::smoke_device(),
        env: rocm_env(),
        timeout: Duration::from_secs(args.timeout),
        sysfs: super::sysfs_root(),
        jobs: crate::checksum::default_jobs(),
        compile: args.compile,
        compile_for: args.compile_for,
    };
    let mut report = verify::run(&req)?;
    // Interrupted outside the battery (which reports it in its own
    // report), the checks did not finish: no verdict is said.
    if let Some(sig) = crate::interrupt::interrupted()
        && report.interrupted().is_none()
    {
        return Err(crate::interrupt::stopped("rdna1-patch", sig));
    }
    // The battery's report is made to be shared: home is written ~.
    let home = std::env::var("HOME").ok().filter(|_| args.smoke);
    if let Some(file) = &report_file {
        crate::fsutil::write_atomic(file, report.markdown(home.as_deref()).as_bytes(), None)
            .map_err(|e| cannot_write(file, &e))?;
    }
    if args.report.json {
        crate::outln!("{}", report.json(home.as_deref()));
    } else {
        // A person's report names home `~` at a glance.
        super::home_short(&mut report.checks);
        let text = report.text(
            super::term::stdout_width(),
            home.as_deref(),
            args.report.detail(),
        );
        crate::outln!("{}", super::painted(&text));
    }
    // Interrupted, the report above is the one document: the signal's
    // status says the rest (cli.rs prints no second, error, document).
    if let Some(sig) = report.interrupted() {
        return Ok(ExitCode::from(crate::error::signal_status(sig)));
    }
    // The one rule doctor and status take too: rows to exit status.
    Ok(ExitCode::from(report.checks.answer().exit))
}

/// Where `--report FILE` goes can take a file: FILE is no directory, and
/// the directory it is in exists and takes a new file.
fn writable(file: &Path) -> Result<()> {
    const NAME_A_FILE: &str =
        "name a file in a directory you can write to, e.g. --report ~/smoke.md";
    if file.is_dir() {
        return Err(crate::error::hint(
            format!("--report {} is a directory", file.display()),
            format!(
                "name a file, e.g. --report {}",
                file.join("smoke.md").display()
            ),
        ));
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(crate::error::hint(
            format!(
                "cannot write the report {}: {} is not a directory",
                file.display(),
                dir.display()
            ),
            format!(
                "create it first (mkdir -p {}), or {NAME_A_FILE}",
                dir.display()
            ),
        ));
    }
    crate::fsutil::probe_writable(dir).map_err(|e| {
        crate::error::hint(
            format!(
                "cannot write the report {}: {}",
                file.display(),
                why_not(e.kind(), dir)
            ),
            NAME_A_FILE,
        )
    })
}

/// The report could not be written after all: said in words.
fn cannot_write(file: &Path, err: &anyhow::Error) -> anyhow::Error {
    let kind = crate::error::io_errors(err)
        .next()
        .map_or(std::io::ErrorKind::Other, std::io::Error::kind);
    let dir = file.parent().unwrap_or(Path::new("."));
    // The cause's own help (a full disk's free space, the owner) first.
    let help = crate::error::help(err).map_or_else(
        || "name a file in a directory you can write to, e.g. --report ~/smoke.md".to_owned(),
        |h| format!("{h} (--report FILE)"),
    );
    crate::error::hint(
        format!(
            "cannot write the report {}: {}",
            file.display(),
            why_not(kind, dir)
        ),
        help,
    )
}

fn why_not(kind: std::io::ErrorKind, dir: &Path) -> String {
    use std::io::ErrorKind;
    match kind {
        ErrorKind::ReadOnlyFilesystem => format!("{} is on a read-only file system", dir.display()),
        ErrorKind::PermissionDenied => {
            format!("you may not create files in {}", dir.display())
        }
        ErrorKind::StorageFull => format!("no space left in {}", dir.display()),
        ErrorKind::QuotaExceeded => format!("your disk quota is used up in {}", dir.display()),
        ErrorKind::NotFound => format!("{} takes no new files", dir.display()),
        other => format!("{other} in {}", dir.display()),
    }
}

/// A time limit: 0 would stop every case before it starts.
fn seconds(text: &str) -> std::result::Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("0 seconds would stop every check before it starts: give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a whole number of seconds")),
    }
}
