use crate::support::{Sandbox, contains_bytes, git, md5sum_c, snapshot};

#[test]
fn build_installs_a_prefix_that_md5sum_accepts() {
    let sb = Sandbox::new();
    let run = sb.build(&[]).ok();
    run.says("Installed 6 files");

    let out = md5sum_c(&sb.prefix);
    for f in [
        "lib/libMIOpen.so.1.0.0: OK",
        "lib/libMIOpen.so.1: OK",
        "include/miopen/miopen.h: OK",
        "share/rdna1-patch/build-key.json: OK",
    ] {
        assert!(out.contains(f), "{out}");
    }

    let lib = std::fs::read(sb.prefix.join("lib/libMIOpen.so.1.0.0")).unwrap();
    assert!(contains_bytes(
        &lib,
        "[RDNA1 PATCH] handlehip: non-coherent host fallback"
    ));
    assert!(contains_bytes(
        &lib,
        "[RDNA1 PATCH] convolution_api: fast find"
    ));
    assert_eq!(
        std::fs::read_link(sb.prefix.join("lib/libMIOpen.so.1"))
            .unwrap()
            .to_str(),
        Some("libMIOpen.so.1.0.0")
    );

    let prov =
        std::fs::read_to_string(sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    let commit = git(&sb.origin, &["rev-parse", "rocm-6.2.4^{commit}"]);
    assert!(prov.contains(&format!("commit = \"{commit}\"")), "{prov}");
    assert!(
        prov.contains("name = \"0002-fixture-host-alloc.patch\""),
        "{prov}"
    );
    assert!(prov.contains("MIOPEN_USE_MLIR = \"OFF\""), "{prov}");
    assert!(prov.contains("path = \"lib/libMIOpen.so.1\""), "{prov}");
    assert!(!sb.prefix.join(".rdna1-patch-staging").exists());

    // A log of the run is kept, with the compiler command lines in it.
    let log = std::fs::read_to_string(sb.work.join("mini/miopen/logs/latest.log")).unwrap();
    assert!(log.contains("handlehip.cpp"), "{log}");
}

#[test]
fn second_build_fetches_nothing_writes_nothing_compiles_nothing() {
    let sb = Sandbox::new();
    sb.build(&[]).ok();
    let src_before = snapshot(&sb.src());
    let prefix_before = snapshot(&sb.prefix);
    // No origin any more: any git transfer would fail.
    std::fs::rename(&sb.origin, sb.root.join("origin-gone")).unwrap();

    let run = sb.build(&[]).ok();
    run.says("(cached, no network)");
    run.says("no file written");
    run.says("Configure up to date");
    run.says("Build up to date");
    assert!(run.compiled().is_empty(), "{}", run.stderr);
    run.says("is up to date");
    assert_eq!(
        snapshot(&sb.src()),
        src_before,
        "source files were rewritten"
    );
    assert_eq!(
        snapshot(&sb.prefix),
        prefix_before,
        "prefix files were rewritten"
    );
}

#[test]
fn a_changed_patch_recompiles_only_what_it_touches() {
    let sb = Sandbox::new();
    let first = sb.build(&[]).ok();
    assert_eq!(first.compiled().len(), 4, "{}", first.stderr);
    let handlehip = sb.src().join("src/hip/handlehip.cpp");
    let before = std::fs::metadata(&handlehip).unwrap().modified().unwrap();

    sb.edit_patch(
        "0003-find-fast-mode.patch",
        "+        exhaustiveSearch = 0;\n",
        "+        exhaustiveSearch = 0;\n+        static __attribute__((used)) const char note[] = \"[RDNA1 PATCH] fast find chosen\";\n",
    );
    // The hunk grew by one line.
    sb.edit_patch(
        "0003-find-fast-mode.patch",
        "@@ -2,13 +2,28 @@",
        "@@ -2,13 +2,29 @@",
    );
    let run = sb.build(&[]).ok();
    assert!(
        run.stderr
            .contains("writing 1 file(s): src/convolution_api.cpp"),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.compiled(),
        vec!["convolution_api.cpp.o"],
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::metadata(&handlehip).unwrap().modified().unwrap(),
        before
    );
    let lib = std::fs::read(sb.prefix.join("lib/libMIOpen.so.1.0.0")).unwrap();
    assert!(contains_bytes(&lib, "[RDNA1 PATCH] fast find chosen"));

    // Dropping the patch from the series puts its file back as the tag has it.
    std::fs::write(
        sb.series.join("series"),
        "0001-rdna1-detection.patch\n0002-fixture-host-alloc.patch\n",
    )
    .unwrap();
    let run = sb.build(&[]).ok();
    assert_eq!(
        run.compiled(),
        vec!["convolution_api.cpp.o"],
        "{}",
        run.stderr
    );
    let pristine = git(&sb.src(), &["show", "HEAD:src/convolution_api.cpp"]);
    let now = std::fs::read_to_string(sb.src().join("src/convolution_api.cpp")).unwrap();
    assert_eq!(now.trim_end(), pristine);
}

#[test]
fn a_hunk_that_does_not_apply_changes_nothing() {
    let sb = Sandbox::new();
    sb.build(&["--stop-after", "fetch"]).ok();
    let before = snapshot(&sb.src());
    sb.edit_patch(
        "0002-fixture-host-alloc.patch",
        "-        result = host_malloc(sz);",
        "-        result = host_alloc(sz);",
    );
    let run = sb.build(&["--stop-after", "patch"]).fails_with("error: patch 0002-fixture-host-alloc.patch does not apply: src/hip/handlehip.cpp: hunk #3 (@@ -26,7 +40,7 @@) does not match: its context or removed lines are not in the file (offsets are allowed, fuzz is not)");
    for needle in [
        "0002-fixture-host-alloc.patch",
        "src/hip/handlehip.cpp",
        "hunk #3 (@@ -26,7 +40,7 @@)",
        "fuzz is not",
    ] {
        assert!(
            run.stderr.contains(needle),
            "missing {needle:?} in:\n{}",
            run.stderr
        );
    }
    // Patch 0001 applies, but nothing is written unless the whole series does.
    assert!(!sb.src().join("src/include/miopen/rdna1.hpp").exists());
    assert_eq!(snapshot(&sb.src()), before, "the tree changed");
}

#[test]
fn patches_that_escape_the_tree_are_rejected() {
    let sb = Sandbox::new();
    let evil = "Subject: [PATCH] escape\n\nMarker: [RDNA1 PATCH] x\n---\ndiff --git a/../outside.txt b/../outside.txt\nnew file mode 100644\n--- /dev/null\n+++ b/../outside.txt\n@@ -0,0 +1 @@\n+pwned\n";
    std::fs::write(sb.series.join("0004-evil.patch"), evil).unwrap();
    let series = std::fs::read_to_string(sb.series.join("series")).unwrap();
    std::fs::write(
        sb.series.join("series"),
        format!("{series}0004-evil.patch\n"),
    )
    .unwrap();
    let run = sb.build(&["--stop-after", "patch"]).fails_with(
        r#"error: patch 0004-evil.patch names `../outside.txt`, which is outside the source tree
help: patch paths must be relative to the source root (a/src/..., b/src/...), without `..`"#,
    );
    run.says("0004-evil.patch");
    run.says("outside the source tree");
    assert!(!sb.work.join("mini/miopen/outside.txt").exists());
    // Rejected before the fetch even starts.
    assert!(!sb.src().exists());

    // Through a symlink that the source tree itself carries.
    let sb = Sandbox::new();
    let outside = sb.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, sb.origin.join("src/link")).unwrap();
    git(&sb.origin, &["add", "-A"]);
    git(&sb.origin, &["commit", "-q", "-m", "link"]);
    git(
        &sb.origin,
        &["tag", "-f", "-a", "rocm-6.2.4", "-m", "rocm-6.2.4"],
    );
    let via_link = "Subject: [PATCH] via link\n\n---\ndiff --git a/src/link/x.txt b/src/link/x.txt\nnew file mode 100644\n--- /dev/null\n+++ b/src/link/x.txt\n@@ -0,0 +1 @@\n+pwned\n";
    std::fs::write(sb.series.join("0004-link.patch"), via_link).unwrap();
    std::fs::write(
        sb.series.join("series"),
        format!("{series}0004-link.patch\n"),
    )
    .unwrap();
    let run = sb.build(&["--stop-after", "patch"]).fails_with(
        r#"error: patch 0004-link.patch changes `src/link/x.txt`, but [..]/work/mini/miopen/src/src/link is a symlink, which could point outside the source tree
help: refusing to write through it; replace the symlink with a real file or directory"#,
    );
    run.says("is a symlink");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert!(!sb.src().join("src/include/miopen/rdna1.hpp").exists());
}

#[test]
fn a_bad_profile_is_named_with_line_and_column() {
    let sb = Sandbox::new();
    sb.write_profile(|t| {
        t.replace(
            "build_type = \"Release\"",
            "build_type = \"Release\"\nbuild_typo = \"Debug\"",
        )
    });
    let run = sb.build(&[]).fails_with(
        r#"error: invalid profile [..]/mini.toml: TOML parse error at line 27, column 1
   |
27 | build_typo = "Debug"
   | ^^^^^^^^^^
unknown field `build_typo`, expected one of `generator`, `build_type`, `defines`, `launcher`
help: fix the profile; `rdna1-patch profiles show` prints a valid one to start from"#,
    );
    run.error_is(
        "error: invalid profile [..]/mini.toml: TOML parse error at line 27, column 1
   |
27 | build_typo = \"Debug\"
   | ^^^^^^^^^^
unknown field `build_typo`, expected one of `generator`, `build_type`, `defines`, `launcher`
help: fix the profile; `rdna1-patch profiles show` prints a valid one to start from",
    );
    run.says("mini.toml");
    run.says("line 27, column 1");
    run.says("build_typo");
    assert!(!sb.work.exists());

    let run = sb.run(&["build", "--profile", "no-such-profile"]).fails_with(
        r#"error: no built-in profile named `no-such-profile`
help: built-in profiles: rocm-6.2.4, rocm-6.3.1, rocm-6.4.3, rocm-7.2, therock-7.14; or give a file with --profile path/to/profile.toml"#,
    );
    assert!(
        run.stderr
            .contains("no built-in profile named `no-such-profile`"),
        "{}",
        run.stderr
    );
    run.says("rocm-6.2.4");
}

#[test]
fn a_define_the_project_never_reads_is_warned_about() {
    let sb = Sandbox::new();
    let run = sb
        .build(&[
            "--stop-after",
            "configure",
            "-D",
            "MIOPEN_USE_HIPBLASLT=OFF",
        ])
        .ok();
    run.says("warning: define MIOPEN_USE_HIPBLASLT is not read by any CMake file of miopen at rocm-6.2.4");
    assert!(
        !run.stderr.contains("define MIOPEN_USE_MLIR"),
        "{}",
        run.stderr
    );
    let cache = std::fs::read_to_string(sb.work.join("mini/miopen/build/CMakeCache.txt")).unwrap();
    assert!(
        cache.contains("MIOPEN_USE_MLIR:BOOL=OFF"),
        "profile defines reach CMake"
    );
    assert!(cache.contains("GPU_TARGETS:STRING=gfx1010;gfx1011;gfx1012"));
}

#[test]
fn a_failing_compile_shows_the_log_tail_and_installs_nothing() {
    let sb = Sandbox::new();
    let run = sb
        .build(&["-D", "CMAKE_CXX_FLAGS=-DMIOPEN_MINI_BREAK_BUILD"])
        .fails();
    run.says("the build failed");
    // The failing step itself, however much output other jobs added after it.
    run.says("; the first step that failed:\nFAILED: ");
    run.says("this fixture build fails on purpose");
    run.says("the full log is");
    assert!(!sb.prefix.exists(), "nothing may be installed");
}

#[test]
fn an_unwritable_prefix_is_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let locked = sb.root.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let prefix = locked.join("rocm-miopen-rdna1");
    let args = sb.build_args(&["--prefix", prefix.to_str().unwrap()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = sb.run_unprivileged(&args).fails_with(
        r#"error: cannot write to the install prefix [..]/locked/rocm-miopen-rdna1: [..]/locked is not writable (permission denied)
help: you own [..]/locked, but its mode (555) does not let you write there: `chmod u+w [..]/locked`, or choose another --prefix DIR"#,
    );
    run.error_is(&format!(
        "error: cannot write to the install prefix {0}: {1} is not writable (permission denied)
help: you own {1}, but its mode (555) does not let you write there: `chmod u+w {1}`, or choose another --prefix DIR",
        prefix.display(),
        locked.display()
    ));
    let stderr = run.stderr;
    assert!(
        stderr.contains(&format!(
            "cannot write to the install prefix {}",
            prefix.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("chmod u+w") && stderr.contains("--prefix"),
        "{stderr}"
    );
    assert!(!prefix.exists());
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn dry_run_prints_the_plan_and_changes_nothing() {
    let sb = Sandbox::new();
    let run = sb.build(&["--dry-run", "-D", "MIOPEN_USE_MLIR=ON"]).ok();
    for needle in [
        "tag rocm-6.2.4 commit (resolved on first fetch)",
        "0002-fixture-host-alloc.patch  handlehip: host-memory fallback (a fixture; no real patch)",
        "'-DMIOPEN_USE_MLIR=ON'",
        "-G 'Ninja'",
        &format!("install:   {}", sb.prefix.display()),
    ] {
        assert!(
            run.stdout.contains(needle),
            "missing {needle:?} in:\n{}",
            run.stdout
        );
    }
    assert!(!sb.work.exists());
    assert!(!sb.prefix.exists());
}

#[test]
fn missing_tools_are_reported_before_any_fetch() {
    let sb = Sandbox::new();
    sb.write_profile(|t| {
        t.replace(
            "CMAKE_PREFIX_PATH",
            "CMAKE_CXX_COMPILER = \"/nonexistent/amdclang++\"\nCMAKE_PREFIX_PATH",
        )
    });
    let no_rocm = sb.root.join("no-rocm");
    let mut args = sb.build_args(&[]);
    let at = args.iter().position(|a| a == "--rocm").unwrap();
    args[at + 1] = no_rocm.display().to_string();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = sb.run(&args).fails_with(
        r#"error: missing what the build needs: a C++ compiler (`/nonexistent/amdclang++` is not there), ROCm at [..]/no-rocm
help: name a C++ compiler with the profile's CMAKE_CXX_COMPILER, $CXX or c++ on PATH (ROCm ships amdclang++ in <rocm>/llvm/bin); install ROCm, or point at it with --rocm DIR; `rdna1-patch doctor[..]` checks everything at once"#,
    );
    run.says("/nonexistent/amdclang++");
    assert!(
        run.stderr
            .contains(&format!("ROCm at {}", no_rocm.display())),
        "{}",
        run.stderr
    );
    run.says("--rocm DIR");
    assert!(!sb.src().exists(), "nothing fetched");
}

#[test]
fn make_generator_builds_too() {
    let sb = Sandbox::new();
    let run = sb.build(&["--generator", "make"]).ok();
    assert_eq!(run.compiled().len(), 4, "{}", run.stderr);
    assert!(sb.prefix.join("lib/libMIOpen.so.1.0.0").is_file());
    let cache = std::fs::read_to_string(sb.work.join("mini/miopen/build/CMakeCache.txt")).unwrap();
    assert!(cache.contains("CMAKE_GENERATOR:INTERNAL=Unix Makefiles"));
    // Switching generators on a kept build dir is refused with the fix.
    let run = sb.build(&["--generator", "ninja"]).fails_with(
        r#"error: [..]/work/mini/miopen/build was configured with the Unix Makefiles generator, this build uses Ninja
help: pass --clean to start a fresh build dir"#,
    );
    run.says("--clean");
    sb.build(&["--generator", "ninja", "--clean"]).ok();
}
