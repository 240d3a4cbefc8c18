//! Issue 64, part 5: each help a newcomer is given about getting a torch
//! is a line of shell that works when followed. A CUDA or CPU torch that
//! pip keeps (`Requirement already satisfied`) is uninstalled first; a
//! python with no torch gets it from `python -m pip`; an externally
//! managed python (PEP 668) gets a venv first. The lines are run byte for
//! byte, with RDNA1_PATCH_TORCH_INDEX naming a local directory of stand-in
//! wheels (no network), and then doctor's torch row no longer fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use rdna1_testkit::{FakeTorch, TorchKind, gpus, torch_wheel, vision_wheel};

use crate::in_place::HIP64;
use crate::support::{BIN, Run, Sandbox, line_matches, runtime, tools};

const INDEX_ENV: &str = "RDNA1_PATCH_TORCH_INDEX";

/// Whether the sandbox's python3 is externally managed (Debian's is):
/// the help it gets makes a venv first.
pub(crate) fn python3_managed() -> bool {
    let out = rdna1_testkit::run(Command::new(tools().join("python3")).args([
        "-c",
        "import os, sys, sysconfig; print(sys.prefix == sys.base_prefix and os.path.isfile(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))",
    ]));
    String::from_utf8_lossy(&out.stdout).trim() == "True"
}

/// The commands that get the torch for `cards` into the sandbox's
/// python3, from TheRock's index, in order: a venv first where python3
/// is externally managed; `installed` a CUDA or CPU torch uninstalled
/// first.
pub(crate) fn python3_commands(cards: &[&str], installed: bool) -> Vec<String> {
    let exe = tools().join("python3").display().to_string();
    let devices: Vec<String> = cards.iter().map(|c| format!("device-{c}")).collect();
    let devices = devices.join(",");
    let install = |pip: &str| {
        format!(
            "{pip} install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[{devices}]\" \"torchvision[{devices}]\""
        )
    };
    if python3_managed() {
        return vec![
            format!("{exe} -m venv ~/venv"),
            install("~/venv/bin/python -m pip"),
        ];
    }
    let pip = format!("{exe} -m pip");
    match installed {
        true => vec![format!("{pip} uninstall --yes torch"), install(&pip)],
        false => vec![install(&pip)],
    }
}

/// The plan's torch step for the sandbox's python3, after "the torch for
/// ...: ": its commands, each in backticks, and what follows them.
pub(crate) fn python3_step(cards: &[&str], installed: bool) -> String {
    let commands: Vec<String> = python3_commands(cards, installed)
        .iter()
        .map(|c| format!("`{c}`"))
        .collect();
    let then = match python3_managed() {
        true => ", then use --python ~/venv/bin/python",
        false => "",
    };
    format!("{}{then}", commands.join(", then "))
}

/// The help (after `help: ` or `fix: `) for no ROCm torch in the sandbox's
/// python3, from TheRock's index: `installed` a CUDA or CPU torch to
/// replace; `or` what the tool adds after the lines.
pub(crate) fn python3_help(target: &str, which: &str, installed: bool, or: &str) -> String {
    python3_help_for(&[target], which, installed, or)
}

/// [`python3_help`] for every one of `cards`.
pub(crate) fn python3_help_for(cards: &[&str], which: &str, installed: bool, or: &str) -> String {
    let exe = tools().join("python3").display().to_string();
    let line = python3_commands(cards, installed).join(" && ");
    let named = match cards {
        [one] => (*one).to_owned(),
        _ => format!(
            "{} and {}",
            cards[..cards.len() - 1].join(", "),
            cards[cards.len() - 1]
        ),
    };
    let head = format!("install the torch built for {named} ({which})");
    if python3_managed() {
        return format!(
            "{head} in a venv, as {exe} is externally managed (PEP 668: pip installs nothing into it): `{line}`, then run this again with --python ~/venv/bin/python"
        );
    }
    match installed {
        true => format!(
            "{head} in place of this one (pip keeps a torch it has, whatever the index): `{line}`, then run this again{or}"
        ),
        false => format!("{head}: `{line}`, then run this again{or}"),
    }
}

/// A directory holding the stand-in of TheRock's torch for gfx1010: a
/// ROCm torch with its own libMIOpen and gfx1010 code in libtorch_hip.so
/// (no comgr: the torch row is what is judged here).
fn rocm_wheels(sb: &Sandbox) -> PathBuf {
    let site = sb.root.join("wheel-src/rocm");
    let t = FakeTorch::native(
        &site,
        runtime(),
        &sb.root,
        "2.6.0+rocm6.4",
        HIP64,
        &["gfx1010"],
    );
    std::fs::remove_file(t.lib.join("libamd_comgr.so.2")).unwrap();
    let dir = sb.root.join("wheels");
    let extras = ["device-gfx1010", "device-gfx1011", "device-gfx1012"];
    torch_wheel(&site, "2.6.0+rocm6.4", &extras, &dir);
    vision_wheel("0.21.0+rocm6.4", &extras, &dir);
    dir
}

/// A venv at `dir` (never externally managed) with `torch` installed
/// from its stand-in wheel when given (PyPI's CUDA one, a CPU one).
fn venv(sb: &Sandbox, dir: &Path, torch: Option<(TorchKind, &str)>) -> PathBuf {
    rdna1_testkit::run(
        Command::new(tools().join("python3"))
            .args(["-m", "venv"])
            .arg(dir),
    );
    let python = dir.join("bin/python");
    if let Some((kind, version)) = torch {
        let site = sb.root.join("wheel-src").join(version);
        FakeTorch::create(&site, runtime(), kind, version, "");
        let pypi = sb.root.join("pypi").join(version);
        torch_wheel(&site, version, &[], &pypi);
        rdna1_testkit::run(
            Command::new(&python)
                .args(["-m", "pip", "install", "--no-index", "--find-links"])
                .arg(&pypi)
                .arg("torch"),
        );
    }
    python
}

/// doctor for `python` with the index variable set to `wheels`, every
/// line whole (`--detail`).
fn doctor(sb: &Sandbox, python: &str, wheels: &Path) -> Run {
    doctor_as(sb, python, wheels, &["--detail"])
}

fn doctor_as(sb: &Sandbox, python: &str, wheels: &Path, extra: &[&str]) -> Run {
    let mut c = sb.cmd();
    c.args(["doctor", "--python", python])
        .args(extra)
        .env(INDEX_ENV, wheels);
    Run::from(c.output().unwrap())
}

/// The command a fix line gives, between its backticks, as printed.
fn command_of(fix: &str) -> &str {
    fix.split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no command in {fix}"))
}

/// The command doctor's default view (no --detail: rows one glance long,
/// paths with `~`) gives, which is what a user copies: whole on one line.
fn glance_command(sb: &Sandbox, python: &str, wheels: &Path) -> String {
    let run = doctor_as(sb, python, wheels, &[]);
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains('`'))
        .unwrap_or_else(|| panic!("no command in\n{}", run.stdout));
    assert_eq!(
        line.matches('`').count() % 2,
        0,
        "the command is on one line: {line}"
    );
    command_of(line).to_owned()
}

/// `line` run by bash as a user would paste it, in the sandbox's
/// environment with the index variable set; it must succeed.
fn follow(sb: &Sandbox, line: &str, wheels: &Path) {
    let mut c = Command::new("bash");
    sb.env(&mut c);
    c.args(["-c", line]).env(INDEX_ENV, wheels);
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{line}\nfailed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first lines of a failing doctor, exactly; the rest is the GPU's.
#[track_caller]
fn starts_with(run: &Run, want: &[&str]) {
    let got: Vec<&str> = run.stdout.lines().collect();
    assert!(
        got.len() > want.len() && want.iter().zip(&got).all(|(w, g)| line_matches(w, g)),
        "expected the first lines\n{}\ngot:\n{}",
        want.join("\n"),
        run.stdout
    );
}

/// After the lines: doctor finds the stand-in ROCm torch, and its torch
/// row passes.
#[track_caller]
fn torch_row_passes(run: &Run, site: &Path) {
    let torch = format!(
        "ok    torch     2.6.0+rocm6.4 (HIP {HIP64}) at {}/torch, found by [..]",
        site.display()
    );
    assert!(
        run.stdout.lines().any(|l| line_matches(&torch, l))
            && !run.stdout.lines().any(|l| l.starts_with("FAIL  torch ")),
        "no passing torch row\n{}\n{}",
        run.stdout,
        run.stderr
    );
}

fn site_of(venv: &Path) -> PathBuf {
    let lib = venv.join("lib");
    let py = std::fs::read_dir(&lib)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    py.join("site-packages")
}

const ROUTE: &str = "skip  route     a torch first: the route (the in-place fix, a build, or nothing to do) is chosen for the torch it is to fix";

#[test]
fn a_cuda_or_cpu_torch_is_replaced_by_the_lines_doctor_prints() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let wheels = rocm_wheels(&sb);
    let kinds = [
        (TorchKind::Cuda, "2.15.0+cu132", "a CUDA 13.2 build"),
        (TorchKind::Cpu, "2.15.0+cpu", "a CPU-only build"),
    ];
    for (kind, version, what) in kinds {
        let dir = sb.root.join("home").join(version);
        let python = venv(&sb, &dir, Some((kind, version)));
        let py = python.display().to_string();
        let site = site_of(&dir);
        let run = doctor(&sb, &py, &wheels).check_fails();
        let fix = format!(
            "                fix: install the torch built for gfx1010 (the card in this machine) in place of this one (pip keeps a torch it has, whatever the index): `{py} -m pip uninstall --yes torch && {py} -m pip install --no-index --find-links {} \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`, then run this again",
            wheels.display()
        );
        starts_with(
            &run,
            &[
                "verdict: 1 problem to fix: torch; 2 steps, first the torch for gfx1010 (see route)",
                &format!(
                    "FAIL  torch     torch {version} at {}/torch is {what}, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so",
                    site.display()
                ),
                &fix,
                ROUTE,
            ],
        );
        follow(&sb, &glance_command(&sb, &py, &wheels), &wheels);
        torch_row_passes(&doctor(&sb, &py, &wheels), &site);
    }
}

#[test]
fn a_python_with_no_torch_gets_it_by_the_lines_doctor_prints() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let wheels = rocm_wheels(&sb);
    let dir = sb.root.join("home/plain");
    let python = venv(&sb, &dir, None);
    let py = python.display().to_string();
    let run = doctor(&sb, &py, &wheels).check_fails();
    let fix = format!(
        "                fix: install the torch built for gfx1010 (the card in this machine): `{py} -m pip install --no-index --find-links {} \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`, then run this again; or pass the python torch is in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir",
        wheels.display()
    );
    starts_with(
        &run,
        &[
            "verdict: 1 problem to fix: torch; 2 steps, first the torch for gfx1010 (see route)",
            &format!("FAIL  torch     {py} ({py}) has no torch installed"),
            &fix,
            ROUTE,
        ],
    );
    follow(&sb, &glance_command(&sb, &py, &wheels), &wheels);
    torch_row_passes(&doctor(&sb, &py, &wheels), &site_of(&dir));
}

/// Debian's python3 is externally managed: pip refuses to install into
/// it, so the lines make a venv first, and doctor is run again with it.
#[test]
fn an_externally_managed_python_gets_a_venv_first() {
    let system = Path::new("/usr/bin/python3");
    let marker = Command::new(system)
        .args(["-c", "import os, sysconfig; print(os.path.isfile(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"])
        .output();
    if !marker.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "True") {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "not checked (no externally managed python at /usr/bin/python3, as Debian 12's is)"
        );
        return;
    }
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let wheels = rocm_wheels(&sb);
    let run = doctor(&sb, "/usr/bin/python3", &wheels).check_fails();
    let fix = format!(
        "                fix: install the torch built for gfx1010 (the card in this machine) in a venv, as /usr/bin/python3 is externally managed (PEP 668: pip installs nothing into it): `/usr/bin/python3 -m venv ~/venv && ~/venv/bin/python -m pip install --no-index --find-links {} \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`, then run this again with --python ~/venv/bin/python",
        wheels.display()
    );
    starts_with(
        &run,
        &[
            "verdict: 1 problem to fix: torch; 2 steps, first the torch for gfx1010 (see route)",
            "FAIL  torch     /usr/bin/python3 (/usr/bin/python3) has no torch installed",
            &fix,
            ROUTE,
        ],
    );
    follow(
        &sb,
        &glance_command(&sb, "/usr/bin/python3", &wheels),
        &wheels,
    );
    // "run this again with --python ~/venv/bin/python", as typed.
    let mut c = Command::new("bash");
    sb.env(&mut c);
    c.args([
        "-c",
        &format!("{BIN} doctor --detail --python ~/venv/bin/python"),
    ])
    .env(INDEX_ENV, &wheels);
    let again = Run::from(c.output().unwrap());
    torch_row_passes(&again, &site_of(&sb.root.join("home/venv")));
}
