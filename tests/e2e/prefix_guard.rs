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
