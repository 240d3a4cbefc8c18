//! Where a build keeps its state between runs.
//!
//! ```text
//! <work>/<profile>/sources.lock         commits the tags resolved to
//! <work>/<profile>/<component>/src/     git checkout, patched in place (a
//!                                       monorepo's: its project's subdir)
//! <work>/<profile>/<component>/build/   CMake build dir, kept across runs
//! <work>/<profile>/<component>/logs/    one log per run, latest.log -> newest
//! <work>/<profile>/<component>/state/   what the patch and install stages did
//! <work>/<profile>/<component>/made-by-rdna1-patch
//!                                       which of those four the tool created:
//!                                       `clean` removes nothing else
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

#[derive(Debug, Clone)]
pub struct WorkDir {
    root: PathBuf,
}

impl WorkDir {
    /// `explicit` is `--work-dir`; otherwise `$XDG_CACHE_HOME/rdna1-patch`.
    pub fn new(explicit: Option<&Path>) -> Result<WorkDir> {
        let root = match explicit {
            Some(p) => {
                std::path::absolute(p).with_context(|| format!("bad --work-dir {}", p.display()))?
            }
            None => crate::fsutil::project_dirs()
                .map(|d| d.cache_dir().to_owned())
                .context("cannot find a cache directory ($HOME is not set); pass --work-dir")?,
        };
        Ok(WorkDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn profile_dir(&self, profile: &str) -> PathBuf {
        self.root.join(profile)
    }

    pub fn lock_file(&self, profile: &str) -> PathBuf {
        self.profile_dir(profile).join("sources.lock")
    }

    pub fn component(&self, profile: &str, component: &str) -> ComponentDirs {
        let base = self.profile_dir(profile).join(component);
        ComponentDirs {
            src: base.join("src"),
            build: base.join("build"),
            logs: base.join("logs"),
            state: base.join("state"),
            base,
        }
    }
}

impl WorkDir {
    /// Refuse `path` (inside the work dir) when any component between the
    /// work dir and it is a symlink: the checkout is the origin's content,
    /// and a symlink committed there (`projects -> /etc`) would have the
    /// patch stage write, and CMake build, outside the work dir. The work
    /// dir itself may be a link of the user's.
    pub fn check_confined(&self, path: &Path, what: &str) -> Result<()> {
        let rel = path.strip_prefix(&self.root).with_context(|| {
            format!(
                "internal error: {} is not inside the work dir {}",
                path.display(),
                self.root.display()
            )
        })?;
        if let Some(link) = crate::fsutil::first_symlink(&self.root, rel) {
            return Err(crate::error::hint(
                format!(
                    "{} is a symlink (to {}), so the {what} {} would be outside the work dir {}",
                    link.display(),
                    std::fs::read_link(&link)
                        .map_or_else(|_| "?".into(), |t| t.display().to_string()),
                    path.display(),
                    self.root.display()
                ),
                if what == "project directory" {
                    "rdna1-patch never writes or builds through a symlink; if the repository commits it, the profile's `subdir` must name a real directory. Nothing was written".to_owned()
                } else {
                    format!(
                        "rdna1-patch never writes or builds through a symlink: remove {} (the work dir is rdna1-patch's own), or pass another --work-dir. Nothing was written",
                        link.display()
                    )
                },
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct ComponentDirs {
    /// `<work>/<profile>/<component>`, which holds the others.
    pub base: PathBuf,
    /// The git checkout's root.
    pub src: PathBuf,
    pub build: PathBuf,
    pub logs: PathBuf,
    pub state: PathBuf,
}

/// The file that names the dirs of a component the tool created.
const MADE: &str = "made-by-rdna1-patch";

impl ComponentDirs {
    /// The four dirs, with their names in the record.
    pub fn all(&self) -> [(&'static str, &Path); 4] {
        [
            ("src", &self.src),
            ("build", &self.build),
            ("logs", &self.logs),
            ("state", &self.state),
        ]
    }

    /// Create whichever of the four dirs is missing, and record that the
    /// tool made it (after it exists: a kill in between leaves an empty dir
    /// unrecorded, which `clean` then leaves alone, never the reverse).
    pub fn create_recorded(&self) -> Result<()> {
        let mut made = self.made();
        let before = made.len();
        for (name, dir) in self.all() {
            if std::fs::symlink_metadata(dir).is_err() {
                crate::fsutil::create_dir_all(dir)?;
                made.insert(name.to_owned());
            }
        }
        if made.len() != before {
            self.save_made(&made)?;
        }
        Ok(())
    }

    /// The record of the dirs the tool made.
    pub fn record(&self) -> PathBuf {
        self.base.join(MADE)
    }

    /// The names of the dirs the record says the tool made.
    pub fn made(&self) -> std::collections::BTreeSet<String> {
        std::fs::read_to_string(self.record())
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|l| self.all().iter().any(|(n, _)| n == l))
            .map(str::to_owned)
            .collect()
    }

    /// Drop `name` from the record once its dir is gone, so that a dir
    /// someone makes there later is not taken for ours.
    pub fn forget(&self, name: &str) -> Result<()> {
        let mut made = self.made();
        if made.remove(name) {
            self.save_made(&made)?;
        }
        Ok(())
    }

    fn save_made(&self, made: &std::collections::BTreeSet<String>) -> Result<()> {
        let text: String = made.iter().map(|n| format!("{n}\n")).collect();
        crate::fsutil::write_atomic(&self.record(), text.as_bytes(), Some(0o644))
    }

    /// The project's directory in the checkout: what CMake builds and the
    /// patches are relative to (`subdir` of a monorepo, else the root).
    pub fn project(&self, subdir: Option<&str>) -> PathBuf {
        match subdir {
            Some(d) => self.src.join(d),
            None => self.src.clone(),
        }
    }
}
