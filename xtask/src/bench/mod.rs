//! `cargo xtask bench`: every performance target of the project, each as a
//! ratio against its reference measured in the same run, written to
//! BENCHMARKS.md. Whole processes are timed over repeated runs (median and
//! spread); hashing is timed in-process through the library, in a release
//! build (this task re-runs itself with --release).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::run;

mod build;
mod diagnosis;
mod fetch;
mod inplace;
mod libraries;
mod md5;
pub(crate) mod measure;
mod miopen;
mod rocblas;
mod shared;
mod tensile;

use measure::*;

struct Options {
    miopen_src: Option<PathBuf>,
    miopen_lib: Option<PathBuf>,
    against: Option<PathBuf>,
    quick: bool,
    /// Run only the rows whose group has this name; BENCHMARKS.md is then
    /// not written (it is the record of one whole run).
    only: Option<String>,
}

/// What every group's rows are measured with.
struct Bench<'a> {
    root: &'a Path,
    bin: &'a Path,
    dir: &'a Path,
    /// In memory where the machine has /dev/shm (see `mem_or_tmp`).
    fetch_dir: &'a Path,
    runtime: &'a Path,
    runs: usize,
    quick: bool,
    miopen_src: Option<&'a Path>,
    /// Debian's libMIOpen 6.4.3, for the diagnosis rows.
    miopen_lib: Option<&'a Path>,
    /// Another build of rdna1-patch (main's), whose cold diagnosis rows
    /// are measured beside ours.
    against: Option<&'a Path>,
}

/// A group of rows `--only` can name, in the order BENCHMARKS.md has them.
struct Group {
    name: &'static str,
    what: &'static str,
    rows: fn(&Bench) -> Result<Vec<Row>>,
}

const GROUPS: &[Group] = &[
    Group {
        name: "md5",
        what: "MD5 of a 1 GiB file and a 400-file check, against md5sum",
        rows: md5::rows,
    },
    Group {
        name: "build",
        what: "a no-op build, a 204-unit build, ccache",
        rows: build::rows,
    },
    Group {
        name: "fetch",
        what: "a cold and a warm fetch, against git clone",
        rows: fetch::rows,
    },
    Group {
        name: "monorepo",
        what: "a monorepo project fetched blobless and sparse",
        rows: fetch::monorepo_rows,
    },
    Group {
        name: "miopen",
        what: "real MIOpen in the ROCm chroot (--miopen-src DIR)",
        rows: miopen::rows,
    },
    Group {
        name: "shared",
        what: "installing a 400 MB prefix from a local registry",
        rows: shared::rows,
    },
    Group {
        name: "inplace",
        what: "the in-place fix of a 400 MB library, against cp + md5sum",
        rows: inplace::rows,
    },
    Group {
        name: "diagnosis",
        what: "the diagnosis by compile of Debian's libMIOpen 6.4.3 (--miopen-lib PATH)",
        rows: diagnosis::rows,
    },
    Group {
        name: "libraries",
        what: "a warm doctor with a 1 GB librocblas.so (its GPU code read from headers)",
        rows: libraries::rows,
    },
    Group {
        name: "tensile",
        what: "doctor with a Tensile directory of 1,000,000 files, against find",
        rows: tensile::rows,
    },
    Group {
        name: "rocblas",
        what: "install rocblas --into-torch and rollback with a 1 GB Tensile directory",
        rows: rocblas::rows,
    },
    Group {
        name: "help",
        what: "how long --help takes",
        rows: build::help_rows,
    },
];

/// The `--only` groups, one a line after `indent`, as the usage and
/// errors list them.
pub fn groups_help(indent: &str) -> String {
    GROUPS
        .iter()
        .map(|g| format!("{indent}{:<9} {}", g.name, g.what))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn bench(root: &Path, args: &[String]) -> Result<()> {
    if cfg!(debug_assertions) {
        // Time optimised code only: run this task again from a release build.
        let mut c = crate::cargo();
        c.args([
            "run",
            "--release",
            "--quiet",
            "--package",
            "xtask",
            "--",
            "bench",
        ])
        .args(args);
        return run(&mut c);
    }
    let mut opts = Options {
        miopen_src: None,
        miopen_lib: None,
        against: None,
        quick: false,
        only: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--miopen-src" => opts.miopen_src = it.next().map(PathBuf::from),
            "--miopen-lib" => opts.miopen_lib = it.next().map(PathBuf::from),
            "--against" => opts.against = it.next().map(PathBuf::from),
            "--quick" => opts.quick = true,
            "--only" => opts.only = it.next().cloned(),
            other => bail!(
                "bench: unknown argument {other} (known: --miopen-src DIR, --miopen-lib PATH, --against BIN, --quick, --only GROUP)\n{}",
                groups_help("  ")
            ),
        }
    }
    if let Some(o) = &opts.only
        && !GROUPS.iter().any(|g| g.name == o)
    {
        bail!("bench: no group {o}\n{}", groups_help("  "));
    }
    let started = Instant::now();
    let load_at_start = load();
    run(crate::cargo().args(["build", "--release", "--quiet", "--bin", "rdna1-patch"]))?;
    // Where cargo put it: $CARGO_TARGET_DIR when set (a worktree's own).
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("release/rdna1-patch");
    let dir = tempfile::Builder::new().prefix("rdna1-bench-").tempdir()?;
    let runtime = rdna1_testkit::build_runtime(&dir.path().join("fake-runtime"));
    // Fetches write 20k files: on this VM's disk the same `git clone` takes
    // 0.7 s to 9 s from one run to the next, so they run in memory
    // (/dev/shm) when there is one, which leaves the tools' own work.
    let fetch_dir = mem_or_tmp()?;
    let cx = Bench {
        root,
        bin: &bin,
        dir: dir.path(),
        fetch_dir: fetch_dir.path(),
        runtime: &runtime,
        runs: if opts.quick { 3 } else { 5 },
        quick: opts.quick,
        miopen_src: opts.miopen_src.as_deref(),
        miopen_lib: opts.miopen_lib.as_deref(),
        against: opts.against.as_deref(),
    };
    let mut rows = Vec::new();
    for g in GROUPS {
        if opts.only.as_deref().is_none_or(|o| o == g.name) {
            rows.append(&mut (g.rows)(&cx)?);
        }
    }
    // The binary's size is a fact of every run, `--only` ones too.
    let size = std::fs::metadata(&bin)?.len();
    if opts.only.is_some() {
        println!("{}", render(&rows, size, started.elapsed(), load_at_start)?);
        println!("(--only: BENCHMARKS.md left as it was)");
        return Ok(());
    }
    let md = render(&rows, size, started.elapsed(), load_at_start)?;
    std::fs::write(root.join("BENCHMARKS.md"), &md)?;
    println!("{md}");
    println!(
        "wrote BENCHMARKS.md in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or("?".into(), |kb| format!("{:.0} GiB", kb as f64 / 1048576.0));
    let kernel = Command::new("uname")
        .arg("-sr")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem} RAM, {kernel}")
}

fn tool_versions() -> String {
    let v = |c: &str, a: &str| {
        Command::new(c)
            .arg(a)
            .output()
            .ok()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
            .unwrap_or_else(|| format!("{c}: not found"))
    };
    [
        v("cmake", "--version"),
        v("ninja", "--version"),
        v("g++", "--version"),
        v("ccache", "--version"),
        v("git", "--version"),
        v("md5sum", "--version"),
    ]
    .join("; ")
}

/// The one-minute load average, as /proc/loadavg gives it: every row of a
/// shared machine is read against it.
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn render(rows: &[Row], size: u64, took: Duration, load_at_start: String) -> Result<String> {
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let mut md = String::new();
    md.push_str("# Benchmarks\n\nWritten by `cargo xtask bench` (do not edit by hand). Each figure is a median over repeated runs, with the range, next to its reference measured in the same run on the same machine.\n\n");
    md.push_str(&format!("- Date: {date}\n- Machine: {}\n- Tools: {}\n- Whole run: {:.0} s\n- Load (1-minute average): {load_at_start} at the start, {} at the end\n- Reproduce: `cargo xtask bench` (add `--miopen-src DIR` for a real MIOpen repository in the fetch benchmark, `--miopen-lib PATH` for Debian's libMIOpen 6.4.3 in the diagnosis rows, `--against BIN` for another build's CPU beside them, `--quick` for fewer runs)\n\n", machine(), tool_versions(), took.as_secs_f64(), load()));
    md.push_str("| Benchmark | rdna1-patch | Reference | Result | Target | Met |\n|---|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {}: {} | {} | {} | {} |\n",
            r.name,
            r.ours.show(),
            r.reference_name,
            r.reference.show(),
            r.note,
            r.target,
            if r.met { "yes" } else { "**no**" }
        ));
    }
    md.push_str(&format!(
        "\nRelease binary size: {:.1} MiB (`target/release/rdna1-patch`, thin LTO, not stripped).\n",
        size as f64 / 1048576.0
    ));
    md.push_str("\nThe distcc target is checked by the test `launcher::distcc_sends_compiles_through_a_local_daemon` (CI runs it): it starts distccd on 127.0.0.1, builds the fixture with `--launcher distcc`, and counts the COMPILE_OK lines in the daemon's own log.\n");
    md.push_str("\nHow each is measured: MD5 figures time the library's hashing in-process (release build) against the `md5sum` process, the file read from the page cache (one warm-up run first); the prefix check is `checksum::verify`, what `verify` and `install` run. Build figures run the release binary against `cmake --build` on the same build dir; the 204-unit build cleans the build dir (`--target clean`) before each run of either, and takes the build stage's own time from the run's log (the `cmake --build` child with its output streamed to the log and the progress bar), so the no-op checks of the other stages are not counted. The fetch figures time `build --stop-after fetch` into an empty work dir against the git CLI doing the same (`git clone` of the same local path; `git clone --filter=blob:none --sparse` of the monorepo's file:// URL, then `sparse-checkout set`), both in /dev/shm when the machine has it: on this VM's disk the same `git clone` of 20k files took from 0.7 s to 9 s from one run to the next. The rocBLAS rows time each `install rocblas --into-torch` and the `rollback` after it as whole commands (one warm-up pair first; each rollback checked to give torch's library and Tensile directory back), against `cp -a` of the same directory then `md5sum` of every file in the copy, all on one filesystem and from the page cache.\n");
    let missed: Vec<&Row> = rows.iter().filter(|r| !r.met).collect();
    if !missed.is_empty() {
        md.push_str("\n## Targets not met\n\n");
        for r in missed {
            md.push_str(&format!(
                "- {}: {} (target {}). Why, and what would close it: {}\n",
                r.name, r.note, r.target, r.why
            ));
        }
    }
    Ok(md)
}
