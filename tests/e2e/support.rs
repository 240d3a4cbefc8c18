//! A sandbox per test (the testkit's fixture in a temp dir), and running the
//! real binary in it. What a run printed, and the checks on it, are in
//! `support_run`; `Run` and `line_matches` are used from here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const BIN: &str = env!("CARGO_BIN_EXE_rdna1-patch");

/// torch.version.hip of the fake ROCm torch: ROCm 6.2, as the fixture build.
pub const HIP: &str = "6.2.41133-dd7f95766";

pub use rdna1_testkit::Fixture;
pub use rdna1_testkit::{FakeTorch, TorchKind, copy_dir, fat_library, fixtures, git, gpus};

pub use crate::support_run::{Run, line_matches};

pub struct Sandbox {
    _tmp: tempfile::TempDir,
    pub fx: Fixture,
    /// The sysfs tree the binary reads its GPUs from; no GPU until a test
    /// says otherwise, whatever this machine has.
    gpus: std::cell::RefCell<PathBuf>,
    /// Whether doctor, verify, status, install, rollback and build print
    /// their lines at a glance (160 characters), as a user sees them; else
    /// [`Sandbox::run`] and [`Sandbox::build`] ask for them whole
    /// (`--detail`), which is what most tests read.
    glance: std::cell::Cell<bool>,
}

impl std::ops::Deref for Sandbox {
    type Target = Fixture;
    fn deref(&self) -> &Fixture {
        &self.fx
    }
}

/// A temp dir where another user can enter, whatever TMPDIR is.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(crate::other_user::enterable_tmp()).unwrap()
}

/// Shared by every test of this run, under target/tmp.
fn shared(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The fake ROCm/torch runtime libraries, built once per run.
pub fn runtime() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| rdna1_testkit::build_runtime(&shared("fake-runtime")))
}

/// The tool's PATH in every test, made once per run: each program of the
/// harness's PATH (the first of each name), but for ROCm's, HIP's and
/// LLVM's (hipcc, hipconfig, clang, lld, rocminfo...) and every python but
/// one `python3`, the harness's, resolved. A ROCm installed on the machine
/// (Debian's hipcc puts hipconfig in /usr/bin, which names /usr/bin/clang)
/// never reaches the tool: a test that wants one gives its own.
pub fn tools() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = shared("tools");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let hidden = |name: &str| {
            [
                "hip",
                "clang",
                "amdclang",
                "amdllvm",
                "roc",
                "llvm",
                "lld",
                "ld.lld",
                "ld64.lld",
                "flang",
                "python",
                "pip",
                "x86_64-linux-gnu-python",
            ]
            .iter()
            .any(|p| name.starts_with(p))
        };
        // The tool itself is on PATH, as an installed one is: the commands
        // it prints name it `rdna1-patch` (src/shell.rs), whatever the
        // clone's path.
        std::os::unix::fs::symlink(BIN, dir.join("rdna1-patch")).unwrap();
        let path = std::env::var_os("PATH").unwrap_or_default();
        for d in std::env::split_paths(&path) {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let name = e.file_name();
                let link = dir.join(&name);
                if hidden(&name.to_string_lossy()) || link.symlink_metadata().is_ok() {
                    continue;
                }
                use std::os::unix::fs::PermissionsExt;
                if std::fs::metadata(e.path())
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                {
                    std::os::unix::fs::symlink(e.path(), link).unwrap();
                }
            }
        }
        let python = rdna1_testkit::run(
            Command::new("python3").args(["-c", "import sys; print(sys.executable)"]),
        );
        let python = String::from_utf8(python.stdout).unwrap();
        std::os::unix::fs::symlink(python.trim(), dir.join("python3")).unwrap();
        dir
    })
}

/// A prefix that `rdna1-patch build` installed from the fixture, built once
/// per run; tests that start from a build copy it.
fn built_prefix() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = shared("built");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let fx = Fixture::create(&root, runtime());
        let sb = Sandbox::of(tempdir(), fx);
        sb.build(&[]).ok();
        sb.fx.prefix.clone()
    })
}

/// The origin the shared build was made from: a user who should get that
/// build points their profile at it.
pub fn built_origin() -> PathBuf {
    built_prefix();
    shared("built").join("origin")
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let tmp = tempdir();
        let fx = Fixture::create(tmp.path(), runtime());
        Sandbox::of(tmp, fx)
    }

    fn of(tmp: tempfile::TempDir, fx: Fixture) -> Sandbox {
        let sb = Sandbox {
            _tmp: tmp,
            fx,
            gpus: PathBuf::new().into(),
            glance: false.into(),
        };
        sb.set_gpus(gpus("no-gpu"));
        sb
    }

    /// From now on, doctor, verify and status print rows as a user sees
    /// them by default: one glance each, not `--detail`.
    pub fn at_a_glance(&self) {
        self.glance.set(true);
    }

    /// Read the GPUs from the sysfs tree `root` from now on: a tree of
    /// tests/fixtures/sysfs (see [`gpus`]) or one the test made. A tree
    /// outside the sandbox (the clone's fixtures) is read from a copy in
    /// it, `<sandbox>/sysfs/<tree>`: rows name where the topology was
    /// read, and a path of the clone's would move where a row at a glance
    /// is cut with the length of the clone's path.
    pub fn set_gpus(&self, root: impl Into<PathBuf>) {
        let root = root.into();
        // A tree that is not there (`/nonexistent`) is handed on as it is.
        let root = if root.starts_with(&self.root) || !root.exists() {
            root
        } else {
            let copy = self.root.join("sysfs").join(root.file_name().unwrap());
            if !copy.exists() {
                copy_dir(&root, &copy);
            }
            copy
        };
        *self.gpus.borrow_mut() = root;
    }

    /// A sandbox whose prefix already holds the fixture's build.
    pub fn built() -> Sandbox {
        let sb = Sandbox::new();
        copy_dir(built_prefix(), &sb.prefix);
        sb
    }

    /// A fake torch package in `<root>/site/torch`.
    pub fn torch(&self, kind: TorchKind, hip: &str) -> FakeTorch {
        FakeTorch::create(
            &self.root.join("site"),
            runtime(),
            kind,
            "2.5.1+rocm6.2",
            hip,
        )
    }

    /// PyPI's default Linux torch, a CUDA build (2.15.0+cu132), in
    /// `<root>/site/torch`: what a newcomer's pip installs.
    pub fn cuda_torch(&self) -> FakeTorch {
        FakeTorch::create(
            &self.root.join("site"),
            runtime(),
            TorchKind::Cuda,
            "2.15.0+cu132",
            "",
        )
    }

    /// Run the binary with `args`; as root, without the capabilities that
    /// let root ignore permission bits, so read-only really is read-only.
    pub fn run_unprivileged(&self, args: &[&str]) -> Run {
        let mut c = if unsafe { libc::geteuid() } == 0 {
            let mut c = Command::new("setpriv");
            c.args(["--bounding-set=-dac_override,-dac_read_search,-fowner", BIN]);
            c
        } else {
            Command::new(BIN)
        };
        self.env(&mut c);
        c.args(args);
        // Lines whole unless the test reads them at a glance (as `run`).
        let verb = ["install", "rollback", "build"]
            .iter()
            .any(|v| args.contains(v));
        if verb && !self.glance.get() {
            c.arg("--detail");
        }
        Run::from(c.output().unwrap())
    }

    pub fn src(&self) -> PathBuf {
        self.work.join("mini/miopen/src")
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        self.env(&mut c);
        c
    }

    pub fn env(&self, c: &mut Command) {
        c.current_dir(&self.root)
            .env("PATH", tools())
            // MIOpen's kernel cache is ~/.cache/miopen: never the real one.
            .env("HOME", self.root.join("home"))
            .env_remove("MIOPEN_CUSTOM_CACHE_DIR")
            .env_remove("MIOPEN_DISABLE_CACHE")
            .env("XDG_CACHE_HOME", self.root.join("xdg-cache"))
            .env("XDG_STATE_HOME", self.root.join("xdg-state"))
            .env("PYTHONPATH", self.root.join("site"))
            .env("CCACHE_DIR", self.root.join("ccache"))
            .env_remove("FAILPOINTS")
            // The harness's own venv or conda environment is not the
            // sandbox's: the tool would ask its python first.
            .env_remove("VIRTUAL_ENV")
            .env_remove("CONDA_PREFIX")
            // Root acts for sudo's user only when a test says so.
            .env_remove("SUDO_UID")
            .env_remove("SUDO_GID")
            .env_remove("SUDO_USER")
            .env_remove("HSA_OVERRIDE_GFX_VERSION")
            .env_remove("CXX")
            .env_remove("MAKEFLAGS")
            .env(rdna1_testkit::SYSFS_ENV, &*self.gpus.borrow());
    }

    /// `import torch` in a real python3 with this sandbox's site-packages;
    /// it must succeed. Returns the process's /proc/self/maps.
    pub fn maps_after_import(&self) -> String {
        let out = rdna1_testkit::run(
            Command::new("python3")
                .args(["-c", "import torch; print(open('/proc/self/maps').read())"])
                .env("PYTHONPATH", self.root.join("site")),
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn run(&self, args: &[&str]) -> Run {
        // Lines whole (`--detail`) unless the test reads them at a glance.
        let verb = matches!(
            args.first(),
            Some(&("doctor" | "verify" | "status" | "install" | "rollback" | "build"))
        );
        let detail = verb && !self.glance.get() && !args.contains(&"--detail");
        let mut cmd = self.cmd();
        cmd.args(args);
        if detail {
            cmd.arg("--detail");
        }
        Run::from(cmd.output().unwrap())
    }

    /// `build` with the sandbox's profile, work dir and ROCm, plus `extra`.
    pub fn build_args(&self, extra: &[&str]) -> Vec<String> {
        let mut args = self.fx.build_args();
        args.extend(["--jobs".into(), "2".into()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    pub fn build(&self, extra: &[&str]) -> Run {
        let mut cmd = self.cmd();
        cmd.args(self.build_args(extra));
        // Lines whole unless the test reads them at a glance.
        if !self.glance.get() {
            cmd.arg("--detail");
        }
        Run::from(cmd.output().unwrap())
    }

    /// Replace `from` with `to` in a patch of the series.
    pub fn edit_patch(&self, name: &str, from: &str, to: &str) {
        let p = self.series.join(name);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{name} has no {from:?}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    }
}

impl Sandbox {
    /// Where this sandbox's transactions are kept.
    pub fn state(&self) -> String {
        self.root.join("state").display().to_string()
    }

    /// `args`, then `--state-dir` of this sandbox, then `extra`.
    pub fn run_with_state(&self, args: &[&str], extra: &[&str]) -> Run {
        let state = self.state();
        let all: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--state-dir", &state])
            .chain(extra.iter().copied())
            .collect();
        self.run(&all)
    }

    pub fn install(&self, extra: &[&str]) -> Run {
        let prefix = self.prefix.display().to_string();
        self.run_with_state(&["install", "--into-torch", "--prefix", &prefix], extra)
    }

    pub fn rollback(&self, extra: &[&str]) -> Run {
        self.run_with_state(&["rollback"], extra)
    }

    /// `status` of this sandbox's state dir and prefix, which must succeed.
    pub fn status(&self) -> Run {
        let prefix = self.prefix.display().to_string();
        self.run_with_state(&["status", "--prefix", &prefix], &[])
            .ok()
    }

    pub fn verify(&self, extra: &[&str]) -> Run {
        let prefix = self.prefix.display().to_string();
        self.run_with_state(&["verify", "--prefix", &prefix], extra)
    }
}

/// Every file below `dir` (but .git) with its bytes and mtime.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    fn walk(
        base: &Path,
        dir: &Path,
        out: &mut BTreeMap<PathBuf, (Vec<u8>, std::time::SystemTime)>,
    ) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_name() == ".git" {
                continue;
            }
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(base, &e.path(), out);
            } else if ft.is_file() {
                let m = e.metadata().unwrap().modified().unwrap();
                out.insert(
                    e.path().strip_prefix(base).unwrap().to_owned(),
                    (std::fs::read(e.path()).unwrap(), m),
                );
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

pub fn contains_bytes(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// `program` is on the tool's PATH ([`tools`]).
pub fn on_path(program: &str) -> bool {
    tools().join(program).is_file()
}

/// The tool's PATH with `dir` first.
pub fn path_with(dir: &Path) -> String {
    format!("{}:{}", dir.display(), tools().display())
}

/// The row of check `name` in a doctor or verify report, e.g. "ok    prefix
/// ...": status 4 wide, two spaces, the name 9 wide.
pub fn check_row<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find(|l| {
            l.get(6..)
                .is_some_and(|r| r.starts_with(&format!("{name:<9} ")))
        })
        .unwrap_or_else(|| panic!("no {name} row in:\n{report}"))
}

/// A tmpfs mounted for one test, unmounted when dropped. Mounting needs
/// root (as CI runs): a plain user gets None, and the test says in one
/// line what it did not check.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        if !crate::other_user::root_for("a full or foreign filesystem (mounts a tmpfs)") {
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "this test mounts a tmpfs and needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Tmpfs(dir.to_owned()))
    }

    /// A tmpfs mounted read-only (empty), as a read-only mount of the
    /// user's disk is.
    pub fn read_only(dir: &Path) -> Option<Tmpfs> {
        let t = Tmpfs::mount(dir, "1m")?;
        let out = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(t)
    }

    /// A tmpfs of `size` with no room left: a file fills it.
    pub fn full(dir: &Path, size: &str) -> Option<Tmpfs> {
        let t = Tmpfs::mount(dir, size)?;
        let mut f = std::fs::File::create(dir.join("filler")).unwrap();
        let block = vec![0u8; 64 << 10];
        while std::io::Write::write_all(&mut f, &block).is_ok() {}
        let _ = std::io::Write::write_all(&mut f, &[0u8; 1]);
        Some(t)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `md5sum -c` of a prefix's MD5SUMS, run in the prefix as a user would:
/// it must pass; what it printed.
pub fn md5sum_c(prefix: &Path) -> String {
    let out = std::process::Command::new("md5sum")
        .args(["-c", "share/rdna1-patch/MD5SUMS"])
        .current_dir(prefix)
        .output()
        .expect("md5sum");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "md5sum -c failed: {text}");
    text
}

/// The built-in profiles' compilers where ROCm keeps them: g++ behind
/// AMD's names.
pub fn compiler_shims(llvm: &Path) {
    std::fs::create_dir_all(llvm).unwrap();
    for (name, real) in [("amdclang", "gcc"), ("amdclang++", "g++")] {
        let p = llvm.join(name);
        std::fs::write(&p, format!("#!/bin/sh\nexec {real} \"$@\"\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
