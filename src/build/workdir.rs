//! Where a build keeps its state between runs.
//!
//! ```text
//! <work>/<profile>/sources.lock         commits the tags resolved to
//! <work>/<profile>/<component>/src/     git checkout, patched in place (a
//!                                       monorepo's: its project's subdir)
//! <work>/<profile>/<component>/build/   CMake build dir, kept across runs
//! <work>/<profile>/<component>/logs/    one log per run, latest.log -> newest
//! <work>/<profile>/<component>/state/   what the patch and install stages did
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
                "rdna1-patch never writes or builds through a symlink; if the repository commits it, the profile's `subdir` must name a real directory. Nothing was written",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct ComponentDirs {
    /// The git checkout's root.
    pub src: PathBuf,
    pub build: PathBuf,
    pub logs: PathBuf,
    pub state: PathBuf,
}

impl ComponentDirs {
    /// The project's directory in the checkout: what CMake builds and the
    /// patches are relative to (`subdir` of a monorepo, else the root).
    pub fn project(&self, subdir: Option<&str>) -> PathBuf {
        match subdir {
            Some(d) => self.src.join(d),
            None => self.src.clone(),
        }
    }
}
