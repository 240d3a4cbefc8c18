//! One module per verb: parse arguments, call the library, nothing more.

pub(crate) mod build;
pub(crate) mod clean;
pub(crate) mod doctor;
pub(crate) mod install;
pub(crate) mod man;
pub(crate) mod patches;
pub(crate) mod profiles;
pub(crate) mod publish;
pub(crate) mod rollback;
pub(crate) mod status;
pub(crate) mod term;
pub(crate) mod trust;
pub(crate) mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::builder::profile::{DEFAULT_PROFILE, Profile};

/// `--profile NAME|FILE`, shared by the verbs that need one.
#[derive(clap::Args, Debug, Clone)]
pub struct ProfileArg {
    /// A built-in profile name, or a profile TOML file [default: rocm-6.2.4;
    /// build and install choose the one for your torch]
    #[arg(long, value_name = "NAME|FILE", value_parser = Offered(crate::builder::profile::builtin_names),
          hide_possible_values = true)]
    pub profile: Option<String>,
}

/// A value that may be anything (a profile may be a file), with the
/// values a shell completion offers: clap's completion scripts list a
/// parser's possible values, and this parser checks none of them.
#[derive(Clone)]
pub struct Offered(pub fn() -> Vec<String>);

impl clap::builder::TypedValueParser for Offered {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            (self.0)()
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// The components a built-in profile builds, each once, in name order.
pub fn offered_components() -> Vec<String> {
    let all: std::collections::BTreeSet<String> = crate::builder::profile::builtin_names()
        .iter()
        .filter_map(|n| Profile::load(n).ok())
        .flat_map(|p| p.components.into_keys())
        .collect();
    all.into_iter().collect()
}

impl ProfileArg {
    pub fn load(&self) -> Result<Profile> {
        Profile::load(self.profile.as_deref().unwrap_or(DEFAULT_PROFILE))
    }

    /// The profile named, else the one for the torch found (`found`, the
    /// one look for it the command made), with why it was chosen.
    pub fn for_torch(
        &self,
        found: &Result<crate::torch::Torch>,
    ) -> Result<(Profile, Option<String>)> {
        match &self.profile {
            Some(p) => Ok((Profile::load(p)?, None)),
            None => {
                let c = crate::select::profile_for_found(found)?;
                Ok((c.profile, Some(c.why)))
            }
        }
    }
}

/// Which torch: `--python` or `--torch-dir`.
#[derive(clap::Args, Debug, Clone)]
pub struct TorchArg {
    /// The python whose torch to use (a venv's works) [default: python3 on PATH]
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// The torch package directory itself, instead of asking a python
    #[arg(long, value_name = "DIR", conflicts_with = "python")]
    pub torch_dir: Option<PathBuf>,
}

impl TorchArg {
    pub fn locator(&self) -> anyhow::Result<crate::torch::Locator> {
        crate::torch::Locator::new(self.python.clone(), self.torch_dir.clone())
    }

    /// The python asked for torch, and why that one; none with --torch-dir.
    pub fn python(&self) -> anyhow::Result<Option<crate::which_python::Chosen>> {
        self.torch_dir
            .is_none()
            .then(|| crate::which_python::choose(self.python.as_deref()))
            .transpose()
    }

    pub fn given(&self) -> bool {
        self.python.is_some() || self.torch_dir.is_some()
    }
}

/// `$ROCM_PATH`, the variable ROCm's own tools read, when set and not empty:
/// the default for `--rocm`, ahead of the profile's path.
pub fn rocm_path_env() -> Option<PathBuf> {
    std::env::var_os("ROCM_PATH")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

pub use crate::gpu::sysfs_root;

/// Where `verify --smoke` runs its battery: the GPU, or the CPU when
/// `$RDNA1_PATCH_SMOKE_DEVICE` is `cpu`. A test hook (`cargo xtask
/// smoke-cpu` proves the battery's comparisons on a real CPU torch with
/// it), kept out of the options so that no user runs a "GPU check" on the CPU.
pub fn smoke_device() -> crate::inspect::verify::Device {
    match std::env::var("RDNA1_PATCH_SMOKE_DEVICE").as_deref() {
        Ok("cpu") => crate::inspect::verify::Device::Cpu,
        _ => crate::inspect::verify::Device::Gpu,
    }
}

/// `--state-dir`, where transactions and backups are kept.
#[derive(clap::Args, Debug, Clone)]
pub struct StateArg {
    /// Transactions and backups [default: $XDG_STATE_HOME/rdna1-patch]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl StateArg {
    pub fn open(&self) -> Result<crate::swap::txn::StateDir> {
        crate::swap::txn::StateDir::new(self.state_dir.as_deref())
    }
}

/// The prefix a build installed to: `--prefix`, or the profile's.
#[derive(clap::Args, Debug, Clone)]
pub struct PrefixArg {
    #[command(flatten)]
    pub profile: ProfileArg,
    /// The install prefix of the build [default: the profile's, else
    /// $XDG_DATA_HOME/rdna1-patch/<profile>]
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
}

impl PrefixArg {
    pub fn resolve(&self) -> Result<PathBuf> {
        match &self.prefix {
            Some(p) => Ok(std::path::absolute(p)?),
            None => self.profile.load()?.install_prefix(),
        }
    }

    /// The prefix as given; with neither --prefix nor --profile, the one
    /// the newest install in torch used (`install --prefix DIR` is
    /// remembered in its transaction), else the default profile's.
    pub fn resolve_installed(&self, state: &crate::swap::txn::StateDir) -> Result<PathBuf> {
        if self.prefix.is_none()
            && self.profile.profile.is_none()
            && let Some((_, prefix)) = state.installed_prefix()
        {
            return Ok(prefix);
        }
        self.resolve()
    }

    /// The prefix of `component`'s build: --prefix, else the one the
    /// profile (named, or chosen for the torch found) installs it to, with
    /// why that profile; a profile without the component names those with it.
    pub fn resolve_component(
        &self,
        found: &Result<crate::torch::Torch>,
        component: &str,
    ) -> Result<(PathBuf, Option<String>)> {
        if let Some(p) = &self.prefix {
            return Ok((std::path::absolute(p)?, None));
        }
        let (profile, why) = self.profile.for_torch(found)?;
        if let (Some(_), Ok(t), Err(_)) = (&why, found, profile.component(component)) {
            // Chosen for torch's line, which no profile builds it for.
            let with: Vec<String> = crate::builder::profile::builtin_names()
                .iter()
                .filter_map(|n| Profile::load(n).ok())
                .filter(|p| p.components.contains_key(component))
                .map(|p| format!("{} (ROCm {})", p.name, p.rocm.torch_hip))
                .collect();
            return Err(crate::error::hint(
                format!(
                    "torch {} is for ROCm {}, and the profile of that line, {}, builds no {component}; nothing was changed",
                    t.version,
                    crate::version::major_minor(t.rocm()),
                    profile.name
                ),
                format!(
                    "{component} is built for a torch of these lines: {}; or name a build of yours with --prefix DIR",
                    with.join(", ")
                ),
            ));
        }
        profile.component(component)?;
        let why = why.map(|w| format!("{} {w}", profile.name));
        Ok((profile.install_prefix_for(component)?, why))
    }

    /// The prefix, the profile it is for (None when --prefix names it and
    /// no profile can be had), and why the profile was chosen.
    pub fn resolve_with_profile(
        &self,
        found: &Result<crate::torch::Torch>,
    ) -> Result<(PathBuf, Option<Profile>, Option<String>)> {
        let chosen = self.profile.for_torch(found);
        match (&self.prefix, chosen) {
            (Some(p), chosen) => Ok((std::path::absolute(p)?, chosen.ok().map(|c| c.0), None)),
            (None, chosen) => {
                let (profile, why) = chosen?;
                let why = why.map(|w| format!("{} {w}", profile.name));
                Ok((profile.install_prefix()?, Some(profile), why))
            }
        }
    }
}

/// How `verify` and `doctor` report.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

impl ReportArgs {
    /// Rows whole: the global `--detail` (or `-v`).
    pub fn detail(&self) -> bool {
        crate::output::settings().whole()
    }
}

/// Home as `~` in the report a person reads.
pub(crate) fn home_short(report: &mut crate::inspect::checks::CheckReport) {
    if let Ok(home) = std::env::var("HOME") {
        report.short.push((home, "~".to_owned()));
    }
}

/// A report with its status words in colour, when colour is on (`--color
/// always` on a pipe too, as cargo colours its own status words).
pub(crate) fn painted(text: &str) -> String {
    use crate::output::{ERROR, HELP, STAGE, WARNING, paint};
    let styles = [
        ("ok", STAGE),
        ("warn", WARNING),
        ("FAIL", ERROR),
        ("----", ERROR),
        ("skip", HELP),
    ];
    text.lines()
        .map(|l| {
            let word = l.split(' ').next().unwrap_or_default();
            match styles.iter().find(|(w, _)| *w == word) {
                Some((w, style)) => format!("{}{}", paint(*style, w), &l[w.len()..]),
                None => l.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Print a check report (or its JSON); exit 1 if any check failed.
pub fn print_report(
    report: &crate::inspect::checks::CheckReport,
    args: &ReportArgs,
) -> Result<ExitCode> {
    if args.json {
        crate::outln!("{}", report.json());
    } else {
        let mut report = report.clone();
        home_short(&mut report);
        let text = report.text_wrapped(term::stdout_width(), args.detail());
        crate::outln!("{}", painted(&text));
    }
    Ok(ExitCode::from(report.answer().exit))
}
