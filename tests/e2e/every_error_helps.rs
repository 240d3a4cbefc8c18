//! Every error has a help line (issue 72, item 5): each verb given a file
//! where a directory is expected, a directory that is not there, and a
//! read-only one.

use crate::in_place::torch_with_code;
use crate::support::{Run, Sandbox, Tmpfs};

/// An error (exit 2) ends with its help line (wrapped at a glance, joined
/// back here); any other status is one of the table's.
#[track_caller]
fn helps(run: &Run, what: &str) {
    match run.code {
        Some(0 | 1 | 3) => {}
        Some(2) => {
            let lines = crate::support_run::unwrapped_error(&run.stderr);
            let last = lines.last().map(String::as_str).unwrap_or_default();
            assert!(
                last.starts_with("help: ") && run.stderr.contains("error: "),
                "{what}: an error with no help line:\n{}",
                run.stderr
            );
        }
        other => panic!("{what}: exit {other:?}\n{}", run.stderr),
    }
}

/// The verbs with each option that names a directory, `DIR` in place of
/// its value, `PROFILE` and `ROCM` the fixture's; `build` runs for real
/// with `--work-dir` and `--prefix` (a dry run writes neither).
/// [`every_directory_option_is_tried`] holds this list to `--help`.
const DIR_ARGS: [&[&str]; 29] = [
    &[
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--state-dir",
        "DIR",
    ],
    &[
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--prefix",
        "DIR",
    ],
    &[
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--torch-dir",
        "DIR",
    ],
    &["rollback", "--state-dir", "DIR"],
    &["rollback", "--torch-dir", "DIR"],
    &["status", "--state-dir", "DIR"],
    &["status", "--prefix", "DIR"],
    &["verify", "--state-dir", "DIR"],
    &["verify", "--prefix", "DIR"],
    &["verify", "--torch-dir", "DIR"],
    &["doctor", "--state-dir", "DIR"],
    &["doctor", "--work-dir", "DIR"],
    &["doctor", "--rocm", "DIR"],
    &["doctor", "--torch-dir", "DIR"],
    &["clean", "--work-dir", "DIR"],
    &["clean", "--state-dir", "DIR"],
    &["build", "--dry-run", "--work-dir", "DIR"],
    &["build", "--dry-run", "--prefix", "DIR"],
    &["build", "--dry-run", "--torch-dir", "DIR"],
    &["build", "--dry-run", "--rocm", "DIR"],
    &[
        "build",
        "--dry-run",
        "--profile",
        "PROFILE",
        "--extra-patches",
        "DIR",
    ],
    &[
        "build",
        "--profile",
        "PROFILE",
        "--rocm",
        "ROCM",
        "--work-dir",
        "DIR",
    ],
    &[
        "build",
        "--profile",
        "PROFILE",
        "--rocm",
        "ROCM",
        "--prefix",
        "DIR",
    ],
    &["publish", "--prefix", "DIR", "/nonexistent-layout-dir"],
    &["patches", "check", "--source", "DIR"],
    &[
        "patches",
        "check",
        "--profile",
        "PROFILE",
        "--source",
        "DIR",
        "--extra-patches",
        "DIR",
    ],
    &[
        "patches",
        "refresh",
        "--profile",
        "PROFILE",
        "--source",
        "DIR",
        "0001-rdna1-detection.patch",
    ],
    &["profiles", "export", "rocm-6.4.3", "DIR"],
    &["man", "--install", "DIR"],
];

fn each(sb: &Sandbox, dir: &str, case: &str) {
    let profile = sb.fx.profile.display().to_string();
    let rocm = sb.fx.rocm.display().to_string();
    for args in DIR_ARGS {
        let args: Vec<&str> = args
            .iter()
            .map(|a| match *a {
                "DIR" => dir,
                "PROFILE" => &profile,
                "ROCM" => &rocm,
                a => a,
            })
            .collect();
        let run = sb.run(&args);
        helps(&run, &format!("{} ({case})", args.join(" ")));
    }
}

/// Every option of every verb whose value is a directory (`<DIR>` in its
/// `--help`, `[<DIR>]` for `man --install`), and every `<DIR>` argument,
/// is in [`DIR_ARGS`]: a verb that gains one is tried too.
#[test]
fn every_directory_option_is_tried() {
    let sb = Sandbox::new();
    let help = |verb: &[&str]| {
        let mut args = verb.to_vec();
        args.push("--help");
        sb.run(&args).ok().stdout
    };
    let commands = |text: &str| -> Vec<String> {
        text.split("\nCommands:\n")
            .nth(1)
            .unwrap_or_default()
            .lines()
            .take_while(|l| !l.is_empty())
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|v| *v != "help")
            .map(str::to_owned)
            .collect()
    };
    let mut wanted = Vec::new();
    for verb in commands(&help(&[])) {
        let text = help(&[&verb]);
        let subs = commands(&text);
        let paths: Vec<Vec<String>> = match subs.is_empty() {
            true => vec![vec![verb.clone()]],
            false => subs.iter().map(|s| vec![verb.clone(), s.clone()]).collect(),
        };
        for path in paths {
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            let text = help(&words);
            let usage = text
                .lines()
                .find(|l| l.starts_with("Usage:"))
                .unwrap_or_default();
            let mut takes: Vec<String> = text
                .lines()
                .filter_map(|l| {
                    let l = l.trim_start();
                    let (opt, rest) = l.split_once(' ')?;
                    let opt = opt.trim_end_matches(',');
                    let dir = rest.starts_with("<DIR>") || rest.starts_with("[<DIR>]");
                    (opt.starts_with("--") && dir).then(|| opt.to_owned())
                })
                .collect();
            let words: Vec<&str> = usage.split_whitespace().collect();
            if words
                .windows(2)
                .any(|w| w[1] == "<DIR>" && !w[0].starts_with("--"))
            {
                takes.push("<DIR>".to_owned());
            }
            for opt in takes {
                wanted.push((path.join(" "), opt));
            }
        }
    }
    assert!(wanted.len() >= 20, "{wanted:?}");
    let tried = |verb: &str, opt: &str| {
        DIR_ARGS.iter().any(|args| {
            let starts = args.join(" ").starts_with(verb);
            let named = match opt {
                "<DIR>" => args.last() == Some(&"DIR") && !args[args.len() - 2].starts_with("--"),
                opt => args.windows(2).any(|w| w[0] == opt && w[1] == "DIR"),
            };
            starts && named
        })
    };
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(verb, opt)| !tried(verb, opt))
        .map(|(verb, opt)| format!("{verb} {opt}"))
        .collect();
    assert!(missing.is_empty(), "not tried: {missing:?}");
}

/// On 84ed257 `status`, `rollback` and `install` with `--state-dir` a
/// file said "not a directory" and no help.
#[test]
fn a_file_where_a_directory_is_expected_is_said_with_what_to_do() {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    torch_with_code(&sb, &["gfx1010"]);
    let file = sb.root.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    each(&sb, file.to_str().unwrap(), "a file");
    let run = sb.run(&["status", "--state-dir", file.to_str().unwrap()]);
    run.error_is(&format!(
        "error: cannot read {0}/transactions: not a directory\nhelp: {0} is a file where a directory is expected: name a directory (or one to be made) instead, or move the file away",
        file.display()
    ));
}

/// A directory that is not there: made where it is made, else said.
/// `--torch-dir /nonexistent` says it does not exist (on 84ed257: "it has
/// no version.py").
#[test]
fn a_missing_directory_is_said_as_missing() {
    let sb = Sandbox::new();
    let missing = sb.root.join("not-there");
    each(&sb, missing.to_str().unwrap(), "missing");
    for verb in [&["install", "--into-torch"][..], &["rollback"], &["verify"]] {
        let args: Vec<&str> = verb
            .iter()
            .copied()
            .chain(["--torch-dir", "/nonexistent"])
            .collect();
        sb.run(&args)
            .fails()
            .says("--torch-dir /nonexistent does not exist");
    }
}

#[test]
fn a_read_only_directory_is_said_with_what_to_do() {
    let sb = Sandbox::new();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    torch_with_code(&sb, &["gfx1010"]);
    let ro = sb.root.join("ro");
    let Some(_mount) = Tmpfs::read_only(&ro) else {
        return;
    };
    each(&sb, ro.to_str().unwrap(), "read-only");
}

/// Debian 12's ROCm 5.2 has no libroctracer-dev: `build rocblas` names the
/// ROCm release first, as `build miopen` does (on 84ed257 it said to
/// install libroctracer-dev, which Debian 12 does not have).
#[test]
fn a_rocm_no_profile_is_for_is_named_before_a_package_it_lacks() {
    let sb = Sandbox::new();
    let rocm = sb.root.join("usr");
    rdna1_testkit::copy_dir(&sb.rocm, &rocm);
    std::fs::create_dir_all(rocm.join(".info")).unwrap();
    std::fs::write(rocm.join(".info/version"), "5.2.3\n").unwrap();
    let _ = std::fs::remove_file(rocm.join("include/roctracer/roctx.h"));
    let r = rocm.to_str().unwrap();
    for component in ["miopen", "rocblas"] {
        let run = sb.run(&[
            "build",
            component,
            "--profile",
            "rocm-6.4.3",
            "--rocm",
            r,
            "--dry-run",
        ]);
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(
            all.contains("no profile is for ROCm 5.2") && !all.contains("libroctracer-dev"),
            "build {component}:\n{all}"
        );
    }
}
