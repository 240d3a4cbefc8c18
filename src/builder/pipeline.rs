//! `build`: profile -> fetch -> patch -> configure -> build -> install.
//!
//! Each stage takes what the previous one produced and is skipped when its
//! work is already done, so a re-run with nothing changed costs about as much
//! as a no-op `cmake --build`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use std::collections::BTreeMap;

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
    pub route: Option<String>,
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

/// What a build would do, worked out without touching anything.
struct BuildPlan<'a> {
    opts: &'a Options,
    component: &'a crate::builder::profile::Component,
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

impl Options {
    fn plan(&self) -> Result<BuildPlan<'_>> {
        let component = self.profile.component(&self.component)?;
        let mut series =
            crate::builder::series::load(&self.profile, component, self.extra_patches.as_deref())?;
        let absolute =
            |p: &Path| std::path::absolute(p).with_context(|| format!("bad path {}", p.display()));
        let prefix = match &self.prefix {
            Some(p) => absolute(p)?,
            None => absolute(&self.profile.install_prefix()?)?,
        };
        let rocm = absolute(self.rocm.as_deref().unwrap_or(&self.profile.rocm.path))?;
        let launcher =
            crate::builder::launcher::resolve(self.launcher.or(component.cmake.launcher))?;
        let mut defines = component.cmake.effective_defines(&rocm, &self.defines);
        let asked = defines.clone();
        let source_patches = series.patches.len();
        let compat = self.meet_compat(component, &rocm, &mut series, &mut defines)?;
        let compiler_note = self.find_hip_clang(&rocm, &mut defines);
        let targets_note = self.choose_gpu_targets(&mut defines);
        // The profile's and the user's own launcher defines win.
        for (k, v) in launcher.iter().flat_map(|l| l.defines()) {
            defines.entry(k).or_insert(v);
        }
        let generator = match self.generator {
            Some(g) => g,
            None => Generator::parse(&component.cmake.generator).ok_or_else(|| {
                hint(
                    format!(
                        "profile {} asks for generator `{}`",
                        self.profile.name, component.cmake.generator
                    ),
                    "use \"Ninja\" or \"Unix Makefiles\"",
                )
            })?,
        };
        Ok(BuildPlan {
            opts: self,
            component,
            series,
            tree: self
                .work_dir
                .component(&self.profile.name, &self.component)
                .project(component.subdir.as_deref()),
            dirs: self.work_dir.component(&self.profile.name, &self.component),
            lock_file: self.work_dir.lock_file(&self.profile.name),
            prefix,
            rocm,
            defines,
            generator,
            jobs: self
                .jobs
                .or_else(|| launcher.as_ref().and_then(|l| l.jobs()))
                .unwrap_or_else(crate::checksum::default_jobs)
                .max(1),
            launcher,
            compiler_note,
            targets_note,
            compat,
            asked,
            source_patches,
        })
    }

    /// What the toolchain at `rocm` needs of this build (a distribution's
    /// ROCm: Boost 1.92, half.hpp where MIOpen does not look, comgr 3),
    /// among the fixes the profile lists: compat series go after the
    /// profile's, defines into `defines`.
    fn meet_compat(
        &self,
        component: &crate::builder::profile::Component,
        rocm: &Path,
        series: &mut Series,
        defines: &mut std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<crate::builder::compat::Need>> {
        use crate::builder::compat::{self, Fix};
        let needs = compat::needs(
            &compat::read(rocm),
            &component.compat,
            &self.no_compat,
            defines,
            &self.defines,
            &self.work_dir.profile_dir(&self.profile.name),
        )?;
        for n in &needs {
            match &n.fix {
                Fix::Series(name) => {
                    series.append(Series::load(&Profile::compat_series(name)?)?)?;
                }
                Fix::Define { key, value, .. } => {
                    defines.insert(key.clone(), value.display().to_string());
                }
            }
        }
        Ok(needs)
    }

    /// GPU_TARGETS: `--gpu-targets`, else a `-D` of the user's, else the
    /// RDNA1 cards of this machine, else the profile's (every gfx101x: a
    /// build machine without the card). MIOpen compiles its GPU kernels at
    /// run time for the card it finds; GPU_TARGETS only adds offload code to
    /// every host file, so each arch not needed costs build time and nothing
    /// else.
    fn choose_gpu_targets(
        &self,
        defines: &mut std::collections::BTreeMap<String, String>,
    ) -> String {
        const KEY: &str = "GPU_TARGETS";
        if let Some(list) = &self.gpu_targets {
            let value = list.join(";");
            defines.insert(KEY.into(), value.clone());
            let other: Vec<&str> = list
                .iter()
                .map(String::as_str)
                .filter(|t| !crate::gpu::is_rdna1_arch(t))
                .collect();
            if other.is_empty() {
                return format!("{value} (--gpu-targets)");
            }
            return format!(
                "{value} (--gpu-targets); {} not RDNA1 (gfx1010, gfx1011, gfx1012): check the name, since RX 5000 cards run only code built for those",
                if other.len() == 1 {
                    format!("{} is", other[0])
                } else {
                    format!("{} are", other.join(", "))
                }
            );
        }
        if self.defines.iter().any(|(k, _)| k == KEY) {
            return format!(
                "{} (-D {KEY})",
                defines.get(KEY).cloned().unwrap_or_default()
            );
        }
        let Some(profile_value) = defines.get(KEY).cloned() else {
            return "the project's default (the profile sets no GPU_TARGETS)".into();
        };
        let scan = crate::gpu::scan_all(&self.sysfs);
        let found = scan.rdna1_targets();
        let unread = scan.problems.len();
        let unread = if unread == 0 {
            String::new()
        } else {
            format!(", {unread} node(s) of it unreadable: `rdna1-patch doctor` says which")
        };
        if found.is_empty() {
            return format!(
                "{profile_value} (the profile's: no RDNA1 card in the KFD topology{unread}; --gpu-targets to choose)"
            );
        }
        let value = found.join(";");
        defines.insert(KEY.into(), value.clone());
        format!("{value} (the RDNA1 card(s) in the KFD topology{unread}; --gpu-targets to choose)")
    }

    /// The profile names AMD's layout (`{rocm}/llvm/bin/amdclang++`); a
    /// distribution puts HIP's clang elsewhere. When the profile's compiler
    /// is not there and `-D` did not name one, use the clang
    /// `hipconfig --hipclangpath` names, and say so.
    fn find_hip_clang(
        &self,
        rocm: &Path,
        defines: &mut std::collections::BTreeMap<String, String>,
    ) -> Option<String> {
        let given = |k: &str| self.defines.iter().any(|(d, _)| d == k);
        let cxx = defines.get("CMAKE_CXX_COMPILER")?;
        if given("CMAKE_CXX_COMPILER") {
            return None;
        }
        let tools::CxxChoice::HipClang(dir) = tools::choose_cxx(cxx, rocm) else {
            return None;
        };
        let was = cxx.clone();
        defines.insert(
            "CMAKE_CXX_COMPILER".into(),
            dir.join("clang++").display().to_string(),
        );
        if !given("CMAKE_C_COMPILER")
            && defines
                .get("CMAKE_C_COMPILER")
                .is_some_and(|c| !Path::new(c).exists())
        {
            defines.insert(
                "CMAKE_C_COMPILER".into(),
                dir.join("clang").display().to_string(),
            );
        }
        Some(format!(
            "{was} is not there; using HIP's clang in {} (hipconfig --hipclangpath)",
            dir.display()
        ))
    }
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

/// The plan `--dry-run` prints; nothing is changed.
/// What `--dry-run` prints, and the error the real run would stop with
/// before fetching (a missing tool), if any.
pub fn dry_run(opts: &Options) -> Result<(String, Option<anyhow::Error>)> {
    opts.plan()?.describe()
}

impl BuildPlan<'_> {
    fn source_request(&self) -> source::FetchRequest<'_> {
        source::FetchRequest {
            name: &self.opts.component,
            component: self.component,
            src: &self.dirs.src,
            lock_file: &self.lock_file,
            update: self.opts.update,
            net_timeout: self.opts.net_timeout,
        }
    }

    /// What `--dry-run` shows: every stage as it would run.
    fn describe(&self) -> Result<(String, Option<anyhow::Error>)> {
        let mut lines = Vec::new();
        let c = self.component;
        let commit = source::planned_commit(&self.source_request())?
            .unwrap_or_else(|| "(resolved on first fetch)".into());
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
        if let Some(route) = &self.opts.route {
            lines.push(format!("route:     {route}"));
        }
        lines.push(format!(
            "source:    {} {} commit {}{}",
            c.url,
            c.tag
                .as_ref()
                .map_or("(commit pin)".to_owned(), |t| format!("tag {t}")),
            commit,
            c.subdir
                .as_ref()
                .map_or(String::new(), |d| format!(", {d} only (blobless, sparse)"))
        ));
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
        lines.push(format!("install:   {}", self.prefix.display()));
        let (shared, pulls) = self.describe_shared()?;
        lines.extend(shared);
        let stop = self.preflight_stop(pulls);
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
        if let Some(route) = &self.opts.route {
            ui.stage("Route", route);
        }
        if let Some(note) = &self.compiler_note {
            ui.stage("Compiler", note);
        }
        ui.stage("Targets", &self.targets_note);
        for n in &self.compat {
            ui.stage("Compat", n.describe());
        }
    }

    fn execute(&self, ui: &Ui) -> Result<()> {
        let stop = self.opts.stop_after;
        self.announce(ui);
        self.check_work_dirs()?;
        if stop >= Stage::Install {
            prefix::preflight(&self.prefix)?;
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
        ui.stage(
            "Source",
            format!(
                "{} {} at {}{}",
                self.opts.component,
                self.component.pin(),
                short(&checkout.commit),
                if checkout.fetched {
                    ""
                } else {
                    " (cached, no network)"
                }
            ),
        );
        self.check_tree()?;
        if stop == Stage::Fetch {
            return Ok(());
        }

        let (touched, local) = self.patch(&checkout, record, edited, ui)?;
        if stop == Stage::Patch {
            return Ok(());
        }
        let tools = tools.expect("preflight ran for configure");
        if self.opts.clean {
            self.clean(ui)?;
        }
        let mut log = Log::create(&self.dirs.logs, "build")?;
        self.configure(&tools, &touched, &mut log, ui)?;
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
        if stop == Stage::Build {
            return Ok(());
        }
        self.install(&checkout, &tools, local, built.steps, &mut log, ui)
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
        let t = tools::preflight(self.generator, &self.rocm, &self.defines)?;
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

    /// Stage 5, unless the prefix already holds exactly this build.
    fn install(
        &self,
        checkout: &source::Checkout,
        tools: &tools::Toolchain,
        local: Vec<String>,
        steps: usize,
        log: &mut Log,
        ui: &Ui,
    ) -> Result<()> {
        let mut provenance = self.provenance(&checkout.commit, tools);
        provenance.local_edits = local;
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
        let staging = prefix::begin(&self.prefix)?;
        let manifest = cmake::install_to_staging(&self.dirs.build, &staging, tools, log)?;
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

    fn patch_record(&self) -> PathBuf {
        self.dirs.state.join("patched-files")
    }

    /// Files of the checkout that differ from the commit, less those the
    /// patch stage wrote and that still hold what it wrote.
    fn local_edits(&self, record: &PatchRecord) -> Result<Vec<String>> {
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
    fn patch(
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
        if plan.writes.is_empty() {
            ui.note("source tree already patched; no file written");
        } else {
            ui.note(format!(
                "writing {} file(s): {}",
                plan.writes.len(),
                plan.writes
                    .iter()
                    .map(|(p, _)| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
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

    /// `{rocm}` and `{work}` for this machine's paths, so the same build
    /// elsewhere has the same key.
    fn portable(&self, v: &str) -> String {
        v.replace(&self.rocm.display().to_string(), "{rocm}")
            .replace(&self.opts.work_dir.root().display().to_string(), "{work}")
    }

    /// The build key's inputs (see `prefix::key`).
    fn key_inputs(&self, commit: Option<String>) -> KeyInputs {
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
    fn compiler_identity(&self) -> Option<String> {
        let out = tools::version_output(&tools::cxx(&self.defines).ok()?).ok()?;
        out.lines().next().map(|l| l.trim().to_owned())
    }

    fn want<'a>(&self, inputs: &'a KeyInputs) -> Want<'a> {
        Want {
            inputs,
            toolchain: inputs.toolchain.rocm_version.is_some()
                && inputs.toolchain.compiler.is_some(),
            rocm_release: crate::version::major_minor(&self.opts.profile.rocm.version),
        }
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

    /// The real run checks its tools before the fetch, unless it pulls a
    /// shared build or stops before configuring; so does a dry run.
    fn preflight_stop(&self, pulls: bool) -> Option<anyhow::Error> {
        if pulls || self.opts.stop_after < Stage::Configure {
            return None;
        }
        tools::preflight(self.generator, &self.rocm, &self.defines)
            .err()
            .map(|e| e.context("the build would stop before fetching"))
    }

    /// Its lines, and whether a shared build would be pulled (then no
    /// toolchain is needed).
    fn describe_shared(&self) -> Result<(Vec<String>, bool)> {
        let inputs = self.key_inputs(source::planned_commit(&self.source_request())?);
        let mut lines = vec![format!(
            "key:       {} (tag {})",
            inputs.key(),
            inputs.tag()
        )];
        let mut pulls = false;
        if self.opts.stop_after == Stage::Install {
            let (plan, pull) = self.shared_plan(&inputs);
            lines.push(format!("shared:    {plan}"));
            pulls = pull;
        }
        Ok((lines, pulls))
    }

    fn shared_plan(&self, inputs: &KeyInputs) -> (String, bool) {
        let shared = &self.opts.shared;
        if !shared.any() {
            return (
                format!("no --from and no caches in {}; compiling", shared.config),
                false,
            );
        }
        match shared.choose(&self.want(inputs), &Ui::silent()) {
            Ok(Choice::Pull(_, c)) => (
                format!(
                    "would pull {} ({}, signed by key {}) instead of compiling",
                    c.reference, c.digest, c.key_id
                ),
                true,
            ),
            Ok(Choice::Build(why)) => (format!("would compile: {why}"), false),
            Err(e) => (format!("would stop: {}", crate::error::chain(&e)), false),
        }
    }

    /// Pull and install a shared build when one is this build; false when
    /// there is none (said why) and the build should run.
    fn pull(&self, ui: &Ui) -> Result<bool> {
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
            Choice::Build(why) => {
                ui.stage("Shared", format!("compiling instead: {why}"));
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

    fn provenance(&self, commit: &str, tools: &tools::Toolchain) -> Provenance {
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
            source: prefix::ProvSource {
                url: self.component.url.clone(),
                tag: self.component.pin(),
                commit: commit.to_owned(),
                subdir: self.component.subdir.clone(),
            },
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

/// What the patch stage wrote: each file, with the SHA-256 of every content
/// it may hold (two while a write is under way). A file whose content is
/// none of them was edited by someone else.
#[derive(Default)]
struct PatchRecord {
    files: std::collections::BTreeMap<String, BTreeSet<String>>,
}

impl PatchRecord {
    /// `<sha256>  <path>` lines, as sha256sum writes them; a bare path (the
    /// format before hashes were kept) vouches for any content.
    fn load(path: &Path) -> PatchRecord {
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
