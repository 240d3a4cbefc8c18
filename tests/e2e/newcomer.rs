//! A newcomer's routes, round three (issue 31): each test here failed on
//! the code before it, and names the item it keeps.

use crate::shared::{Publisher, User};
use crate::support::*;

/// The doctor row `name`, e.g. "ok    shared    ...", and its fix line.
pub(crate) fn row(run: &Run, name: &str) -> String {
    let line = check_row(&run.stdout, name);
    let mut row = line.to_owned();
    if let Some(fix) = run
        .stdout
        .lines()
        .skip_while(|l| *l != line)
        .nth(1)
        .filter(|l| l.trim_start().starts_with("fix:"))
    {
        row.push('\n');
        row.push_str(fix.trim_start());
    }
    row
}

/// Item 4: trusting a key is a command, not a config file written by hand,
/// and doctor names the shared route before and after.
#[test]
fn trust_adds_a_publishers_key_and_doctor_names_the_shared_route() {
    let publisher = Publisher::new();
    let dir = publisher.sb.root.join("builds");
    let printed = publisher.published(dir.to_str().unwrap());
    let tagged = printed.split('@').next().unwrap().to_owned();
    let user = User::new(&[], &[]);
    std::fs::remove_file(&user.config).unwrap();
    let doctor = || {
        user.sb
            .cmd()
            .env("RDNA1_PATCH_CONFIG", &user.config)
            .args(["doctor", "--detail", "--all", "--need-space", "0"])
            .output()
            .map(Run::from)
            .unwrap()
    };
    assert_eq!(
        row(&doctor(), "shared"),
        format!(
            "ok    shared    no trusted keys in {}: every build compiles here (40-75 minutes, a ROCm SDK)\nfix: to install a build a maintainer published instead, in seconds: `rdna1-patch trust KEY`, then `rdna1-patch build --from oci://HOST/REPO`",
            user.config.display()
        )
    );
    user.build(&["--from", &tagged])
        .fails()
        .says("help: if you trust its publisher, trust their public key: `rdna1-patch trust KEY`");

    // The .pub file the publisher's minisign wrote: its key goes in.
    let public = publisher.keys.secret.with_extension("pub");
    let trust = |key: &str| {
        user.sb
            .cmd()
            .env("RDNA1_PATCH_CONFIG", &user.config)
            .args(["trust", key])
            .output()
            .map(Run::from)
            .unwrap()
    };
    let run = trust(public.to_str().unwrap()).ok();
    let id = run
        .stderr
        .split("key ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        run.stderr,
        format!(
            "   Trusted key {id} in {}: `build --from` and the caches take builds it signed\n",
            user.config.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(&user.config).unwrap(),
        format!("trusted-keys = [\"{}\"]\n", publisher.keys.public)
    );
    // Again, by the key string: nothing changes.
    trust(&publisher.keys.public)
        .ok()
        .says(&format!("key {id} was already trusted"));
    assert_eq!(
        row(&doctor(), "shared"),
        format!(
            "ok    shared    1 trusted key(s), 0 cache(s) in {}: `build` pulls a signed build of its profile from a cache or --from when one is there",
            user.config.display()
        )
    );
    user.build(&["--from", &tagged]).ok().says("is this build");
    // Neither a key nor a file: said, and the config is unchanged.
    trust("RWnot-a-key").fails_with(
        "error: `RWnot-a-key` is neither a minisign public key nor a file
help: give the second line of the publisher's minisign.pub (RW...), or the path of that file",
    );
}

/// Item 10: the JSON verdict is the verdict, not the text report's line.
#[test]
fn the_json_verdict_is_not_headed_like_the_text_line() {
    let sb = Sandbox::new();
    let run = sb.run(&[
        "doctor",
        "--need-space",
        "0",
        "--json",
        "--rocm",
        "/nonexistent",
    ]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let verdict = v["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("problems to fix: torch, rocm (2 more check(s) fail because of it"),
        "{verdict}"
    );
}

/// Item 5: a key with a password and no terminal is refused before
/// anything is pushed; its password from a file or the environment signs.
#[test]
fn publish_with_no_terminal_takes_the_password_or_refuses_before_pushing() {
    let sb = Sandbox::built();
    let (public, secret) = (sb.root.join("pw.pub"), sb.root.join("pw.key"));
    let mut make = std::process::Command::new("minisign");
    make.args(["-G", "-p"]).arg(&public).arg("-s").arg(&secret);
    let out = make
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"sesame\nsesame\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success());
    let layout = sb.root.join("builds");
    let publish = |extra: &[&str], env: Option<&str>| {
        let mut c = sb.cmd();
        c.args(["publish", "--prefix", sb.prefix.to_str().unwrap()])
            .args(["--sign-key", secret.to_str().unwrap()])
            .args(extra)
            .arg(&layout)
            .env_remove("RDNA1_PATCH_SIGN_PASSWORD");
        if let Some(pw) = env {
            c.env("RDNA1_PATCH_SIGN_PASSWORD", pw);
        }
        Run::from(c.output().unwrap())
    };
    publish(&[], None).fails_with(&format!(
        "error: the signing key {} has a password, and there is no terminal to ask for it on
help: give it with --password-file FILE or $RDNA1_PATCH_SIGN_PASSWORD, or sign with a key made without one (`minisign -G -W`); nothing was pushed",
        secret.display()
    ));
    assert!(!layout.exists(), "nothing pushed");
    let wrong = sb.root.join("wrong");
    std::fs::write(&wrong, "open barley\n").unwrap();
    publish(&["--password-file", wrong.to_str().unwrap()], None).fails_with(&format!(
        "error: minisign could not sign with {}: Wrong password for that key
help: check the key and its password; nothing was pushed",
        secret.display()
    ));
    assert!(!layout.exists(), "nothing pushed");
    publish(&[], Some("sesame")).ok().says("Published");
    let right = sb.root.join("right");
    std::fs::write(&right, "sesame\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&right, std::fs::Permissions::from_mode(0o644)).unwrap();
    publish(&["--password-file", right.to_str().unwrap()], None)
        .ok()
        .says("Published")
        .says(&format!(
            "warning: the password file {} can be read by others (mode 644); `chmod 600 {}` keeps it yours",
            right.display(),
            right.display()
        ));
    std::fs::set_permissions(&right, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = publish(&["--password-file", right.to_str().unwrap()], None).ok();
    assert!(
        !run.stderr.contains("can be read by others"),
        "{}",
        run.stderr
    );

    // Issue 42, 12: the password reaches minisign on its stdin alone, never
    // in its environment (/proc/PID/environ): the real minisign, wrapped
    // to write down what environment it was started with.
    let wrap = sb.root.join("wrap");
    std::fs::create_dir(&wrap).unwrap();
    let seen = sb.root.join("minisign-env");
    let real =
        rdna1_testkit::run(std::process::Command::new("sh").args(["-c", "command -v minisign"]));
    let real = String::from_utf8(real.stdout).unwrap();
    std::fs::write(
        wrap.join("minisign"),
        format!(
            "#!/bin/sh\nenv > '{}'\nexec {} \"$@\"\n",
            seen.display(),
            real.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        wrap.join("minisign"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let path = crate::support::path_with(&wrap);
    let mut c = sb.cmd();
    c.args(["publish", "--prefix", sb.prefix.to_str().unwrap()])
        .args(["--sign-key", secret.to_str().unwrap()])
        .arg(&layout)
        .env("PATH", &path)
        .env("RDNA1_PATCH_SIGN_PASSWORD", "sesame");
    Run::from(c.output().unwrap()).ok().says("Published");
    let env = std::fs::read_to_string(&seen).unwrap();
    assert!(env.contains("PATH="), "{env}");
    assert!(
        !env.contains("sesame"),
        "minisign's environment holds the password:\n{env}"
    );
}

/// Item 2: the prefix `install --prefix DIR` used is the one `verify` and
/// `status` read afterwards, with no --prefix; item 10: with nothing built
/// and nothing installed, status says so in words, not `(os error 2)`,
/// and points at doctor (issue 64).
#[test]
fn verify_and_status_read_the_prefix_the_install_used() {
    let sb = Sandbox::built();
    sb.torch(TorchKind::Rocm, HIP);
    // Issue 64: doctor, not the default profile's build the torch may not
    // need; nothing was checked (exit 3).
    let status = sb.run_with_state(&["status"], &[]);
    assert_eq!(status.code, Some(3), "{}", status.stdout);
    assert!(
        status.stdout.starts_with(
            "verdict: nothing of rdna1-patch's is installed here: `rdna1-patch doctor --state-dir "
        ) && status
            .stdout
            .contains("` says what this torch needs\nlast:       no transactions in ")
            && !status.stdout.contains("rocm-6.2.4"),
        "{}",
        status.stdout
    );
    let elsewhere = sb.root.join("elsewhere");
    copy_dir(&sb.prefix, &elsewhere);
    sb.run_with_state(
        &[
            "install",
            "--into-torch",
            "--prefix",
            elsewhere.to_str().unwrap(),
        ],
        &[],
    )
    .ok();
    let verify = sb.run_with_state(&["verify"], &[]).ok();
    verify.prints(&format!("ok    prefix    {}", elsewhere.display()));
    let status = sb.run_with_state(&["status"], &[]).ok();
    assert!(
        status.stdout.starts_with(&format!(
            "verdict: no problem found\nbuild:      {} miopen ",
            elsewhere.display()
        )),
        "{}",
        status.stdout
    );
    // A --prefix or --profile given still names the build to read.
    sb.run_with_state(&["status", "--prefix", sb.prefix.to_str().unwrap()], &[])
        .ok()
        .prints(&format!("build:      {} miopen ", sb.prefix.display()));
}

/// Item 1: Debian 12's ROCm 5.2.3 is served by no profile. doctor fails
/// its row with the way out, and `build --dry-run` says the build would
/// stop there, instead of letting an hour-long build start.
#[test]
fn a_rocm_no_profile_is_for_fails_doctor_and_stops_the_build() {
    let sb = Sandbox::new();
    let rocm = sb.root.join("usr");
    copy_dir(&sb.rocm, &rocm);
    std::fs::create_dir_all(rocm.join(".info")).unwrap();
    std::fs::write(rocm.join(".info/version"), "5.2.3\n").unwrap();
    let why = format!(
        "ROCm 5.2.3 at {}: no profile is for ROCm 5.2 (the built-in profiles are for ROCm 6.2, 6.3, 6.4, 7.2, 7.14)",
        rocm.display()
    );
    let help = "install ROCm 6.2 for profile rocm-6.2.4 (or a release another profile is for), or compile nothing: pull a published build (`rdna1-patch trust KEY`, then `rdna1-patch build --from REF`)";
    let doctor = sb.run(&[
        "doctor",
        "--need-space",
        "0",
        "--rocm",
        rocm.to_str().unwrap(),
    ]);
    assert_eq!(doctor.code, Some(1), "{}", doctor.stdout);
    let row = doctor
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("FAIL  rocm"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        row,
        format!("FAIL  rocm      {why}\n                fix: {help}")
    );
    // The build, with the fixture's profile (for ROCm 6.2.4 too).
    let mut args = sb.build_args(&["--dry-run"]);
    let at = args.iter().position(|a| a == "--rocm").unwrap();
    args[at + 1] = rocm.display().to_string();
    let run = Run::from(sb.cmd().args(&args).output().unwrap());
    run.fails_with(&format!(
        "error: the build would stop before fetching: {}\nhelp: {}",
        why,
        help.replace("rocm-6.2.4", "[..]")
            // The build's command carries its --profile (src/shell.rs).
            .replace("--from REF`", "--from REF[..]`")
    ));
}

/// Item 9, the Debian route: Debian's ROCm 6.4 builds a library that
/// `install` refuses for a `+rocm6.2` torch, so a build whose profile was
/// chosen for that torch stops before the fetch instead of an hour later;
/// named with --profile (for another torch), it builds.
#[test]
fn a_rocm_of_another_line_than_the_torchs_stops_the_build_first() {
    let sb = Sandbox::new();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let rocm = sb.root.join("usr");
    copy_dir(&sb.rocm, &rocm);
    std::fs::write(rocm.join(".info/version"), "6.4.3-1\n").unwrap();
    compiler_shims(&rocm.join("llvm/bin"));
    let work = sb.root.join("work");
    let build = |extra: &[&str]| {
        let mut c = sb.cmd();
        c.args(["build", "miopen", "--dry-run", "--torch-dir"])
            .arg(&torch.dir)
            .arg("--rocm")
            .arg(&rocm)
            .arg("--work-dir")
            .arg(&work)
            .arg("--prefix")
            .arg(&sb.prefix)
            .args(extra);
        Run::from(c.output().unwrap())
    };
    let run = build(&[]).fails_with(&format!(
        "error: the build would stop before fetching: ROCm 6.4.3 at {} would build MIOpen for ROCm 6.4, but torch 2.5.1+rocm6.2 at {} is for ROCm 6.2: `install --into-torch` refuses a library of another ROCm major.minor (the mix crashes with memory faults)
help: build with ROCm 6.2 (AMD's packages put it at /opt/rocm; or --rocm DIR), or compile nothing: pull a published build (`rdna1-patch trust KEY[..]`, then `rdna1-patch build --from REF[..]`); to build for another torch anyway, name the profile with --profile",
        rocm.display(),
        torch.dir.canonicalize().unwrap().display()
    ));
    assert!(
        run.stdout.contains("preflight: would stop"),
        "{}",
        run.stdout
    );
    build(&["--profile", "rocm-6.2.4"])
        .ok()
        .prints("preflight: the tools the build needs are here");
}

/// Item 9, the Debian route: a distribution's torch that loads the
/// system's libMIOpen (Ubuntu's python3-torch-rocm on Debian's libmiopen1)
/// is told that torch is the package manager's (dpkg says so: real dpkg,
/// on this test's own database) and what to do, instead of "reinstall
/// torch". A torch of the user's on the system's MIOpen takes the system
/// route (system_route.rs).
#[test]
fn a_torch_on_the_systems_miopen_is_refused_with_the_native_route() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let system = sb.root.join("usr-lib");
    std::fs::create_dir_all(&system).unwrap();
    for name in ["libMIOpen.so", "libMIOpen.so.1"] {
        std::fs::copy(torch.lib.join("libMIOpen.so"), system.join(name)).unwrap();
    }
    std::fs::remove_file(torch.lib.join("libMIOpen.so")).unwrap();
    let admin = sb.root.join("dpkg");
    std::fs::create_dir_all(admin.join("info")).unwrap();
    std::fs::write(
        admin.join("status"),
        "Package: python3-torch-rocm\nStatus: install ok installed\nPriority: optional\nSection: python\nMaintainer: Test <test@example.org>\nArchitecture: amd64\nVersion: 2.5.1-1\nDescription: test package\n\n",
    )
    .unwrap();
    let dir = torch.dir.canonicalize().unwrap();
    std::fs::write(
        admin.join("info/python3-torch-rocm.list"),
        format!("{0}\n{0}/lib/libtorch_hip.so\n", dir.display()),
    )
    .unwrap();
    let before = snapshot(&torch.dir);
    let system_before = snapshot(&system);
    let run = Run::from(
        sb.cmd()
            .env("DPKG_ADMINDIR", &admin)
            .env("LD_LIBRARY_PATH", &system)
            .args(["install", "--into-torch", "--prefix"])
            .arg(&sb.prefix)
            .args(["--state-dir", &sb.state(), "--torch-dir"])
            .arg(&torch.dir)
            .output()
            .unwrap(),
    );
    run.fails_with(&format!(
        "error: torch 2.5.1+rocm6.2 at {} belongs to the dpkg package python3-torch-rocm: rdna1-patch never changes a file a package manager owns; nothing was changed
help: make a venv with a torch of your own and fix that one: TheRock's native torch (`pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`), then `rdna1-patch install --into-torch[..]`; or a torch you built for gfx1010 against this system's ROCm",
        dir.display(),
    ));
    assert_eq!(snapshot(&torch.dir), before);
    assert_eq!(snapshot(&system), system_before);
}
