//! A sandbox per test: a real git origin made from the fixture project, a
//! fake ROCm dir, the fixture's patch series and a profile pointing at them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_rdna1-patch");

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "fixture")
        .env("GIT_AUTHOR_EMAIL", "fixture@rdna1-patch.invalid")
        .env("GIT_COMMITTER_NAME", "fixture")
        .env("GIT_COMMITTER_EMAIL", "fixture@rdna1-patch.invalid")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

pub struct Sandbox {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub origin: PathBuf,
    pub rocm: PathBuf,
    pub series: PathBuf,
    pub profile: PathBuf,
    pub work: PathBuf,
    pub prefix: PathBuf,
}

/// What one run printed, and how it ended.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn ok(self) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn fails(self) -> Run {
        assert_eq!(
            self.code,
            Some(1),
            "expected exit 1\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// Object files the build compiled, e.g. "handlehip.cpp.o".
    pub fn compiled(&self) -> Vec<String> {
        self.stderr
            .lines()
            .filter_map(|l| l.split("Building CXX object ").nth(1))
            .map(|o| o.rsplit('/').next().unwrap().to_owned())
            .collect()
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let origin = root.join("origin");
        copy_dir(&fixtures().join("miopen-mini"), &origin);
        git(&origin, &["init", "-q", "-b", "main"]);
        git(&origin, &["add", "-A"]);
        git(&origin, &["commit", "-q", "-m", "MIOpen mini"]);
        git(&origin, &["tag", "-a", "rocm-6.2.4", "-m", "rocm-6.2.4"]);
        let rocm = root.join("rocm");
        std::fs::create_dir_all(rocm.join(".info")).unwrap();
        std::fs::write(rocm.join(".info/version"), "6.2.4-120\n").unwrap();
        let series = root.join("series");
        copy_dir(&fixtures().join("series/miopen-mini"), &series);
        let sb = Sandbox {
            profile: root.join("mini.toml"),
            work: root.join("work"),
            prefix: root.join("prefix"),
            _tmp: tmp,
            root,
            origin,
            rocm,
            series,
        };
        sb.write_profile(|t| t);
        sb
    }

    /// Write the profile, letting the test edit the template text first.
    pub fn write_profile(&self, edit: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(fixtures().join("profiles/mini.toml"))
            .unwrap()
            .replace("@URL@", self.origin.to_str().unwrap())
            .replace("@PATCHES@", "series")
            .replace("@PREFIX@", self.prefix.to_str().unwrap());
        std::fs::write(&self.profile, edit(text)).unwrap();
    }

    pub fn src(&self) -> PathBuf {
        self.work.join("mini/miopen/src")
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(&self.root)
            .env("XDG_CACHE_HOME", self.root.join("xdg-cache"))
            .env("XDG_STATE_HOME", self.root.join("xdg-state"))
            .env_remove("CXX")
            .env_remove("MAKEFLAGS");
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.cmd().args(args).output().unwrap())
    }

    /// `build` with the sandbox's profile, work dir and ROCm, plus `extra`.
    pub fn build_args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "build".into(),
            "--profile".into(),
            self.profile.display().to_string(),
            "--work-dir".into(),
            self.work.display().to_string(),
            "--rocm".into(),
            self.rocm.display().to_string(),
            "--jobs".into(),
            "2".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    pub fn build(&self, extra: &[&str]) -> Run {
        Run::from(self.cmd().args(self.build_args(extra)).output().unwrap())
    }

    /// Replace `from` with `to` in a patch of the series.
    pub fn edit_patch(&self, name: &str, from: &str, to: &str) {
        let p = self.series.join(name);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{name} has no {from:?}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
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
