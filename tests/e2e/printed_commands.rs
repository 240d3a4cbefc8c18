//! Every command the tool prints runs as printed (issue 72, item 1): it
//! carries the options that chose this run's torch, state dir, prefix and
//! profile, each word quoted for the shell, and names the tool as it was
//! started (src/shell.rs).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::in_place::{HIP64, torch_in};
use crate::support::{BIN, Run, Sandbox};

/// A python at `<root>/my venv/bin/python` (a space in its path) whose
/// torch is the one in `<root>/venv-site`, as a venv's is; the sandbox's
/// python3 on PATH has none.
fn venv_python(sb: &Sandbox) -> PathBuf {
    torch_in(sb, "venv-site", "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let bin = sb.root.join("my venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python");
    let site = sb.root.join("venv-site");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\nexport PYTHONPATH='{}'\nexec python3 \"$@\"\n",
            site.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// `bin` (the tool, wherever it lies) run with `args` in the sandbox.
fn run_as(sb: &Sandbox, bin: &Path, args: &[&str]) -> Run {
    let mut c = Command::new(bin);
    sb.env(&mut c);
    c.args(args);
    Run::from(c.output().unwrap())
}

/// Every backticked command of `head` (the tool as named) in `run`'s
/// output, stdout and stderr.
fn commands(run: &Run, head: &str) -> Vec<String> {
    let text = format!("{}\n{}", run.stdout, run.stderr);
    let mut out: Vec<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with(&format!("{head} ")))
        .map(str::to_owned)
        .collect();
    out.dedup();
    out
}

/// `line` pasted into bash in the sandbox's environment: what it printed.
fn paste(sb: &Sandbox, line: &str) -> Run {
    let mut c = Command::new("bash");
    sb.env(&mut c);
    c.args(["--norc", "-c", line]);
    Run::from(c.output().unwrap())
}

/// The verbs a pasted line may run here: no build (an hour), nothing
/// that gives a transaction up.
fn pastable(command: &str) -> bool {
    ["doctor", "verify", "install", "status"]
        .iter()
        .any(|v| command.split_whitespace().any(|w| w == *v))
        && !command.contains("--abandon")
}

#[track_caller]
fn runs_as_printed(sb: &Sandbox, command: &str) {
    found_the_same(command, &paste(sb, command));
}

/// `run`, of `command` pasted, found what the run it came from found.
#[track_caller]
fn found_the_same(command: &str, run: &Run) {
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        run.code != Some(127)
            && !all.contains("not found")
            && !all.contains("has no torch")
            && !all.contains("no torch"),
        "pasted as printed, `{command}` did not find what the run it came from found (exit {:?}):\n{all}",
        run.code
    );
}

/// doctor, verify and install run with `--python` of a venv: each command
/// they print names that python (quoted: its path has a space), and
/// pasted into bash finds that torch. On 84ed257 the fix read
/// `rdna1-patch install --into-torch`, which asked python3 on PATH: "has
/// no torch installed".
#[test]
fn fix_lines_of_a_venv_run_carry_its_python_and_run_as_printed() {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let python = venv_python(&sb);
    let p = python.to_str().unwrap();
    let quoted = format!("--python '{p}'");
    let doctor = sb.run(&["doctor", "--python", p]).check_fails();
    let dry = sb.run(&["install", "--into-torch", "--python", p, "--dry-run"]);
    let verify = sb.run(&["verify", "--python", p]);
    let mut all = Vec::new();
    for run in [&doctor, &dry, &verify] {
        all.extend(commands(run, "rdna1-patch"));
    }
    let install = format!("rdna1-patch install --into-torch {quoted}");
    assert!(
        all.contains(&install),
        "no `{install}` among {all:#?}\n{}",
        doctor.stdout
    );
    for c in all.iter().filter(|c| pastable(c)) {
        assert!(c.contains(&quoted), "`{c}` lost --python");
        runs_as_printed(&sb, c);
    }
    // After the pasted install, what verify and status print runs too.
    let verify = sb.run(&["verify", "--python", p]);
    let status = sb.run(&["status", "--python", p]);
    for c in commands(&verify, "rdna1-patch")
        .into_iter()
        .chain(commands(&status, "rdna1-patch"))
        .filter(|c| pastable(c))
    {
        runs_as_printed(&sb, &c);
    }
}

/// The tool started from a path not on PATH names itself by that path
/// (quoted), and from uv's cache (where `uvx` runs it) as `uvx
/// rdna1-patch`: never a bare `rdna1-patch` that is not there (exit 127
/// on 84ed257 under uvx).
#[test]
fn the_tool_is_named_as_it_was_started() {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let python = venv_python(&sb);
    let p = python.to_str().unwrap();

    let off = sb.root.join("off path");
    std::fs::create_dir_all(&off).unwrap();
    let bin = off.join("rdna1-patch");
    std::fs::copy(BIN, &bin).unwrap();
    let head = format!("'{}'", bin.display());
    let run = run_as(&sb, &bin, &["doctor", "--python", p]).check_fails();
    let all = commands(&run, &head);
    let install = format!("{head} install --into-torch --python '{p}'");
    assert!(all.contains(&install), "no `{install}` in\n{}", run.stdout);
    runs_as_printed(&sb, &format!("{head} doctor --python '{p}'"));

    let cached = sb.root.join("home/.cache/uv/archive-v0/abc123/bin");
    std::fs::create_dir_all(&cached).unwrap();
    let uvx = cached.join("rdna1-patch");
    std::fs::copy(BIN, &uvx).unwrap();
    let run = run_as(&sb, &uvx, &["doctor", "--python", p]).check_fails();
    let all = commands(&run, "uvx rdna1-patch");
    let install = format!("uvx rdna1-patch install --into-torch --python '{p}'");
    assert!(all.contains(&install), "no `{install}` in\n{}", run.stdout);
    // Pasted, `uvx rdna1-patch ...` runs through uv itself:
    // lines_printed_under_uvx_run_when_pasted.
}

/// Whether this is a CI run (`CI` set, as CI services set it, and not
/// `false`): there an optional tool's test fails rather than skip.
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// uv as a user has it: `uvx rdna1-patch ...` typed into bash, uv offline
/// on the wheel `cargo xtask ci` built (find-links), its cache and tool
/// dirs in the sandbox's home. doctor run so prints its fix as `uvx
/// rdna1-patch install --into-torch --python P`; every command it prints,
/// pasted into the same bash, runs and finds the same torch, and doctor
/// then finds the kernels fixed. On 84ed257 the printed `rdna1-patch
/// install --into-torch` was `command not found` (exit 127) under uvx.
/// Without the wheel or uv: `not checked` in a plain `cargo test`, a
/// failure under CI=true.
#[test]
fn lines_printed_under_uvx_run_when_pasted() {
    let wheel = std::env::var_os("RDNA1_PATCH_WHEEL").map(PathBuf::from);
    let uvx = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pytools/bin/uvx");
    let (Some(wheel), true) = (wheel.filter(|w| w.is_file()), uvx.is_file()) else {
        let why = "no wheel in $RDNA1_PATCH_WHEEL or no target/pytools/bin/uvx (`cargo xtask ci` makes both)";
        assert!(
            !under_ci(),
            "CI=true, and the uvx paste test cannot run: {why}"
        );
        eprintln!("not checked (uvx paste): {why}");
        return;
    };
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let python = venv_python(&sb);
    let p = python.to_str().unwrap();
    let wheels = sb.root.join("wheels");
    let bin = sb.root.join("bin");
    for dir in [&wheels, &bin] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::copy(&wheel, wheels.join(wheel.file_name().unwrap())).unwrap();
    std::os::unix::fs::symlink(&uvx, bin.join("uvx")).unwrap();
    let harness = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let harness = String::from_utf8(harness.stdout).unwrap();
    let path = std::env::join_paths([bin.as_path(), crate::support::tools()]).unwrap();
    let paste = |line: &str| {
        let mut c = Command::new("bash");
        sb.env(&mut c);
        c.env("PATH", &path)
            .env_remove("PYTHONPATH")
            .env("UV_CACHE_DIR", sb.root.join("home/.cache/uv"))
            .env("UV_TOOL_DIR", sb.root.join("home/.local/share/uv/tools"))
            .env("UV_OFFLINE", "1")
            .env("UV_NO_INDEX", "1")
            .env("UV_FIND_LINKS", &wheels)
            .env("UV_PYTHON", harness.trim())
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("UV_NO_CONFIG", "1")
            .args(["--norc", "-c", line]);
        Run::from(c.output().unwrap())
    };
    let doctor = format!("uvx rdna1-patch doctor --python '{p}'");
    let run = paste(&doctor).check_fails();
    let all = commands(&run, "uvx rdna1-patch");
    let install = format!("uvx rdna1-patch install --into-torch --python '{p}'");
    assert!(
        all.contains(&install),
        "no `{install}` in\n{}{}",
        run.stdout,
        run.stderr
    );
    for c in all.iter().filter(|c| pastable(c)) {
        found_the_same(c, &paste(c));
    }
    // The pasted fix fixed this torch: doctor through uvx finds nothing.
    paste(&doctor).ok();
}

/// Under sudo every command printed is said with `sudo ` in front, its
/// paths quoted: status's pointer to doctor, for a state dir with a space.
#[test]
fn a_run_under_sudo_prints_its_commands_with_sudo() {
    if !nix_is_root() {
        eprintln!("not checked (needs root): a run under sudo prints `sudo rdna1-patch`");
        return;
    }
    let sb = Sandbox::new();
    let state = sb.root.join("my state");
    std::fs::create_dir_all(&state).unwrap();
    let mut c = sb.cmd();
    c.args(["status", "--state-dir", state.to_str().unwrap()])
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .env("SUDO_USER", "nobody");
    let run = Run::from(c.output().unwrap());
    let want = format!(
        "`sudo rdna1-patch doctor --state-dir '{}'`",
        state.display()
    );
    assert!(
        run.stdout.contains(&want),
        "no {want} in\n{}{}",
        run.stdout,
        run.stderr
    );
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid only reads the process's credentials.
    unsafe { libc::geteuid() == 0 }
}
