//! Issue 64: README's first screen shows doctor's first lines for a
//! failing torch and for the same torch fixed. `cargo xtask figures`
//! writes that block from the in-place demo; this test runs the same
//! scenario (a native gfx1010 torch whose batch norm fails, an RX 5600
//! XT's topology, Debian's comgr) and holds the block to what the binary
//! prints now, times and dates aside.

use rdna1_testkit::figures;

use crate::in_place::{HIP64, torch_of};
use crate::support::{Sandbox, gpus};

#[test]
fn readmes_answer_is_what_doctor_prints_before_and_after_the_fix() {
    let sb = Sandbox::new();
    // As a user sees them: rows one glance each, as the demo prints them
    // (on 5253d63 the block held `--detail`'s rows, 210 and 258
    // characters, which `rdna1-patch doctor` does not print).
    sb.at_a_glance();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    // As README shows them: no options, so the commands doctor prints
    // carry none (src/shell.rs) and read as README's do.
    let doctor = || sb.run(&["doctor"]);
    let before = doctor().check_fails().stdout;
    sb.run(&["install", "--into-torch"]).ok();
    let after = doctor().ok().stdout;
    let root = sb.root.canonicalize().unwrap().display().to_string();
    let block = figures::answer_block(&before.replace(&root, "~"), &after.replace(&root, "~"));
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let text = std::fs::read_to_string(readme).unwrap();
    let shown = figures::find_answer(&text).expect("README has the answer block");
    assert_eq!(
        figures::steady(shown),
        figures::steady(&block),
        "README's answer block is not what doctor prints: run `cargo xtask figures --only demos`"
    );
    // Each line one glance, a whole command aside.
    for line in shown.lines() {
        assert!(
            rdna1_testkit::besides_commands(line) <= 160,
            "README's answer has a line over a glance:\n{line}"
        );
    }
    // The first screen: the block starts within README's first 40 lines.
    let at = text.find(figures::ANSWER_START).unwrap();
    assert!(
        text[..at].lines().count() < 40,
        "the answer is below the first screen"
    );
    // First contact's cap (issue 61), which the answer's block counts in.
    let lines = text.lines().count();
    assert!(lines < 250, "README is {lines} lines, over 250");
}
