//! What to do about HSA_OVERRIDE_GFX_VERSION, from the GPU code torch
//! carries (`gpucode`) and the cards of this machine.

use crate::gpucode::Code;

/// What to do about HSA_OVERRIDE_GFX_VERSION, given the code objects of
/// torch's libtorch_hip.so (`None`: not known) and the cards in the KFD
/// topology.
pub struct Advice {
    /// Nothing to change.
    pub fine: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// It is needed exactly when torch has no code for the card: with a
/// pytorch.org ROCm wheel (no gfx101x) it must stay set, and MIOpen then sees
/// gfx1030; with a torch built for gfx101x it must go.
pub fn override_advice(code: Option<&Code>, value: Option<&str>, cards: &[String]) -> Advice {
    override_for(code.map(Code::has_gfx101x), value, cards, false)
}

/// As [`override_advice`], from whether torch has gfx101x code (`None`:
/// not known); `torch_given` when the user already named their torch, so
/// the advice never asks for it again.
pub fn override_for(
    gfx101x: Option<bool>,
    value: Option<&str>,
    cards: &[String],
    torch_given: bool,
) -> Advice {
    let card_list = cards;
    let cards = if cards.is_empty() {
        "unknown".to_owned()
    } else {
        cards.join(", ")
    };
    let reports =
        |v: &str| crate::gpu::override_gfx(v).unwrap_or_else(|| "an unreadable value".into());
    let inert = "MIOpen then sees gfx1030: the batch-norm patch (0004) changes nothing, while the fast-find patch (0003) still acts, since its detection reads the real chip from the KFD topology";
    match (value, gfx101x) {
        (Some(v), Some(false)) => Advice {
            fine: true,
            detail: format!(
                "HSA_OVERRIDE_GFX_VERSION={v} (ROCm reports {}, the card is {cards}): required, torch has no gfx101x code. {inert}",
                reports(v)
            ),
            fix: None,
        },
        (Some(v), Some(true)) => Advice {
            fine: false,
            detail: format!(
                "HSA_OVERRIDE_GFX_VERSION={v} makes ROCm report {} and load code built for that chip, but torch carries gfx101x code of its own",
                reports(v)
            ),
            fix: Some("unset HSA_OVERRIDE_GFX_VERSION: with this torch, MIOpen sees the real gfx101x and every patch acts".into()),
        },
        (Some(v), None) if torch_given => Advice {
            fine: false,
            detail: format!(
                "HSA_OVERRIDE_GFX_VERSION={v}: ROCm reports {} while the card is {cards}; whether your torch needs it depends on the GPU code it carries, which could not be read (see torch-gpu)",
                reports(v)
            ),
            fix: None,
        },
        (Some(v), None) => Advice {
            fine: false,
            detail: format!(
                "HSA_OVERRIDE_GFX_VERSION={v}: ROCm reports {} while the card is {cards}; whether your torch needs it depends on the GPU code it carries",
                reports(v)
            ),
            fix: Some("run `rdna1-patch doctor --python PATH` with the python of your torch to find out".into()),
        },
        (None, Some(false)) => Advice {
            fine: false,
            detail: "HSA_OVERRIDE_GFX_VERSION is not set, and torch has no gfx101x code: on an RDNA1 card its GPU operators will not load".into(),
            // The exact command for the card (its index: pip's default has
            // no such extra).
            fix: Some(format!(
                "export HSA_OVERRIDE_GFX_VERSION=10.3.0 ({inert}); or install a torch built for gfx101x, which needs no override: `{}`",
                crate::plan::torch_line(&[card_list
                    .iter()
                    .find(|c| crate::gpu::is_rdna1_arch(c))
                    .map_or("gfx1010", String::as_str)])
            )),
        },
        (None, _) => Advice {
            fine: true,
            detail: "HSA_OVERRIDE_GFX_VERSION is not set".into(),
            fix: None,
        },
    }
}
