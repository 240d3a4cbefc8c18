//! Which python to ask for the user's torch, and why that one. Installed
//! from a wheel, the binary runs from an environment of its own (pipx's
//! venv, uv's tool environment), and `uv tool run` puts that environment's
//! bin first on PATH: its python3 is the tool's, never the user's, and has
//! no torch. So that environment is passed over (its python on PATH, a
//! VIRTUAL_ENV naming it), unless torch is installed in it (`pip install
//! rdna1-patch` into the user's own torch venv); an active venv or conda
//! environment of the user's comes before PATH.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The python chosen, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub python: PathBuf,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// `--python`.
    Given,
    /// `$VIRTUAL_ENV`, a venv the user activated.
    VirtualEnv,
    /// `$CONDA_PREFIX`, the active conda environment.
    Conda,
    /// The environment the binary runs from, which holds torch.
    OwnWithTorch,
    /// The first python3 on PATH; `past` is the tool's own environment,
    /// when one was passed over.
    Path { past: Option<PathBuf> },
}

impl fmt::Display for Chosen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.python.display())?;
        match &self.why {
            Why::Given => write!(f, "--python"),
            Why::VirtualEnv => write!(f, "the active venv, $VIRTUAL_ENV"),
            Why::Conda => write!(f, "the active conda environment, $CONDA_PREFIX"),
            Why::OwnWithTorch => write!(f, "rdna1-patch's own environment, which holds torch"),
            Why::Path { past: None } => write!(f, "the first python3 on PATH"),
            Why::Path { past: Some(own) } => write!(
                f,
                "the first python3 on PATH outside rdna1-patch's own environment {}",
                own.display()
            ),
        }?;
        write!(f, ")")
    }
}

/// What the choice is made from.
#[derive(Debug, Default)]
pub struct Env {
    /// The running binary (`current_exe`, symlinks resolved).
    pub exe: Option<PathBuf>,
    pub virtual_env: Option<PathBuf>,
    pub conda_prefix: Option<PathBuf>,
    pub path: Option<OsString>,
}

impl Env {
    pub fn of_process() -> Env {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Env {
            exe: std::env::current_exe().ok(),
            virtual_env: var("VIRTUAL_ENV"),
            conda_prefix: var("CONDA_PREFIX"),
            path: std::env::var_os("PATH"),
        }
    }
}

/// `--python` when given, else the python the process's environment
/// points at ([`choose_in`]), which a root shell runs only when no one
/// but root can change it ([`root_may_run`]).
pub fn choose(given: Option<&Path>) -> anyhow::Result<Chosen> {
    match given {
        Some(p) => Ok(Chosen {
            python: p.to_owned(),
            why: Why::Given,
        }),
        None => {
            let chosen = choose_in(&Env::of_process());
            root_may_run(&chosen)?;
            Ok(chosen)
        }
    }
}

/// Run from a root shell (root, no sudo: `su` without `-` and doas's
/// keepenv keep the user's VIRTUAL_ENV, CONDA_PREFIX and PATH), a python
/// the environment chose would run as root, with every `.pth` file and
/// `sitecustomize` of its environment (issue 69). It is run only when no
/// one but root can change it, by its name or its real path, nor
/// anything of the environment it heads (the writers check a torch
/// gets); otherwise an error whose help is `--python`. Under sudo every
/// python runs as sudo's user (`proc::python`), and `--python` is root's
/// own choice.
fn root_may_run(c: &Chosen) -> anyhow::Result<()> {
    if !crate::owner::is_root() || crate::owner::invoking_user().is_some() {
        return Ok(());
    }
    let mut found = None;
    // The directory that holds the name (who may replace it; a symlink's
    // own mode bits mean nothing), and the file it leads to.
    let real = c.python.canonicalize().unwrap_or_else(|_| c.python.clone());
    let dir = c.python.parent().unwrap_or(Path::new("/")).to_owned();
    for p in [&dir, &real] {
        let w = crate::owner::Writers::of(p)?;
        let others = w.others_than(None);
        if !others.is_empty() {
            found = Some((others, w.first.unwrap_or_else(|| p.clone())));
            break;
        }
    }
    let env_dir = match c.why {
        Why::VirtualEnv | Why::Conda | Why::OwnWithTorch => {
            c.python.parent().and_then(Path::parent)
        }
        _ => None,
    };
    if found.is_none()
        && let Some(dir) = env_dir
    {
        found = crate::owner::tree_writers(dir)?;
    }
    let Some((who, at)) = found else {
        return Ok(());
    };
    let through = match at == c.python {
        true => String::new(),
        false => format!(" (through {})", at.display()),
    };
    Err(crate::error::hint(
        format!(
            "the python chosen, {c}, can be changed by {}{through}; run as root, rdna1-patch runs no python another user controls; nothing was run",
            crate::owner::describe(&who),
        ),
        "name a python only root can change with `--python` (e.g. `--python /usr/bin/python3`), or run rdna1-patch as the user whose environment that is",
    ))
}

/// The user's active venv, then their conda environment, then the tool's
/// own environment if it holds torch, then the first python3 on PATH
/// outside the tool's own environment; `python3` when PATH has none
/// (running it then says it is not installed).
pub fn choose_in(env: &Env) -> Chosen {
    let own = env.exe.as_deref().and_then(own_environment);
    let is_own = |dir: &Path| own.as_deref().is_some_and(|o| same_dir(o, dir));
    let active = [
        (&env.virtual_env, Why::VirtualEnv),
        (&env.conda_prefix, Why::Conda),
    ];
    for (dir, why) in active {
        if let Some(dir) = dir.as_deref().filter(|d| !is_own(d)) {
            let python = dir.join("bin/python");
            if python.is_file() {
                return Chosen { python, why };
            }
        }
    }
    if let Some(own) = &own
        && holds_torch(own)
    {
        return Chosen {
            python: own.join("bin/python"),
            why: Why::OwnWithTorch,
        };
    }
    let first = env
        .path
        .iter()
        .flat_map(std::env::split_paths)
        .filter(|d| !is_own(d.parent().unwrap_or(d)))
        .map(|d| d.join("python3"))
        .find(|p| is_executable(p));
    Chosen {
        python: first.unwrap_or_else(|| "python3".into()),
        why: Why::Path { past: own },
    }
}

/// The venv `exe` runs from: its bin's parent, when that holds the
/// pyvenv.cfg every venv (pip's, pipx's, uv's) has.
fn own_environment(exe: &Path) -> Option<PathBuf> {
    let root = exe.parent()?.parent()?;
    root.join("pyvenv.cfg").is_file().then(|| root.to_owned())
}

/// The same directory, by its real path (a venv reached through a
/// symlink, a PATH entry with `..`).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// torch installed in the venv `root`: lib/python3.*/site-packages/torch,
/// read from the directory, not by starting its python.
fn holds_torch(root: &Path) -> bool {
    std::fs::read_dir(root.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.path().join("site-packages/torch/version.py").is_file())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A venv as pip, pipx and uv lay one out: bin/python3 and bin/python,
    /// pyvenv.cfg; torch when asked.
    fn venv(root: &Path, torch: bool) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        for name in ["python", "python3", "rdna1-patch"] {
            let p = root.join("bin").join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        if torch {
            let t = root.join("lib/python3.11/site-packages/torch");
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("version.py"), "__version__ = '2.5.1'\n").unwrap();
        }
        root.to_owned()
    }

    fn path(dirs: &[&Path]) -> Option<OsString> {
        Some(std::env::join_paths(dirs).unwrap())
    }

    #[test]
    fn the_tools_own_environment_is_passed_over_on_path_and_in_virtual_env() {
        let tmp = tempfile::tempdir().unwrap();
        let tool = venv(&tmp.path().join("tool"), false);
        let user = venv(&tmp.path().join("user"), true);
        // As `uv tool run` starts it: the tool's bin first on PATH, and
        // VIRTUAL_ENV naming the tool's environment (uv PR #15284).
        let env = Env {
            exe: Some(tool.join("bin/rdna1-patch")),
            virtual_env: Some(tool.clone()),
            conda_prefix: None,
            path: path(&[&tool.join("bin"), &user.join("bin")]),
        };
        let chosen = choose_in(&env);
        assert_eq!(chosen.python, user.join("bin/python3"));
        assert_eq!(
            chosen.to_string(),
            format!(
                "{} (the first python3 on PATH outside rdna1-patch's own environment {})",
                user.join("bin/python3").display(),
                tool.display()
            )
        );
        // The user's venv active comes before PATH.
        let active = Env {
            virtual_env: Some(user.clone()),
            path: path(&[&tool.join("bin")]),
            ..env
        };
        let chosen = choose_in(&active);
        assert_eq!(
            chosen.to_string(),
            format!(
                "{} (the active venv, $VIRTUAL_ENV)",
                user.join("bin/python").display()
            )
        );
    }

    #[test]
    fn conda_then_own_environment_with_torch_then_path() {
        let tmp = tempfile::tempdir().unwrap();
        let conda = venv(&tmp.path().join("conda"), true);
        let own = venv(&tmp.path().join("own"), true);
        let other = venv(&tmp.path().join("other"), false);
        let mut env = Env {
            exe: Some(own.join("bin/rdna1-patch")),
            virtual_env: None,
            conda_prefix: Some(conda.clone()),
            path: path(&[&other.join("bin")]),
        };
        assert_eq!(choose_in(&env).why, Why::Conda);
        assert_eq!(choose_in(&env).python, conda.join("bin/python"));
        // pip install rdna1-patch into the venv torch is in: that one.
        env.conda_prefix = None;
        assert_eq!(choose_in(&env).why, Why::OwnWithTorch);
        // No venv around the binary (cargo install): PATH, as before.
        env.exe = Some(tmp.path().join("cargo/bin/rdna1-patch"));
        assert_eq!(
            choose_in(&env),
            Chosen {
                python: other.join("bin/python3"),
                why: Why::Path { past: None }
            }
        );
        // Nothing on PATH: python3, whose run says it is not installed.
        env.path = None;
        assert_eq!(choose_in(&env).python, PathBuf::from("python3"));
        assert_eq!(
            choose(Some(Path::new("/x/python"))).unwrap().to_string(),
            "/x/python (--python)"
        );
    }
}
