//! Issue 43's new-user items: what status and install say of an in-place
//! route is what is true of torch's files.

use crate::in_place::{HIP64, torch_of};
use crate::support::Sandbox;

/// Torch's own library fixed in place is for torch's own ROCm: no warning
/// that "the build is for ROCm 6.4.43484..., torch ...rocm6.4.3 usually
/// works"; and status compares what torch holds with what the journal
/// installed.
#[test]
fn status_sees_a_replaced_library_and_install_warns_of_no_rocm_of_its_own() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4.3", HIP64, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    let run = sb.install(&["--profile", "rocm-6.4.3"]).ok();
    assert!(!run.stderr.contains("usually works"), "{}", run.stderr);
    let status = sb.status().stdout;
    assert!(
        status
            .contains("fixed in place, 2 batch-norm kernels compile for gfx1010, gfx1011, gfx1012"),
        "{status}"
    );
    assert!(!status.contains("not there now"), "{status}");
    // pip reinstalls torch: its own library is back.
    std::fs::remove_file(torch.miopen()).unwrap();
    std::fs::write(torch.miopen(), &original).unwrap();
    // Something replaced the fix: status's answer is no (issue 64).
    let prefix = sb.prefix.display().to_string();
    let status = sb
        .run_with_state(&["status", "--prefix", &prefix], &[])
        .check_fails()
        .stdout;
    assert!(
        status.starts_with("verdict: 1 problem to fix: replaced\n"),
        "{status}"
    );
    assert!(
        crate::support_run::contains(
            &status,
            &format!(
                "but it is not there now (MD5 {}): something replaced it (a pip install?); `rdna1-patch install --into-torch[..]` installs again, `rdna1-patch rollback --abandon 1[..]` closes the transaction",
                rdna1_patch::checksum::md5_file(&torch.miopen()).unwrap()
            )
        ),
        "{status}"
    );
}

/// After a rollback nothing is installed, but the in-place prefix is
/// still there: status and verify name it, not a default profile's prefix
/// that nothing ever used.
#[test]
fn after_a_rollback_status_and_verify_name_the_prefix_that_was_used() {
    let sb = Sandbox::new();
    torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    sb.install(&["--profile", "rocm-6.4.3"]).ok();
    sb.rollback(&[]).ok();
    // Nothing installed now: said, pointing at doctor, exit 3 (issue 72:
    // "no problem found" here hid that the kernels fail again).
    let status = sb.run_with_state(&["status"], &[]);
    assert_eq!(status.code, Some(3), "{}", status.stdout);
    let status = status.stdout;
    let mut lines = status.lines();
    assert!(
        crate::support_run::line_matches(
            "verdict: nothing of rdna1-patch's is installed here: `rdna1-patch doctor[..]` says what this torch needs",
            lines.next().unwrap_or_default()
        ) && lines.next().unwrap_or_default().starts_with(&format!(
            "build:      {} miopen fixed in place",
            sb.prefix.display()
        )),
        "{status}"
    );
    let verify = sb
        .run_with_state(&["verify", "--python", "python3"], &[])
        .stdout;
    assert!(
        verify.contains(&sb.prefix.display().to_string()),
        "{verify}"
    );
}

/// Under HSA_OVERRIDE_GFX_VERSION=10.3.0 MIOpen sees a gfx1030 whatever
/// torch carries: a forced --in-place is refused as inert, saying how to
/// let the fix act; nothing is written.
#[test]
fn a_forced_in_place_fix_under_the_override_is_refused_as_inert() {
    let sb = Sandbox::new();
    let torch = sb.torch(rdna1_testkit::TorchKind::Rocm, crate::support::HIP);
    let mut c = sb.cmd();
    c.args([
        "install",
        "--into-torch",
        "--in-place",
        "--profile",
        "rocm-6.2.4",
    ])
    .args([
        "--prefix",
        sb.prefix.to_str().unwrap(),
        "--state-dir",
        &sb.state(),
    ])
    .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
    crate::support::Run::from(c.output().unwrap()).fails_with(&format!(
        "error: the in-place fix would change nothing for torch {}: HSA_OVERRIDE_GFX_VERSION=10.3.0 is set, so MIOpen compiles its kernels for that chip, not for gfx101x, and batch norm there already works; nothing was changed
help: a torch with gfx101x code needs no override: `unset HSA_OVERRIDE_GFX_VERSION`, then run this again (and run torch without it)",
        "2.5.1+rocm6.2"
    ));
    assert!(!sb.prefix.exists());
    let _ = torch;
}

/// `install --into-torch --dry-run` with no torch in that python said it
/// would install; it now says what the real run says, and names the torch
/// when there is one.
#[test]
fn a_dry_run_with_no_torch_says_what_the_real_run_says() {
    let sb = Sandbox::built();
    for dry in [true, false] {
        let mut args = vec!["--python", "python3"];
        if dry {
            args.push("--dry-run");
        }
        sb.install(&args).fails().says("has no torch installed");
    }
    let torch = sb.torch(rdna1_testkit::TorchKind::Rocm, crate::support::HIP);
    sb.install(&["--dry-run"]).ok().prints(&format!(
        "would install the build in {} into torch 2.5.1+rocm6.2 at {}, as the prefix holds a build of profile mini for ROCm 6.2, torch's line (dry run: nothing was changed)",
        sb.prefix.display(),
        torch.dir.canonicalize().unwrap().display()
    ));
}

/// Issue 46's words: doctor's route row said "profile rocm-6.2.4 is
/// built" of a build nothing had made; it says what would be done.
#[test]
fn the_route_row_says_a_build_would_be_made() {
    let sb = Sandbox::new();
    sb.torch(rdna1_testkit::TorchKind::Rocm, crate::support::HIP);
    let run = sb.run(&["doctor", "--python", "python3", "--need-space", "0"]);
    let row = crate::support::check_row(&run.stdout, "route");
    assert!(
        row.ends_with("profile rocm-6.2.4 would be built (`rdna1-patch build miopen`)"),
        "{row}"
    );
}
