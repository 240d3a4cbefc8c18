//! `build` and `install` without --profile take the profile for the torch
//! they target, say which and why, and refuse a ROCm line with no profile.

use crate::support::{FakeTorch, Run, Sandbox, TorchKind, runtime};

/// `build miopen --dry-run` with no --profile, against python3's torch;
/// to the patch stage, which needs no ROCm here.
fn dry_run(sb: &Sandbox) -> Run {
    sb.run(&[
        "build",
        "miopen",
        "--dry-run",
        "--stop-after",
        "patch",
        "--work-dir",
        sb.work.to_str().unwrap(),
    ])
}

fn bundled(sb: &Sandbox, version: &str, hip: &str) -> FakeTorch {
    FakeTorch::create(
        &sb.root.join("site"),
        runtime(),
        TorchKind::Rocm,
        version,
        hip,
    )
}

#[test]
fn build_picks_the_profile_for_each_torch_line_or_refuses() {
    for (version, hip, profile) in [
        ("2.5.1+rocm6.2", "6.2.41133-dd7f95766", "rocm-6.2.4"),
        ("2.7.1+rocm6.3", "6.3.42131-fa1d09cbd", "rocm-6.3.1"),
        ("2.8.0+rocm6.4", "6.4.43482-0f2d60242", "rocm-6.4.3"),
        ("2.10.0+rocm7.2", "7.2.26015-fc0010cf6", "rocm-7.2"),
    ] {
        let sb = Sandbox::new();
        let t = bundled(&sb, version, hip);
        dry_run(&sb).ok().prints(&format!(
            "profile:   {profile} (built-in), chosen for torch {version} at {} (torch.version.hip {hip}: ROCm {})",
            t.dir.canonicalize().unwrap().display(),
            &hip[..hip.find('.').unwrap() + 2]
        ));
    }
    for (version, hip, line, nearest) in [
        ("2.4.1+rocm6.1", "6.1.40091-a8dbc0c19", "6.1", "rocm-6.2.4"),
        ("2.9.1+rocm7.0", "7.0.51831-a3e329ad8", "7.0", "rocm-7.2"),
    ] {
        let sb = Sandbox::new();
        let t = bundled(&sb, version, hip);
        let run = dry_run(&sb).fails();
        run.error_is(&format!(
            "error: no built-in profile is for torch {version} at {} (torch.version.hip {hip}: ROCm {line}); there are profiles for ROCm 6.2 (rocm-6.2.4), ROCm 6.3 (rocm-6.3.1), ROCm 6.4 (rocm-6.4.3), ROCm 7.2 (rocm-7.2), ROCm 7.14 (therock-7.14)
help: a library built for another ROCm line crashes in this torch, so none is picked for you. [..]`rdna1-patch profiles export {nearest} DIR`, then --profile DIR/{nearest}.toml",
            t.dir.canonicalize().unwrap().display()
        ));
        run.says("pip install \"torch[device-gfx1010]\"");
    }
}

#[test]
fn a_therock_torch_gets_the_therock_profile_and_no_torch_gets_none() {
    let sb = Sandbox::new();
    let sdk = crate::rocm_sdk::multi(&sb, &["gfx1010"]);
    dry_run(&sb).ok().prints(&format!(
        "profile:   therock-7.14 (built-in), chosen for torch 2.11.0+rocm7.14.0 at {} (rocm-sdk 7.14.0: ROCm 7.14)",
        sdk.torch.dir.canonicalize().unwrap().display()
    ));
    // No torch where python3 looks: the torch first, no profile's plan
    // (torch_first.rs has the whole error).
    let sb = Sandbox::new();
    let run = dry_run(&sb).fails();
    run.error_is("error: no ROCm torch to build for: [..]/python3 ([..]) has no torch installed\nhelp: install the torch built for gfx1010 [..]");
    assert_eq!(run.stdout, "");
}

#[test]
fn install_without_a_profile_uses_the_prefix_of_the_torchs_profile() {
    let sb = Sandbox::new();
    bundled(&sb, "2.7.1+rocm6.3", "6.3.42131-fa1d09cbd");
    let data = sb.root.join("xdg-data");
    let out = sb
        .cmd()
        .args(["install", "--into-torch", "--state-dir", &sb.state()])
        .env("XDG_DATA_HOME", &data)
        .output()
        .unwrap();
    let run = Run::from(out).fails_with(
        r#"error: no usable build: [..]/xdg-data/rdna1-patch/rocm-6.3.1 does not exist
help: run `rdna1-patch build miopen` first, or point --prefix at the prefix it installed to"#,
    );
    run.says("Profile rocm-6.3.1 for torch 2.7.1+rocm6.3")
        .says(&format!(
            "{}",
            data.join("rdna1-patch/rocm-6.3.1").display()
        ));
}

/// Issue 46, 5: with --profile named, python's look for torch only gives
/// the Route line, so it runs beside the fetch instead of before it (a
/// pyenv shim's python costs 100 ms a start): a python that waits for the
/// checkout to appear sees it, and the line is still said.
#[test]
fn with_a_named_profile_the_torch_look_runs_beside_the_fetch() {
    let sb = Sandbox::new();
    sb.torch(TorchKind::Rocm, crate::support::HIP);
    let seen = sb.root.join("seen");
    let python = sb.root.join("waiting-python");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\ni=0\nwhile [ $i -lt 100 ] && [ ! -e '{src}' ]; do sleep 0.1; i=$((i+1)); done\n[ -e '{src}' ] && echo yes > '{seen}'\nexec python3 \"$@\"\n",
            src = sb.src().display(),
            seen = seen.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = sb
        .build(&[
            "--stop-after",
            "fetch",
            "--python",
            python.to_str().unwrap(),
        ])
        .ok();
    run.says("Route libtorch_hip.so carries no readable GPU code");
    assert!(
        seen.exists(),
        "python looked for torch before the fetch began:\n{}",
        run.stderr
    );
}
