//! How to get the torch for the card: the one line of shell a newcomer is
//! told to run, exact for the python that was asked, and run as printed by
//! the tests. pip keeps a torch it has whatever the index (`Requirement
//! already satisfied`, and no such extra), so a CUDA or CPU torch is
//! uninstalled first; a python that is externally managed (PEP 668) takes
//! no pip install at all, so a venv comes first.

use std::path::PathBuf;

use crate::error::hint;

/// TheRock's multi-arch index, as its RELEASES.md installs a torch with
/// one device's code: the torch with an MIOpen of its own that sees the
/// real chip.
pub const THEROCK_INDEX: &str = "https://rocm.nightlies.amd.com/whl-multi-arch/";

/// Where the lines get torch from instead of TheRock's index: a URL (a
/// mirror: pip's --index-url), or a directory of wheels (--no-index
/// --find-links). docs/commands.md documents it.
pub const INDEX_ENV: &str = "RDNA1_PATCH_TORCH_INDEX";

/// TheRock's native torch for gfx1010, for messages that name it whole.
pub const NATIVE_TORCH: &str = "pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\"";

/// How the help for no ROCm torch starts: a torch problem, first, whose
/// fix is the torch for the card in the machine.
pub const NO_ROCM_TORCH_HELP: &str = "install the torch built for";

/// What follows the lines: the command the user ran, again. `build` says
/// its own ([`for_build`]).
const AGAIN: &str = ", then run this again";

/// Where the venv goes for a python that is externally managed: the one
/// README's examples name (`--python ~/venv/bin/python`).
const VENV: &str = "~/venv";

/// The python that was asked for torch: `sys.executable`, and whether it
/// is externally managed (PEP 668: its stdlib's EXTERNALLY-MANAGED file,
/// outside a venv).
#[derive(Debug, Clone)]
pub struct Asked {
    pub executable: PathBuf,
    pub managed: bool,
}

/// pip's options for the index: [`INDEX_ENV`]'s when set, else TheRock's.
fn index() -> String {
    match std::env::var(INDEX_ENV) {
        Ok(v) if v.contains("://") => format!("--index-url {}", quote(&v)),
        Ok(v) if !v.trim().is_empty() => format!("--no-index --find-links {}", quote(&v)),
        _ => format!("--index-url {THEROCK_INDEX}"),
    }
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

/// TheRock's torch with every target's device code, in one requirement:
/// `torch[device-gfx1010,device-gfx1012]` (its RELEASES.md installs
/// several devices so).
pub fn device_extra(targets: &[String]) -> String {
    let devices: Vec<String> = targets.iter().map(|t| format!("device-{t}")).collect();
    format!("torch[{}]", devices.join(","))
}

/// `pip install` of TheRock's torch for `target` (gfx1010, gfx1011 or
/// gfx1012; TheRock names a device extra for each), from [`index`].
pub fn native_torch(target: &str) -> String {
    install("pip", &[target.to_owned()])
}

/// [`native_torch`] for every one of `targets`, in one line.
pub fn native_torch_for(targets: &[String]) -> String {
    install("pip", targets)
}

fn install(pip: &str, targets: &[String]) -> String {
    format!("{pip} install {} \"{}\"", index(), device_extra(targets))
}

/// "gfx1010", "gfx1010 and gfx1012".
fn and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// `text` as one shell word: as it is when nothing in it is special to
/// the shell, else in single quotes.
fn quote(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
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
    let target = targets;
    match asked {
        Some(a) if a.managed => {
            let exe = quote(&a.executable.to_string_lossy());
            format!(
                "{head} in a venv, as {exe} is externally managed (PEP 668: pip installs nothing into it): `{exe} -m venv {VENV} && {}`{AGAIN} with --python {VENV}/bin/python",
                install(&format!("{VENV}/bin/python -m pip"), target)
            )
        }
        Some(a) => {
            let pip = format!("{} -m pip", quote(&a.executable.to_string_lossy()));
            match installed {
                true => format!(
                    "{head} in place of this one (pip keeps a torch it has, whatever the index): `{pip} uninstall --yes torch && {}`{AGAIN}{or}",
                    install(&pip, target)
                ),
                false => format!("{head}: `{}`{AGAIN}{or}", install(&pip, target)),
            }
        }
        // --torch-dir: which python is torch's is not known here.
        None => format!(
            "{head} in place of this one (pip keeps a torch it has, whatever the index), with the pip of torch's environment: `pip uninstall --yes torch && {}`{AGAIN}{or}",
            install("pip", target)
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
    fn a_word_with_shell_specials_is_quoted_whole() {
        assert_eq!(
            quote("/home/u/venv/bin/python3.11"),
            "/home/u/venv/bin/python3.11"
        );
        assert_eq!(quote("/a b/python"), "'/a b/python'");
        assert_eq!(quote("/it's/python"), r"'/it'\''s/python'");
        assert_eq!(quote("$HOME"), "'$HOME'");
    }

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
