//! What a build's result must be before it is installed, read from the
//! staged files with the tool's own readers (no GPU needed): the library's
//! GPU code is for the build's targets, all of them; and a component that
//! installs a Tensile directory (rocBLAS) has code objects only for those
//! targets, and for each target a catalogue that parses and names no file
//! that is not there. Tensile's own exit status is not trusted: it exits 0
//! having written no catalogue when it finds no usable assembler.

use std::path::Path;

use crate::gpucode::{self, Tensile, catalogue, runs_on};

/// The result was refused: each problem, said for a person.
#[derive(Debug)]
pub struct Refused {
    pub problems: Vec<String>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.problems.join("; "))
    }
}

impl std::error::Error for Refused {}

/// The staged result (or an installed prefix, checked again before it
/// goes into torch), and what it must be.
pub struct Set<'a> {
    /// The staged prefix.
    pub root: &'a Path,
    /// Its files, relative to it.
    pub files: &'a [String],
    pub soname: &'a str,
    pub tensile: Option<&'a str>,
    /// The build's GPU targets (GPU_TARGETS, features left out).
    pub targets: &'a [String],
}

/// At most this many files are named in one problem.
const NAMED: usize = 3;

/// The build's targets as GPU_TARGETS names them, features left out.
pub fn targets_of(gpu_targets: Option<&String>) -> Vec<String> {
    gpu_targets
        .map(|t| {
            t.split(';')
                .filter_map(|t| t.split(':').next())
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl Set<'_> {
    /// What was checked, or why the result is refused.
    pub fn check(&self) -> Result<String, Refused> {
        let mut problems = Vec::new();
        let mut said = Vec::new();
        let targets = self.targets.join(", ");
        let ours = |t: &String| self.targets.iter().any(|card| runs_on(t, card));
        if let Some(rel) = self
            .files
            .iter()
            .find(|f| Path::new(f).file_name().is_some_and(|n| *n == *self.soname))
        {
            match gpucode::read_library(&self.root.join(rel)) {
                Ok(Some(code)) => {
                    let all = code.all_targets();
                    let other: Vec<&String> = all.iter().filter(|t| !ours(t)).collect();
                    let lacking: Vec<&String> =
                        self.targets.iter().filter(|c| !code.covers(c)).collect();
                    if !other.is_empty() {
                        problems.push(format!(
                            "{rel} has code for {}, not a target of this build ({targets})",
                            crate::prefix::key::join(&other)
                        ));
                    }
                    if !lacking.is_empty() {
                        problems.push(format!(
                            "{rel} has no code for {}",
                            crate::prefix::key::join(&lacking)
                        ));
                    }
                    said.push(format!("{rel}: code for {}", all.join(", ")));
                }
                Ok(None) if self.tensile.is_some() => {
                    problems.push(format!("{rel} carries no GPU code"));
                }
                Ok(None) => {}
                Err(e) => problems.push(format!("{rel} cannot be read: {e:#}")),
            }
        }
        if let Some(dir) = self.tensile {
            match self.tensile_problems(dir) {
                Ok(line) => said.push(line),
                Err(mut p) => problems.append(&mut p),
            }
        }
        if problems.is_empty() {
            Ok(said.join("; "))
        } else {
            Err(Refused { problems })
        }
    }

    fn tensile_problems(&self, rel: &str) -> Result<String, Vec<String>> {
        let dir = self.root.join(rel);
        if !dir.is_dir() {
            return Err(vec![format!(
                "the build installed no Tensile directory {rel}"
            )]);
        }
        let t = Tensile::read(&dir);
        let mut problems: Vec<String> = t.error.iter().cloned().collect();
        let ours = |t: &String| self.targets.iter().any(|card| runs_on(t, card));
        let empty: Vec<&str> = t
            .files
            .iter()
            .filter(|f| f.declared.is_empty())
            .map(|f| f.name.as_str())
            .collect();
        if !empty.is_empty() {
            problems.push(format!("{rel}: {} hold(s) no code object", some(&empty)));
        }
        let other: Vec<String> = t
            .files
            .iter()
            .filter(|f| f.declared.iter().any(|d| !ours(d)))
            .map(|f| format!("{} holds {}", f.name, f.declared.join(", ")))
            .collect();
        if !other.is_empty() {
            problems.push(format!(
                "{rel}: code for another target than this build's ({}): {}",
                self.targets.join(", "),
                some(&other)
            ));
        }
        let mut said = Vec::new();
        for card in self.targets {
            match catalogue::for_card(&dir, card) {
                Ok(c) => match &c.catalogue {
                    None => problems.push(format!(
                        "{rel} has no catalogue for {card} (TensileLibrary_lazy_{card}.dat, TensileLibrary_{card}.dat nor TensileLibrary.dat): Tensile wrote none, whatever its exit status"
                    )),
                    Some(name) if !c.missing.is_empty() => {
                        let missing: Vec<String> = c
                            .missing
                            .iter()
                            .map(|(by, file)| format!("{file} (named by {by})"))
                            .collect();
                        problems.push(format!(
                            "{rel}/{name} names {} file(s) that are not there: {}",
                            c.missing.len(),
                            some(&missing)
                        ));
                    }
                    Some(name) => said.push(format!(
                        "{name} and the {} file(s) it names",
                        c.present
                    )),
                },
                Err(e) => problems.push(format!("{rel}: {e:#}")),
            }
        }
        if problems.is_empty() {
            Ok(format!(
                "{rel}: {} code-object file(s), all for {}; {}",
                t.files.len(),
                self.targets.join(", "),
                said.join(", ")
            ))
        } else {
            Err(problems)
        }
    }
}

/// The first few of `items`, and how many more.
fn some<S: AsRef<str>>(items: &[S]) -> String {
    let shown: Vec<&str> = items.iter().take(NAMED).map(AsRef::as_ref).collect();
    match items.len().saturating_sub(NAMED) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

impl super::BuildPlan<'_> {
    /// Check the staged result (`staging` holds the prefix's tree) before
    /// it is committed; the caller removes a refused one.
    pub(super) fn check_set(
        &self,
        staging: &Path,
        manifest: &[std::path::PathBuf],
        log: &mut crate::builder::cmake::Log,
        ui: &crate::ui::Ui,
    ) -> anyhow::Result<()> {
        let root = staging.join(self.prefix.strip_prefix("/").unwrap_or(&self.prefix));
        let files: Vec<String> = manifest
            .iter()
            .filter_map(|p| p.strip_prefix(&self.prefix).ok())
            .map(|p| p.display().to_string())
            .collect();
        let targets = targets_of(self.defines.get("GPU_TARGETS"));
        if targets.is_empty() {
            if self.component.tensile.is_some() {
                ui.warn("no GPU_TARGETS: the result's GPU code was not checked against targets");
            }
            return Ok(());
        }
        let set = Set {
            root: &root,
            files: &files,
            soname: &self.component.soname,
            tensile: self.component.tensile.as_deref(),
            targets: &targets,
        };
        match set.check() {
            Ok(said) => {
                if !said.is_empty() {
                    log.line(&format!("checked: {said}"));
                    ui.stage("Checked", said);
                }
                Ok(())
            }
            Err(refused) => {
                log.line(&format!("refused: {refused}"));
                let n = refused.problems.len();
                Err(anyhow::Error::new(refused).context(crate::error::Hint::new(
                    format!("the build's result was refused before install ({n} problem(s))"),
                    format!(
                        "nothing was installed: {} is as it was. The build dir {} keeps what was built, and the log is {}; fix the cause (the targets, the Tensile the profile pins), then build again",
                        self.prefix.display(),
                        self.dirs.build.display(),
                        log.path.display()
                    ),
                )))
            }
        }
    }
}
