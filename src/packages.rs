//! Who owns a file, asked of the package manager itself (`dpkg -S`,
//! `rpm -qf`, `pacman -Qo`), and whether a package's files are still as it
//! installed them (`dpkg --verify`, `rpm -V`, `pacman -Qkk`). A file is
//! never judged a package's by its path: /opt/rocm and /usr/lib hold files
//! no package knows, and a package may install anywhere.

use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Manager {
    Dpkg,
    Rpm,
    Pacman,
}

impl Manager {
    const ALL: [Manager; 3] = [Manager::Dpkg, Manager::Rpm, Manager::Pacman];

    pub fn program(self) -> &'static str {
        match self {
            Manager::Dpkg => "dpkg",
            Manager::Rpm => "rpm",
            Manager::Pacman => "pacman",
        }
    }

    /// The command that checks a package's files, as the user would type it.
    pub fn verify_command(self, package: &str) -> String {
        match self {
            Manager::Dpkg => format!("dpkg --verify {package}"),
            Manager::Rpm => format!("rpm -V {package}"),
            Manager::Pacman => format!("pacman -Qkk {package}"),
        }
    }

    /// The manager's program, where the tool may run it from
    /// (`owner::find_program`).
    fn command(self) -> Option<std::process::Command> {
        crate::owner::find_program(self.program()).map(std::process::Command::new)
    }
}

/// Who owns a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Owner {
    /// A package manager says this package installed it.
    Package { manager: Manager, package: String },
    /// The package managers here know no such file.
    Unpackaged { asked: Vec<Manager> },
    /// There is no package manager to ask.
    NoManager,
}

impl Owner {
    pub fn package(&self) -> Option<(Manager, &str)> {
        match self {
            Owner::Package { manager, package } => Some((*manager, package)),
            _ => None,
        }
    }

    /// "the dpkg package libmiopen1", "no package (dpkg asked)".
    pub fn describe(&self) -> String {
        match self {
            Owner::Package { manager, package } => {
                format!("the {} package {package}", manager.program())
            }
            Owner::Unpackaged { asked } => format!(
                "no package ({} asked)",
                asked
                    .iter()
                    .map(|m| m.program())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Owner::NoManager => "no package manager here to ask".to_owned(),
        }
    }
}

/// Ask every package manager on PATH who owns `path`: by its real path
/// (where a package lists the file: /opt/rocm is a symlink to
/// /opt/rocm-X.Y.Z), then by the name given (a symlink a package ships).
pub fn owner(path: &Path) -> Owner {
    let asked: Vec<Manager> = Manager::ALL
        .into_iter()
        .filter(|m| m.command().is_some())
        .collect();
    if asked.is_empty() {
        return Owner::NoManager;
    }
    let mut names: Vec<PathBuf> = Vec::new();
    if let Ok(real) = path.canonicalize() {
        names.push(real);
    }
    if !names.iter().any(|n| n == path) {
        names.push(path.to_owned());
    }
    for m in &asked {
        for name in &names {
            if let Some(package) = ask(*m, name) {
                return Owner::Package {
                    manager: *m,
                    package,
                };
            }
        }
    }
    Owner::Unpackaged { asked }
}

fn ask(m: Manager, path: &Path) -> Option<String> {
    let mut cmd = m.command()?;
    match m {
        Manager::Dpkg => cmd.arg("-S"),
        Manager::Rpm => cmd.args(["-qf", "--queryformat", "%{NAME}\\n"]),
        Manager::Pacman => cmd.args(["-Qqo"]),
    };
    // dpkg-query reads a pattern: a path with glob characters would match
    // other files, and a file is only ever asked about by its own name.
    let text = path.to_str()?;
    if m == Manager::Dpkg && text.contains(['*', '?', '[', ']', '\\']) {
        return None;
    }
    cmd.arg(path);
    let out = crate::proc::helper(cmd).ok()?;
    if !out.status.success() {
        return None;
    }
    parse_owner(m, &out.stdout, text)
}

/// The package in a manager's answer about `path`.
fn parse_owner(m: Manager, stdout: &str, path: &str) -> Option<String> {
    match m {
        // "libmiopen1:amd64: /usr/lib/...", or "a, b: /path" for a shared
        // directory; "diversion by ..." lines are not owners.
        Manager::Dpkg => stdout.lines().find_map(|l| {
            let (pkgs, p) = l.rsplit_once(": ")?;
            (p == path && !l.starts_with("diversion by"))
                .then(|| pkgs.split(", ").next().unwrap_or(pkgs).to_owned())
        }),
        // `rpm -qf --queryformat '%{NAME}\n'` and `pacman -Qqo`: the name.
        Manager::Rpm | Manager::Pacman => stdout
            .lines()
            .next()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.contains(' '))
            .map(str::to_owned),
    }
}

/// What the package manager's own verify says of `package`: None when it
/// finds nothing changed, else its lines (or why it could not run).
pub fn verify(m: Manager, package: &str) -> Option<String> {
    let Some(mut cmd) = m.command() else {
        return Some(format!(
            "{} is not in a PATH directory only root can change, so it was not run",
            m.program()
        ));
    };
    match m {
        Manager::Dpkg => cmd.arg("--verify"),
        Manager::Rpm => cmd.arg("-V"),
        Manager::Pacman => cmd.arg("-Qkk"),
    };
    cmd.arg(package);
    let out = match crate::proc::helper(cmd) {
        Ok(o) => o,
        Err(e) => return Some(format!("{e:#}")),
    };
    // dpkg 1.21 exits 0 whatever it finds: a line on stdout is a changed
    // file. pacman -Qkk always prints a summary line, "0 altered files"
    // when clean.
    let lines: Vec<&str> = match m {
        Manager::Pacman => out
            .stdout
            .lines()
            .filter(|l| !l.contains(" 0 altered files"))
            .collect(),
        _ => out
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect(),
    };
    if lines.is_empty() && out.status.success() {
        return None;
    }
    let mut said = lines.join("; ");
    if said.is_empty() {
        said = out.stderr.trim().to_owned();
    }
    Some(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_as_each_manager_says_them() {
        let p = "/usr/lib/x86_64-linux-gnu/libMIOpen.so.1";
        assert_eq!(
            parse_owner(Manager::Dpkg, &format!("libmiopen1:amd64: {p}\n"), p).as_deref(),
            Some("libmiopen1:amd64")
        );
        assert_eq!(
            parse_owner(
                Manager::Dpkg,
                &format!("diversion by foo from: {p}\nlibmiopen1, libother: {p}\n"),
                p
            )
            .as_deref(),
            Some("libmiopen1")
        );
        // A pattern that matched another file is no answer.
        assert_eq!(
            parse_owner(Manager::Dpkg, "x: /usr/lib/libMIOpen.so.10\n", p),
            None
        );
        assert_eq!(
            parse_owner(Manager::Rpm, "miopen-hip\n", p).as_deref(),
            Some("miopen-hip")
        );
        assert_eq!(
            parse_owner(Manager::Rpm, "file /x is not owned by any package\n", p),
            None
        );
        assert_eq!(
            parse_owner(Manager::Pacman, "miopen-hip\n", p).as_deref(),
            Some("miopen-hip")
        );
    }
}
