//! The in-place fix compiled through torch's own comgr: the pristine
//! kernels fail on gfx101x and the fixed ones compile, the same way as the
//! series patch's.

use std::path::{Path, PathBuf};

use rdna1_testkit::FakeTorch;

use crate::in_place::{install, torch_with_code};
use crate::support::{Sandbox, runtime};

/// Debian 12's comgr (libamd-comgr2 5.2.3): a real compiler for gfx1010,
/// where torch bundles its own.
fn bundle_comgr(torch: &FakeTorch) {
    let debian = Path::new("/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2");
    assert!(
        debian.exists(),
        "this test compiles kernels with Debian's comgr: apt-get install libamd-comgr2 libclang-common-15-dev"
    );
    // A copy, not the link torch_of makes: copied through that link, the
    // file would be copied onto itself.
    let bundled = torch.lib.join("libamd_comgr.so.2");
    let _ = std::fs::remove_file(&bundled);
    std::fs::copy(debian, bundled).unwrap();
}

/// Debian's comgr, in a child process of the binary, as verify compiles.
fn debian_comgr() -> rdna1_patch::compiler::Child {
    let comgr = PathBuf::from("/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2");
    assert!(
        comgr.exists(),
        "apt-get install libamd-comgr2 libclang-common-15-dev"
    );
    let mut c =
        rdna1_patch::compiler::Child::new(comgr, std::time::Duration::from_secs(600)).unwrap();
    c.exe = crate::support::BIN.into();
    c
}

#[test]
fn verify_compiles_the_kernels_through_torchs_comgr_pristine_fail_fixed_compile() {
    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1010"]);
    bundle_comgr(&torch);
    install(&sb, &[]).ok();
    let compile = |extra: &[&str]| {
        let mut args = vec![
            "--profile",
            "rocm-6.4.3",
            "--python",
            "python3",
            "--compile",
        ];
        args.extend(extra);
        sb.verify(&args)
    };
    let verify = |sysfs: &Path| {
        sb.set_gpus(sysfs);
        compile(&[])
    };
    let run = verify(&crate::support::gpus("rx5600xt-gfx1010")).ok();
    run.prints(&format!(
        "2 batch-norm kernels judged compile for gfx1010 through comgr 2.4 ({}); the original's: 2 of 2 fail",
        torch.lib.join("libamd_comgr.so.2").display()
    ));
    // A target asked for: the gfx1030 control, where nothing failed before.
    compile(&["--compile-for", "gfx1030"])
        .ok()
        .prints("2 batch-norm kernels judged compile for gfx1030 through comgr 2.4")
        .prints("the original's: 0 of 2 fail");
    // With no card, gfx1010 is assumed, and said.
    verify(Path::new("/nonexistent"))
        .ok()
        .prints("compile for gfx1010 (no RDNA1 card found: for gfx1010) through comgr");
    // The original back in place: its kernels fail to compile for gfx1010.
    let original = std::fs::read(
        std::fs::read_dir(sb.root.join("state/backups"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    std::fs::write(torch.miopen(), original).unwrap();
    let run = verify(&crate::support::gpus("rx5600xt-gfx1010")).check_fails();
    run.prints("2 of 2 batch-norm kernels judged do not compile for gfx1010")
        .prints("MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: ")
        .prints("cannot compile inline asm");
}

/// The same compile, target by target: only gfx101x fails pristine, and
/// the fix changes nothing that compiled before (the gfx1030 control, and
/// gfx906, which keeps its DPP reduction).
#[test]
fn through_comgr_pristine_fails_on_gfx101x_only_and_fixed_compiles_everywhere() {
    use rdna1_patch::{embedded, verdict};
    let comgr = debian_comgr();
    let pristine = std::fs::read(runtime().join("torch/lib/libMIOpen.so")).unwrap();
    let embedded::Fix::Fixed { bytes: fixed, .. } = embedded::fix(&pristine).unwrap() else {
        panic!("the fixture's library is refused");
    };
    let failing = |lib: &[u8], arch: &str| {
        let judged = verdict::judge(&comgr, lib, arch).unwrap();
        assert_eq!(judged.kernels.len(), 2, "{judged:?}");
        judged.failing().count()
    };
    for (arch, pristine_fails) in [
        ("gfx1010", 2),
        ("gfx1011", 2),
        ("gfx1012", 2),
        ("gfx1030", 0),
        ("gfx906", 0),
    ] {
        assert_eq!(
            failing(&pristine, arch),
            pristine_fails,
            "pristine on {arch}"
        );
        assert_eq!(failing(&fixed, arch), 0, "fixed on {arch}");
    }
}

/// The two forms of the fix, the series' patch for source trees and the
/// in-place edit of a text, compile the same way: each kernel, through
/// Debian's comgr, for the RDNA1 targets, the gfx1030 control and gfx906.
#[test]
fn the_series_patch_and_the_in_place_edit_compile_the_same_way() {
    use rdna1_patch::kernel_text;
    use rdna1_patch::verdict::{self, Lang, Unit, Verdict};
    let comgr = debian_comgr();
    let patch = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("patches/miopen/bn-gfx101x/0004-batchnorm-gfx101x.patch"),
    )
    .unwrap();
    // The block the series adds before each kernel's own decision.
    let hunk = patch.split("\n@@ ").nth(1).unwrap();
    let block: String = hunk
        .lines()
        .take_while(|l| !l.starts_with("diff "))
        .filter_map(|l| l.strip_prefix('+'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(block.contains("#define MIO_BN_GFX103X 1"), "{block}");
    let kernels = crate::support::fixtures().join("fake-runtime/kernels");
    for k in [
        "MIOpenBatchNormFwdTrainSpatial.cl",
        "MIOpenBatchNormBwdSpatial.cl",
    ] {
        let text = std::fs::read_to_string(kernels.join(k)).unwrap();
        let patched = text.replacen(
            "#define MIOPEN_USE_AMDGCN 0\n",
            &format!("{block}#define MIOPEN_USE_AMDGCN 0\n"),
            1,
        );
        let kernel_text::Outcome::Fixed { text: edited, .. } =
            kernel_text::fix(text.as_bytes(), false).unwrap()
        else {
            panic!("{k} was not fixed")
        };
        for arch in ["gfx1010", "gfx1011", "gfx1012", "gfx1030", "gfx906"] {
            let judge = |t: &[u8]| {
                let unit = Unit {
                    name: k.to_owned(),
                    lang: Lang::OpenCl,
                    text: t.to_vec(),
                    headers: Vec::new(),
                };
                verdict::judge_text(&comgr, &unit, arch, &mut 0).unwrap()
            };
            let (by_patch, by_edit) = (judge(patched.as_bytes()), judge(&edited));
            let pristine = judge(text.as_bytes());
            assert!(
                by_patch.verdict == Verdict::Compiles && by_edit.verdict == Verdict::Compiles,
                "{k} on {arch}: {by_patch:?} {by_edit:?}"
            );
            assert_eq!(
                pristine.verdict == Verdict::Compiles,
                !arch.starts_with("gfx101"),
                "{k} pristine on {arch}: {pristine:?}"
            );
        }
    }
}
