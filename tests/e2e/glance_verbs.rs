//! One glance for every verb (issue 72 item 6): what install, `install
//! --dry-run`, rollback, `rollback --list` and build print, and their
//! errors, is at most 160 characters a line besides a whole command
//! (paths lose their middle, a longer line wraps under its message, a
//! command never breaks); `--detail` brings every line back whole. On
//! 5253d63 both tests failed: six lines of `install --dry-run` were over
//! 160 characters here (the "Route would fix ..." line 659), as was
//! `build --dry-run`'s cost line, and no verb but doctor, verify and
//! status took `--detail`.

use crate::support::{Run, Sandbox};

/// The longest line a person reads (`GLANCE` in src/output.rs).
const GLANCE: usize = 160;

/// A line that is a whole command, copied as it is: cmake's configure
/// under build's stage, or the dry run's `configure:` and `build:`.
fn whole_command(line: &str) -> bool {
    let rest = line.trim_start();
    let rest = ["configure:", "build:"]
        .into_iter()
        .find_map(|label| rest.strip_prefix(label))
        .unwrap_or(rest)
        .trim_start();
    rest.starts_with("cmake ") && !rest.contains('`')
}

/// Every line of `run`'s stdout and stderr fits in a glance, a whole
/// command aside; and `run` said something.
#[track_caller]
fn one_glance(what: &str, run: &Run) {
    let out = format!("{}{}", run.stdout, run.stderr);
    assert!(!out.trim().is_empty(), "{what} printed nothing");
    let long: Vec<&str> = out
        .lines()
        .filter(|l| rdna1_testkit::besides_commands(l) > GLANCE && !whole_command(l))
        .collect();
    assert!(
        long.is_empty(),
        "{what}: {} line(s) over {GLANCE} characters:\n{}\nwhole output:\n{out}",
        long.len(),
        long.join("\n")
    );
}

/// The longest line of `run`'s output besides its commands.
fn longest(run: &Run) -> usize {
    format!("{}{}", run.stdout, run.stderr)
        .lines()
        .map(rdna1_testkit::besides_commands)
        .max()
        .unwrap_or(0)
}

/// A state dir and prefix deep under home, as a user's may be, and an RX
/// 5500 XT under a torch whose rocBLAS has no code for it: install plans
/// two steps and fixes MIOpen in place.
#[test]
fn install_rollback_and_build_print_one_glance_and_detail_gives_it_whole() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx5500xt-gfx1012"));
    let home = "home/somebody/a-rather-long-directory-name/and-another-one-below-it";
    let site = format!("{home}/venv/lib/python3.11/site-packages");
    let torch = crate::glance::debian_torch_at(&sb, &site, "2.6.0+rocm6.4");
    let deep = sb.root.join(home);
    let state = deep.join("state").display().to_string();
    let prefix = deep.join("prefix").display().to_string();
    let torch_dir = torch.dir.display().to_string();
    let install = |extra: &[&str]| {
        let mut args = vec!["install", "--into-torch", "--profile", "rocm-6.4.3"];
        args.extend(["--torch-dir", &torch_dir]);
        args.extend(["--state-dir", &state, "--prefix", &prefix]);
        args.extend(extra);
        sb.run(&args).ok()
    };

    let dry = install(&["--dry-run"]);
    one_glance("install --dry-run", &dry);
    // The route's answer, its paths short, wrapped under its message.
    let route = dry
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Route would fix"))
        .unwrap_or_else(|| panic!("{}", dry.stdout));
    assert!(route.contains('…'), "{route}");
    // --detail: every line whole, the prefix's path too.
    let whole = install(&["--dry-run", "--detail"]);
    let route = whole
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Route would fix"))
        .unwrap_or_else(|| panic!("{}", whole.stdout));
    assert!(
        route.contains(&format!(
            "would fix {} in place into {prefix} (",
            torch.miopen().display()
        )) && route.ends_with("then swap it in (dry run: nothing was changed)"),
        "{route}"
    );
    assert!(longest(&whole) > GLANCE, "{}", whole.stderr);
    // -v says all too.
    let verbose = install(&["--dry-run", "-v"]);
    assert!(verbose.stdout.contains(route), "{}", verbose.stdout);

    let run = install(&[]);
    one_glance("install", &run);
    assert!(run.stderr.contains("(transaction 1)"), "{}", run.stderr);

    let list = sb.run(&["rollback", "--list", "--state-dir", &state]).ok();
    one_glance("rollback --list", &list);
    let whole = sb.run(&["rollback", "--list", "--state-dir", &state, "--detail"]);
    assert!(longest(&whole) > GLANCE, "{}", whole.stdout);

    let back = sb.run(&["rollback", "--state-dir", &state]).ok();
    one_glance("rollback", &back);
    assert!(
        back.stderr.contains("Restored transaction 1"),
        "{}",
        back.stderr
    );

    // An error over a glance wraps under its head; --detail prints it whole.
    let file = deep.join("a-file-where-the-state-dir-should-be");
    std::fs::write(&file, "not a state dir").unwrap();
    let file = file.display().to_string();
    let error = sb.run(&["status", "--state-dir", &file]);
    one_glance("status --state-dir FILE", &error);
    let whole = sb.run(&["status", "--state-dir", &file, "--detail"]);
    assert!(
        whole
            .stderr
            .lines()
            .any(|l| l.starts_with("error: ") && l.contains(&file) && l.chars().count() > GLANCE),
        "{}",
        whole.stderr
    );
    error.error_is(&whole.stderr);
}

/// build and `build --dry-run` of the fixture: every line in a glance
/// but cmake's whole commands; `--detail` prints the cost line whole.
#[test]
fn build_prints_one_glance_but_its_whole_commands() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    let dry = sb.build(&["--dry-run"]).ok();
    one_glance("build --dry-run", &dry);
    assert!(
        dry.stdout
            .lines()
            .any(|l| l.starts_with("configure: cmake -S ")),
        "{}",
        dry.stdout
    );
    let run = sb.build(&[]).ok();
    one_glance("build", &run);
    assert!(
        run.stderr
            .lines()
            .any(|l| l.trim_start().starts_with("cmake -S ")),
        "{}",
        run.stderr
    );
    let whole = sb.build(&["--dry-run", "--detail"]).ok();
    let cost = whole
        .stdout
        .lines()
        .find(|l| l.starts_with("cost:"))
        .unwrap_or_else(|| panic!("{}", whole.stdout));
    assert!(cost.ends_with("would take seconds"), "{cost}");
}
