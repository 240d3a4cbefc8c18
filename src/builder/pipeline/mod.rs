//! `build`: profile -> fetch -> patch -> configure -> build -> install.
//!
//! Each stage takes what the previous one produced and is skipped when its
//! work is already done, so a re-run with nothing changed costs about as much
//! as a no-op `cmake --build`.
//!
//! `plan` works out what a build would do, `dry_run` says it, `identity`
//! says what the build is (its key, its provenance, a shared build that
//! matches), `patches` runs the patch stage; the run itself is here.

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
mod patches;
mod plan;
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

    /// A prefix holding another component's build (a profile's own
    /// `prefix`, or --prefix) is not this build's to replace.
    fn refuse_other_component(&self) -> Result<()> {
        let Ok(there) = Provenance::read(&self.prefix) else {
            return Ok(());
        };
        if there.component == self.opts.component {
            return Ok(());
        }
        Err(hint(
            format!(
                "the prefix {} holds a {} build (profile {}); installing {} there would replace it; nothing was built",
                self.prefix.display(),
                there.component,
                there.profile,
                self.opts.component
            ),
            format!(
                "give this build a prefix of its own: --prefix DIR (e.g. {}-{})",
                self.prefix.display(),
                self.opts.component
            ),
        ))
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

    /// Every dir of this build that the tool writes must be reached from
    /// the work dir without a symlink.
    fn check_work_dirs(&self) -> Result<()> {
        for (dir, what) in [
            (&self.dirs.src, "checkout"),
            (&self.dirs.build, "build dir"),
            (&self.dirs.logs, "log dir"),
            (&self.dirs.state, "build state"),
        ] {
            self.opts.work_dir.check_confined(dir, what)?;
        }
        Ok(())
    }

    /// The project's directory is the origin's content: patches and CMake
    /// may go there only when no symlink in it leads elsewhere.
    fn check_tree(&self) -> Result<()> {
        self.opts
            .work_dir
            .check_confined(&self.tree, "project directory")?;
        if !self.tree.is_dir() {
            return Err(hint(
                format!(
                    "{} {} has no directory {}",
                    self.component.url,
                    self.component.pin(),
                    self.component.subdir.as_deref().unwrap_or(".")
                ),
                "check the profile's `subdir`: it names the project's directory inside the repository",
            ));
        }
        Ok(())
    }

    /// The tools configure and build need, with warnings about what differs
    /// from the profile.
    fn toolchain(&self, ui: &Ui) -> Result<tools::Toolchain> {
        let mut t = self.preflight()?;
        if let Some((_, env)) = &self.tensile_tools {
            t.env = env.clone();
        }
        if t.generator_fallback {
            ui.warn(format!(
                "{} is not installed; using {} instead",
                self.generator.cmake_name(),
                t.generator.cmake_name()
            ));
        }
        match &t.rocm.version {
            Some(v) if crate::version::major_minor(v) != crate::version::major_minor(&self.opts.profile.rocm.version) => {
                ui.warn(format!(
                    "ROCm at {} is {v}, the profile targets {}; the library may not match your torch",
                    self.rocm.display(),
                    self.opts.profile.rocm.version
                ))
            }
            None => ui.warn(format!("cannot tell the ROCm version at {}", self.rocm.display())),
            _ => {}
        }
        Ok(t)
    }

    /// What the build tells Tensile, for the plan and the stages.
    fn tensile_note(&self) -> Option<String> {
        let (dir, _) = self.tensile_tools.as_ref()?;
        Some(format!(
            "assembler and offload bundler from HIP's clang in {} ({} has no llvm/bin, where Tensile looks)",
            dir.display(),
            self.rocm.display()
        ))
    }

    /// The tools configure and build need, and a ROCm some profile is for:
    /// one no profile serves (Debian 12's 5.2) would fail most of an hour
    /// in, and one of another line than the torch's would make a library
    /// `install` refuses an hour later, so either stops the build before
    /// the fetch.
    pub(super) fn preflight(&self) -> Result<tools::Toolchain> {
        self.check_served()?;
        let t = tools::preflight(self.generator, &self.rocm, &self.defines)?;
        self.check_requires()?;
        let Some(v) = t.rocm.version.as_deref() else {
            return Ok(t);
        };
        let line = crate::version::major_minor(v);
        match &self.opts.torch {
            Some(torch) if crate::version::major_minor(&torch.rocm) != line => Err(hint(
                format!(
                    "ROCm {v} at {} would build {} for ROCm {line}, but {} is for ROCm {}: `install --into-torch` refuses a library of another ROCm major.minor (the mix crashes with memory faults)",
                    self.rocm.display(),
                    self.project(),
                    torch.label,
                    crate::version::major_minor(&torch.rocm)
                ),
                format!(
                    "build with ROCm {} (AMD's packages put it at /opt/rocm; or --rocm DIR), or compile nothing: pull a published build (`rdna1-patch trust KEY`, then `rdna1-patch build --from REF`); to build for another torch anyway, name the profile with --profile",
                    crate::version::major_minor(&torch.rocm)
                ),
            )),
            _ => Ok(t),
        }
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

    /// The install stage, unless the prefix already holds exactly this build.
    #[allow(clippy::too_many_arguments)]
    fn install(
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

    fn install_stamp(&self) -> PathBuf {
        self.dirs.state.join("install.toml")
    }

    /// The build key's line of `--dry-run`, and what it says of `--from`
    /// and the caches.
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
