//! Which way a fixed MIOpen gets into torch: a build (or a pull) already in
//! the prefix, or torch's own library fixed in place (`inplace`).
//!
//! The in-place fix acts only where MIOpen compiles its kernels for the
//! real chip: a torch with gfx101x code of its own (TheRock's
//! `torch[device-gfx1010]`, a gfx101X-dgpu family, a distribution's build).
//! A torch without gfx101x code runs under HSA_OVERRIDE_GFX_VERSION=10.3.0,
//! MIOpen sees gfx1030 and the batch-norm fix changes nothing: it is never
//! offered there.

use std::path::Path;

use anyhow::Result;

use crate::builder::profile::Profile;
use crate::error::hint;
use crate::torch::{Layout, Torch};

/// The targets whose batch norm the fix is for.
const RDNA1: [&str; 3] = ["gfx1010", "gfx1011", "gfx1012"];

/// What chip torch's MIOpen compiles its kernels for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chip {
    /// The real gfx101x: torch carries code for it. What says so.
    Native(String),
    /// gfx1030 under the override: torch has GPU code, none for gfx101x.
    Override(String),
    /// Not known (torch's GPU code could not be read).
    Unknown(String),
    /// torch has no GPU code for these RDNA1 cards of the machine (nor for
    /// the target HSA_OVERRIDE_GFX_VERSION makes the runtime see): nothing
    /// runs there, whatever MIOpen does. What torch has, said.
    NoCodeFor { cards: Vec<String>, what: String },
}

/// The RDNA1 cards of this machine (the KFD topology) torch's own GPU code
/// does not run on, each judged for the target the runtime sees: the card's,
/// or the one HSA_OVERRIDE_GFX_VERSION names. Empty when torch's code
/// could not be read or there is no RDNA1 card.
pub fn cards_without_code(code: &crate::gpucode::Code) -> Vec<String> {
    let sysfs = crate::gpu::sysfs_root();
    let seen = crate::gpu::seen_override().map(|(_, t)| t);
    crate::gpu::rdna1_targets(&sysfs)
        .into_iter()
        .filter(|card| !code.covers(seen.as_deref().unwrap_or(card)))
        .collect()
}

/// The code torch lacks for `cards` ([`cards_without_code`]), said as the
/// runtime looks for it: "gfx1012", or under the override "gfx1030 (what
/// HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report for gfx1010)".
pub fn missing_said(cards: &[String]) -> String {
    match crate::gpu::seen_override() {
        Some((v, target)) => format!(
            "{target} (what HSA_OVERRIDE_GFX_VERSION={v} makes ROCm report for {})",
            cards.join(", ")
        ),
        None => cards.join(", "),
    }
}

pub fn chip(torch: &Torch) -> Chip {
    match &torch.layout {
        Layout::RocmSdk(sdk) => {
            let f = &sdk.family;
            if f.starts_with("gfx101") || RDNA1.iter().any(|t| f.contains(t)) {
                Chip::Native(format!("rocm-sdk {f}"))
            } else {
                Chip::Override(format!("rocm-sdk {f}, no gfx101x device code"))
            }
        }
        Layout::Bundled | Layout::System(_) => match torch.gpu_code() {
            Ok(Some(code))
                if !code.all_targets().is_empty() && !cards_without_code(code).is_empty() =>
            {
                Chip::NoCodeFor {
                    cards: cards_without_code(code),
                    what: format!(
                        "libtorch_hip.so has code for {}",
                        code.all_targets().join(", ")
                    ),
                }
            }
            Ok(Some(code)) if code.has_gfx101x() => Chip::Native(format!(
                "libtorch_hip.so has code for {}",
                code.all_targets().join(", ")
            )),
            Ok(Some(code)) if !code.all_targets().is_empty() => Chip::Override(format!(
                "libtorch_hip.so has code for {} and none for gfx101x",
                code.all_targets().join(", ")
            )),
            Ok(_) => Chip::Unknown("libtorch_hip.so carries no readable GPU code".into()),
            Err(e) => Chip::Unknown(format!("libtorch_hip.so cannot be read: {e}")),
        },
    }
}

/// Which route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Built,
    InPlace,
}

pub struct Route {
    pub choice: Choice,
    pub why: String,
}

/// The files the profile's series patches.
fn patched_files(profile: &Profile) -> Vec<String> {
    let Ok(component) = profile.component("miopen") else {
        return Vec::new();
    };
    let Ok(series) = profile
        .series_dir(component)
        .and_then(|d| crate::builder::patch::Series::load(&d))
    else {
        return Vec::new();
    };
    series
        .patches
        .iter()
        .flat_map(|p| {
            p.text
                .lines()
                .filter_map(|l| l.strip_prefix("+++ b/"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether every fix the profile's series makes is one the in-place edit
/// makes too (`kernel_text`): all its patches touch the OpenCL kernel
/// texts, or 7.x's HIP `configuration.hpp`, alone.
pub fn kernel_text_only(profile: &Profile) -> bool {
    let files = patched_files(profile);
    !files.is_empty()
        && files.iter().all(|f| {
            f.starts_with("src/kernels/")
                && (f.ends_with(".cl") || f.ends_with(".h") || f == "src/kernels/configuration.hpp")
        })
}

/// Whether the profile's series fixes batch norm's kernels and nothing
/// else: then it changes nothing where MIOpen compiles for gfx1030.
pub fn batch_norm_only(profile: &Profile) -> bool {
    let files = patched_files(profile);
    !files.is_empty() && files.iter().all(|f| f.starts_with("src/kernels/"))
}

/// The route for this torch, profile and prefix. `forced` is the user's
/// flag. A finished build in the prefix is the user's own work and wins.
/// `built`: the prefix holds a finished build (not one made in place).
pub fn choose(
    forced: Option<Choice>,
    built: bool,
    prefix: &Path,
    torch: &Torch,
    profile: &Profile,
) -> Result<Route> {
    let chip = chip(torch);
    // The override decides what MIOpen sees, whatever code torch carries.
    let overridden = std::env::var("HSA_OVERRIDE_GFX_VERSION")
        .ok()
        .filter(|v| !v.is_empty() && !v.starts_with("10.1."));
    if let Chip::NoCodeFor { cards, what } = &chip {
        return Err(no_code_for(torch, cards, what));
    }
    if forced == Some(Choice::Built) {
        return Ok(Route {
            choice: Choice::Built,
            why: "--built: the build in the prefix".into(),
        });
    }
    if (forced == Some(Choice::InPlace) || (!built && matches!(chip, Chip::Native(_))))
        && let Some(v) = &overridden
    {
        return Err(overridden_inert(torch, v));
    }
    if forced == Some(Choice::InPlace) {
        if let Chip::Override(what) = &chip {
            return Err(inert(torch, what));
        }
        return Ok(Route {
            choice: Choice::InPlace,
            why: "--in-place: torch's own MIOpen, its batch-norm kernel texts fixed".into(),
        });
    }
    if built {
        return Ok(Route {
            choice: Choice::Built,
            why: format!("the build in {}", prefix.display()),
        });
    }
    if let Chip::Override(what) = &chip
        && batch_norm_only(profile)
    {
        return Err(inert(torch, what));
    }
    Ok(match (&chip, kernel_text_only(profile)) {
        (Chip::Native(what), true) => Route {
            choice: Choice::InPlace,
            why: format!(
                "MIOpen sees the real chip ({what}) and every fix profile {} makes is kernel text: torch's own library is fixed in place, no build",
                profile.name
            ),
        },
        _ => Route {
            choice: Choice::Built,
            why: format!(
                "profile {} would be built first: nothing is in the prefix yet (`rdna1-patch build miopen`)",
                profile.name
            ),
        },
    })
}

/// torch has no code for a card: nothing this tool does makes it run
/// there; the torch for that card is the one next step.
pub fn no_code_for(torch: &Torch, cards: &[String], what: &str) -> anyhow::Error {
    hint(
        format!(
            "torch {} has no GPU code for {} ({what}): nothing runs on that card, whatever MIOpen does, so no fix is proven or installed; nothing was changed",
            torch.version,
            missing_said(cards)
        ),
        crate::plan::no_code_help(torch.gpu_code().ok().flatten(), cards),
    )
}

/// The prefix the in-place fix writes: never inside torch (it would write
/// torch's files outside any transaction, with no backup), never over a
/// finished build or another profile's fix (the user's work, replaced
/// without a word). Checked before anything is written, dry run or not.
pub fn check_in_place_prefix(prefix: &Path, torch: &Torch, profile: &Profile) -> Result<()> {
    let real = nearest_real(prefix);
    let mut roots = vec![torch.dir.clone()];
    if let Layout::RocmSdk(sdk) = &torch.layout {
        roots.push(sdk.package.clone());
    }
    if let Some(root) = roots.iter().find(|r| real.starts_with(nearest_real(r))) {
        return Err(hint(
            format!(
                "the prefix {} lies inside {}: the fix would write torch's own files outside any transaction, with no backup; nothing was changed",
                prefix.display(),
                root.display()
            ),
            "give --prefix a directory outside torch, or leave it out for the profile's own prefix",
        ));
    }
    let Ok(held) = crate::prefix::Provenance::read(prefix) else {
        return Ok(());
    };
    let what = match &held.in_place {
        None => format!(
            "a build of profile {} (MIOpen {} at {})",
            held.profile,
            held.source.tag,
            crate::builder::git::short(&held.source.commit)
        ),
        Some(_) if held.profile != profile.name => {
            format!("profile {}'s fix of another torch library", held.profile)
        }
        Some(_) => return Ok(()),
    };
    Err(hint(
        format!(
            "{} holds {what}; the in-place fix would replace it; nothing was changed",
            prefix.display()
        ),
        format!(
            "give the in-place fix its own --prefix DIR (or leave --prefix out), or move that prefix away (`{}`) if you no longer want it",
            crate::shell::as_run([
                Path::new("mv"),
                prefix,
                Path::new(&format!("{}.old", prefix.display())),
            ])
        ),
    ))
}

/// `path` with symlinks resolved as far as it exists, the rest appended.
fn nearest_real(path: &Path) -> std::path::PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut base = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = base.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                base = parent;
            }
            _ => return abs,
        }
    }
}

fn overridden_inert(torch: &Torch, value: &str) -> anyhow::Error {
    hint(
        format!(
            "the in-place fix would change nothing for torch {}: HSA_OVERRIDE_GFX_VERSION={value} is set, so MIOpen compiles its kernels for that chip, not for gfx101x, and batch norm there already works; nothing was changed",
            torch.version
        ),
        crate::plan::UNSET_HELP,
    )
}

fn inert(torch: &Torch, what: &str) -> anyhow::Error {
    hint(
        format!(
            "neither a build nor the in-place fix would change anything for torch {}: {what}, so it runs under HSA_OVERRIDE_GFX_VERSION=10.3.0 and MIOpen compiles its kernels for gfx1030, where batch norm already works",
            torch.version
        ),
        format!("{}; nothing was changed", crate::plan::inert_help()),
    )
}
