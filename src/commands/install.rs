use std::process::ExitCode;

use anyhow::Result;

use super::{PrefixArg, StateArg, TorchArg};
use crate::swap::into_torch::{self, InstallRequest};
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The component to install
    #[arg(default_value = "miopen", value_parser = super::Offered(super::offered_components),
          hide_possible_values = true)]
    component: String,
    /// Swap the built library into a torch install, reversibly
    #[arg(long)]
    into_torch: bool,
    #[command(flatten)]
    torch: TorchArg,
    #[command(flatten)]
    prefix: PrefixArg,
    #[command(flatten)]
    state: StateArg,
    /// Install even if the build's ROCm major.minor differs from torch's
    #[arg(long)]
    force: bool,
    /// Install the library as built: keep its NEEDED entries and RUNPATH
    #[arg(long)]
    no_relink: bool,
    /// Fix torch's own MIOpen in place (its batch-norm kernel texts), no
    /// build [default when torch's MIOpen sees a gfx101x and the profile's
    /// fixes are all kernel text]
    #[arg(long, conflicts_with = "built")]
    in_place: bool,
    /// Install the build in the prefix, even where the in-place fix would do
    #[arg(long)]
    built: bool,
    /// Say which route would be taken and why; change nothing
    #[arg(long)]
    dry_run: bool,
    /// With no compiler library beside torch's MIOpen: fix it in place
    /// anyway, unproven (the provenance and `status` say so)
    #[arg(long)]
    unproven: bool,
    /// Prepare torch for this RDNA1 target (gfx1010, gfx1011 or gfx1012)
    /// instead of this machine's cards: on a machine with no RDNA1 card,
    /// for a card that is not here (repeat it for more)
    #[arg(long, value_name = "GFX", value_parser = super::doctor::rdna1_target)]
    target: Vec<String>,
    /// Not taken (install reports as it goes): said so, rather than
    /// taken for a value
    #[arg(long, hide = true)]
    pub(crate) json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if !["miopen", "rocblas"].contains(&args.component.as_str()) {
        return Err(crate::error::hint(
            format!(
                "only miopen and rocblas can be installed into torch, not {}",
                args.component
            ),
            "`rdna1-patch build COMPONENT` builds and checks it into its prefix",
        ));
    }
    if args.json {
        return Err(crate::error::hint(
            "install has no JSON report: it says what it does as it goes",
            "run it without --json; then `rdna1-patch status --json` reports what was installed, and `rdna1-patch verify --json` checks it",
        ));
    }
    if !args.into_torch {
        return Err(crate::error::hint(
            "say where to install: today that is --into-torch",
            "`rdna1-patch install --into-torch --python ~/venv/bin/python`; `rdna1-patch build` already installed the prefix",
        ));
    }
    let term = super::term::Term::new();
    let ui = Ui::new(&term);
    // The route starts from the torch: with no ROCm torch there is
    // nothing to install into, whatever a prefix holds.
    let stack = crate::stack::Stack::establish(args.torch.locator()?, super::sysfs_root())
        .asking(args.target.clone())
        .with_torch()?;
    // Only what the plan holds: nothing where no card needs it, no fix
    // for a torch its first step replaces.
    // MIOpen is judged by the fix itself, so its step is counted for both
    // components: the steps are numbered as doctor numbers them.
    let plan = crate::plan::plan(&crate::plan::Facts::of(
        &stack,
        crate::plan::Miopen::Judging,
    ));
    refuse_off_plan(&plan, &stack, &args.component)?;
    if args.component == "rocblas" {
        return rocblas(args, stack, &plan, &ui);
    }
    // --built installs the prefix's build, whatever the plan would fix in
    // place: its dry run says that route alone.
    if args.dry_run && !args.built {
        for line in plan.lines() {
            ui.stage("Plan", line);
        }
    }
    let (prefix, profile, why) = args.prefix.resolve_with_profile(&stack.torch)?;
    if let Some(why) = why {
        ui.stage("Profile", why);
    }
    let route = match (args.in_place, args.built) {
        (true, _) => Some(crate::swap::route::Choice::InPlace),
        (_, true) => Some(crate::swap::route::Choice::Built),
        _ => None,
    };
    let req = InstallRequest {
        prefix,
        stack,
        state: args.state.open()?,
        force: args.force,
        relink: !args.no_relink,
        jobs: crate::checksum::default_jobs(),
        profile,
        route,
        dry_run: args.dry_run,
        unproven: args.unproven,
    };
    into_torch::run(&req, &ui)?;
    Ok(ExitCode::SUCCESS)
}

/// The errors for an install the plan does not hold: no RDNA1 card here
/// (and none asked for), or a torch to be replaced first.
fn refuse_off_plan(
    plan: &crate::plan::Plan,
    stack: &crate::stack::Stack,
    component: &str,
) -> Result<()> {
    if let Some(why) = &plan.nothing {
        let verb = match component {
            "rocblas" => vec!["install", "rocblas", "--into-torch", "--target", "gfx1010"],
            _ => vec!["install", "--into-torch", "--target", "gfx1010"],
        };
        return Err(crate::error::hint(
            format!("{why}; nothing was changed"),
            format!(
                "to prepare this torch for an RDNA1 card that is not here, name it: `{}`",
                crate::shell::tool(verb)
            ),
        ));
    }
    let (Some(first), Ok(t)) = (plan.steps.first(), &stack.torch) else {
        return Ok(());
    };
    // rocBLAS where the plan puts TheRock's torch in place of this one.
    if let Some(s) = plan
        .first(crate::plan::Kind::Rocblas)
        .filter(|s| s.replaces_torch())
        && component == "rocblas"
    {
        return Err(crate::error::hint(
            format!(
                "torch {}: no rocBLAS build of this tool is for its ROCm line, so none is installed; nothing was changed",
                t.version
            ),
            s.fix(),
        ));
    }
    if first.replaces_torch() {
        // What torch has, said as the swap says it, where that is why.
        if let crate::swap::route::Chip::NoCodeFor { cards, what } = crate::swap::route::chip(t) {
            return Err(crate::swap::route::no_code_for(t, &cards, &what));
        }
        return Err(crate::error::hint(
            format!(
                "torch {}: {}, so no fix is proven or installed for it; nothing was changed",
                t.version, first.fixes
            ),
            first.fix(),
        ));
    }
    Ok(())
}

/// `install rocblas --into-torch`: MIOpen's routes (in place, --built)
/// are not rocBLAS's.
fn rocblas(
    args: Args,
    stack: crate::stack::Stack,
    plan: &crate::plan::Plan,
    ui: &Ui,
) -> Result<ExitCode> {
    if let Some(flag) = [
        (args.in_place, "--in-place"),
        (args.built, "--built"),
        (args.unproven, "--unproven"),
    ]
    .into_iter()
    .find_map(|(set, flag)| set.then_some(flag))
    {
        return Err(crate::error::hint(
            format!("{flag} is MIOpen's (its batch-norm fix in place); rocBLAS is always a build"),
            "leave it out: `rdna1-patch install rocblas --into-torch` installs the build `rdna1-patch build rocblas` made",
        ));
    }
    // The plan's rocBLAS step, said as install's own does.
    if args.dry_run {
        let lines = plan.lines();
        for (line, _) in lines
            .into_iter()
            .zip(&plan.steps)
            .filter(|(_, s)| s.kind == crate::plan::Kind::Rocblas)
        {
            ui.stage("Plan", line);
        }
    }
    let (prefix, why) = args.prefix.resolve_component(&stack.torch, "rocblas")?;
    if let Some(why) = why {
        ui.stage("Profile", why);
    }
    let req = crate::swap::blas::BlasRequest {
        prefix,
        stack,
        state: args.state.open()?,
        force: args.force,
        relink: !args.no_relink,
        jobs: crate::checksum::default_jobs(),
        dry_run: args.dry_run,
    };
    crate::swap::blas::run(&req, ui)?;
    Ok(ExitCode::SUCCESS)
}
