//! What the test suite needs from the system (.ci/needs, the list .ci/run
//! installs from), checked before `ci` builds anything: a newcomer without
//! a package gets one line naming it, not a panic deep in a test.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// One line of .ci/needs.
#[derive(Debug, PartialEq)]
pub enum Need {
    /// A program on PATH, and the Debian package that has it.
    Program { name: String, package: String },
    /// A Debian package (libraries, headers).
    Package(String),
    /// A module python3 imports, and the package that has it.
    Python { module: String, package: String },
    /// A PyPI package at an exact version, in the clone's own venv
    /// ([`PYTOOLS`]): the wheel's tests build and run it with these.
    Pip { name: String, version: String },
}

/// The venv, under the clone's target dir, that `.ci/run` installs the
/// `pip` needs into; `cargo xtask ci` runs maturin and uv from its bin.
pub const PYTOOLS: &str = "target/pytools";

pub fn parse(text: &str) -> Result<Vec<Need>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let need = match words.as_slice() {
            [] => continue,
            [w, ..] if w.starts_with('#') => continue,
            ["cmd", name, package] => Need::Program {
                name: name.to_string(),
                package: package.to_string(),
            },
            ["deb", package] => Need::Package(package.to_string()),
            ["py", module, package] => Need::Python {
                module: module.to_string(),
                package: package.to_string(),
            },
            ["pip", spec] => match spec.split_once("==") {
                Some((name, version)) if !name.is_empty() && !version.is_empty() => Need::Pip {
                    name: name.to_string(),
                    version: version.to_string(),
                },
                _ => bail!(
                    ".ci/needs line {}: {spec:?} is no pinned PyPI package (NAME==VERSION)",
                    n + 1
                ),
            },
            _ => bail!(".ci/needs line {}: cannot read {line:?}", n + 1),
        };
        out.push(need);
    }
    Ok(out)
}

fn quiet(c: &mut Command) -> bool {
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The packages of `needs` this machine lacks, each once, in list order;
/// and, with no dpkg to ask, the packages that could not be checked.
pub fn missing(needs: &[Need]) -> (Vec<String>, Vec<String>) {
    let dpkg = crate::on_path("dpkg");
    let mut out: Vec<String> = Vec::new();
    let mut unchecked = Vec::new();
    for need in needs {
        let lacking = match need {
            Need::Program { name, package } => (!crate::on_path(name)).then_some(package),
            Need::Package(package) if !dpkg => {
                unchecked.push(package.clone());
                None
            }
            Need::Package(package) => {
                (!quiet(Command::new("dpkg").args(["-s", package]))).then_some(package)
            }
            Need::Python { module, package } => {
                (!quiet(Command::new("python3").args(["-c", &format!("import {module}")])))
                    .then_some(package)
            }
            Need::Pip { .. } => None,
        };
        if let Some(p) = lacking
            && !out.contains(p)
        {
            out.push(p.clone());
        }
    }
    (out, unchecked)
}

/// The `pip` needs that `root`'s [`PYTOOLS`] venv lacks at their
/// version, as NAME==VERSION.
pub fn missing_pip(root: &Path, needs: &[Need]) -> Vec<String> {
    let pinned: Vec<(&str, &str)> = needs
        .iter()
        .filter_map(|n| match n {
            Need::Pip { name, version } => Some((name.as_str(), version.as_str())),
            _ => None,
        })
        .collect();
    // One python run asks for every version: what is installed, or "-".
    const ASK: &str = "import sys, importlib.metadata as m\nfor n in sys.argv[1:]:\n    try: print(m.version(n))\n    except m.PackageNotFoundError: print('-')";
    let python = root.join(PYTOOLS).join("bin/python");
    let found = Command::new(&python)
        .arg("-c")
        .arg(ASK)
        .args(pinned.iter().map(|(n, _)| n))
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut versions = found.lines();
    pinned
        .iter()
        .filter(|(_, want)| versions.next() != Some(want))
        .map(|(n, v)| format!("{n}=={v}"))
        .collect()
}

/// Fails, naming every missing package and how to install it, unless the
/// machine has all the suite needs.
pub fn check(root: &Path) -> Result<()> {
    let list = root.join(".ci/needs");
    let text = std::fs::read_to_string(&list)
        .with_context(|| format!("cannot read {}", list.display()))?;
    let needs = parse(&text)?;
    let (lacking, unchecked) = missing(&needs);
    if !unchecked.is_empty() {
        eprintln!(
            "xtask: no dpkg here, so these were not checked (Debian's names; your distribution's may differ): {}",
            unchecked.join(", ")
        );
    }
    if lacking.is_empty() {
        // The venv needs python3-venv: asked for once the system has it.
        let pip = missing_pip(root, &needs);
        if !pip.is_empty() {
            bail!(
                "the wheel's tests need {} PyPI package{} in {PYTOOLS}: {}\n  python3 -m venv {PYTOOLS} && {PYTOOLS}/bin/pip install {}\n  (`bash .ci/run` installs them itself; .ci/needs says what each is for)",
                pip.len(),
                if pip.len() == 1 { "" } else { "s" },
                pip.join(", "),
                pip.join(" ")
            );
        }
        return Ok(());
    }
    bail!(
        "the tests need {} more system package{}: {}\n  on Debian 12: sudo apt-get install --no-install-recommends {}\n  (`bash .ci/run` installs them itself when run as root; .ci/needs says what each is for)",
        lacking.len(),
        if lacking.len() == 1 { "" } else { "s" },
        lacking.join(", "),
        lacking.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_kind_and_refuses_the_unknown() {
        let needs = parse(
            "# why\ncmd cmake cmake\n\ndeb libssl-dev\npy ensurepip python3-venv\npip uv==0.13.8\n",
        )
        .unwrap();
        assert_eq!(
            needs,
            vec![
                Need::Program {
                    name: "cmake".into(),
                    package: "cmake".into()
                },
                Need::Package("libssl-dev".into()),
                Need::Python {
                    module: "ensurepip".into(),
                    package: "python3-venv".into()
                },
                Need::Pip {
                    name: "uv".into(),
                    version: "0.13.8".into()
                },
            ]
        );
        let err = parse("cmd cmake\n").unwrap_err().to_string();
        assert_eq!(err, ".ci/needs line 1: cannot read \"cmd cmake\"");
        let err = parse("\npip uv\n").unwrap_err().to_string();
        assert_eq!(
            err,
            ".ci/needs line 2: \"uv\" is no pinned PyPI package (NAME==VERSION)"
        );
    }

    #[test]
    fn a_pip_need_is_missing_until_its_version_is_in_the_venv() {
        let tmp = tempfile::tempdir().unwrap();
        let needs = parse("pip uv==0.13.8\npip no-such-package-rdna1==1.0\n").unwrap();
        // No venv at all: both.
        assert_eq!(
            missing_pip(tmp.path(), &needs),
            ["uv==0.13.8", "no-such-package-rdna1==1.0"]
        );
    }

    #[test]
    fn names_what_is_missing_once() {
        let needs = parse(
            "cmd no-such-program-rdna1 pkg-a\ncmd another-missing-rdna1 pkg-a\ncmd sh dash\npy no_such_module_rdna1 pkg-b\n",
        )
        .unwrap();
        assert_eq!(missing(&needs).0, vec!["pkg-a", "pkg-b"]);
    }

    #[test]
    fn the_repository_list_parses() {
        let text = std::fs::read_to_string(crate::root().join(".ci/needs")).unwrap();
        assert!(parse(&text).unwrap().len() > 20);
    }
}
