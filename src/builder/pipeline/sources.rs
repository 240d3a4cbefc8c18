//! The sources a build reads besides its own (`with`: rocBLAS's Tensile):
//! each pinned as the component's own, fetched by the same stage into its
//! own dirs of the work dir (`<work>/<profile>/<name>/src`), recorded in
//! the key and the provenance, and named `{NAME}` in the defines.

use super::*;
use crate::builder::profile::Source;

/// One source the build reads besides its own.
pub(super) struct With {
    pub name: String,
    pub source: Source,
    pub dirs: ComponentDirs,
}

impl BuildPlan<'_> {
    pub(super) fn with_request<'a>(&'a self, w: &'a With) -> source::FetchRequest<'a> {
        source::FetchRequest {
            name: &w.name,
            source: &w.source,
            src: &w.dirs.src,
            lock_file: &self.lock_file,
            update: self.opts.update,
            net_timeout: self.opts.net_timeout,
        }
    }

    /// Fetch each, saying what it is at; the commits, by name.
    pub(super) fn fetch_with(&self, ui: &Ui) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for w in &self.with {
            self.opts.work_dir.check_confined(&w.dirs.src, "checkout")?;
            w.dirs.create_recorded()?;
            let checkout = source::fetch(&self.with_request(w), ui)?;
            ui.stage("Source", source_line(&w.name, &w.source, &checkout));
            out.insert(w.name.clone(), checkout.commit);
        }
        Ok(out)
    }

    /// What the key says of each: `url pin commit`, the commit as far as
    /// it is known without the network.
    pub(super) fn with_inputs(&self) -> Result<BTreeMap<String, String>> {
        self.with
            .iter()
            .map(|w| {
                let commit = source::planned_commit(&self.with_request(w))?
                    .unwrap_or_else(|| "(resolved on first fetch)".into());
                Ok((
                    w.name.clone(),
                    format!("{} {} {commit}", w.source.url, w.source.pin()),
                ))
            })
            .collect()
    }

    /// The provenance of each, once fetched.
    pub(super) fn with_provenance(
        &self,
        commits: &BTreeMap<String, String>,
    ) -> BTreeMap<String, prefix::ProvSource> {
        self.with
            .iter()
            .map(|w| {
                (
                    w.name.clone(),
                    prov_source(&w.source, commits.get(&w.name).cloned().unwrap_or_default()),
                )
            })
            .collect()
    }

    /// `--dry-run`'s lines for them.
    pub(super) fn with_lines(&self) -> Result<Vec<String>> {
        self.with
            .iter()
            .map(|w| {
                let commit = source::planned_commit(&self.with_request(w))?
                    .unwrap_or_else(|| "(resolved on first fetch)".into());
                Ok(format!(
                    "with:      {} {} ({}) commit {commit}, at {}",
                    w.name,
                    w.source.url,
                    w.source.pin(),
                    w.dirs.src.display()
                ))
            })
            .collect()
    }

    /// A ROCm no profile is for, named before anything else: what the build
    /// lacks may not exist for it (libroctracer-dev, Debian 12's ROCm 5.2).
    pub(super) fn check_served(&self) -> Result<()> {
        use crate::builder::profile::{RocmFit, rocm_fit};
        let v = crate::builder::tools::rocm_version(&self.rocm);
        match v.map(|v| rocm_fit(&self.opts.profile, &v, &self.rocm)) {
            Some(RocmFit::Unserved(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// The files the component needs of the ROCm install (rocBLAS:
    /// roctx's header), all named at once when any is missing.
    pub(super) fn check_requires(&self) -> Result<()> {
        let missing: Vec<&crate::builder::profile::Require> = self
            .component
            .requires
            .iter()
            .filter(|r| !self.rocm.join(&r.file).exists())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let files: Vec<String> = missing
            .iter()
            .map(|r| self.rocm.join(&r.file).display().to_string())
            .collect();
        let from: Vec<&str> = missing.iter().map(|r| r.from.as_str()).collect();
        Err(hint(
            format!(
                "{} needs {}, which is not there",
                self.project(),
                files.join(", ")
            ),
            format!("install {}; nothing was fetched or built", from.join("; ")),
        ))
    }

    /// What the project is called in messages.
    pub(super) fn project(&self) -> &str {
        self.component
            .project
            .as_deref()
            .unwrap_or(&self.opts.component)
    }

    /// What a first build costs, for the Cost line and `--dry-run`.
    pub(super) fn cost(&self) -> String {
        let at = self.dirs.build.parent().unwrap_or(&self.dirs.build);
        let cost = self.component.cost.as_ref();
        let time = cost.map(|c| &c.time);
        let disk = cost.and_then(|c| c.disk.as_ref());
        let rebuild = cost.and_then(|c| c.rebuild.as_deref()).unwrap_or("seconds");
        match (time, disk) {
            (Some(time), Some(disk)) => format!(
                "compiling {} takes {time} the first time (a no-op rebuild, {rebuild}) and {disk} in {} (`rdna1-patch doctor` checks the space)",
                self.project(),
                at.display()
            ),
            (Some(time), None) => format!(
                "compiling {} takes {time} the first time (a no-op rebuild, {rebuild}); its disk use in {} is not yet measured",
                self.project(),
                at.display()
            ),
            (None, _) => format!(
                "compiling {}: its time and disk use are not yet measured; it builds in {}",
                self.project(),
                at.display()
            ),
        }
    }
}

/// The Source line of a fetched source.
pub(super) fn source_line(name: &str, s: &Source, checkout: &source::Checkout) -> String {
    format!(
        "{name} {} at {}{}",
        s.pin(),
        short(&checkout.commit),
        if checkout.fetched {
            ""
        } else {
            " (cached, no network)"
        }
    )
}

/// What provenance records of a source.
pub(super) fn prov_source(s: &Source, commit: String) -> prefix::ProvSource {
    prefix::ProvSource {
        url: s.url.clone(),
        tag: s.pin(),
        commit,
        subdir: s.subdir.clone(),
        sha256: s.sha256.clone(),
    }
}
