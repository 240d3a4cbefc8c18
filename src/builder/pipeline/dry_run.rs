//! What `--dry-run` prints: every stage as it would run, and where a
//! shared build would come from.

use super::*;

impl BuildPlan<'_> {
    /// What `--dry-run` shows: every stage as it would run.
    pub(super) fn describe(&self) -> Result<(String, Option<anyhow::Error>)> {
        let mut lines = Vec::new();
        lines.push(format!(
            "profile:   {} ({}){}",
            self.opts.profile.name,
            self.opts.profile.origin,
            self.opts
                .profile_why
                .as_deref()
                .map(|w| format!(", chosen {w}"))
                .unwrap_or_default()
        ));
        if let Some(route) = self.opts.route.take() {
            lines.push(format!("route:     {route}"));
        }
        // --from pulls that build or stops: it never compiles here, so the
        // compile's plan is not its plan.
        if self.opts.shared.from.is_some() {
            lines.push(
                "compile:   never: --from pulls the build or stops (leave out --from for the local build's plan)"
                    .to_owned(),
            );
        } else {
            lines.extend(self.compile_lines()?);
        }
        lines.push(format!("install:   {}", self.prefix.display()));
        let (shared, pulls) = self.describe_shared()?;
        lines.extend(shared);
        let stop = match pulls {
            Ok(pulls) => self.preflight_stop(pulls),
            Err(e) => Some(e.context("the build would stop before fetching")),
        };
        lines.extend([
            format!("stop after: {:?}", self.opts.stop_after),
            match stop {
                Some(_) => "preflight: would stop: see the error below",
                None => "preflight: the tools the build needs are here",
            }
            .to_owned(),
            "(dry run: nothing was changed)".to_owned(),
        ]);
        Ok((lines.join("\n"), stop))
    }

    /// The local build's plan: source, patches, compiler, configure, build.
    fn compile_lines(&self) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        let c = &self.source;
        let commit = source::planned_commit(&self.source_request())?
            .unwrap_or_else(|| "(resolved on first fetch)".into());
        let pin = match (&c.sha256, &c.tag) {
            (Some(sha), _) => format!("tarball sha256 {sha}"),
            (None, Some(t)) => format!("tag {t}"),
            (None, None) => "(commit pin)".to_owned(),
        };
        lines.push(format!(
            "source:    {} {pin} commit {}{}",
            c.url,
            commit,
            c.subdir
                .as_ref()
                .map_or(String::new(), |d| format!(", {d} only (blobless, sparse)"))
        ));
        lines.extend(self.with_lines()?);
        lines.push(format!("checkout:  {}", self.tree.display()));
        lines.push(format!(
            "patches:   {} ({})",
            self.series.patches.len(),
            self.series.origin
        ));
        for p in &self.series.patches {
            lines.push(format!("  {}  {}", p.name, p.subject));
        }
        let args = self.configure_args();
        if let Some(note) = &self.compiler_note {
            lines.push(format!("compiler:  {note}"));
        }
        if let Some(note) = self.tensile_note() {
            lines.push(format!("tensile:   {note}"));
        }
        lines.push(format!("targets:   {}", self.targets_note));
        for n in &self.compat {
            lines.push(format!(
                "compat:    {} (--no-compat {} to leave it out)",
                n.describe(),
                n.name
            ));
        }
        lines.push(format!(
            "launcher:  {}",
            self.launcher
                .as_ref()
                .map_or("none".to_owned(), |l| l.describe())
        ));
        lines.push(format!("configure: cmake {}", args.join(" ")));
        lines.push(format!(
            "build:     cmake --build {} --parallel {}",
            self.dirs.build.display(),
            self.jobs
        ));
        Ok(lines)
    }

    /// The real run checks its tools before the fetch, unless it pulls a
    /// shared build or stops before configuring; so does a dry run.
    pub(super) fn preflight_stop(&self, pulls: bool) -> Option<anyhow::Error> {
        if pulls || self.opts.stop_after < Stage::Configure {
            return None;
        }
        self.preflight()
            .err()
            .map(|e| e.context("the build would stop before fetching"))
    }

    /// Its lines, and whether a shared build would be pulled (then no
    /// toolchain is needed), or why the run would stop there.
    pub(super) fn describe_shared(&self) -> Result<(Vec<String>, Result<bool>)> {
        let inputs = self.key_inputs(source::planned_commit(&self.source_request())?);
        let ours = inputs.key();
        let mut key = format!("key:       {ours} (tag {})", inputs.tag());
        let mut shared = None;
        let mut pulls = Ok(false);
        if self.opts.stop_after == Stage::Install {
            let (plan, pull, theirs) = self.shared_plan(&inputs);
            // What would be installed is the artifact: its key, which
            // differs from this machine's where the publisher's toolchain
            // stands in for one this machine lacks.
            if let Some(theirs) = theirs
                && let their_key = theirs.key()
                && their_key != ours
            {
                key = format!(
                    "key:       {their_key} (tag {}; the publisher's toolchain: {}; this machine's would give {})",
                    theirs.tag(),
                    theirs.toolchain.describe(),
                    &ours[..16]
                );
            }
            shared = Some(format!("shared:    {plan}"));
            pulls = pull;
        }
        let mut lines: Vec<String> = std::iter::once(key).chain(shared).collect();
        if matches!(pulls, Ok(false)) && self.opts.stop_after >= Stage::Build {
            lines.push(format!(
                "cost:      {}; a published build, if one were found, would take seconds",
                self.cost()
            ));
        }
        Ok((lines, pulls))
    }

    /// What the shared route would do, whether it pulls, and the inputs of
    /// the build it would pull.
    pub(super) fn shared_plan(
        &self,
        inputs: &KeyInputs,
    ) -> (String, Result<bool>, Option<KeyInputs>) {
        let shared = &self.opts.shared;
        if !shared.any() {
            return (
                format!("no --from and no caches in {}; compiling", shared.config),
                Ok(false),
                None,
            );
        }
        match shared.choose(&self.want(inputs), &Ui::silent()) {
            Ok(Choice::Pull(_, c)) => (
                format!(
                    "would pull {} ({}, signed by key {}) instead of compiling: {} to download, {} on disk, seconds",
                    c.reference,
                    c.digest,
                    c.key_id,
                    crate::fsutil::human_bytes(c.sizes().0),
                    crate::fsutil::human_bytes(c.sizes().1)
                ),
                Ok(true),
                Some(c.config.inputs.clone()),
            ),
            Ok(Choice::Build { why, failed }) => (
                format!("would compile: {}", Choice::build_reason(&why, &failed)),
                Ok(false),
                None,
            ),
            Err(e) => ("would stop: see the error below".to_owned(), Err(e), None),
        }
    }
}
