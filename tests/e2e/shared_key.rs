//! The build key a shared build is found by: it changes with each input
//! that changes the build (profile, commit, patch, define, GPU targets,
//! ROCm version, compiler).

use crate::support::*;

/// The build key `build --dry-run` prints for this sandbox.
fn key_of(sb: &Sandbox, extra: &[&str]) -> String {
    let run = sb.build(&[&["--dry-run"], extra].concat()).ok();
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("key:"))
        .unwrap_or_else(|| panic!("no key line:\n{}", run.stdout))
        .to_owned();
    line.split_whitespace().nth(1).unwrap().to_owned()
}

/// The key before and after `change`; they must differ, and the same
/// sandbox unchanged must give the same key twice.
fn key_changes(change: impl FnOnce(&Sandbox) -> Vec<String>) {
    let sb = Sandbox::new();
    let before = key_of(&sb, &[]);
    assert_eq!(key_of(&sb, &[]), before, "the key is not stable");
    let extra = change(&sb);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let after = key_of(&sb, &extra);
    assert_ne!(before, after, "the key did not change");
}

#[test]
fn build_key_changes_with_the_profile() {
    key_changes(|sb| {
        sb.write_profile(|t| t.replace("name = \"mini\"", "name = \"mini-b\""));
        vec![]
    });
}

#[test]
fn build_key_changes_with_the_commit() {
    // The same tag, moved to another commit: the lock file records which.
    let sb = Sandbox::new();
    sb.build(&["--stop-after", "fetch"]).ok();
    let before = key_of(&sb, &[]);
    std::fs::write(sb.origin.join("NEWS"), "a later commit\n").unwrap();
    git(&sb.origin, &["add", "NEWS"]);
    git(&sb.origin, &["commit", "-q", "-m", "later"]);
    git(
        &sb.origin,
        &["tag", "-f", "-a", "rocm-6.2.4", "-m", "moved"],
    );
    sb.build(&["--stop-after", "fetch", "--update"]).ok();
    assert_ne!(key_of(&sb, &[]), before);
}

#[test]
fn build_key_changes_with_a_patch() {
    key_changes(|sb| {
        sb.edit_patch("0003-find-fast-mode.patch", "Subject:", "Subject: (edited)");
        vec![]
    });
}

#[test]
fn build_key_changes_with_a_define() {
    key_changes(|_| vec!["-D".into(), "MIOPEN_USE_MLIR=ON".into()]);
}

#[test]
fn build_key_changes_with_the_gpu_targets() {
    key_changes(|_| vec!["--gpu-targets".into(), "gfx1010".into()]);
}

#[test]
fn build_key_changes_with_the_rocm_version() {
    key_changes(|sb| {
        std::fs::write(sb.rocm.join(".info/version"), "6.2.3-1\n").unwrap();
        vec![]
    });
}

#[test]
fn build_key_changes_with_the_compiler() {
    // The same CMAKE_CXX_COMPILER path, another compiler behind it.
    let sb = Sandbox::new();
    let cxx = sb.root.join("cxx");
    let script = |real: &str| {
        std::fs::write(&cxx, format!("#!/bin/sh\nexec {real} \"$@\"\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cxx, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script("g++");
    sb.write_profile(|t| {
        t.replace(
            "[components.miopen.cmake.defines]",
            &format!(
                "[components.miopen.cmake.defines]\nCMAKE_CXX_COMPILER = \"{}\"",
                cxx.display()
            ),
        )
    });
    let before = key_of(&sb, &[]);
    script("clang++");
    assert_ne!(key_of(&sb, &[]), before);
}
