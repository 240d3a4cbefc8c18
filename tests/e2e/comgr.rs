//! `verify --compile` against comgr libraries that behave badly, built with
//! the real cc from tests/fixtures/fake-comgr: one that others could have
//! written is never loaded; one that hangs, aborts, claims a 2^40-byte log
//! or fails every compile ends the check with a row that says so.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use rdna1_testkit::FakeTorch;

use crate::support::{Run, Sandbox, check_row, fixtures};

/// A native torch (code for gfx1010) with its library fixed in place, so
/// verify has a prefix, a torch, and an original to compile.
pub(crate) fn installed(sb: &Sandbox) -> FakeTorch {
    let torch = crate::in_place::torch_of(sb, "2.6.0+rocm6.4", "6.4.43484-123eb5128", &["gfx1010"]);
    sb.install(&["--profile", "rocm-6.4.3"]).ok();
    torch
}

/// The fake comgr built in `mode` (FAIL, HANG, HUGE, ABORT) at `to`;
/// with a `marker`, loading it leaves that file.
pub(crate) fn fake_comgr(to: &Path, mode: &str, marker: Option<&Path>) {
    let marker = marker.map(|m| format!("-DMARKER=\"{}\"", m.display()));
    fake_comgr_with(to, mode, marker.as_slice());
}

/// [`fake_comgr`] with more of cc's arguments (`-DREPORT=...`, libraries).
pub(crate) fn fake_comgr_with(to: &Path, mode: &str, extra: &[String]) {
    // torch_of links the real comgr here: never write through that link.
    let _ = std::fs::remove_file(to);
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", &format!("-DMODE_{mode}")]);
    cc.arg(fixtures().join("fake-comgr/comgr.c"))
        .args(extra)
        .arg("-o")
        .arg(to);
    rdna1_testkit::run(&mut cc);
}

/// `verify --compile` with `extra`; a guard ends it if it never does, so
/// a hang fails the test instead of holding the suite.
pub(crate) fn verify_compile(sb: &Sandbox, extra: &[&str]) -> Run {
    let mut c = verify_compile_cmd(sb);
    c.args(extra);
    Run::from(c.output().unwrap())
}

/// The command [`verify_compile`] runs, for a test to add its environment.
pub(crate) fn verify_compile_cmd(sb: &Sandbox) -> Command {
    verify_compile_cmd_with(sb, "python3")
}

/// [`verify_compile_cmd`] asking `python` where torch is.
pub(crate) fn verify_compile_cmd_with(sb: &Sandbox, python: &str) -> Command {
    let prefix = sb.prefix.display().to_string();
    let state = sb.state();
    let mut c = Command::new("timeout");
    c.arg("300").arg(crate::support::BIN);
    sb.env(&mut c);
    c.args(["verify", "--detail", "--prefix", &prefix])
        .args(["--state-dir", &state, "--profile", "rocm-6.4.3"])
        .args(["--python", python, "--compile"]);
    c
}

/// The kernels row and its fix, whole, of a verify whose compile check
/// could not run: not checked, which is no pass (exit 1).
pub(crate) fn kernels_failed(run: Run, row: &str, fix: &str) {
    let run = run.check_fails();
    let got = check_row(&run.stdout, "kernels");
    assert_eq!(
        got,
        format!("----  kernels   not checked: {row}"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.starts_with(
            "verdict: not checked: batch norm: its kernels could not be compiled to judge them (see kernels)"
        ),
        "{}",
        run.stdout
    );
    let next = run.stdout.lines().skip_while(|l| *l != got).nth(1);
    assert_eq!(next.map(str::trim), Some(format!("fix: {fix}").as_str()));
}

/// Issue 74: a run loads its comgr once per core at most, whatever the
/// number of compiles, rounds and targets: each compile child is kept
/// warm for the whole run. On 12d22e6 every batch started a child that
/// loaded comgr again (26 loads in a dry run of Debian's 6.4.3).
#[test]
fn a_run_loads_its_comgr_once_per_core_at_most() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    let loads = sb.root.join("comgr-loads");
    fake_comgr_with(
        &comgr,
        "FAIL",
        &[format!("-DLOADS=\"{}\"", loads.display())],
    );
    // Every compile fails: each case asks its front end, its code, the
    // text blanked and the control, for every RDNA1 target, of the
    // installed library and of the original.
    verify_compile(&sb, &[]).check_fails();
    let n = std::fs::read_to_string(&loads)
        .unwrap_or_default()
        .lines()
        .count();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        (1..=cores).contains(&n),
        "comgr was loaded {n} times by one run on {cores} cores"
    );
}

#[test]
fn a_comgr_that_fails_every_compile_is_said_to_not_to_lack_kernels() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "FAIL", None);
    kernels_failed(
        verify_compile(&sb, &[]),
        &format!(
            "comgr 2.4 ({}) failed to compile even the control target gfx1030: MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: this comgr fails every compile",
            comgr.display()
        ),
        "this comgr compiles none of MIOpen's batch-norm kernels, so the check proves nothing: reinstall torch (it bundles its comgr), or leave out --compile",
    );
}

#[test]
fn a_comgr_that_never_returns_is_stopped_at_the_time_limit() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "HANG", None);
    kernels_failed(
        verify_compile(&sb, &["--timeout", "2"]),
        &format!(
            "comgr {} did not finish compiling MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL for gfx1010 within 2 s, and was stopped",
            comgr.display()
        ),
        "a compile takes seconds: this comgr hangs on MIOpen's kernels (--timeout SECS gives each compile longer)",
    );
}

#[test]
fn a_comgr_log_of_a_terabyte_is_refused_not_allocated_and_an_abort_is_said() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "HUGE", None);
    kernels_failed(
        verify_compile(&sb, &[]),
        &format!(
            "comgr 2.4 ({}) failed to compile even the control target gfx1030: MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: comgr's compile log is 1099511627776 bytes, over the 16 MiB any compile leaves",
            comgr.display()
        ),
        "this comgr compiles none of MIOpen's batch-norm kernels, so the check proves nothing: reinstall torch (it bundles its comgr), or leave out --compile",
    );
    fake_comgr(&comgr, "ABORT", None);
    let run = verify_compile(&sb, &[]).check_fails();
    let row = check_row(&run.stdout, "kernels");
    assert_eq!(
        row,
        format!(
            "----  kernels   not checked: comgr {} failed compiling MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL for gfx1010: the compile died of signal 6 (SIGABRT); it said: fake comgr: giving up",
            comgr.display()
        )
    );
}

/// A comgr that writes to stderr without end: the compile child keeps a
/// compile's stderr in memory, so it is stopped at the child's file size
/// limit (1 GiB), a death said as such, never a verdict.
#[test]
fn a_comgr_that_writes_to_stderr_without_end_is_stopped() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "SPEW", None);
    let run = verify_compile(&sb, &[]).check_fails();
    let row = check_row(&run.stdout, "kernels");
    assert_eq!(
        row,
        format!(
            "----  kernels   not checked: comgr {} failed compiling MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL for gfx1010: the compile died of signal {} (SIGXFSZ)",
            comgr.display(),
            libc::SIGXFSZ
        )
    );
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), None).unwrap();
}

/// Where others could write the comgr or its directory, it is refused
/// before it is loaded (its constructor would leave the marker), and why
/// is said; as root, a directory of another user's too.
#[test]
fn a_comgr_others_could_write_is_never_loaded() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let marker = sb.root.join("comgr-loaded");
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "FAIL", Some(&marker));
    let lib = torch.lib.display().to_string();
    let refused = |why: &str, fix: &str| {
        kernels_failed(
            verify_compile(&sb, &[]),
            &format!("will not load comgr {}: {why}", comgr.display()),
            fix,
        );
        assert!(!marker.exists(), "the comgr was loaded: {why}");
    };
    chmod(&torch.lib, 0o777);
    refused(
        &format!(
            "its directory {lib} can be written by anyone (mode 777), and loading it runs its code"
        ),
        &format!("let only its owner write it (`chmod go-w {lib}`), then run this again"),
    );
    chmod(&torch.lib, 0o755);
    chmod(&comgr, 0o664);
    refused(
        "it can be written by its group (mode 664), and loading it runs its code",
        &format!(
            "let only its owner write it (`chmod go-w {}`), then run this again",
            comgr.display()
        ),
    );
    chmod(&comgr, 0o644);
    // A name that leads to a file in a directory anyone can write.
    let shared = sb.root.join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let real = shared.join("libamd_comgr.so.2.4.0");
    std::fs::rename(&comgr, &real).unwrap();
    std::os::unix::fs::symlink(&real, &comgr).unwrap();
    refused(
        &format!(
            "its directory {} can be written by anyone (mode 1777), and loading it runs its code",
            shared.display()
        ),
        &format!(
            "let only its owner write it (`chmod go-w {}`), then run this again",
            shared.display()
        ),
    );
    std::fs::remove_file(&comgr).unwrap();
    std::fs::rename(&real, &comgr).unwrap();
    if crate::other_user::root_for("root refusing a comgr directory another user owns") {
        chown(&torch.lib, 65534);
        refused(
            &format!(
                "its directory {lib} belongs to uid 65534, and rdna1-patch runs as root: loading it would run that user's code as root"
            ),
            "run rdna1-patch as the user who owns torch, without sudo",
        );
        chown(&torch.lib, 0);
    }
    // Trusted, it is loaded (in the compile's child process).
    verify_compile(&sb, &[]).check_fails();
    assert!(marker.exists(), "the same comgr, trusted, is loaded");
}

/// The compile child on its own: a batch of jobs in one child, answered
/// per job, through Debian's real comgr and this binary.
#[test]
fn one_child_answers_a_batch_of_jobs_job_by_job() {
    use rdna1_patch::comgr::child::{Answer, Batch, Job, compile};
    let comgr = Path::new("/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2");
    let kernel = |ok: bool| {
        let body = if ok {
            "p[0] = 1;"
        } else {
            "p[0] = undeclared;"
        };
        format!("__kernel void k(__global int* p) {{ {body} }}\n").into_bytes()
    };
    let mut batch = Batch::default();
    let good = batch.add_source("good.cl".into(), kernel(true));
    let bad = batch.add_source("bad.cl".into(), kernel(false));
    let options: Vec<String> = rdna1_patch::comgr::MIOPEN_OPTIONS
        .iter()
        .map(|o| (*o).to_owned())
        .collect();
    let job = |source, target: &str, after| Job {
        source,
        target: target.into(),
        options: options.clone(),
        after,
        front_end: false,
    };
    let first = batch.add_job(job(bad, "gfx1010", None));
    batch.add_job(job(bad, "gfx1010", Some(first)));
    batch.add_job(job(good, "gfx1010", None));
    batch.add_job(job(good, "gfx1030", Some(2)));
    let answers = compile(
        Path::new(crate::support::BIN),
        comgr,
        &batch,
        std::time::Duration::from_secs(300),
    )
    .expect("apt-get install libamd-comgr2 libclang-common-15-dev");
    assert_eq!(answers.version.0, 2);
    let Answer::Failed(why) = &answers.answers[0] else {
        panic!("{:?}", answers.answers);
    };
    assert!(why.contains("undeclared"), "{why}");
    assert_eq!(answers.answers[1], Answer::Skipped);
    // Each compiled job names its code object's SHA-256.
    for a in &answers.answers[2..] {
        assert!(
            matches!(a, Answer::Compiled(d) if d.len() == 64),
            "{:?}",
            answers.answers
        );
    }
}

/// A comgr that dies gives no verdict: the diagnosis stops with what
/// happened, install changes nothing, and nothing is kept in the cache as
/// if the kernels had been judged.
#[test]
fn a_comgr_that_dies_stops_the_diagnosis_and_leaves_no_verdict() {
    let sb = Sandbox::new();
    let torch =
        crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", "6.4.43484-123eb5128", &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "ABORT", None);
    let run = sb.install(&["--profile", "rocm-6.4.3"]).fails();
    run.says(&format!(
        "error: comgr {} failed compiling MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL for gfx1010: the compile died of signal 6 (SIGABRT); it said: fake comgr: giving up",
        comgr.display()
    ));
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    assert!(!sb.prefix.exists());
    let kept: Vec<_> = std::fs::read_dir(sb.root.join("xdg-cache/rdna1-patch/diagnosis"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
}

/// Issue 55, "not tried yet": a compiler that answers every compile with
/// bytes that are no code object is a bounded, named error, and nothing
/// of it is kept: the next run judges again. On d772f85 its junk counted
/// as compiling, and "nothing to fix" was cached.
#[test]
fn a_comgr_that_answers_garbage_is_named_and_nothing_is_kept() {
    let sb = Sandbox::new();
    let torch =
        crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", "6.4.43484-123eb5128", &["gfx1010"]);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "GARBAGE", None);
    let run = sb.install(&["--profile", "rocm-6.4.3", "--dry-run"]);
    run.fails_with(&format!(
        "error: comgr {} answered the compile of [..] for gfx1010 with 48 bytes that are no ELF file, not an AMD GPU code object: no verdict of it can be believed
help: reinstall torch (it bundles its comgr) or the ROCm whose comgr this is, then run this again; nothing was changed or kept",
        comgr.display()
    ));
    let kept: Vec<_> = walkdir::WalkDir::new(sb.root.join("xdg-cache"))
        .into_iter()
        .flatten()
        .filter(|e| {
            e.path()
                .extension()
                .is_some_and(|x| x == "json" || x == "proof")
        })
        .map(|e| e.path().to_owned())
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
    assert!(!sb.prefix.exists());
}
