//! Opt-in: the built-in series against real MIOpen source trees, e.g. ones
//! extracted from the fetched ROCm/MIOpen or simeonschaub/MIOpen:
//! `RDNA1_PATCH_MIOPEN_SRC=/path/to/MIOpen-rocm-6.2.4 cargo test --test e2e -- --ignored miopen`;
//! for the TheRock profile, `RDNA1_PATCH_THEROCK_SRC` names a rocm-libraries
//! checkout's `projects/miopen` at the profile's commit.

use crate::support::Sandbox;

/// `patches check` of `profile`'s series on the tree in `$var`: every patch
/// applies, no define is unknown to the tree, and nothing is written.
fn check(var: &str, profile: &str, patches: &[&str]) {
    let src = std::env::var_os(var)
        .unwrap_or_else(|| panic!("set {var} to a MIOpen source tree for profile {profile}"));
    let src = std::path::PathBuf::from(src);
    let before = crate::support::snapshot(&src.join("src"));
    let sb = Sandbox::new();
    let run = sb
        .run(&[
            "patches",
            "check",
            "--profile",
            profile,
            "--source",
            src.to_str().unwrap(),
        ])
        .ok();
    for name in patches {
        run.prints(&format!("ok       {name}"));
    }
    assert!(!run.stdout.contains("warning"), "{}", run.stdout);
    assert_eq!(
        crate::support::snapshot(&src.join("src")),
        before,
        "check must not write"
    );
}

#[test]
#[ignore = "opt-in: needs RDNA1_PATCH_MIOPEN_SRC, a MIOpen tree at rocm-6.2.4 (ba892564)"]
fn builtin_series_applies_to_real_miopen_6_2_4() {
    check(
        "RDNA1_PATCH_MIOPEN_SRC",
        "rocm-6.2.4",
        &[
            "0001-rdna1-detection.patch",
            "0003-convolution-find-fast-mode.patch",
            "0004-batchnorm-gfx101x.patch",
        ],
    );
}

#[test]
#[ignore = "opt-in: needs RDNA1_PATCH_MIOPEN_631_SRC, a MIOpen tree at rocm-6.3.1 (b0800f61)"]
fn builtin_series_applies_to_real_miopen_6_3_1() {
    check(
        "RDNA1_PATCH_MIOPEN_631_SRC",
        "rocm-6.3.1",
        &[
            "0001-rdna1-detection.patch",
            "0003-convolution-find-fast-mode.patch",
            "0004-batchnorm-gfx101x.patch",
        ],
    );
}

#[test]
#[ignore = "opt-in: needs RDNA1_PATCH_THEROCK_SRC, rocm-libraries' projects/miopen at cd957402 (TheRock 7.14)"]
fn builtin_series_applies_to_rocm_libraries_miopen_therock_7_14() {
    check(
        "RDNA1_PATCH_THEROCK_SRC",
        "therock-7.14",
        &["0004-batchnorm-gfx101x.patch"],
    );
}
