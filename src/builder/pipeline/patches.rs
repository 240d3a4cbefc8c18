//! The patch stage, and its record of what it wrote, so a re-run tells
//! its own edits from the user's.

use super::*;

impl BuildPlan<'_> {
    /// What the patch stage is about to write, as its note says it.
    fn patch_note(&self, writes: &[(String, Option<String>)]) -> String {
        if self.series.patches.is_empty() {
            format!("no patch series: {} is built as released", self.project())
        } else if writes.is_empty() {
            "source tree already patched; no file written".to_owned()
        } else {
            let names: Vec<&str> = writes.iter().map(|(p, _)| p.as_str()).collect();
            format!("writing {} file(s): {}", writes.len(), names.join(", "))
        }
    }

    pub(super) fn patch_record(&self) -> PathBuf {
        self.dirs.state.join("patched-files")
    }

    /// Files of the checkout that differ from the commit, less those the
    /// patch stage wrote and that still hold what it wrote.
    pub(super) fn local_edits(&self, record: &PatchRecord) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for rel in source::changed_files(&self.dirs.src, self.component.subdir.as_deref())? {
            let disk = patch::read_optional(&self.tree.join(&rel)).ok().flatten();
            if !record.is_ours(&rel, disk.as_deref()) {
                out.push(rel);
            }
        }
        Ok(out)
    }

    /// Apply the series on top of the pristine checkout; returns the files
    /// it changes, and the local edits kept (--keep-local). `edited` are the
    /// files that differ from the commit and from what this stage wrote.
    pub(super) fn patch(
        &self,
        checkout: &source::Checkout,
        mut record: PatchRecord,
        edited: Vec<String>,
        ui: &Ui,
    ) -> Result<(BTreeSet<String>, Vec<String>)> {
        let before = record.paths();
        let base = |rel: &str| checkout.pristine(rel);
        let mut plan = patch::plan(&self.series, &checkout.path, &base, &before)?;
        // A file that already holds what the series makes is no edit of
        // the user's: that is how `patches refresh` leaves the tree.
        let local: Vec<String> = edited
            .into_iter()
            .filter(|f| !plan.touched.contains(f) || plan.writes.iter().any(|(p, _)| p == f))
            .collect();
        if !local.is_empty() {
            if !self.opts.keep_local {
                return Err(hint(
                    format!(
                        "the checkout {} has local edits that are not part of {} {} and its patch series: {}",
                        self.tree.display(),
                        self.opts.component,
                        self.component.pin(),
                        local.join(", ")
                    ),
                    format!(
                        "nothing was changed. To build with them, pass --keep-local (they are recorded in the prefix's provenance); to make them part of a patch, `rdna1-patch patches refresh`; to drop them, `git -C {0} checkout -- .` and `git -C {0} clean -fd`",
                        self.tree.display()
                    ),
                ));
            }
            ui.warn(format!(
                "building with local edits (--keep-local): {}",
                local.join(", ")
            ));
        }
        for (name, outcome) in &plan.outcomes {
            match outcome {
                ApplyOutcome::Applied => ui.stage("Patch", name),
                ApplyOutcome::AlreadyApplied => {
                    ui.stage("Patch", format!("{name} (already in the source, skipped)"))
                }
            }
        }
        plan.writes.retain(|(path, _)| {
            let keep = local.contains(path);
            if keep {
                ui.warn(format!(
                    "{path} has local edits, so the series' change to it is not written (--keep-local)"
                ));
            }
            !keep
        });
        ui.note(self.patch_note(&plan.writes));
        // Record first, old and new content both: if we die mid-write the
        // next run still knows which files are ours to put back.
        for (path, content) in &plan.writes {
            record.add(path, content.as_deref());
        }
        let unrecorded: Vec<&String> = plan
            .touched
            .iter()
            .filter(|p| !record.files.contains_key(*p))
            .collect();
        for path in unrecorded {
            let disk = patch::read_optional(&checkout.path.join(path))?;
            record.add(path, disk.as_deref());
        }
        fsutil::create_dir_all(&self.dirs.state)?;
        record.save(&self.patch_record())?;
        patch::execute(&plan, &checkout.path)?;
        let mut done = PatchRecord::default();
        for path in &plan.touched {
            let disk = patch::read_optional(&checkout.path.join(path))?;
            done.add(path, disk.as_deref());
        }
        done.save(&self.patch_record())?;
        Ok((plan.touched, local))
    }
}

/// What the patch stage wrote: each file, with the SHA-256 of every content
/// it may hold (two while a write is under way). A file whose content is
/// none of them was edited by someone else.
#[derive(Default)]
pub(super) struct PatchRecord {
    files: std::collections::BTreeMap<String, BTreeSet<String>>,
}

impl PatchRecord {
    /// `<sha256>  <path>` lines, as sha256sum writes them; a bare path (the
    /// format before hashes were kept) vouches for any content.
    pub(super) fn load(path: &Path) -> PatchRecord {
        let mut r = PatchRecord::default();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines().filter(|l| !l.is_empty()) {
            match line.split_once("  ") {
                Some((hash, rel)) if hash.len() == 64 => {
                    r.files
                        .entry(rel.to_owned())
                        .or_default()
                        .insert(hash.to_owned());
                }
                _ => {
                    r.files.entry(line.to_owned()).or_default();
                }
            }
        }
        r
    }

    fn add(&mut self, rel: &str, content: Option<&str>) {
        let hashes = self.files.entry(rel.to_owned()).or_default();
        if let Some(c) = content {
            hashes.insert(prefix::sha256_hex(c.as_bytes()));
        }
    }

    fn paths(&self) -> BTreeSet<String> {
        self.files.keys().cloned().collect()
    }

    fn is_ours(&self, rel: &str, disk: Option<&str>) -> bool {
        match (self.files.get(rel), disk) {
            (None, _) => false,
            (Some(h), _) if h.is_empty() => true,
            (Some(_), None) => true,
            (Some(h), Some(c)) => h.contains(&prefix::sha256_hex(c.as_bytes())),
        }
    }

    fn save(&self, path: &Path) -> Result<()> {
        let mut text = String::new();
        for (rel, hashes) in &self.files {
            if hashes.is_empty() {
                text.push_str(&format!("{rel}\n"));
            }
            for h in hashes {
                text.push_str(&format!("{h}  {rel}\n"));
            }
        }
        fsutil::write_atomic(path, text.as_bytes(), None)
    }
}
