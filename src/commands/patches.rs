use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, anyhow};

use super::ProfileArg;
use crate::build::patch::{self, ApplyOutcome, Series};
use crate::build::profile::{self, Profile};
use crate::build::{cmake, source};
use crate::error::hint;
use crate::fsutil;

#[derive(clap::Subcommand, Debug)]
pub enum PatchesCommand {
    /// List the patch series of every built-in profile, or of one
    List {
        /// A built-in profile name, or a profile TOML file [default: all built-in]
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<String>,
    },
    /// Check that the series applies to a source tree (exit 0 if it does, 1 if not)
    Check {
        #[command(flatten)]
        profile: ProfileArg,
        /// The source tree, e.g. a MIOpen checkout
        #[arg(long, value_name = "DIR")]
        source: PathBuf,
        #[arg(long, default_value = "miopen")]
        component: String,
        /// Print the result as JSON: per patch its status, files and hunks
        #[arg(long)]
        json: bool,
    },
    /// Rewrite one patch from an edited tree, like `quilt refresh`
    Refresh {
        /// The patch file name, as the series lists it
        name: String,
        /// A git checkout with the whole series applied and then edited
        #[arg(long, value_name = "DIR")]
        source: PathBuf,
        /// A profile file on disk (built-in patches cannot be edited)
        #[arg(long, value_name = "FILE")]
        profile: PathBuf,
        #[arg(long, default_value = "miopen")]
        component: String,
        /// Also put this file (relative to the tree) into the patch
        #[arg(long, value_name = "PATH")]
        add: Vec<String>,
    },
}

pub fn run(cmd: PatchesCommand) -> Result<ExitCode> {
    match cmd {
        PatchesCommand::List { profile } => list(profile),
        PatchesCommand::Check {
            profile,
            source,
            component,
            json,
        } => check(&profile, &source, &component, json),
        PatchesCommand::Refresh {
            name,
            source,
            profile,
            component,
            add,
        } => refresh(&name, &source, &profile, &component, &add),
    }
}

fn list(profile: Option<String>) -> Result<ExitCode> {
    let profiles = match profile {
        Some(p) => vec![Profile::load(&p)?],
        None => profile::builtin_names()
            .iter()
            .map(|n| Profile::load(n))
            .collect::<Result<_>>()?,
    };
    for p in profiles {
        for (name, c) in &p.components {
            let series = Series::load(&p.series_dir(c)?)?;
            crate::outln!("{} {name} {} ({}):", p.name, c.tag, series.origin);
            if series.patches.is_empty() {
                crate::outln!("  (no patches)");
            }
            for pf in &series.patches {
                crate::outln!("  {}  {}", pf.name, pf.subject);
                crate::outln!("      files: {}", pf.files.join(", "));
                crate::outln!("      marker: {}", pf.marker.as_deref().unwrap_or("(none)"));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check(profile: &ProfileArg, source: &Path, component: &str, json: bool) -> Result<ExitCode> {
    let p = profile.load()?;
    let c = p.component(component)?;
    let series = Series::load(&p.series_dir(c)?)?;
    let base = patch::disk_base(source);
    if json {
        let checked = patch::check(&series, &base)?;
        let unread = cmake::unread_defines(source, &c.cmake.effective_defines(&p.rocm.path, &[]))?;
        let ok = checked.iter().all(|c| c.status != "failed");
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema_version": 1,
                "profile": p.name,
                "component": component,
                "tag": c.tag,
                "source": source,
                "ok": ok,
                "patches": checked,
                "unread_defines": unread,
            }))?
        );
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let plan = match patch::plan(&series, source, &base, &Default::default()) {
        Ok(plan) => plan,
        // The check's answer, not a failure of the tool.
        Err(e) if e.chain().any(|c| c.is::<patch::ApplyError>()) => {
            crate::output::error(&e);
            return Ok(ExitCode::from(crate::error::CHECK_FAILED));
        }
        Err(e) => return Err(e),
    };
    for (name, outcome) in &plan.outcomes {
        match outcome {
            ApplyOutcome::Applied => crate::outln!("ok       {name}"),
            ApplyOutcome::AlreadyApplied => {
                crate::outln!("applied  {name} (already in the tree)")
            }
        }
    }
    let rocm = &p.rocm.path;
    for name in cmake::unread_defines(source, &c.cmake.effective_defines(rocm, &[]))? {
        crate::outln!(
            "warning  define {name} is not read by any CMake file in {}",
            source.display()
        );
    }
    crate::outln!(
        "{} patches apply cleanly to {}",
        plan.outcomes.len(),
        source.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn refresh(
    name: &str,
    source: &Path,
    profile: &Path,
    component: &str,
    add: &[String],
) -> Result<ExitCode> {
    let p = Profile::from_file(profile)?;
    let c = p.component(component)?;
    let dir = p.series_dir(c)?;
    let disk = dir
        .disk_path()
        .ok_or_else(|| anyhow!("the series of {} is not on disk", profile.display()))?
        .to_owned();
    let series = Series::load(&dir)?;
    let checkout = source::open(source)?;
    let base = |rel: &str| checkout.pristine(rel);
    let text = patch::refresh(&series, name, source, &base, add)?;
    let target = disk.join(name);
    if std::fs::read_to_string(&target).ok().as_deref() == Some(text.as_str()) {
        crate::outln!("{name} is up to date");
    } else {
        fsutil::write_atomic(&target, text.as_bytes(), None)
            .map_err(|e| hint(format!("{e:#}"), "the patch file was left as it was"))?;
        let files = Series::load(&dir)?
            .get(name)
            .map(|(_, p)| p.files.join(", "))
            .unwrap_or_default();
        crate::outln!("refreshed {} ({files})", target.display());
    }
    Ok(ExitCode::SUCCESS)
}
