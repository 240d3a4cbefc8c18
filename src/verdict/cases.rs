//! The cases a batch-norm solver compiles a kernel text in, and the
//! defines it passes for each: what the diagnosis compiles, and verify
//! --compile too (`compiler`), so both ask the same question.
//!
//! Only the cases torch reaches are cases: fp32, and mixed precision (half
//! data, float weights), spelled as the solver that compiles the text
//! spells it. Pure fp16 (half weights) is never asked for: torch's
//! `use_miopen` (Normalization.cpp) refuses half weights, and MIOpen's own
//! WORKAROUND_ISSUE_1549 turns it off for backward spatial. The solvers
//! read one element at a time, never four.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A data type a batch-norm solver compiles a kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Type {
    Fp32,
    /// Half data, float weights: what torch's mixed-precision batch norm
    /// passes.
    Mixed,
}

/// One way a solver compiles a kernel text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    pub variant: Option<u32>,
    pub ty: Type,
    pub nhwc: bool,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(v) = self.variant {
            write!(f, "variant {v} ")?;
        }
        let ty = match self.ty {
            Type::Fp32 => "fp32",
            Type::Mixed => "mixed",
        };
        write!(f, "{ty} {}", if self.nhwc { "NHWC" } else { "NCHW" })
    }
}

/// The variants a text selects with `MIO_BN_VARIANT == n`, in order.
pub fn variants(text: &[u8]) -> Vec<u32> {
    let s = String::from_utf8_lossy(text);
    let mut variants: Vec<u32> = s
        .match_indices("MIO_BN_VARIANT")
        .filter_map(|(i, _)| {
            let rest = s[i + 14..].trim_start().strip_prefix("==")?;
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    variants.sort_unstable();
    variants.dedup();
    variants
}

/// Every case a solver may compile `text` in for torch: its
/// `MIO_BN_VARIANT`s, fp32 and mixed when it reads `MIOPEN_USE_FP16` or
/// `MIOPEN_USE_FPMIX`, both layouts when it reads `MIO_LAYOUT_NHWC`.
pub fn cases(text: &[u8]) -> Vec<Case> {
    let s = String::from_utf8_lossy(text);
    let variants = variants(text);
    let variants: Vec<Option<u32>> = match variants.is_empty() {
        true => vec![None],
        false => variants.into_iter().map(Some).collect(),
    };
    let types: &[Type] = match s.contains("MIOPEN_USE_FP16") || s.contains("MIOPEN_USE_FPMIX") {
        true => &[Type::Fp32, Type::Mixed],
        false => &[Type::Fp32],
    };
    let layouts: &[bool] = match s.contains("MIO_LAYOUT_NHWC") {
        true => &[false, true],
        false => &[false],
    };
    let mut out = Vec::new();
    for &variant in &variants {
        for &ty in types {
            for &nhwc in layouts {
                out.push(Case { variant, ty, nhwc });
            }
        }
    }
    out
}

/// What a batch-norm solver passes for `case`: sizes that select its
/// variant (N=32, C=64; HW <= 512 for 0, > 1024 for 1 and 2, between for
/// 3 and 4), the element counts and final group sizes the later variants
/// read, the type and layout, and each `MIO_BN_GFX<n>X` the text names, 1
/// when `arch` is of that family (as the solvers decide). `text` is an
/// OpenCL text (a HIP one is [`Unit::defines`](super::Unit::defines)'s).
pub fn defines(text: &[u8], arch: &str, case: &Case) -> Vec<String> {
    defines_of(&families(text), Solver::of(text, false), arch, case)
}

/// Which solver compiles a text, as far as its defines go: a batch-norm
/// solver or a fusion one (batch norm with an activation), for OpenCL or
/// HIP. They spell mixed precision differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Solver {
    pub hip: bool,
    pub fusion: bool,
}

impl Solver {
    /// A fusion text is known by its kernel function's name
    /// (`MIOpenBatchNormActiv...`, `BatchNormActiv...`), which a library
    /// keeps when it hides its symbols.
    pub(crate) fn of(text: &[u8], hip: bool) -> Solver {
        Solver {
            hip,
            fusion: memchr::memmem::find(text, b"BatchNormActiv").is_some(),
        }
    }
}

/// [`defines`] from the families a text names ([`families`]) and the
/// solver that compiles it: a text's cases read it once, not once a case.
///
/// Mixed precision as each solver spells it: the batch-norm solvers pass
/// `MIOPEN_USE_FPMIX=1` alone (`MIOPEN_USE_FP16=0`); the OpenCL fusion
/// solvers `MIOPEN_USE_FP16=1` with `MIOPEN_USE_FPMIX=1`; the HIP fusion
/// one `MIOPEN_USE_FP16=1` alone. The read type is one element: `_FLOAT`
/// for OpenCL; for HIP, `FP_TYPE` in the fusion kernel, HIP's vector name
/// (`FP_TYPE4`) in the others, whose solvers spell it so.
pub(crate) fn defines_of(
    families: &[String],
    solver: Solver,
    arch: &str,
    case: &Case,
) -> Vec<String> {
    let hw: u64 = match case.variant {
        Some(0) => 256,
        Some(1 | 2) => 4096,
        _ => 1024,
    };
    let (n, c) = (32u64, 64u64);
    let grp: u64 = if case.variant.is_some() { 1024 } else { 256 };
    let nhw = n * hw;
    let (fp16, fp32, mix) = match (case.ty, solver.fusion, solver.hip) {
        (Type::Fp32, _, _) => (0, 1, 0),
        (Type::Mixed, false, _) => (0, 0, 1),
        (Type::Mixed, true, false) => (1, 0, 1),
        (Type::Mixed, true, true) => (1, 0, 0),
    };
    let mut d: BTreeMap<&str, String> = BTreeMap::new();
    for (k, v) in [
        ("MIO_SAVE_MEAN_VARIANCE", 1),
        ("MIO_RUNNING_RESULT", 1),
        ("MIO_BN_GRP1", 1),
        ("MIO_BN_GRP2", 1),
        ("MIO_BN_NGRPS", 4),
        ("MIO_BN_NGRPS2", 1),
        ("MIO_BN_USESAVED", 1),
        ("MIO_WAVESIZE", 64),
        ("MIO_BN_CBA_WRITE_INTERMEDIATE", 0),
        ("MIO_BN_STASH_METHOD", 0),
        ("MIOPEN_YES_ACTIV", 1),
        ("MIOPEN_NRN_OP_ID", 3),
        ("MIOPEN_READ_UNIT", 4),
        ("MIO_BN_LOOP_UNROLL_MAXN", 768),
        ("MIO_BN_LOOP_UNROLL_MAXHW", 2500),
        ("MIO_BN_VECTORIZE", 0),
        ("MIO_BN_VEC_SIZE", 1),
    ] {
        d.insert(k, v.to_string());
    }
    let (read, prec) = match (solver.hip, solver.fusion) {
        (false, _) => ("_FLOAT", "_FLOAT_PREC"),
        (true, true) => ("FP_TYPE", "FP_TYPE_PREC"),
        (true, false) => ("FP_TYPE4", "FP_TYPE_PREC4"),
    };
    d.insert("MIOPEN_READ_TYPE", read.into());
    d.insert("MIOPEN_PREC_READ_TYPE", prec.into());
    d.insert("MIOPEN_USE_FP16", fp16.to_string());
    d.insert("MIOPEN_USE_FP32", fp32.to_string());
    d.insert("MIOPEN_USE_FPMIX", mix.to_string());
    d.insert("MIO_LAYOUT_NHWC", u8::from(case.nhwc).to_string());
    d.insert("MIO_BN_N", n.to_string());
    d.insert("MIO_BN_C", c.to_string());
    d.insert("MIO_BN_HW", hw.to_string());
    d.insert("MIO_BN_NHW", nhw.to_string());
    d.insert("MIO_BN_CHW", (c * hw).to_string());
    d.insert("MIO_BN_NCHW", (n * c * hw).to_string());
    d.insert("MIO_BN_NHW_FLOAT", format!("{}", (nhw as f32).to_bits()));
    d.insert("MIO_BN_N_ELEMENTS", (nhw / grp).max(1).to_string());
    d.insert("MIO_BN_GRP0", grp.to_string());
    d.insert("MIO_BN_GRP0_FINAL", grp.to_string());
    d.insert("MIO_BN_GRP1_FINAL", "1".into());
    d.insert("MIO_BN_GRP2_FINAL", "1".into());
    d.insert("MIO_BN_REM", (nhw % grp).to_string());
    d.insert("MIO_BN_REM4", (nhw % (grp * 4)).to_string());
    d.insert("MIO_BN_LESS4", ((nhw / (grp * 4)) * grp * 4).to_string());
    d.insert("MIO_BN_LDS_SIZE", grp.to_string());
    d.insert("MIO_BN_LDSGCN_SIZE", (grp / 64).to_string());
    d.insert("MIO_BN_DIST", (grp * 4).to_string());
    // The HIP fused inference kernel's bound: the elements over the read
    // unit (MIOpen's test of it passes that).
    d.insert("MIOPEN_SBN_BOUNDS", (c * hw / 4).to_string());
    let mut out: Vec<String> = d.into_iter().map(|(k, v)| format!("-D{k}={v}")).collect();
    if let Some(v) = case.variant {
        out.push(format!("-DMIO_BN_VARIANT={v}"));
    }
    for f in families {
        let on = arch
            .strip_prefix("gfx")
            .is_some_and(|a| a.starts_with(f.as_str()));
        out.push(format!("-DMIO_BN_GFX{f}X={}", u8::from(on)));
    }
    out
}

/// The `<n>` of each `MIO_BN_GFX<n>X` `text` names, sorted, once each;
/// the solvers set each to 1 when the device is of that family. Read on
/// the bytes (a lossy copy's offsets are not the text's).
pub(crate) fn families(text: &[u8]) -> Vec<String> {
    let mut families: Vec<String> = memchr::memmem::find_iter(text, b"MIO_BN_GFX")
        .filter_map(|i| {
            let digits: String = text[i + 10..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|b| *b as char)
                .collect();
            (text.get(i + 10 + digits.len()) == Some(&b'X') && !digits.is_empty()).then_some(digits)
        })
        .collect();
    families.sort();
    families.dedup();
    families
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_follow_what_the_text_reads() {
        let plain = cases(b"__kernel void f() {}");
        assert_eq!(plain.len(), 1);
        assert_eq!(plain[0].to_string(), "fp32 NCHW");
        let all = cases(b"#if MIO_BN_VARIANT == 0\n#elif MIO_BN_VARIANT==2\n#if MIOPEN_USE_FP16\n#if MIO_LAYOUT_NHWC");
        assert_eq!(all.len(), 2 * 2 * 2);
        assert_eq!(all[7].to_string(), "variant 2 mixed NHWC");
    }

    /// Mixed precision is spelled as the solver that compiles the text
    /// spells it, and every text reads one element at a time.
    #[test]
    fn mixed_precision_is_spelled_as_each_solver_spells_it() {
        let mixed = Case {
            variant: None,
            ty: Type::Mixed,
            nhwc: false,
        };
        let types = |text: &[u8], hip: bool| {
            let d = defines_of(&[], Solver::of(text, hip), "gfx1010", &mixed);
            let get = |k: &str| {
                d.iter()
                    .find_map(|d| d.strip_prefix(&format!("-D{k}=")))
                    .unwrap()
                    .to_owned()
            };
            [
                get("MIOPEN_USE_FP16"),
                get("MIOPEN_USE_FP32"),
                get("MIOPEN_USE_FPMIX"),
                get("MIOPEN_READ_TYPE"),
            ]
        };
        let bn = b"__kernel void MIOpenBatchNormFwdTrainSpatial() {}";
        let fusion = b"__kernel void MIOpenBatchNormActivFwdTrainSpatial() {}";
        let hip_fusion = b"__global__ void BatchNormActivInferHIP() {}";
        let hip = b"__global__ void BatchNormFwdTrainSpatialHIP() {}";
        assert_eq!(types(bn, false), ["0", "0", "1", "_FLOAT"]);
        assert_eq!(types(fusion, false), ["1", "0", "1", "_FLOAT"]);
        assert_eq!(types(hip_fusion, true), ["1", "0", "0", "FP_TYPE"]);
        assert_eq!(types(hip, true), ["0", "0", "1", "FP_TYPE4"]);
    }

    /// The families are read on the text's bytes: bytes that are not
    /// UTF-8 before one neither hide it nor move past the text's end.
    #[test]
    fn families_are_read_on_the_bytes() {
        let text = b"\xff\xff\xff\xff#if MIO_BN_GFX103X\n\xffMIO_BN_GFX";
        assert_eq!(families(text), ["103"]);
        let case = Case {
            variant: None,
            ty: Type::Fp32,
            nhwc: false,
        };
        let d = defines(text, "gfx1030", &case);
        assert_eq!(d.last().unwrap(), "-DMIO_BN_GFX103X=1");
    }
}
