//! A newcomer's routes, round three (issue 31): each test here failed on
//! the code before it, and names the item it keeps.

use crate::shared::{Publisher, User};
use crate::support::*;

/// The doctor row `name`, e.g. "ok    shared    ...", and its fix line.
fn row(run: &Run, name: &str) -> String {
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
            .args(["doctor", "--all", "--need-space", "0"])
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
/// and nothing installed, status says so in words, not `(os error 2)`.
#[test]
fn verify_and_status_read_the_prefix_the_install_used() {
    let sb = Sandbox::built();
    sb.torch(TorchKind::Rocm, HIP);
    let status = sb.run_with_state(&["status"], &[]).ok();
    assert!(
        status.stdout.starts_with("build:      none in ")
            && status.stdout.contains(
                " (nothing is built there: `rdna1-patch build` builds it, or pulls one with --from)\ninstalled:  nowhere\n"
            ),
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
        status
            .stdout
            .starts_with(&format!("build:      {} miopen ", elsewhere.display())),
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
help: build with ROCm 6.2 (AMD's packages put it at /opt/rocm; or --rocm DIR), or compile nothing: pull a published build (`rdna1-patch trust KEY`, then `rdna1-patch build --from REF`); to build for another torch anyway, name the profile with --profile",
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
help: make a venv with a torch of your own and fix that one: TheRock's native torch (`pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\"`), then `rdna1-patch install --into-torch`; or a torch you built for gfx1010 against this system's ROCm",
        dir.display(),
    ));
    assert_eq!(snapshot(&torch.dir), before);
    assert_eq!(snapshot(&system), system_before);
}

/// Item 9: README said `minisign -G` writes both files to ~/.minisign;
/// Debian 12's minisign 0.11 writes minisign.pub to the current directory
/// and fails when ~/.minisign is missing. publish's help, run as written
/// in a fresh home, makes the key where publish looks for it.
#[test]
fn publishs_help_makes_a_key_where_publish_looks() {
    let sb = Sandbox::built();
    let home = sb.root.join("home");
    let layout = sb.root.join("builds");
    let publish = || {
        sb.run(&[
            "publish",
            "--prefix",
            sb.prefix.to_str().unwrap(),
            layout.to_str().unwrap(),
        ])
    };
    publish().fails_with(&format!(
        "error: cannot read the signing key {}/.minisign/minisign.key: [..]
help: make one with `mkdir -p ~/.minisign && minisign -G` (the key goes to ~/.minisign/minisign.key, minisign.pub to the current directory), or name yours with --sign-key FILE",
        home.display()
    ));
    // As the help says (-W: no password, for the test), in a directory of
    // the user's.
    let cwd = sb.root.join("somewhere");
    std::fs::create_dir_all(&cwd).unwrap();
    rdna1_testkit::run(
        std::process::Command::new("sh")
            .args(["-c", "mkdir -p ~/.minisign && minisign -G -W"])
            .current_dir(&cwd)
            .env("HOME", &home),
    );
    assert!(cwd.join("minisign.pub").is_file());
    publish().ok().says("Published");
}

/// Item 9: the profile table of docs/patches.md is the binary's list:
/// every built-in profile has a row and every row a profile, with its ROCm
/// version, its pin (commit and tag), its torch line and its MIOpen, and
/// the default marked as `profiles list` marks it.
#[test]
fn the_profile_table_is_what_profiles_list_says() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/patches.md")).unwrap();
    let rows: Vec<Vec<&str>> = page
        .lines()
        .skip_while(|l| !l.starts_with("| profile | ROCm | MIOpen | pinned | for torch |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect();
    let sb = Sandbox::new();
    let list: serde_json::Value =
        serde_json::from_str(&sb.run(&["profiles", "list", "--json"]).ok().stdout).unwrap();
    let profiles = list["profiles"].as_array().unwrap();
    assert_eq!(rows.len(), profiles.len(), "{rows:?}");
    for p in profiles {
        let name = p["name"].as_str().unwrap();
        let row = rows
            .iter()
            .find(|r| r[0].starts_with(&format!("`{name}`")))
            .unwrap_or_else(|| panic!("no row for {name}"));
        let default = p["default"].as_bool().unwrap();
        assert_eq!(row[0].ends_with("(default)"), default, "{name}: {row:?}");
        assert_eq!(row[1], p["rocm"]["version"].as_str().unwrap(), "{name}");
        let miopen = &p["components"]["miopen"];
        let description = p["description"].as_str().unwrap();
        let first = row[2].split(' ').next().unwrap();
        assert!(
            description.contains(first),
            "{name}: {first} / {description}"
        );
        if let Some(commit) = miopen["commit"].as_str() {
            assert!(row[3].starts_with(&commit[..8]), "{name}: {}", row[3]);
        } else {
            assert!(
                !row[3].chars().take(8).all(|c| c.is_ascii_hexdigit()),
                "{name}"
            );
        }
        match miopen["tag"].as_str() {
            Some(tag) => assert!(row[3].contains(&format!("tag {tag}")), "{name}: {}", row[3]),
            None => assert!(row[3].contains("no tag"), "{name}: {}", row[3]),
        }
        let line = p["rocm"]["torch_hip"].as_str().unwrap();
        assert!(row[4].contains(line), "{name}: {} lacks {line}", row[4]);
    }
}

/// Item 7: an argument clap refuses is said as every other error is, one
/// `error:` line and one `help:` line; no usage line that makes an
/// optional flag look required, no tip block.
#[test]
fn argument_errors_are_one_error_and_one_help_line() {
    let sb = Sandbox::new();
    for (args, said) in [
        (
            &["build", "--porfile", "X"][..],
            "error: unexpected argument '--porfile' found\nhelp: did you mean `--profile`? `rdna1-patch build --help` lists its arguments",
        ),
        (
            &["bild"],
            "error: unrecognized subcommand 'bild'\nhelp: did you mean `build`? `rdna1-patch --help` lists its arguments",
        ),
        (
            &["--color", "never", "patches", "list", "--jobs", "2"],
            "error: unexpected argument '--jobs' found\nhelp: `rdna1-patch patches list --help` lists its arguments",
        ),
        (
            &["completions"],
            "error: the following required arguments were not provided: <SHELL>\nhelp: `rdna1-patch completions --help` lists its arguments",
        ),
    ] {
        let run = sb.run(args);
        assert_eq!(run.code, Some(2), "{args:?}");
        assert_eq!(run.stderr, format!("{said}\n"), "{args:?}");
    }
}

/// Item 8: completion goes on into values: `--profile <TAB>` offers the
/// built-in profiles, `build <TAB>` the component; a profile file is
/// still taken.
#[test]
fn completions_offer_profile_names_and_components() {
    use crate::first_contact::bash_completes;
    let listed = Sandbox::new().run(&["profiles", "list"]).ok().stdout;
    let profiles: Vec<String> = bash_completes(&["rdna1-patch", "build", "--profile", ""]);
    assert_eq!(
        profiles,
        [
            "rocm-6.2.4",
            "rocm-6.3.1",
            "rocm-6.4.3",
            "rocm-7.2",
            "therock-7.14"
        ]
    );
    for p in &profiles {
        assert!(
            listed.contains(p.as_str()),
            "{p} is not in profiles list:\n{listed}"
        );
    }
    assert_eq!(
        bash_completes(&["rdna1-patch", "verify", "--profile", "rocm-6.3"]),
        ["rocm-6.3.1"]
    );
    assert_eq!(bash_completes(&["rdna1-patch", "build", "mi"]), ["miopen"]);
    assert_eq!(
        bash_completes(&["rdna1-patch", "install", "--into-torch", "mi"]),
        ["miopen"]
    );
}

/// Item 10: a one-machine user with distcc installed is offered no fix to
/// spread the build (CI installs distcc).
#[test]
fn doctor_offers_no_distcc_fix_to_one_machine() {
    let sb = Sandbox::new();
    let mut c = sb.cmd();
    c.args(["doctor", "--all", "--need-space", "0"])
        .env_remove("DISTCC_HOSTS");
    let run = Run::from(c.output().unwrap());
    assert_eq!(
        row(&run, "distcc"),
        "skip  distcc    installed; no DISTCC_HOSTS names other machines, so builds compile here (`--launcher distcc` with DISTCC_HOSTS set spreads them)"
    );
}

/// Item 10: the man pages can be installed, each page the main page
/// names is there, and no section is headed "EXTRA".
#[test]
fn man_install_writes_every_page_the_main_page_names() {
    let sb = Sandbox::new();
    let dir = sb.root.join("share/man");
    sb.run(&["man", "--install", dir.to_str().unwrap()])
        .ok()
        .says(&format!(
            "Installed 15 pages into {}",
            dir.join("man1").display()
        ));
    let main = std::fs::read_to_string(dir.join("man1/rdna1-patch.1")).unwrap();
    assert!(main.contains(".SH \"EXIT STATUS\""), "{main}");
    let named: Vec<&str> = main
        .split("rdna1\\-patch\\-")
        .skip(1)
        .filter_map(|s| s.split_once("(1)").map(|(verb, _)| verb))
        .collect();
    assert_eq!(named.len(), 14, "{main}");
    for verb in named {
        let page = dir.join(format!("man1/rdna1-patch-{}.1", verb.replace("\\-", "-")));
        let text = std::fs::read_to_string(&page).unwrap_or_else(|_| panic!("{page:?}"));
        assert!(!text.contains(".SH EXTRA"), "{verb}");
    }
    let build = std::fs::read_to_string(dir.join("man1/rdna1-patch-build.1")).unwrap();
    assert!(
        build.contains(".SH COST\nCost: compiling MIOpen"),
        "{build}"
    );
    // Examples are unfilled: man does not join or wrap the command lines.
    assert!(
        build.contains(".SH EXAMPLES\n.nf\n  rdna1\\-patch build \\-\\-dry\\-run"),
        "{build}"
    );
    // man itself finds them there.
    let out = std::process::Command::new("man")
        .args(["rdna1-patch-trust"])
        .env("MANPATH", &dir)
        .env("MANPAGER", "cat")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("trusted-keys"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Item 10: on a terminal, `--color never` writes no escape sequence at
/// all: the progress bar, which redraws with them, gives way to plain
/// lines, as on a pipe.
#[test]
fn color_never_on_a_terminal_writes_no_escape_sequence() {
    let sb = Sandbox::new();
    let mut args = vec!["--color".to_owned(), "never".to_owned()];
    args.extend(sb.build_args(&["--prefix", sb.prefix.to_str().unwrap()]));
    let line = std::iter::once(BIN.to_owned())
        .chain(args.iter().map(|a| format!("'{a}'")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut c = std::process::Command::new("script");
    c.args([
        "-qec",
        &format!("stty rows 24 cols 100; {line}"),
        "/dev/null",
    ]);
    sb.env(&mut c);
    let out = Run::from(c.output().unwrap());
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stdout.contains("Finished"), "{}", out.stdout);
    assert!(
        !out.stdout.contains('\u{1b}'),
        "an escape sequence on the terminal: {:?}",
        out.stdout
    );
    // The steps were said, as lines.
    assert!(out.stdout.contains("Build"), "{}", out.stdout);
}

/// Item 10: `--help` says what a command costs in time, disk and
/// download, where that is more than a moment.
#[test]
fn help_says_what_build_install_and_publish_cost() {
    let sb = Sandbox::new();
    // One line, as a paragraph reads.
    let help = |verb: &str| sb.run(&[verb, "--help"]).ok().stdout.replace('\n', " ");
    let build = help("build");
    for said in [
        "40-75 minutes",
        "20 GiB in the work dir",
        "0.4 GiB in the prefix",
        "takes seconds and its download",
    ] {
        assert!(
            build.contains(said),
            "build --help lacks {said:?}:\n{build}"
        );
    }
    let install = help("install");
    assert!(
        install
            .contains("Cost: seconds, and no download. On disk, a backup of torch's libMIOpen.so"),
        "{install}"
    );
    assert!(help("publish").contains("Cost: the prefix, compressed with zstd, is uploaded once"));
}

/// Item 10: `--color always` colours doctor's and verify's status words,
/// even on a pipe; `--color never` and a pipe leave them plain.
#[test]
fn color_always_colours_the_reports_and_never_does_not() {
    let sb = Sandbox::built();
    sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    let doctor = ["doctor", "--need-space", "0"];
    let coloured = sb.run(&[&["--color", "always"], &doctor[..]].concat());
    assert!(
        coloured
            .stdout
            .contains("\u{1b}[1m\u{1b}[32mok\u{1b}[0m    cmake"),
        "{}",
        coloured.stdout
    );
    let verify = sb
        .run_with_state(&["--color", "always", "verify"], &[])
        .ok();
    assert!(
        verify.stdout.contains("\u{1b}[32mok\u{1b}[0m    prefix"),
        "{}",
        verify.stdout
    );
    for args in [&["--color", "never"][..], &[]] {
        let plain = sb.run(&[args, &doctor[..]].concat());
        assert!(
            !plain.stdout.contains('\u{1b}'),
            "{args:?}: {}",
            plain.stdout
        );
    }
}

/// Item 6: README leads to the demo, and the demo's series does not show
/// a patch under the name README says the real series dropped.
#[test]
fn the_demo_is_reachable_from_readme_and_its_series_is_plainly_a_fixture() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains("`cargo xtask demo`"),
        "README names no demo"
    );
    let words = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("`--keep` keeps the sandbox"),
        "nor how to keep it"
    );
    let series = std::fs::read_to_string(fixtures().join("series/miopen-mini/series")).unwrap();
    let page = std::fs::read_to_string(root.join("docs/patches.md")).unwrap();
    assert!(page.contains("There is no 0002 any more"));
    assert!(!series.contains("0002-handlehip-host-alloc"), "{series}");
    let p = std::fs::read_to_string(
        fixtures().join("series/miopen-mini/0002-fixture-host-alloc.patch"),
    )
    .unwrap();
    assert!(
        p.contains("Subject: [PATCH] handlehip: host-memory fallback (a fixture; no real patch)")
    );
}

/// Item 10: a dry run says what the run would cost: a build's time and
/// disk, a pull's download and size on disk.
#[test]
fn a_dry_run_says_what_the_build_or_the_pull_costs() {
    let (_publisher, dir, _tagged, user) = crate::shared::published_layout();
    let run = user.sb.build(&["--dry-run"]).ok();
    let cost = run
        .stdout
        .lines()
        .find(|l| l.starts_with("cost:"))
        .unwrap_or_else(|| panic!("no cost line:\n{}", run.stdout));
    assert_eq!(
        cost,
        format!(
            "cost:      compiling MIOpen takes 40-75 minutes the first time (a no-op rebuild, seconds) and about 20 GiB in {} (`rdna1-patch doctor` checks the space); a published build, if one were found, would take seconds",
            user.sb.work.join("mini/miopen").display()
        )
    );
    let pull = user
        .build(&["--dry-run", "--from", dir.to_str().unwrap()])
        .ok();
    let shared = pull
        .stdout
        .lines()
        .find(|l| l.starts_with("shared:"))
        .unwrap();
    assert!(
        shared.contains(" instead of compiling: ")
            && shared.contains(" to download, ")
            && shared.ends_with(" on disk, seconds"),
        "{shared}"
    );
    assert!(!pull.stdout.contains("cost:"), "{}", pull.stdout);
}
