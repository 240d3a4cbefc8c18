//! `cargo xtask` itself: its usage names every flag a task parses, and the
//! chroot tasks stop first when mmdebstrap is missing.

use std::path::Path;
use std::process::Command;

const XTASK: &str = env!("CARGO_BIN_EXE_xtask");

/// The flags the tasks' parsers match, from the sources: match arms
/// (`"--name" =>`), smoke-cpu's `flag == "--name"` and demo's
/// `*a != "--name"` (other comparisons are of rdna1-patch's own flags).
fn parsed_flags() -> Vec<String> {
    let mut flags = Vec::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.clone()];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for (at, _) in text.match_indices("\"--") {
            let rest = &text[at + 1..];
            let end = rest[1..].find('"').unwrap() + 1;
            let flag = &rest[..end];
            let after = rest[end + 1..].trim_start();
            let before = text[..at].trim_end();
            let parsed =
                after.starts_with("=>") || before.ends_with("flag ==") || before.ends_with("*a !=");
            if parsed
                && flag.len() > 2
                && flag[2..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-')
                && !flags.iter().any(|f| f == flag)
            {
                flags.push(flag.to_owned());
            }
        }
    }
    flags.sort();
    flags
}

#[test]
fn the_usage_lists_every_flag_of_every_task() {
    let flags = parsed_flags();
    for f in [
        "--suite",
        "--release",
        "--full",
        "--keep",
        "--seed",
        "--torch",
    ] {
        assert!(flags.iter().any(|g| g == f), "{f} not found in {flags:?}");
    }
    for args in [&[][..], &["no-such-task"][..]] {
        let out = Command::new(XTASK).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let usage = String::from_utf8(out.stderr).unwrap();
        assert!(usage.starts_with("usage: cargo xtask <task>"), "{usage}");
        let missing: Vec<&String> = flags
            .iter()
            .filter(|f| {
                !usage
                    .split(|c: char| !(c.is_ascii_lowercase() || c == '-'))
                    .any(|w| w == f.as_str())
            })
            .collect();
        assert!(missing.is_empty(), "the usage lacks {missing:?}:\n{usage}");
    }
}

/// `fuzz --target` names every target fuzz/Cargo.toml builds, in the
/// usage and in DEVELOPING.md.
#[test]
fn the_fuzz_usage_names_every_fuzz_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("fuzz/Cargo.toml")).unwrap();
    let bins: Vec<&str> = manifest
        .split("[[bin]]")
        .skip(1)
        .map(|b| {
            let line = b.lines().find(|l| l.starts_with("name = ")).unwrap();
            line.trim_start_matches("name = ").trim_matches('"')
        })
        .collect();
    assert_eq!(bins, ["elf", "pull", "kernels", "catalogue"]);
    let flag = format!("[--target {}]", bins.join("|"));
    let out = Command::new(XTASK).output().unwrap();
    let usage = String::from_utf8(out.stderr).unwrap();
    assert!(usage.contains(&flag), "the usage lacks {flag}:\n{usage}");
    let developing = std::fs::read_to_string(root.join("DEVELOPING.md")).unwrap();
    assert!(
        developing
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(&flag),
        "DEVELOPING.md lacks {flag}"
    );
}

#[test]
fn the_chroot_tasks_need_mmdebstrap_and_say_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    for task in ["rocm-env", "fidelity"] {
        let out = Command::new(XTASK)
            .arg(task)
            .env("PATH", empty.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        // One line, and nothing was run before it.
        assert_eq!(
            stderr,
            format!(
                "xtask: {task} builds a Debian chroot with mmdebstrap, which is not installed: `apt-get install mmdebstrap`, then run this again\n"
            )
        );
    }
}

/// `ci` checks the system packages the suite needs before it builds
/// anything, and names every missing one with the line that installs it.
#[test]
fn ci_names_the_missing_system_packages_first() {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(XTASK)
        .arg("ci")
        .env("PATH", empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines[0],
        "xtask: no dpkg here, so these were not checked (Debian's names; your distribution's may differ): bash-completion, clang-tools-14, libamd-comgr2, libclang-common-15-dev, libamdhip64-5, hipcc, libamdhip64-dev, libssl-dev",
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("xtask: the tests need 24 more system packages: cmake, ninja-build, patchelf, make, g++, git, coreutils,"),
        "{stderr}"
    );
    assert!(lines[1].ends_with(", jq, python3-venv"), "{stderr}");
    assert!(
        lines[2].starts_with(
            "  on Debian 12: sudo apt-get install --no-install-recommends cmake ninja-build "
        ),
        "{stderr}"
    );
    assert_eq!(
        lines[3],
        "  (`bash .ci/run` installs them itself when run as root; .ci/needs says what each is for)"
    );
    assert_eq!(lines.len(), 4, "{stderr}");
}
