//! `cargo xtask demo` twice, as a newcomer types it: the second compiles
//! nothing. Opt-in (a cold build of the workspace in a target directory of
//! its own, minutes): `cargo test -p xtask --test demo_warm -- --ignored`.
//! Its own target directory, because a nested cargo in this test's would
//! wait on the lock this test's cargo holds.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

/// Every file cargo writes when it compiles or reruns a build script, with
/// its mtime.
fn stamps(target: &Path) -> BTreeMap<String, SystemTime> {
    let mut out = BTreeMap::new();
    for dir in ["debug/deps", "debug/.fingerprint", "debug/build"] {
        let mut todo = vec![target.join(dir)];
        while let Some(p) = todo.pop() {
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else {
                let name = p.strip_prefix(target).unwrap().display().to_string();
                out.insert(name, meta.modified().unwrap());
            }
        }
    }
    out
}

#[test]
#[ignore = "opt-in: a cold build of the workspace in its own target directory (minutes)"]
fn a_second_demo_compiles_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-warm");
    let demo = || {
        let mut c = Command::new(std::env::var("CARGO").unwrap());
        // A shell's environment: none of the variables cargo set for this
        // test.
        for (name, _) in std::env::vars() {
            if name.starts_with("CARGO_") && name != "CARGO_HOME" {
                c.env_remove(name);
            }
        }
        let out = c
            .current_dir(root)
            .env("CARGO_TARGET_DIR", &target)
            .args(["xtask", "demo"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    demo();
    let before = stamps(&target);
    demo();
    let after = stamps(&target);
    let changed: Vec<&String> = after
        .iter()
        .filter(|(name, t)| before.get(*name) != Some(t))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(changed, Vec::<&String>::new());
}
