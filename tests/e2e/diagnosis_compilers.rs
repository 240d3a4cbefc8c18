//! The diagnosis's compilers: 7.x's HIP kernels through hipRTC (and a
//! hipRTC named by its soname alone), the code digest the proof compares,
//! and the compile child's rounds over every core, each against compiling
//! case by case (split from diagnosis.rs, which has the variants' verdicts).

use std::path::Path;

use rdna1_patch::verdict;

use crate::diagnosis::{DEBIAN_COMGR, DEBIAN_HIPRTC, comgr, variant};

/// 7.x's HIP batch-norm kernels are judged through hipRTC, with their
/// headers handed over by name as MIOpen hands them: failing at the DPP
/// reduction, fixed in configuration.hpp's guard and proven (gfx1030's
/// code unchanged); a portable one is nothing to fix; and without a
/// hipRTC beside torch's MIOpen nothing is guessed.
#[test]
fn hip_kernels_are_judged_through_hiprtc() {
    let hiprtc = |torch: &rdna1_testkit::FakeTorch| {
        let link = torch.lib.join("libamdhip64.so.5");
        std::os::unix::fs::symlink(DEBIAN_HIPRTC, &link).expect(
            "this test compiles HIP kernels with Debian's hipRTC: apt-get install libamdhip64-5",
        );
        link
    };
    let install = |name: &str, with_hiprtc: bool| {
        use crate::in_place::{HIP64, torch_of};
        let sb = crate::support::Sandbox::new();
        let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
        std::fs::copy(variant(name), torch.miopen()).unwrap();
        let link = with_hiprtc.then(|| hiprtc(&torch));
        let runs = [
            sb.install(&["--profile", "rocm-6.4.3", "--dry-run"]),
            sb.install(&["--profile", "rocm-6.4.3"]),
        ];
        (sb, torch, link, runs)
    };

    let (sb, torch, link, [dry, real]) = install("hip", true);
    let through = format!(
        "through comgr 2.4 ({}), hipRTC 5.2 ({})",
        torch.lib.join("libamd_comgr.so.2").display(),
        link.unwrap().display()
    );
    for run in [&dry, &real] {
        run.says("Kernel MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIALHIP: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm)")
            .says(&format!(
                "Diagnosis 3 of 3 batch-norm kernels of {} fail for gfx1010",
                torch.miopen().display()
            ))
            .says(&through);
    }
    dry.ok().says(&format!("3 batch-norm kernels compile for gfx1010, gfx1011, gfx1012 (no GPU visible: every RDNA1 target) in every case; for gfx1030: the same code as before wherever it compiled before; {through}"));
    real.ok().says("Installed");
    // The edit is in the header hipRTC is handed, not in the kernel text.
    let installed = std::fs::read(torch.miopen()).unwrap();
    let guard = b"#if defined(__AMDGCN__) && !__has_builtin(__builtin_amdgcn_permlanex16)";
    assert!(memchr::memmem::find(&installed, guard).is_some());
    drop(sb);

    let (sb, torch, _, runs) = install("hip-portable", true);
    for run in runs {
        run.ok()
            .says("Kernel MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIALHIP: compiles")
            .says(&format!(
                "Nothing to fix: every batch-norm kernel of {} compiles for gfx1010 in every case",
                torch.miopen().display()
            ));
    }
    assert!(!sb.prefix.exists());

    // No hipRTC: the HIP kernel cannot be judged, and nothing is guessed.
    let (sb, _, _, runs) = install("hip", false);
    for run in runs {
        run.fails().says(
            "error: MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIALHIP is a HIP kernel, and no hipRTC was found beside",
        );
    }
    assert!(!sb.prefix.exists());
}

/// The proof compares the code a compile gave, not every byte of its
/// object: a symbol named after a hash of the input (HIP's
/// `__hip_cuid_<hash>`, which hipRTC 7.2 emits) changes with a comment,
/// the machine code does not. Real objects from the host's compiler.
#[test]
fn the_code_digest_sees_the_code_and_not_the_names() {
    let dir = tempfile::tempdir().unwrap();
    let object = |name: &str, src: &str| {
        let c = dir.path().join(format!("{name}.c"));
        let so = dir.path().join(format!("{name}.so"));
        std::fs::write(&c, src).unwrap();
        let ok = std::process::Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&c)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cc failed on {src}");
        rdna1_patch::elf::code_digest(&std::fs::read(so).unwrap())
    };
    let a = object("a", "char cuid_0123abcd;\nint f(int x) { return x * 3; }\n");
    let b = object("b", "char cuid_4567ef01;\nint f(int x) { return x * 3; }\n");
    let c = object("c", "char cuid_0123abcd;\nint f(int x) { return x * 5; }\n");
    assert_eq!(a, b, "a renamed variable is no change of code");
    assert_ne!(a, c, "a changed instruction is");
}

/// A hipRTC file named by its soname alone, as wheels ship it (here a copy
/// of Debian 12's HIP 5.2 runtime, which carries hipRTC, as
/// libamdhip64.so.5): its version is HIP's, 5.2, read from the library
/// (its `hip_5.2` symbol version), never hipRTC's own answer (9.0); and
/// that is what the compile is fed (`HIP_PACKAGE_VERSION_FLAT`, and no
/// option 5.2's clang lacks).
#[test]
fn a_hiprtc_named_by_its_soname_alone_gets_the_hip_version() {
    use rdna1_patch::comgr::child::{Answer, Batch, Compilers, Job, compile_with};
    let dir = tempfile::tempdir().unwrap();
    let rtc = dir.path().join("libamdhip64.so.5");
    std::fs::copy(DEBIAN_HIPRTC, &rtc)
        .expect("this test compiles with Debian's hipRTC: apt-get install libamdhip64-5");
    let mut batch = Batch::default();
    let text = "#if HIP_PACKAGE_VERSION_FLAT != 5002000000\n#error \"HIP_PACKAGE_VERSION_FLAT is not 5.2's\"\n#endif\nextern \"C\" __global__ void k(float* p) { p[0] = 1.0f; }\n";
    let source = batch.add_hip_source("version.cpp".into(), text.into(), &[]);
    batch.add_job(Job {
        source,
        target: "gfx1030".into(),
        options: Vec::new(),
        after: None,
        front_end: false,
    });
    let compilers = Compilers {
        comgr: DEBIAN_COMGR.into(),
        hiprtc: Some(rtc),
    };
    let answers = compile_with(
        Path::new(crate::support::BIN),
        &compilers,
        &batch,
        std::time::Duration::from_secs(300),
    )
    .unwrap();
    assert_eq!(answers.hiprtc, Some((5, 2)));
    assert!(
        matches!(&answers.answers[..], [Answer::Compiled(d)] if d.len() == 64),
        "{:?}",
        answers.answers
    );
}

/// The compile child splits a round over the machine's cores and compiles
/// identical jobs once: its verdicts are the very ones of compiling every
/// case one by one in process, for every variant, and for a library whose
/// two kernels share one text (every job of the second is the first's).
#[test]
fn children_on_every_core_give_the_verdicts_of_one_compile_per_case() {
    use rdna1_patch::compiler::Child;
    let child = |hiprtc: bool| {
        let mut c = Child::new(DEBIAN_COMGR.into(), std::time::Duration::from_secs(120)).unwrap();
        c.exe = crate::support::BIN.into();
        if hiprtc {
            c.hiprtc = Some(DEBIAN_HIPRTC.into());
        }
        c
    };
    let in_process = comgr();
    let same = |lib: &[u8], arch: &str| {
        let mut one = verdict::judge(&in_process, lib, arch).unwrap();
        let mut many = verdict::judge(&child(false), lib, arch).unwrap();
        one.compiler.clear();
        many.compiler.clear();
        // The children keep the assembler's stderr, which names the
        // rejected row_bcast operand: they need no compile with the DPP
        // blanked where comgr's log alone (in process) says too little.
        assert!(many.compiles <= one.compiles, "{arch}");
        one.compiles = 0;
        many.compiles = 0;
        assert_eq!(one, many, "{arch}");
    };
    for name in [
        "stock",
        "portable",
        "unknown-macro",
        "other-failure",
        "amdgcn-everywhere",
    ] {
        same(&std::fs::read(variant(name)).unwrap(), "gfx1010");
    }
    // Two kernels, one text: the second's jobs are the first's.
    let stock = std::fs::read(variant("stock")).unwrap();
    let texts: Vec<(String, Vec<u8>)> = verdict::kernels(&stock)
        .unwrap()
        .iter()
        .take(1)
        .flat_map(|k| {
            let t = stock[k.range.clone()].to_vec();
            [(k.name.clone(), t.clone()), (format!("{}TWIN", k.name), t)]
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libMIOpen.so");
    crate::texts::miopen_embedding(dir.path(), &lib, &texts);
    same(&std::fs::read(&lib).unwrap(), "gfx1010");
}

/// The loader knows a library by the name it was opened by, and the
/// compilers are opened by `/proc/self/fd/N`: loading one compiler after
/// another, whose files were given the numbers the first one's had, must
/// still give each its own library.
#[test]
fn compilers_loaded_one_after_another_are_each_themselves() {
    use rdna1_patch::comgr::hiprtc::Hiprtc;
    let first = comgr();
    let rtc = Hiprtc::open(Path::new(DEBIAN_HIPRTC)).expect("Debian's hipRTC loads");
    let again = comgr();
    assert_eq!(first.version, again.version);
    let text = b"__kernel void k(__global float* p) { p[0] = 1.0f; }";
    for c in [&first, &again] {
        c.compile_ocl("k.cl", text, "gfx1010", &[])
            .expect("a plain kernel compiles");
    }
    drop(rtc);
}

/// Issue 74: the proof compares a changed HIP kernel's front end for
/// gfx1030 before compiling it to code, as it does an OpenCL one: hipRTC
/// preprocesses it (`-fgpu-rdc -E`, read back through hiprtcGetBitcode),
/// its own headers and macros included. An edit in a branch the control
/// never takes leaves that text as it was: the case is proven without a
/// compile to code. An edit the control reaches changes it: compiled.
/// Debian 12's hipRTC 5.2 (CI's) has no hiprtcGetBitcode: it says so,
/// and the case is compiled to code, as before. The other half needs a
/// hipRTC of ROCm 5.3 or later: `cargo xtask fidelity --hip-front-end`
/// runs this test in the ROCm chroot with RDNA1_TEST_HIPRTC, _COMGR and
/// _EXE naming its hipRTC 6.4, comgr 3 and this build's binary.
#[test]
fn a_hip_case_is_proven_by_hiprtcs_own_preprocessor_where_it_has_one() {
    use rdna1_patch::comgr::hiprtc::NO_FRONT_END;
    use rdna1_patch::verdict::{Compiled, Compiler, Job, Lang};
    let hiprtc = std::env::var_os("RDNA1_TEST_HIPRTC")
        .map_or_else(|| Path::new(DEBIAN_HIPRTC).to_owned(), Into::into);
    let comgr = std::env::var_os("RDNA1_TEST_COMGR")
        .map_or_else(|| Path::new(DEBIAN_COMGR).to_owned(), Into::into);
    let mut child =
        rdna1_patch::compiler::Child::new(comgr, std::time::Duration::from_secs(300)).unwrap();
    child.exe = std::env::var_os("RDNA1_TEST_EXE")
        .map_or_else(|| Path::new(crate::support::BIN).to_owned(), Into::into);
    child.hiprtc = Some(hiprtc.clone());
    let kernel = b"#include \"reduce.hpp\"\nextern \"C\" __global__ void bn(float* p) { p[0] = reduce(p[1]); }\n";
    // The DPP branch, as MIOpen guards it, before and after the fix.
    let header = |dpp: &str| {
        format!(
            "#pragma once\n__device__ float reduce(float x) {{\n#if USE_DPP\n    {dpp}\n#endif\n    return x + 1.0f;\n}}\n"
        )
        .into_bytes()
    };
    let before = vec![(
        "reduce.hpp".to_owned(),
        header("asm volatile(\"v_add_f32 %0 %0 %0 row_bcast:15\" : \"+v\"(x));"),
    )];
    let after = vec![(
        "reduce.hpp".to_owned(),
        header("asm volatile(\"v_add_f32 %0 %0 %0                \" : \"+v\"(x));"),
    )];
    let off = vec!["-DUSE_DPP=0".to_owned()];
    let on = vec!["-DUSE_DPP=1".to_owned()];
    let job = |headers: &'static [(String, Vec<u8>)], defines: &'static [String], front_end| Job {
        name: "MIOpenBatchNormTest.cpp",
        text: kernel,
        lang: Lang::Hip,
        headers,
        arch: "gfx1030",
        defines,
        front_end,
        code_of: None,
    };
    let (before, after, off, on): (&'static _, &'static _, &'static _, &'static _) = (
        Box::leak(Box::new(before)),
        Box::leak(Box::new(after)),
        Box::leak(Box::new(off)),
        Box::leak(Box::new(on)),
    );
    let fronts = child
        .compile_all(&[
            job(before, off, true),
            job(after, off, true),
            job(before, on, true),
            job(after, on, true),
        ])
        .expect("apt-get install libamd-comgr2 libamdhip64-5");
    let digest = |c: &Compiled| match c {
        Compiled::Object(d) => Ok(String::from_utf8_lossy(d).into_owned()),
        Compiled::Failed(log) => Err(log.clone()),
    };
    match digest(&fronts[0]) {
        Err(log) => {
            // This hipRTC cannot stop there: said, and every such case is
            // compiled to code by the proof, whose answers still compare.
            assert!(log.starts_with(NO_FRONT_END), "{log}");
            assert!(log.contains("has no hiprtcGetBitcode"), "{log}");
            let version = child.hiprtc_version.get().expect("hipRTC said its version");
            assert!(version < (5, 3), "{version:?}: {log}");
            let code = child
                .compile_all(&[job(before, off, false), job(after, off, false)])
                .unwrap();
            assert_eq!(digest(&code[0]).unwrap(), digest(&code[1]).unwrap());
        }
        Ok(unchanged) => {
            // The edit in a branch the control never takes: the same text.
            assert_eq!(Ok(unchanged), digest(&fronts[1]));
            // The branch taken: another text, compiled to code by the proof.
            let (was, is) = (digest(&fronts[2]).unwrap(), digest(&fronts[3]).unwrap());
            assert_ne!(was, is);
        }
    }
}
