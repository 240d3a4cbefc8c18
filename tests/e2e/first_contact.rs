//! What a new user hits first (issue 24): errors said once, with a help
//! line; a target that is not RDNA1 named.

use crate::support::Sandbox;

#[test]
fn first_errors_are_said_once_with_what_to_do() {
    let sb = Sandbox::new();
    sb.run(&["patches", "check", "--source", "/nonexistent-src"])
        .fails_with(
            r#"error: there is no directory /nonexistent-src
help: --source names a MIOpen source tree (a checkout of the profile's tag)"#,
        )
        .error_is("error: there is no directory /nonexistent-src\nhelp: --source names a MIOpen source tree (a checkout of the profile's tag)");
    let builtins = "rocm-6.2.4, rocm-6.3.1, rocm-6.4.3, rocm-7.2, therock-7.14";
    sb.run(&["status", "--profile", "nope.toml"])
        .fails_with(
            r#"error: there is no profile file nope.toml
help: give the path of a profile file, or a built-in profile's name (rocm-6.2.4, rocm-6.3.1, rocm-6.4.3, rocm-7.2, therock-7.14)"#,
        )
        .error_is(&format!("error: there is no profile file nope.toml\nhelp: give the path of a profile file, or a built-in profile's name ({builtins})"));
    sb.run(&["profiles", "show", "rocm-9"])
        .fails_with(
            r#"error: no built-in profile named `rocm-9`
help: built-in profiles: rocm-6.2.4, rocm-6.3.1, rocm-6.4.3, rocm-7.2, therock-7.14"#,
        )
        .error_is(&format!(
            "error: no built-in profile named `rocm-9`\nhelp: built-in profiles: {builtins}"
        ));
}

#[test]
fn a_gpu_target_that_is_not_rdna1_is_named() {
    let sb = Sandbox::new();
    sb.build(&["--dry-run", "--gpu-targets", "gfx9999,gfx1010"])
        .ok()
        .prints("targets:   gfx9999;gfx1010 (--gpu-targets); gfx9999 is not RDNA1 (gfx1010, gfx1011, gfx1012): check the name");
    let run = sb
        .build(&["--dry-run", "--gpu-targets", "gfx1010,gfx1012"])
        .ok();
    assert!(!run.stdout.contains("not RDNA1"), "{}", run.stdout);
}

/// What bash offers for the words typed, through the script the binary
/// prints, in a real bash.
pub(crate) fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = std::process::Command::new(crate::support::BIN)
        .args(["completions", "bash"])
        .output()
        .unwrap()
        .stdout;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rdna1-patch.bash");
    std::fs::write(&path, script).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let cmd = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _rdna1__patch rdna1-patch '{}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        quoted.join(" "),
        words[cword]
    );
    let out = rdna1_testkit::run(std::process::Command::new("bash").args(["--norc", "-c", &cmd]));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_nested_verbs_and_flag_values_but_not_hidden_flags() {
    assert_eq!(
        bash_completes(&["rdna1-patch", "build", "--pro"]),
        ["--profile"]
    );
    assert_eq!(bash_completes(&["rdna1-patch", "profiles", "s"]), ["show"]);
    assert_eq!(
        bash_completes(&["rdna1-patch", "build", "--stop-after", ""]),
        ["fetch", "patch", "configure", "build", "install"]
    );
    assert!(bash_completes(&["rdna1-patch", "build", "--sys"]).is_empty());
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = std::process::Command::new(crate::support::BIN)
            .args(["completions", shell])
            .output()
            .unwrap()
            .stdout;
        let text = String::from_utf8(script).unwrap();
        assert!(!text.is_empty());
        // The GPU test hook is an environment variable, never an option.
        assert!(!text.contains("sysfs"), "{shell} offers a test hook");
    }
}

/// stdout and stderr of the binary run on a pseudo-terminal (`script`), so
/// that colour is what a person would see.
fn on_a_terminal(args: &str) -> String {
    let out = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} {args}", crate::support::BIN),
            "/dev/null",
        ])
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("script (util-linux) runs the binary on a pty");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn color_never_holds_for_the_parsers_own_errors_and_help() {
    // On a terminal the parser's error is coloured...
    assert!(on_a_terminal("build --bogus").contains('\u{1b}'));
    // ...and --color never, in either spelling and place, turns it off.
    for args in [
        "--color never build --bogus",
        "build --bogus --color=never",
        "build --color never --help",
    ] {
        let text = on_a_terminal(args);
        assert!(!text.is_empty(), "{args}");
        assert!(!text.contains('\u{1b}'), "{args}: {text:?}");
    }
}

/// Every `jq .KEY` in a verb's help names a key its `--json` document has
/// (`status --help` once said `.transactions`, which gave null).
#[test]
fn the_json_keys_the_help_examples_read_exist() {
    let sb = crate::support::Sandbox::built();
    sb.torch(crate::support::TorchKind::Rocm, crate::support::HIP);
    sb.install(&[]).ok();
    let help = sb.run(&["status", "--help"]).ok().stdout;
    let keys: Vec<&str> = help
        .lines()
        .filter_map(|l| l.split("jq .").nth(1))
        .map(|k| k.split_whitespace().next().unwrap())
        .collect();
    assert!(!keys.is_empty(), "{help}");
    let prefix = sb.prefix.display().to_string();
    let json = sb
        .run_with_state(&["status", "--json", "--prefix", &prefix], &[])
        .ok()
        .stdout;
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    for key in keys {
        let value = &doc[key];
        assert!(
            value.as_array().is_some_and(|a| !a.is_empty()),
            "status --json has no non-empty .{key}: {doc}"
        );
    }
}

/// Help fits the terminal: on an 80-column pty no line of any verb's help
/// is wider (it used to break mid-word past 80).
#[test]
fn help_wraps_to_an_80_column_terminal() {
    for verb in [
        "", "build", "install", "rollback", "status", "verify", "doctor", "patches", "profiles",
        "clean",
    ] {
        let out = std::process::Command::new("script")
            .args([
                "-qec",
                &format!(
                    "stty rows 24 cols 80; {} {verb} --help",
                    crate::support::BIN
                ),
                "/dev/null",
            ])
            .env_remove("COLUMNS")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let plain = strip_ansi(&text);
        assert!(plain.lines().count() > 5, "{verb}: {plain}");
        for line in plain.lines() {
            let line = line.trim_end_matches('\r');
            assert!(line.chars().count() <= 80, "{verb} --help: {line:?}");
        }
    }
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn doctor_gives_therocks_route_to_its_sdk() {
    let sb = Sandbox::new();
    let run = sb.run(&[
        "doctor",
        "--profile",
        "therock-7.14",
        "--rocm",
        "/nonexistent/rocm",
        "--need-space",
        "0",
    ]);
    run.prints("FAIL  rocm      no ROCm at /nonexistent/rocm (profile therock-7.14 wants ROCm 7.14.0)")
        .prints("fix: pip install \"rocm[devel]\" in torch's environment, then pass --rocm \"$(python -m rocm_sdk path --root)\"");
    assert!(!run.stdout.contains("amdgpu-install"), "{}", run.stdout);
}

/// Every page the main manual page refers to (rdna1-patch-VERB(1)) exists:
/// `rdna1-patch man VERB` prints it, and man(1) renders it.
#[test]
fn every_verb_the_manual_lists_has_its_own_page() {
    let sb = Sandbox::new();
    let main = sb.run(&["man"]).ok().stdout;
    let verbs: Vec<String> = main
        .split("rdna1\\-patch\\-")
        .skip(1)
        .filter_map(|rest| rest.split_once("(1)").map(|(v, _)| v.to_owned()))
        .collect();
    assert!(verbs.len() >= 10, "{verbs:?}");
    for verb in &verbs {
        let page = sb.run(&["man", verb]).ok().stdout;
        let file = sb.root.join(format!("rdna1-patch-{verb}.1"));
        std::fs::write(&file, page).unwrap();
        let out = std::process::Command::new("man")
            .arg("-l")
            .arg(&file)
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The NAME section names the page (man justifies the line's spaces).
        let name = text.split("NAME").nth(1).unwrap_or_default();
        assert!(
            name.trim_start()
                .starts_with(&format!("rdna1-patch-{verb} ")),
            "{verb}:\n{text}"
        );
    }
    let build = sb.run(&["man", "build"]).ok().stdout;
    assert!(build.contains("gpu\\-targets"), "{build}");
    sb.run(&["man", "nope"]).fails_with(
        r#"error: rdna1-patch has no verb `nope`
help: pages: rdna1-patch man {build,install,rollback,status,verify,doctor,patches,profiles,publish,trust,clean,completions,man,help}"#,
    ).error_is(
        "error: rdna1-patch has no verb `nope`\nhelp: pages: rdna1-patch man {build,[..]}",
    );
}

#[test]
fn a_dry_run_says_the_build_would_stop_for_a_missing_tool() {
    let sb = Sandbox::new();
    let nowhere = sb.root.join("no-rocm");
    let mut args = sb.build_args(&["--dry-run"]);
    let at = args.iter().position(|a| a == "--rocm").unwrap();
    args[at + 1] = nowhere.display().to_string();
    let run = crate::support::Run::from(sb.cmd().args(&args).output().unwrap()).fails_with(
        r#"error: the build would stop before fetching: missing what the build needs: ROCm at [..]/no-rocm
help: install ROCm, or point at it with --rocm DIR; `rdna1-patch doctor[..]` checks everything at once"#,
    );
    // The plan is still printed, and ends with the stop.
    run.prints("configure: cmake")
        .prints("preflight: would stop: see the error below");
    run.says("error: the build would stop before fetching: missing what the build needs:")
        .says(&format!("ROCm at {}", nowhere.display()));
    // With the tools there, it says so and succeeds.
    sb.build(&["--dry-run"])
        .ok()
        .prints("preflight: the tools the build needs are here");
}

#[test]
fn a_usage_error_with_json_still_prints_the_json_error_object() {
    let sb = Sandbox::new();
    let run = sb.run(&["status", "--json", "--bogus"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    let doc: serde_json::Value =
        serde_json::from_str(&run.stdout).expect("a JSON object on stdout");
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["error"]["exit_code"], 2);
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--bogus")
    );
    assert_eq!(
        run.stderr,
        "error: unexpected argument '--bogus' found\nhelp: `rdna1-patch status --help` lists its arguments\n"
    );
    // Help is no error: nothing on stdout but the help.
    let help = sb.run(&["status", "--json", "--help"]);
    assert_eq!(help.code, Some(0));
    assert!(!help.stdout.contains("\"ok\""));
}

#[test]
fn global_flags_sit_under_their_own_heading_in_every_verbs_help() {
    let sb = Sandbox::new();
    for verb in ["build", "install", "verify", "publish"] {
        let help = sb.run(&[verb, "--help"]).ok().stdout;
        let (own, global) = help
            .split_once("\nGlobal options:\n")
            .unwrap_or_else(|| panic!("{verb} --help has no Global options:\n{help}"));
        assert!(
            !own.contains("--quiet") && !own.contains("--color"),
            "{own}"
        );
        assert!(global.contains("-q, --quiet") && global.contains("--color <WHEN>"));
    }
}

#[test]
fn doctor_wraps_its_rows_to_an_80_column_terminal_and_not_a_pipe() {
    let sb = Sandbox::new();
    let nowhere = sb.root.join("no-rocm");
    let args = format!("doctor --rocm {} --color never", nowhere.display());
    let out = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("stty rows 24 cols 80; {} {args}", crate::support::BIN),
            "/dev/null",
        ])
        .env("HOME", &sb.root)
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    let text = strip_ansi(&String::from_utf8_lossy(&out.stdout));
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    assert!(lines.iter().any(|l| l.starts_with("warn  gpu")), "{text}");
    // A command is never broken (a pasted line break would run half of
    // it): one wider than the terminal stands alone on its line, which the
    // terminal folds and copies as one.
    let whole_command = |l: &str| {
        let t = l.trim_start();
        t.starts_with('`') && t.matches('`').count() == 2 && t.len() - t.rfind('`').unwrap() <= 2
    };
    for line in &lines {
        assert!(
            line.chars().count() <= 80 || whole_command(line),
            "{line:?}"
        );
    }
    // A row's continuation sits under its detail column.
    let gpu = lines
        .iter()
        .position(|l| l.starts_with("warn  gpu"))
        .unwrap();
    assert!(lines[gpu + 1].starts_with(&" ".repeat(16)), "{text}");
    // Piped, a row stays one line (for grep).
    let piped = sb.run(&["doctor", "--rocm", nowhere.to_str().unwrap()]);
    assert!(
        piped
            .stdout
            .lines()
            .any(|l| l.starts_with("warn  gpu") && l.len() > 80),
        "{}",
        piped.stdout
    );
}
