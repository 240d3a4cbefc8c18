//! Where the clone lies changes no result (issue 73): a row at a glance is
//! cut at 160 characters, so a path of the clone's inside it would move
//! the cut with the clone's length. The sandbox hands the binary its own
//! copy of a fixture tree, under its fixed-length temp dir.

use crate::answer::{SMOKE_WITH_NO_GPU, lines_are};
use crate::in_place::torch_with_code;
use crate::support::{Sandbox, copy_dir, gpus, tempdir};

/// The same glance-shaped run with the fixture tree at two places whose
/// paths differ by more than 40 characters, as two clones' would: the
/// rows are whole to their end, and the same but for the sandbox's own
/// name. On 84ed257 the smoke row was cut inside the path from a clone
/// at a path of 86 characters (`<80 characters>/…/to …`).
#[test]
fn a_row_at_a_glance_is_the_same_wherever_the_fixtures_lie() {
    let outside = tempdir();
    let short = outside.path().join("c/no-gpu");
    let long = outside
        .path()
        .join("a-clone-whose-path-is-long-enough-to-move-a-cut-row/no-gpu");
    assert!(long.as_os_str().len() - short.as_os_str().len() > 40);
    let mut seen = Vec::new();
    for at in [&short, &long] {
        copy_dir(&gpus("no-gpu"), at);
        let sb = Sandbox::new();
        sb.at_a_glance();
        sb.set_gpus(at);
        torch_with_code(&sb, &["gfx1010"]);
        let run = sb.run_with_state(&["verify", "--smoke"], &[]);
        lines_are(&run.stdout, &SMOKE_WITH_NO_GPU);
        let root = sb.root.to_str().unwrap();
        seen.push(run.stdout.replace(root, "<sandbox>"));
    }
    assert_eq!(seen[0], seen[1]);
}
