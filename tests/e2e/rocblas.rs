//! rocBLAS through the build pipeline, on the rocblas-mini fixture: its
//! source a tarball pinned by SHA-256, Tensile a tagged git origin pinned
//! to its commit, both served through file://; a librocblas.so and Tensile
//! code objects compiled by clang for the card's amdgcn target. What is
//! built is checked before it is installed.

use std::path::Path;

use crate::support::{Run, Sandbox, git, gpus, line_matches, md5sum_c};
use rdna1_testkit::{RocblasFixture, TENSILE_TAG};

/// A sandbox with an RX 5500 XT (gfx1012) and the rocBLAS fixture.
fn sandbox() -> (Sandbox, RocblasFixture) {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5500xt-gfx1012"));
    let rb = RocblasFixture::create(&sb.root.join("rb"));
    (sb, rb)
}

fn build(sb: &Sandbox, rb: &RocblasFixture, extra: &[&str], fault: Option<&str>) -> Run {
    let mut c = sb.cmd();
    // Lines whole (--detail): the tests hold whole lines.
    c.args(rb.build_args()).args(extra).arg("--detail");
    match fault {
        Some(f) => c.env("TENSILE_MINI_FAULT", f),
        None => c.env_remove("TENSILE_MINI_FAULT"),
    };
    Run::from(c.output().unwrap())
}

/// Every line of stderr matches `expected`'s line, `[..]` any text.
#[track_caller]
pub(crate) fn stderr_is(run: &Run, expected: &str) {
    let got: Vec<&str> = run.stderr.lines().collect();
    let want: Vec<&str> = expected.lines().collect();
    let same = got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| line_matches(w, g));
    assert!(
        same,
        "stderr differs\nexpected:\n{}\ngot:\n{}",
        want.join("\n"),
        got.join("\n")
    );
}

#[test]
fn rocblas_builds_for_the_machines_card_and_installs_checked() {
    let (sb, rb) = sandbox();
    let run = build(&sb, &rb, &[], None).ok();
    let tarball_sha = rb.sha256();
    let sha = &tarball_sha[..12];
    let tensile = git(
        &rb.tensile,
        &["rev-parse", &format!("{TENSILE_TAG}^{{commit}}")],
    );
    let tensile = &tensile[..12];
    stderr_is(
        &run,
        &format!(
            "   Targets gfx1012 (the RDNA1 card(s) in the KFD topology; --gpu-targets to choose)
      Cost compiling rocBLAS: its time and disk use are not yet measured; it builds in {work}/rocblas-mini/rocblas
  Fetching file://{tarball} (rocblas_6.4.4.orig.tar.gz sha256 {sha})
           unpacked; its tree is commit [..]
    Source rocblas rocblas_6.4.4.orig.tar.gz sha256 {sha} at [..]
  Fetching file://{origin} rocm-6.4.4
           received [..] objects, [..]; rocm-6.4.4 is {tensile}
    Source tensile rocm-6.4.4 at {tensile}
           no patch series: rocBLAS is built as released
 Configure {work}/rocblas-mini/rocblas/build (cmake [..])
           cmake -S {work}/rocblas-mini/rocblas/src [..] -DGPU_TARGETS=gfx1012 [..] -DTensile_ROOT={work}/rocblas-mini/tensile/src/Tensile [..]
           [1/4] TensileCreateLibrary for gfx1012
           [2/4] Building CXX object CMakeFiles/rocblas.dir/library/src/rocblas_gemm.hip.o
           [3/4] Linking CXX shared library librocblas.so.4.4.1
           [4/4] Creating library symlink librocblas.so.4 librocblas.so
     Build 4 steps in [..], log {work}/rocblas-mini/rocblas/logs/[..]-build.log
   Install {prefix}
   Checked lib/librocblas.so.4: code for gfx1012; lib/rocblas/library: 3 code-object file(s), all for gfx1012; TensileLibrary_lazy_gfx1012.dat and the 4 file(s) it names
 Installed 12 files into {prefix}, checksums written (share/rdna1-patch/MD5SUMS)
  Finished rocblas rocblas_6.4.4.orig.tar.gz sha256 {sha} in [..]",
            work = rb.work.display(),
            tarball = rb.tarball.display(),
            origin = rb.tensile.display(),
            prefix = rb.prefix.display(),
        ),
    );
    let checked = md5sum_c(&rb.prefix);
    let lines: Vec<&str> = checked.lines().collect();
    assert_eq!(
        lines,
        [
            "include/rocblas/rocblas.h: OK",
            "lib/librocblas.so: OK",
            "lib/librocblas.so.4: OK",
            "lib/librocblas.so.4.4.1: OK",
            "lib/rocblas/library/Kernels.so-000-gfx1012.hsaco: OK",
            "lib/rocblas/library/TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1012.co: OK",
            "lib/rocblas/library/TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1012.dat: OK",
            "lib/rocblas/library/TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat: OK",
            "lib/rocblas/library/TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback_gfx1012.hsaco: OK",
            "lib/rocblas/library/TensileLibrary_lazy_gfx1012.dat: OK",
            "share/rdna1-patch/build-key.json: OK",
            "share/rdna1-patch/provenance.toml: OK",
        ],
        "{checked}"
    );
    // The provenance names both sources as pinned, and what they were.
    let prov =
        std::fs::read_to_string(rb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    let section = |name: &str| -> Vec<&str> {
        prov.split(&format!("[{name}]\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no [{name}] in {prov}"))
            .split("\n\n")
            .next()
            .unwrap()
            .lines()
            .collect()
    };
    let unpacked = git(
        &rb.work.join("rocblas-mini/rocblas/src"),
        &["rev-parse", "HEAD"],
    );
    assert_eq!(
        section("source"),
        [
            format!("url = \"file://{}\"", rb.tarball.display()),
            format!("tag = \"rocblas_6.4.4.orig.tar.gz sha256 {sha}\""),
            format!("commit = \"{unpacked}\""),
            format!("sha256 = \"{tarball_sha}\""),
        ]
    );
    let full = git(
        &rb.tensile,
        &["rev-parse", &format!("{TENSILE_TAG}^{{commit}}")],
    );
    assert_eq!(
        section("with.tensile"),
        [
            format!("url = \"file://{}\"", rb.tensile.display()),
            "tag = \"rocm-6.4.4\"".to_owned(),
            format!("commit = \"{full}\""),
        ]
    );
    assert!(prov.contains("\nGPU_TARGETS = \"gfx1012\"\n"), "{prov}");

    // Again: nothing fetched, built or installed; the tarball is not read.
    std::fs::remove_file(&rb.tarball).unwrap();
    let run = build(&sb, &rb, &[], None).ok();
    run.says(&format!(
        "    Source rocblas rocblas_6.4.4.orig.tar.gz sha256 {sha} at {} (cached, no network)\n    Source tensile rocm-6.4.4 at {tensile} (cached, no network)\n",
        &unpacked[..12]
    ));
    run.says(&format!(
        "   Install {} is up to date\n",
        rb.prefix.display()
    ));
}

/// Each way a broken toolchain's Tensile leaves a set that rocBLAS cannot
/// use, exiting 0 all the same, is refused before anything is installed.
fn refused(fault: &str, problem: &str) {
    let (sb, rb) = sandbox();
    let run = build(&sb, &rb, &[], Some(fault)).fails();
    run.error_is(&format!(
        "error: the build's result was refused before install (1 problem(s)): {problem}
help: nothing was installed: {prefix} is as it was. The build dir {work}/rocblas-mini/rocblas/build keeps what was built, and the log is {work}/rocblas-mini/rocblas/logs/[..]-build.log; fix the cause (the targets, the Tensile the profile pins), then build again",
        prefix = rb.prefix.display(),
        work = rb.work.display(),
    ));
    assert!(
        !rb.prefix.exists(),
        "{} was left behind",
        rb.prefix.display()
    );
}

#[test]
fn a_tensile_code_object_for_another_target_is_refused() {
    refused(
        "wrong-target",
        "lib/rocblas/library: code for another target than this build's (gfx1012): TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1012.co holds gfx1030",
    );
}

#[test]
fn a_catalogue_naming_a_missing_code_object_is_refused() {
    refused(
        "missing-file",
        "lib/rocblas/library/TensileLibrary_lazy_gfx1012.dat names 1 file(s) that are not there: TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback_gfx1012.hsaco (named by TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat)",
    );
}

#[test]
fn no_catalogue_is_refused_though_tensile_exited_0() {
    refused(
        "no-catalogue",
        "lib/rocblas/library has no catalogue for gfx1012 (TensileLibrary_lazy_gfx1012.dat, TensileLibrary_gfx1012.dat nor TensileLibrary.dat): Tensile wrote none, whatever its exit status",
    );
}

/// The library's own GPU code must be for the card: built for another
/// (`--gpu-targets`, the profile's own choice) it is refused as well.
#[test]
fn a_library_without_code_for_the_card_is_refused() {
    let (sb, rb) = sandbox();
    // The fixture compiles the library for ROCBLAS_MINI_LIBRARY_TARGETS
    // when set: here the card's target is left out of it.
    let run = build(
        &sb,
        &rb,
        &["-D", "ROCBLAS_MINI_LIBRARY_TARGETS=gfx1010"],
        None,
    )
    .fails();
    run.error_is(&format!(
        "error: the build's result was refused before install (2 problem(s)): lib/librocblas.so.4 has code for gfx1010, not a target of this build (gfx1012); lib/librocblas.so.4 has no code for gfx1012
help: nothing was installed: {prefix} is as it was. The build dir {work}/rocblas-mini/rocblas/build keeps what was built, and the log is {work}/rocblas-mini/rocblas/logs/[..]-build.log; fix the cause (the targets, the Tensile the profile pins), then build again",
        prefix = rb.prefix.display(),
        work = rb.work.display(),
    ));
    assert!(!rb.prefix.exists());
}

#[test]
fn a_changed_tarball_is_refused_before_it_is_unpacked() {
    let (sb, rb) = sandbox();
    let pinned = rb.sha256();
    // The same name, other bytes: what a mirror serving a changed file does.
    let mut bytes = std::fs::read(&rb.tarball).unwrap();
    bytes.extend_from_slice(b"\0");
    std::fs::write(&rb.tarball, &bytes).unwrap();
    let now = rb.sha256();
    build(&sb, &rb, &["--stop-after", "fetch"], None).fails_with(&format!(
        "error: file://{} has SHA-256 {now}, but the profile pins {pinned}
help: the tarball changed where it is served, or the profile is wrong: check it against its origin's published checksum before changing the pin; nothing was unpacked",
        rb.tarball.display()
    ));
    // The checkout's dir is made before the fetch; nothing went into it.
    let src = rb.work.join("rocblas-mini/rocblas/src");
    let unpacked: Vec<_> = std::fs::read_dir(&src).unwrap().collect();
    assert!(unpacked.is_empty(), "{} holds {unpacked:?}", src.display());
    let parts: Vec<_> = std::fs::read_dir(rb.work.join("rocblas-mini/rocblas"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".part") || n.contains("unpacking"))
        .collect();
    assert!(parts.is_empty(), "{parts:?}");
}

#[test]
fn a_moved_tensile_tag_is_refused() {
    let (sb, rb) = sandbox();
    build(&sb, &rb, &["--stop-after", "fetch"], None).ok();
    let pinned = git(
        &rb.tensile,
        &["rev-parse", &format!("{TENSILE_TAG}^{{commit}}")],
    );
    std::fs::write(rb.tensile.join("README.md"), "moved\n").unwrap();
    git(&rb.tensile, &["commit", "-q", "-am", "after the release"]);
    git(
        &rb.tensile,
        &["tag", "-f", "-a", TENSILE_TAG, "-m", "moved"],
    );
    let moved = git(
        &rb.tensile,
        &["rev-parse", &format!("{TENSILE_TAG}^{{commit}}")],
    );
    // A cached checkout is used as is; a fresh fetch sees the move.
    std::fs::remove_dir_all(rb.work.join("rocblas-mini/tensile/src")).unwrap();
    build(&sb, &rb, &["--stop-after", "fetch"], None).fails_with(&format!(
        "error: file://{} tag {TENSILE_TAG} resolved to {moved}, but the profile pins commit {pinned}
help: the tag was moved or the profile is wrong; check upstream before changing the pin",
        rb.tensile.display()
    ));
    assert!(!Path::new(&rb.work.join("rocblas-mini/tensile/src/README.md")).exists());
}

/// rocBLAS links roctx: without its header the build stops before the
/// fetch, naming the file and its package, rather than in the compile.
#[test]
fn a_rocm_without_roctx_is_named_before_the_fetch() {
    let (sb, rb) = sandbox();
    let header = rb.rocm.join("include/roctracer/roctx.h");
    std::fs::remove_file(&header).unwrap();
    build(&sb, &rb, &[], None).fails_with(&format!(
        "error: rocBLAS needs {}, which is not there
help: install libroctracer-dev (Debian's ROCm) or roctracer-dev (AMD's); nothing was fetched or built",
        header.display()
    ));
    assert!(!rb.work.join("rocblas-mini/rocblas/src").exists());
}

/// rocBLAS is in one built-in profile: a build of it under another (the
/// default, with no torch to choose by) names that one.
#[test]
fn a_profile_without_rocblas_names_the_one_with_it() {
    let (sb, rb) = sandbox();
    let run = Run::from(
        sb.cmd()
            .args(["build", "rocblas", "--dry-run", "--work-dir"])
            .arg(&rb.work)
            .output()
            .unwrap(),
    );
    run.fails_with(
        "error: profile rocm-6.2.4 has no component `rocblas`
help: components in this profile: miopen; `rocblas` is in the built-in profile(s) rocm-6.4.3: --profile rocm-6.4.3",
    );
}

/// The route line is MIOpen's way into torch; a rocBLAS build, which goes
/// into no torch yet, says none, with a torch there or not.
#[test]
fn a_rocblas_plan_says_no_miopen_route() {
    let (sb, rb) = sandbox();
    sb.torch(crate::support::TorchKind::Rocm, "6.4.43482-0f2d60242");
    let run = Run::from(
        sb.cmd()
            .args([
                "build",
                "rocblas",
                "--profile",
                "rocm-6.4.3",
                "--dry-run",
                "--detail",
                "--work-dir",
            ])
            .arg(&rb.work)
            .arg("--rocm")
            .arg(&rb.rocm)
            .output()
            .unwrap(),
    )
    .ok();
    let heads: Vec<&str> = run
        .stdout
        .lines()
        .map(|l| l.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(
        heads,
        [
            "profile",
            "source",
            "with",
            "checkout",
            "patches",
            "targets",
            "launcher",
            "configure",
            "build",
            "install",
            "key",
            "shared",
            "cost",
            "stop after",
            "preflight",
            "(dry run",
        ],
        "{}",
        run.stdout
    );
}

/// A ROCm without llvm/bin (Debian's layout): the compiler and Tensile's
/// assembler and bundler all come from HIP's clang dir, which one question
/// to hipconfig names, asked once for both.
#[test]
fn a_rocm_without_llvm_bin_asks_hipconfig_once() {
    let (sb, rb) = sandbox();
    std::fs::remove_dir_all(rb.rocm.join("llvm")).unwrap();
    let clang_dir = rb.root.join("hip-clang");
    std::fs::create_dir_all(&clang_dir).unwrap();
    let asked = rb.root.join("asked");
    let script = |path: &Path, body: &str| {
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script(&clang_dir.join("clang++"), "exec clang++ \"$@\"");
    script(&clang_dir.join("clang-offload-bundler"), "exit 0");
    std::fs::create_dir_all(rb.rocm.join("bin")).unwrap();
    script(
        &rb.rocm.join("bin/hipconfig"),
        &format!(
            "echo \"$@\" >> {}\nprintf %s {}",
            asked.display(),
            clang_dir.display()
        ),
    );
    let run = build(&sb, &rb, &["--dry-run"], None).ok();
    assert_eq!(
        std::fs::read_to_string(&asked).unwrap(),
        "--hipclangpath\n",
        "{}",
        run.stdout
    );
    let c = clang_dir.display();
    run.prints(&format!(
        "compiler:  {}/llvm/bin/amdclang++ is not there; using HIP's clang in {c} (hipconfig --hipclangpath)\n",
        rb.rocm.display()
    ))
    .prints(&format!(
        "tensile:   assembler and offload bundler from HIP's clang in {c} ({} has no llvm/bin, where Tensile looks)\n",
        rb.rocm.display()
    ));
}

/// A profile's measured cost is said before the build, its no-op rebuild
/// too where that is not seconds (rocBLAS's build checks Tensile's
/// generated files each time).
#[test]
fn the_dry_run_says_the_measured_cost_and_a_slow_no_op_rebuild() {
    let (sb, rb) = sandbox();
    rb.write_profile(|t| {
        t.replace(
            "[components.rocblas.with.tensile]",
            "[components.rocblas.cost]\ntime = \"about 35 minutes\"\ndisk = \"about 1.6 GB\"\nrebuild = \"about a minute\"\n\n[components.rocblas.with.tensile]",
        )
    });
    let run = build(&sb, &rb, &["--dry-run"], None).ok();
    run.prints(&format!(
        "cost:      compiling rocBLAS takes about 35 minutes the first time (a no-op rebuild, about a minute) and about 1.6 GB in {} (`rdna1-patch doctor --profile {}` checks the space); a published build, if one were found, would take seconds\n",
        rb.work.join("rocblas-mini/rocblas").display(),
        rb.profile.display()
    ));
}
