//! What a library would load, read from the files and never run: the
//! resolver's answers against the loader's own (`ldd`, run here by the
//! tests on this machine's programs, never by the tool), and a library
//! whose DT_AUDIT names code to run, which no command runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use rdna1_patch::swap::linker::{self, Dep};
use rdna1_testkit::{FakeTorch, TorchKind, fat_library_linking};

use crate::support::{Run, Sandbox, runtime};

/// What the loader itself says `path` loads, in its order: `ldd`'s
/// "name => path" lines (the vDSO and the loader have none).
fn ldd(path: &Path) -> Vec<Dep> {
    let out = rdna1_testkit::run(Command::new("ldd").arg(path));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().split_once(" => "))
        .map(|(name, rest)| Dep {
            name: name.to_owned(),
            path: (!rest.starts_with("not found"))
                .then(|| PathBuf::from(rest.split(" (").next().unwrap())),
        })
        .collect()
}

/// Programs and libraries CI installs (python3, git, cmake, clang with its
/// `$ORIGIN/../lib` RUNPATH, Debian's comgr) and the fake runtime's, whose
/// RUNPATH and RPATH name `$ORIGIN`: the same libraries, from the same
/// files, in the same order as the loader's.
#[test]
fn the_resolver_answers_as_the_loader_does_on_real_programs() {
    let mut files: Vec<PathBuf> = [
        "/usr/bin/python3",
        "/usr/bin/git",
        "/usr/bin/cmake",
        "/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2",
    ]
    .map(PathBuf::from)
    .to_vec();
    files.push(Path::new("/usr/bin/clang").canonicalize().unwrap());
    for dir in ["torch/lib", "sdk/libraries/lib", "sdk/torch/lib"] {
        for e in std::fs::read_dir(runtime().join(dir)).unwrap() {
            files.push(e.unwrap().path());
        }
    }
    let mut compared = 0;
    for f in &files {
        let want = ldd(f);
        let got = linker::resolve(f, &[]).unwrap();
        assert_eq!(got, want, "{}", f.display());
        compared += want.len();
    }
    assert!(compared > 50, "{compared} libraries compared");
}

/// A library of `dir` whose constructor leaves `marker` behind: what a
/// DT_AUDIT entry makes the loader run in `ldd`.
fn auditor(dir: &Path, marker: &Path) -> PathBuf {
    let src = dir.join("audit.c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n\
             __attribute__((constructor)) static void ran(void) {{\n\
             FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f); }}\n\
             unsigned int la_version(unsigned int v) {{ return v; }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let lib = dir.join("libaudit.so");
    rdna1_testkit::run(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src),
    );
    lib
}

/// A native torch (code for gfx1010) whose libtorch_hip.so and libMIOpen.so
/// name `audit` in DT_AUDIT; otherwise the fake runtime's.
fn audited_torch(sb: &Sandbox, audit: &Path) -> FakeTorch {
    let torch = FakeTorch::create(
        &sb.root.join("site"),
        runtime(),
        TorchKind::Rocm,
        "2.6.0+rocm6.4",
        "6.4.43484-123eb5128",
    );
    // The comgr torch bundles, through which the in-place fix is proven.
    std::os::unix::fs::symlink(
        crate::diagnosis::DEBIAN_COMGR,
        torch.lib.join("libamd_comgr.so.2"),
    )
    .unwrap();
    let lib = torch.lib.display().to_string();
    let flag = format!("-Wl,--audit,{}", audit.display());
    let hip = fat_library_linking(
        &sb.root,
        &["gfx1010"],
        &[
            "-L",
            &lib,
            "-lMIOpen",
            "-lamdhip64",
            "-Wl,-rpath,$ORIGIN",
            &flag,
        ],
    );
    std::fs::copy(hip, torch.lib.join("libtorch_hip.so")).unwrap();
    // The fake runtime's MIOpen again, from its sources and embedded
    // kernel texts, with the audit entry.
    let src = rdna1_testkit::fixtures().join("fake-runtime");
    let kernels = runtime().parent().unwrap().join("build/kernels.c");
    let miopen = sb.root.join("libMIOpen.so");
    rdna1_testkit::run(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libMIOpen.so"])
            .arg(src.join("miopen_stock.c"))
            .arg(&kernels)
            .args([
                "-L",
                &lib,
                "-l:libamdhip64.so",
                "-Wl,-rpath,$ORIGIN",
                &flag,
                "-o",
            ])
            .arg(&miopen),
    );
    std::fs::copy(miopen, torch.miopen()).unwrap();
    torch
}

#[test]
fn no_command_runs_the_library_a_dt_audit_entry_names() {
    let sb = Sandbox::new();
    let marker = sb.root.join("audit-ran");
    let audit = auditor(&sb.root, &marker);
    let torch = audited_torch(&sb, &audit);
    // The commands that ran it, each time taking its trace away.
    let ran = std::cell::RefCell::new(Vec::new());
    let after = |command: &'static str| {
        if std::fs::remove_file(&marker).is_ok() {
            ran.borrow_mut().push(command);
        }
    };
    // The loader itself runs it: what `ldd` did for the tool.
    rdna1_testkit::run(Command::new("ldd").arg(torch.lib.join("libtorch_hip.so")));
    after("ldd");
    assert_eq!(*ran.borrow(), ["ldd"], "the auditor is real");

    sb.install(&["--profile", "rocm-6.4.3"])
        .ok()
        .says("4 of 5 kernel texts fixed")
        .says("Installed");
    after("install");
    sb.run(&["doctor", "--need-space", "0", "--python", "python3"])
        .prints(&format!(
            "ok    torch     2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) at {}, found by python3 (--python); torch/lib: torch loads {}",
            torch.dir.display(),
            torch.miopen().display()
        ));
    after("doctor");
    sb.verify(&["--profile", "rocm-6.4.3", "--python", "python3"])
        .ok()
        .prints("the library resolves; none is a second copy")
        .prints("no problem found");
    after("verify");
    sb.rollback(&[]).ok().says("copied back from the backup");
    after("rollback");

    // torch on the system's MIOpen, found through LD_LIBRARY_PATH: what
    // libtorch_hip.so loads is worked out to say that a copy in torch/lib
    // would never be loaded.
    let system = sb.root.join("usr-lib");
    std::fs::create_dir_all(&system).unwrap();
    std::fs::rename(torch.miopen(), system.join("libMIOpen.so")).unwrap();
    let on_system = |args: &[&str]| {
        let mut c = sb.cmd();
        c.env("LD_LIBRARY_PATH", &system).args(args);
        Run::from(c.output().unwrap())
    };
    let refused = format!(
        "LD_LIBRARY_PATH names {0}, whose libMIOpen.so the loader takes before anything libtorch_hip.so's RUNPATH names: a fixed copy in torch/lib would never be loaded; nothing was changed",
        system.display()
    );
    let help = format!(
        "take {} out of LD_LIBRARY_PATH (the ROCm libraries torch needs are found through libtorch_hip.so's own run path and ld.so.conf), then run this again",
        system.display()
    );
    let prefix = sb.prefix.display().to_string();
    on_system(&[
        "install",
        "--into-torch",
        "--prefix",
        &prefix,
        "--state-dir",
        &sb.state(),
        "--python",
        "python3",
    ])
    .fails_with(&format!("error: {refused}\nhelp: {help}"));
    after("install, torch on the system's MIOpen");
    on_system(&[
        "doctor",
        "--detail",
        "--need-space",
        "0",
        "--python",
        "python3",
    ])
    .prints(&format!(
        "system: libtorch_hip.so loads {}/libMIOpen.so (no copy of ours yet)",
        system.display()
    ));
    after("doctor, torch on the system's MIOpen");
    assert_eq!(*ran.borrow(), ["ldd"], "commands that ran the auditor");
}

/// A shared library of one function, with SONAME `soname`, at `out`.
fn tiny_lib(dir: &Path, soname: &str, out: &Path, extra: &[&str]) {
    let src = dir.join(format!("{soname}.c"));
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&src, "int tiny(void) { return 1; }\n").unwrap();
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    rdna1_testkit::run(
        Command::new("cc")
            .args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}")])
            .args(extra)
            .arg(&src)
            .arg("-o")
            .arg(out),
    );
}

/// `dir/libmain.so`, which needs libtiny.so.1 and finds it through a run
/// path naming `sys` (`extra` says which kind).
fn main_needing_tiny(dir: &Path, sys: &Path, extra: &[&str]) -> PathBuf {
    let main = dir.join("libmain.so");
    let rpath = format!("-Wl,-rpath,{}", sys.display());
    let link = format!("-L{}", sys.display());
    let mut args = vec!["-Wl,--no-as-needed", &link, "-l:libtiny.so.1", &rpath];
    args.extend(extra);
    tiny_lib(dir, "libmain.so", &main, &args);
    main
}

/// Issue 55, finding 9: the glibc-hwcaps subdirectories, searched as the
/// loader searches them (`ldd`, which is `ld.so --list`, on each shape):
/// a copy for a level this CPU has is loaded before the baseline, through
/// RUNPATH and RPATH alike; a level no CPU has is passed over; a copy in a
/// legacy HWCAP subdirectory (glibc 2.36 still searches them) is said, not
/// guessed. Seen failing on d772f85, which named the baseline copy.
#[test]
fn glibc_hwcaps_copies_are_found_as_the_loader_finds_them() {
    let tmp = crate::support::tempdir();
    let best = linker::hwcaps().first().copied();
    let Some(best) = best else {
        eprintln!("not checked (this CPU has no x86-64-v2): glibc-hwcaps");
        return;
    };
    for (shape, flag) in [
        ("runpath", "-Wl,--enable-new-dtags"),
        ("rpath", "-Wl,--disable-new-dtags"),
    ] {
        let dir = tmp.path().join(shape);
        let sys = dir.join("sys");
        tiny_lib(&dir, "libtiny.so.1", &sys.join("libtiny.so.1"), &[]);
        let level = sys.join("glibc-hwcaps").join(best).join("libtiny.so.1");
        tiny_lib(&dir, "libtiny.so.1", &level, &[]);
        let never = sys.join("glibc-hwcaps/x86-64-v9/libtiny.so.1");
        tiny_lib(&dir, "libtiny.so.1", &never, &[]);
        let main = main_needing_tiny(&dir, &sys, &[flag]);
        let want = ldd(&main);
        assert!(
            want.contains(&Dep {
                name: "libtiny.so.1".into(),
                path: Some(level.clone())
            }),
            "{shape}: the loader takes {level:?}: {want:?}"
        );
        assert_eq!(linker::resolve(&main, &[]).unwrap(), want, "{shape}");
    }
    // A legacy HWCAP subdirectory: the loader of glibc 2.36 takes it.
    let dir = tmp.path().join("legacy");
    let sys = dir.join("sys");
    tiny_lib(&dir, "libtiny.so.1", &sys.join("libtiny.so.1"), &[]);
    let legacy = sys.join("tls/libtiny.so.1");
    tiny_lib(&dir, "libtiny.so.1", &legacy, &[]);
    let main = main_needing_tiny(&dir, &sys, &[]);
    let loader = ldd(&main);
    let takes_legacy = loader
        .iter()
        .any(|d| d.path.as_deref() == Some(legacy.as_path()));
    match linker::resolve(&main, &[]) {
        Err(e) => {
            assert!(
                takes_legacy,
                "this loader skips legacy dirs, so the resolver must too"
            );
            assert_eq!(
                format!("{e:#}"),
                format!(
                    "cannot tell which libtiny.so.1 the loader takes: {} lies in a legacy HWCAP subdirectory of {}, which glibc before 2.37 may prefer to {} and rdna1-patch does not model",
                    legacy.display(),
                    sys.display(),
                    sys.join("libtiny.so.1").display()
                )
            );
        }
        Ok(got) => assert_eq!(got, loader, "no legacy search on this glibc"),
    }
}

/// `$PLATFORM` and `$LIB` in a run path name the directories the loader's
/// own values name (issue 55, "not tried yet"): the resolver agrees with
/// `ldd` where d772f85 passed such a directory over and named another
/// copy (or none).
#[test]
fn platform_and_lib_tokens_resolve_as_the_loader_does() {
    let tmp = crate::support::tempdir();
    let platform =
        String::from_utf8(rdna1_testkit::run(Command::new("uname").arg("-m")).stdout).unwrap();
    let _ = platform;
    for token in ["$PLATFORM", "${LIB}"] {
        let dir = tmp.path().join(token.trim_matches(|c| "${}".contains(c)));
        // Where the loader expands the token: found by asking it, through
        // a copy in every candidate directory and ldd's answer.
        let sys = dir.join("sys");
        tiny_lib(
            &dir,
            "libtiny.so.1",
            &sys.join("fallback/libtiny.so.1"),
            &[],
        );
        let main = dir.join("libmain.so");
        let rpath = format!(
            "-Wl,-rpath,{}/{token}:{}/fallback",
            sys.display(),
            sys.display()
        );
        let link = format!("-L{}/fallback", sys.display());
        tiny_lib(
            &dir,
            "libmain.so",
            &main,
            &["-Wl,--no-as-needed", &link, "-l:libtiny.so.1", &rpath],
        );
        // The expansions the loader might make: the platform names glibc
        // knows and the library dirs of the distributions.
        for sub in [
            "x86_64",
            "haswell",
            "xeon_phi",
            "lib/x86_64-linux-gnu",
            "lib64",
            "lib",
        ] {
            tiny_lib(
                &dir,
                "libtiny.so.1",
                &sys.join(sub).join("libtiny.so.1"),
                &[],
            );
        }
        let want = ldd(&main);
        let took = want
            .iter()
            .find(|d| d.name == "libtiny.so.1")
            .and_then(|d| d.path.clone())
            .unwrap();
        assert!(!took.starts_with(sys.join("fallback")), "{token}: {took:?}");
        assert_eq!(linker::resolve(&main, &[]).unwrap(), want, "{token}");
    }
}
