//! `status`: what is built, what is installed where, and the open or last
//! transaction, read without changing anything.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::prefix::Provenance;
use crate::swap::txn::{Journal, State, StateDir};

#[derive(Debug)]
pub struct StatusReport {
    pub state_dir: PathBuf,
    pub prefix: PathBuf,
    /// None with `build_error` saying why.
    pub build: Option<Provenance>,
    pub build_error: Option<String>,
    /// Transactions whose library is in place now, newest first.
    pub installed: Vec<Journal>,
    /// Transactions a killed run left open.
    pub unfinished: Vec<Journal>,
    pub last: Option<Journal>,
    /// Journal files that cannot be read or trusted.
    pub damaged: Vec<crate::swap::txn::Damaged>,
    /// Installed transactions whose library is no longer in torch: each
    /// id, and what is there now.
    pub replaced: Vec<(u32, String)>,
    /// Installed system-route transactions whose system library is no
    /// longer the file the copy was made from: id, library, SHA-256 now.
    pub upgraded: Vec<(u32, PathBuf, String)>,
    /// Installed rocBLAS transactions: id, and its prefix against its
    /// MD5SUMS (what it is, or what is wrong).
    pub rocblas: Vec<(u32, std::result::Result<String, String>)>,
}

/// What status says where nothing was ever installed: doctor, not a
/// build profile the user's torch may not need.
const NOTHING_INSTALLED: &str =
    "nothing of rdna1-patch's is installed here: `rdna1-patch doctor` says what this torch needs";

pub fn report(prefix: &Path, state: &StateDir) -> Result<StatusReport> {
    let (build, build_error) = match Provenance::read(prefix) {
        Ok(p) => (Some(p), None),
        Err(e) if crate::error::is_not_found(&e) => (
            None,
            Some(
                "nothing is built there: `rdna1-patch build` builds it, or pulls one with --from"
                    .to_owned(),
            ),
        ),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let all = state.read()?;
    let journals = all.list;
    let jobs = crate::checksum::default_jobs();
    // rocBLAS's set: torch's library and Tensile directory as installed,
    // the prefix against its MD5SUMS.
    let mut rocblas = Vec::new();
    let mut replaced = Vec::new();
    for j in journals
        .iter()
        .filter(|j| j.state == State::Installed && j.set.is_some())
    {
        let s = crate::swap::blas::standing(j, jobs);
        if let Err(what) = s.torch {
            replaced.push((j.id, what));
        }
        rocblas.push((j.id, s.prefix));
    }
    // The journal says what was installed; the file says what is there.
    replaced.extend(
        journals
            .iter()
            .filter(|j| j.state == State::Installed && j.set.is_none())
            .filter_map(|j| match crate::checksum::md5_by_stamp(&j.torch.target) {
                Ok(m) if m == j.new.md5 => None,
                Ok(m) => Some((j.id, format!("MD5 {m}"))),
                Err(e) => Some((j.id, format!("{e:#}"))),
            }),
    );
    replaced.sort();
    // A rocBLAS copy is a build, not a fix of the system's file: a
    // package upgrade of that file leaves it as good as it was.
    let upgraded = journals
        .iter()
        .filter(|j| j.state == State::Installed && j.set.is_none())
        .filter_map(|j| crate::swap::txn::source_changed(j).map(|(l, now)| (j.id, l, now)))
        .collect();
    Ok(StatusReport {
        rocblas,
        upgraded,
        replaced,
        damaged: all.damaged,
        state_dir: state.root().to_owned(),
        prefix: prefix.to_owned(),
        build,
        build_error,
        installed: journals
            .iter()
            .rev()
            .filter(|j| j.state == State::Installed)
            .cloned()
            .collect(),
        unfinished: journals
            .iter()
            .filter(|j| j.state.unfinished())
            .cloned()
            .collect(),
        last: journals.last().cloned(),
    })
}

/// A transaction as the JSON documents show it: what a user or a script
/// needs, not the journal's bookkeeping (no `inherits`), modes in octal.
pub fn transaction_json(j: &Journal) -> serde_json::Value {
    let file = |f: &crate::swap::txn::FileRec| {
        serde_json::json!({
            "md5": f.md5,
            "size": f.size,
            "mode": format!("{:04o}", f.mode & 0o7777),
        })
    };
    serde_json::json!({
        "id": j.id,
        "state": j.state.name(),
        "created": j.created,
        "updated": j.updated,
        "torch": {
            "dir": j.torch.dir,
            "version": j.torch.version,
            "hip": j.torch.hip,
            "library": j.torch.target,
            "layout": j.layout(),
            "rocm_sdk": j.torch.sdk.as_ref().map(|s| serde_json::json!({
                "version": s.version,
                "family": s.family,
                "package": s.package,
                "loads": s.library,
            })),
        },
        "build": {
            "prefix": j.build.prefix,
            "library": j.build.library,
            "profile": j.build.profile,
            "rocm": j.build.rocm,
            "commit": j.build.commit,
            "build_id": j.build.build_id,
            "relinked": !j.build.relink.is_empty(),
        },
        "original": file(&j.original),
        "installed": file(&j.new),
        "backup": j.backup,
        "component": if j.set.is_some() { "rocblas" } else { "miopen" },
        "tensile": j.set.as_ref().map(|s| serde_json::json!({
            "dir": s.dir,
            "loads": s.loads,
            "original": s.original,
            "installed": s.new,
        })),
        "system": j.system.as_ref().map(|s| serde_json::json!({
            "library": s.library,
            "sha256": s.sha256,
            "package": s.package,
            "libtorch_hip": s.hip,
            "copy_run_path": s.copy_run_path,
            "edit": s.edit.as_ref().map(|e| serde_json::json!({
                "before": e.before,
                "after": e.after,
                "md5": e.new.md5,
            })),
        })),
    })
}

/// Every transaction and the damaged journals: `rollback --list --json`.
pub fn transactions_json(state: &StateDir) -> Result<serde_json::Value> {
    let all = state.read()?;
    Ok(serde_json::json!({
        "schema_version": crate::version::SCHEMA_VERSION,
        "state_dir": crate::version::JsonPath(state.root()),
        "transactions": all.list.iter().map(transaction_json).collect::<Vec<_>>(),
        "damaged": all.damaged,
    }))
}

impl StatusReport {
    /// `status --json`.
    pub fn json(&self) -> serde_json::Value {
        let list = |js: &[Journal]| js.iter().map(transaction_json).collect::<Vec<_>>();
        let answer = self.answer();
        serde_json::json!({
            "schema_version": crate::version::SCHEMA_VERSION,
            "ok": answer.ok,
            "verdict": answer.verdict,
            "state_dir": crate::version::JsonPath(&self.state_dir),
            "prefix": crate::version::JsonPath(&self.prefix),
            "build": self.build,
            "build_error": self.build_error,
            "installed": list(&self.installed),
            "unfinished": list(&self.unfinished),
            "last": self.last.as_ref().map(transaction_json),
            "damaged": self.damaged,
            "replaced": self.replaced.iter().map(|(id, now)| serde_json::json!({"id": id, "now": now})).collect::<Vec<_>>(),
            "upgraded": self.upgraded.iter().map(|(id, lib, now)| serde_json::json!({"id": id, "library": lib, "sha256": now})).collect::<Vec<_>>(),
            "rocblas": self.rocblas.iter().map(|(id, prefix)| match prefix {
                Ok(ok) => serde_json::json!({"id": id, "prefix_ok": true, "prefix": ok}),
                Err(bad) => serde_json::json!({"id": id, "prefix_ok": false, "prefix": bad}),
            }).collect::<Vec<_>>(),
        })
    }

    /// The system route's lines: what the copy was made from, and whether
    /// that library is still the file (a package upgrade since).
    fn system_lines(&self, j: &Journal, lines: &mut Vec<String>) {
        if let Some(s) = &j.system {
            lines.push(format!(
                "            system route: {} {} ({}), which is only read; libtorch_hip.so {}",
                if j.set.is_some() {
                    "a rocBLAS build beside"
                } else {
                    "a fixed copy of"
                },
                s.library.display(),
                if s.package.is_empty() {
                    "no package's"
                } else {
                    &s.package
                },
                match &s.edit {
                    Some(e) => format!(
                        "run path {} -> {}",
                        if e.before.is_empty() {
                            "(none)"
                        } else {
                            &e.before
                        },
                        e.after
                    ),
                    None => "not edited".to_owned(),
                }
            ));
        }
        if let Some((_, lib, now)) = self.upgraded.iter().find(|(id, ..)| *id == j.id) {
            lines.push(format!(
                    "            but {} changed since the copy was made (SHA-256 {now}, was {}; a package upgrade?): `rdna1-patch install --into-torch` takes the old copy out and fixes the library the system has now",
                    lib.display(),
                    j.system.as_ref().map_or("", |s| s.sha256.as_str())
                ));
        }
    }

    /// The answer, by the rule doctor and verify take (`CheckReport::answer`):
    /// an open transaction, a damaged journal or an install something
    /// replaced fails it; nothing installed, ever, is no pass (exit 3), and
    /// points at doctor rather than at a build the user may not need.
    pub fn answer(&self) -> crate::inspect::checks::Answer {
        self.rows().answer()
    }

    fn rows(&self) -> crate::inspect::checks::CheckReport {
        use crate::inspect::checks::{CheckReport, Status};
        let mut r = CheckReport::default();
        for j in &self.unfinished {
            r.push("unfinished", Status::Fail, format!("transaction {}", j.id));
        }
        for d in &self.damaged {
            r.push("damaged", Status::Fail, d.path.display().to_string());
        }
        for (id, _) in &self.replaced {
            r.push("replaced", Status::Fail, format!("transaction {id}"));
        }
        for (id, ..) in &self.upgraded {
            r.push("upgraded", Status::Warn, format!("transaction {id}"));
        }
        for (id, _) in self.rocblas.iter().filter(|(_, p)| p.is_err()) {
            r.push("prefix", Status::Warn, format!("transaction {id}"));
        }
        for j in &self.installed {
            r.push("installed", Status::Ok, format!("transaction {}", j.id));
        }
        if self.nothing_installed() {
            r.unfinished = Some(NOTHING_INSTALLED.into());
        }
        r
    }

    /// Nothing of ours is in torch now: no install was ever made here and
    /// no build is in the prefix, or every transaction was rolled back
    /// (then doctor, not this build, says what torch needs).
    fn nothing_installed(&self) -> bool {
        let clean = self.installed.is_empty()
            && self.unfinished.is_empty()
            && self.damaged.is_empty()
            && self.replaced.is_empty();
        clean && (self.last.is_some() || self.build.is_none())
    }

    /// The build in the prefix: what it is, its library, how it was
    /// fixed and its patches; or why there is none.
    fn build_lines(&self, lines: &mut Vec<String>) {
        match &self.build {
            Some(p) => {
                lines.push(format!(
                    "build:      {} {} {} ({}), profile {}, ROCm {}, installed {}",
                    self.prefix.display(),
                    p.component,
                    p.source.tag,
                    crate::builder::git::short(&p.source.commit),
                    p.profile,
                    p.rocm.found.as_deref().unwrap_or(&p.rocm.version),
                    p.date
                ));
                lines.push(format!("            library {}", p.library.path));
                if let Some(proof) = p.in_place.as_ref().and_then(|i| i.proof.as_deref()) {
                    lines.push(format!("            fixed in place, {proof}"));
                }
                for patch in &p.patches {
                    lines.push(format!(
                        "            patch {}{}",
                        patch.name,
                        patch
                            .marker
                            .as_deref()
                            .map(|m| format!("  ({m})"))
                            .unwrap_or_default()
                    ));
                }
            }
            None => lines.push(format!(
                "build:      none in {} ({})",
                self.prefix.display(),
                self.build_error.as_deref().unwrap_or("")
            )),
        }
    }

    /// The report as `status` prints it: with `detail` whole; else at a
    /// glance, `home` written `~`, the proof cut to
    /// [`GLANCE`](crate::inspect::glance::GLANCE) characters (the JSON
    /// has it whole) and every other line wrapped there, its commands
    /// whole.
    pub fn text_for(&self, detail: bool, home: Option<&str>) -> String {
        use crate::inspect::glance::{glance, glance_wrapped, shorten};
        let text = self.text();
        if detail {
            return text;
        }
        let indent = " ".repeat(12);
        text.lines()
            .map(|l| home.map_or(l.to_owned(), |h| shorten(l, h, "~")))
            .map(
                |l| match l.starts_with(&format!("{indent}fixed in place")) {
                    true => glance(&l),
                    false => glance_wrapped(&l, &indent),
                },
            )
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The report whole, as `status --detail` prints it.
    fn text(&self) -> String {
        let mut lines = vec![format!("verdict: {}", self.answer().verdict)];
        if self.last.is_none() && self.nothing_installed() {
            lines.push(format!(
                "last:       no transactions in {}",
                self.state_dir.display()
            ));
            return lines.join("\n");
        }
        self.build_lines(&mut lines);
        if self.installed.is_empty() {
            lines.push("installed:  nowhere".to_owned());
        }
        for j in &self.installed {
            let what = match &j.set {
                Some(set) => format!(
                    "{} and {} ({} files), rocBLAS",
                    j.torch.target.display(),
                    set.dir.display(),
                    set.new.files
                ),
                None => j.torch.target.display().to_string(),
            };
            lines.push(format!(
                "installed:  {what} (transaction {}, {}), MD5 {}, layout {}",
                j.id,
                j.created,
                j.new.md5,
                j.layout()
            ));
            self.system_lines(j, &mut lines);
            if let Some((_, prefix)) = self.rocblas.iter().find(|(id, _)| *id == j.id) {
                lines.push(match prefix {
                    Ok(ok) => format!("            from {}: {ok}", j.build.prefix.display()),
                    Err(bad) => format!(
                        "            from {}, but {bad}: torch is unchanged; `rdna1-patch build rocblas` makes the prefix whole again",
                        j.build.prefix.display()
                    ),
                });
            }
            if let Some((_, now)) = self.replaced.iter().find(|(id, _)| *id == j.id) {
                lines.push(format!(
                    "            but it is not there now ({now}): something replaced it (a pip install?); `{}` installs again, `{}` closes the transaction",
                    match j.set.is_some() {
                        true => crate::shell::tool(["install", "rocblas", "--into-torch"]),
                        false => crate::shell::tool(["install", "--into-torch"]),
                    },
                    crate::shell::tool(["rollback", "--abandon", &j.id.to_string()])
                ));
            }
        }
        for j in &self.unfinished {
            lines.push(format!(
                "unfinished: transaction {} stopped while {}: `rdna1-patch rollback` restores the original, `rdna1-patch install --into-torch` finishes or restarts it",
                j.id,
                j.state.name()
            ));
        }
        for d in &self.damaged {
            lines.push(format!(
                "damaged:    {} ({}): install and rollback refuse to run until it is fixed or set aside",
                d.path.display(),
                d.error
            ));
        }
        match &self.last {
            Some(j) => lines.push(format!("last:     {}", j.describe())),
            None => lines.push(format!(
                "last:       no transactions in {}",
                self.state_dir.display()
            )),
        }
        lines.join("\n")
    }
}
