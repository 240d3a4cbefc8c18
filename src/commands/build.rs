use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};

use super::{ProfileArg, TorchArg};
use crate::builder::pipeline::{self, Stage};
use crate::builder::tools::Generator;
use crate::builder::workdir::WorkDir;
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The component to build
    #[arg(default_value = "miopen", value_parser = super::Offered(super::offered_components),
          hide_possible_values = true)]
    component: String,
    #[command(flatten)]
    profile: ProfileArg,
    /// Without --profile, the profile is the one for this torch
    #[command(flatten)]
    torch: TorchArg,
    /// Cache for sources, build dirs and logs [default: $XDG_CACHE_HOME/rdna1-patch]
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Install here [default: the profile's prefix, else
    /// $XDG_DATA_HOME/rdna1-patch/<profile>, e.g. ~/.local/share/rdna1-patch/rocm-6.2.4]
    #[arg(long, value_name = "DIR")]
    prefix: Option<PathBuf>,
    /// The ROCm install to build against [default: $ROCM_PATH, else the profile's]
    #[arg(long, value_name = "DIR")]
    rocm: Option<PathBuf>,
    /// An extra or overriding CMake define
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    define: Vec<String>,
    /// Parallel build jobs [default: number of cores]
    #[arg(long, short = 'j')]
    #[arg(value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    /// The generator, instead of the profile's
    #[arg(long, value_parser = ["ninja", "make"])]
    generator: Option<String>,
    /// Compiler launcher [default: the profile's, else ccache when installed]
    #[arg(long, value_enum)]
    launcher: Option<crate::builder::launcher::Kind>,
    /// Stop after this stage
    #[arg(long, value_enum, default_value = "install")]
    stop_after: Stage,
    /// Print what would be done and change nothing
    #[arg(long)]
    dry_run: bool,
    /// Start from a fresh build dir
    #[arg(long)]
    clean: bool,
    /// Fetch the tag again, and accept it if it moved
    #[arg(long)]
    update: bool,
    /// A patch series of your own, applied after the profile's (a `series`
    /// file and git-style patches, e.g. fixes for a newer Boost or GCC)
    #[arg(long, value_name = "DIR")]
    extra_patches: Option<PathBuf>,
    /// Build with local edits in the cached checkout (they are named, and
    /// recorded in the prefix's provenance)
    #[arg(long)]
    keep_local: bool,
    /// Give up on a git server that sends nothing for this long
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    net_timeout: u64,
    /// GPU arches to build for, e.g. gfx1010 or gfx1010,gfx1012 [default:
    /// the RDNA1 cards this machine has, else gfx1010, gfx1011 and gfx1012]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_gfx)]
    gpu_targets: Option<Vec<String>>,
    /// Leave out a compat fix the toolchain would get (boost-1.92, half,
    /// comgr-3, comgr-2), or `all`; repeatable
    #[arg(long, value_name = "NAME", value_parser = parse_compat)]
    no_compat: Vec<String>,
    /// Install a shared build from here instead of compiling: one a
    /// trusted key signed that is this build (oci://HOST/REPO[:TAG], or
    /// an OCI layout DIR[:TAG]); else stop and say why, compiling nothing
    #[arg(long, value_name = "REF", value_parser = parse_reference)]
    from: Option<crate::share::oci::Reference>,
    /// Do not look in the config's caches
    #[arg(long, conflicts_with = "from")]
    no_caches: bool,
}

pub fn parse_reference(s: &str) -> Result<crate::share::oci::Reference, String> {
    crate::share::oci::Reference::parse(s)
        .map_err(|e| format!("{e}; {}", crate::error::help(&e).unwrap_or_default()))
}

fn parse_compat(s: &str) -> Result<String, String> {
    if s == "all" || crate::builder::compat::KNOWN.contains(&s) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "expected all or one of {}",
            crate::builder::compat::KNOWN.join(", ")
        ))
    }
}

/// `gfx1010`, `gfx90a`, `gfx1010:xnack-`: what clang takes as an offload arch.
fn parse_gfx(s: &str) -> Result<String, String> {
    let (arch, features) = s.split_once(':').unwrap_or((s, ""));
    let ok = arch
        .strip_prefix("gfx")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_hexdigit()))
        && features
            .split(':')
            .all(|f| f.is_empty() || (f.len() > 1 && (f.ends_with('+') || f.ends_with('-'))));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "`{s}` is not a GPU arch like gfx1010 (RX 5600/5700), gfx1011 or gfx1012 (RX 5500)"
        ))
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    if !args.dry_run {
        crate::owner::ensure_not_building_for_a_user()?;
    }
    let mut defines = Vec::new();
    for d in &args.define {
        match d.split_once('=') {
            Some((k, v)) if !k.is_empty() => defines.push((k.to_owned(), v.to_owned())),
            _ => bail!("-D {d}: expected KEY=VALUE"),
        }
    }
    let crate::select::ForBuild {
        profile,
        why: profile_why,
        route,
        torch,
    } = crate::select::for_build(
        &args.torch.locator()?,
        args.profile.profile.as_deref(),
        &args.component,
    )?;
    let config = crate::share::config::Config::load()?;
    let caches: Vec<_> = if args.no_caches {
        Vec::new()
    } else {
        config
            .caches
            .iter()
            .map(|c| crate::share::oci::Reference::parse(c))
            .collect::<Result<_>>()?
    };
    // The keys matter only where something may be pulled.
    let trusted = if args.from.is_some() || !caches.is_empty() {
        config.trusted()?
    } else {
        Vec::new()
    };
    let shared = crate::share::choose::Sources {
        from: args.from,
        caches,
        trusted,
        config: config.describe(),
        net_timeout: std::time::Duration::from_secs(args.net_timeout),
    };
    let opts = pipeline::Options {
        profile,
        profile_why,
        route,
        torch,
        component: args.component,
        work_dir: WorkDir::new(args.work_dir.as_deref())?,
        prefix: args.prefix,
        rocm: args.rocm.or_else(super::rocm_path_env),
        defines,
        jobs: args.jobs.map(|j| j as usize),
        generator: args.generator.as_deref().and_then(Generator::parse),
        launcher: args.launcher,
        stop_after: args.stop_after,
        dry_run: args.dry_run,
        clean: args.clean,
        update: args.update,
        keep_local: args.keep_local,
        extra_patches: args.extra_patches,
        net_timeout: std::time::Duration::from_secs(args.net_timeout),
        gpu_targets: args.gpu_targets,
        no_compat: args.no_compat,
        sysfs: super::sysfs_root(),
        shared,
    };
    if opts.dry_run {
        let (plan, stop) = pipeline::dry_run(&opts)?;
        crate::outln!("{}", at_a_glance(&plan.to_string()));
        if let Some(e) = stop {
            return Err(e);
        }
    } else {
        pipeline::run(&opts, &Ui::new(&super::term::Term::new()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The dry run's lines one glance each (`--detail` and `-v`: whole); its
/// `configure:` and `build:` lines are whole commands, never wrapped.
fn at_a_glance(plan: &str) -> String {
    if crate::output::settings().whole() {
        return plan.to_owned();
    }
    plan.lines()
        .map(
            |l| match l.starts_with("configure: ") || l.starts_with("build: ") {
                true => l.to_owned(),
                false => super::term::glance(l, "           "),
            },
        )
        .collect::<Vec<_>>()
        .join("\n")
}
