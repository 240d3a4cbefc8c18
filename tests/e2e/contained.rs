//! Children are contained (issue 55, finding 7): a torch whose import
//! calls setsid() and double-forks does not outlive `verify --runtime` nor
//! `verify --smoke`, at their end or at their time limit, and a comgr that
//! does the same does not outlive the compile child. Seen failing on
//! d772f85: the escaped process was still running after verify exited.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{HIP, Sandbox, TorchKind, gpus};

/// torch's import leaves a grandchild in a session of its own, which
/// writes its pid to `pidfile` and sleeps; the import then `hangs` or not.
fn escaping_torch(sb: &Sandbox, pidfile: &Path, hangs: bool) {
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let init = torch.dir.join("__init__.py");
    let stock = std::fs::read_to_string(&init).unwrap();
    let hang = if hangs {
        "\nimport time\ntime.sleep(600)\n"
    } else {
        ""
    };
    std::fs::write(
        &init,
        format!(
            "{stock}
import os as _os, time as _time
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _fd = _os.open({pid:?}, _os.O_WRONLY | _os.O_CREAT | _os.O_APPEND, 0o644)
        _os.write(_fd, (str(_os.getpid()) + '\\n').encode())
        _os.close(_fd)
        _time.sleep(600)
    _os._exit(0)
_os.wait()
{hang}",
            pid = pidfile.display().to_string()
        ),
    )
    .unwrap();
}

/// Every pid written to `pidfile` is gone (not even a zombie of ours), a
/// moment after the command returned; any left running is killed.
fn all_gone(pidfile: &Path) -> Vec<i32> {
    let text = std::fs::read_to_string(pidfile).unwrap_or_default();
    let pids: Vec<i32> = text.lines().filter_map(|l| l.parse().ok()).collect();
    assert!(!pids.is_empty(), "the import wrote no pid");
    std::thread::sleep(Duration::from_millis(200));
    let alive: Vec<i32> = pids
        .into_iter()
        .filter(|p| Path::new(&format!("/proc/{p}")).exists())
        .collect();
    for p in &alive {
        // SAFETY: kill(2) of a test process left behind.
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    alive
}

#[test]
fn a_torch_that_escapes_its_group_does_not_outlive_verify_runtime() {
    let sb = Sandbox::built();
    let pidfile = sb.root.join("escaped.pid");
    escaping_torch(&sb, &pidfile, false);
    sb.install(&[]).ok();
    let _ = std::fs::remove_file(&pidfile);
    let run = sb.verify(&["--runtime", "--timeout", "20"]).ok();
    assert!(
        run.stdout.lines().any(|l| l.starts_with("ok    runtime")),
        "{}",
        run.stdout
    );
    assert_eq!(all_gone(&pidfile), Vec::<i32>::new(), "after its end");
    // The import hangs: the limit ends the escaped process too.
    escaping_torch(&sb, &pidfile, true);
    std::fs::remove_file(&pidfile).unwrap();
    let start = Instant::now();
    sb.verify(&["--runtime", "--timeout", "3"]).check_fails();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(all_gone(&pidfile), Vec::<i32>::new(), "at the limit");
}

#[test]
fn a_torch_that_escapes_its_group_does_not_outlive_the_smoke_battery() {
    let sb = Sandbox::built();
    let pidfile = sb.root.join("escaped.pid");
    escaping_torch(&sb, &pidfile, false);
    sb.install(&[]).ok();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let _ = std::fs::remove_file(&pidfile);
    crate::smoke::smoke(&sb, &["--timeout", "20"], &[]);
    assert_eq!(all_gone(&pidfile), Vec::<i32>::new());
}

/// The compile child: a comgr whose loading leaves a process in a session
/// of its own, which must not outlive `verify --compile`.
#[test]
fn a_comgr_that_escapes_its_group_does_not_outlive_the_compile_child() {
    let sb = Sandbox::new();
    let torch = crate::comgr::installed(&sb);
    let pidfile = sb.root.join("escaped.pid");
    crate::comgr::fake_comgr_with(
        &torch.lib.join("libamd_comgr.so.2"),
        "FAIL",
        &[format!("-DESCAPE=\"{}\"", pidfile.display())],
    );
    crate::comgr::verify_compile(&sb, &[]).check_fails();
    assert_eq!(all_gone(&pidfile), Vec::<i32>::new());
}
