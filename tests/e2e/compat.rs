//! What a distribution's ROCm needs of a build (issue 26), read from the
//! toolchain's own headers: each need chosen, shown, and turned off by the
//! user. The fake ROCm's include dir stands for Debian's /usr/include.

use crate::support::{Run, Sandbox};

/// A fake ROCm shaped like Debian unstable's: Boost 1.92, a bare half.hpp,
/// comgr 3.
fn debian_like(sb: &Sandbox) {
    let inc = sb.rocm.join("include");
    for (file, text) in [
        (
            "boost/version.hpp",
            // Guarded as the real header is: the guard's name starts with
            // the version's and comes first.
            "#ifndef BOOST_VERSION_HPP\n#define BOOST_VERSION_HPP\n#  define BOOST_VERSION 109200\n#define BOOST_LIB_VERSION \"1_92\"\n#endif\n",
        ),
        (
            "half.hpp",
            "// half: IEEE 754-based half-precision floating point library\n",
        ),
        (
            "amd_comgr/amd_comgr.h",
            "#define AMD_COMGR_INTERFACE_VERSION_MAJOR_MINOR_GUARD\n#define AMD_COMGR_INTERFACE_VERSION_MAJOR 3\n",
        ),
    ] {
        std::fs::create_dir_all(inc.join(file).parent().unwrap()).unwrap();
        std::fs::write(inc.join(file), text).unwrap();
    }
}

fn with_compat(sb: &Sandbox, names: &str) {
    sb.write_profile(|t| {
        t.replace(
            "soname = \"libMIOpen.so.1\"",
            &format!("soname = \"libMIOpen.so.1\"\ncompat = [{names}]"),
        )
    });
}

fn dry(sb: &Sandbox, extra: &[&str]) -> Run {
    let mut args = vec!["--dry-run"];
    args.extend(extra);
    sb.build(&args)
}

#[test]
fn each_need_is_read_from_the_toolchain_and_can_be_turned_off() {
    let sb = Sandbox::new();
    debian_like(&sb);
    with_compat(&sb, "\"boost-1.92\", \"half\"");
    let half_dir = sb.work.join("mini/half-include");
    let run = dry(&sb, &[]).ok();
    run.prints("compat:    boost-1.92: Boost 1.92 -> series compat/boost-1.92 (--no-compat boost-1.92 to leave it out)")
        .prints(&format!(
            "compat:    half: {} (no half/half.hpp beside it) -> -D HALF_INCLUDE_DIR={} (--no-compat half to leave it out)",
            sb.rocm.join("include/half.hpp").display(),
            half_dir.display()
        ))
        .prints("then built-in patches/compat/boost-1.92)")
        .prints(&format!("'-DHALF_INCLUDE_DIR={}'", half_dir.display()));

    let off = dry(&sb, &["--no-compat", "boost-1.92"]).ok();
    assert!(!off.stdout.contains("compat/boost-1.92"), "{}", off.stdout);
    off.prints("compat:    half:");
    let none = dry(&sb, &["--no-compat", "all"]).ok();
    assert!(!none.stdout.contains("compat:"), "{}", none.stdout);
    // A define of the user's wins over the one compat would make.
    let given = dry(&sb, &["-D", "HALF_INCLUDE_DIR=/mine"]).ok();
    assert!(
        !given.stdout.contains("compat:    half"),
        "{}",
        given.stdout
    );
    given.prints("'-DHALF_INCLUDE_DIR=/mine'");
    // A profile that lists nothing gets nothing, whatever the toolchain.
    with_compat(&sb, "");
    assert!(!dry(&sb, &[]).ok().stdout.contains("compat:"));
    sb.build(&["--dry-run", "--no-compat", "fast"]).fails_with(
        r#"error: invalid value 'fast' for '--no-compat <NAME>': expected all or one of boost-1.92, half, comgr-3, comgr-2
help: `rdna1-patch build --help` lists its arguments"#,
    );
}

#[test]
fn a_real_build_makes_the_half_link_and_records_the_define() {
    let sb = Sandbox::new();
    debian_like(&sb);
    with_compat(&sb, "\"half\"");
    let run = sb.build(&[]).ok();
    let half_dir = sb.work.join("mini/half-include");
    run.says(&format!(
        "Compat half: {} (no half/half.hpp beside it) -> -D HALF_INCLUDE_DIR={}",
        sb.rocm.join("include/half.hpp").display(),
        half_dir.display()
    ));
    assert_eq!(
        std::fs::read_link(half_dir.join("half/half.hpp")).unwrap(),
        sb.rocm.join("include/half.hpp")
    );
    // The next run finds its own link there and goes on (it refused the
    // link as a symlink out of the work dir).
    sb.build(&[]).ok().says("Compat half:");
    // Its directory made a symlink out of the work dir is refused, with
    // help about the work dir, not the profile's subdir.
    let elsewhere = sb.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(&half_dir, sb.root.join("half-kept")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &half_dir).unwrap();
    sb.build(&[]).fails_with(
        r#"error: [..]/work/mini/half-include is a symlink (to [..]/elsewhere), so the compat header directory [..]/work/mini/half-include/half would be outside the work dir [..]/work
help: rdna1-patch never writes or builds through a symlink: remove [..]/work/mini/half-include (the work dir is rdna1-patch's own), or pass another --work-dir. Nothing was written"#,
    ).error_is(&format!(
        "error: {half} is a symlink (to {to}), so the compat header directory {dir} would be outside the work dir {work}
help: rdna1-patch never writes or builds through a symlink: remove {half} (the work dir is rdna1-patch's own), or pass another --work-dir. Nothing was written",
        half = half_dir.display(),
        to = elsewhere.display(),
        dir = half_dir.join("half").display(),
        work = sb.work.display()
    ));
    std::fs::remove_file(&half_dir).unwrap();
    std::fs::rename(sb.root.join("half-kept"), &half_dir).unwrap();
    let provenance =
        std::fs::read_to_string(sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    assert!(
        provenance.contains(&format!("HALF_INCLUDE_DIR = \"{}\"", half_dir.display())),
        "{provenance}"
    );
}

#[test]
fn comgr_3_stops_a_release_written_for_comgr_2_before_the_fetch() {
    let sb = Sandbox::new();
    debian_like(&sb);
    with_compat(&sb, "\"comgr-2\"");
    let run = sb.build(&[]).fails_with(
        r#"error: this ROCm's comgr is version 3, and this MIOpen release is written for comgr 2: its src/comgr.cpp uses actions comgr 3 removed, and the build would stop there after most of an hour
help: build a profile whose MIOpen has the comgr 3 port (rocm-6.3.1 and later), or use a ROCm with comgr 2; --no-compat comgr-2 builds anyway. Nothing was changed"#,
    );
    run.error_is("error: this ROCm's comgr is version 3, and this MIOpen release is written for comgr 2: [..]\nhelp: build a profile whose MIOpen has the comgr 3 port (rocm-6.3.1 and later), or use a ROCm with comgr 2; --no-compat comgr-2 builds anyway. Nothing was changed");
    assert!(!sb.work.exists(), "something was made before the stop");
    sb.build(&["--dry-run", "--no-compat", "comgr-2"]).ok();
}

#[test]
fn comgr_3_gets_the_compat_series_that_leaves_out_what_it_removed() {
    let sb = Sandbox::new();
    debian_like(&sb);
    with_compat(&sb, "\"comgr-3\"");
    let run = dry(&sb, &[]).ok();
    run.prints("compat:    comgr-3: COMgr 3 -> series compat/comgr-3 (--no-compat comgr-3 to leave it out)")
        .prints("0001-comgr-3-leave-out-removed-actions.patch")
        .prints("then built-in patches/compat/comgr-3)");
    let off = dry(&sb, &["--no-compat", "comgr-3"]).ok();
    assert!(!off.stdout.contains("comgr-3"), "{}", off.stdout);
    // A comgr 2 toolchain needs nothing.
    std::fs::write(
        sb.rocm.join("include/amd_comgr/amd_comgr.h"),
        "#define AMD_COMGR_INTERFACE_VERSION_MAJOR 2\n",
    )
    .unwrap();
    assert!(!dry(&sb, &[]).ok().stdout.contains("comgr-3"));
}

/// Issue 33, 15: a header that cannot be believed (a FIFO, garbage, a
/// version that does not exist) is an error before anything is fetched,
/// not a silent "needs nothing"; --no-compat leaves the decision out.
#[test]
fn a_header_that_cannot_be_believed_stops_the_build_before_the_fetch() {
    let sb = Sandbox::new();
    debian_like(&sb);
    with_compat(&sb, "\"boost-1.92\", \"comgr-3\"");
    let inc = sb.rocm.join("include");
    let boost = inc.join("boost/version.hpp");
    std::fs::remove_file(&boost).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&boost)
            .status()
            .unwrap()
            .success()
    );
    dry(&sb, &[]).fails_with(
        r#"error: cannot tell what this toolchain needs for compat boost-1.92: [..]/rocm/include/boost/version.hpp cannot be read: [..]/rocm/include/boost/version.hpp is a FIFO, not a regular file
help: fix or reinstall that header, or leave the fix out with --no-compat boost-1.92; nothing was fetched or built"#,
    ).error_is(&format!(
        "error: cannot tell what this toolchain needs for compat boost-1.92: {} cannot be read: [..]
help: fix or reinstall that header, or leave the fix out with --no-compat boost-1.92; nothing was fetched or built",
        boost.display()
    ));
    std::fs::remove_file(&boost).unwrap();
    std::fs::write(&boost, "garbage without the define\n").unwrap();
    dry(&sb, &[]).fails_with(
        r#"error: cannot tell what this toolchain needs for compat boost-1.92: [..]/rocm/include/boost/version.hpp does not define BOOST_VERSION
help: fix or reinstall that header, or leave the fix out with --no-compat boost-1.92; nothing was fetched or built"#,
    ).says(&format!(
        "{} does not define BOOST_VERSION",
        boost.display()
    ));
    std::fs::write(&boost, "#define BOOST_VERSION 109200\n").unwrap();
    let comgr = inc.join("amd_comgr/amd_comgr.h");
    std::fs::write(
        &comgr,
        "#define AMD_COMGR_INTERFACE_VERSION_MAJOR 4294967295\n",
    )
    .unwrap();
    dry(&sb, &[]).fails_with(
        r#"error: cannot tell what this toolchain needs for compat comgr-3: [..]/rocm/include/amd_comgr/amd_comgr.h defines AMD_COMGR_INTERFACE_VERSION_MAJOR as 4294967295, which is no version
help: fix or reinstall that header, or leave the fix out with --no-compat comgr-3; nothing was fetched or built"#,
    ).says(&format!(
        "{} defines AMD_COMGR_INTERFACE_VERSION_MAJOR as 4294967295, which is no version",
        comgr.display()
    ));
    dry(&sb, &["--no-compat", "comgr-3"])
        .ok()
        .prints("compat:    boost-1.92: Boost 1.92");
}
