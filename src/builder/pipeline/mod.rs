//! `build`: profile -> fetch -> patch -> configure -> build -> install.
//!
//! Each stage takes what the previous one produced and is skipped when its
//! work is already done, so a re-run with nothing changed costs about as much
//! as a no-op `cmake --build`.
//!
//! `plan` works out what a build would do, `dry_run` says it, `identity`
//! says what the build is (its key, its provenance, a shared build that
//! matches), `preflight` checks what it can before anything is fetched or
//! written, `patches` runs the patch stage, `install` the install stage;
//! the run itself is here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::builder::cmake::{self, Configure, Log};
use crate::builder::git::short;
use crate::builder::patch::{self, ApplyOutcome, Series};
use crate::builder::profile::Profile;
use crate::builder::source;
use crate::builder::tools::{self, Generator};
use crate::builder::workdir::{ComponentDirs, WorkDir};
use crate::error::hint;
use crate::fsutil;
use crate::prefix::key::KeyInputs;
use crate::prefix::{self, Provenance};
use crate::share::choose::{Choice, Want};
use crate::ui::Ui;

pub mod checks;
mod dry_run;
mod identity;
mod install;
mod patches;
mod plan;
mod preflight;
mod route_line;
mod sources;

use patches::PatchRecord;
pub use route_line::Route;
use sources::With;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Stage {
    Fetch,
    Patch,
    Configure,
    Build,
    Install,
}

pub struct Options {
    pub profile: Profile,
    /// Why this profile, when it was chosen for the user's torch.
    pub profile_why: Option<String>,
    /// What this build changes for the user's torch (`select::plan`).
    pub route: Route,
    /// The torch the build is for, when one was found and the profile was
    /// chosen for it (not named with --profile).
    pub torch: Option<ForTorch>,
    pub component: String,
    pub work_dir: WorkDir,
    pub prefix: Option<PathBuf>,
    pub rocm: Option<PathBuf>,
    pub defines: Vec<(String, String)>,
    pub jobs: Option<usize>,
    pub generator: Option<Generator>,
    pub launcher: Option<crate::builder::launcher::Kind>,
    pub stop_after: Stage,
    pub dry_run: bool,
    pub clean: bool,
    pub update: bool,
    /// Build with local edits in the checkout instead of stopping.
    pub keep_local: bool,
    /// A series of the user's own, applied after the profile's.
    pub extra_patches: Option<PathBuf>,
    pub net_timeout: std::time::Duration,
    /// `--gpu-targets`: the offload arches to build for.
    pub gpu_targets: Option<Vec<String>>,
    /// `--no-compat NAME`: compat fixes not to apply ("all": none).
    pub no_compat: Vec<String>,
    /// Where the KFD topology is read from (`/sys`; tests give a recorded tree).
    pub sysfs: PathBuf,
    /// Where a finished build may be pulled from instead of compiling:
    /// `--from`, else the config's caches.
    pub shared: crate::share::choose::Sources,
}

/// A torch a build is for: `install` refuses a library of another ROCm
/// major.minor, so a toolchain of another line is stopped before the fetch.
#[derive(Debug, Clone)]
pub struct ForTorch {
    /// "torch 2.5.1+rocm6.2 at DIR".
    pub label: String,
    /// Its ROCm version (torch.version.hip, or the rocm-sdk version).
    pub rocm: String,
}

/// What a build would do, worked out without touching anything.
struct BuildPlan<'a> {
    opts: &'a Options,
    component: &'a crate::builder::profile::Component,
    /// The component's own source, pinned.
    source: crate::builder::profile::Source,
    /// The sources it reads besides (`{NAME}` in the defines).
    with: Vec<With>,
    series: Series,
    dirs: ComponentDirs,
    /// The project's directory in the checkout (see `ComponentDirs::project`).
    tree: PathBuf,
    lock_file: PathBuf,
    prefix: PathBuf,
    rocm: PathBuf,
    defines: std::collections::BTreeMap<String, String>,
    generator: Generator,
    jobs: usize,
    launcher: Option<crate::builder::launcher::Launcher>,
    /// Set when the profile's compiler was replaced by the one hipconfig names.
    compiler_note: Option<String>,
    /// Where Tensile's assembler and bundler are, when it would not find
    /// them (`tools::tensile_tools`), and the environment that says so.
    tensile_tools: Option<(PathBuf, Vec<(String, PathBuf)>)>,
    /// GPU_TARGETS, and where it came from.
    targets_note: String,
    /// What this toolchain needs of the build, and how it is met.
    compat: Vec<crate::builder::compat::Need>,
    /// The defines the profile and `-D` ask for, before the toolchain's
    /// and the GPU targets are added: the source part of the build key.
    asked: std::collections::BTreeMap<String, String>,
    /// How many of the series' patches are the profile's and the user's
    /// (the compat series follow).
    source_patches: usize,
}

pub fn run(opts: &Options, ui: &Ui) -> Result<()> {
    let start = std::time::Instant::now();
    let plan = opts.plan()?;
    let finished = |how: &str| {
        ui.stage(
            "Finished",
            format!(
                "{} {} in {}{how}",
                opts.component,
                plan.component.pin(),
                took(start.elapsed())
            ),
        );
    };
    if opts.stop_after == Stage::Install && plan.pull(ui)? {
        plan.say_route(ui);
        finished(" (pulled, nothing compiled)");
        return Ok(());
    }
    // One build per profile and work dir at a time; `clean` takes it too.
    let dir = opts.work_dir.profile_dir(&opts.profile.name);
    crate::fsutil::create_dir_all(&dir)?;
    let Some(_lock) = crate::fsutil::try_lock_dir(&dir)? else {
        return Err(hint(
            format!(
                "another rdna1-patch run is using {} right now",
                dir.display()
            ),
            "wait for it to finish, or give this build its own --work-dir; nothing was changed",
        ));
    };
    plan.execute(ui)?;
    plan.say_route(ui);
    finished("");
    Ok(())
}

/// A duration as cargo prints it: 0.42s, 12.3s, 4m 08s, 1h 02m.
pub fn took(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..10 => format!("{:.2}s", d.as_secs_f64()),
        10..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// What `--dry-run` prints, and the error the real run would stop with
/// before fetching (a missing tool), if any; nothing is changed.
pub fn dry_run(opts: &Options) -> Result<(String, Option<anyhow::Error>)> {
    opts.plan()?.describe()
}

impl BuildPlan<'_> {
    fn source_request(&self) -> source::FetchRequest<'_> {
        source::FetchRequest {
            name: &self.opts.component,
            source: &self.source,
            src: &self.dirs.src,
            lock_file: &self.lock_file,
            update: self.opts.update,
            net_timeout: self.opts.net_timeout,
        }
    }

    /// Make what the compat defines point at, inside the work dir.
    fn prepare_compat(&self) -> Result<()> {
        for n in &self.compat {
            // The link is ours and a symlink by design (the second run finds
            // it there); the directories it sits in must not be one.
            if let crate::builder::compat::Fix::Define { link, .. } = &n.fix
                && let Some(dir) = link.0.parent()
            {
                self.opts
                    .work_dir
                    .check_confined(dir, "compat header directory")?;
            }
        }
        crate::builder::compat::prepare(&self.compat)
    }

    /// What was chosen for the user, before anything runs.
    fn announce(&self, ui: &Ui) {
        if let Some(why) = &self.opts.profile_why {
            ui.stage("Profile", format!("{} {why}", self.opts.profile.name));
        }
        // A route still being looked for is said once the look is done,
        // between stages (`say_route_if_ready`), or at the end: python's
        // start runs beside the stages instead of before them.
        self.say_route_if_ready(ui);
        if let Some(note) = &self.compiler_note {
            ui.stage("Compiler", note);
        }
        if let Some(note) = self.tensile_note() {
            ui.stage("Tensile", note);
        }
        ui.stage("Targets", &self.targets_note);
        if self.opts.stop_after >= Stage::Build {
            ui.stage("Cost", self.cost());
        }
        for n in &self.compat {
            ui.stage("Compat", n.describe());
        }
    }

    /// The route's line, once, waiting for the look if it still runs.
    fn say_route(&self, ui: &Ui) {
        if let Some(route) = self.opts.route.take() {
            ui.stage("Route", route);
        }
    }

    /// The route's line, once, if it can be had without waiting.
    fn say_route_if_ready(&self, ui: &Ui) {
        if self.opts.route.is_known() {
            self.say_route(ui);
        }
    }

    fn execute(&self, ui: &Ui) -> Result<()> {
        let stop = self.opts.stop_after;
        self.announce(ui);
        self.check_work_dirs()?;
        if stop >= Stage::Install {
            prefix::preflight(&self.prefix)?;
            self.refuse_other_component()?;
        }
        // Report a missing tool before the long fetch, not after it.
        let tools = if stop >= Stage::Configure {
            Some(self.toolchain(ui)?)
        } else {
            None
        };

        // Made (and recorded as the tool's, what `clean` may remove) once
        // the checks that need no fetch have passed.
        self.dirs.create_recorded()?;
        self.prepare_compat()?;
        let record = PatchRecord::load(&self.patch_record());
        let edited = self.local_edits(&record)?;
        if !edited.is_empty() && self.opts.update {
            return Err(hint(
                format!(
                    "--update may check out another commit over local edits in {}: {}",
                    self.dirs.src.display(),
                    edited.join(", ")
                ),
                "build once without --update to see what they are; keep them in a patch (`rdna1-patch patches refresh`) or drop them first; nothing was changed",
            ));
        }
        let checkout = source::fetch(&self.source_request(), ui)?;
        self.say_route_if_ready(ui);
        ui.stage(
            "Source",
            sources::source_line(&self.opts.component, &self.source, &checkout),
        );
        let with = self.fetch_with(ui)?;
        self.check_tree()?;
        if stop == Stage::Fetch {
            return Ok(());
        }

        let (touched, local) = self.patch(&checkout, record, edited, ui)?;
        self.say_route_if_ready(ui);
        if stop == Stage::Patch {
            return Ok(());
        }
        let tools = tools.expect("preflight ran for configure");
        if self.opts.clean {
            self.clean(ui)?;
        }
        let mut log = Log::create(&self.dirs.logs, "build")?;
        self.configure(&tools, &touched, &mut log, ui)?;
        self.say_route_if_ready(ui);
        if stop == Stage::Configure {
            return Ok(());
        }

        let started = std::time::Instant::now();
        let built = cmake::build(&self.dirs.build, self.jobs, &tools, &mut log, ui)?;
        ui.stage(
            "Build",
            if built.steps == 0 {
                "up to date".to_owned()
            } else {
                format!(
                    "{} steps in {}, log {}",
                    built.steps,
                    took(started.elapsed()),
                    log.path.display()
                )
            },
        );
        self.say_route_if_ready(ui);
        if stop == Stage::Build {
            return Ok(());
        }
        self.install(&checkout, &with, &tools, local, built.steps, &mut log, ui)
    }

    /// `--clean`: a fresh build dir, and no install stamp.
    fn clean(&self, ui: &Ui) -> Result<()> {
        for gone in [&self.dirs.build, &self.install_stamp()] {
            crate::fsutil::remove_path(gone)?;
        }
        ui.stage("Clean", format!("removed {}", self.dirs.build.display()));
        Ok(())
    }

    /// Configure when the defines or the patched CMake files changed.
    fn configure(
        &self,
        tools: &tools::Toolchain,
        touched: &BTreeSet<String>,
        log: &mut Log,
        ui: &Ui,
    ) -> Result<()> {
        let configure = Configure {
            src: &self.tree,
            build: &self.dirs.build,
            prefix: &self.prefix,
            defines: &self.defines,
            patched_cmake_files: cmake::cmake_files(touched, &self.tree)?,
        };
        if configure.is_current(tools) {
            ui.stage("Configure", "up to date");
        } else {
            for name in cmake::unread_defines(&self.tree, &self.defines)? {
                ui.warn(format!(
                    "define {name} is not read by any CMake file of {} at {}; it has no effect (check its spelling, or whether this release has the option)",
                    self.opts.component, self.component.pin()
                ));
            }
            ui.stage(
                "Configure",
                format!(
                    "{} (cmake {})",
                    self.dirs.build.display(),
                    tools.cmake_version
                ),
            );
            configure.run(tools, log, ui)?;
        }
        Ok(())
    }

    /// The cmake configure command line, as `--dry-run` shows it.
    fn configure_args(&self) -> Vec<String> {
        [
            "-S".to_owned(),
            self.tree.display().to_string(),
            "-B".to_owned(),
            self.dirs.build.display().to_string(),
            "-G".to_owned(),
            format!("'{}'", self.generator.cmake_name()),
            format!("-DCMAKE_INSTALL_PREFIX={}", self.prefix.display()),
        ]
        .into_iter()
        .chain(self.defines.iter().map(|(k, v)| format!("'-D{k}={v}'")))
        .collect()
    }
}
