//! Stages 3 and 4, configure and build: CMake and the generator it drives.
//!
//! Every child runs in its own process group with merged output streamed
//! line by line into the run's log file, so Ctrl-C reaches the compilers too
//! and a failure can show the log's tail.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::builder::tools::{Generator, Toolchain};
use crate::checksum::hex;
use crate::error::{Hint, Interrupted, hint};
use crate::fsutil;
use crate::interrupt;
use crate::proc;
use crate::ui::Ui;

/// How many lines of a failed step's output to show.
pub const TAIL_LINES: usize = 40;

/// Ninja prints this before every step; the prefix makes our parse unambiguous.
const NINJA_STATUS: &str = "[rdna1-patch %f/%t] ";

/// One run's log file.
pub struct Log {
    file: File,
    pub path: PathBuf,
}

impl Log {
    /// A new log under `dir`, with `latest.log` pointing at it.
    pub fn create(dir: &Path, what: &str) -> Result<Log> {
        fsutil::create_dir_all(dir)?;
        let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .replace(':', "");
        let path = dir.join(format!("{stamp}-{what}.log"));
        // Two runs in one second share a name: the later one's log wins.
        fsutil::remove_own_file(&path)?;
        let file = fsutil::create_new(&path, 0o644)
            .with_context(|| format!("cannot create log {}", path.display()))?;
        let latest = dir.join("latest.log");
        let _ = fsutil::remove_own_file(&latest);
        let _ = fsutil::symlink(Path::new(path.file_name().unwrap()), &latest);
        Ok(Log { file, path })
    }

    pub fn line(&mut self, line: &str) {
        // A log write failing must not fail the build; the console still has it.
        let _ = writeln!(self.file, "{line}");
    }
}

/// What a child process did.
pub struct Run {
    pub success: bool,
    pub code: Option<i32>,
    pub tail: VecDeque<String>,
    /// The first step Ninja reported as `FAILED:`, with the output it gave;
    /// with parallel jobs it may be long gone from the tail.
    pub first_failure: Vec<String>,
}

/// Run `cmd` with stdout and stderr merged into the log, calling `on_line`
/// for each line of output. `what` names the step in errors; the whole
/// command line (`shown`, hundreds of characters for a configure) goes to
/// the log only.
pub fn run_logged(
    cmd: Command,
    what: &str,
    shown: &str,
    log: &mut Log,
    mut on_line: impl FnMut(&str),
) -> Result<Run> {
    log.line(&format!("$ {shown}"));
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let mut first_failure: Vec<String> = Vec::new();
    let mut in_failure = false;
    let started = std::time::Instant::now();
    let cpu_before = cpu_times();
    let streamed = proc::stream(cmd, |line| {
        log.line(line);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line.to_owned());
        if first_failure.is_empty() && line.starts_with("FAILED: ") {
            in_failure = true;
        } else if in_failure && (is_ninja_status(line) || line.starts_with("ninja: ")) {
            in_failure = false;
        }
        if in_failure && first_failure.len() < TAIL_LINES {
            first_failure.push(line.to_owned());
        }
        on_line(line);
    })
    .with_context(|| format!("cannot run {what}"))?;
    if let Some(sig) = interrupt::interrupted() {
        let why = Interrupted(sig);
        log.line(&why.to_string());
        return Err(anyhow::Error::new(why).context(Hint::new(
            format!("{what} was stopped"),
            "the work dir is kept as it was; run the same command again to resume",
        )));
    }
    let status = streamed.status;
    let run = Run {
        success: status.is_some_and(|s| s.success()),
        code: status.and_then(|s| s.code()),
        tail,
        first_failure,
    };
    // The child's own time, streaming included, and the CPU this process
    // spent meanwhile against the child's: what streaming can cost at most
    // (cargo xtask bench reads both).
    let cpu = cpu_times();
    log.line(&format!(
        "exit: {:?} after {:.3} s (cpu: ours {:.3} s, the child's {:.3} s)",
        run.code,
        started.elapsed().as_secs_f64(),
        cpu.0 - cpu_before.0,
        cpu.1 - cpu_before.1,
    ));
    Ok(run)
}

/// User+system CPU seconds of this process, and of its waited-for children.
fn cpu_times() -> (f64, f64) {
    let read = |who| {
        // SAFETY: getrusage fills the struct we own; no other memory is touched.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut u) } != 0 {
            return 0.0;
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(u.ru_utime) + secs(u.ru_stime)
    };
    (read(libc::RUSAGE_SELF), read(libc::RUSAGE_CHILDREN))
}

fn cmake_cmd(tools: &Toolchain, args: &[String]) -> Command {
    let mut c = Command::new(&tools.cmake);
    c.args(args).envs(tools.env.iter().map(|(k, v)| (k, v)));
    c
}

/// `[rdna1-patch 12/512] ...` (our NINJA_STATUS) or `[12/512] ...` (Ninja's
/// default): a Ninja status line.
fn is_ninja_status(line: &str) -> bool {
    line.strip_prefix('[')
        .map(|r| r.strip_prefix("rdna1-patch ").unwrap_or(r))
        .and_then(|r| r.split_once(']'))
        .is_some_and(|(n, _)| {
            n.split_once('/')
                .is_some_and(|(a, b)| a.parse::<u64>().is_ok() && b.parse::<u64>().is_ok())
        })
}

/// The error for a failed step: what failed, the first failing build step
/// (or else the last lines), and the full log; where the output says the
/// OS refused to write (a full disk, a read-only file system, permission
/// denied), the help is fitted to that, for `place`, where the step writes.
pub fn step_failed(what: &str, run: &Run, log: &Log, place: &Path) -> anyhow::Error {
    let code = run.code.map_or("none".into(), |c| c.to_string());
    let lines: Vec<&String> = run.tail.iter().chain(&run.first_failure).collect();
    let shown = if run.first_failure.is_empty() {
        let tail: Vec<&str> = run.tail.iter().map(String::as_str).collect();
        format!("last {} lines of output:\n{}", tail.len(), tail.join("\n"))
    } else {
        format!(
            "the first step that failed:\n{}",
            run.first_failure.join("\n")
        )
    };
    let said = [
        ("No space left on device", libc::ENOSPC),
        ("Disk quota exceeded", libc::EDQUOT),
        ("Read-only file system", libc::EROFS),
        ("Permission denied", libc::EACCES),
    ]
    .into_iter()
    .find(|(text, _)| lines.iter().any(|l| l.contains(text)));
    let log_line = format!("the full log is {}", log.path.display());
    let help = said
        .and_then(|(_, c)| {
            let e = std::io::Error::from_raw_os_error(c);
            fsutil::fitted_help(place, &e, "write", fsutil::ANOTHER_PLACE)
        })
        .map_or(log_line.clone(), |h| format!("{h}; {log_line}"));
    hint(format!("{what} failed (exit code {code}); {shown}"), help)
}

/// Names among `defines` that no CMake file of the project mentions.
///
/// A define is "read" when its name appears as a word in any CMakeLists.txt
/// or *.cmake file outside comments (option(), set(... CACHE), if(), ${...}).
/// CMake's own variables are always accepted.
pub fn unread_defines(src: &Path, defines: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let mut words: HashSet<String> = HashSet::new();
    let walker = walkdir::WalkDir::new(src)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git");
    for entry in walker {
        let entry = entry.with_context(|| format!("cannot walk {}", src.display()))?;
        let name = entry.file_name().to_string_lossy();
        if !entry.file_type().is_file() || !(name == "CMakeLists.txt" || name.ends_with(".cmake")) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let code = line.split('#').next().unwrap_or_default();
            words.extend(
                code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(str::to_owned),
            );
        }
    }
    Ok(defines
        .keys()
        // Read by CMake itself, or by the hip package config the project
        // finds (GPU_TARGETS becomes --offload-arch there), not by the
        // project's own files.
        .filter(|k| {
            !k.starts_with("CMAKE_")
                && !matches!(
                    k.as_str(),
                    "BUILD_SHARED_LIBS" | "BUILD_TESTING" | "GPU_TARGETS" | "AMDGPU_TARGETS"
                )
        })
        .filter(|k| !words.contains(*k))
        .cloned()
        .collect())
}

/// Everything configure needs, and the stamp that decides whether it must run.
pub struct Configure<'a> {
    pub src: &'a Path,
    pub build: &'a Path,
    pub prefix: &'a Path,
    pub defines: &'a BTreeMap<String, String>,
    /// CMake files the patch stage changed; a change to them forces a reconfigure.
    pub patched_cmake_files: Vec<(String, Option<String>)>,
}

impl Configure<'_> {
    pub fn args(&self, tools: &Toolchain) -> Vec<String> {
        let mut args = vec![
            "-S".to_owned(),
            self.src.display().to_string(),
            "-B".to_owned(),
            self.build.display().to_string(),
            "-G".to_owned(),
            tools.generator.cmake_name().to_owned(),
            format!("-DCMAKE_INSTALL_PREFIX={}", self.prefix.display()),
        ];
        args.extend(self.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        args
    }

    fn stamp(&self, tools: &Toolchain) -> String {
        let mut h = Sha256::new();
        for a in self.args(tools) {
            h.update(a.as_bytes());
            h.update([0]);
        }
        for (path, content) in &self.patched_cmake_files {
            h.update(path.as_bytes());
            h.update([0]);
            h.update(content.as_deref().unwrap_or("\0absent").as_bytes());
            h.update([0]);
        }
        hex(&h.finalize())
    }

    fn stamp_file(&self) -> PathBuf {
        self.build.join(".rdna1-patch-configure")
    }

    fn read_stamp(&self) -> Option<Stamp> {
        toml::from_str(&std::fs::read_to_string(self.stamp_file()).ok()?).ok()
    }

    /// Whether the build dir is configured with exactly these settings.
    pub fn is_current(&self, tools: &Toolchain) -> bool {
        self.build.join("CMakeCache.txt").is_file()
            && self
                .read_stamp()
                .is_some_and(|s| s.hash == self.stamp(tools))
    }

    pub fn run(&self, tools: &Toolchain, log: &mut Log, ui: &Ui) -> Result<()> {
        if let Some(existing) = cached_generator(self.build)
            && existing != tools.generator.cmake_name()
        {
            return Err(hint(
                format!(
                    "{} was configured with the {existing} generator, this build uses {}",
                    self.build.display(),
                    tools.generator.cmake_name()
                ),
                "pass --clean to start a fresh build dir",
            ));
        }
        fsutil::create_dir_all(self.build)?;
        // CMake keeps a define in its cache after it is dropped from the
        // command line; unset the ones an earlier run gave and this one does
        // not, so the build dir always matches the profile.
        let previous = self.read_stamp().map(|s| s.defines).unwrap_or_default();
        let mut args = self.args(tools);
        args.extend(
            previous
                .iter()
                .filter(|k| !self.defines.contains_key(*k))
                .map(|k| format!("-U{k}")),
        );
        // The stamp goes, so an interrupted configure is redone next time;
        // the define list stays in `previous` until a new stamp is written.
        let _ = std::fs::remove_file(self.stamp_file());
        let shown = format!("cmake {}", args.join(" "));
        ui.command(&shown);
        let run = run_logged(
            cmake_cmd(tools, &args),
            "cmake configure",
            &shown,
            log,
            |_| {},
        )?;
        if !run.success {
            // Keep the define list so the next run still unsets stale ones.
            let _ = self.write_stamp(String::new(), previous);
            return Err(step_failed("cmake configure", &run, log, self.build));
        }
        self.write_stamp(self.stamp(tools), self.defines.keys().cloned().collect())
    }

    fn write_stamp(&self, hash: String, defines: Vec<String>) -> Result<()> {
        let text = toml::to_string(&Stamp { hash, defines })?;
        fsutil::write_atomic(&self.stamp_file(), text.as_bytes(), None)
    }
}

/// What the last configure was given.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stamp {
    hash: String,
    defines: Vec<String>,
}

fn cached_generator(build: &Path) -> Option<String> {
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).ok()?;
    cache
        .lines()
        .find_map(|l| l.strip_prefix("CMAKE_GENERATOR:INTERNAL="))
        .map(str::to_owned)
}

/// Which of the touched files are CMake's, with their patched content.
pub fn cmake_files(
    touched: &BTreeSet<String>,
    src: &Path,
) -> Result<Vec<(String, Option<String>)>> {
    touched
        .iter()
        .filter(|f| f.ends_with("CMakeLists.txt") || f.ends_with(".cmake"))
        .map(|f| {
            Ok((
                f.clone(),
                crate::builder::patch::read_optional(&src.join(f))?,
            ))
        })
        .collect()
}

/// What a build did.
pub struct Built {
    /// Steps the generator ran: 0 means everything was up to date.
    pub steps: usize,
}

/// Drive the generator through `cmake --build`, with one progress bar.
pub fn build(
    build_dir: &Path,
    jobs: usize,
    tools: &Toolchain,
    log: &mut Log,
    ui: &Ui,
) -> Result<Built> {
    let args = vec![
        "--build".to_owned(),
        build_dir.display().to_string(),
        "--parallel".to_owned(),
        jobs.to_string(),
    ];
    let shown = format!("cmake {}", args.join(" "));
    let progress = ui.progress(0);
    progress.set_prefix("Building");
    let mut steps = 0usize;
    let generator = tools.generator;
    let mut cmd = cmake_cmd(tools, &args);
    cmd.env("NINJA_STATUS", NINJA_STATUS);
    let run = run_logged(cmd, "the build", &shown, log, |line| {
        if let Some((pos, len, msg)) = parse_progress(generator, line) {
            steps += 1;
            progress.step(pos, len, msg);
        } else {
            ui.detail(line);
        }
    })?;
    progress.finish();
    if !run.success {
        return Err(step_failed("the build", &run, log, build_dir));
    }
    Ok(Built { steps })
}

/// A step of the generator's output: (done, total, description).
fn parse_progress(generator: Generator, line: &str) -> Option<(u64, u64, &str)> {
    match generator {
        Generator::Ninja => {
            let rest = line.strip_prefix("[rdna1-patch ")?;
            let (counts, msg) = rest.split_once("] ")?;
            let (f, t) = counts.split_once('/')?;
            Some((f.parse().ok()?, t.parse().ok()?, msg))
        }
        Generator::Make => {
            let rest = line.strip_prefix('[')?;
            let (pct, msg) = rest.split_once("%] ")?;
            let pct = pct.trim().parse().ok()?;
            (msg.starts_with("Building") || msg.starts_with("Linking")).then_some((pct, 100, msg))
        }
    }
}

/// `cmake --install` into a staging DESTDIR; returns the manifest CMake wrote.
pub fn install_to_staging(
    build_dir: &Path,
    destdir: &Path,
    tools: &Toolchain,
    log: &mut Log,
) -> Result<Vec<PathBuf>> {
    let args = vec!["--install".to_owned(), build_dir.display().to_string()];
    let shown = format!("DESTDIR={} cmake {}", destdir.display(), args.join(" "));
    let mut cmd = cmake_cmd(tools, &args);
    cmd.env("DESTDIR", destdir);
    let run = run_logged(cmd, "cmake --install", &shown, log, |_| {})?;
    if !run.success {
        return Err(step_failed("cmake --install", &run, log, destdir));
    }
    let manifest = build_dir.join("install_manifest.txt");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("cmake --install wrote no {}", manifest.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines() {
        assert_eq!(
            parse_progress(
                Generator::Ninja,
                "[rdna1-patch 3/10] Building CXX object a.o"
            ),
            Some((3, 10, "Building CXX object a.o"))
        );
        assert_eq!(parse_progress(Generator::Ninja, "[3/10] Building"), None);
        assert_eq!(
            parse_progress(Generator::Make, "[ 42%] Building CXX object a.o"),
            Some((42, 100, "Building CXX object a.o"))
        );
        assert_eq!(
            parse_progress(Generator::Make, "[100%] Built target MIOpen"),
            None
        );
    }

    #[test]
    fn lint_finds_unread_defines() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("cmake")).unwrap();
        std::fs::write(
            d.path().join("CMakeLists.txt"),
            "option(MIOPEN_USE_MLIR \"x\" ON)\n# MIOPEN_USE_HIPBLASLT only in a comment\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("cmake/x.cmake"),
            "if(MIOPEN_BACKEND STREQUAL HIP)\nendif()\n",
        )
        .unwrap();
        let defines: BTreeMap<String, String> = [
            "MIOPEN_USE_MLIR",
            "MIOPEN_BACKEND",
            "MIOPEN_USE_HIPBLASLT",
            "CMAKE_BUILD_TYPE",
        ]
        .iter()
        .map(|k| (k.to_string(), "x".to_string()))
        .collect();
        assert_eq!(
            unread_defines(d.path(), &defines).unwrap(),
            vec!["MIOPEN_USE_HIPBLASLT"]
        );
    }
}
