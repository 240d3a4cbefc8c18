//! The prefix the in-place fix writes is checked before anything is
//! written: never inside torch, never over the user's finished build.

use crate::in_place::{HIP64, torch_of};
use crate::support::{Sandbox, snapshot};

/// Issue 42, 7: a prefix inside torch would have the fix write torch's own
/// library outside any transaction, with no backup.
#[test]
fn a_prefix_inside_torch_is_refused_before_anything_is_written() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let before = snapshot(&torch.dir);
    for dry in [true, false] {
        let mut args = vec!["install", "--into-torch", "--profile", "rocm-6.4.3"];
        args.extend(["--prefix", torch.dir.to_str().unwrap()]);
        if dry {
            args.push("--dry-run");
        }
        sb.run_with_state(&args, &[]).fails_with(&format!(
            "error: the prefix {0} lies inside {0}: the fix would write torch's own files outside any transaction, with no backup; nothing was changed
help: give --prefix a directory outside torch, or leave it out for the profile's own prefix",
            torch.dir.display()
        ));
    }
    assert_eq!(snapshot(&torch.dir), before);
}

/// Issue 42, 9: `--in-place` over a finished build says so and keeps the
/// build, instead of replacing it without a word.
#[test]
fn the_in_place_fix_never_replaces_a_finished_build() {
    let sb = Sandbox::built();
    torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let before = snapshot(&sb.prefix);
    sb.install(&["--profile", "rocm-6.4.3", "--in-place"])
        .fails_with(&format!(
            "error: {0} holds a build of profile [..] (MIOpen [..] at [..]); the in-place fix would replace it; nothing was changed
help: give the in-place fix its own --prefix DIR (or leave --prefix out), or move that prefix away (`mv {0} {0}.old`) if you no longer want it",
            sb.prefix.display()
        ));
    assert_eq!(snapshot(&sb.prefix), before);
}

/// Issue 61: a prefix the in-place fix made from torch A's library,
/// installed with `--built` into torch B, whose library is another build:
/// the dry run said it would install it (exit 0) and the real run refused
/// with "torch's library changed while it was being fixed (a pip install
/// or upgrade?)". Both now give the one answer, the real reason, before
/// anything is said or written; B is left as it was.
#[test]
fn a_prefix_made_from_another_torch_is_refused_alike_by_dry_and_real_runs() {
    use crate::in_place::torch_in;
    let sb = Sandbox::new();
    let a = torch_in(&sb, "site", "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let b = torch_in(&sb, "site-b", "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let mut other = std::fs::read(b.miopen()).unwrap();
    other.extend_from_slice(b"another build of libMIOpen");
    std::fs::write(b.miopen(), &other).unwrap();
    let prefix = sb.prefix.to_str().unwrap();
    let install = |torch: &rdna1_testkit::FakeTorch, extra: &[&str]| {
        let mut args = vec!["install", "--into-torch", "--profile", "rocm-6.4.3"];
        args.extend([
            "--prefix",
            prefix,
            "--torch-dir",
            torch.dir.to_str().unwrap(),
        ]);
        args.extend(extra);
        sb.run_with_state(&args, &[])
    };
    install(&a, &[]).ok();
    let before = snapshot(&b.dir);
    let want = format!(
        "error: the prefix {prefix} is the in-place fix of another torch's library, {}, not of torch 2.6.0+rocm6.4's {}: it fits only the library it was made from; nothing was changed
help: leave out --built: `rdna1-patch install --into-torch --torch-dir {} --state-dir {} --prefix {prefix} --profile rocm-6.4.3` fixes torch 2.6.0+rocm6.4's own library in place (with --prefix DIR, into a prefix of its own, keeping {prefix} for the other torch)
",
        a.miopen().canonicalize().unwrap().display(),
        b.miopen().canonicalize().unwrap().display(),
        b.dir.display(),
        sb.state(),
    );
    for dry in [true, false] {
        let mut extra = vec!["--built"];
        if dry {
            extra.push("--dry-run");
        }
        let run = install(&b, &extra).fails();
        assert_eq!(
            (run.stdout.as_str(), run.stderr.as_str()),
            ("", want.as_str()),
            "dry run: {dry}"
        );
    }
    assert!(snapshot(&b.dir) == before, "torch B was changed");
    // A's own library replaced since its fix was made (a pip upgrade).
    let sha = |bytes: &[u8]| {
        use std::io::Write;
        let mut c = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(bytes).unwrap();
        let out = c.wait_with_output().unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_owned()
    };
    let mut upgraded = std::fs::read(a.miopen()).unwrap();
    upgraded.extend_from_slice(b"the upgrade");
    let library = a.miopen().canonicalize().unwrap();
    let was = std::fs::read(
        sb.root
            .join("state/backups")
            .read_dir()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    // pip writes a new file and renames it over (the installed one is a
    // hard link of the prefix's).
    let tmp = library.with_extension("upgrade");
    std::fs::write(&tmp, &upgraded).unwrap();
    std::fs::rename(&tmp, &library).unwrap();
    let want = format!(
        "error: the prefix {prefix} is the in-place fix of {} as it was (SHA-256 {}), and that file has changed since (SHA-256 {}: a pip install or upgrade?); nothing was changed
help: leave out --built: `rdna1-patch install --into-torch --torch-dir {} --state-dir {} --prefix {prefix} --profile rocm-6.4.3` fixes the library torch 2.6.0+rocm6.4 has now, in place
",
        library.display(),
        sha(&was),
        sha(&upgraded),
        a.dir.display(),
        sb.state(),
    );
    for dry in [true, false] {
        let mut extra = vec!["--built"];
        if dry {
            extra.push("--dry-run");
        }
        let run = install(&a, &extra).fails();
        assert_eq!(
            (run.stdout.as_str(), run.stderr.as_str()),
            ("", want.as_str()),
            "dry run: {dry}"
        );
    }
    assert_eq!(std::fs::read(&library).unwrap(), upgraded);
}
