//! The plan's steps said where no stack is at hand (a refusal deep in
//! the swap, a row of verify's or doctor's): TheRock's torch line, the
//! torch-first fix, the next step where torch runs nothing on a card or
//! every fix is inert, and MIOpen's in-place fix. What they say is the
//! plan's steps, never words of their own.

use super::{Facts, Here, Miopen, MiopenRoute, miopen_step, render, torch_step};

/// TheRock's torch for `cards`, as the one line any pip runs: for the
/// helps that name it where no stack is at hand.
pub fn torch_line(cards: &[&str]) -> String {
    let cards: Vec<String> = cards.iter().map(|c| (*c).to_owned()).collect();
    let step = torch_step(&bare(cards), String::new());
    step.commands.first().map(render).unwrap_or_default()
}

/// The torch step's fix line where torch runs nothing on `cards`: the
/// torch for them and every other RDNA1 card of this machine, in one line
/// (a torch for one card in place of one for the other would only move
/// the failure).
pub fn torch_fix(cards: &[String]) -> String {
    let mut all = crate::gpu::rdna1_targets(&crate::gpu::sysfs_root());
    all.extend(cards.iter().cloned());
    all.sort();
    all.dedup();
    if all.is_empty() {
        all.push("gfx1010".to_owned());
    }
    torch_step(&bare(all), String::new()).fix()
}

/// The breaks line and the fix line where `failing` batch-norm kernels
/// fail on `cards`: MIOpen's in-place fix, or, where torch has no code
/// for them at all (`torch_lacks`), the torch for them first.
pub fn miopen_breaks(failing: usize, cards: &[String], torch_lacks: bool) -> (String, String) {
    let count = crate::output::count(failing, "kernel fails", "kernels fail");
    let said = super::and(cards);
    if torch_lacks {
        let breaks = format!(
            "batch-norm training: {count} for {said}, and torch has no code for {said} at all: the torch for it first"
        );
        return (breaks, torch_fix(cards));
    }
    let fails = Miopen::Fails {
        cards: cards.to_vec(),
        route: MiopenRoute::InPlace,
    };
    let step = miopen_step(&bare(cards.to_vec()), &fails);
    let it = if failing == 1 { "it" } else { "them" };
    let breaks = format!(
        "batch-norm training: {count} for {said}; {} fixes {it}",
        step.commands_said()
    );
    (breaks, step.fix())
}

/// The one next step where every fix is inert for a torch (it runs under
/// HSA_OVERRIDE_GFX_VERSION, with no gfx101x code): TheRock's torch.
pub fn inert_help() -> String {
    format!(
        "for the fix to act, use a torch with gfx101x code: TheRock's `{}` (RX 5700: gfx1010, Pro V520: gfx1011, Pro W5500: gfx1012), then run this again",
        torch_line(&["gfx1010"])
    )
}

/// The one next step where HSA_OVERRIDE_GFX_VERSION alone makes the fix
/// inert for a torch with gfx101x code: unsetting it.
pub const UNSET_HELP: &str = "a torch with gfx101x code needs no override: `unset HSA_OVERRIDE_GFX_VERSION`, then run this again (and run torch without it)";

/// The facts of `cards` alone: no torch, no override, any pip.
fn bare(cards: Vec<String>) -> Facts {
    Facts {
        cards,
        here: Here::Cards,
        overridden: None,
        torch: None,
        missing: None,
    }
}

/// The one next step where torch runs nothing on `cards`: where torch has
/// their code and only the override hides it, unsetting it; else the
/// torch for the card (run without the override, if one is set).
pub fn no_code_help(code: Option<&crate::gpucode::Code>, cards: &[String]) -> String {
    let Some((v, target)) = crate::gpu::seen_override() else {
        return torch_fix(cards);
    };
    if code.is_some_and(|c| cards.iter().all(|card| c.covers(card))) {
        return format!(
            "`unset HSA_OVERRIDE_GFX_VERSION`: torch has code for {} of its own, and while it is {v} ROCm looks for {target} code instead; then run this again",
            cards.join(", ")
        );
    }
    format!(
        "{}, without HSA_OVERRIDE_GFX_VERSION (it makes ROCm look for {target} code)",
        torch_fix(cards)
    )
}

/// The torch-gpu row's breaks and fix lines where torch runs nothing on
/// `cards` (`said` names them): unsetting the override that hides their
/// code, else the torch for them first.
pub fn no_code_row(code: &crate::gpucode::Code, cards: &[String], said: &str) -> (String, String) {
    let next = match cards.iter().all(|card| code.covers(card)) {
        true => "`unset HSA_OVERRIDE_GFX_VERSION`".to_owned(),
        false => format!("the torch for {} first", cards[0]),
    };
    let breaks = format!("everything: torch has no code for {said}; {next} (see torch-gpu)");
    (breaks, no_code_help(Some(code), cards))
}
