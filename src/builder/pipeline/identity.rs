//! What the build is: its key's inputs, what a shared build must match,
//! the provenance written with it; and pulling one instead of compiling.

use super::*;

impl BuildPlan<'_> {
    /// `{rocm}` and `{work}` for this machine's paths, so the same build
    /// elsewhere has the same key.
    pub(super) fn portable(&self, v: &str) -> String {
        v.replace(&self.rocm.display().to_string(), "{rocm}")
            .replace(&self.opts.work_dir.root().display().to_string(), "{work}")
    }

    /// The build key's inputs (see `prefix::key`).
    pub(super) fn key_inputs(&self, commit: Option<String>) -> KeyInputs {
        const TARGETS: &str = "GPU_TARGETS";
        let portable = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
            m.iter()
                .filter(|(k, _)| *k != TARGETS)
                .map(|(k, v)| (k.clone(), self.portable(v)))
                .collect()
        };
        let asked = portable(&self.asked);
        let derived = portable(&self.defines)
            .into_iter()
            .filter(|(k, v)| asked.get(k) != Some(v))
            .collect();
        let line =
            |p: &patch::PatchFile| format!("{}  {}", prefix::sha256_hex(p.text.as_bytes()), p.name);
        let (ours, compat) = self.series.patches.split_at(self.source_patches);
        let c = self.component;
        KeyInputs {
            schema: crate::prefix::key::SCHEMA,
            profile: self.opts.profile.name.clone(),
            component: self.opts.component.clone(),
            url: c.url.clone(),
            pin: c.pin(),
            commit,
            patches: ours.iter().map(line).collect(),
            defines: asked,
            with: self.with_inputs().unwrap_or_default(),
            gpu_targets: self
                .defines
                .get(TARGETS)
                .map(|t| {
                    t.split(';')
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            toolchain: crate::prefix::key::Toolchain {
                rocm_version: self
                    .rocm
                    .is_dir()
                    .then(|| tools::rocm_version(&self.rocm))
                    .flatten(),
                compiler: self.compiler_identity(),
                compat: compat.iter().map(line).collect(),
                defines: derived,
            },
        }
    }

    /// The first line of the C++ compiler's `--version`, when it runs.
    pub(super) fn compiler_identity(&self) -> Option<String> {
        let out = tools::version_output(&tools::cxx(&self.defines).ok()?).ok()?;
        out.lines().next().map(|l| l.trim().to_owned())
    }

    pub(super) fn want<'a>(&self, inputs: &'a KeyInputs) -> Want<'a> {
        Want {
            inputs,
            toolchain: inputs.toolchain.rocm_version.is_some()
                && inputs.toolchain.compiler.is_some(),
            rocm_release: crate::version::major_minor(&self.opts.profile.rocm.version),
        }
    }

    /// Pull and install a shared build when one is this build; false when
    /// there is none (said why) and the build should run.
    pub(super) fn pull(&self, ui: &Ui) -> Result<bool> {
        let shared = &self.opts.shared;
        if !shared.any() {
            return Ok(false);
        }
        let commit = source::planned_commit(&self.source_request())?;
        let inputs = self.key_inputs(commit);
        let want = self.want(&inputs);
        if !want.toolchain {
            ui.note(format!(
                "no ROCm toolchain at {}: a shared build made with ROCm {} is taken as it is",
                self.rocm.display(),
                want.rocm_release
            ));
        }
        match shared.choose(&want, ui)? {
            Choice::Build { why, failed } => {
                // Each failure was a warning; the stage line points at
                // them rather than saying them again.
                let also = match failed.len() {
                    0 => String::new(),
                    1 => "a cache failed (the warning above)".to_owned(),
                    n => format!("{n} caches failed (the warnings above)"),
                };
                let line = [why, also]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ");
                ui.stage("Shared", format!("compiling instead: {line}"));
                Ok(false)
            }
            Choice::Pull(store, c) => {
                ui.stage(
                    "Shared",
                    format!(
                        "{} is this build (key {}, signed by trusted key {})",
                        c.reference,
                        &c.config.key[..16],
                        c.key_id
                    ),
                );
                let files = crate::share::install(&store, &c, &self.prefix, ui)?;
                ui.stage(
                    "Installed",
                    format!(
                        "{files} files into {}, digest, signature and checksums verified ({})",
                        self.prefix.display(),
                        prefix::MD5SUMS
                    ),
                );
                Ok(true)
            }
        }
    }

    pub(super) fn provenance(&self, commit: &str, tools: &tools::Toolchain) -> Provenance {
        let p = &self.opts.profile;
        Provenance {
            tool: format!("rdna1-patch {}", crate::version::VERSION),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            profile: p.name.clone(),
            component: self.opts.component.clone(),
            rocm: prefix::ProvRocm {
                path: self.rocm.display().to_string(),
                version: p.rocm.version.clone(),
                found: tools.rocm.version.clone(),
                torch_hip: p.rocm.torch_hip.clone(),
            },
            source: sources::prov_source(&self.source, commit.to_owned()),
            with: BTreeMap::new(),
            patches: self
                .series
                .patches
                .iter()
                .map(|pf| prefix::ProvPatch {
                    name: pf.name.clone(),
                    series: pf.origin.clone(),
                    sha256: prefix::sha256_hex(pf.text.as_bytes()),
                    marker: pf.marker.clone(),
                })
                .collect(),
            cmake: prefix::ProvCmake {
                generator: tools.generator.cmake_name().to_owned(),
                defines: self.defines.clone(),
            },
            library: prefix::ProvLibrary {
                soname: self.component.soname.clone(),
                path: String::new(),
            },
            files: Vec::new(),
            local_edits: Vec::new(),
            in_place: None,
        }
    }
}
