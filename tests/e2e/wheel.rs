//! The wheel as users get it (issue 62): `cargo xtask ci` builds it once
//! (maturin, zig, manylinux_2_28) and hands its path in
//! $RDNA1_PATCH_WHEEL; these tests read it, install it into a fresh venv
//! with pip, and run it through uvx, each against a fake torch in a venv
//! of the user's. uv comes from the clone's target/pytools (.ci/needs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::support::*;

const WHEEL_ENV: &str = "RDNA1_PATCH_WHEEL";

/// The wheel `cargo xtask ci` built; None, said in one line, under a plain
/// `cargo test`.
fn wheel() -> Option<PathBuf> {
    let wheel = std::env::var_os(WHEEL_ENV).map(PathBuf::from);
    if wheel.is_none() {
        eprintln!(
            "not checked (no wheel): `cargo xtask ci` builds one and names it in ${WHEEL_ENV}"
        );
    }
    wheel
}

/// `cmd` ran and succeeded; its stdout.
fn output(cmd: &mut Command) -> String {
    String::from_utf8(rdna1_testkit::run(cmd).stdout).unwrap()
}

/// The manylinux glibc the tag claims, the lowest of a compressed tag set
/// ("manylinux_2_28_x86_64" -> (2, 28)).
fn claimed_glibc(wheel: &Path) -> (u32, u32) {
    let name = wheel.file_name().unwrap().to_str().unwrap();
    let platform = name.trim_end_matches(".whl").rsplit('-').next().unwrap();
    platform
        .split('.')
        .filter_map(|tag| {
            let v = tag.strip_prefix("manylinux_")?.strip_suffix("_x86_64")?;
            let (major, minor) = v.split_once('_')?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .min()
        .unwrap_or_else(|| panic!("{name}: no manylinux_X_Y_x86_64 platform tag"))
}

/// The newest GLIBC_x.y the ELF file needs, from its version references.
fn needed_glibc(bin: &Path) -> (u32, u32) {
    let refs = output(Command::new("objdump").arg("-p").arg(bin));
    refs.split_whitespace()
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .max()
        .unwrap_or_else(|| panic!("{} names no GLIBC_ version:\n{refs}", bin.display()))
}

/// The libraries a manylinux wheel may need from the system (PEP 600,
/// auditwheel's policy for manylinux_2_28 x86_64), less the X11 and GL ones
/// a command-line tool has no business with.
const MANYLINUX_LIBS: &[&str] = &[
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libc.so.6",
    "libnsl.so.1",
    "libutil.so.1",
    "libpthread.so.0",
    "libresolv.so.2",
    "ld-linux-x86-64.so.2",
];

#[test]
fn the_wheel_carries_a_stripped_manylinux_binary() {
    let Some(wheel) = wheel() else { return };
    let tmp = tempdir();
    // Python's own zipfile reads the wheel, as pip does.
    let script = "rdna1_patch-0.1.0.data/scripts/rdna1-patch";
    let names = output(
        Command::new("python3")
            .args([
                "-c",
                "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print('\\n'.join(z.namelist())); z.extractall(sys.argv[2])",
            ])
            .arg(&wheel)
            .arg(tmp.path()),
    );
    assert!(
        names.lines().any(|n| n == script),
        "the wheel has no {script}:\n{names}"
    );
    let bin = tmp.path().join(script);
    let elf = rdna1_patch::elf::read(&bin).unwrap();
    let outside: Vec<&String> = elf
        .needed
        .iter()
        .filter(|l| !MANYLINUX_LIBS.contains(&l.as_str()))
        .collect();
    assert!(
        outside.is_empty(),
        "the binary needs libraries outside the manylinux set: {outside:?}"
    );
    let (claimed, needed) = (claimed_glibc(&wheel), needed_glibc(&bin));
    assert!(
        needed <= claimed,
        "{} claims glibc {claimed:?}, but its binary needs GLIBC_{needed:?}",
        wheel.display()
    );
    let sections = output(Command::new("readelf").args(["-S", "-W"]).arg(&bin));
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_"),
        "the binary is not stripped:\n{sections}"
    );
    eprintln!(
        "wheel: {} ({} bytes), binary needs GLIBC_{}.{}",
        wheel.display(),
        std::fs::metadata(&wheel).unwrap().len(),
        needed.0,
        needed.1
    );
}

/// A venv at `dir` made by the harness's python3, pip in it or not, and
/// its site-packages.
fn venv(dir: &Path, pip: bool) -> PathBuf {
    let mut make = Command::new("python3");
    make.args(["-m", "venv"]);
    if !pip {
        make.arg("--without-pip");
    }
    rdna1_testkit::run(make.arg(dir));
    let site = output(Command::new(dir.join("bin/python")).args([
        "-c",
        "import sysconfig; print(sysconfig.get_path('purelib'))",
    ]));
    PathBuf::from(site.trim())
}

/// The user's venv with a fake ROCm torch in it.
fn users_venv(dir: &Path) -> FakeTorch {
    let site = venv(dir, false);
    FakeTorch::create(&site, runtime(), TorchKind::Rocm, "2.5.1+rocm6.2", HIP)
}

/// `doctor --json`'s torch row: (status, detail).
fn torch_row(run: &Run) -> (String, String) {
    let v: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}\nstdout:\n{}\nstderr:\n{}", run.stdout, run.stderr));
    let row = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "torch")
        .unwrap_or_else(|| panic!("no torch row:\n{}", run.stdout));
    (
        row["status"].as_str().unwrap().to_owned(),
        row["detail"].as_str().unwrap().to_owned(),
    )
}

/// The torch row says `torch`'s torch, found by `python` for `why`.
fn found_by(run: &Run, torch: &FakeTorch, python: &Path, why: &str) {
    let (status, detail) = torch_row(run);
    let dir = torch.dir.canonicalize().unwrap();
    assert_eq!(
        (status.as_str(), detail.as_str()),
        (
            "ok",
            format!(
                "2.5.1+rocm6.2 (HIP {HIP}) at {}, found by {} ({why}); torch/lib: torch loads {}",
                dir.display(),
                python.display(),
                dir.join("lib/libMIOpen.so").display()
            )
            .as_str()
        )
    );
}

/// `program` run as the sandbox runs the tool, but with `path` for PATH
/// and no PYTHONPATH: torch is only where a venv has it.
fn as_user(sb: &Sandbox, program: &Path, path: &[&Path]) -> Command {
    let mut c = Command::new(program);
    sb.env(&mut c);
    let mut dirs: Vec<&Path> = path.to_vec();
    dirs.push(tools());
    c.env("PATH", std::env::join_paths(dirs).unwrap())
        .env_remove("PYTHONPATH");
    c
}

#[test]
fn pip_installed_it_runs_and_finds_the_users_torch_past_its_own_venv() {
    let Some(wheel) = wheel() else { return };
    let sb = Sandbox::new();
    let tool = sb.root.join("tool-venv");
    let user = sb.root.join("user-venv");
    let torch = users_venv(&user);
    venv(&tool, true);
    let t0 = Instant::now();
    rdna1_testkit::run(
        Command::new(tool.join("bin/pip"))
            .args(["install", "--no-index", "--disable-pip-version-check", "-q"])
            .arg(&wheel),
    );
    eprintln!(
        "pip install of the wheel into a fresh venv: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let bin = tool.join("bin/rdna1-patch");
    let version = output(Command::new(&bin).arg("--version"));
    assert!(version.starts_with("rdna1-patch 0.1.0 "), "{version}");
    // The tool's venv first on PATH, as activating it would put it; the
    // user's next: its python3 has the torch.
    let doctor = ["doctor", "--json", "--need-space", "0"];
    let run = Run::from(
        as_user(&sb, &bin, &[&tool.join("bin"), &user.join("bin")])
            .args(doctor)
            .output()
            .unwrap(),
    );
    found_by(
        &run,
        &torch,
        &user.join("bin/python3"),
        &format!(
            "the first python3 on PATH outside rdna1-patch's own environment {}",
            tool.display()
        ),
    );
    // And `VIRTUAL_ENV` naming the tool's venv (activated) is passed over too.
    let run = Run::from(
        as_user(&sb, &bin, &[&tool.join("bin"), &user.join("bin")])
            .env("VIRTUAL_ENV", &tool)
            .args(doctor)
            .output()
            .unwrap(),
    );
    assert!(torch_row(&run).1.contains(&format!(
        ", found by {} (the first python3 on PATH outside rdna1-patch's own environment {}); ",
        user.join("bin/python3").display(),
        tool.display()
    )));
    // pip install rdna1-patch into the venv torch is in: that venv's.
    let site = PathBuf::from(
        output(Command::new(tool.join("bin/python")).args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ]))
        .trim(),
    );
    let own = FakeTorch::create(&site, runtime(), TorchKind::Rocm, "2.5.1+rocm6.2", HIP);
    let run = Run::from(as_user(&sb, &bin, &[]).args(doctor).output().unwrap());
    found_by(
        &run,
        &own,
        &tool.join("bin/python"),
        "rdna1-patch's own environment, which holds torch",
    );
}

/// uv's `uvx` from the clone's target/pytools (.ci/needs).
fn uvx() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pytools/bin/uvx")
}

#[test]
fn uvx_runs_it_offline_and_it_finds_the_users_torch() {
    let Some(wheel) = wheel() else { return };
    let sb = Sandbox::new();
    let user = sb.root.join("user-venv");
    let torch = users_venv(&user);
    // The harness's python, as a user's system python: uv makes the
    // tool's environment from it, and downloads nothing.
    let python = output(Command::new("python3").args(["-c", "import sys; print(sys.executable)"]));
    let uvx = |virtual_env: Option<&Path>| {
        let mut c = as_user(&sb, &uvx(), &[&user.join("bin")]);
        c.env("UV_CACHE_DIR", sb.root.join("uv-cache"))
            .env("UV_PYTHON", python.trim())
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("UV_NO_CONFIG", "1")
            .args(["--offline", "--from"])
            .arg(&wheel)
            .args(["rdna1-patch", "doctor", "--json", "--need-space", "0"]);
        if let Some(v) = virtual_env {
            c.env("VIRTUAL_ENV", v);
        }
        let t0 = Instant::now();
        let run = Run::from(c.output().unwrap());
        (run, t0.elapsed().as_secs_f64())
    };
    // The user's venv active: uv puts the tool's environment's bin first
    // on PATH, before the venv's; the tool asks the venv's python.
    let (cold, cold_s) = uvx(Some(&user));
    found_by(
        &cold,
        &torch,
        &user.join("bin/python"),
        "the active venv, $VIRTUAL_ENV",
    );
    // Not active, but on PATH after uv's own bin: passed over to the user's.
    let (warm, warm_s) = uvx(None);
    let (_, detail) = torch_row(&warm);
    let prefix = format!(
        "found by {} (the first python3 on PATH outside rdna1-patch's own environment ",
        user.join("bin/python3").display()
    );
    assert!(
        detail.contains(&prefix) && detail.contains("uv-cache"),
        "{detail}"
    );
    eprintln!("uvx --offline --from the wheel, doctor: cold {cold_s:.2} s, warm {warm_s:.2} s");
}
