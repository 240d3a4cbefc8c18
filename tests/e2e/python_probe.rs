//! A `--python` is asked first whether it is a python, in a few seconds:
//! one that is not is named as not one, one that does not answer as not
//! answering (never as not a python), and Ctrl-C while python is asked
//! about torch is an interruption like any other (exit 130).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{Run, Sandbox};

const NAME_IT: &str = "help: pass the python your torch is installed in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir";

fn install_with(sb: &Sandbox, python: &Path) -> Run {
    sb.run_with_state(
        &[
            "install",
            "--into-torch",
            "--dry-run",
            "--python",
            python.to_str().unwrap(),
        ],
        &[],
    )
}

fn script(sb: &Sandbox, name: &str, text: &str) -> PathBuf {
    let path = sb.root.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_python_that_is_not_one_is_named_so_in_one_line() {
    let sb = Sandbox::new();
    let run = install_with(&sb, Path::new("/bin/ls")).fails_with(&format!(
        "error: /bin/ls is not a python: it did not run a line of python given with -c (exit status: 2)\n{NAME_IT}"
    ));
    assert_eq!(run.stderr.lines().count(), 2, "{}", run.stderr);
    assert_eq!(run.stdout, "");
}

#[test]
fn a_python_that_does_not_answer_is_said_not_to_answer() {
    let sb = Sandbox::new();
    let hung = script(&sb, "hung-python", "#!/bin/sh\nexec sleep 60\n");
    let start = Instant::now();
    let run = install_with(&sb, &hung).fails_with(&format!(
        "error: {0} did not answer in 10 s when asked to run a line of python, and was stopped
help: check that `{0} -c 'print(1)'` answers (a python on slow storage may answer once its files are cached), then run this again; or pass the package with --torch-dir",
        hung.display()
    ));
    assert_eq!(run.stderr.lines().count(), 2, "{}", run.stderr);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn ctrl_c_while_python_is_asked_about_torch_is_exit_130() {
    let sb = Sandbox::new();
    // A real python for the probe; the question about torch hangs.
    let pid_file = sb.root.join("python.pid");
    let python = script(
        &sb,
        "slow-python",
        &format!(
            "#!/bin/sh\ncase \"$2\" in *find_spec*) echo $$ > {}; exec sleep 60;; esac\nexec python3 \"$@\"\n",
            pid_file.display()
        ),
    );
    let state = sb.state();
    let child = sb
        .cmd()
        .args([
            "install",
            "--into-torch",
            "--dry-run",
            "--state-dir",
            &state,
        ])
        .arg("--python")
        .arg(&python)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !pid_file.exists() {
        assert!(start.elapsed().as_secs() < 60, "python was never asked");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let run = Run::from(child.wait_with_output().unwrap());
    assert_eq!(run.code, Some(130), "{}", run.stderr);
    assert_eq!(
        run.stderr,
        format!(
            "error: {} was stopped: interrupted\nhelp: nothing was left half-done; run the same command again to finish\n",
            python.display()
        )
    );
    assert_eq!(run.stdout, "");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .unwrap_or_default()
                .contains(") Z "),
        "the python still runs"
    );
}
