//! `cargo xtask fidelity --rocblas --tensile-mirror GITDIR [--resume |
//! --render-only]` (issue 63 part 5): real rocBLAS 6.4.4 built for an RX
//! 5500 XT (gfx1012) through the tool's own `build rocblas`, in the unstable
//! rocm-env chroot, then swapped into a torch that bundles Debian's real
//! librocblas 6.4.4 and read by doctor before and after, and rolled back
//! (fidelity-rocblas.sh does the work). The whole build takes about an hour
//! on 2 cores: `--resume` goes on with a stopped one, as the tool's own
//! advice says. FIDELITY.md's rocblas section is written from the results.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::fidelity_harness::{HARNESS, copy_tree, lock_run, put_script};
use crate::fidelity_render::{put_section, steps_table, toolchain_table, tsv};
use crate::rocm_env;

const SCRIPT: &str = include_str!("fidelity-rocblas.sh");

/// The Tensile commit the rocm-6.4.3 profile pins (its `with.tensile`).
fn pinned_tensile(root: &Path) -> Result<String> {
    let toml = std::fs::read_to_string(root.join("profiles/rocm-6.4.3.toml"))?;
    let after = toml
        .split("[components.rocblas.with.tensile]")
        .nth(1)
        .context("profile rocm-6.4.3 has no [components.rocblas.with.tensile]")?;
    after
        .lines()
        .find_map(|l| l.strip_prefix("commit = \"")?.strip_suffix('"'))
        .map(str::to_owned)
        .context("profile rocm-6.4.3 pins no Tensile commit")
}

pub fn rocblas(root: &Path, args: &[String]) -> Result<()> {
    let mut mirror = None;
    let mut resume = false;
    let mut redo: Vec<String> = Vec::new();
    let mut render_only = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rocblas" => {}
            "--resume" => resume = true,
            "--redo" => {
                let name = it.next().context("--redo tool|own|warm")?;
                if !BUILDS.iter().any(|(n, _, _)| n == name) {
                    bail!("--redo {name}: expected tool, own or warm");
                }
                redo.push(name.clone());
                resume = true;
            }
            "--render-only" => render_only = true,
            "--tensile-mirror" => {
                mirror = Some(PathBuf::from(it.next().context("--tensile-mirror GITDIR")?));
            }
            other => bail!(
                "unknown argument {other}: cargo xtask fidelity --rocblas --tensile-mirror GITDIR [--resume | --redo tool|own|warm | --render-only]"
            ),
        }
    }
    let env = rocm_env::ensure(root)?;
    let fid = env.chroot.join("fid");
    let rb = fid.join("rocblas");
    if !render_only {
        std::fs::create_dir_all(&rb)?;
        let _running = lock_run(&rb)?;
        put_script(&fid.join("fidelity-rocblas.sh"), SCRIPT)?;
        put_script(&fid.join("bn-kernels.sh"), HARNESS)?;
        let sysfs = rb.join("sysfs");
        let _ = std::fs::remove_dir_all(&sysfs);
        copy_tree(&root.join("tests/fixtures/sysfs/rx5500xt-gfx1012"), &sysfs)?;
        serve_tensile(root, mirror.as_deref(), &rb.join("tensile.git"))?;
        let cmd = match (resume, redo.is_empty()) {
            (true, true) => "bash /fid/fidelity-rocblas.sh resume".to_owned(),
            (true, false) => format!(
                "REDO='{}' bash /fid/fidelity-rocblas.sh resume",
                redo.join(" ")
            ),
            _ => "bash /fid/fidelity-rocblas.sh".to_owned(),
        };
        let _daemon = Daemon::serve(&rb)?;
        env.run(root, None, &cmd)?;
    }
    write_section(root, &rb.join("results"))
}

/// The port git daemon serves Tensile on, on 127.0.0.1 (the chroot
/// shares the host's network).
const PORT: &str = "9419";

/// `git daemon` serving `dir`'s repositories while the run lasts. Not
/// file://: the tool fetches a local URL in full, and git will not take
/// a shallow repository's root into refs that way; over git:// it fetches
/// the pinned commit alone (`--depth=1`), as from GitHub.
struct Daemon(std::process::Child);

impl Daemon {
    fn serve(dir: &Path) -> Result<Daemon> {
        // git-daemon itself, not `git daemon`: git runs it as a child of
        // its own, which a kill of git leaves listening.
        let exec = Command::new("git").arg("--exec-path").output()?;
        let exec = PathBuf::from(String::from_utf8_lossy(&exec.stdout).trim());
        let child = Command::new(exec.join("git-daemon"))
            .args(["--reuseaddr", "--listen=127.0.0.1"])
            .arg(format!("--port={PORT}"))
            .arg("--export-all")
            .arg(format!("--base-path={}", dir.display()))
            .arg(dir)
            .spawn()
            .context("cannot start git daemon")?;
        // Until it listens.
        for _ in 0..50 {
            if std::net::TcpStream::connect(format!("127.0.0.1:{PORT}")).is_ok() {
                return Ok(Daemon(child));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        bail!("git daemon did not listen on 127.0.0.1:{PORT}")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A bare repository holding only the pinned Tensile commit and its tree,
/// fetched shallow from GITDIR (a `fetch` mirror, which lacks part of the
/// history but every blob of this tree), so the commit keeps its id.
fn serve_tensile(root: &Path, mirror: Option<&Path>, to: &Path) -> Result<()> {
    let commit = pinned_tensile(root)?;
    let git = |dir: &Path, args: &[&str]| -> Result<String> {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(dir)
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    if git(to, &["rev-parse", "HEAD"]).ok().as_deref() == Some(commit.as_str()) {
        return Ok(());
    }
    let mirror = mirror.context(
        "--tensile-mirror GITDIR is required the first time: a git directory holding Tensile's pinned commit (the `fetch` tool's github:ROCm/Tensile)",
    )?;
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to)?;
    git(to, &["init", "-q", "--bare"])?;
    let url = format!("file://{}", mirror.canonicalize()?.display());
    git(
        to,
        &[
            "fetch",
            "-q",
            "--depth=1",
            "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack",
            &url,
            &commit,
        ],
    )
    .with_context(|| format!("{} has no Tensile commit {commit}", mirror.display()))?;
    git(to, &["update-ref", "refs/heads/main", &commit])?;
    git(to, &["symbolic-ref", "HEAD", "refs/heads/main"])?;
    git(to, &["config", "uploadpack.allowAnySHA1InWant", "true"])?;
    eprintln!("xtask: Tensile {commit} served from {}", to.display());
    Ok(())
}

/// The lines of `text` that start with any of `heads` (after spaces).
fn lines_starting(text: &str, heads: &[&str]) -> String {
    text.lines()
        .filter(|l| heads.iter().any(|h| l.trim_start().starts_with(h)))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// What each measured build is, by its name in cost.tsv, and whether a
/// run must have measured it.
const BUILDS: [(&str, &str, bool); 4] = [
    (
        "tool",
        "the tool's first build: `rdna1-patch build rocblas`, the compiler cache emptied first (the work dir's source fetched in it)",
        true,
    ),
    (
        "noop",
        "the same command again, on a resumed run: nothing to do (the no-op rebuild)",
        false,
    ),
    (
        "own",
        "rocBLAS's own build of the same source, targets and options: the tool's configure line without the launcher, `cmake --build` with the same jobs, `cmake --install`, no compiler cache",
        true,
    ),
    (
        "warm",
        "the tool again with `--clean`: a fresh build dir, the compiler cache warm from its first build",
        true,
    ),
];

/// Seconds as minutes and seconds.
fn minutes(secs: &str) -> String {
    secs.parse::<u64>().map_or_else(
        |_| secs.to_owned(),
        |s| format!("{}m {:02}s", s / 60, s % 60),
    )
}

/// The three builds' cost (cost.tsv, written by the script's `measure`),
/// with the compiler cache's counters and rocBLAS's own command; a build
/// not measured is a failure of the run.
fn cost_table(s: &mut String, results: &Path, failures: &mut Vec<String>) -> Result<()> {
    let rows = tsv(&results.join("cost.tsv")).unwrap_or_default();
    writeln!(
        s,
        "\nWhat the builds cost, each measured alone (wall and CPU time; the build's CPU is its own and its children's; the machine's is every core's busy time meanwhile, other work included; a build at -j2 is itself a load of about 2 on 2 cores):\n"
    )?;
    s.push_str("| build | exit | wall | CPU, the build's | CPU, the machine's | cores | load at start / mean / end |\n|---|---|---|---|---|---|---|\n");
    let mut wall = BTreeMap::new();
    for (name, what, required) in BUILDS {
        let found: Vec<&Vec<String>> = rows
            .iter()
            .filter(|r| r[0] == name || r[0] == format!("{name}-resumed"))
            .collect();
        if found.is_empty() && required {
            failures.push(format!("rocblas: the {name} build was not measured"));
        }
        for r in found {
            let f = |i: usize| r.get(i).map_or("", String::as_str);
            if r[0] == name && f(1) == "0" {
                if let Ok(w) = f(2).parse::<f64>() {
                    wall.insert(name, w);
                }
            } else if f(1) != "0" {
                failures.push(format!("rocblas: the {} build exited {}", r[0], f(1)));
            }
            let resumed = if r[0] == name {
                ""
            } else {
                " (resumed: its rest only)"
            };
            writeln!(
                s,
                "| {what}{resumed} | {} | {} | {} | {} | {} | {} / {} / {} |",
                f(1),
                minutes(f(2)),
                minutes(f(3)),
                minutes(f(4)),
                f(5),
                f(6),
                f(7),
                f(8)
            )?;
        }
    }
    if let (Some(t), Some(o)) = (wall.get("tool"), wall.get("own")) {
        writeln!(
            s,
            "\nThe tool's first build took {:.2}x rocBLAS's own.",
            t / o
        )?;
    }
    if let (Some(t), Some(w)) = (wall.get("tool"), wall.get("warm")) {
        writeln!(s, "\nThe warm rebuild took {:.2}x the first build.", w / t)?;
    }
    // Each build's summary (ccache-NAME.txt), not the local storage's
    // repeat of it.
    let mut counters = String::new();
    for (name, _, _) in BUILDS {
        let Ok(text) = std::fs::read_to_string(results.join(format!("ccache-{name}.txt"))) else {
            continue;
        };
        counters.push_str(&format!("== {name}\n"));
        for line in text.lines() {
            let l = line.trim_start();
            if l.starts_with("Local storage:") {
                break;
            }
            if ["Hits:", "Misses:", "Cacheable calls:"]
                .iter()
                .any(|h| l.starts_with(h))
            {
                counters.push_str(line);
                counters.push('\n');
            }
        }
    }
    if !counters.is_empty() {
        writeln!(
            s,
            "\nccache's counters after each build of the tool:\n\n```\n{counters}```"
        )?;
    }
    let own = std::fs::read_to_string(results.join("own-command.txt")).unwrap_or_default();
    if !own.is_empty() {
        writeln!(s, "\nrocBLAS's own build, as run:\n\n```\n{own}```")?;
    }
    Ok(())
}

fn write_section(root: &Path, results: &Path) -> Result<()> {
    let read = |name: &str| std::fs::read_to_string(results.join(name)).unwrap_or_default();
    let mut s = String::new();
    let mut failures = Vec::new();
    writeln!(s, "## `cargo xtask fidelity --rocblas`\n")?;
    writeln!(
        s,
        "Generated by the xtask on {}, with `{}`, in the unstable rocm-env chroot, for an RX 5500 XT's recorded KFD topology (gfx1012). Source: {}.\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        read("tool.txt").trim(),
        read("source.txt").trim()
    )?;
    toolchain_table(&mut s, results)?;
    steps_table(&mut s, "rocblas", results, &mut failures)?;
    let resumed = read("resumed.txt");
    if !resumed.trim().is_empty() {
        writeln!(
            s,
            "\nThe build was stopped and resumed with the same command: {}",
            resumed.trim()
        )?;
    }
    // A run that went on after a finished build keeps that build's record.
    let first = tsv(&results.join("first-build.txt")).unwrap_or_default();
    for row in &first {
        writeln!(
            s,
            "\nThe build of this work dir, from the tool's log of it: `{}`, {} s (exit {}).",
            row.get(3).map_or("", String::as_str),
            row.get(2).map_or("", String::as_str),
            row.get(1).map_or("", String::as_str)
        )?;
    }
    cost_table(&mut s, results, &mut failures)?;
    let build = read("build.txt");
    writeln!(
        s,
        "\nThe build, as the tool said it (its plan and its last lines):\n\n```\n{}```",
        lines_starting(
            &build,
            &[
                "Targets",
                "Cost",
                "Source",
                "Configure",
                "Build",
                "Install",
                "Checked",
                "Installed",
                "Finished",
                "error"
            ]
        )
    )?;
    let targets = tsv(&results.join("targets.tsv")).unwrap_or_default();
    let mut flags: Vec<(String, usize)> = Vec::new();
    for row in &targets {
        let f = row.get(1).cloned().unwrap_or_default();
        match flags.iter_mut().find(|(g, _)| *g == f) {
            Some((_, n)) => *n += 1,
            None => flags.push((f, 1)),
        }
    }
    writeln!(
        s,
        "\nThe code objects of lib/rocblas/library, by the flags llvm-readelf reads in each ELF header: {}.",
        flags
            .iter()
            .map(|(f, n)| format!("{n} with `{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    if targets.is_empty() {
        failures.push("no code object of the prefix was read".to_owned());
    }
    let disk = tsv(&results.join("disk.tsv")).unwrap_or_default();
    if !disk.is_empty() {
        s.push_str("\n| disk | size |\n|---|---|\n");
        for row in &disk {
            writeln!(
                s,
                "| `{}` | {} |",
                row[0],
                row.get(1).map_or("", String::as_str)
            )?;
        }
    }
    writeln!(
        s,
        "\n`md5sum -c`: {}",
        read("md5sum.txt").lines().last().unwrap_or("not run")
    )?;
    writeln!(s, "\nThe torch: {}", read("torch.txt").trim())?;
    for (name, title) in [
        ("doctor-before.txt", "doctor before the install"),
        ("install.txt", "install rocblas --into-torch"),
        ("doctor-rocblas.txt", "doctor after rocBLAS's install"),
        ("install-miopen.txt", "install --into-torch (MIOpen's fix)"),
        ("doctor-after.txt", "doctor after both"),
        ("verify.txt", "verify"),
        ("status.txt", "status"),
        ("rollback.txt", "rollback"),
    ] {
        let text = read(name);
        if !text.is_empty() {
            writeln!(s, "\n{title}:\n\n```\n{text}```")?;
        }
    }
    let long = crate::fidelity_glance::check(
        results,
        &[
            "doctor-before.txt",
            "doctor-after.txt",
            "verify.txt",
            "status.txt",
        ],
        &["doctor-before.txt"],
    );
    failures.extend(long);
    put_section(root, "rocblas", &s)?;
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(cost: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cost.tsv"), cost).unwrap();
        dir
    }

    #[test]
    fn the_three_builds_and_their_ratios() {
        let dir = results(
            "tool\t0\t3000\t5800\t5900\t2\t0.20\t2.10\t2.05\n\
             own\t0\t2500\t4900\t5000\t2\t1.90\t2.00\t2.01\n\
             warm\t0\t600\t1100\t1150\t2\t1.80\t1.95\t1.20\n",
        );
        let mut s = String::new();
        let mut failures = Vec::new();
        cost_table(&mut s, dir.path(), &mut failures).unwrap();
        assert!(failures.is_empty(), "{failures:?}");
        assert!(
            s.contains("| 0 | 50m 00s | 96m 40s | 98m 20s | 2 | 0.20 / 2.10 / 2.05 |"),
            "{s}"
        );
        assert!(
            s.contains("The tool's first build took 1.20x rocBLAS's own."),
            "{s}"
        );
        assert!(
            s.contains("The warm rebuild took 0.20x the first build."),
            "{s}"
        );
    }

    #[test]
    fn ccache_counters_once_per_build() {
        let dir = results("tool\t0\t3000\t5800\t5900\t2\t0.20\t2.10\t2.05\n");
        std::fs::write(
            dir.path().join("ccache-tool.txt"),
            "Cacheable calls:    475 / 475 (100.0%)\n  Hits:               0 / 475 ( 0.00%)\n  Misses:           475 / 475 (100.0%)\nLocal storage:\n  Hits:               0 / 475 ( 0.00%)\n  Misses:           475 / 475 (100.0%)\n",
        )
        .unwrap();
        let mut s = String::new();
        cost_table(&mut s, dir.path(), &mut Vec::new()).unwrap();
        assert_eq!(s.matches("Misses:").count(), 1, "{s}");
    }

    #[test]
    fn a_build_missing_or_failed_fails_the_run() {
        let dir =
            results("tool-resumed\t0\t30\t50\t60\t2\t1\t1\t1\nwarm\t2\t10\t5\t6\t2\t1\t1\t1\n");
        let mut s = String::new();
        let mut failures = Vec::new();
        cost_table(&mut s, dir.path(), &mut failures).unwrap();
        assert_eq!(
            failures,
            [
                "rocblas: the own build was not measured",
                "rocblas: the warm build exited 2"
            ]
        );
        assert!(s.contains("(resumed: its rest only)"), "{s}");
        assert!(!s.contains("x rocBLAS's own"), "{s}");
    }
}
