//! The diagnosis by compile: the fixture's variant MIOpens (our own texts,
//! each a case: tests/fixtures/fake-runtime/variants/README.md) judged
//! through Debian 12's real comgr, as MIOpen compiles them at run time.

use std::path::Path;

use rdna1_patch::comgr::Comgr;
use rdna1_patch::verdict::{self, Outcome, Verdict};

use crate::support::runtime;

pub(crate) const DEBIAN_COMGR: &str = "/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2";

fn comgr() -> Comgr {
    Comgr::open(Path::new(DEBIAN_COMGR))
        .expect("this test compiles kernels with Debian's comgr: apt-get install libamd-comgr2 libclang-common-15-dev")
}

/// A variant's library: "stock" is the fixture's own.
pub(crate) fn variant(name: &str) -> std::path::PathBuf {
    match name {
        "stock" => runtime().join("torch/lib/libMIOpen.so"),
        v => runtime().join("variants").join(v).join("libMIOpen.so"),
    }
}

fn judge(name: &str, arch: &str) -> verdict::Judgement {
    let lib = std::fs::read(variant(name)).unwrap();
    verdict::judge(&comgr(), &lib, arch).unwrap()
}

#[test]
fn each_variant_is_told_apart_by_compiling_it() {
    let stock = judge("stock", "gfx1010");
    assert_eq!(stock.kernels.len(), 2, "{stock:?}");
    assert_eq!(stock.outcome(), Outcome::Fixable, "{stock:?}");
    // Debian 12's comgr says no more than this of the rejected operand;
    // the compile without the row_bcast instructions shows the cause.
    for k in &stock.kernels {
        assert!(
            matches!(&k.verdict, Verdict::FailsAtDpp { error, .. } if error == "cannot compile inline asm"),
            "{k:?}"
        );
    }
    assert_eq!(judge("stock", "gfx1030").outcome(), Outcome::NothingToFix);

    assert_eq!(
        judge("portable", "gfx1010").outcome(),
        Outcome::NothingToFix
    );

    let unknown = judge("unknown-macro", "gfx1010");
    assert_eq!(unknown.outcome(), Outcome::Fixable, "{unknown:?}");

    let named = judge("names-gfx1010", "gfx1010");
    assert_eq!(named.outcome(), Outcome::Fixable, "{named:?}");

    let other = judge("other-failure", "gfx1010");
    match other.outcome() {
        Outcome::NotFixable { kernel, error } => {
            assert_eq!(kernel, "MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL");
            assert!(error.starts_with("fails (fp32 NCHW: "), "{error}");
        }
        o => panic!("{o:?}"),
    }
    // gfx1011 has the dot instructions gfx1010 lacks.
    assert_eq!(
        judge("other-failure", "gfx1011").outcome(),
        Outcome::NothingToFix
    );
}

#[test]
fn a_fix_is_proven_only_where_it_makes_every_kernel_compile() {
    use rdna1_patch::embedded;
    let c = comgr();
    let fixed = |name: &str| {
        let lib = std::fs::read(variant(name)).unwrap();
        match embedded::fix(&lib).unwrap() {
            embedded::Fix::Fixed { bytes, .. } => (lib, bytes),
            embedded::Fix::Refused(r) => panic!("{name}: {r}"),
        }
    };
    let (pristine, ours) = fixed("stock");
    let proof = verdict::prove(&c, &pristine, &ours).unwrap().unwrap();
    assert_eq!(proof.kernels, 2);
    let (pristine, ours) = fixed("names-gfx1010");
    verdict::prove(&c, &pristine, &ours).unwrap().unwrap();
    let (pristine, ours) = fixed("unknown-macro");
    match verdict::prove(&c, &pristine, &ours).unwrap() {
        Err(verdict::Unproven::StillFails {
            kernel,
            arch,
            error,
        }) => {
            assert_eq!(kernel, "MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL");
            assert_eq!(arch, "gfx1010");
            assert_eq!(error, "fp32 NCHW: cannot compile inline asm");
        }
        other => panic!("{other:?}"),
    }
}
