//! The route starts from the torch: with no ROCm torch (none, a CPU or a
//! CUDA build, a python that cannot say), doctor and install say so first
//! and name the torch for the card in the machine; doctor shows the rows
//! of the user's route, the build's only where the route is a build or
//! `--all` asks.

use std::path::Path;

use rdna1_testkit::{TorchKind, gpus};

use crate::help_lines::python3_help;
use crate::support::{Run, Sandbox, line_matches};

/// stdout, line by line, is `expected` (`[..]` matches any text).
#[track_caller]
fn stdout_is(run: &Run, expected: &str) {
    let got: Vec<&str> = run.stdout.lines().collect();
    let want: Vec<&str> = expected.lines().collect();
    assert!(
        got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| line_matches(w, g)),
        "stdout differs\nexpected:\n{expected}\ngot:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
}

/// The names of the rows of a text report, in order.
fn rows(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| {
            ["ok ", "warn ", "FAIL ", "skip "]
                .iter()
                .any(|s| l.starts_with(s))
        })
        .filter_map(|l| l.get(6..)?.split_whitespace().next())
        .collect()
}

/// The torch row and its fix for what doctor found in the sandbox's
/// python3, on `card`'s machine; `installed`, a torch to replace.
fn torch_rows(found: &str, target: &str, which: &str, installed: bool) -> String {
    format!(
        "FAIL  torch     {found}
                fix: {}
skip  route     a torch first: the route (the in-place fix, a build, or nothing to do) is chosen for the torch it is to fix",
        help_for(target, which, installed)
    )
}

/// The route row's plan where there is no ROCm torch: the torch row's
/// commands, then MIOpen's fix after it.
fn steps(target: &str, installed: bool) -> String {
    let step = crate::help_lines::python3_step(&[target], installed);
    format!(
        "                step 1 of 2: the torch for {target}: {step} (a download of about 4 GB, no build; fixes no ROCm torch is there)
                step 2 of 2: after the torch for {target}, run doctor again: MIOpen's batch-norm fix for {target}: `rdna1-patch install --into-torch` (seconds, in place; fixes batch-norm training, where that torch's MIOpen fails it)"
    )
}

const OR_PYTHON: &str = "; or pass the python torch is in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir";

/// The help for no ROCm torch in the sandbox's python3: with none there,
/// the other pythons are named too; a torch there is replaced.
fn help_for(target: &str, which: &str, installed: bool) -> String {
    let or = if installed { "" } else { OR_PYTHON };
    python3_help(target, which, installed, or)
}

#[test]
fn doctor_with_no_rocm_torch_names_the_torch_for_the_card_first() {
    let cards = [
        (
            "rx5600xt-gfx1010",
            "gfx1010",
            "ok    gpu       gfx1010 Navi 10 (RX 5600/5700 series) at 0000:03:00.0 (node 1, gfx_target_version 100100): RDNA1, what this tool is for",
        ),
        (
            "rx5500xt-gfx1012",
            "gfx1012",
            "ok    gpu       gfx1012 Navi 14 (RX 5500 series) at 0000:0a:00.0 (node 1, gfx_target_version 100102): RDNA1, what this tool is for",
        ),
    ];
    for (tree, target, gpu_row) in cards {
        let sb = Sandbox::new();
        sb.set_gpus(gpus(tree));
        let tail = format!(
            "{gpu_row}
[..] amdgpu    [..]
ok    override  HSA_OVERRIDE_GFX_VERSION is not set"
        );
        // doctor's whole report: the torch row `what`, with a torch to
        // replace or none.
        let says = |what: &str, replace: bool| {
            let run = sb.run(&["doctor"]).check_fails();
            let rows = torch_rows(what, target, "the card in this machine", replace);
            stdout_is(
                &run,
                &format!(
                    "verdict: 1 problem to fix: torch; 2 steps, first the torch for {target} (see route)\n{rows}\n{}\n{tail}",
                    steps(target, replace)
                ),
            );
        };
        // No torch in the python on PATH.
        says("[..]/python3 ([..]) has no torch installed", false);
        // PyPI's default torch: a CUDA build.
        let t = sb.cuda_torch();
        says(
            &format!(
                "torch 2.15.0+cu132 at {} is a CUDA 13.2 build, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so",
                t.dir.display()
            ),
            true,
        );
        // --all adds what a build would need.
        let all = sb.run(&["doctor", "--all"]).check_fails();
        let names = rows(&all.stdout);
        for build_row in ["cmake", "git", "compiler", "rocm", "disk", "shared"] {
            assert!(names.contains(&build_row), "{build_row}: {}", all.stdout);
        }
        assert_eq!(&names[..2], ["torch", "route"], "{}", all.stdout);
    }
}

#[test]
fn install_with_no_rocm_torch_errs_about_the_torch_not_a_build() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5500xt-gfx1012"));
    let help = |installed: bool| {
        format!(
            "help: {}",
            help_for("gfx1012", "the card in this machine", installed)
        )
    };
    let install = |extra: &[&str]| {
        let mut args = vec!["install", "--into-torch", "--dry-run"];
        args.extend(extra);
        sb.run_with_state(&args, &[])
    };
    install(&[]).fails_with(&format!(
        "error: [..]/python3 ([..]) has no torch installed\n{}",
        help(false)
    ));
    install(&["--python", "/usr/bin/false"]).fails_with(
        "error: /usr/bin/false is not a python: it did not run a line of python given with -c (exit status: 1)
help: pass the python your torch is installed in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir",
    );
    let t = sb.cuda_torch();
    install(&[]).fails_with(&format!(
        "error: torch 2.15.0+cu132 at {} is a CUDA 13.2 build, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so\n{}",
        t.dir.display(),
        help(true)
    ));
    // With no card seen, gfx1010's, and the RX 5500's named.
    sb.set_gpus(gpus("no-gpu"));
    install(&[]).fails_with(&format!(
        "error: torch 2.15.0+cu132 at {} is a CUDA 13.2 build, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so
help: {}",
        t.dir.display(),
        help_for(
            "gfx1010",
            "no RDNA1 card is seen here; an RX 5500's is gfx1012",
            true
        )
    ));
    assert!(!sb.root.join("state").exists(), "nothing was written");
}

/// Issue 61: `build` with no ROCm torch (none, or PyPI's CUDA one) chose
/// rocm-6.2.4 and stopped at `ROCm at /opt/rocm`; a gfx101x owner's route
/// needs no build: the torch for the card first, as doctor says, for the
/// build, its dry run and a pull alike, before any plan is printed.
#[test]
fn build_with_no_rocm_torch_points_at_the_torch_for_the_card() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let then = "then `rdna1-patch install --into-torch` (that torch's route: its own MIOpen fixed in place, no build)";
    let tail = "; to build for a torch that is not here, name its profile with --profile";
    let builds: [&[&str]; 4] = [
        &["build", "miopen"],
        &["build"],
        &["build", "miopen", "--dry-run"],
        &[
            "build",
            "--from",
            "oci://127.0.0.1:1/you/miopen-rdna1",
            "--dry-run",
        ],
    ];
    let expect = |found: &str, installed: bool| {
        let help = help_for("gfx1010", "the card in this machine", installed);
        let (get, rest) = help.split_once(", then run this again").unwrap();
        let (then, rest) = match rest.strip_prefix(" with --python ~/venv/bin/python") {
            Some(r) => (
                then.replace("--into-torch`", "--into-torch --python ~/venv/bin/python`"),
                r,
            ),
            None => (then.to_owned(), rest),
        };
        format!("error: no ROCm torch to build for: {found}\nhelp: {get}, {then}{rest}{tail}\n")
    };
    let each = |want: &str| {
        for args in builds {
            let run = sb.run(args).fails();
            run.error_is(want);
            assert!(
                run.stderr.starts_with("error: ") && run.stdout.is_empty(),
                "{args:?}: nothing before the error\nstdout:\n{}\nstderr:\n{}",
                run.stdout,
                run.stderr
            );
        }
    };
    each(&expect("[..]/python3 ([..]) has no torch installed", false));
    let t = sb.cuda_torch();
    each(&expect(
        &format!(
            "torch 2.15.0+cu132 at {} is a CUDA 13.2 build, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so",
            t.dir.display()
        ),
        true,
    ));
    assert!(
        !sb.root.join("xdg-cache/rdna1-patch").exists(),
        "nothing was fetched"
    );
}

#[test]
fn doctor_shows_the_rows_of_the_in_place_route_and_not_the_builds() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", crate::in_place::HIP64, &["gfx1010"]);
    let run = sb.run(&["doctor"]);
    assert_eq!(
        rows(&run.stdout),
        [
            "torch",
            "route",
            "kernels",
            "torch-gpu",
            "gpu",
            "amdgpu",
            "override"
        ],
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    let all = sb.run(&["doctor", "--all"]);
    let names = rows(&all.stdout);
    assert!(
        names.contains(&"cmake") && names.contains(&"rocm"),
        "{}",
        all.stdout
    );
    // Where the route needs no SDK, a missing ROCm is shown, never failed.
    assert!(
        all.stdout.lines().any(|l| l.starts_with("skip  rocm ")),
        "{}",
        all.stdout
    );
}

/// The dry run checks what the real run will need, refuses what it would
/// refuse, and says its answer on stdout, under `-q` too.
#[test]
fn a_dry_run_refuses_what_the_real_run_would_and_answers_on_stdout() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, "6.2.41133-dd7f95766");
    let state = sb.state();
    let dir = torch.dir.display().to_string();
    let prefix = sb.prefix.display().to_string();
    let args = [
        "install",
        "--into-torch",
        "--dry-run",
        "--torch-dir",
        &dir,
        "--prefix",
        &prefix,
        "--state-dir",
        &state,
    ];
    let quiet: Vec<&str> = std::iter::once("-q").chain(args).collect();
    let run = sb.run_unprivileged(&quiet).ok();
    stdout_is(
        &run,
        &format!(
            "     Route would install the build in {prefix} into torch 2.5.1+rocm6.2 at {dir}, as the prefix holds a build of profile [..] for ROCm 6.2, torch's line (dry run: nothing was changed)"
        ),
    );
    assert_eq!(run.stderr, "", "-q: the answer alone");
    std::fs::set_permissions(&torch.lib, std::fs::Permissions::from_mode(0o555)).unwrap();
    let run = sb.run_unprivileged(&args);
    std::fs::set_permissions(&torch.lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    run.fails_with(&format!(
        "error: cannot write to {0}: permission denied; nothing was changed
help: you own {0}, but its mode (555) does not let you write there: `chmod u+w {0}`, or choose a torch in a virtualenv you own",
        torch.lib.display()
    ));
    // A state dir under a directory this user cannot write.
    let locked = sb.root.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let elsewhere = locked.join("state").display().to_string();
    let mut other = args.to_vec();
    *other.last_mut().unwrap() = &elsewhere;
    let run = sb.run_unprivileged(&other);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    run.fails_with(&format!(
        "error: the state dir {elsewhere} cannot be written: {0} is not writable (permission denied)
help: you own {0}, but its mode (555) does not let you write there: `chmod u+w {0}`, or choose another --state-dir DIR",
        locked.display()
    ));
    assert!(!locked.join("state").exists() && !Path::new(&state).exists());
}

/// A torch whose MIOpen needs a library this machine lacks (Debian's
/// libMIOpen needs its Boost) is told so before anything is fixed, and
/// nothing is left behind: no prefix, no transaction.
#[test]
fn a_library_torch_cannot_load_is_refused_before_the_fix() {
    let sb = Sandbox::new();
    let torch =
        crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", crate::in_place::HIP64, &["gfx1010"]);
    let out = std::process::Command::new("patchelf")
        .args(["--add-needed", "libboost_filesystem.so.1.90.0"])
        .arg(torch.miopen())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lib = torch.dir.canonicalize().unwrap().join("lib");
    sb.install(&["--profile", "rocm-6.4.3"]).fails_with(&format!(
        "error: {0}/libMIOpen.so needs libboost_filesystem.so.1.90.0, which the dynamic loader cannot find from {0}: torch's MIOpen cannot load as it is, fixed or not; nothing was changed
help: install what provides them (the same versions this MIOpen was built against, with their directory on the system library path), then run this again",
        lib.display()
    ));
    assert!(!sb.prefix.exists(), "no prefix was made");
    assert!(!Path::new(&sb.state()).join("transactions").exists());
}

/// After "Nothing to fix" there is no prefix, and none is needed: verify
/// --compile judges the torch as it is, and passes; plain verify has
/// nothing of ours to check, and says so (exit 3, doctor named: issue 64).
#[test]
fn verify_after_nothing_to_fix_judges_the_torch_as_it_is() {
    let sb = Sandbox::new();
    let torch =
        crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", crate::in_place::HIP64, &["gfx1010"]);
    std::fs::copy(crate::diagnosis::variant("portable"), torch.miopen()).unwrap();
    sb.install(&["--profile", "rocm-6.4.3"])
        .ok()
        .says("Nothing to fix");
    let dir = torch.dir.display().to_string();
    // verify with no --prefix: the profile's default, which does not exist.
    let verify = |extra: &[&str]| {
        let mut args = vec!["verify", "--torch-dir", &dir];
        args.extend(extra);
        sb.run_with_state(&args, &[])
    };
    let plain = verify(&[]);
    assert_eq!(plain.code, Some(3), "{}", plain.stdout);
    assert!(
        crate::support_run::line_matches(
            "verdict: nothing of rdna1-patch's is installed to verify: `rdna1-patch doctor[..]` says what this torch needs",
            plain.stdout.lines().next().unwrap_or_default()
        ),
        "{}",
        plain.stdout
    );
    let row = crate::support::check_row(&plain.stdout, "prefix");
    assert!(
        line_matches(
            "skip  prefix    no rdna1-patch install in [..]/state to check; `verify --compile` judges the torch's own kernels as they are",
            row
        ),
        "{}",
        plain.stdout
    );
    let compiled = verify(&["--compile"]).ok();
    assert!(
        crate::support::check_row(&compiled.stdout, "kernels").starts_with("ok    kernels"),
        "{}",
        compiled.stdout
    );
    // No torch named: the one install would use, python3's.
    let bare = sb.run_with_state(&["verify", "--compile"], &[]).ok();
    assert!(
        crate::support::check_row(&bare.stdout, "kernels").starts_with("ok    kernels"),
        "{}",
        bare.stdout
    );
}

/// How often `path` was opened while `f` ran: inotify's IN_OPEN events.
fn opens_of(path: &Path, f: impl FnOnce()) -> usize {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: plain inotify calls on a descriptor this function owns.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(fd >= 0);
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN) };
    assert!(wd >= 0, "cannot watch {}", path.display());
    f();
    let mut events = 0;
    let mut buf = [0u8; 4096];
    loop {
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        // Each event here names no file (the watch is on the file itself).
        events += n as usize / std::mem::size_of::<libc::inotify_event>();
    }
    unsafe { libc::close(fd) };
    events
}

/// status sees the installed library by its stamp: unchanged, it is not
/// read again; rewritten in place, it is, and the change is said.
#[test]
fn status_reads_an_unchanged_library_no_more() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, "6.2.41133-dd7f95766");
    sb.install(&[]).ok();
    // A file changed in the last two seconds is hashed each time (a change
    // within a clock tick would not move its stamp): let that pass.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let lib = torch.miopen().canonicalize().unwrap();
    let first = opens_of(&lib, || {
        sb.status().prints("installed:");
    });
    assert!(first >= 1, "the first status hashes the library");
    let again = opens_of(&lib, || {
        sb.status().prints("installed:");
    });
    assert_eq!(again, 0, "an unchanged library is not read again");
    // The same size, a byte changed: the stamp (ctime) moves, it is read.
    let mut bytes = std::fs::read(&lib).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&lib, &bytes).unwrap();
    let prefix = sb.prefix.display().to_string();
    let changed = opens_of(&lib, || {
        sb.run_with_state(&["status", "--prefix", &prefix], &[])
            .check_fails()
            .prints("replaced");
    });
    assert!(changed >= 1);
}

/// Issue 61: a torch with no version.py is damaged, named with the file,
/// and reinstalled whole (not "cannot read ...: no such file").
#[test]
fn a_torch_missing_its_version_py_is_called_damaged() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let t = sb.torch(TorchKind::Rocm, crate::support::HIP);
    std::fs::remove_file(t.dir.join("version.py")).unwrap();
    let run = sb
        .run_with_state(&["install", "--into-torch", "--dry-run"], &[])
        .fails_with(&format!(
            "error: torch at {} is damaged: its version.py is missing, and every torch has one
help: reinstall it with the pip command it came from plus --force-reinstall (`pip install --force-reinstall torch ...`, with the same --index-url), then run this again",
            t.dir.display()
        ));
    assert_eq!(run.stderr.lines().count(), 2, "{}", run.stderr);
}

/// Issue 61: a truncated libtorch_hip.so is a damaged torch, named with
/// the file and reinstalled whole.
#[test]
fn a_truncated_libtorch_hip_is_a_damaged_torch() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", crate::in_place::HIP64, &["gfx1010"]);
    let lib = sb.root.join("site/torch/lib/libtorch_hip.so");
    let len = std::fs::metadata(&lib).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&lib).unwrap();
    f.set_len(len / 2).unwrap();
    let run = sb.run(&["doctor"]).check_fails();
    let lines: Vec<&str> = run.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("FAIL  torch-gpu "))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(
        line_matches(
            &format!(
                "FAIL  torch-gpu torch is damaged: {} is not a usable ELF file: its section header table ([..] bytes at offset [..]) lies past the end of the file ({} bytes)",
                lib.display(),
                len / 2
            ),
            lines[at]
        ),
        "{}",
        run.stdout
    );
    assert_eq!(
        lines[at + 1],
        "                fix: reinstall it with the pip command it came from plus --force-reinstall (`pip install --force-reinstall torch ...`, with the same --index-url), then run this again"
    );
}
