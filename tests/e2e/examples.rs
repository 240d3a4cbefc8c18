//! Every shell example of README.md, of docs/ and of each verb's `--help`, run as
//! written by bash in a sandbox home: a fake torch in a real venv, the
//! fixture's ROCm as $ROCM_PATH, a real registry for the `oci://` examples,
//! and no network (git may use file:// only, HTTP goes to a closed port).
//!
//! An example passes when it exits 0 (or 1 for a check that found a
//! problem: doctor, verify, patches check); the few that need what no
//! sandbox has (GitHub, an AMD GPU, real MIOpen source) are listed with the
//! error they must give, a real one with a help line, never a usage error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdna1_testkit::registry::Registry;

use crate::support::*;

/// Examples that cannot succeed in a sandbox, and the error each gives.
/// A build (not a dry run) fetches MIOpen from GitHub; `patches refresh`
/// needs a checkout of real MIOpen.
const NEEDS_THE_WORLD: &[(&str, &str)] = &[
    // Debian's ROCm at /usr, which the sandbox does not have: its /usr
    // (`localize`) holds none, whatever the machine's /usr does.
    ("build miopen --rocm ~/usr", "missing what the build needs"),
    (
        "--profile rocm-6.2.4 --rocm ~/usr",
        "missing what the build needs",
    ),
    (
        "build rocblas --profile rocm-6.4.3 --rocm ~/usr",
        "missing what the build needs",
    ),
    (
        "--profile rocm-6.3.1 --rocm ~/usr",
        "missing what the build needs",
    ),
    // What the sandbox published is the fixture's build, not rocm-6.2.4's:
    // a --from finds none of this profile, and refuses (never compiles).
    (
        "rdna1-patch build --from oci://",
        "has no build of rocm-6.2.4",
    ),
    ("rdna1-patch build", "transport 'https' not allowed"),
    // The sandbox's torch is of ROCm 6.2, whose profile builds no rocBLAS.
    ("install rocblas --into-torch", "builds no rocblas"),
    // Installs the build that the line before fetches from GitHub.
    (
        "install --into-torch --profile therock-7.14",
        "no usable build",
    ),
    (
        "patches refresh 0004-batchnorm-gfx101x.patch --profile ~/my-profiles",
        "has no HEAD commit",
    ),
    (
        "patches refresh 0004-batchnorm-gfx101x.patch --source ~/src/MIOpen",
        "does not apply",
    ),
];

/// bash, in `home`, with the sandbox's environment.
fn bash(env: &Env, line: &str) -> (Option<i32>, String, String, Duration) {
    let started = Instant::now();
    let mut c = Command::new("timeout");
    c.args(["120", "bash", "-o", "pipefail", "-c", line])
        .current_dir(&env.home)
        .env_clear()
        .env("HOME", &env.home)
        .env("PATH", path_with(&env.bin))
        .env("LANG", "C.UTF-8")
        .env("ROCM_PATH", &env.rocm)
        .env("GIT_ALLOW_PROTOCOL", "file")
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env("HTTP_PROXY", "http://127.0.0.1:1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("RDNA1_PATCH_CONFIG", env.home.join("config.toml"));
    // TheRock's examples, with the rocm[devel] they install; the others
    // with the pytorch.org-style torch alone.
    if line.contains("therock-7.14") {
        c.env("PYTHONPATH", &env.sdk);
    }
    let out = c.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

struct Env {
    home: PathBuf,
    bin: PathBuf,
    /// A rocm[devel] as pip installs it, for `python -m rocm_sdk`.
    sdk: PathBuf,
    rocm: PathBuf,
}

/// The sandbox home every example runs in.
fn env(sb: &Sandbox, reg: &Registry) -> Env {
    let home = sb.root.join("home");
    let bin = sb.root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("rdna1-patch")).unwrap();
    let shim = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    compiler_shims(&sb.rocm.join("llvm/bin"));
    // Tests run as root: sudo is the command itself.
    shim("sudo", "exec \"$@\"");
    shim("python", "exec python3 \"$@\"");
    // A real venv with the fake torch in it, for --python ~/venv/bin/python.
    let venv = home.join("venv");
    rdna1_testkit::run(
        Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv),
    );
    let venv_site = venv.join(format!("lib/python{}/site-packages", python_version()));
    FakeTorch::create(&venv_site, runtime(), TorchKind::Rocm, "2.5.1+rocm6.2", HIP);
    // python3 on PATH finds a torch in the user's site-packages (a venv
    // does not look there).
    let user_site = home.join(format!(
        ".local/lib/python{}/site-packages",
        python_version()
    ));
    FakeTorch::create(&user_site, runtime(), TorchKind::Rocm, "2.5.1+rocm6.2", HIP);
    let sdk = sb.root.join("sdk-site");
    rdna1_testkit::FakeRocmSdk::create(
        &sdk,
        runtime(),
        "7.14.0",
        rdna1_testkit::SdkShape::MultiArch(&["gfx1010"]),
    );
    compiler_shims(&sdk.join("_rocm_sdk_devel/lib/llvm/bin"));
    // ~/src/MIOpen: a source tree to check a series against.
    copy_dir(&sb.origin, &home.join("src/MIOpen"));
    // ~/usr: the examples' Debian /usr (`localize`), with no ROCm in it.
    for d in ["usr/bin", "usr/include", "usr/lib"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    // ~/my-series: a series of the user's own (empty).
    std::fs::create_dir_all(home.join("my-series")).unwrap();
    std::fs::write(home.join("my-series/series"), "").unwrap();
    // The default prefix holds a finished build (the fixture's), so status,
    // verify and publish --profile rocm-6.2.4 have one to read.
    for profile in ["rocm-6.2.4", "rocm-6.3.1"] {
        copy_dir(
            &sb.prefix,
            &home.join(format!(".local/share/rdna1-patch/{profile}")),
        );
    }
    // A maintainer key where minisign -G puts it, and a config trusting it.
    std::fs::create_dir_all(home.join(".minisign")).unwrap();
    rdna1_testkit::run(
        Command::new("minisign")
            .args(["-G", "-W", "-p"])
            .arg(home.join(".minisign/minisign.pub"))
            .arg("-s")
            .arg(home.join(".minisign/minisign.key")),
    );
    let public = std::fs::read_to_string(home.join(".minisign/minisign.pub")).unwrap();
    // The same key as a user downloads it, for `trust FILE`.
    std::fs::create_dir_all(home.join("Downloads")).unwrap();
    std::fs::write(home.join("Downloads/maintainer.pub"), &public).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "trusted-keys = [{:?}]\ncaches = [\"oci://{}/you/miopen-rdna1\"]\n",
            public.lines().nth(1).unwrap(),
            reg.addr
        ),
    )
    .unwrap();
    Env {
        home,
        bin,
        sdk,
        rocm: sb.rocm.clone(),
    }
}

fn python_version() -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Commands an example shows that the sandbox does not run: installing
/// software, and making a key (the sandbox has its own).
const NOT_RUN: &[&str] = &[
    "sudo apt-get",
    "apt-get",
    "curl ",
    "git clone",
    "cargo ",
    "pip install",
    "pipx install",
    "uv tool install",
    "uv tool uninstall",
    "minisign -G",
];

/// The commands of ```sh and ```console blocks (or of `--help`'s examples):
/// continuation lines joined, `$ ` prompts and comment-only lines dropped.
fn commands(lines: &mut dyn Iterator<Item = &str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in lines {
        let line = line.trim().trim_start_matches("$ ");
        pending.push_str(line.trim_end_matches('\\').trim_end());
        if line.ends_with('\\') {
            pending.push(' ');
            continue;
        }
        let command = std::mem::take(&mut pending);
        if !command.is_empty()
            && !command.starts_with('#')
            && !NOT_RUN.iter().any(|n| command.starts_with(n))
        {
            out.push(command);
        }
    }
    out
}

fn document_examples(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in text.lines() {
        if !line.starts_with("```") {
            if let Some(b) = block.as_mut() {
                b.push(line);
            }
        } else if let Some(lines) = block.take() {
            out.extend(commands(&mut lines.into_iter()));
        } else if line == "```sh" || line == "```console" {
            block = Some(Vec::new());
        }
    }
    out
}

/// The `Examples:` commands of every verb's --help.
fn help_examples() -> Vec<String> {
    let verbs = [
        "build",
        "install",
        "rollback",
        "status",
        "verify",
        "doctor",
        "patches",
        "profiles",
        "publish",
        "trust",
        "clean",
        "completions",
    ];
    let mut out = Vec::new();
    for v in verbs {
        let help = Command::new(BIN).args([v, "--help"]).output().unwrap();
        let text = String::from_utf8(help.stdout).unwrap();
        let examples = text
            .split("Examples:")
            .nth(1)
            .unwrap_or_else(|| panic!("{v} --help has no examples"));
        out.extend(commands(&mut examples.lines()));
    }
    out
}

/// Where an example's placeholders point in the sandbox.
fn localize(line: &str, reg: &Registry) -> String {
    line.replace(
        "oci://ghcr.io/you/miopen-rdna1",
        &format!("oci://{}/you/miopen-rdna1", reg.addr),
    )
    .replace("/mnt/usb/miopen-builds", "~/usb/miopen-builds")
    .replace("--rocm /usr", "--rocm ~/usr")
    .replace(" DIR ", " ~/exported ")
    .replace(" DIR", " ~/exported")
    .replace(
        "--prefix /opt/rocm-miopen-rdna1",
        "--prefix ~/opt/rocm-miopen-rdna1",
    )
}

fn check(env: &Env, reg: &Registry, examples: &[String], failures: &mut Vec<String>) {
    for example in examples {
        let line = localize(example, reg);
        let (code, stdout, stderr, took) = bash(env, &line);
        let expected = NEEDS_THE_WORLD
            .iter()
            .find(|(m, _)| line.contains(m) && !line.contains("--dry-run"));
        let check_verb = ["doctor", "verify", "patches check"]
            .iter()
            .any(|v| line.contains(v));
        let usage = stderr.contains("\nUsage:") || stderr.starts_with("Usage:");
        let crashed = matches!(code, Some(101) | Some(124) | Some(134) | None);
        let ok = match (code, expected) {
            _ if usage || crashed => false,
            (Some(0), None) => true,
            (Some(1), None) => check_verb,
            // The sandbox has no GPU: the battery checks nothing; and
            // after uninstall.md's rollback nothing is installed: verify
            // and status say so with their own status (the exit table).
            (Some(3), None) => line.contains("verify") || line.contains("rdna1-patch status"),
            (Some(2), Some((_, why))) => {
                // The error as --detail prints it: at a glance it wraps.
                let whole = crate::support_run::unwrapped_error(&stderr);
                whole.join("\n").contains(why)
                    && whole.last().is_some_and(|l| l.starts_with("help: "))
            }
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "`{example}` (ran as `{line}`): exit {code:?} in {took:?}, expected {}\nstdout: {}\nstderr: {}",
                expected.map_or("0".to_owned(), |(_, w)| format!("an error saying {w:?}")),
                stdout.chars().take(600).collect::<String>(),
                stderr.chars().take(1500).collect::<String>()
            ));
        }
    }
}

/// README, then the docs/ pages in the order a user meets them, in one
/// home: the uninstall page near the end, as it undoes every install the
/// pages before it made.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/routes.md",
    "docs/build.md",
    "docs/install.md",
    "docs/verify.md",
    "docs/patches.md",
    "docs/shared.md",
    "docs/commands.md",
    "docs/uninstall.md",
    "docs/hardware.md",
    "docs/rows.md",
];

#[test]
fn every_readme_and_help_example_runs() {
    let reg = Registry::start(None);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Every page of docs/ is in the list, so none is left unrun.
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_str().unwrap()))
        .collect();
    pages.sort();
    let mut listed: Vec<String> = DOCUMENTS[1..].iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(pages, listed, "docs/ pages and DOCUMENTS differ");
    let mut from_docs = Vec::new();
    for doc in DOCUMENTS {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let examples = document_examples(&text);
        assert!(
            // Measurements, and the vocabulary of doctor's and verify's rows;
            // each route's why and cost, whose commands are README's.
            !examples.is_empty() || ["docs/hardware.md", "docs/routes.md"].contains(doc),
            "{doc} has no examples"
        );
        from_docs.extend(examples);
    }
    let from_help = help_examples();
    assert!(
        from_docs.len() > 40 && from_help.len() > 25,
        "examples not found: {} and {}",
        from_docs.len(),
        from_help.len()
    );
    let mut failures = Vec::new();
    // Each document in a home of its own, its examples in their order.
    for examples in [&from_docs, &from_help] {
        let sb = Sandbox::built();
        let env = env(&sb, &reg);
        check(&env, &reg, examples, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples do not run as written:\n\n{}",
        failures.len(),
        from_docs.len() + from_help.len(),
        failures.join("\n\n")
    );
}
