//! Hostile input, round two (issue 25): an origin that commits a symlink
//! above the project, fat binaries that lie about their sizes, children
//! that print without end or hang, a rocm_sdk that names a library
//! elsewhere, a user's directory where `clean` looks, and the user's own
//! git settings that run code. One test (or more) per defect.

use std::path::Path;

use crate::support::{HIP, Sandbox, TorchKind, copy_dir, fat_library, fixtures, git, snapshot};

/// Point the sandbox's profile at `url`, with `extra` profile lines after
/// the url (the tag line is kept).
fn profile_with(sb: &Sandbox, url: &str, extra: &str) {
    let origin = format!("url = \"{}\"", sb.origin.display());
    sb.write_profile(|t| {
        assert!(t.contains(&origin), "{t}");
        t.replace(&origin, &format!("url = \"{url}\"\n{extra}"))
    });
}

/// A repository whose `projects` is a symlink to `outside`, where a copy
/// of the fixture project sits at `outside/miopen`: with
/// `subdir = "projects/miopen"` every path resolves there.
fn origin_with_symlinked_subdir(sb: &Sandbox, outside: &Path) -> String {
    copy_dir(&fixtures().join("miopen-mini"), &outside.join("miopen"));
    let repo = sb.root.join("evil-origin");
    std::fs::create_dir_all(&repo).unwrap();
    std::os::unix::fs::symlink(outside, repo.join("projects")).unwrap();
    std::fs::write(repo.join("README.md"), "# nothing to see\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "uploadpack.allowFilter", "true"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "a symlink"]);
    git(&repo, &["tag", "-a", "rocm-6.2.4", "-m", "rocm-6.2.4"]);
    format!("file://{}", repo.display())
}

#[test]
fn a_symlink_the_origin_commits_above_the_subdir_is_never_written_through() {
    let sb = Sandbox::new();
    let outside = sb.root.join("outside");
    let url = origin_with_symlinked_subdir(&sb, &outside);
    profile_with(&sb, &url, "subdir = \"projects/miopen\"");
    let before = snapshot(&outside);
    for stop in ["patch", "configure", "install"] {
        let run = sb.build(&["--stop-after", stop]).fails_with(
            r#"error: [..]/work/mini/miopen/src/projects is a symlink (to [..]/outside), so the project directory [..]/work/mini/miopen/src/projects/miopen would be outside the work dir [..]/work
help: rdna1-patch never writes or builds through a symlink; if the repository commits it, the profile's `subdir` must name a real directory. Nothing was written"#,
        );
        run.error_is(&format!(
            "error: {}/projects is a symlink (to {}), so the project directory {}/projects/miopen would be outside the work dir {}\nhelp: rdna1-patch never writes or builds through a symlink[..]",
            sb.src().display(),
            outside.display(),
            sb.src().display(),
            sb.work.display()
        ));
    }
    assert_eq!(snapshot(&outside), before, "a file outside was written");
    assert!(
        !sb.work.join("mini/miopen/build/CMakeCache.txt").exists(),
        "CMake configured the outside tree"
    );
}

#[test]
fn a_subdir_or_patch_path_into_dot_git_is_refused() {
    let sb = Sandbox::new();
    for subdir in [".git", ".git/hooks", "a/.GIT", "x/.Git/y"] {
        profile_with(
            &sb,
            sb.origin.to_str().unwrap(),
            &format!("subdir = \"{subdir}\""),
        );
        let run = sb.build(&["--dry-run"]).fails();
        run.says(&format!(
            "components.miopen.subdir `{subdir}` is not a directory inside the repository"
        ));
        run.says("outside `.git`");
    }
    assert!(!sb.work.exists(), "a refused profile wrote the work dir");

    // A patch that writes below a nested `.git` is refused before the fetch.
    let sb = Sandbox::new();
    std::fs::write(
        sb.series.join("9999-hook.patch"),
        "Subject: a hook\n\ndiff --git a/sub/.git/hooks/post-checkout b/sub/.git/hooks/post-checkout\nnew file mode 100755\n--- /dev/null\n+++ b/sub/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+touch /tmp/owned\n",
    )
    .unwrap();
    let series = sb.series.join("series");
    let mut list = std::fs::read_to_string(&series).unwrap();
    list.push_str("9999-hook.patch\n");
    std::fs::write(&series, list).unwrap();
    sb.build(&["--stop-after", "patch"])
        .fails_with(
            r#"error: patch 9999-hook.patch names `sub/.git/hooks/post-checkout`, which is outside the source tree
help: patch paths must be relative to the source root (a/src/..., b/src/...), without `..`"#,
        )
        .says("patch 9999-hook.patch names `sub/.git/hooks/post-checkout`, which is outside the source tree");
}

/// The index and header offset of section `name` in a 64-bit little-endian
/// ELF file.
fn section_header(elf: &[u8], name: &str) -> usize {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(header)
        .find(|&h| {
            let at = strtab + u32::from_le_bytes(elf[h..h + 4].try_into().unwrap()) as usize;
            elf[at..].starts_with(name.as_bytes()) && elf[at + name.len()] == 0
        })
        .unwrap_or_else(|| panic!("no section {name}"))
}

/// A copy of `elf` whose section `name` claims `size` bytes.
pub(crate) fn with_section_size(elf: &[u8], name: &str, size: u64) -> Vec<u8> {
    let mut out = elf.to_vec();
    let h = section_header(elf, name);
    out[h + 0x20..h + 0x28].copy_from_slice(&size.to_le_bytes());
    out
}

#[test]
fn a_fat_binary_that_lies_about_its_sizes_is_an_error_not_a_crash() {
    let sb = Sandbox::new();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let real = std::fs::read(fat_library(&sb.root, &["gfx1030"])).unwrap();
    let lib = torch.lib.join("libtorch_hip.so");
    let doctor = || sb.run(&["doctor", "--need-space", "0", "--python", "python3"]);
    for (section, what) in [
        (".hip_fatbin", ".hip_fatbin section"),
        (".shstrtab", "section name table"),
    ] {
        for size in [1 << 63, u64::MAX, 16 << 30, 1 << 40] {
            std::fs::write(&lib, with_section_size(&real, section, size)).unwrap();
            let run = doctor();
            assert!(
                matches!(run.code, Some(0 | 1)),
                "{section} of {size} bytes: exit {:?}\n{}",
                run.code,
                run.stderr
            );
            let line = run
                .stdout
                .lines()
                .find(|l| l.get(6..).is_some_and(|r| r.starts_with("torch-gpu ")))
                .unwrap_or_else(|| panic!("no torch-gpu line:\n{}", run.stdout));
            let head = format!(
                "{} is not a usable ELF file: its {what} ({size} bytes at offset ",
                lib.display()
            );
            let tail = format!(") lies past the end of the file ({} bytes)", real.len());
            assert!(
                line.contains(&head) && line.ends_with(&tail),
                "{section} of {size} bytes: {line}"
            );
        }
    }
    // install reads torch's GPU code too (for its override warning): it
    // goes on without it.
    std::fs::write(&lib, with_section_size(&real, ".hip_fatbin", u64::MAX)).unwrap();
    let sb2 = Sandbox::built();
    let torch2 = sb2.torch(TorchKind::Rocm, HIP);
    std::fs::write(
        torch2.lib.join("libtorch_hip.so"),
        std::fs::read(&lib).unwrap(),
    )
    .unwrap();
    sb2.install(&["--no-relink"]).ok();
}

/// A `python` that answers rdna1-patch's rocm_sdk query with `answer` (a
/// shell command) and runs everything else with python3.
fn python_answering(sb: &Sandbox, name: &str, answer: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = sb.root.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncase \"$*\" in *find_libraries*) {answer};; esac\nexec python3 \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// A rocm-sdk torch with the fixture built against its devel SDK, as a
/// TheRock user builds it.
fn rocm_sdk_built(families: &[&str]) -> (Sandbox, rdna1_testkit::FakeRocmSdk) {
    let sb = Sandbox::new();
    let sdk = crate::rocm_sdk::sdk(&sb, families);
    crate::rocm_sdk::build_against(&sb, &sdk.devel);
    (sb, sdk)
}

#[test]
fn a_child_that_prints_without_end_is_stopped_at_the_cap() {
    let (sb, sdk) = rocm_sdk_built(&["gfx101X-dgpu"]);
    let python = python_answering(&sb, "python-yes", "exec yes");
    let before = std::fs::read(&sdk.miopen).unwrap();
    // The query's endless answer is cut at 64 MiB and the files are read
    // instead, as for any other failed query.
    let run = sb.install(&["--python", &python]).ok();
    run.says(&format!("Installed {}", sdk.miopen.display()));
    let verify = sb.verify(&["--python", &python]).ok();
    let layout = verify
        .stdout
        .lines()
        .find(|l| l.starts_with("ok    layout"))
        .unwrap_or_else(|| panic!("no layout line:\n{}", verify.stdout));
    assert!(
        layout.contains(&format!(
            "(found by filesystem; python's rocm_sdk: `{python} -c import json,"
        )) && layout.ends_with("...` printed more than 64 MiB on stdout, and was stopped)"),
        "{layout}"
    );
    sb.rollback(&[]).ok();
    assert_eq!(std::fs::read(&sdk.miopen).unwrap(), before);
}

#[test]
fn a_rocm_sdk_answer_outside_torchs_own_libraries_package_is_refused() {
    let sb = Sandbox::built();
    let sdk = crate::rocm_sdk::sdk(&sb, &["gfx101X-dgpu"]);
    // Another environment's package, of the same shape.
    let other = rdna1_testkit::FakeRocmSdk::create(
        &sb.root.join("other-env/site"),
        crate::support::runtime(),
        crate::rocm_sdk::SDK,
        rdna1_testkit::SdkShape::PerFamily(&["gfx101X-dgpu"]),
    );
    let hip = sdk.site.join("_rocm_sdk_core/lib/libamdhip64.so.7");
    for (name, wrong) in [("python-other", &other.miopen), ("python-hip", &hip)] {
        let answer = format!(
            "echo '{{\"version\": \"7.14.0\", \"installed\": [\"gfx101X-dgpu\"], \"family\": \"gfx101X-dgpu\", \"miopen\": \"{}\", \"core\": \"{}\"}}'; exit 0",
            wrong.display(),
            hip.parent().unwrap().display()
        );
        let python = python_answering(&sb, name, &answer);
        let before = [
            std::fs::read(&sdk.miopen).unwrap(),
            std::fs::read(&other.miopen).unwrap(),
            std::fs::read(&hip).unwrap(),
        ];
        let run = sb.install(&["--python", &python]).fails();
        run.error_is(&format!(
            "error: rocm_sdk.find_libraries('miopen') gave {}, which is not a libMIOpen.so* in a _rocm_sdk_libraries* package beside torch in {}\nhelp: rdna1-patch replaces only the MIOpen of torch's own environment[..]",
            wrong.display(),
            sdk.site.display()
        ));
        let after = [
            std::fs::read(&sdk.miopen).unwrap(),
            std::fs::read(&other.miopen).unwrap(),
            std::fs::read(&hip).unwrap(),
        ];
        assert!(before == after, "{name}: a library was changed");
    }
}

#[test]
fn an_empty_target_family_is_unset_and_a_hung_query_falls_back_soon() {
    let sb = Sandbox::built();
    let sdk = crate::rocm_sdk::sdk(&sb, &["gfx101X-dgpu", "gfx110X-all"]);
    let torch_dir = sdk.torch.dir.display().to_string();
    let prefix = sb.prefix.display().to_string();
    let out = sb
        .cmd()
        .args(["install", "--into-torch", "--prefix", &prefix])
        .args(["--state-dir", &sb.state(), "--torch-dir", &torch_dir])
        .env("ROCM_SDK_TARGET_FAMILY", "")
        .output()
        .unwrap();
    crate::support::Run::from(out).fails_with(
        r#"error: several rocm-sdk libraries packages are installed (gfx101X-dgpu, gfx110X-all), and ROCM_SDK_TARGET_FAMILY does not say which one torch loads
help: set ROCM_SDK_TARGET_FAMILY to your GPU's family (for an RX 5000 card: ROCM_SDK_TARGET_FAMILY=gfx101X-dgpu rdna1-patch ...), as torch itself does"#,
    ).says(
        "error: several rocm-sdk libraries packages are installed (gfx101X-dgpu, gfx110X-all), and ROCM_SDK_TARGET_FAMILY does not say which one torch loads",
    );

    // A python whose rocm_sdk query never answers: the files decide, after
    // the query's own limit (15 s), not the helpers' two minutes.
    let (sb, sdk) = rocm_sdk_built(&["gfx101X-dgpu"]);
    let python = python_answering(&sb, "python-hang", "exec sleep 600");
    sb.install(&["--python", &python])
        .ok()
        .says(&format!("Installed {}", sdk.miopen.display()));
    let verify = sb.verify(&["--python", &python]);
    assert!(
        verify
            .stdout
            .contains("did not answer the rocm_sdk query within 15 s and was stopped"),
        "{}",
        verify.stdout
    );
}

#[test]
fn clean_removes_only_the_dirs_its_record_says_it_made() {
    let sb = Sandbox::new();
    sb.build(&["--stop-after", "configure"]).ok();
    // A user's own directories where clean looks: a component dir the tool
    // never made, with a `build` and logs in it.
    let theirs = sb.work.join("mini/notes");
    for d in ["build", "src", "logs"] {
        std::fs::create_dir_all(theirs.join(d)).unwrap();
    }
    std::fs::write(theirs.join("build/thesis.tex"), "years of work").unwrap();
    std::fs::write(theirs.join("logs/2020-01-01-notes.log"), "keep").unwrap();
    std::fs::write(theirs.join("logs/2020-01-02-notes.log"), "keep").unwrap();
    let mine = sb.work.join("mini/miopen");
    assert_eq!(
        std::fs::read_to_string(mine.join("made-by-rdna1-patch")).unwrap(),
        "build\nlogs\nsrc\nstate\n"
    );
    let before = snapshot(&theirs);
    let run = sb
        .run(&[
            "clean",
            "--builds",
            "--keep-logs",
            "0",
            "--work-dir",
            sb.work.to_str().unwrap(),
            "--state-dir",
            &sb.state(),
        ])
        .ok();
    run.prints(&format!(
        "removed build dir {}",
        mine.join("build").display()
    ))
    .prints(&format!("removed checkout {}", mine.join("src").display()));
    run.prints(&format!(
        "kept {}: rdna1-patch has no record of making it ({} does not name it); remove it yourself if it should go",
        theirs.join("build").display(),
        theirs.join("made-by-rdna1-patch").display()
    ));
    assert_eq!(snapshot(&theirs), before, "clean removed a user's file");
    assert!(theirs.join("build").is_dir() && theirs.join("src").is_dir());
    assert!(!mine.join("build").exists() && !mine.join("src").exists());
    // What was removed is no longer claimed: a dir made there by hand now
    // is the user's.
    assert_eq!(
        std::fs::read_to_string(mine.join("made-by-rdna1-patch")).unwrap(),
        "logs\n"
    );
    std::fs::create_dir_all(mine.join("build")).unwrap();
    sb.run(&[
        "clean",
        "--builds",
        "--work-dir",
        sb.work.to_str().unwrap(),
        "--state-dir",
        &sb.state(),
    ])
    .ok();
    assert!(mine.join("build").is_dir());
}

/// One of the user's git settings that runs code, and what a build with it
/// in their global config must do.
struct GitCase {
    name: &'static str,
    /// Lines of the user's ~/.gitconfig; `@RUN@` is a script that leaves a
    /// mark when run (and passes its input through, as a filter must).
    config: &'static str,
    /// `.gitattributes` committed in the origin, if any.
    attributes: Option<&'static str>,
    /// The profile's URL instead of the origin's path (`@MARK@`: the mark).
    url: Option<&'static str>,
}

fn git_case(case: &GitCase) {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let mark = sb.root.join("ran");
    let script = sb.root.join("run.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch {}\nexec cat\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hooks = sb.root.join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "post-checkout",
        "reference-transaction",
        "post-index-change",
    ] {
        std::os::unix::fs::symlink(&script, hooks.join(hook)).unwrap();
    }
    let global = sb.root.join("gitconfig");
    std::fs::write(
        &global,
        case.config
            .replace("@RUN@", script.to_str().unwrap())
            .replace("@HOOKS@", hooks.to_str().unwrap()),
    )
    .unwrap();
    if let Some(attrs) = case.attributes {
        std::fs::write(sb.origin.join(".gitattributes"), attrs).unwrap();
        std::fs::write(sb.origin.join("data.txt"), "line\r\n$Id$\n").unwrap();
        git(&sb.origin, &["add", "-A"]);
        git(&sb.origin, &["commit", "-q", "-m", "attributes"]);
        git(
            &sb.origin,
            &["tag", "-f", "-a", "rocm-6.2.4", "-m", "moved"],
        );
    }
    if let Some(url) = case.url {
        profile_with(&sb, &url.replace("@MARK@", mark.to_str().unwrap()), "");
    }
    let out = sb
        .cmd()
        .args(sb.build_args(&["--stop-after", "patch"]))
        .env("GIT_CONFIG_GLOBAL", &global)
        .output()
        .unwrap();
    let run = crate::support::Run::from(out);
    assert!(
        !mark.exists(),
        "{}: the user's code ran\n{}",
        case.name,
        run.stderr
    );
    if case.url.is_some() {
        run.fails().says("error: ");
        return;
    }
    run.ok();
    if case.attributes.is_some() {
        // The commit's bytes, not what a filter or eol conversion makes.
        let blob = std::process::Command::new("git")
            .args(["cat-file", "blob", "rocm-6.2.4:data.txt"])
            .current_dir(&sb.origin)
            .output()
            .unwrap()
            .stdout;
        assert!(blob.ends_with(b"$Id$\n"), "{blob:?}");
        assert_eq!(
            std::fs::read(sb.src().join("data.txt")).unwrap(),
            blob,
            "{}",
            case.name
        );
    }
}

#[test]
fn the_users_git_settings_that_run_code_are_off_one_by_one() {
    let cases = [
        GitCase {
            name: "core.fsmonitor",
            config: "[core]\n\tfsmonitor = @RUN@\n",
            attributes: None,
            url: None,
        },
        GitCase {
            name: "core.hooksPath",
            config: "[core]\n\thooksPath = @HOOKS@\n",
            attributes: None,
            url: None,
        },
        GitCase {
            name: "a smudge filter the origin names",
            config: "[filter \"evil\"]\n\tsmudge = @RUN@\n\tclean = @RUN@\n\trequired = true\n",
            attributes: Some("* filter=evil\n"),
            url: None,
        },
        GitCase {
            name: "a failing LFS filter, eol and ident",
            config: "[filter \"lfs\"]\n\tsmudge = @RUN@; false\n\tprocess = false\n\trequired = true\n[core]\n\tautocrlf = true\n",
            attributes: Some("* filter=lfs text eol=lf ident\n"),
            url: None,
        },
        GitCase {
            name: "remote.origin.uploadpack",
            config: "[remote \"origin\"]\n\tuploadpack = @RUN@\n",
            attributes: None,
            url: None,
        },
        GitCase {
            name: "protocol.ext.allow",
            config: "[protocol \"ext\"]\n\tallow = always\n",
            attributes: None,
            url: Some("ext::sh -c touch% @MARK@"),
        },
        GitCase {
            name: "protocol.fd.allow",
            config: "[protocol \"fd\"]\n\tallow = always\n",
            attributes: None,
            url: Some("fd::0"),
        },
    ];
    for case in &cases {
        git_case(case);
    }
}

#[test]
fn an_unreadable_kfd_node_is_said_by_build_and_doctor() {
    let sb = Sandbox::new();
    let sys = sb.root.join("sys");
    copy_dir(&fixtures().join("sysfs/rx5600xt-gfx1010"), &sys);
    let nodes = sys.join("class/kfd/kfd/topology/nodes");
    copy_dir(&nodes.join("1"), &nodes.join("4294967296"));
    sb.set_gpus(&sys);
    let run = sb.build(&["--dry-run"]).ok();
    run.prints("targets:   gfx1010 (the RDNA1 card(s) in the KFD topology, 1 node(s) of it unreadable: `rdna1-patch doctor[..]` says which; --gpu-targets to choose)");
    let doctor = sb.run(&["doctor", "--need-space", "0"]);
    let all = format!("{}{}", doctor.stdout, doctor.stderr);
    assert!(
        all.contains(&format!(
            "{}: not a node number (0 to 4294967295); left out",
            nodes.join("4294967296").display()
        )),
        "{all}"
    );
}

#[test]
fn rollback_with_no_state_and_no_torch_does_not_say_all_is_well() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    std::fs::remove_dir_all(sb.state()).unwrap();
    // The torch is not where python3 looks (another venv), and no
    // --torch-dir says where it is.
    let out = sb
        .cmd()
        .args(["rollback", "--state-dir", &sb.state()])
        .env("PYTHONPATH", sb.root.join("nowhere"))
        .output()
        .unwrap();
    let run = crate::support::Run::from(out).fails_with(
        r#"error: no transactions in [..]/state, and no torch to check whether it holds an rdna1-patch build: [..]/python3 ([..]) has no torch installed
help: name the torch with --python PATH or --torch-dir DIR, and the state dir that installed into it with --state-dir DIR; nothing was changed"#,
    );
    run.says(&format!(
        "error: no transactions in {}, and no torch to check whether it holds an rdna1-patch build: ",
        sb.state()
    ))
    .says("help: name the torch with --python PATH or --torch-dir DIR");
    assert!(
        !run.stderr.contains("nothing to roll back"),
        "{}",
        run.stderr
    );
    // Named, it is found to be patched, as before.
    let dir = torch.dir.display().to_string();
    sb.rollback(&["--torch-dir", &dir])
        .fails_with(
            r#"error: [..]/site/torch/lib/libMIOpen.so is an rdna1-patch build, but no transaction in [..]/state installed it, so there is no original here to put back
help: if another --state-dir installed it, run `rdna1-patch rollback --state-dir DIR[..]` with that one; if that state is lost, `pip install --force-reinstall torch==2.5.1+rocm6.2` (from the index you installed it from) brings torch's own library back"#,
        )
        .says("is an rdna1-patch build, but no transaction in");
}
