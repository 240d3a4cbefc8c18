//! Issue 51, the fast part: a kernel found by content is judged, and
//! every way a compile is saved (one compile for identical inputs, the
//! compile cache, the verdicts keyed on the kernel texts, the proof
//! reusing the diagnosis) gives the very verdicts and proof of compiling
//! each case. Through Debian 12's real comgr and hipRTC.

use crate::diagnosis::{DEBIAN_HIPRTC, variant};
use crate::in_place::{HIP64, torch_of};
use crate::support::{Run, Sandbox};

/// A native torch whose libMIOpen is `lib`'s bytes, with Debian's hipRTC
/// linked beside its comgr.
fn torch_with(sb: &Sandbox, lib: &std::path::Path) -> rdna1_testkit::FakeTorch {
    let torch = torch_of(sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    std::fs::copy(lib, torch.miopen()).unwrap();
    std::os::unix::fs::symlink(DEBIAN_HIPRTC, torch.lib.join("libamdhip64.so.5")).expect(
        "this test compiles HIP kernels with Debian's hipRTC: apt-get install libamdhip64-5",
    );
    torch
}

/// The lines of a run's report that say what was judged and proven,
/// times and temp dirs as `[..]`.
fn said(run: &Run, torch: &rdna1_testkit::FakeTorch) -> Vec<String> {
    let dir = torch.dir.display().to_string();
    run.stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            ["Kernel ", "Diagnosis ", "Proven ", "Nothing "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| {
            let l = l.replace(&dir, "TORCH");
            match l.rfind(", ") {
                Some(i) if l.ends_with(" s)") => format!("{}, [..] s)", &l[..i]),
                _ => l,
            }
        })
        .collect()
}

/// 7.x's HIP batch-norm kernel in a library whose symbols are hidden:
/// found by content (the text by a search of the read-only data, its
/// headers by their include guards), judged failing at the DPP
/// reduction through hipRTC, fixed and proven with the OpenCL ones. On
/// the code before (issue 51) it was "not judged" (its headers never
/// handed over) while its header was edited.
#[test]
fn a_hip_kernel_whose_names_are_hidden_is_judged_and_proven() {
    use rdna1_patch::verdict::{self, Lang};
    let lib = std::fs::read(variant("hip-hidden")).unwrap();
    let hip: Vec<_> = verdict::kernels(&lib)
        .unwrap()
        .into_iter()
        .filter(|k| k.lang == Lang::Hip)
        .map(|k| {
            let headers: Vec<String> = k.headers.iter().map(|(n, _)| n.clone()).collect();
            (k.name, headers)
        })
        .collect();
    assert_eq!(hip.len(), 1, "{hip:?}");
    assert!(hip[0].0.starts_with("text at 0x"), "{hip:?}");
    assert_eq!(hip[0].1, ["configuration.hpp", "bn_reduction.hpp"]);
    let hip_name = hip[0].0.clone();

    let sb = Sandbox::new();
    let torch = torch_with(&sb, &variant("hip-hidden"));
    let through =
        "through comgr 2.4 (TORCH/lib/libamd_comgr.so.2), hipRTC 5.2 (TORCH/lib/libamdhip64.so.5)";
    for dry in [true, false] {
        let mut args = vec!["--profile", "rocm-6.4.3"];
        if dry {
            args.push("--dry-run");
        }
        let run = sb.install(&args).ok();
        let lines = said(&run, &torch);
        let expected = [
            "Kernel text at 0x[..]: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in [..] for gfx1010".to_owned(),
            "Kernel text at 0x[..]: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1010".to_owned(),
            "Kernel text at 0x[..]: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1010".to_owned(),
            format!("Diagnosis 3 of 3 batch-norm kernels of TORCH/lib/libMIOpen.so fail for gfx1010 (no RDNA1 card in the KFD topology: judged for gfx1010), {through} ([..] s)"),
            format!("Proven 3 batch-norm kernels compile for gfx1010, gfx1011, gfx1012 (no RDNA1 card in the KFD topology: every RDNA1 target) in every case and compile to unchanged gfx1030 code, {through} ([..])"),
        ];
        assert_eq!(lines.len(), expected.len(), "{lines:#?}");
        for (line, want) in lines.iter().zip(&expected) {
            assert!(crate::support::line_matches(want, line), "{line}\n{want}");
        }
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("Kernel {hip_name}: fails at the DPP"))),
            "the HIP kernel judged: {lines:#?}"
        );
    }
    // Installed: the header hipRTC is handed was fixed, and proven with
    // the kernel that includes it.
    let installed = std::fs::read(torch.miopen()).unwrap();
    let guard = b"#if defined(__AMDGCN__) && !__has_builtin(__builtin_amdgcn_permlanex16)";
    assert!(memchr::memmem::find(&installed, guard).is_some());
}
