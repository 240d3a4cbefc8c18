//! The install stage: the build installed to a staging dir, its result
//! checked (`checks`), then committed to the prefix with its checksums,
//! provenance and key; skipped when the prefix already holds this build.

use super::*;

impl BuildPlan<'_> {
    /// The install stage, unless the prefix already holds exactly this build.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn install(
        &self,
        checkout: &source::Checkout,
        with: &BTreeMap<String, String>,
        tools: &tools::Toolchain,
        local: Vec<String>,
        steps: usize,
        log: &mut Log,
        ui: &Ui,
    ) -> Result<()> {
        let mut provenance = self.provenance(&checkout.commit, tools);
        provenance.local_edits = local;
        provenance.with = self.with_provenance(with);
        let key = self.key_inputs(Some(checkout.commit.clone()));
        let stamp_path = self.install_stamp();
        if steps == 0
            && prefix::Stamp::load(&stamp_path)
                .is_some_and(|s| s.matches(&self.prefix, &provenance))
            && prefix::read_key(&self.prefix).is_ok_and(|k| k == key)
        {
            ui.stage(
                "Install",
                format!("{} is up to date", self.prefix.display()),
            );
            return Ok(());
        }
        ui.stage("Install", self.prefix.display());
        let existed = self.prefix.exists();
        let staging = prefix::begin(&self.prefix)?;
        let manifest = cmake::install_to_staging(&self.dirs.build, &staging, tools, log)?;
        if let Err(e) = self.check_set(&staging, &manifest, log, ui) {
            let _ = crate::fsutil::remove_path(&staging);
            if !existed {
                // Made by begin() a moment ago, and empty again.
                let _ = std::fs::remove_dir(&self.prefix);
            }
            return Err(e);
        }
        let installed = prefix::commit(
            &self.prefix,
            &staging,
            &manifest,
            provenance.clone(),
            Some(&key),
            &[],
            self.jobs,
        )?;
        if !installed.removed.is_empty() {
            ui.note(format!(
                "removed {} files the previous install had",
                installed.removed.len()
            ));
        }
        prefix::Stamp::take(&self.prefix, &Provenance::read(&self.prefix)?)?.save(&stamp_path)?;
        ui.stage(
            "Installed",
            format!(
                "{} files into {}, checksums written ({})",
                installed.entries.len(),
                self.prefix.display(),
                prefix::MD5SUMS
            ),
        );
        Ok(())
    }

    pub(super) fn install_stamp(&self) -> PathBuf {
        self.dirs.state.join("install.toml")
    }
}
