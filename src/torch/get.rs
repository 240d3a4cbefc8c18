//! How to get the torch for the card: the one line of shell a newcomer is
//! told to run, exact for the python that was asked, and run as printed by
//! the tests. pip keeps a torch it has whatever the index (`Requirement
//! already satisfied`, and no such extra), so a CUDA or CPU torch is
//! uninstalled first; a python that is externally managed (PEP 668) takes
//! no pip install at all, so a venv comes first.

use std::path::PathBuf;

/// TheRock's multi-arch index, as its RELEASES.md installs a torch with
/// one device's code: the torch with an MIOpen of its own that sees the
/// real chip.
pub const THEROCK_INDEX: &str = "https://rocm.nightlies.amd.com/whl-multi-arch/";

/// Where the lines get torch from instead of TheRock's index: a URL (a
/// mirror: pip's --index-url), or a directory of wheels (--no-index
/// --find-links). docs/commands.md documents it.
pub const INDEX_ENV: &str = "RDNA1_PATCH_TORCH_INDEX";

/// How the help for no ROCm torch starts: a torch problem, first, whose
/// fix is the torch for the card in the machine.
pub const NO_ROCM_TORCH_HELP: &str = "install the torch built for";

/// What follows the lines: the command the user ran, again. `build` says
/// its own ([`for_build`]).
const AGAIN: &str = ", then run this again";

/// Where the venv goes for a python that is externally managed: the one
/// README's examples name (`--python ~/venv/bin/python`).
const VENV: &str = "~/venv";

/// The venv's python, as a step says it.
pub const VENV_PYTHON: &str = "~/venv/bin/python";

/// The python that was asked for torch: `sys.executable`, and whether it
/// is externally managed (PEP 668: its stdlib's EXTERNALLY-MANAGED file,
/// outside a venv).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub executable: PathBuf,
    pub managed: bool,
}

/// pip's options for the index, as words: [`INDEX_ENV`]'s when set, else
/// TheRock's.
pub fn index_args() -> Vec<String> {
    match std::env::var(INDEX_ENV) {
        Ok(v) if v.contains("://") => vec!["--index-url".into(), v],
        Ok(v) if !v.trim().is_empty() => vec!["--no-index".into(), "--find-links".into(), v],
        _ => vec!["--index-url".into(), THEROCK_INDEX.into()],
    }
}

/// TheRock's torch and torchvision with every target's device code, one
/// requirement each: `torch[device-gfx1010,device-gfx1012]` and
/// `torchvision[...]` (its RELEASES.md installs several devices so).
pub fn requirements(targets: &[String]) -> Vec<String> {
    let devices: Vec<String> = targets.iter().map(|t| format!("device-{t}")).collect();
    ["torch", "torchvision"]
        .iter()
        .map(|p| format!("{p}[{}]", devices.join(",")))
        .collect()
}

/// `pip install` of TheRock's torch for `target`, for the help of a
/// torch that a package owns (torch.rs, below the plan); every other
/// line is the plan's (`plan::torch_line`).
pub(super) fn native_torch(target: &str) -> String {
    commands(&[target.to_owned()], None, false)
        .pop()
        .map(crate::shell::line)
        .unwrap_or_default()
}

/// "gfx1010", "gfx1010 and gfx1012".
fn and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// What a look that found no ROCm torch leaves for the plan, as its
/// hint's data: the python asked (None: `--torch-dir`, or a python that
/// could not say), and whether a torch (CUDA, CPU) is there to be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub asked: Option<Asked>,
    pub installed: bool,
}

/// The commands that get TheRock's torch for `targets` where `asked` finds
/// it, each as its words, run in order: a venv first for a python that is
/// externally managed; the torch there uninstalled first (pip keeps a
/// torch it has, whatever the index).
pub fn commands(targets: &[String], asked: Option<&Asked>, installed: bool) -> Vec<Vec<String>> {
    let words = |w: &[&str]| w.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let exe = |a: &Asked| a.executable.to_string_lossy().into_owned();
    let (pip, first): (Vec<String>, Option<Vec<String>>) = match asked {
        Some(a) if a.managed => (
            words(&[VENV_PYTHON, "-m", "pip"]),
            Some(words(&[&exe(a), "-m", "venv", VENV])),
        ),
        Some(a) => (words(&[&exe(a), "-m", "pip"]), None),
        None => (words(&["pip"]), None),
    };
    let uninstall = match asked {
        Some(a) => installed && !a.managed,
        // --torch-dir: a torch is there.
        None => true,
    };
    let mut out: Vec<Vec<String>> = first.into_iter().collect();
    if uninstall {
        out.push([pip.clone(), words(&["uninstall", "--yes", "torch"])].concat());
    }
    let install = index_args().into_iter().chain(requirements(targets));
    out.push([pip, words(&["install"]), install.collect()].concat());
    out
}

/// The help for no ROCm torch: the torch for `target` (`which` says why
/// that one), where `asked` finds it. `installed`: a torch (CUDA, CPU) is
/// there, to be replaced. `or`: what else may be meant, after the line.
pub fn help(
    targets: &[String],
    which: &str,
    asked: Option<&Asked>,
    installed: bool,
    or: &str,
) -> String {
    let head = format!("{NO_ROCM_TORCH_HELP} {} ({which})", and(targets));
    let line = commands(targets, asked, installed)
        .iter()
        .map(crate::shell::line)
        .collect::<Vec<_>>()
        .join(" && ");
    match asked {
        Some(a) if a.managed => format!(
            "{head} in a venv, as {} is externally managed (PEP 668: pip installs nothing into it): `{line}`{AGAIN} with --python {VENV}/bin/python",
            crate::shell::path(&a.executable)
        ),
        Some(_) if installed => format!(
            "{head} in place of this one (pip keeps a torch it has, whatever the index): `{line}`{AGAIN}{or}"
        ),
        Some(_) => format!("{head}: `{line}`{AGAIN}{or}"),
        // --torch-dir: which python is torch's is not known here.
        None => format!(
            "{head} in place of this one (pip keeps a torch it has, whatever the index), with the pip of torch's environment: `{line}`{AGAIN}{or}"
        ),
    }
}

/// The help of an error for no ROCm torch, as `build` gives it: that
/// torch's route needs no build, and `--profile` builds for another torch.
/// `None` for any other help.
pub fn for_build(help: &str) -> Option<String> {
    let (get, rest) = help.split_once(AGAIN)?;
    if !help.starts_with(NO_ROCM_TORCH_HELP) {
        return None;
    }
    // "with --python P" goes into the command it is for.
    let mut words = vec!["install", "--into-torch"];
    let rest = match rest.strip_prefix(" with --python ") {
        Some(r) => {
            let end = r.find(';').unwrap_or(r.len());
            words.extend(["--python", &r[..end]]);
            &r[end..]
        }
        None => rest,
    };
    Some(format!(
        "{get}, then `{}` (that torch's route: its own MIOpen fixed in place, no build){rest}; to build for a torch that is not here, name its profile with --profile",
        crate::shell::tool(words)
    ))
}

/// The error for no ROCm torch: `what` was found, and the torch to install
/// for this machine's card, where `asked` finds it.
pub fn no_rocm_torch(
    what: String,
    asked: Option<&Asked>,
    installed: bool,
    or: &str,
) -> anyhow::Error {
    let sysfs = crate::gpu::sysfs_root();
    let scan = crate::gpu::scan_all(&sysfs);
    let cards = scan.rdna1_targets();
    let missing = Missing {
        asked: asked.cloned(),
        installed,
    };
    let hint = |what: String, help: String| {
        anyhow::Error::new(crate::error::Hint::new(what, help).with(missing))
    };
    let (targets, which) = match cards.len() {
        0 if !scan.gpus.is_empty() => {
            // GPUs, none RDNA1: no torch of this tool's for a card that
            // is not here.
            let others: Vec<String> = scan.gpus.iter().map(crate::gpu::Gpu::gfx).collect();
            return hint(
                what,
                format!(
                    "this machine has no RDNA1 card ({}), so nothing here is for rdna1-patch to fix: a ROCm torch for it is pytorch.org's (https://pytorch.org/get-started/locally/); to prepare a torch for an RDNA1 card that is not here, `rdna1-patch doctor --target gfx1010`",
                    others.join(", ")
                ),
            );
        }
        0 => (
            vec!["gfx1010".to_owned()],
            "no RDNA1 card is seen here; an RX 5500's is gfx1012",
        ),
        1 => (cards, "the card in this machine"),
        _ => (cards, "the cards in this machine"),
    };
    hint(what, help(&targets, which, asked, installed, or))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_help_puts_the_venvs_python_into_its_command() {
        let asked = Asked {
            executable: "/usr/bin/python3".into(),
            managed: true,
        };
        let h = help(
            &["gfx1010".to_owned()],
            "the card in this machine",
            Some(&asked),
            false,
            "; or x",
        );
        let b = for_build(&h).unwrap();
        assert!(
            b.contains("then `rdna1-patch install --into-torch --python ~/venv/bin/python` (that torch's route"),
            "{b}"
        );
        assert_eq!(for_build("pass the python, then run this again"), None);
    }
}
