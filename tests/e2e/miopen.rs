//! Opt-in: the built-in series against a real MIOpen checkout.
//! `RDNA1_PATCH_MIOPEN_SRC=/path/to/MIOpen cargo test --test e2e miopen`

use crate::support::Sandbox;

#[test]
fn builtin_series_applies_to_real_miopen() {
    let Some(src) = std::env::var_os("RDNA1_PATCH_MIOPEN_SRC") else {
        eprintln!(
            "skipped: set RDNA1_PATCH_MIOPEN_SRC to a MIOpen checkout at rocm-6.2.x to run this test"
        );
        return;
    };
    let src = std::path::PathBuf::from(src);
    let before = crate::support::snapshot(&src.join("src/hip"));
    let sb = Sandbox::new();
    let run = sb
        .run(&["patches", "check", "--source", src.to_str().unwrap()])
        .ok();
    for name in [
        "0001-rdna1-detection.patch",
        "0002-handlehip-noncoherent-host-fallback.patch",
        "0003-convolution-find-fast-mode.patch",
        "0004-batchnorm-gfx101x.patch",
    ] {
        assert!(
            run.stdout.contains(&format!("ok       {name}")),
            "{}",
            run.stdout
        );
    }
    // The profile's defines are all options MIOpen 3.2.0 reads.
    assert!(!run.stdout.contains("warning"), "{}", run.stdout);
    assert_eq!(
        crate::support::snapshot(&src.join("src/hip")),
        before,
        "check must not write"
    );
}
