//! A newcomer's routes, round three (issue 31), continued: what the tool
//! says and writes for a newcomer (help, the profile table, argument
//! errors, completions, man pages, colour, what a run costs). Each test
//! here failed on the code before it, and names the item it keeps.

use crate::newcomer::row;
use crate::support::*;

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
    c.args(["doctor", "--detail", "--all", "--need-space", "0"])
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
            "cost:      compiling MIOpen takes 40-75 minutes the first time (a no-op rebuild, seconds) and about 20 GiB in {} (`rdna1-patch doctor --profile {}` checks the space); a published build, if one were found, would take seconds",
            user.sb.work.join("mini/miopen").display(),
            user.sb.root.join("mini.toml").display()
        )
    );
    let pull = user
        .build(&["--dry-run", "--detail", "--from", dir.to_str().unwrap()])
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
