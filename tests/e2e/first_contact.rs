//! What a new user hits first (issue 24): errors said once, with a help
//! line; a target that is not RDNA1 named.

use crate::support::Sandbox;

#[test]
fn first_errors_are_said_once_with_what_to_do() {
    let sb = Sandbox::new();
    sb.run(&["patches", "check", "--source", "/nonexistent-src"])
        .fails()
        .error_is("error: there is no directory /nonexistent-src\nhelp: --source names a MIOpen source tree (a checkout of the profile's tag)");
    let builtins = "rocm-6.2.4, rocm-6.3.1, rocm-6.4.3, rocm-7.2, therock-7.14";
    sb.run(&["status", "--profile", "nope.toml"])
        .fails()
        .error_is(&format!("error: there is no profile file nope.toml\nhelp: give the path of a profile file, or a built-in profile's name ({builtins})"));
    sb.run(&["profiles", "show", "rocm-9"])
        .fails()
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
