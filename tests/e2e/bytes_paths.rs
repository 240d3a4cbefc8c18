//! Paths are bytes (issue 59): a state dir or a torch whose path is not
//! UTF-8 (Linux allows any byte but `/` and NUL in a name) never panics
//! the tool; JSON keeps such a path whole, and an error names it with what
//! to do.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rdna1_testkit::FakeTorch;

use crate::in_place::HIP64;
use crate::support::{Run, Sandbox, runtime};

/// `base/café` with the é in Latin-1: not UTF-8.
fn latin1_dir(base: &Path) -> PathBuf {
    let dir = base.join(OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn hex(p: &Path) -> String {
    p.as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `status --json --state-dir` under a Latin-1 name panicked (exit 101);
/// now the document carries the path's bytes.
#[test]
fn status_json_keeps_a_state_dir_that_is_not_utf8() {
    let sb = Sandbox::new();
    let state = latin1_dir(&sb.root).join("state");
    let mut c = sb.cmd();
    c.args(["status", "--json", "--state-dir"]).arg(&state);
    // Nothing is installed there: status says so, exit 3 (docs/rows.md).
    let run = Run::from(c.output().unwrap());
    assert_eq!(run.code, Some(3), "{}{}", run.stdout, run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        doc["state_dir"],
        serde_json::json!({"bytes": hex(&state), "lossy": state.to_string_lossy()}),
        "{}",
        run.stdout
    );
}

/// A native fake torch made under a UTF-8 name (the fixture links with
/// text paths), then moved under a Latin-1 one: its site dir, package dir
/// and libMIOpen.
fn latin1_torch(sb: &Sandbox) -> (PathBuf, PathBuf, PathBuf) {
    let plain = sb.root.join("plain");
    let torch = FakeTorch::native(
        &plain.join("site"),
        runtime(),
        &sb.root,
        "2.6.0+rocm6.4",
        HIP64,
        &["gfx1010"],
    );
    let moved = latin1_dir(&sb.root);
    std::fs::remove_dir(&moved).unwrap();
    std::fs::rename(&plain, &moved).unwrap();
    let at = |p: &Path| moved.join(p.strip_prefix(&plain).unwrap());
    (moved.join("site"), at(&torch.dir), at(&torch.miopen()))
}

/// python answers where torch is with the bytes of its path: a torch
/// under a Latin-1 name is found ("lone leading surrogate" before).
#[test]
fn doctor_finds_a_torch_whose_path_is_not_utf8() {
    let sb = Sandbox::new();
    let (site, dir, _) = latin1_torch(&sb);
    let mut c = sb.cmd();
    c.args(["doctor", "--detail", "--python", "python3"])
        .env("PYTHONPATH", &site);
    let run = Run::from(c.output().unwrap());
    assert!(
        run.stdout.contains(&format!(
            "2.6.0+rocm6.4 (HIP {HIP64}) at {}",
            dir.to_string_lossy()
        )),
        "{}{}",
        run.stdout,
        run.stderr
    );
}

/// A torch under a Latin-1 name: install names the path and says what to
/// do (its journal records paths as text), and changes nothing.
#[test]
fn install_names_a_torch_path_that_is_not_utf8_and_changes_nothing() {
    let sb = Sandbox::new();
    let (_, dir, miopen) = latin1_torch(&sb);
    let before = std::fs::read(&miopen).unwrap();
    let mut c = sb.cmd();
    c.args([
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--torch-dir",
    ])
    .arg(&dir)
    .args(["--state-dir", &sb.state()]);
    let run = Run::from(c.output().unwrap());
    run.fails_with(&format!(
        "error: torch's path {} is not UTF-8; rdna1-patch records the paths it changes as text, so it does not change this torch; nothing was changed
help: move the environment to a path whose name is UTF-8 (`mv` it, or make the venv again there), then run this again",
        dir.to_string_lossy()
    ));
    assert_eq!(std::fs::read(&miopen).unwrap(), before);
}
