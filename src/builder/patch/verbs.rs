//! What the `patches` verbs do with a profile's series: list it, check it
//! against a tree, refresh one patch from an edited tree. Results come back
//! as text (or JSON) for the CLI to print.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};

use crate::builder::patch::{self, Series};
use crate::builder::profile::{Component, Profile};
use crate::builder::{cmake, source};
use crate::error::hint;
use crate::fsutil;

/// Every component's series of `profiles`, loaded once for `patches list`.
fn each_series(profiles: &[Profile]) -> Result<Vec<(&Profile, &str, &Component, Series)>> {
    let mut out = Vec::new();
    for p in profiles {
        for (name, c) in &p.components {
            out.push((p, name.as_str(), c, Series::load(&p.series_dir(c)?)?));
        }
    }
    Ok(out)
}

/// `patches list`: each profile's series, patch by patch.
pub fn list(profiles: &[Profile]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (p, name, c, series) in each_series(profiles)? {
        out.push(format!(
            "{} {name} {} ({}):",
            p.name,
            c.pin(),
            series.origin
        ));
        if series.patches.is_empty() {
            out.push("  (no patches)".to_owned());
        }
        for pf in &series.patches {
            out.push(format!("  {}  {}", pf.name, pf.subject));
            out.push(format!("      files: {}", pf.files.join(", ")));
            out.push(format!(
                "      marker: {}",
                pf.marker.as_deref().unwrap_or("(none)")
            ));
        }
    }
    Ok(out)
}

/// `patches list --json`.
pub fn list_json(profiles: &[Profile]) -> Result<serde_json::Value> {
    let mut out = Vec::new();
    for (p, name, c, series) in each_series(profiles)? {
        let patches: Vec<_> = series
            .patches
            .iter()
            .map(|pf| {
                serde_json::json!({
                    "name": pf.name,
                    "subject": pf.subject,
                    "files": pf.files,
                    "marker": pf.marker,
                })
            })
            .collect();
        out.push(serde_json::json!({
            "profile": p.name,
            "component": name,
            "tag": c.tag,
            "series": series.origin.to_string(),
            "patches": patches,
        }));
    }
    Ok(serde_json::json!({
        "schema_version": crate::version::SCHEMA_VERSION,
        "series": out,
    }))
}

/// What `patches check` was asked.
pub struct CheckRequest<'a> {
    pub profile: &'a Profile,
    pub component: &'a str,
    pub source: &'a Path,
    pub extra: Option<&'a Path>,
    pub json: bool,
}

/// The answer of `patches check`: whether the series applies, and the
/// report. A series that does not apply is an answer (`ok` false), not an
/// error of the tool.
pub struct Checked {
    pub ok: bool,
    pub report: String,
    /// Why the series does not apply: the first failing patch's error.
    pub failure: Option<String>,
}

pub fn check(req: &CheckRequest) -> Result<Checked> {
    if !req.source.is_dir() {
        return Err(hint(
            format!("there is no directory {}", req.source.display()),
            "--source names a MIOpen source tree (a checkout of the profile's tag)",
        ));
    }
    let p = req.profile;
    let c = p.component(req.component)?;
    let series = Series::for_build(p, c, req.extra)?;
    let base = patch::disk_base(req.source);
    let unread = cmake::unread_defines(req.source, &c.cmake.effective_defines(&p.rocm.path, &[]))?;
    if req.json {
        let checked = patch::check(&series, &base)?;
        let ok = checked.iter().all(|c| c.status != "failed");
        let report = serde_json::to_string_pretty(&serde_json::json!({
            "schema_version": crate::version::SCHEMA_VERSION,
            "profile": p.name,
            "component": req.component,
            "tag": c.tag,
            "source": req.source,
            "ok": ok,
            "patches": checked,
            "unread_defines": unread,
        }))?;
        let failure = checked.iter().find_map(|c| c.error.clone());
        return Ok(Checked {
            ok,
            report,
            failure,
        });
    }
    // The per-patch picture, as the JSON has it; the plan alone also
    // catches what applying would refuse besides hunks (a symlink).
    let checked = patch::check(&series, &base)?;
    let ok = checked.iter().all(|c| c.status != "failed");
    if ok {
        patch::plan(&series, req.source, &base, &Default::default())?;
    }
    let mut lines: Vec<String> = Vec::new();
    for c in &checked {
        lines.push(match c.status {
            "ok" => format!("ok       {}", c.name),
            "already-applied" => format!("applied  {} (already in the tree)", c.name),
            "failed" => format!("FAILED   {}", c.name),
            _ => format!(
                "-        {} (not tried: it comes after the one that failed)",
                c.name
            ),
        });
        if let Some(e) = &c.error {
            lines.push(format!("         {e}"));
        }
    }
    for name in unread {
        lines.push(format!(
            "warning  define {name} is not read by any CMake file in {}",
            req.source.display()
        ));
    }
    let applied = checked
        .iter()
        .filter(|c| c.status != "failed" && c.status != "not-tried")
        .count();
    lines.push(if ok {
        format!(
            "{} patches apply cleanly to {}",
            checked.len(),
            req.source.display()
        )
    } else {
        format!(
            "{applied} of {} patches apply to {}; the series does not",
            checked.len(),
            req.source.display()
        )
    });
    Ok(Checked {
        ok,
        report: lines.join("\n"),
        failure: checked.iter().find_map(|c| c.error.clone()),
    })
}

/// `patches refresh`: rewrite patch `name` of the profile file's series
/// from the edited tree `source`. Returns the line to show.
pub fn refresh(
    name: &str,
    source: &Path,
    profile: &Path,
    component: &str,
    add: &[String],
) -> Result<String> {
    let p = Profile::from_file(profile)?;
    let c = p.component(component)?;
    let dir = p.series_dir(c)?;
    let disk: PathBuf = dir
        .disk_path()
        .ok_or_else(|| anyhow!("the series of {} is not on disk", profile.display()))?
        .to_owned();
    let series = Series::load(&dir)?;
    let checkout = source::open(source)?;
    let base = |rel: &str| checkout.pristine(rel);
    // The patches before `name` must apply to the tree as it is.
    let text = patch::refresh(&series, name, source, &base, add).map_err(|e| {
        hint(
            format!("{e:#}"),
            format!(
                "--source must be a checkout of the profile's tag with the series applied up to {name} (the checkout `rdna1-patch build --stop-after patch` leaves); the patch file was left as it was"
            ),
        )
    })?;
    // A patch shared with a sibling series is rewritten where it lives,
    // for every series that names it.
    let file = series.get(name).map_or(name, |(_, p)| p.file.as_str());
    let target = disk.join(file);
    if std::fs::read_to_string(&target).ok().as_deref() == Some(text.as_str()) {
        return Ok(format!("{name} is up to date"));
    }
    fsutil::write_atomic(&target, text.as_bytes(), None)
        .map_err(|e| hint(format!("{e:#}"), "the patch file was left as it was"))?;
    let files = Series::load(&dir)?
        .get(name)
        .map(|(_, p)| p.files.join(", "))
        .unwrap_or_default();
    Ok(format!("refreshed {} ({files})", target.display()))
}
