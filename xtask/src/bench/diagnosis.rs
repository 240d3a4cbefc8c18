//! `cargo xtask bench --only diagnosis`: the diagnosis by compile on a real
//! MIOpen, Debian's libmiopen1 6.4.3 (28 MB; `--miopen-lib PATH`, else the
//! one `cargo xtask fidelity --release 6.4.3` downloaded into the unstable
//! chroot), in a torch whose comgr and hipRTC are Debian 12's (the host's,
//! as the tests use): `doctor` cold (an empty cache: every kernel
//! compiled), `install --into-torch --in-place --dry-run` cold (the
//! diagnosis, the fix and its proof) and warm (read back). Each cold one
//! against its honest floor: the same command on one core (one compile
//! child, one compile after another) gives the CPU a compile costs, and
//! the floor is that times the compiles the run needs, over the cores.
//! Each cold row gives the CPU of the command and everything it started,
//! and the load at its start and end; with `--against BIN` (main's
//! build), that binary's CPU and time beside.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::measure::{Row, Stats, quiet, time, time_after};

/// Where the fidelity run leaves Debian's 6.4.3 library.
const FIDELITY_LIB: &str =
    "target/rocm-env/chroot/fid/release-6.4.3/x/usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0";

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    let lib = match cx.miopen_lib {
        Some(l) => l.to_owned(),
        None => cx.root.join(FIDELITY_LIB),
    };
    if !lib.exists() {
        eprintln!(
            "bench: no Debian libMIOpen 6.4.3 at {}: the diagnosis rows are not run (give --miopen-lib PATH, or run `cargo xtask fidelity --release 6.4.3` first)",
            lib.display()
        );
        return Ok(Vec::new());
    }
    eprintln!("bench: the diagnosis of {}", lib.display());
    let mut rows = diagnosis(cx, &lib)?;
    rows.extend(in_chroot(cx)?);
    Ok(rows)
}

/// Where `cargo xtask fidelity --release 7.2.4` leaves Debian's
/// libmiopen1 7.2.4 unpacked, in the experimental chroot.
const RELEASE_724: &str = "/fid/release-7.2.4/x";

/// In the chroot: a torch of Debian's libMIOpen 7.2.4 as released (the
/// first `libMIOpen.so.1*` under `$X`, [`RELEASE_724`]), with the suite's
/// comgr 3 and hipRTC 7.2 beside it (links, as the system's own), as
/// fidelity-release.sh makes its own; then the cache emptied.
const TORCH_724: &str = r#"set -e
lib=$(find "$X" -name 'libMIOpen.so.1*' -type f | head -1)
T=/fid/bench/site/torch
rm -rf /fid/bench "${XDG_CACHE_HOME:-$HOME/.cache}/rdna1-patch"
mkdir -p "$T/lib"
printf "__version__ = '2.7.0+rocm7.2.4'\ncuda = None\nhip = '7.2.4'\n" >"$T/version.py"
cp "$lib" "$T/lib/libMIOpen.so"
for l in libamd_comgr.so libhiprtc.so; do
    found=$(ls /usr/lib/x86_64-linux-gnu/$l.[0-9] | tail -1)
    ln -s "$found" "$T/lib/${found##*/}"
done
"#;

/// The 7.2.4 row, run in the experimental rocm-env chroot (comgr 3,
/// hipRTC 7.2), as the fidelity runs are: `install --into-torch
/// --in-place --dry-run` cold on Debian's libMIOpen 7.2.4 as released (a
/// torch with no GPU code of its own, so doctor does not judge in place
/// there), against its floor from the same command on one core. Not run
/// (and said) without that chroot and the library fidelity unpacked.
fn in_chroot(cx: &super::Bench) -> Result<Vec<Row>> {
    let chroot = cx.root.join("target/rocm-env/chroot-experimental");
    if !chroot.join(RELEASE_724.trim_start_matches('/')).is_dir() {
        eprintln!(
            "bench: no libMIOpen 7.2.4 in {}: the 7.2.4 row is not run (run `cargo xtask fidelity --release 7.2.4` first)",
            chroot.display()
        );
        return Ok(Vec::new());
    }
    eprintln!("bench: the diagnosis of Debian's libMIOpen 7.2.4 in the experimental chroot");
    let env = crate::rocm_env::Env { chroot };
    // Cold: the torch made again and the cache emptied before each run;
    // the state and prefix the bench's own, which the dry run does not write.
    let command = || {
        env.command(
            cx.bin,
            None,
            &format!(
                "X={RELEASE_724}\n{TORCH_724}rdna1-patch install --detail --into-torch --in-place --dry-run --profile rocm-7.2 --prefix /fid/bench/prefix --state-dir /fid/bench/state --torch-dir /fid/bench/site/torch"
            ),
        )
    };
    let proven = |out: &Output| {
        out.status.success()
            && (String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout))
                .contains("Proven")
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let run = cold_run(command()?, false, proven)?;
    let one = cold_run(command()?, true, proven)?;
    let (asked, d_run, d_secs) = run.diagnosis("Diagnosis")?;
    let (proof_asked, proof_run) = run.proof()?;
    let (_, d_run_one, _) = one.diagnosis("Diagnosis")?;
    let (_, proof_run_one) = one.proof()?;
    let floor = cpu_floor(&one, d_run_one + proof_run_one, d_run + proof_run, cores);
    let ratio = run.wall / floor;
    Ok(vec![Row {
        name: "The in-place fix of Debian's libMIOpen 7.2.4 with its proof, cold, in the experimental chroot (comgr 3, hipRTC 7.2)",
        ours: Stats::of(vec![run.wall]),
        reference: Stats::of(vec![floor]),
        reference_name:
            "the honest floor: a one-core run's CPU per compile x the compiles / the cores".into(),
        target: "<= 1.2x the floor".into(),
        met: ratio <= 1.2,
        note: format!(
            "{ratio:.2}x the floor; the diagnosis {d_secs:.2} s ({asked:.0} compiles asked, {d_run:.0} run), the proof {proof_asked} asked, {proof_run:.0} run, for gfx1010 with the gfx1030 control, through the chroot's comgr 3 and hipRTC 7.2; CPU of the command and its children {:.1} s; {}. The floor: on one core the same command took {:.2} s and {:.1} s of CPU for {:.0} compiles ({})",
            run.cpu,
            run.loads(),
            one.wall,
            one.cpu,
            d_run_one + proof_run_one,
            one.loads(),
        ),
        why: why_missed(run.wall, f64::INFINITY, floor, 1.2),
    }])
}

/// One cold run of a command: what it printed, its wall time, the CPU of
/// it and everything it started (user and system), and the load before
/// and after.
struct Cold {
    text: String,
    wall: f64,
    cpu: f64,
    load: (String, String),
}

impl Cold {
    /// "(N compiles, M of them run, T s)" at the end of the line that
    /// starts with `prefix` (doctor's kernels row, install's Diagnosis
    /// line): the compiles asked, run, and the diagnosis's own seconds.
    fn diagnosis(&self, prefix: &str) -> Result<(f64, f64, f64)> {
        let line = self
            .text
            .lines()
            .map(str::trim_start)
            .find(|l| l.starts_with(prefix) && l.contains(" of them run, "))
            .with_context(|| format!("no {prefix} line with its compiles in: {}", self.text))?;
        let inner = line.rsplit('(').next().unwrap_or("").trim_end_matches(')');
        let mut parts = inner.split(", ");
        let mut number = |suffix: &str| -> Result<f64> {
            parts
                .next()
                .and_then(|p| p.trim_end_matches(suffix).parse().ok())
                .with_context(|| format!("no \"{suffix}\" in: {line}"))
        };
        Ok((number(" compiles")?, number(" of them run")?, number(" s")?))
    }

    /// "(N compiles, M of them run)" of the Proven line: asked, run.
    fn proof(&self) -> Result<(String, f64)> {
        let line = self
            .text
            .lines()
            .find(|l| l.trim_start().starts_with("Proven"))
            .context("no Proven line")?;
        // A list of the kernels not judged may follow in parentheses.
        let end = line
            .find(" of them run)")
            .context("the proof did not say the compiles it ran")?
            + " of them run".len();
        let start = line[..end].rfind('(').map_or(0, |i| i + 1);
        let p = line[start..end].to_owned();
        let run: f64 = p
            .split(", ")
            .nth(1)
            .and_then(|n| n.trim_end_matches(" of them run").parse().ok())
            .context("the proof did not say the compiles it ran")?;
        Ok((p.split(", ").next().unwrap_or("").to_owned(), run))
    }

    fn loads(&self) -> String {
        format!(
            "load {} at its start, {} at its end",
            self.load.0, self.load.1
        )
    }
}

/// Run `cmd` once, with `one_core` pinned to the first CPU (the tool then
/// sees one core and runs one compile child): [`Cold`].
fn cold_run(mut cmd: Command, one_core: bool, ok: impl Fn(&Output) -> bool) -> Result<Cold> {
    if one_core {
        rdna1_testkit::on_one_core(&mut cmd);
    }
    cmd.stdin(std::process::Stdio::null());
    let load_start = super::load();
    let cpu_before = children_cpu();
    let t = Instant::now();
    let out = cmd.output().context("cannot run the diagnosis")?;
    let wall = t.elapsed().as_secs_f64();
    let cpu = children_cpu() - cpu_before;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if !ok(&out) {
        bail!("the diagnosis did not run: {text}");
    }
    Ok(Cold {
        text,
        wall,
        cpu,
        load: (load_start, super::load()),
    })
}

fn diagnosis(cx: &super::Bench, lib: &Path) -> Result<Vec<Row>> {
    let dir = cx.dir.join("diagnosis");
    let torch = super::inplace::torch_with_compilers(&dir, cx.runtime)?;
    std::fs::copy(lib, torch.miopen())?;
    // torch's own code for the card (clang's HIP, as the tests build it):
    // doctor judges MIOpen in place only for a torch that runs there.
    std::fs::create_dir_all(dir.join("fat"))?;
    let fat = rdna1_testkit::fat_library(&dir.join("fat"), &["gfx1010", "gfx1030"]);
    std::fs::copy(&fat, torch.lib.join("libtorch_hip.so"))?;
    let size = std::fs::metadata(lib)?.len() as f64 / 1e6;
    let home = dir.join("home");
    let cache = home.join(".cache/rdna1-patch");
    let standins = standins(lib, &dir.join("standins"))?;
    // `install --dry-run` makes the diagnosis and the proof in memory and
    // writes nothing: the real install stops here at its link check, since
    // this library needs ROCm 6.4's rocBLAS, Boost and HIP, which the host
    // lacks (the write is the 400 MB row's). `doctor` makes the diagnosis
    // alone. Each is run cold (an empty cache: every kernel compiled).
    let command = |bin: &Path, doctor: bool| -> Command {
        let _ = std::fs::remove_dir_all(&cache);
        let mut c = match doctor {
            true => super::inplace::doctor_of(bin, &torch, &dir.join("state"), &home),
            false => {
                let mut c = super::inplace::install_in_place(
                    bin,
                    &torch,
                    &dir.join("prefix"),
                    &dir.join("state"),
                    &home,
                );
                c.arg("--dry-run");
                c
            }
        };
        if let Some(d) = &standins {
            c.env("LD_LIBRARY_PATH", d);
        }
        c
    };
    // The command's report, proven or refused after the diagnosis (a
    // library the diagnosis finds not fixable here, with its error): both
    // are the diagnosis; anything else is an error. doctor exits 1 for
    // what fails, and says it.
    let installed = |out: &Output| {
        let text = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
        out.status.success() && text.contains("Proven")
            || !out.status.success() && text.contains("is not fixable here")
    };
    let doctored = |out: &Output| {
        String::from_utf8_lossy(&out.stdout).contains(" of them run, ")
            || String::from_utf8_lossy(&out.stderr).contains(" of them run, ")
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    // Each cold run, then the same on one core (the honest floor: one
    // child's CPU per compile, spread over the cores), then, with
    // --against, the other binary's.
    let doctor = cold_run(command(cx.bin, true), false, doctored)?;
    let doctor_one = cold_run(command(cx.bin, true), true, doctored)?;
    let first = cold_run(command(cx.bin, false), false, installed)?;
    let first_one = cold_run(command(cx.bin, false), true, installed)?;
    let against = match cx.against {
        Some(b) => Some((
            cold_run(command(b, true), false, doctored)?,
            cold_run(command(b, false), false, installed)?,
        )),
        None => None,
    };
    let proven = first.text.contains("Proven");
    // What it judged and proved, as the user reads it.
    for line in first.text.lines().map(str::trim).filter(|l| {
        ["Kernel ", "Diagnosis ", "Proven ", "error: "]
            .iter()
            .any(|p| l.starts_with(p))
    }) {
        eprintln!("bench: cold run: {line}");
    }
    let (asked, compiles, cold_secs) = doctor.diagnosis("FAIL")?;
    let (_, compiles_one, secs_one) = doctor_one.diagnosis("FAIL")?;
    // The floor: one child's time per compile (a serial run's diagnosis
    // is one compile after another, its time their CPU) times the
    // compiles this run needs, over the cores.
    let floor = secs_one / compiles_one * compiles / cores;
    let (proof_asked, proof_run) = match proven {
        true => first.proof()?,
        false => (String::new(), 0.0),
    };
    let (_, d_run, _) = first.diagnosis("Diagnosis")?;
    let (_, d_run_one, _) = first_one.diagnosis("Diagnosis")?;
    let proof_run_one = match proven {
        true => first_one.proof()?.1,
        false => 0.0,
    };
    let floor_all = cpu_floor(
        &first_one,
        d_run_one + proof_run_one,
        d_run + proof_run,
        cores,
    );
    let refusal = first
        .text
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or("")
        .trim_start_matches("error: ")
        .to_owned();
    // Cases judged per kernel, as the Kernel lines say them.
    let judged: Vec<String> = first
        .text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("Kernel "))
        .map(|l| l.to_owned())
        .collect();
    let failing = judged.iter().filter(|l| l.contains("; fails in ")).count();
    let cases: Vec<String> = judged
        .iter()
        .filter_map(|l| {
            let (name, rest) = l.split_once(": ")?;
            let n = rest.split("; fails in ").nth(1)?;
            let n = n.split(" for ").next()?;
            Some(format!(
                "{} {n}",
                name.trim_start_matches("MIOPEN_KERNEL_MIOPENBATCHNORM")
            ))
        })
        .collect();
    // Warm: the same command again, its verdicts and proof read back.
    let _ = cold_run(command(cx.bin, false), false, installed)?;
    let warm = time(cx.runs, || {
        let mut c = super::inplace::install_in_place(
            cx.bin,
            &torch,
            &dir.join("prefix"),
            &dir.join("state"),
            &home,
        );
        c.arg("--dry-run").stdin(std::process::Stdio::null());
        if let Some(d) = &standins {
            c.env("LD_LIBRARY_PATH", d);
        }
        let out = c.output()?;
        anyhow::ensure!(
            installed(&out),
            "the warm run did not read its verdicts back"
        );
        Ok(())
    })?;
    let copy: PathBuf = dir.join("copy.so");
    let cp = time_after(
        cx.runs,
        || {
            let _ = std::fs::remove_file(&copy);
            Ok(())
        },
        || {
            quiet(Command::new("cp").arg(lib).arg(&copy))?;
            quiet(Command::new("md5sum").arg(&copy))?;
            Ok(())
        },
    )?;
    let beside = |ours: &Cold, theirs: Option<&Cold>| match theirs {
        Some(t) => format!(
            "CPU of the command and its children {:.1} s (the --against binary's: {:.1} s, its wall {:.2} s)",
            ours.cpu, t.cpu, t.wall
        ),
        None => format!("CPU of the command and its children {:.1} s", ours.cpu),
    };
    let diag_ratio = cold_secs / floor;
    let all_ratio = first.wall / floor_all;
    Ok(vec![
        Row {
            name: "Diagnosis of Debian's libMIOpen 6.4.3, cold: every batch-norm kernel compiled (`doctor`)",
            ours: Stats::of(vec![cold_secs]),
            reference: Stats::of(vec![floor]),
            reference_name: "the honest floor: a one-core run's time per compile x the compiles / the cores".into(),
            target: "<= 3.5 s and <= 1.3x the floor".into(),
            met: cold_secs <= 3.5 && diag_ratio <= 1.3,
            note: format!(
                "{diag_ratio:.2}x the floor; {compiles:.0} compiles run of {asked:.0} asked (identical inputs compiled once) for the {size:.0} MB library's {} kernels in every case torch reaches ({failing} failing: {}), for gfx1010 (the RX 5600 XT's recorded KFD topology) with the gfx1030 control, through Debian 12's comgr 2.4 and hipRTC 5.2, on {cores:.0} cores; the diagnosis's own time as doctor's kernels row says it (doctor's whole run {:.2} s); {}; {}. The floor: on one core the same diagnosis took {secs_one:.2} s for {compiles_one:.0} compiles ({:.0} ms each; {})",
                judged.len(),
                cases.join("; "),
                doctor.wall,
                beside(&doctor, against.as_ref().map(|a| &a.0)),
                doctor.loads(),
                secs_one / compiles_one * 1000.0,
                doctor_one.loads(),
            ),
            why: why_missed(cold_secs, 3.5, floor, 1.3),
        },
        Row {
            name: "The same diagnosis and proof again (`install --into-torch --in-place --dry-run`, read back)",
            ours: warm,
            reference: cp,
            reference_name: "`cp` of the library + `md5sum`".into(),
            target: "<= 1.5x the reference".into(),
            met: warm.median <= 1.5 * cp.median,
            note: format!(
                "the whole command, {:.2}x cp + md5sum; no byte of the library read for the verdicts: the digest of its kernel texts is remembered under its stamp, the verdicts and the proof under that digest and the compilers' SHA-256s",
                warm.median / cp.median
            ),
            why: "the command does more than the diagnosis: torch's python, the route, the fix made again in memory to be swapped in".into(),
        },
        match proven {
            true => Row {
                name: "The in-place fix of Debian's libMIOpen 6.4.3 with its proof, cold (`install --into-torch --in-place --dry-run`)",
                ours: Stats::of(vec![first.wall]),
                reference: Stats::of(vec![floor_all]),
                reference_name: "the honest floor: a one-core run's CPU per compile x the compiles / the cores".into(),
                target: "<= 9 s and <= 1.2x the floor".into(),
                met: first.wall <= 9.0 && all_ratio <= 1.2,
                note: format!(
                    "{all_ratio:.2}x the floor; the diagnosis, the fix and its proof for the card (gfx1010, and gfx1030 before and after for each changed kernel; {proof_asked} asked, {proof_run:.0} run, the rest known from the diagnosis) all in memory (the dry run writes nothing); {}; {}. The floor: on one core the same command took {:.2} s and {:.1} s of CPU for {:.0} compiles ({})",
                    beside(&first, against.as_ref().map(|a| &a.1)),
                    first.loads(),
                    first_one.wall,
                    first_one.cpu,
                    d_run_one + proof_run_one,
                    first_one.loads(),
                ),
                why: why_missed(first.wall, 9.0, floor_all, 1.2),
            },
            false => Row {
                name: "The in-place fix of Debian's libMIOpen 6.4.3 with its proof, cold (`install --into-torch --in-place --dry-run`)",
                ours: Stats::of(vec![first.wall]),
                reference: Stats::of(vec![floor_all]),
                reference_name: "the honest floor".into(),
                target: "<= 9 s and <= 1.2x the floor".into(),
                met: false,
                note: format!(
                    "not proven, refused after the diagnosis (the time is the diagnosis and the refusal): \"{refusal}\""
                ),
                why: "the library was refused after the diagnosis (the error above): no fix was proven, so the row times the diagnosis and the refusal".into(),
            },
        },
    ])
}

/// A run's honest floor from the same command on one core (`one`, which
/// ran `one_compiles`): its CPU per compile, times the `compiles` the run
/// ran, over the `cores`.
fn cpu_floor(one: &Cold, one_compiles: f64, compiles: f64, cores: f64) -> f64 {
    one.cpu / one_compiles * compiles / cores
}

/// Why a cold row missed its targets (at most `target` seconds, at most
/// `ratio` times its floor), in its numbers: the floor above the target
/// (the compiles cost that much CPU), or the run above its floor.
fn why_missed(secs: f64, target: f64, floor: f64, ratio: f64) -> String {
    let mut why = Vec::new();
    if secs > target && floor > target {
        why.push(format!(
            "the floor ({floor:.2} s) is above the {target} s target: the compiles this library needs cost that much CPU on these cores, one child per core kept busy"
        ));
    } else if secs > target {
        why.push(format!(
            "the run is {:.2} s above the {target} s target, with its floor at {floor:.2} s",
            secs - target
        ));
    }
    if secs > ratio * floor {
        why.push(format!(
            "the run is {:.2}x its floor: {:.2} s of it is no compile spread over the cores (reading the library, the serial start and end, the last compile's tail)",
            secs / floor,
            secs - floor
        ));
    }
    why.join("; ")
}

/// Empty stand-ins, in `dir`, for the libraries `lib` needs that the
/// dynamic loader cannot find here (Debian's 6.4.3 needs ROCm 6.4's
/// rocBLAS, HIP and roctx and Boost 1.90, which a Debian 12 host lacks):
/// the install checks that torch's MIOpen can load before it fixes it,
/// and only the diagnosis, the fix and the proof are timed. Made with cc,
/// each under its soname; None when nothing is missing.
fn standins(lib: &Path, dir: &Path) -> Result<Option<PathBuf>> {
    let out = Command::new("readelf").arg("-d").arg(lib).output()?;
    let known = Command::new("/sbin/ldconfig").arg("-p").output()?;
    let known = String::from_utf8_lossy(&known.stdout);
    let missing: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_owned()))
        .filter(|name| !known.contains(&format!("{name} (")))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    std::fs::create_dir_all(dir)?;
    for name in &missing {
        quiet(
            Command::new("cc")
                .args(["-shared", "-x", "c", "/dev/null", "-o"])
                .arg(dir.join(name))
                .arg(format!("-Wl,-soname,{name}")),
        )?;
    }
    eprintln!(
        "bench: empty stand-ins for {} on LD_LIBRARY_PATH (the install checks the library can load)",
        missing.join(", ")
    );
    Ok(Some(dir.to_owned()))
}

/// The CPU time (user and system, seconds) of every child this process
/// has waited for, and theirs.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is handed.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}
