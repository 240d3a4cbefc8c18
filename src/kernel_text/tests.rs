use super::*;

const BANNER: &str = "/*******************************************************************************\n * A licence, in our words.\n *******************************************************************************/\n";
const DECISION: &str =
    "#if defined(__AMDGCN__) && !(MIO_BN_GFX103X || MIO_BN_GFX110X || MIO_BN_GFX120X)";
const GUARDED: &str = "#if defined(__AMDGCN__) &&                           \\\n    !((defined(MIO_BN_GFX103X) && MIO_BN_GFX103X) || \\\n      (defined(MIO_BN_GFX110X) && MIO_BN_GFX110X))";

fn text(decisions: &[&str]) -> String {
    let mut t = format!("{BANNER}{BANNER}#define MIOPEN_USE_AMDGCN 0\n");
    for d in decisions {
        t.push_str(&format!(
            "{d}\n#undef MIOPEN_USE_AMDGCN\n#define MIOPEN_USE_AMDGCN 1\n#endif\n"
        ));
    }
    t.push_str("__kernel void k() { /* \"not a string */ }\n");
    t
}

fn fixed(t: &str, same: bool) -> String {
    match fix(t.as_bytes(), same).unwrap() {
        Outcome::Fixed { text, .. } => String::from_utf8(text).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn both_shapes_get_the_clause_and_keep_their_length() {
    let t = text(&[DECISION, GUARDED]);
    let f = fixed(&t, true);
    assert_eq!(f.len(), t.len());
    assert!(f.contains(&format!("MIO_BN_GFX120X{})", clause())), "{f}");
    assert!(
        f.contains(&format!("&& MIO_BN_GFX110X){})", clause())),
        "{f}"
    );
    assert!(f.contains(MARKER));
    // Only comments shrank: the code lines are the grown ones, the rest as they were.
    assert!(f.contains(" * A licence, in our words.\n"));
    assert!(f.contains("__kernel void k() { /* \"not a string */ }\n"));
    let grown = fixed(&t, false);
    assert_eq!(grown.len(), t.len() + 2 * clause().len() + MARKER.len() + 4);
    assert!(grown.contains(BANNER));
}

#[test]
fn fixed_unknown_mixed_and_roomless_texts_are_told_apart() {
    let t = text(&[DECISION]);
    assert_eq!(
        fix(fixed(&t, true).as_bytes(), true),
        Ok(Outcome::AlreadyFixed)
    );
    assert_eq!(fix(b"__kernel void k() {}\n", true), Ok(Outcome::Untouched));
    // A future family is still a known shape.
    let future = DECISION.replace("120X)", "120X || MIO_BN_GFX125X)");
    assert!(matches!(
        fix(text(&[&future]).as_bytes(), true),
        Ok(Outcome::Fixed { .. })
    ));
    // A decision of a shape no rule knows that sets the switch: the
    // switch is made portable, the decision left as it is.
    let odd = "#if defined(__AMDGCN__) && MIO_BN_GFX103X == 0";
    let portable = fixed(&text(&[odd]), true);
    assert!(portable.contains(&format!("{odd}\n")), "{portable}");
    assert!(
        portable.contains(&format!("#define MIOPEN_USE_AMDGCN {}\n", switch_value())),
        "{portable}"
    );
    assert_eq!(fix(portable.as_bytes(), true), Ok(Outcome::AlreadyFixed));
    // One whose block is the DPP code itself: refused, with its line.
    let dpp = format!("{BANNER}{odd}\nstatic float f(float v) {{ return v; }}\n#endif\n");
    assert_eq!(
        fix(dpp.as_bytes(), true),
        Err(Refusal::Unrecognised {
            line: 4,
            found: odd.to_owned(),
            expected: OPENCL_SHAPE,
        })
    );
    // One no rule knows and that mentions no family, as Debian's: its
    // switch is made portable too.
    let debian = "#if defined(__AMDGCN__) && !defined(__gfx90a__)";
    let t = text(&[debian, DECISION]);
    let f = fixed(&t, true);
    let block = f
        .split(debian)
        .nth(1)
        .unwrap()
        .split("#endif")
        .next()
        .unwrap();
    assert!(
        block.contains(&format!("#define MIOPEN_USE_AMDGCN {}\n", switch_value())),
        "{f}"
    );
    assert!(f.contains(&format!("MIO_BN_GFX120X{})", clause())), "{f}");
    let half = format!("{}{}", text(&[DECISION]), fixed(&text(&[DECISION]), false));
    assert_eq!(fix(half.as_bytes(), true), Err(Refusal::Mixed));
    let bare = format!("{DECISION}\n#endif\n");
    assert!(matches!(
        fix(bare.as_bytes(), true),
        Err(Refusal::NoRoom { .. })
    ));
    // Commented out, a decision is no decision.
    assert_eq!(
        fix(format!("/*\n{DECISION}\n*/\n").as_bytes(), true),
        Ok(Outcome::Untouched)
    );
}

/// configuration.hpp's shape, in our words: the switch under a guard.
fn hip(guard: &str, switch: &str, extra: &str) -> String {
    format!(
        "{BANNER}namespace cfg {{\n{guard}\n    static constexpr bool {switch} =\n        base::{switch} &&{extra}\n        !(arch == gfx103x || arch == gfx110x);\n#else\n    static constexpr bool {switch} = false;\n#endif\n}}\n"
    )
}

#[test]
fn the_hip_guard_is_fixed_in_both_spellings_and_told_apart() {
    for switch in ["use_amdgnc", "use_amdgcn"] {
        let t = hip("#ifdef __AMDGCN__", switch, "");
        let f = fixed(&t, true);
        assert_eq!(f.len(), t.len());
        assert!(
            f.contains(&format!(
                "\n{}\n    static constexpr bool {switch} =",
                hip_guard()
            )),
            "{f}"
        );
        assert!(f.contains(MARKER));
        assert_eq!(fix(f.as_bytes(), true), Ok(Outcome::AlreadyFixed));
        // The source series' own form (0005) is a fix already.
        let series = hip("#ifdef __AMDGCN__", switch, " !MIO_BN_GFX101X &&");
        assert_eq!(fix(series.as_bytes(), true), Ok(Outcome::AlreadyFixed));
    }
    let odd = hip(
        "#if defined(__AMDGCN__) && MIOPEN_USE_DPP",
        "use_amdgnc",
        "",
    );
    assert_eq!(
        fix(odd.as_bytes(), true),
        Err(Refusal::Unrecognised {
            line: 5,
            found: "#if defined(__AMDGCN__) && MIOPEN_USE_DPP".to_owned(),
            expected: HIP_SHAPE,
        })
    );
    // A guard on __AMDGCN__ over anything else is not a decision.
    let other = "#ifdef __AMDGCN__\n    static constexpr int lanes = 64;\n#endif\n";
    assert_eq!(fix(other.as_bytes(), true), Ok(Outcome::Untouched));
    let bare = "#ifdef __AMDGCN__\n    static constexpr bool use_amdgcn = true;\n#endif\n";
    assert!(matches!(
        fix(bare.as_bytes(), true),
        Err(Refusal::NoRoom { .. })
    ));
}

#[test]
fn the_word_ahead_is_found_once_for_guards_in_order() {
    let text = b"a #else b #else c";
    let mut ahead = Ahead::new(text, b"#else");
    assert_eq!(ahead.next(0), 2);
    assert_eq!(ahead.next(2), 2);
    assert_eq!(ahead.next(3), 10);
    assert_eq!(ahead.next(11), text.len());
    assert_eq!(ahead.next(16), text.len());
    // A point behind the last search is searched again.
    assert_eq!(ahead.next(0), 2);
}

#[test]
fn each_hip_block_is_read_to_its_own_else() {
    let pristine = hip("#ifdef __AMDGCN__", "use_amdgcn", "");
    let series = hip("#ifdef __AMDGCN__", "use_amdgcn", " !MIO_BN_GFX101X &&");
    // The series' word in the second block does not make the first fixed.
    let both = format!("{pristine}{series}");
    assert_eq!(fix(both.as_bytes(), true), Err(Refusal::Mixed));
    let twice = format!("{series}{series}");
    assert_eq!(fix(twice.as_bytes(), true), Ok(Outcome::AlreadyFixed));
    // Many guards and no `#else`: each block runs to the text's end, where
    // one `MIO_BN_GFX101X` marks them all as the series' own.
    let guard =
        "#ifdef __AMDGCN__\n    static constexpr bool use_amdgcn =\n        !(a);\n#endif\n";
    let many = format!("{}// MIO_BN_GFX101X\n", guard.repeat(3));
    assert_eq!(fix(many.as_bytes(), true), Ok(Outcome::AlreadyFixed));
}
