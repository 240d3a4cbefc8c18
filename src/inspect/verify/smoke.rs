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
    BATTERY_VERSION, Battery, BatteryStatus, CaseResult, Driver, Library, Limits, Mapped, Outcome,
    Tolerance, Where,
};
use super::cases::{Case, TOLERANCES, cases};
use super::judge::{Answer, blank, died, hang, judged};
use super::runtime::{failed_run, python};
use super::summary::{signal_name, summarize};
use super::{Device, VerifyRequest};
use crate::checksum;
use crate::gpu;
use crate::inspect::checks::{CheckReport, Status};
use crate::proc;
use crate::swap::txn::Journal;
use crate::torch::Torch;

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
        status: BatteryStatus::Complete,
        skipped,
        interrupted_by: None,
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
/// A signal (Ctrl-C) ends the running case as `interrupted` and leaves the
/// rest `not-run`: the report is still whole, its status `interrupted`.
pub fn run(s: &Subject, r: &mut CheckReport) -> Battery {
    let req = s.req;
    // verify::run holds signals off from its start: one that came before
    // the battery leaves every case not run, and the report whole.
    if let Some(sig) = crate::interrupt::interrupted() {
        return stopped(empty_battery(req, None), sig, r);
    }
    let kfd: Vec<gpu::Gpu> = gpu::scan(&req.sysfs)
        .into_iter()
        .filter(|g| g.is_amd())
        .collect();
    if kfd.is_empty() && req.smoke_device == Device::Gpu {
        let why = format!(
            "no AMD GPU in the KFD topology ({}), so no case of the battery ran",
            gpu::topology(&req.sysfs).display()
        );
        return nothing_run(
            req,
            why,
            "the battery runs on an AMD GPU the kernel's amdgpu driver shows in /sys/class/kfd; in a container, pass it /dev/kfd and /dev/dri",
            r,
        );
    }
    let Some(dir) = s.torch_dir else {
        return nothing_run(
            req,
            "no torch to run the battery with".to_owned(),
            "name the torch with --python (e.g. --python ~/venv/bin/python) or --torch-dir",
            r,
        );
    };
    let mut battery = empty_battery(req, None);
    if let Err(e) = crate::owner::ensure_root_may_trust_torch(dir) {
        return cannot_start(battery, &crate::error::chain(&e), r);
    }
    // A CUDA torch imports, then sees no GPU on an AMD card: the torch is
    // the problem, not the user's groups.
    if let Some(e) = crate::torch::not_a_rocm_build(dir) {
        let fix = crate::error::help(&e).unwrap_or_default().to_owned();
        return cannot_start_for(battery, &crate::error::chain(&e), &fix, r);
    }
    let deadline = Instant::now() + req.timeout * BATTERY_FACTOR;
    let out = child(req, dir, &["info"], req.timeout);
    if let Some(sig) = crate::interrupt::interrupted() {
        return stopped(battery, sig, r);
    }
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
        let result = if let Some(sig) = crate::interrupt::interrupted() {
            battery.status = BatteryStatus::Interrupted;
            battery.interrupted_by = Some(sig);
            blank(
                &case,
                Outcome::NotRun,
                format!(
                    "not run: the battery was interrupted ({}) before it",
                    signal_name(sig)
                ),
            )
        } else if left.is_zero() {
            blank(
                &case,
                Outcome::NotRun,
                format!(
                    "not run: the battery's limit of {} s was reached",
                    battery.limits.battery_seconds
                ),
            )
        } else {
            run_case(req, dir, &case, req.timeout.min(left))
        };
        battery.cases.push(result);
    }
    summarize(&battery, r);
    battery
}

/// Every case `not-run`, for `why`: nothing was checked; `fix` says
/// what would let the battery run.
fn nothing_run(req: &VerifyRequest, why: String, fix: &str, r: &mut CheckReport) -> Battery {
    let mut battery = empty_battery(req, Some(why.clone()));
    battery.status = BatteryStatus::NothingRun;
    battery.cases = cases()
        .iter()
        .map(|c| blank(c, Outcome::NotRun, format!("not run: {why}")))
        .collect();
    summarize(&battery, r);
    if let Some(row) = r.checks.last_mut().filter(|c| c.name == "smoke") {
        row.fix = Some(crate::shell::fix(fix));
    }
    battery
}

/// Interrupted before the first case: every case `not-run`.
fn stopped(mut battery: Battery, sig: i32, r: &mut CheckReport) -> Battery {
    battery.status = BatteryStatus::Interrupted;
    battery.interrupted_by = Some(sig);
    let why = format!(
        "not run: the battery was interrupted ({}) before it",
        signal_name(sig)
    );
    battery.cases = cases()
        .iter()
        .map(|c| blank(c, Outcome::NotRun, why.clone()))
        .collect();
    summarize(&battery, r);
    battery
}

fn cannot_start(battery: Battery, why: &str, r: &mut CheckReport) -> Battery {
    cannot_start_for(
        battery,
        why,
        "run `rdna1-patch verify --runtime` to see what torch loads; if torch sees no GPU, add your user to the render and video groups and log in again",
        r,
    )
}

fn cannot_start_for(mut battery: Battery, why: &str, fix: &str, r: &mut CheckReport) -> Battery {
    r.push_fix(
        "smoke",
        Status::Fail,
        format!("the battery could not start: {why}"),
        fix,
    );
    battery.skipped = Some(why.to_owned());
    battery.status = BatteryStatus::NothingRun;
    battery.cases = cases()
        .iter()
        .map(|c| {
            blank(
                c,
                Outcome::NotRun,
                "not run: the battery could not start".to_owned(),
            )
        })
        .collect();
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
    let mut cmd = python(req, dir, SMOKE)?;
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
        driver: Driver::read(&s.req.sysfs),
        libraries: info
            .maps
            .iter()
            .map(|p| Mapped {
                name: p
                    .file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
                path: p.display().to_string(),
            })
            .collect(),
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
    crate::tally::read(path);
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

fn run_case(req: &VerifyRequest, dir: &Path, case: &Case, limit: Duration) -> CaseResult {
    let spec = serde_json::to_string(case).unwrap_or_default();
    let out = child(req, dir, &["case", &case.name, &spec], limit);
    if let Some(sig) = crate::interrupt::interrupted() {
        let mut c = blank(
            case,
            Outcome::Interrupted,
            format!(
                "interrupted: {} stopped the battery while this case ran",
                signal_name(sig)
            ),
        );
        if let Ok(o) = &out {
            c.elapsed = o.elapsed.as_secs_f64();
        }
        return c;
    }
    let out = match out {
        Ok(o) => o,
        Err(e) => return blank(case, Outcome::Crash, format!("crash: {e:#}")),
    };
    let (solvers, commands) = miopen_log(&out.stderr);
    let answer = serde_json::from_str::<Answer>(out.stdout.trim());
    let mut c = match (&out.status, answer) {
        (Some(s), Ok(a)) if s.success() => judged(case, a),
        (None, _) => hang(case, out.elapsed, limit),
        (Some(s), _) => died(case, s, &out.stderr),
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
            super::super::judge::last_words(&format!("{log}\nMIOpen(HIP): Info x\n\n")),
            "RuntimeError: miopenStatusUnknownError"
        );
    }
}
