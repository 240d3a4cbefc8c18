//! `cargo xtask figures`: the figures the docs quote that no bench row
//! measures (how long the install and the demos take, how much disk a
//! build takes), measured here and written to FIGURES.md; every quote of
//! one in the docs (`VALUE<!-- figure:KEY -->`) is set to what was
//! measured, and a test holds the docs to the table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdna1_testkit::figures;

/// A group `--only` can name, and the keys it measures.
const GROUPS: &[(&str, &[&str])] = &[
    ("install", &["install-time", "install-target"]),
    (
        "demos",
        &["demo-time", "demo-in-place-time", "demo-in-place-steps"],
    ),
    ("clone", &["clone-target"]),
    ("binary", &["binary-size"]),
];

/// One row of FIGURES.md.
struct Figure {
    key: &'static str,
    value: String,
    how: String,
}

pub fn figures(root: &Path, args: &[String]) -> Result<()> {
    let only = match args {
        [] => None,
        [flag, group] if flag == "--only" => match GROUPS.iter().find(|(g, _)| g == group) {
            Some(g) => Some(g.0),
            None => bail!("figures --only takes one of {}, not {group}", group_names()),
        },
        _ => bail!(
            "figures takes nothing, or --only GROUP (one of {})",
            group_names()
        ),
    };
    let path = root.join("FIGURES.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let mut rows = old_rows(&old);
    let machine = format!(
        "{}; load average {} at the start",
        crate::bench::machine(),
        load_average()
    );
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let run = |g: &str| only.is_none_or(|o| o == g);
    let mut new = Vec::new();
    if run("install") {
        new.extend(install(root)?);
    }
    let mut answer = None;
    if run("demos") {
        let (figures, ran) = demos(root)?;
        new.extend(figures);
        answer = Some(figures::answer_block(&ran.before, &ran.after));
    }
    if run("clone") {
        new.extend(clone_target(root)?);
    }
    if run("binary") {
        new.push(binary(root)?);
    }
    for f in new {
        anyhow::ensure!(
            figures::is_value(&f.value),
            "{} measured as {:?}, which the docs cannot quote",
            f.key,
            f.value
        );
        rows.insert(
            f.key.to_owned(),
            format!(
                "| `{}` | {} | {date} | {machine} | {} |",
                f.key, f.value, f.how
            ),
        );
    }
    let md = render(&rows);
    std::fs::write(&path, &md).with_context(|| format!("cannot write {}", path.display()))?;
    let values = figures::table(&md);
    for doc in figures::docs(root) {
        let text = std::fs::read_to_string(&doc)?;
        let new = figures::rewrite(&text, &values);
        if new != text {
            std::fs::write(&doc, new)?;
            println!("figures: updated the quotes in {}", doc.display());
        }
    }
    if let Some(block) = answer {
        let path = root.join("README.md");
        let text = std::fs::read_to_string(&path)?;
        let new = figures::set_answer(&text, &block).with_context(|| {
            format!(
                "{} has no block between {} and {}",
                path.display(),
                figures::ANSWER_START,
                figures::ANSWER_END
            )
        })?;
        if new != text {
            std::fs::write(&path, new)?;
            println!(
                "figures: wrote doctor's first lines into {}",
                path.display()
            );
        }
    }
    print!("{md}");
    Ok(())
}

fn group_names() -> String {
    GROUPS.iter().map(|g| g.0).collect::<Vec<_>>().join(", ")
}

/// The rows of an earlier FIGURES.md, by key, kept when `--only` measures
/// another group.
fn old_rows(md: &str) -> BTreeMap<String, String> {
    md.lines()
        .filter_map(|l| {
            let key = l.strip_prefix("| `")?.split('`').next()?;
            GROUPS
                .iter()
                .any(|(_, keys)| keys.contains(&key))
                .then(|| (key.to_owned(), l.to_owned()))
        })
        .collect()
}

fn render(rows: &BTreeMap<String, String>) -> String {
    let mut md = String::from(
        "# Figures the docs quote\n\nWritten by `cargo xtask figures` (do not edit by hand), which also sets every quote of a figure in README.md, DEVELOPING.md and docs/ (the value followed by an HTML comment `figure:KEY`) to the value below; the test `rough_edges::the_docs_quote_the_figures_xtask_measured` fails when a quote differs. `cargo xtask figures --only GROUP` measures one group (install, demos, clone, binary) and keeps the other rows. Speed targets are BENCHMARKS.md's (`cargo xtask bench`), not these.\n\n| figure | value | measured | machine | how |\n|---|---|---|---|---|\n",
    );
    for (_, keys) in GROUPS {
        for k in *keys {
            if let Some(r) = rows.get(*k) {
                md.push_str(r);
                md.push('\n');
            }
        }
    }
    md
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// `cargo install --locked --path .` as README gives it, into an empty
/// root, with an empty target dir and an empty cargo home (so the crates
/// are downloaded, as on a newcomer's machine).
fn install(root: &Path) -> Result<Vec<Figure>> {
    let tmp = tempfile::Builder::new()
        .prefix("rdna1-patch-figures-")
        .tempdir()?;
    let target = tmp.path().join("target");
    let mut cmd = crate::cargo();
    cmd.args(["install", "--locked", "--path"])
        .arg(root)
        .arg("--root")
        .arg(tmp.path().join("root"))
        .arg("--target-dir")
        .arg(&target)
        .env("CARGO_HOME", tmp.path().join("cargo-home"));
    let start = Instant::now();
    crate::run(&mut cmd)?;
    let took = start.elapsed();
    let size = du(&target)?;
    Ok(vec![
        Figure {
            key: "install-time",
            value: minutes(took),
            how: "`cargo install --locked --path .` of this checkout with an empty target dir and an empty CARGO_HOME (every crate downloaded from crates.io and compiled), wall time".into(),
        },
        Figure {
            key: "install-target",
            value: format!("{:.0} MB", size as f64 / 1e6),
            how: "the size of that install's target dir afterwards (`du`), what `cargo clean` in the clone would free".into(),
        },
    ])
}

/// Every file cargo writes when it compiles or reruns a build script,
/// with its mtime: what a warm run must leave as it was.
fn stamps(target: &Path) -> BTreeMap<PathBuf, std::time::SystemTime> {
    let mut out = BTreeMap::new();
    let mut todo: Vec<PathBuf> = ["deps", ".fingerprint", "build"]
        .iter()
        .map(|d| target.join("debug").join(d))
        .collect();
    while let Some(p) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            todo.extend(
                std::fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if let Ok(t) = meta.modified() {
            out.insert(p, t);
        }
    }
    out
}

/// `cargo xtask ARGS` as a newcomer types it, twice: the second run's wall
/// time, which must compile nothing (no file of target/debug's deps,
/// fingerprints or build scripts changes; issue 61).
fn warm(root: &Path, args: &[&str]) -> Result<Duration> {
    let target = crate::target_dir(root);
    let demo = || crate::run(crate::cargo().arg("xtask").args(args));
    demo()?;
    let before = stamps(&target);
    let start = Instant::now();
    demo()?;
    let took = start.elapsed();
    let after = stamps(&target);
    let changed: Vec<String> = after
        .iter()
        .filter(|(p, t)| before.get(*p) != Some(t))
        .map(|(p, _)| p.display().to_string())
        .collect();
    if !changed.is_empty() {
        bail!(
            "the second `cargo xtask {}` compiled again, so its time is not the warm one: {}",
            args.join(" "),
            changed.join(", ")
        );
    }
    Ok(took)
}

/// The two demos as README gives them, each measured warm (the second of
/// two runs, which compiles nothing); and the in-place demo once more for
/// its steps' time and doctor's reports before and after the fix.
fn demos(root: &Path) -> Result<(Vec<Figure>, crate::demo_in_place::Ran)> {
    let demo = warm(root, &["demo"])?;
    let in_place = warm(root, &["demo", "--in-place"])?;
    let ran = crate::demo_in_place::run(root, false)?;
    let steps = ran.steps;
    let figures = vec![
        Figure {
            key: "demo-time",
            value: seconds(demo),
            how: "`cargo xtask demo`, whole, as typed: the second of two runs, which compiled nothing (target/debug's deps, fingerprints and build scripts unchanged)".into(),
        },
        Figure {
            key: "demo-in-place-time",
            value: seconds(in_place),
            how: "`cargo xtask demo --in-place`, whole (the fake torch's CMake build, then its steps), as typed: the second of two runs, which compiled nothing".into(),
        },
        Figure {
            key: "demo-in-place-steps",
            value: seconds(steps),
            how: "the steps of that demo alone (doctor, the dry run, the fix, doctor again, verify --compile, rollback), each diagnosis compiling on a cold cache of the demo's own".into(),
        },
    ];
    Ok((figures, ran))
}

/// The clone's target/ once the suite, the demos and a release build have
/// run, without the opt-in trees (rocm-env, smoke-cpu, fuzz), which the
/// docs give apart.
fn clone_target(root: &Path) -> Result<Vec<Figure>> {
    let target = root.join("target");
    let ran_tests = std::fs::read_dir(target.join("debug/deps"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("e2e-"))
        })
        .unwrap_or(false);
    if !ran_tests || !target.join("release/rdna1-patch").is_file() {
        bail!(
            "the clone figure is target/ after the tests, the demos and a release build: run `cargo xtask ci` and `cargo build --release` first"
        );
    }
    let mut size = 0;
    for e in std::fs::read_dir(&target)? {
        let e = e?;
        let name = e.file_name();
        if ["rocm-env", "smoke-cpu", "fuzz"].contains(&&*name.to_string_lossy()) {
            continue;
        }
        size += du(&e.path())?;
    }
    Ok(vec![Figure {
        key: "clone-target",
        value: format!("{:.1} GB", size as f64 / 1e9),
        how: "`du` of the clone's target/ after `cargo xtask ci`, the demos and `cargo build --release`, without the opt-in rocm-env, smoke-cpu and fuzz trees".into(),
    }])
}

/// The binary `cargo install --locked --path .` installs, as README gives
/// it (into a temp root; the clone's target/ builds it, so a warm release
/// build is reused): its size, what README's "one binary" quotes.
fn binary(root: &Path) -> Result<Figure> {
    let tmp = tempfile::Builder::new()
        .prefix("rdna1-patch-figures-")
        .tempdir()?;
    let mut cmd = crate::cargo();
    cmd.args(["install", "--locked", "--path"])
        .arg(root)
        .arg("--root")
        .arg(tmp.path())
        .arg("--target-dir")
        .arg(root.join("target"));
    crate::run(&mut cmd)?;
    let bin = tmp.path().join("bin/rdna1-patch");
    let size = std::fs::metadata(&bin)
        .with_context(|| format!("cargo install left no {}", bin.display()))?
        .len();
    Ok(Figure {
        key: "binary-size",
        value: mebibytes(size),
        how: "the size of the binary `cargo install --locked --path .` of this checkout installs (release profile: thin LTO, not stripped)".into(),
    })
}

/// `bytes` as the docs quote a binary's size: MiB, one decimal.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1024.0 / 1024.0)
}

/// Disk use of `path` in bytes, as `du` counts it.
fn du(path: &Path) -> Result<u64> {
    let out = Command::new("du").arg("-sk").arg(path).output()?;
    anyhow::ensure!(out.status.success(), "du {} failed", path.display());
    let kb: u64 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .context("du said no size")?;
    Ok(kb * 1024)
}

fn seconds(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
}

fn minutes(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s / 60 {
        0 => format!("{s} s"),
        m => format!("{m} min {} s", s % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_the_docs_quote_them() {
        assert_eq!(minutes(Duration::from_secs(520)), "8 min 40 s");
        assert_eq!(minutes(Duration::from_millis(44_600)), "45 s");
        assert!(figures::is_value(&minutes(Duration::from_secs(600))));
        assert_eq!(seconds(Duration::from_millis(36_600)), "37 s");
        assert_eq!(mebibytes(12_268_339), "11.7 MiB");
        assert!(figures::is_value(&mebibytes(12_268_339)));
    }
}
