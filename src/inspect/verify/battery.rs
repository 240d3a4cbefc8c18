//! What `verify --smoke` found, as data: where the battery ran, and each
//! case's outcome, errors, MIOpen's choices and times. The text block under
//! the checks, and the `smoke` object of `--json`, made to be shared.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::inspect::checks::Status;

/// Raised when a case or a tolerance changes, so that two reports are never
/// compared as if they had run the same battery.
pub const BATTERY_VERSION: u32 = 2;

#[derive(Debug, Serialize)]
pub struct Battery {
    pub battery: u32,
    /// "gpu", or "cpu" under the tests' hook: then nothing ran on a GPU.
    pub device: &'static str,
    /// Whether every case had its chance: `complete`, `interrupted`
    /// (Ctrl-C, SIGTERM), or `nothing-run` (no GPU, no torch).
    pub status: BatteryStatus,
    /// Why no case ran (no AMD GPU, no torch, torch sees no GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The signal that interrupted the battery.
    #[serde(skip)]
    pub interrupted_by: Option<i32>,
    pub limits: Limits,
    pub tolerances: Vec<Tolerance>,
    #[serde(rename = "where", skip_serializing_if = "Option::is_none")]
    pub place: Option<Where>,
    pub cases: Vec<CaseResult>,
}

#[derive(Debug, Serialize)]
pub struct Limits {
    pub case_seconds: u64,
    pub battery_seconds: u64,
}

/// A case passes when, for every output, the largest error against the
/// float64 CPU result is at most `max_rel` times that result's largest
/// magnitude (0: exact).
#[derive(Debug, Serialize)]
pub struct Tolerance {
    pub dtype: &'static str,
    pub max_rel: f64,
}

/// What ran where: torch and HIP as torch reports them, the chip as the
/// kernel's KFD topology names it, the variables that change what ROCm
/// and MIOpen do, and the libMIOpen the process mapped.
#[derive(Debug, Serialize)]
pub struct Where {
    pub torch: String,
    pub hip: Option<String>,
    /// torch.cuda's name for device 0.
    pub device: String,
    /// HIP's arch for device 0 (gcnArchName): the override shows here.
    pub hip_arch: Option<String>,
    pub kfd: Vec<KfdNode>,
    pub env: BTreeMap<String, String>,
    pub miopen: Option<Library>,
    /// The kernel driver, as sysfs shows it.
    pub driver: Driver,
    /// The GPU libraries the process mapped after `import torch`.
    pub libraries: Vec<Mapped>,
}

/// amdgpu: its version when built out of tree (DKMS), and the module
/// parameters that matter on RDNA1.
#[derive(Debug, Serialize)]
pub struct Driver {
    pub version: Option<String>,
    pub params: BTreeMap<String, Option<String>>,
}

impl Driver {
    pub fn read(sysfs: &std::path::Path) -> Driver {
        Driver {
            version: crate::fsutil::read_small(&sysfs.join("module/amdgpu/version"), 4096)
                .ok()
                .map(|v| v.trim().to_owned()),
            params: crate::gpu::amdgpu_params(sysfs)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }

    /// "amdgpu 6.8.5 (noretry=0 ...)", "not loaded" when sysfs has none.
    pub fn text(&self) -> String {
        if self.version.is_none() && self.params.values().all(Option::is_none) {
            return "amdgpu not loaded (no module parameters in sysfs)".to_owned();
        }
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("?")))
            .collect();
        format!(
            "amdgpu {} ({})",
            self.version.as_deref().unwrap_or("in the kernel's tree"),
            params.join(" ")
        )
    }
}

/// A GPU library the battery's process mapped.
#[derive(Debug, Clone, Serialize)]
pub struct Mapped {
    /// The file's name: libMIOpen.so, librocblas.so.4.
    pub name: String,
    pub path: String,
}

/// An AMD GPU of the KFD topology: the chip the kernel driver names,
/// whatever HSA_OVERRIDE_GFX_VERSION makes HIP report.
#[derive(Debug, Serialize)]
pub struct KfdNode {
    pub node: u32,
    pub gfx: String,
    pub pci: String,
    pub model: &'static str,
}

impl From<&crate::gpu::Gpu> for KfdNode {
    fn from(g: &crate::gpu::Gpu) -> KfdNode {
        KfdNode {
            node: g.node,
            gfx: g.gfx(),
            pci: g.pci.clone(),
            model: g.model(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Library {
    pub path: String,
    pub sha256: Option<String>,
    pub fixed: bool,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatteryStatus {
    Complete,
    Interrupted,
    NothingRun,
}

/// Each case's class (docs/rows.md, "The battery's classes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Within the tolerance of its dtype.
    Ok,
    /// No code for the chip: `invalid device function`, `no kernel image`.
    NoCode,
    /// The child died: a signal, or an error that is not `NoCode`.
    Crash,
    /// The child passed its time limit and was stopped.
    Hang,
    /// The numbers are off by more than the tolerance.
    Wrong,
    /// Never started: interrupted before it, or nothing could run.
    NotRun,
    /// Running when the battery was interrupted.
    Interrupted,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::NoCode => "no-code",
            Outcome::Crash => "crash",
            Outcome::Hang => "hang",
            Outcome::Wrong => "wrong",
            Outcome::NotRun => "not-run",
            Outcome::Interrupted => "interrupted",
        }
    }

    /// The row a class is shown as.
    pub fn status(self) -> Status {
        match self {
            Outcome::Ok => Status::Ok,
            Outcome::NoCode | Outcome::Crash | Outcome::Hang | Outcome::Wrong => Status::Fail,
            Outcome::NotRun | Outcome::Interrupted => Status::Skip,
        }
    }
}

/// The library a `no-code` error came from, and what said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RaisedBy {
    pub library: String,
    /// The file the process mapped, when the maps named it.
    pub path: Option<String>,
    /// `error` (its text names the library) or `maps`.
    pub from: &'static str,
}

#[derive(Debug, Serialize)]
pub struct CaseResult {
    pub name: String,
    /// The library the case exercises: MIOpen's cases are the battery's
    /// verdict; rocBLAS's and hipcub's are reported, never blamed on it.
    pub library: &'static str,
    pub op: &'static str,
    pub dtype: &'static str,
    pub layout: &'static str,
    pub shape: Vec<usize>,
    pub status: Status,
    pub outcome: Outcome,
    pub detail: String,
    pub tolerance: f64,
    /// With `no-code`: the library that raised it, when known.
    pub raised_by: Option<RaisedBy>,
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    pub outputs: Vec<OutputError>,
    /// The first run (which compiles what MIOpen has not cached) and the
    /// second, in the child.
    pub seconds: Option<[f64; 2]>,
    /// The child's whole life, import included.
    pub elapsed: f64,
    /// What MIOpen's log says it chose (solver ids, or kernels on older
    /// releases), in order; empty when torch did not call MIOpen.
    pub solvers: Vec<String>,
    /// MIOpenDriver commands that rerun the case's MIOpen calls alone.
    pub commands: Vec<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct OutputError {
    pub name: String,
    /// None when the result holds NaN or Inf, or has another shape.
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    /// The largest magnitude of the CPU result.
    pub scale: f64,
    /// Compared exactly (integers, indices, text), whatever the dtype's
    /// tolerance.
    pub exact: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl CaseResult {
    pub fn is_miopen(&self) -> bool {
        self.library == "MIOpen"
    }
}

impl Battery {
    /// Each dtype's tolerance: "fp32 1e-3, fp16 1e-2, int64 exact".
    pub fn tolerances_text(&self) -> String {
        let each: Vec<String> = self
            .tolerances
            .iter()
            .map(|t| match t.max_rel {
                0.0 => format!("{} exact", t.dtype),
                r => format!("{} {r:e}", t.dtype),
            })
            .collect();
        each.join(", ")
    }

    /// The block printed under the checks: where it ran, the tolerances,
    /// then one row per case, MIOpen's first, the others after a line that
    /// says they are not MIOpen's.
    pub fn text(&self) -> String {
        let mut lines = vec![format!(
            "smoke battery {}: {} cases, each in a child process of its own; limit {} s a case, {} s in all",
            self.battery,
            self.cases.len(),
            self.limits.case_seconds,
            self.limits.battery_seconds
        )];
        if self.device == "cpu" {
            lines.push("device: the CPU, by the tests' hook RDNA1_PATCH_SMOKE_DEVICE=cpu: nothing here ran on a GPU or in MIOpen".to_owned());
        }
        if let Some(why) = &self.skipped {
            lines.push(format!("not run: {why}"));
        }
        if let Some(w) = &self.place {
            lines.extend(w.text());
        }
        lines.push(format!(
            "tolerance: the largest error over the largest |value| of the float64 CPU result: {}",
            self.tolerances_text()
        ));
        let width = self.cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let row =
            |c: &CaseResult| format!("{:<4}  {:<width$}  {}", c.status.label(), c.name, c.detail);
        lines.extend(self.cases.iter().filter(|c| c.is_miopen()).map(row));
        if self.cases.iter().any(|c| !c.is_miopen()) {
            lines.push("outside MIOpen (reported, never blamed on MIOpen):".to_owned());
            lines.extend(self.cases.iter().filter(|c| !c.is_miopen()).map(row));
        }
        lines.join("\n")
    }

    /// [`Battery::text`] with `home` written `~`, each line wrapped to
    /// `width`: a case row under its detail, the rest indented by two.
    pub fn text_wrapped(&self, width: Option<usize>, home: Option<&str>) -> String {
        let text = self.text();
        let text = home.map_or(text.clone(), |h| tilde(&text, h));
        let Some(width) = width else {
            return text;
        };
        let detail =
            " ".repeat(4 + 2 + self.cases.iter().map(|c| c.name.len()).max().unwrap_or(0) + 2);
        crate::inspect::glance::wrap(&text, width, |line| {
            let row = ["ok  ", "FAIL", "skip", "warn"]
                .iter()
                .any(|s| line.starts_with(s));
            if row { &detail } else { "  " }
        })
    }
}

impl Where {
    fn text(&self) -> Vec<String> {
        let kfd: Vec<String> = self
            .kfd
            .iter()
            .map(|g| format!("{} (node {}, {})", g.gfx, g.node, g.pci))
            .collect();
        let hip = self
            .hip
            .as_deref()
            .map_or("no HIP".to_owned(), |h| format!("HIP {h}"));
        let mut out = vec![format!(
            "ran: torch {} ({hip}) on {}: HIP reports {}, the KFD topology {}",
            self.torch,
            self.device,
            self.hip_arch.as_deref().unwrap_or("no GPU arch"),
            if kfd.is_empty() {
                "no AMD GPU".to_owned()
            } else {
                kfd.join(", ")
            }
        )];
        out.push(format!("driver: {}", self.driver.text()));
        out.push(if self.env.is_empty() {
            "environment: HSA_OVERRIDE_GFX_VERSION is not set, nor any MIOPEN_ variable".to_owned()
        } else {
            let vars: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("environment: {}", vars.join(" "))
        });
        out.push(match &self.miopen {
            Some(l) => format!(
                "libMIOpen: {} (SHA-256 {}): {}",
                l.path,
                l.sha256.as_deref().unwrap_or("unreadable"),
                l.why
            ),
            None => "libMIOpen: none mapped by the process".to_owned(),
        });
        out
    }
}

/// `text` with the user's home directory written `~`, where it stands as
/// a whole path component: what a report to share may hold.
pub fn tilde(text: &str, home: &str) -> String {
    let home = home.trim_end_matches('/');
    if home.is_empty() {
        return text.to_owned();
    }
    let path_char = |c: char| c.is_alphanumeric() || "._-~".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(home) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + home.len()..].chars().next();
        let whole = !before.is_some_and(path_char) && !after.is_some_and(path_char);
        out.push_str(&rest[..at]);
        out.push_str(if whole { "~" } else { home });
        rest = &rest[at + home.len()..];
    }
    out.push_str(rest);
    out
}

/// [`tilde`] on every string of a JSON document.
pub fn tilde_json(v: &mut serde_json::Value, home: &str) {
    match v {
        serde_json::Value::String(s) => *s = tilde(s, home),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| tilde_json(x, home)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| tilde_json(x, home)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_written_tilde_only_as_a_whole_component() {
        let home = "/home/ann";
        assert_eq!(
            tilde("/home/ann/venv/lib/libMIOpen.so", home),
            "~/venv/lib/libMIOpen.so"
        );
        assert_eq!(tilde("at /home/ann: here", home), "at ~: here");
        assert_eq!(
            tilde("/home/anna/x and /data/home/ann/y", home),
            "/home/anna/x and /data/home/ann/y"
        );
        assert_eq!(
            tilde("'/home/ann/a', \"/home/ann\"", "/home/ann/"),
            "'~/a', \"~\""
        );
        assert_eq!(tilde("/x", ""), "/x");
        let mut v = serde_json::json!({"a": ["/home/ann/x", 1], "b": {"c": "/home/ann"}});
        tilde_json(&mut v, home);
        assert_eq!(v, serde_json::json!({"a": ["~/x", 1], "b": {"c": "~"}}));
    }
}
