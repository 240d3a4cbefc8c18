//! `verify --smoke`: the battery. Each case runs in a python child of its
//! own under the time limit (smoke.py), so that a hang or a crash is that
//! case's FAIL and the rest still run; its results are judged here against
//! the float64 CPU result, and MIOpen's own log says what it chose.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::battery::{
    BATTERY_VERSION, Battery, CaseResult, Library, Limits, Outcome, OutputError, Tolerance, Where,
    summarize,
};
use super::cases::{Case, TOLERANCES, cases, tolerance};
use super::runtime::{failed_run, python};
use super::{Device, VerifyRequest};
use crate::checksum;
use crate::gpu;
use crate::inspect::checks::{CheckReport, Status};
use crate::proc;
use crate::swap::torch::Torch;
use crate::swap::txn::Journal;

/// Run by `python -c`: one case, or what torch and the device are.
const SMOKE: &str = include_str!("smoke.py");

/// The battery as a whole may take this many times `--timeout`: a card
/// that hangs every case must not hold the user for 35 limits.
pub const BATTERY_FACTOR: u32 = 10;

/// What the battery is given: the request, the torch package dir to put
/// on the child's path, and when known torch's library and the install.
pub struct Subject<'a> {
    pub req: &'a VerifyRequest,
    pub torch_dir: Option<&'a Path>,
    pub torch: Option<&'a Torch>,
    pub install: Option<&'a Journal>,
}

fn empty_battery(req: &VerifyRequest, skipped: Option<String>) -> Battery {
    Battery {
        battery: BATTERY_VERSION,
        device: match req.smoke_device {
            Device::Gpu => "gpu",
            Device::Cpu => "cpu",
        },
        skipped,
        limits: Limits {
            case_seconds: req.timeout.as_secs(),
            battery_seconds: req.timeout.as_secs() * u64::from(BATTERY_FACTOR),
        },
        tolerances: TOLERANCES
            .iter()
            .map(|&(dtype, max_rel)| Tolerance { dtype, max_rel })
            .collect(),
        place: None,
        cases: Vec::new(),
    }
}

/// Run the battery, push its summary as the `smoke` check, and return it.
pub fn run(s: &Subject, r: &mut CheckReport) -> Battery {
    let req = s.req;
    let kfd: Vec<gpu::Gpu> = gpu::scan(&req.sysfs)
        .into_iter()
        .filter(|g| g.is_amd())
        .collect();
    if kfd.is_empty() && req.smoke_device == Device::Gpu {
        let why = format!(
            "no AMD GPU in the KFD topology ({}), so there is nothing to run the battery on",
            gpu::topology(&req.sysfs).display()
        );
        r.push("smoke", Status::Skip, why.clone());
        return empty_battery(req, Some(why));
    }
    let Some(dir) = s.torch_dir else {
        let why = "no torch to run it with".to_owned();
        r.push("smoke", Status::Skip, why.clone());
        return empty_battery(req, Some(why));
    };
    let mut battery = empty_battery(req, None);
    let deadline = Instant::now() + req.timeout * BATTERY_FACTOR;
    let out = child(req, dir, &["info"], req.timeout);
    let info = match out
        .as_ref()
        .map(|o| (o, serde_json::from_str::<Info>(o.stdout.trim())))
    {
        Ok((o, Ok(info))) if o.status.is_some_and(|s| s.success()) => info,
        Ok((o, _)) => return cannot_start(battery, &failed_run(o, "import torch", req.timeout), r),
        Err(e) => return cannot_start(battery, &format!("{e:#}"), r),
    };
    battery.place = Some(place(s, &info, kfd));
    for case in cases() {
        let left = deadline.saturating_duration_since(Instant::now());
        battery.cases.push(if left.is_zero() {
            not_run(&case, battery.limits.battery_seconds)
        } else {
            run_case(req, dir, &case, req.timeout.min(left))
        });
    }
    summarize(&battery, r);
    battery
}

fn cannot_start(mut battery: Battery, why: &str, r: &mut CheckReport) -> Battery {
    r.push_fix(
        "smoke",
        Status::Fail,
        format!("the battery could not start: {why}"),
        "run `rdna1-patch verify --runtime` to see what torch loads; if torch sees no GPU, add your user to the render and video groups and log in again",
    );
    battery.skipped = Some(why.to_owned());
    battery
}

/// torch's python, isolated, in a neutral directory, with MIOpen told to
/// log what it chooses and the driver commands that rerun it.
fn child(
    req: &VerifyRequest,
    dir: &Path,
    args: &[&str],
    limit: Duration,
) -> anyhow::Result<proc::Output> {
    let mut cmd = python(req, dir, SMOKE);
    let device = match req.smoke_device {
        Device::Gpu => "cuda",
        Device::Cpu => "cpu",
    };
    cmd.arg(args[0]).arg(device).args(&args[1..]);
    cmd.env("MIOPEN_LOG_LEVEL", "6")
        .env("MIOPEN_ENABLE_LOGGING_CMD", "1");
    proc::run_contained(cmd, limit)
}

#[derive(Deserialize)]
struct Info {
    torch: String,
    hip: Option<String>,
    name: String,
    arch: Option<String>,
    maps: Vec<std::path::PathBuf>,
}

fn place(s: &Subject, info: &Info, kfd: Vec<gpu::Gpu>) -> Where {
    let miopen = info
        .maps
        .iter()
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libMIOpen"))
        })
        .map(|p| library(s, p));
    Where {
        torch: info.torch.clone(),
        hip: info.hip.clone(),
        device: info.name.clone(),
        hip_arch: info.arch.clone(),
        kfd: kfd.iter().map(Into::into).collect(),
        env: s.req.env.iter().cloned().collect::<BTreeMap<_, _>>(),
        miopen,
    }
}

/// The mapped libMIOpen, its SHA-256, and whether it is the library the
/// install put into torch.
fn library(s: &Subject, mapped: &Path) -> Library {
    let real = mapped.canonicalize().unwrap_or(mapped.to_path_buf());
    let (fixed, why) = match (s.torch, s.install) {
        (Some(t), _) if real != t.target => (
            false,
            format!("not the library torch names, {}", t.target.display()),
        ),
        (Some(_), Some(j)) => {
            if checksum::md5_file(&real).is_ok_and(|m| m == j.new.md5) {
                (
                    true,
                    format!("the fixed one, installed by transaction {}", j.id),
                )
            } else {
                (
                    false,
                    format!(
                        "not the library transaction {} installed (its MD5 differs)",
                        j.id
                    ),
                )
            }
        }
        _ => (
            false,
            "torch's own: no install of rdna1-patch recorded for it".to_owned(),
        ),
    };
    Library {
        path: mapped.display().to_string(),
        sha256: sha256_file(&real).ok(),
        fixed,
        why,
    }
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf)? {
            0 => break,
            n => h.update(&buf[..n]),
        }
    }
    Ok(checksum::hex(&h.finalize()))
}

#[derive(Deserialize)]
struct Answer {
    outputs: Vec<Measured>,
    seconds: [f64; 2],
}

#[derive(Deserialize)]
struct Measured {
    name: String,
    abs: Option<f64>,
    scale: f64,
    note: Option<String>,
}

fn blank(case: &Case, outcome: Outcome, status: Status, detail: String) -> CaseResult {
    CaseResult {
        name: case.name.clone(),
        library: case.library,
        op: case.op,
        dtype: case.dtype,
        layout: case.layout,
        shape: case.shape.clone(),
        status,
        outcome,
        detail,
        tolerance: tolerance(case.dtype),
        max_abs: None,
        max_rel: None,
        outputs: Vec::new(),
        seconds: None,
        elapsed: 0.0,
        solvers: Vec::new(),
        commands: Vec::new(),
    }
}

fn not_run(case: &Case, battery_seconds: u64) -> CaseResult {
    blank(
        case,
        Outcome::NotRun,
        Status::Skip,
        format!("not run: the battery's limit of {battery_seconds} s was reached"),
    )
}

fn run_case(req: &VerifyRequest, dir: &Path, case: &Case, limit: Duration) -> CaseResult {
    let spec = serde_json::to_string(case).unwrap_or_default();
    let out = match child(req, dir, &["case", &case.name, &spec], limit) {
        Ok(o) => o,
        Err(e) => return blank(case, Outcome::Crash, Status::Fail, format!("crash: {e:#}")),
    };
    let (solvers, commands) = miopen_log(&out.stderr);
    let answer = serde_json::from_str::<Answer>(out.stdout.trim());
    let mut c = match (&out.status, answer) {
        (Some(s), Ok(a)) if s.success() => judged(case, a),
        (None, _) => blank(
            case,
            Outcome::Timeout,
            Status::Fail,
            format!(
                "timeout: killed after {:.1} s (limit {} s)",
                out.elapsed.as_secs_f64(),
                seconds(limit)
            ),
        ),
        (Some(s), _) => blank(
            case,
            Outcome::Crash,
            Status::Fail,
            format!("crash ({}): {}", how_it_ended(s), last_words(&out.stderr)),
        ),
    };
    c.elapsed = out.elapsed.as_secs_f64();
    if case.library == "MIOpen" {
        c.detail.push_str(&match solvers.as_slice() {
            [] => "; MIOpen: not called".to_owned(),
            s => format!("; MIOpen: {}", s.join(", ")),
        });
    } else {
        c.detail = format!("{}: {}", case.library, c.detail);
    }
    if let Some([first, second]) = c.seconds {
        c.detail
            .push_str(&format!("; first run {first:.3} s, second {second:.3} s"));
    }
    c.solvers = solvers;
    c.commands = commands;
    c
}

/// The case's outputs against its tolerance: the worst decides.
fn judged(case: &Case, a: Answer) -> CaseResult {
    let tol = tolerance(case.dtype);
    let outputs: Vec<OutputError> = a
        .outputs
        .into_iter()
        .map(|m| OutputError {
            max_rel: m.abs.map(|e| if m.scale > 0.0 { e / m.scale } else { e }),
            max_abs: m.abs,
            scale: m.scale,
            note: m.note,
            name: m.name,
        })
        .collect();
    let broken = outputs.iter().find(|o| o.max_abs.is_none());
    // The first of the worst: the outputs come in the order the case made them.
    let worst = outputs
        .iter()
        .fold(None::<&OutputError>, |w, o| match (w, o.max_rel) {
            (Some(w), Some(r)) if w.max_rel.is_some_and(|m| m >= r) => Some(w),
            (w, None) => w,
            (_, Some(_)) => Some(o),
        });
    let over = worst.is_some_and(|w| w.max_rel.unwrap_or(0.0) > tol);
    let measured = worst.map_or("no output".to_owned(), |w| {
        format!(
            "max rel {:.1e}, abs {:.1e} ({})",
            w.max_rel.unwrap_or(0.0),
            w.max_abs.unwrap_or(0.0),
            w.name
        )
    });
    let (outcome, status, detail) = match broken {
        Some(b) => (
            Outcome::OverTolerance,
            Status::Fail,
            format!(
                "over tolerance: {} in {}",
                b.note.as_deref().unwrap_or("no value"),
                b.name
            ),
        ),
        None if over => (
            Outcome::OverTolerance,
            Status::Fail,
            format!("over tolerance: {measured}, over {tol:e}"),
        ),
        None => (
            Outcome::Ok,
            Status::Ok,
            match tol {
                0.0 => format!("{measured}, exact"),
                t => format!("{measured}, within {t:e}"),
            },
        ),
    };
    let mut c = blank(case, outcome, status, detail);
    c.max_abs = worst.and_then(|w| w.max_abs);
    c.max_rel = worst.and_then(|w| w.max_rel);
    c.seconds = Some(a.seconds);
    c.outputs = outputs;
    c
}

/// "5", or "0.4" for a limit the battery's deadline cut short.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

fn how_it_ended(s: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.signal(), s.code()) {
        (Some(sig), _) => {
            let name = match sig {
                libc::SIGABRT => " SIGABRT",
                libc::SIGSEGV => " SIGSEGV",
                libc::SIGBUS => " SIGBUS",
                libc::SIGILL => " SIGILL",
                libc::SIGFPE => " SIGFPE",
                libc::SIGKILL => " SIGKILL",
                _ => "",
            };
            format!("signal {sig}{name}")
        }
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "ended".to_owned(),
    }
}

/// The last line the child said on stderr that is not MIOpen's logging
/// (which we turned on): the runtime's fault, or python's exception.
fn last_words(stderr: &str) -> &str {
    stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("MIOpen("))
        .unwrap_or("(nothing on stderr)")
}

/// What MIOpen chose, from its log, and the MIOpenDriver commands it logged.
/// A convolution names its solver per direction when it runs it (`[...Immediate]
/// solver_id = X`, or `FW Chosen Algorithm: X` after a Find); batch norm's
/// solver search logs `X: Success.` for the one it takes (MIOpen 3.x), older
/// releases the kernel (`MIOpenBatchNormFwdTrainSpatial:: ...`).
pub fn miopen_log(stderr: &str) -> (Vec<String>, Vec<String>) {
    let mut conv = Vec::new();
    let mut searched = Vec::new();
    let mut commands = Vec::new();
    let add = |list: &mut Vec<String>, s: String| {
        if !list.contains(&s) {
            list.push(s);
        }
    };
    for line in stderr.lines().filter(|l| l.starts_with("MIOpen")) {
        if let Some((_, rest)) = line.split_once("MIOpenDriver ") {
            add(&mut commands, format!("MIOpenDriver {}", rest.trim()));
            continue;
        }
        let Some((function, msg)) = line
            .split_once(" [")
            .and_then(|(_, rest)| rest.split_once("] "))
        else {
            continue;
        };
        let word = |s: &str| s.split([' ', ',']).next().unwrap_or(s).to_owned();
        if let Some(id) = msg.strip_prefix("solver_id = ")
            && function.ends_with("Immediate")
        {
            let dir = if function.contains("Wrw") {
                "wrw"
            } else if function.contains("Backward") {
                "bwd"
            } else {
                "fwd"
            };
            add(&mut conv, format!("{dir} {}", word(id)));
        } else if let Some((tag, id)) = msg.split_once(" Chosen Algorithm: ") {
            let dir = match tag {
                "BWrW" => "wrw",
                "BWD" => "bwd",
                _ => "fwd",
            };
            add(&mut conv, format!("{dir} {}", word(id)));
        } else if let Some(id) = msg.strip_suffix(": Success.")
            && function == "SearchForSolutions"
        {
            add(&mut searched, id.to_owned());
        } else if msg.starts_with("MIOpenBatchNorm")
            && let Some((kernel, _)) = msg.split_once("::")
        {
            add(&mut searched, kernel.to_owned());
        }
    }
    // A convolution's search lists every applicable solver; the one it
    // runs is named apart.
    (if conv.is_empty() { searched } else { conv }, commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as MIOpen 3.x writes them (logger.hpp's prefix and level,
    /// convolutionocl.cpp's and find_solution.hpp's texts).
    #[test]
    fn miopens_log_names_what_it_chose() {
        let log = "MIOpen(HIP): Info [CompileSolution] solver_id = ConvBinWinograd3x3U
MIOpen(HIP): Info [ConvolutionForwardImmediate] solver_id = ConvBinWinograd3x3U, workspace = 0
MIOpen(HIP): Info2 [SearchForSolutions] ConvDirectNaiveConvFwd: Success.
MIOpen(HIP): Info [FindConvBwdDataAlgorithm] BWD Chosen Algorithm: ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC , 0, 0.135
MIOpen(HIP): Info [ConvolutionWrwImmediate] solver_id = ConvOclBwdWrW2<1>, workspace = 0
MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv -n 2 -c 8
MIOpen(HIP): Info [ConvolutionForwardImmediate] solver_id = ConvBinWinograd3x3U, workspace = 0
RuntimeError: miopenStatusUnknownError";
        let (solvers, commands) = miopen_log(log);
        assert_eq!(
            solvers,
            [
                "fwd ConvBinWinograd3x3U",
                "bwd ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC",
                "wrw ConvOclBwdWrW2<1>"
            ]
        );
        assert_eq!(commands, ["MIOpenDriver conv -n 2 -c 8"]);
        let bn = "MIOpen(HIP): Info2 [SearchForSolutions] BnCKFwdTraining: Not applicable
MIOpen(HIP): Info2 [SearchForSolutions] BnFwdTrainingSpatialSingle: Success.
MIOpen(HIP): Info2 [BatchNormForwardTraining] MIOpenBatchNormFwdTrainSpatial:: miopenBatchNormForwardTrainingSpatial";
        assert_eq!(
            miopen_log(bn).0,
            [
                "BnFwdTrainingSpatialSingle",
                "MIOpenBatchNormFwdTrainSpatial"
            ]
        );
        assert_eq!(
            last_words(&format!("{log}\nMIOpen(HIP): Info x\n\n")),
            "RuntimeError: miopenStatusUnknownError"
        );
    }
}
