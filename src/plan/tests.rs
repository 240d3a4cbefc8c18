//! The plan over generated stacks: cards x torch code x origin x library
//! code x override x diagnosis. Taking each step (its effect applied to
//! the stack) leaves a strictly smaller plan, empty within 3 steps, and no
//! step names a card outside the machine's or those asked for.

use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

/// The stack once `step` is taken.
fn apply(f: &Facts, step: &Step) -> Facts {
    let mut f = f.clone();
    if step.replaces_torch() {
        f.overridden = None;
        f.torch = Some(TorchFacts {
            code: Some(step.cards.clone()),
            origin: Origin::TheRock,
            rocblas_lacks: Vec::new(),
            rocblas_profile: None,
            rocblas_cost: None,
            // TheRock's MIOpen fails batch norm on gfx101x.
            miopen: Miopen::Fails {
                cards: step.cards.clone(),
                route: MiopenRoute::InPlace,
            },
        });
        return f;
    }
    match step.kind {
        Kind::Override => f.overridden = None,
        Kind::Rocblas => {
            if let Some(t) = &mut f.torch {
                t.rocblas_lacks.clear();
            }
        }
        Kind::Miopen => {
            if let Some(t) = &mut f.torch {
                // Judged and fixed, or nothing to fix.
                t.miopen = Miopen::Fine;
            }
        }
        Kind::Torch => unreachable!("a torch step installs a torch"),
    }
    f
}

fn stacks() -> Vec<Facts> {
    let machines: Vec<(Vec<String>, Here)> = vec![
        (s(&["gfx1010"]), Here::Cards),
        (s(&["gfx1011"]), Here::Cards),
        (s(&["gfx1012"]), Here::Cards),
        (s(&["gfx1010", "gfx1012"]), Here::Cards),
        (s(&["gfx1010"]), Here::Asked),
        (s(&["gfx1010"]), Here::NoGpu),
        (Vec::new(), Here::NoRdna1(s(&["gfx1030"]))),
    ];
    let codes: Vec<Option<Vec<String>>> = vec![
        None,
        Some(s(&["gfx1030"])),
        Some(s(&["gfx1010"])),
        Some(s(&["gfx1012"])),
        Some(s(&["gfx1010", "gfx1012"])),
        Some(s(&["gfx1010", "gfx1030"])),
        Some(s(&["gfx10-1-generic"])),
    ];
    let overrides = [None, Some(("10.3.0".to_owned(), "gfx1030".to_owned()))];
    let origins = [Origin::TheRock, Origin::PytorchOrg, Origin::SelfBuilt];
    let mut out = Vec::new();
    for (cards, here) in &machines {
        for overridden in &overrides {
            out.push(Facts {
                cards: cards.clone(),
                here: here.clone(),
                overridden: overridden.clone(),
                torch: None,
                missing: None,
            });
            for code in &codes {
                for origin in &origins {
                    for lacks in [Vec::new(), cards.clone()] {
                        for profile in [None, Some("rocm-6.4.3".to_owned())] {
                            let miopens = [
                                Miopen::Fine,
                                Miopen::Unknown,
                                Miopen::Fails {
                                    cards: cards.clone(),
                                    route: MiopenRoute::InPlace,
                                },
                                Miopen::Judging,
                                Miopen::Fails {
                                    cards: cards.clone(),
                                    route: MiopenRoute::Refused("build it".into()),
                                },
                            ];
                            for miopen in miopens {
                                out.push(Facts {
                                    cards: cards.clone(),
                                    here: here.clone(),
                                    overridden: overridden.clone(),
                                    torch: Some(TorchFacts {
                                        code: code.clone(),
                                        origin: origin.clone(),
                                        rocblas_lacks: lacks.clone(),
                                        rocblas_profile: profile.clone(),
                                        rocblas_cost: None,
                                        miopen,
                                    }),
                                    missing: None,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn each_step_taken_leaves_a_smaller_plan_empty_within_three() {
    let all = stacks();
    assert!(all.len() > 5000, "{}", all.len());
    for start in &all {
        let mut f = start.clone();
        let mut p = plan(&f);
        if matches!(f.here, Here::NoRdna1(_)) {
            assert!(p.steps.is_empty() && p.nothing.is_some(), "{f:?}: {p:?}");
        }
        let mut taken = 0;
        while let Some(first) = p.steps.first().cloned() {
            for step in &p.steps {
                // No step names a card outside the machine's or --target.
                assert!(
                    step.cards.iter().all(|c| f.cards.contains(c)),
                    "{f:?}: {step:?}"
                );
                assert!(!step.cards.is_empty(), "{f:?}: {step:?}");
                // Only a torch step comes first of what waits for it.
                if step.after.is_some() {
                    assert!(
                        p.steps[0].replaces_torch() || p.steps[0].kind == Kind::Override,
                        "{f:?}: {p:?}"
                    );
                }
                assert!(!step.line().is_empty());
            }
            let next = apply(&f, &first);
            let q = plan(&next);
            assert!(
                q.steps.len() < p.steps.len(),
                "taking {:?} left {} steps of {}:\n{start:?}\n{p:#?}\n{q:#?}",
                first.kind,
                q.steps.len(),
                p.steps.len()
            );
            taken += 1;
            f = next;
            p = q;
        }
        assert!(taken <= 3, "{start:?}: {taken} steps");
    }
}

/// Two RDNA1 cards and torch with code for one: one torch line names
/// both devices; with code for both, no torch step.
#[test]
fn two_cards_get_one_torch_line() {
    let f = Facts {
        cards: s(&["gfx1010", "gfx1012"]),
        here: Here::Cards,
        overridden: None,
        torch: Some(TorchFacts {
            code: Some(s(&["gfx1010"])),
            origin: Origin::SelfBuilt,
            rocblas_lacks: Vec::new(),
            rocblas_profile: None,
            rocblas_cost: None,
            miopen: Miopen::Unknown,
        }),
        missing: None,
    };
    let p = plan(&f);
    assert_eq!(p.steps[0].kind, Kind::Torch);
    assert!(
        render(&p.steps[0].commands[0]).ends_with(
            "\"torch[device-gfx1010,device-gfx1012]\" \"torchvision[device-gfx1010,device-gfx1012]\""
        ),
        "{p:?}"
    );
    assert_eq!(
        p.steps[1].after.as_deref(),
        Some("after the torch for gfx1010 and gfx1012, run doctor again")
    );
    let mut both = f.clone();
    both.torch.as_mut().unwrap().code = Some(s(&["gfx1010", "gfx1012"]));
    assert!(plan(&both).first(Kind::Torch).is_none());
}

#[test]
fn words_are_quoted_only_where_the_shell_needs_it() {
    let c = Cmd::new(
        "pip",
        &["install", "torch[device-gfx1010]", "a b", "it's $x"],
    );
    assert_eq!(
        render(&c),
        r#"pip install "torch[device-gfx1010]" 'a b' 'it'\''s $x'"#
    );
}
