//! Another user in a test: as root, uid 65534 runs the binary, from what
//! that user can reach. The clone (and so the binary under target/ and the
//! tools dir under target/tmp) may lie under a directory only root can
//! enter, as /root is: whatever the other user needs is staged inside the
//! sandbox, which lies where anyone can enter, so where the clone lies
//! never changes a result. `.ci/run` makes the clone 0700 so that a test
//! reaching outside its sandbox for that user turns CI red.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{BIN, Sandbox, tools};

pub const NOBODY: u32 = 65534;

pub fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this test can run its root-only part; when it cannot, says so
/// in one line of the test's output, so a sudo-less run shows what it did
/// not check.
pub fn root_for(what: &str) -> bool {
    if !as_root() {
        // Past the harness's capture (which eprintln! goes through): the
        // line shows in a passing run too.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "not checked (needs root): {what}");
    }
    as_root()
}

pub fn chown(path: &Path, uid: u32) {
    let ok = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown {}", path.display());
}

/// A path others can reach: every directory on the way lets them in, and
/// the file itself lets them read and run it.
pub fn reachable_by_others(path: &Path) -> bool {
    let Ok(real) = path.canonicalize() else {
        return false;
    };
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode());
    let dirs_open = real
        .ancestors()
        .skip(1)
        .all(|d| mode(d).is_ok_and(|m| m & 0o001 != 0));
    dirs_open && mode(&real).is_ok_and(|m| m & 0o005 == 0o005)
}

/// The python a test under sudo names with --python: under sudo the tool
/// runs python as sudo's user, who cannot reach the harness's tools dir
/// (the clone may lie under a 0700 parent). None, said on stderr, when
/// no system python3 is reachable by others.
pub fn python_for_sudo(what: &str) -> Option<&'static str> {
    const PY: &str = "/usr/bin/python3";
    if reachable_by_others(Path::new(PY)) {
        return Some(PY);
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "not checked (no {PY} others can run): {what}"
    );
    None
}

/// Root, and the python a test under sudo names ([`python_for_sudo`]);
/// None, said on stderr, when either is missing.
pub fn root_and_python_for_sudo(what: &str) -> Option<&'static str> {
    if !root_for(what) {
        return None;
    }
    python_for_sudo(what)
}

/// As [`root_and_python_for_sudo`], with a sandbox whose `site` holds a
/// native gfx1010 torch (2.6.0+rocm6.4): the setup of the tests that run
/// python under sudo. The sandbox, the python, and the site.
pub fn sudo_with_torch(what: &str) -> Option<(Sandbox, &'static str, PathBuf)> {
    let python = root_and_python_for_sudo(what)?;
    let sb = Sandbox::new();
    crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", crate::in_place::HIP64, &["gfx1010"]);
    let site = sb.root.join("site");
    Some((sb, python, site))
}

/// `c` as sudo runs it for `uid` (its SUDO_UID, SUDO_GID and SUDO_USER).
pub fn as_sudo_for(c: &mut Command, uid: u32) -> &mut Command {
    c.env("SUDO_UID", uid.to_string())
        .env("SUDO_GID", uid.to_string())
        .env("SUDO_USER", name_of(uid))
}

fn name_of(uid: u32) -> &'static str {
    match uid {
        NOBODY => "nobody",
        _ => "someone",
    }
}

/// Where sandboxes are made: /tmp when others can enter it, else the temp
/// dir. /tmp first, whatever TMPDIR says: every sandbox is then
/// `/tmp/.tmpXXXXXX`, one length on every machine, and the rows that name
/// a path of it are cut at a glance in the same place (issue 73). A TMPDIR
/// of pam_tmpdir's, /tmp/user/0, is root's alone.
pub fn enterable_tmp() -> PathBuf {
    let ok = |p: &Path| {
        p.canonicalize().is_ok_and(|r| {
            r.ancestors()
                .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
        })
    };
    let tmp = PathBuf::from("/tmp");
    if ok(&tmp) {
        return tmp;
    }
    let fallback = std::env::temp_dir();
    assert!(
        ok(&fallback),
        "neither /tmp nor {} can be entered by other users: the tests that switch user need one",
        fallback.display()
    );
    fallback
}

/// What the other user runs with, inside the sandbox: the binary, and a
/// PATH of the harness's tools that user can reach (each one the tools dir
/// names, or the same name in the system's own directories; a tool only
/// root can reach, such as a python under /root, is the system's or none).
pub struct OtherUser {
    bin: PathBuf,
    path: PathBuf,
}

impl OtherUser {
    pub fn stage(sb: &Sandbox) -> OtherUser {
        let dir = sb.root.join("other-user");
        let path = dir.join("bin");
        std::fs::create_dir_all(&path).unwrap();
        let bin = dir.join("rdna1-patch");
        if std::fs::hard_link(BIN, &bin).is_err() {
            std::fs::copy(BIN, &bin).unwrap();
        }
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        for e in std::fs::read_dir(tools()).unwrap().flatten() {
            let name = e.file_name();
            let found = std::iter::once(e.path())
                .chain(
                    ["/usr/local/bin", "/usr/bin", "/bin"]
                        .iter()
                        .map(|d| Path::new(d).join(&name)),
                )
                .find(|p| reachable_by_others(p));
            if let Some(target) = found {
                std::os::unix::fs::symlink(target.canonicalize().unwrap(), path.join(&name))
                    .unwrap();
            }
        }
        OtherUser { bin, path }
    }

    /// The sandbox's command line as the other user (as root) or as the
    /// caller (when not root already), with `home` as HOME.
    pub fn command(&self, sb: &Sandbox, home: &Path) -> Command {
        let mut c = if as_root() {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
            ])
            .arg(&self.bin);
            c
        } else {
            Command::new(BIN)
        };
        let cmd = sb.cmd();
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if as_root() {
            c.env("PATH", &self.path);
        }
        c.current_dir(&sb.root)
            .env("HOME", home)
            .env_remove("XDG_DATA_HOME");
        c
    }
}
