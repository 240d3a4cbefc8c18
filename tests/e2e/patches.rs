use crate::support::{Sandbox, copy_dir, fixtures, git};

#[test]
fn list_shows_every_series_with_files_and_markers() {
    let sb = Sandbox::new();
    let run = sb
        .run(&["patches", "list", "--profile", sb.profile.to_str().unwrap()])
        .ok();
    for needle in [
        "mini miopen rocm-6.2.4",
        "0001-rdna1-detection.patch  Add is_gpu_rdna1(), shared by the RDNA1 fixes",
        "files: src/include/miopen/rdna1.hpp",
        "marker: [RDNA1 PATCH] convolution_api: fast find",
    ] {
        assert!(
            run.stdout.contains(needle),
            "missing {needle:?} in:\n{}",
            run.stdout
        );
    }
    // The built-in profiles need no checkout.
    let run = sb.run(&["patches", "list"]).ok();
    assert!(
        run.stdout
            .contains("rocm-6.2.4 miopen rocm-6.2.4 (built-in patches/miopen/rocm-6.2.4)"),
        "{}",
        run.stdout
    );
}

#[test]
fn check_says_whether_a_tree_takes_the_series() {
    let sb = Sandbox::new();
    let tree = sb.root.join("tree");
    copy_dir(&fixtures().join("miopen-mini"), &tree);
    let before = crate::support::snapshot(&tree);
    let check = |sb: &Sandbox| {
        sb.run(&[
            "patches",
            "check",
            "--profile",
            sb.profile.to_str().unwrap(),
            "--source",
            tree.to_str().unwrap(),
        ])
    };
    let run = check(&sb).ok();
    run.prints("ok       0003-find-fast-mode.patch");
    run.prints("3 patches apply cleanly");
    assert_eq!(
        crate::support::snapshot(&tree),
        before,
        "check must not write"
    );

    // Upstream drifted: one patch no longer fits.
    let f = tree.join("src/convolution_api.cpp");
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::write(
        &f,
        text.replace(
            "return miopenStatusBadParm;",
            "return miopenStatusBadParm; // drift",
        ),
    )
    .unwrap();
    let run = check(&sb).check_fails();
    run.error_is("error: patch 0003-find-fast-mode.patch does not apply: src/convolution_api.cpp: hunk #1 (@@ -2,13 +2,28 @@) does not match: its context or removed lines are not in the file (offsets are allowed, fuzz is not)\nhelp: check that --source is a checkout of the profile's tag; to carry the series to this tree, edit the patched checkout and `rdna1-patch patches refresh[..]` the patch that failed");
    // The per-patch picture is on stdout too, not only in --json.
    run.prints("FAILED   0003-find-fast-mode.patch")
        .prints("patches apply to ");
    run.says("patch 0003-find-fast-mode.patch does not apply: src/convolution_api.cpp: hunk #1 (@@ -2,13 +2,28 @@)");
    // The same as JSON, for scripting a port: per patch its status, files and hunks.
    let json = sb
        .run(&[
            "patches",
            "check",
            "--json",
            "--profile",
            sb.profile.to_str().unwrap(),
            "--source",
            tree.to_str().unwrap(),
        ])
        .check_fails();
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["ok"], false);
    let statuses: Vec<(&str, &str)> = v["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("0001-rdna1-detection.patch", "ok"),
            ("0002-fixture-host-alloc.patch", "ok"),
            ("0003-find-fast-mode.patch", "failed"),
        ]
    );
    let p3 = &v["patches"][2];
    assert_eq!(p3["files"][0]["path"], "src/convolution_api.cpp");
    assert_eq!(p3["files"][0]["kind"], "modify");
    assert_eq!(p3["files"][0]["hunks"][0], "@@ -2,13 +2,28 @@");
    assert!(
        p3["error"]
            .as_str()
            .unwrap()
            .contains("hunk #1 (@@ -2,13 +2,28 @@)"),
        "{p3}"
    );
    assert_eq!(v["patches"][0]["files"][0]["kind"], "create");
    assert_eq!(crate::support::snapshot(&tree).len(), before.len());

    // A tree that already has a patch reports it as applied, not as a failure.
    std::fs::write(&f, text).unwrap();
    let hpp = std::fs::read_to_string(sb.series.join("0001-rdna1-detection.patch")).unwrap();
    let body: String = hpp
        .split("+++ b/src/include/miopen/rdna1.hpp\n")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| format!("{}\n", &l[1..]))
        .collect();
    std::fs::write(tree.join("src/include/miopen/rdna1.hpp"), body).unwrap();
    let run = check(&sb).ok();
    assert!(
        run.stdout
            .contains("applied  0001-rdna1-detection.patch (already in the tree)"),
        "{}",
        run.stdout
    );
}

#[test]
fn refresh_rewrites_a_patch_from_the_edited_checkout() {
    let sb = Sandbox::new();
    sb.build(&["--stop-after", "patch"]).ok();
    let src = sb.src();
    // Edit what patch 0002 changed, in the patched checkout.
    let f = src.join("src/hip/handlehip.cpp");
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::write(
        &f,
        text.replace(
            "posix_memalign(&p, 4096, sz)",
            "posix_memalign(&p, 65536, sz)",
        ),
    )
    .unwrap();
    let refresh = || {
        sb.run(&[
            "patches",
            "refresh",
            "0002-fixture-host-alloc.patch",
            "--profile",
            sb.profile.to_str().unwrap(),
            "--source",
            src.to_str().unwrap(),
        ])
        .ok()
    };
    let run = refresh();
    run.prints("refreshed");
    let patch = std::fs::read_to_string(sb.series.join("0002-fixture-host-alloc.patch")).unwrap();
    assert!(
        patch.starts_with("From: rdna1-patch fixture"),
        "header kept:\n{patch}"
    );
    assert!(
        patch.contains("Marker: [RDNA1 PATCH] handlehip: non-coherent host fallback"),
        "{patch}"
    );
    assert!(
        patch.contains("+    if(posix_memalign(&p, 65536, sz) != 0)"),
        "{patch}"
    );

    // Refreshing again changes nothing; the new series builds.
    let run = refresh();
    run.prints("is up to date");
    let run = sb.build(&["--stop-after", "patch"]).ok();
    run.says("no file written");

    // A fresh checkout of the tag takes the refreshed series.
    let fresh = sb.root.join("fresh");
    git(
        &sb.root,
        &[
            "clone",
            "-q",
            "--branch",
            "rocm-6.2.4",
            sb.origin.to_str().unwrap(),
            fresh.to_str().unwrap(),
        ],
    );
    sb.run(&[
        "patches",
        "check",
        "--profile",
        sb.profile.to_str().unwrap(),
        "--source",
        fresh.to_str().unwrap(),
    ])
    .ok();

    // Built-in series cannot be edited in place.
    let run = sb
        .run(&[
            "patches",
            "refresh",
            "x.patch",
            "--profile",
            "rocm-6.2.4",
            "--source",
            src.to_str().unwrap(),
        ])
        .fails_with(
            r#"error: there is no profile file rocm-6.2.4
help: give the path of a profile file, or a built-in profile's name (rocm-6.2.4, rocm-6.3.1, rocm-6.4.3, rocm-7.2, therock-7.14)"#,
        );
    run.says("rocm-6.2.4");
}

/// `rdna1-patch patches list | head -c1`: a stdout closed early ends the run
/// quietly, with status 0, as ripgrep does.
#[test]
fn a_closed_stdout_ends_the_listing_quietly() {
    let sb = Sandbox::new();
    let mut child = sb
        .cmd()
        .args(["patches", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the reading end before the first line is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
}
