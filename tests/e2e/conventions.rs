//! What a user expects of a command-line tool: a prefix they own, profiles
//! that work as files, the usual global flags, completions and a man page,
//! a way to clean up.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use crate::other_user::{NOBODY, OtherUser, as_root, chown, root_for};
use crate::support::{BIN, HIP, Run, Sandbox, TorchKind};

#[test]
fn a_user_builds_into_a_prefix_they_own_and_another_user_is_told_whose_checkout_it_is() {
    let sb = Sandbox::new();
    sb.write_profile(|t| {
        t.lines()
            .filter(|l| !l.starts_with("prefix ="))
            .collect::<Vec<_>>()
            .join("\n")
    });
    let home = sb.root.join("home");
    std::fs::create_dir(&home).unwrap();
    let user = OtherUser::stage(&sb);
    if as_root() {
        chown(&sb.root, NOBODY);
    }
    let args = sb.build_args(&[]);
    let as_user =
        |args: &[String]| Run::from(user.command(&sb, &home).args(args).output().unwrap());
    let run = as_user(&args).ok();
    let prefix = home.join(".local/share/rdna1-patch/mini");
    let library = prefix.join("lib/libMIOpen.so.1.0.0");
    assert!(library.is_file(), "{}", run.stderr);
    run.says(&format!("Install {}", prefix.display()));
    run.says("Finished miopen rocm-6.2.4 in ");
    run.says("steps in ");
    // The dry run names the same prefix.
    let mut dry = args.clone();
    dry.push("--dry-run".into());
    as_user(&dry)
        .ok()
        .prints(&format!("install:   {}", prefix.display()));
    if !root_for("root reusing another user's checkout") {
        return;
    }
    assert_eq!(std::fs::metadata(&library).unwrap().uid(), NOBODY);
    // Root reusing that user's work dir: an ownership problem, said as one,
    // and the checkout is left alone.
    let run = sb.build(&["--prefix", sb.prefix.to_str().unwrap()]).fails_with(
        r#"error: the cached checkout [..]/work/mini/miopen/src belongs to uid 65534, not to the user running this (uid 0); git will not use another user's repository
help: run rdna1-patch as the user who built it (the default prefix is one that user can write), or give this run its own --work-dir; the checkout is fine, do not delete it"#,
    );
    run.error_is(&format!(
        "error: the cached checkout {} belongs to uid {NOBODY}, not to the user running this (uid 0); git will not use another user's repository
help: run rdna1-patch as the user who built it (the default prefix is one that user can write), or give this run its own --work-dir; the checkout is fine, do not delete it",
        sb.src().display()
    ));
    assert!(sb.src().join(".git").is_dir());
}

/// docs/patches.md's "Profiles as files" commands, run as written: a profile copied
/// with `profiles show` or `profiles export` works as a file.
#[test]
fn the_readme_profile_examples_run() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/patches.md"))
            .unwrap();
    let section = page
        .split("## Profiles as files")
        .nth(1)
        .expect("docs/patches.md has a `## Profiles as files` section");
    let section = section.split("\n## ").next().unwrap();
    let commands: Vec<&str> = section
        .split("```console")
        .skip(1)
        .flat_map(|block| block.split("```").next().unwrap().lines())
        .filter_map(|l| l.strip_prefix("$ "))
        .collect();
    assert!(commands.len() >= 4, "{commands:?}");
    let sb = Sandbox::new();
    let dir = sb.root.join("readme");
    std::fs::create_dir(&dir).unwrap();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = crate::support::path_with(bin_dir);
    for cmd in &commands {
        let mut c = Command::new("sh");
        c.args(["-ec", cmd]).current_dir(&dir).env("PATH", &path);
        let run = Run::from(c.output().unwrap());
        // A dry run on a machine with no ROCm prints its plan and then says
        // the build would stop (exit 2); everything else must succeed.
        let no_rocm = run.code == Some(2)
            && cmd.contains("--dry-run")
            && run.stderr.contains("the build would stop before fetching");
        assert!(
            run.code == Some(0) || no_rocm,
            "`{cmd}` failed\nstdout:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
    }
    // What they did: the copied profile found its built-in series, and the
    // exported one reads its own copy.
    let in_dir = |args: &[&str]| {
        Run::from(
            Command::new(BIN)
                .args(args)
                .current_dir(&dir)
                .output()
                .unwrap(),
        )
    };
    in_dir(&["build", "--profile", "my.toml", "--dry-run"])
        .prints("patches:   3 (built-in patches/miopen/rocm-6.2.4)");
    in_dir(&["patches", "list", "--profile", "mine/rocm-6.2.4.toml"])
        .ok()
        .prints(&format!(
            "({})",
            dir.join("mine/miopen/rocm-6.2.4").display()
        ));
    // Exporting over it again is refused, and writes nothing.
    let again = in_dir(&["profiles", "export", "rocm-6.2.4", "mine"]).fails_with(
        r#"error: mine/rocm-6.2.4.toml already exists
help: export into an empty directory, or move the old profile away; nothing was written"#,
    );
    again.error_is(
        "error: mine/rocm-6.2.4.toml already exists
help: export into an empty directory, or move the old profile away; nothing was written",
    );
}

#[test]
fn completions_and_the_man_page_work() {
    let sb = Sandbox::new();
    let script = sb.run(&["completions", "bash"]).ok().stdout;
    let file = sb.root.join("completion.bash");
    std::fs::write(&file, &script).unwrap();
    // Sourced by a real bash, it completes our verbs.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; f=$(complete -p rdna1-patch | sed -E 's/.*-F ([^ ]+).*/\\1/'); COMP_WORDS=(rdna1-patch ro); COMP_CWORD=1; $f rdna1-patch ro rdna1-patch; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        ))
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        words.lines().any(|w| w == "rollback"),
        "completion of `ro`: {words:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for shell in ["zsh", "fish"] {
        sb.run(&["completions", shell]).ok().prints("rdna1-patch");
    }
    let page = sb.run(&["man"]).ok().stdout;
    let file = sb.root.join("rdna1-patch.1");
    std::fs::write(&file, &page).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // man justifies lines by widening spaces; compare words, not spacing.
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "NAME",
        "rdna1-patch",
        "SUBCOMMANDS",
        "rollback",
        "Exit status: 0 done",
    ] {
        assert!(
            words.contains(needle),
            "{needle} not in the rendered page:\n{text}"
        );
    }
}

#[test]
fn global_flags_version_and_jobs() {
    let sb = Sandbox::new();
    let version = sb.run(&["--version"]).ok().stdout;
    let (_, rest) = version.split_once(" (").expect("a commit in --version");
    assert!(
        rest.len() > 12 && rest[..12].chars().all(|c| c.is_ascii_hexdigit()),
        "{version}"
    );
    sb.run(&["build", "-j", "0"])
        .fails_with(
            r#"error: invalid value '0' for '--jobs <JOBS>': 0 is not in 1..=4294967295
help: `rdna1-patch build --help` lists its arguments"#,
        )
        .says("invalid value '0' for '--jobs <JOBS>'");
    sb.run(&["status", "--verbose", "--quiet"]).fails_with(
        r#"error: the argument '--verbose' cannot be used with '--quiet'
help: `rdna1-patch status --help` lists its arguments"#,
    );
    for verb in [
        "build", "install", "rollback", "status", "verify", "doctor", "patches", "profiles",
        "clean",
    ] {
        sb.run(&[verb, "--help"])
            .ok()
            .prints("Examples:\n  rdna1-patch ");
    }
    // ROCM_PATH is the default ROCm, ahead of the profile's (the build's
    // rows, which say it, are shown with --all where no torch is).
    let run = Run::from(
        sb.cmd()
            .args(["doctor", "--detail", "--all", "--need-space", "0"])
            .env("ROCM_PATH", "/nonexistent/rocm-from-env")
            .output()
            .unwrap(),
    );
    run.prints("no ROCm at /nonexistent/rocm-from-env");
    // A build that stopped before its install (as one that failed there
    // does) is finished by running it again: only the install runs.
    sb.build(&["--stop-after", "build"]).ok();
    let run = sb.build(&[]).ok();
    run.says("Build up to date");
    run.says(&format!("Install {}", sb.prefix.display()));
    // -q: warnings and errors only.
    let run = sb.build(&["-q", "--stop-after", "fetch"]).ok();
    assert_eq!(run.stderr, "", "-q printed progress");
    // -v: the build's own output, here what a compiler launcher prints.
    let launcher = sb.root.join("chatty-cc.sh");
    std::fs::write(
        &launcher,
        "#!/bin/sh\necho launcher-says-hello\nexec \"$@\"\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&launcher)
        .status()
        .unwrap();
    let define = format!("CMAKE_CXX_COMPILER_LAUNCHER={}", launcher.display());
    let run = sb.build(&["-v", "-D", &define]).ok();
    run.says("launcher-says-hello");
    let run = sb.build(&["--clean", "-D", &define]).ok();
    assert!(
        !run.stderr.contains("launcher-says-hello"),
        "{}",
        run.stderr
    );
    // Colour: off when not a terminal, on when forced, NO_COLOR wins over auto.
    let esc = |run: &Run| run.stderr.contains('\x1b');
    assert!(!esc(&sb.build(&[]).ok()));
    assert!(esc(&sb.build(&["--color", "always"]).ok()));
    let forced = Run::from(
        sb.cmd()
            .args(sb.build_args(&[]))
            .env("CLICOLOR_FORCE", "1")
            .output()
            .unwrap(),
    );
    assert!(esc(&forced.ok()));
    let both = Run::from(
        sb.cmd()
            .args(sb.build_args(&[]))
            .env("CLICOLOR_FORCE", "1")
            .env("NO_COLOR", "1")
            .output()
            .unwrap(),
    );
    assert!(!esc(&both.ok()));
}

#[test]
fn clean_frees_logs_and_finished_backups_and_keeps_what_a_rollback_needs() {
    let sb = Sandbox::built();
    // Logs from a few runs.
    for _ in 0..3 {
        sb.build(&["--stop-after", "configure"]).ok();
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let logs = sb.work.join("mini/miopen/logs");
    let count = || {
        std::fs::read_dir(&logs)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_file())
            .count()
    };
    assert!(count() >= 3);
    // A finished transaction (its backup is now free) and an installed one.
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    sb.rollback(&[]).ok();
    let backups = Path::new(&sb.state()).join("backups");
    assert_eq!(std::fs::read_dir(&backups).unwrap().count(), 1);
    let state = sb.state();
    let clean = |extra: &[&str]| {
        let mut args = vec![
            "clean",
            "--keep-logs",
            "1",
            "--work-dir",
            sb.work.to_str().unwrap(),
            "--state-dir",
            &state,
        ];
        args.extend(extra);
        sb.run(&args).ok()
    };
    let before = crate::support::snapshot(&sb.root);
    let dry = clean(&["--dry-run"]);
    dry.prints("would remove backup ");
    dry.prints("would remove log ");
    dry.prints("; nothing was changed");
    assert!(
        before == crate::support::snapshot(&sb.root),
        "a dry run changed files"
    );
    clean(&[]).prints("removed backup ");
    assert_eq!(count(), 1);
    assert_eq!(std::fs::read_dir(&backups).unwrap().count(), 0);
    // An installed transaction's backup stays, and rollback still works.
    sb.install(&[]).ok();
    let run = clean(&[]);
    run.prints("removed 0 B in 0 item(s)");
    assert_eq!(std::fs::read_dir(&backups).unwrap().count(), 1);
    sb.rollback(&[]).ok();
    let _ = torch;
    // --builds: the checkout and build dir go; the prefix stays.
    clean(&["--builds"]).prints("removed build dir ");
    assert!(!sb.src().exists());
    assert!(sb.prefix.join("lib/libMIOpen.so.1").exists());
}

/// Every `--json` document has a schema_version; a failure under `--json`
/// is a JSON error object on stdout with the exit status in it.
#[test]
fn the_json_contract() {
    let sb = Sandbox::built();
    sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    let state = sb.state();
    let prefix = sb.prefix.display().to_string();
    let parse = |run: &Run| -> serde_json::Value {
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", run.stdout))
    };
    let docs = [
        sb.run(&[
            "status",
            "--json",
            "--prefix",
            &prefix,
            "--state-dir",
            &state,
        ])
        .ok(),
        sb.run(&["rollback", "--list", "--json", "--state-dir", &state])
            .ok(),
        sb.run(&["patches", "list", "--json"]).ok(),
        sb.run(&["profiles", "list", "--json"]).ok(),
    ];
    for run in &docs {
        assert_eq!(parse(run)["schema_version"], 1, "{}", run.stdout);
    }
    // status: the transaction as a user reads it, modes in octal, no
    // journal bookkeeping.
    let status = parse(&docs[0]);
    let t = &status["installed"][0];
    assert_eq!(t["state"], "installed");
    assert!(
        t["original"]["mode"].as_str().unwrap().starts_with('0'),
        "{t}"
    );
    assert!(t.get("inherits").is_none(), "{t}");
    assert_eq!(parse(&docs[1])["transactions"][0]["id"], 1);
    assert_eq!(parse(&docs[3])["profiles"][0]["name"], "rocm-6.2.4");
    // A failure: the error object, exit 2, and the message on stderr too.
    let run = sb.run(&["status", "--json", "--profile", "no-such-profile"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    let err = parse(&run);
    assert_eq!(err["ok"], false);
    assert_eq!(err["error"]["exit_code"], 2);
    assert_eq!(
        err["error"]["message"],
        "no built-in profile named `no-such-profile`"
    );
    assert!(
        err["error"]["help"]
            .as_str()
            .unwrap()
            .contains("rocm-6.2.4")
    );
    run.says("error: no built-in profile named `no-such-profile`");
    // doctor: a failed probe's help is the check's fix, not text in its detail.
    let doctor = sb
        .run(&[
            "doctor",
            "--json",
            "--python",
            "/nonexistent/python3",
            "--need-space",
            "0",
        ])
        .stdout;
    let doc: serde_json::Value = serde_json::from_str(&doctor).unwrap();
    let torch = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "torch")
        .expect("doctor checks torch");
    assert!(
        !torch["detail"].as_str().unwrap().contains("help:"),
        "{torch}"
    );
}

/// Issue 61: README's completion and man steps, as a plain user in a fresh
/// HOME (/etc/skel's .bashrc, as adduser gives) with the binary where
/// cargo installs it: a new shell completes the verbs and `man` finds the
/// page, with no MANPATH.
#[test]
fn readmes_completion_and_man_steps_work_for_a_fresh_user() {
    if !root_for("a plain user's fresh HOME (setpriv to nobody)") {
        return;
    }
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let steps = readme
        .split_once("Completions and manual pages come from\nthe binary:\n\n```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block.to_owned())
        .expect("README's completion and man steps");
    let sb = Sandbox::new();
    let home = sb.root.join("fresh-home");
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(BIN, bin.join("rdna1-patch")).unwrap();
    std::fs::copy("/etc/skel/.bashrc", home.join(".bashrc")).unwrap();
    chown(&home, NOBODY);
    let user = |program: &str, args: &[&str]| {
        let out = Command::new("setpriv")
            .args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                program,
            ])
            .args(args)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .current_dir(&home)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        Run::from(out)
    };
    let run = user("bash", &["-e", "-c", &steps]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let man1 = home.join(".cargo/share/man/man1");
    // Home is `~` in a line that would be over a glance, the rest as it is.
    let said = |dir: &str| {
        format!(
            " Installed 15 pages into {dir}: man-db finds them for a program on PATH in ../share/man beside its bin (else name the directory in MANPATH)\n"
        )
    };
    let whole = said(&man1.display().to_string());
    let want = match whole.trim_end().chars().count() <= 160 {
        true => whole,
        false => said("~/.cargo/share/man/man1"),
    };
    assert_eq!(run.stderr, want);
    let found = user("man", &["-w", "rdna1-patch", "rdna1-patch-build"]);
    assert_eq!(
        found.stdout,
        format!(
            "{0}/rdna1-patch.1\n{0}/rdna1-patch-build.1\n",
            man1.display()
        ),
        "{}",
        found.stderr
    );
    // A new interactive shell loads the completion when it is first asked.
    let shell = user(
        "bash",
        &[
            "-i",
            "-c",
            "_completion_loader rdna1-patch; complete -p rdna1-patch",
        ],
    );
    assert_eq!(
        shell.stdout, "complete -o bashdefault -o default -o nosort -F _rdna1__patch rdna1-patch\n",
        "{}",
        shell.stderr
    );
}
