//! Which built-in profile a torch needs, when the user names none: the one
//! built for the ROCm line the torch was built for (torch.version.hip's
//! major.minor for a bundled MIOpen, the rocm-sdk version for TheRock's
//! packages). Above `build` and `swap`: it reads the torch the swap finds
//! and answers with a profile the build loads.

use anyhow::Result;

use crate::builder::pipeline::{ForTorch, Route};
use crate::builder::profile::{self, DEFAULT_PROFILE, Profile};
use crate::error::hint;
use crate::torch::{self, Layout, Locator};
use crate::version::major_minor;

/// The profile chosen, and why, for the user to read.
pub struct Chosen {
    pub profile: Profile,
    pub why: String,
}

/// The built-in profile for the torch found (each look asks python, which
/// a pyenv shim makes 100 ms: the command looks once). No ROCm torch to be
/// found: the default profile, said as such. A ROCm line with no profile:
/// an error naming the lines there are and the routes to them.
pub fn profile_for_found(found: &Result<torch::Torch>) -> Result<Chosen> {
    let t = match found {
        Ok(t) => t,
        Err(e) => {
            return Ok(Chosen {
                profile: Profile::load(DEFAULT_PROFILE)?,
                why: format!(
                    "the default: no ROCm torch to match ({}); --profile chooses",
                    first_line(&format!("{e:#}"))
                ),
            });
        }
    };
    let line = major_minor(t.rocm());
    let (what, key) = match &t.layout {
        Layout::Bundled | Layout::System(_) => ("torch.version.hip", t.hip.as_str()),
        Layout::RocmSdk(_) => ("rocm-sdk", t.rocm()),
    };
    let profiles = builtin()?;
    if let Some(p) = profiles
        .iter()
        .find(|p| major_minor(&p.rocm.torch_hip) == line)
    {
        return Ok(Chosen {
            profile: p.clone(),
            why: format!(
                "for torch {} at {} ({what} {key}: ROCm {line})",
                t.version,
                t.dir.display()
            ),
        });
    }
    let lines: Vec<String> = profiles
        .iter()
        .map(|p| format!("ROCm {} ({})", major_minor(&p.rocm.torch_hip), p.name))
        .collect();
    Err(hint(
        format!(
            "no built-in profile is for torch {} at {} ({what} {key}: ROCm {line}); there are profiles for {}",
            t.version,
            t.dir.display(),
            lines.join(", ")
        ),
        {
            let from = nearest(&profiles, &line).unwrap_or(DEFAULT_PROFILE);
            format!(
                "a library built for another ROCm line crashes in this torch, so none is picked for you. Use a torch of one of those lines; for an RX 5000 card the best is TheRock's native gfx101x torch (`pip install \"torch[device-gfx1010]\"` from TheRock's multi-arch index, profile therock-7.14). Or write a profile for ROCm {line}, starting from the nearest: `{}`, then --profile DIR/{from}.toml",
                crate::shell::tool(["profiles", "export", from, "DIR"])
            )
        },
    ))
}

fn builtin() -> Result<Vec<Profile>> {
    profile::builtin_names()
        .iter()
        .map(|n| Profile::load(n))
        .collect()
}

/// The profile whose line is closest to `line` (numerically), to start from.
fn nearest<'a>(profiles: &'a [Profile], line: &str) -> Option<&'a str> {
    let num = |v: &str| -> Option<f64> {
        let (a, b) = v.split_once('.')?;
        Some(a.parse::<f64>().ok()? * 100.0 + b.parse::<f64>().ok()?)
    };
    let want = num(line)?;
    profiles
        .iter()
        .filter_map(|p| Some((num(&major_minor(&p.rocm.torch_hip))?, p.name.as_str())))
        .min_by(|a, b| (a.0 - want).abs().total_cmp(&(b.0 - want).abs()))
        .map(|(_, n)| n)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// What a build, or the in-place fix, would change for a torch: said the
/// same way by doctor, build and install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// MIOpen sees the real chip and every fix is kernel text: fixed in
    /// place by `install --into-torch`, no build.
    InPlace(String),
    /// A build (or a pull) is the way.
    Build(String),
    /// Every patch of the profile is inert for this torch: nothing to do.
    Inert(String),
    /// torch has no code for a card of the machine: that torch first.
    TorchFirst(String),
}

impl Plan {
    pub fn detail(&self) -> &str {
        match self {
            Plan::InPlace(d) | Plan::Build(d) | Plan::Inert(d) | Plan::TorchFirst(d) => d,
        }
    }
}

pub fn plan(profile: &Profile, t: &torch::Torch) -> Plan {
    use crate::swap::route::{self, Chip};
    let name = &profile.name;
    match route::chip(t) {
        Chip::Native(what) if route::kernel_text_only(profile) => Plan::InPlace(format!(
            "in place, no build: `rdna1-patch install --into-torch` (MIOpen sees the real chip: {what}; every fix of {name} is kernel text)"
        )),
        Chip::Native(what) => Plan::Build(format!(
            "MIOpen sees the real chip ({what}); profile {name} would be built (`rdna1-patch build miopen`)"
        )),
        Chip::Override(what) if route::batch_norm_only(profile) => Plan::Inert(format!(
            "{what}: torch runs under HSA_OVERRIDE_GFX_VERSION=10.3.0, MIOpen compiles its kernels for gfx1030, and every patch of profile {name} fixes batch norm's kernels for gfx101x, so a build would change nothing"
        )),
        Chip::Override(what) => Plan::Build(format!(
            "{what}: under HSA_OVERRIDE_GFX_VERSION=10.3.0 the batch-norm patch of profile {name} is inert, its detection and fast-Find patches act"
        )),
        Chip::Unknown(what) => Plan::Build(format!(
            "{what}, so what MIOpen sees is not known; profile {name} would be built (`rdna1-patch build miopen`)"
        )),
        Chip::NoCodeFor { cards, what } => Plan::TorchFirst(format!(
            "torch first: {what} and none for {}, so nothing runs there; no MIOpen fix is offered for it",
            route::missing_said(&cards)
        )),
    }
}

/// For `build`: an error where the profile was chosen for a torch for which
/// it changes nothing (a named profile gets a warning instead), and what to
/// say otherwise, with the torch the build is for unless the profile was
/// named (then it may be for another torch).
fn build_plan(
    profile: &Profile,
    found: Option<&torch::Torch>,
    named: bool,
) -> Result<Option<(Plan, Option<ForTorch>)>> {
    let Some(t) = found else {
        return Ok(None);
    };
    let p = plan(profile, t);
    if let (Plan::TorchFirst(why), false) = (&p, named) {
        let cards: Vec<String> = match crate::swap::route::chip(t) {
            crate::swap::route::Chip::NoCodeFor { cards, .. } => cards,
            _ => Vec::new(),
        };
        return Err(hint(
            format!("nothing to build for torch {}: {why}", t.version),
            crate::plan::no_code_help(t.gpu_code().ok().flatten(), &cards),
        ));
    }
    if let (Plan::Inert(why), false) = (&p, named) {
        return Err(hint(
            format!("nothing to build for torch {}: {why}", t.version),
            format!(
                "{}; or name a profile with --profile to build anyway",
                crate::plan::inert_help()
            ),
        ));
    }
    let for_torch = (!named).then(|| ForTorch {
        label: format!("torch {} at {}", t.version, t.dir.display()),
        rocm: t.rocm().to_owned(),
    });
    Ok(Some((p, for_torch)))
}

/// What `build` takes from the user's torch: the profile (and why, when
/// chosen for that torch), the route for it, and the torch the build is
/// for.
pub struct ForBuild {
    pub profile: Profile,
    pub why: Option<String>,
    pub route: Route,
    pub torch: Option<ForTorch>,
}

/// One look for torch serves the profile's choice and the route (each look
/// asks python: 100 ms through a pyenv shim). `named`: --profile's value;
/// then the look only gives the route's line, so it runs beside the first
/// stages (`Route::take` waits for it) instead of before them.
pub fn for_build(loc: &Locator, named: Option<&str>, component: &str) -> Result<ForBuild> {
    // The route (in place, a built MIOpen, the torch first) is MIOpen's;
    // another component's build goes into no torch yet, but is still held
    // to the line of the torch it is for.
    if component != "miopen" {
        return other_component(loc, named);
    }
    if let Some(name) = named {
        let profile = Profile::load(name)?;
        let (loc, chosen) = (loc.clone(), profile.clone());
        let look = std::thread::spawn(move || {
            let found = torch::locate(&loc);
            match build_plan(&chosen, found.as_ref().ok(), true) {
                Ok(Some((plan, _))) => route_line(plan),
                _ => None,
            }
        });
        return Ok(ForBuild {
            profile,
            why: None,
            route: Route::looking(look),
            torch: None,
        });
    }
    // No ROCm torch: torch first, as doctor says, never a build of the
    // default profile for a torch that is not there.
    let found = Ok(torch::locate(loc).map_err(torch_first)?);
    let (profile, why) = match named {
        Some(p) => (Profile::load(p)?, None),
        None => {
            let c = profile_for_found(&found)?;
            (c.profile, Some(c.why))
        }
    };
    let (route, torch) = match build_plan(&profile, found.as_ref().ok(), false)? {
        Some((plan, torch)) => (route_line(plan), torch),
        None => (None, None),
    };
    Ok(ForBuild {
        profile,
        why,
        route: Route::known(route),
        torch,
    })
}

/// The error for a torch `build` cannot choose a profile for: the torch
/// for the card first, with that torch's route, which builds nothing.
fn torch_first(e: anyhow::Error) -> anyhow::Error {
    let help = crate::error::help(&e).and_then(torch::for_build);
    match help {
        Some(help) => hint(format!("no ROCm torch to build for: {e:#}"), help),
        None => e,
    }
}

/// [`for_build`] for a component with no route into torch yet.
fn other_component(loc: &Locator, named: Option<&str>) -> Result<ForBuild> {
    if let Some(name) = named {
        return Ok(ForBuild {
            profile: Profile::load(name)?,
            why: None,
            route: Route::known(None),
            torch: None,
        });
    }
    let found = torch::locate(loc);
    let c = profile_for_found(&found)?;
    let torch = found.as_ref().ok().map(|t| ForTorch {
        label: format!("torch {} at {}", t.version, t.dir.display()),
        rocm: t.rocm().to_owned(),
    });
    Ok(ForBuild {
        profile: c.profile,
        why: Some(c.why),
        route: Route::known(None),
        torch,
    })
}

fn route_line(plan: Plan) -> Option<String> {
    Some(match plan {
        Plan::Inert(why) | Plan::TorchFirst(why) => {
            format!("warning: {why} (building anyway: --profile)")
        }
        other => other.detail().to_owned(),
    })
}
