//! What a build is made from: the tag or commit it pins, a distribution
//! ROCm's compiler, an extra series, a source URL relative to where the
//! tool runs.

use crate::support::{Sandbox, git};

#[test]
fn a_moved_tag_stops_the_build_unless_updated() {
    let sb = Sandbox::new();
    sb.build(&["--stop-after", "fetch"]).ok();
    let first = git(&sb.origin, &["rev-parse", "rocm-6.2.4^{commit}"]);
    let lock = std::fs::read_to_string(sb.work.join("mini/sources.lock")).unwrap();
    assert!(lock.contains(&first), "{lock}");

    std::fs::write(sb.origin.join("README"), "moved\n").unwrap();
    git(&sb.origin, &["add", "-A"]);
    git(&sb.origin, &["commit", "-q", "-m", "after the release"]);
    git(
        &sb.origin,
        &["tag", "-f", "-a", "rocm-6.2.4", "-m", "moved"],
    );
    let moved = git(&sb.origin, &["rev-parse", "rocm-6.2.4^{commit}"]);

    // A cached checkout is used as is; a fresh fetch sees the move.
    std::fs::remove_dir_all(sb.src()).unwrap();
    let run = sb.build(&["--stop-after", "fetch"]).fails_with(
        r#"error: tag rocm-6.2.4 of [..]/origin now resolves to [..], but [..]/work/mini/sources.lock recorded [..] on the first fetch
help: a moved tag can mean a compromised or rewritten upstream; inspect it, then pass --update to accept the new commit"#,
    );
    run.error_is(&format!(
        "error: tag rocm-6.2.4 of {} now resolves to {moved}, but {} recorded {first} on the first fetch
help: a moved tag can mean a compromised or rewritten upstream; inspect it, then pass --update to accept the new commit",
        sb.origin.display(),
        sb.work.join("mini/sources.lock").display()
    ));
    run.says(&format!("now resolves to {moved}"));
    run.says("--update");
    assert!(
        std::fs::read_to_string(sb.work.join("mini/sources.lock"))
            .unwrap()
            .contains(&first)
    );

    let run = sb.build(&["--stop-after", "fetch", "--update"]).ok();
    run.says("accepting moved tag");
    assert!(
        std::fs::read_to_string(sb.work.join("mini/sources.lock"))
            .unwrap()
            .contains(&moved)
    );
    assert_eq!(git(&sb.src(), &["rev-parse", "HEAD"]), moved);
}

#[test]
fn a_pinned_commit_must_match() {
    let sb = Sandbox::new();
    sb.write_profile(|t| {
        t.replace(
            "tag = \"rocm-6.2.4\"",
            "tag = \"rocm-6.2.4\"\ncommit = \"0123456789abcdef0123456789abcdef01234567\"",
        )
    });
    let run = sb.build(&["--stop-after", "fetch"]).fails_with(
        r#"error: [..]/origin tag rocm-6.2.4 resolved to [..], but the profile pins commit [..]
help: the tag was moved or the profile is wrong; check upstream before changing the pin"#,
    );
    run.says("pins commit 0123456789abcdef");
}

/// A distribution's ROCm has no <rocm>/llvm/bin/amdclang++: the clang that
/// `hipconfig --hipclangpath` names is used, and the plan says so.
#[test]
fn a_distribution_rocm_gets_its_clang_from_hipconfig() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let clang = sb.root.join("llvm-21/bin");
    std::fs::create_dir_all(&clang).unwrap();
    std::fs::create_dir_all(sb.rocm.join("bin")).unwrap();
    let script = |path: std::path::PathBuf, body: String| {
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // Stand-ins for clang that hand the work to the system's gcc.
    script(clang.join("clang++"), "exec g++ \"$@\"".into());
    script(clang.join("clang"), "exec gcc \"$@\"".into());
    script(
        sb.rocm.join("bin/hipconfig"),
        format!(
            "[ \"$1\" = --hipclangpath ] && printf %s '{}'",
            clang.display()
        ),
    );
    sb.write_profile(|t| {
        t.replace(
            "[components.miopen.cmake.defines]\n",
            "[components.miopen.cmake.defines]\nCMAKE_CXX_COMPILER = \"{rocm}/llvm/bin/amdclang++\"\nCMAKE_C_COMPILER = \"{rocm}/llvm/bin/amdclang\"\n",
        )
    });
    let note = format!(
        "{}/llvm/bin/amdclang++ is not there; using HIP's clang in {} (hipconfig --hipclangpath)",
        sb.rocm.display(),
        clang.display()
    );
    sb.build(&["--dry-run"])
        .ok()
        .prints(&format!("compiler:  {note}"));
    // No ccache: it takes a compiler named clang++ for clang and adds
    // clang's -fcolor-diagnostics, which the gcc behind the stand-in rejects.
    let run = sb.build(&["--launcher", "none"]).ok();
    run.says(&format!("  Compiler {note}"));
    let cache = std::fs::read_to_string(sb.work.join("mini/miopen/build/CMakeCache.txt")).unwrap();
    assert!(
        cache.contains(&format!(
            "CMAKE_CXX_COMPILER:STRING={}/clang++",
            clang.display()
        )) || cache.contains(&format!(
            "CMAKE_CXX_COMPILER:FILEPATH={}/clang++",
            clang.display()
        )),
        "{}",
        cache
            .lines()
            .filter(|l| l.starts_with("CMAKE_CXX_COMPILER"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // -D names the compiler: no search.
    let run = sb
        .build(&["--dry-run", "-D", "CMAKE_CXX_COMPILER=/usr/bin/g++"])
        .ok();
    assert!(!run.stdout.contains("compiler:  "), "{}", run.stdout);
}

/// A user's own series (say, fixes for a distribution's newer Boost) goes
/// after the profile's, into provenance; one that does not apply stops the
/// build the usual way, with nothing written.
#[test]
fn an_extra_series_goes_after_the_profiles_and_into_provenance() {
    let sb = Sandbox::new();
    let extra = sb.root.join("extra");
    std::fs::create_dir(&extra).unwrap();
    let rel = "include/miopen/miopen.h";
    let before = std::fs::read_to_string(sb.origin.join(rel)).unwrap();
    let after = format!("{before}// compat: a distribution's newer toolchain\n");
    let diff = rdna1_patch::builder::patch::render_diff(rel, Some(&before), Some(&after));
    std::fs::write(
        extra.join("9001-compat.patch"),
        format!("Subject: [PATCH] compat\n\nFor a newer toolchain.\n---\n{diff}"),
    )
    .unwrap();
    std::fs::write(extra.join("series"), "9001-compat.patch\n").unwrap();
    let run = sb.build(&["--extra-patches", extra.to_str().unwrap()]).ok();
    run.says("     Patch 9001-compat.patch");
    assert_eq!(std::fs::read_to_string(sb.src().join(rel)).unwrap(), after);
    let prov =
        std::fs::read_to_string(sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    assert!(
        prov.contains(&format!(
            "name = \"9001-compat.patch\"\nseries = \"{}\"",
            extra.display()
        )),
        "{prov}"
    );
    // The same from the profile's extra_patches key, relative to the file.
    sb.write_profile(|t| t.replace("soname = ", "extra_patches = \"extra\"\nsoname = "));
    sb.build(&["--dry-run"]).ok().prints(&format!(
        "patches:   4 ({}, then {})",
        sb.series.display(),
        extra.display()
    ));
    // A hunk that no longer fits: the usual error, and nothing written.
    std::fs::write(
        extra.join("9001-compat.patch"),
        format!(
            "Subject: [PATCH] compat\n\n---\n{}",
            rdna1_patch::builder::patch::render_diff(rel, Some("not\nthis\n"), Some("at\nall\n"))
        ),
    )
    .unwrap();
    let snapshot = crate::support::snapshot(&sb.src());
    sb.build(&[])
        .fails_with("error: patch 9001-compat.patch does not apply: include/miopen/miopen.h: hunk #1 (@@ -1,2 +1,2 @@) does not match: its context or removed lines are not in the file (offsets are allowed, fuzz is not)")
        .says("patch 9001-compat.patch does not apply: include/miopen/miopen.h: hunk #1");
    assert_eq!(crate::support::snapshot(&sb.src()), snapshot);
}

#[test]
fn a_relative_url_is_a_path_from_where_the_tool_runs() {
    let sb = Sandbox::new();
    // The sandbox runs the binary in its root, beside `origin`.
    sb.write_profile(|t| t.replace(sb.origin.to_str().unwrap(), "origin"));
    let run = sb.build(&["--stop-after", "patch"]).ok();
    run.says("Fetching origin rocm-6.2.4");
    assert!(sb.src().join("src/hip/handlehip.cpp").is_file());
    sb.build(&["--stop-after", "patch"])
        .ok()
        .says("(cached, no network)");
}
