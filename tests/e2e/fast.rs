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
            format!("Diagnosis 3 of 3 batch-norm kernels of TORCH/lib/libMIOpen.so fail for gfx1010 (no GPU visible: judged for gfx1010), {through} ([..] s)"),
            format!("Proven 3 batch-norm kernels compile for gfx1010, gfx1011, gfx1012 (no GPU visible: every RDNA1 target) in every case; for gfx1030: the same code as before wherever it compiled before; {through} ([..])"),
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

/// Debian's comgr in a child of the binary, its answers kept in `cache`
/// (`compiler::Child::remember`), as the diagnosis keeps them.
fn cached_child(cache: &std::path::Path) -> rdna1_patch::compiler::Child {
    use crate::diagnosis::DEBIAN_COMGR;
    let mut c =
        rdna1_patch::compiler::Child::new(DEBIAN_COMGR.into(), std::time::Duration::from_secs(300))
            .unwrap();
    c.exe = crate::support::BIN.into();
    c.remember(
        rdna1_patch::cache::Cache::at(cache.to_owned()),
        "debian-comgr".into(),
    );
    c
}

/// A library of two kernels: the stock forward kernel's text, and a
/// second whose text is `second` of it.
fn two_kernels(dir: &std::path::Path, second: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let stock = std::fs::read(variant("stock")).unwrap();
    let fwd = rdna1_patch::verdict::kernels(&stock)
        .unwrap()
        .into_iter()
        .find(|k| k.name == "MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL")
        .unwrap();
    let text = stock[fwd.range.clone()].to_vec();
    let texts = [
        (fwd.name.clone(), text.clone()),
        (format!("{}TWIN", fwd.name), second(&text)),
    ];
    std::fs::create_dir_all(dir).unwrap();
    let lib = dir.join("libMIOpen.so");
    crate::texts::miopen_embedding(dir, &lib, &texts);
    std::fs::read(lib).unwrap()
}

/// The second kernel [`two_kernels`] makes: the first's text under another name.
const TWIN: &str = "MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIALTWIN";

/// Where [`TWIN`]'s text lies in `lib`.
fn twin_range(lib: &[u8]) -> std::ops::Range<usize> {
    rdna1_patch::verdict::kernels(lib)
        .unwrap()
        .into_iter()
        .find(|k| k.name == TWIN)
        .unwrap()
        .range
}

/// `text` with `from` replaced by `to` (same length) once.
fn edited(text: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = memchr::memmem::find(text, from.as_bytes()).unwrap_or_else(|| panic!("no {from}"));
    let mut t = text.to_vec();
    t[at..at + to.len()].copy_from_slice(to.as_bytes());
    t
}

/// One compile for identical inputs, and the compile cache, give the very
/// verdicts and proof of compiling each case in process: for a library
/// whose two kernels key to one input (one text twice), one whose
/// kernels differ only by a comment (two inputs, one front end), and the
/// stock one. The children compile each distinct input once, and each
/// distinct front end to code once; run again with the same cache, they
/// compile nothing and answer alike.
#[test]
fn a_deduplicated_or_cached_compile_gives_the_verdicts_and_proof_of_each_case() {
    use rdna1_patch::embedded;
    use rdna1_patch::verdict::{self, RDNA1};
    let in_process =
        rdna1_patch::comgr::Comgr::open(std::path::Path::new(crate::diagnosis::DEBIAN_COMGR))
            .expect("apt-get install libamd-comgr2 libclang-common-15-dev");
    let dir = tempfile::tempdir().unwrap();
    let same = two_kernels(&dir.path().join("same"), |t| t.to_vec());
    let differ = two_kernels(&dir.path().join("differ"), |t| {
        let mut t = t.to_vec();
        t.extend_from_slice(b"\n// another input, the same kernel\n");
        t
    });
    let stock = std::fs::read(variant("stock")).unwrap();
    // The compiles asked and run: a front end and a code a kernel, each
    // distinct one run (the stock kernels fail at the DPP reduction,
    // which asks nothing more).
    for (name, lib, asked_ran) in [
        // One text twice: one front end, one code.
        ("same", &same, (4, 2)),
        // Two texts, two front ends; the comment gone, one IR: one code.
        ("differ", &differ, (4, 3)),
        ("stock", &stock, (4, 4)),
    ] {
        let mut one = verdict::judge(&in_process, lib, "gfx1010").unwrap();
        one.compiler.clear();
        // The children keep the assembler's stderr and skip the blanked
        // compiles in process needs: the compile counts are their own.
        one.compiles = 0;
        let fixed = match embedded::fix(lib).unwrap() {
            embedded::Fix::Fixed { bytes, .. } => bytes,
            embedded::Fix::Refused(r) => panic!("{name}: {r}"),
        };
        let mut proof = verdict::prove(&in_process, lib, &fixed, &RDNA1)
            .unwrap()
            .unwrap();
        proof.compiles = 0;
        let cache = dir.path().join(format!("cache-{name}"));
        for round in 0..2 {
            let c = cached_child(&cache);
            let mut many = verdict::judge(&c, lib, "gfx1010").unwrap();
            many.compiler.clear();
            let asked = std::mem::take(&mut many.compiles);
            assert_eq!(one, many, "{name}, round {round}");
            let ran = c.ran.get();
            match round {
                0 => assert_eq!((asked, ran), asked_ran, "{name}"),
                _ => assert_eq!(ran, 0, "{name}: every answer kept"),
            }
            // The proof after the diagnosis, as install makes it: the same
            // proof, the diagnosis's compiles not run again.
            let mut again = verdict::prove(&c, lib, &fixed, &RDNA1).unwrap().unwrap();
            again.compiles = 0;
            assert_eq!(proof, again, "{name}, round {round}");
            if round == 1 {
                assert_eq!(c.ran.get(), 0, "{name}: the proof kept too");
            }
        }
    }
}

/// The proof reusing the diagnosis's compiles still refuses a fix that
/// breaks a case, and one that changes gfx1030's code, with the kernel
/// and the case named.
#[test]
fn the_proof_after_a_cached_diagnosis_still_refuses_a_broken_fix() {
    use rdna1_patch::embedded;
    use rdna1_patch::verdict::{self, RDNA1};
    let dir = tempfile::tempdir().unwrap();
    let lib = two_kernels(dir.path(), |t| t.to_vec());
    let fixed = match embedded::fix(&lib).unwrap() {
        embedded::Fix::Fixed { bytes, .. } => bytes,
        embedded::Fix::Refused(r) => panic!("{r}"),
    };
    let twin = twin_range(&fixed);
    let spoilt = |from: &str, to: &str| {
        let mut f = fixed.clone();
        let text = edited(&f[twin.clone()], from, to);
        f[twin.clone()].copy_from_slice(&text);
        f
    };
    let c = cached_child(&dir.path().join("cache"));
    verdict::judge(&c, &lib, "gfx1010").unwrap();
    verdict::prove(&c, &lib, &fixed, &RDNA1).unwrap().unwrap();
    // A case broken by the "fix": an undeclared function.
    let broken = verdict::prove(&c, &lib, &spoilt("rsqrt(eps", "rsqrX(eps"), &RDNA1)
        .unwrap()
        .unwrap_err();
    assert!(
        crate::support::line_matches(
            &format!("{TWIN} still fails for gfx1010 after the fix: fp32 NCHW: [..]rsqrX[..]"),
            &broken.to_string()
        ),
        "{broken}"
    );
    // gfx1030's code changed by the "fix": another constant.
    let changed = verdict::prove(&c, &lib, &spoilt("eps + 1.0f", "eps + 2.0f"), &RDNA1)
        .unwrap()
        .unwrap_err();
    assert_eq!(
        changed.to_string(),
        format!(
            "the fix changes the code {TWIN} compiles to for gfx1030 (fp32 NCHW), where it must change nothing"
        )
    );
}

/// The warm path reads no byte of the library for its verdicts: the
/// digest of its kernel texts is believed from the memo of its stamp. A
/// memo of the stock library's stamp that names the portable library's
/// texts gives the portable library's verdicts, known from the cache,
/// though the bytes are stock's (which fail).
#[test]
fn the_warm_diagnosis_reads_no_byte_of_the_library() {
    use std::os::unix::fs::MetadataExt;
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let doctor = || {
        let run = sb.run(&["doctor", "--profile", "rocm-6.4.3", "--python", "python3"]);
        crate::support::check_row(&run.stdout, "kernels").to_owned()
    };
    let memo = |m: &std::fs::Metadata| {
        sb.root
            .join("xdg-cache/rdna1-patch/diagnosis")
            .join(format!(
                "texts{}-{}-{}-{}-{}.{}-{}.{}",
                rdna1_patch::verdict::RULES,
                m.dev(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec()
            ))
    };
    std::fs::remove_file(torch.miopen()).unwrap();
    std::fs::copy(variant("portable"), torch.miopen()).unwrap();
    let portable = doctor();
    assert!(
        crate::support::line_matches(
            "ok    kernels   0 of 2 [..] (4 compiles, 4 of them run, [..] s)",
            &portable
        ),
        "{portable}"
    );
    let portable_texts =
        std::fs::read_to_string(memo(&std::fs::metadata(torch.miopen()).unwrap())).unwrap();
    std::fs::remove_file(torch.miopen()).unwrap();
    std::fs::copy(variant("stock"), torch.miopen()).unwrap();
    let stock = doctor();
    assert!(
        crate::support::line_matches(
            "FAIL  kernels   2 of 2 [..] (4 compiles, 4 of them run, [..] s)",
            &stock
        ),
        "{stock}"
    );
    let m = std::fs::metadata(torch.miopen()).unwrap();
    assert_ne!(std::fs::read_to_string(memo(&m)).unwrap(), portable_texts);
    std::fs::write(memo(&m), &portable_texts).unwrap();
    let warm = doctor();
    assert!(
        crate::support::line_matches(
            "ok    kernels   0 of 2 [..] (known from an earlier diagnosis of these very texts, [..] s)",
            &warm
        ),
        "{warm}"
    );
}

/// A compiler that counts the gfx1030 compiles it is asked for: to code,
/// and of the front end alone.
struct Counting<'a> {
    inner: &'a dyn rdna1_patch::verdict::Compiler,
    code: std::cell::Cell<usize>,
    front: std::cell::Cell<usize>,
}

impl rdna1_patch::verdict::Compiler for Counting<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn compile(
        &self,
        job: &rdna1_patch::verdict::Job,
    ) -> anyhow::Result<rdna1_patch::verdict::Compiled> {
        if job.arch == rdna1_patch::verdict::CONTROL {
            let n = match job.front_end {
                true => &self.front,
                false => &self.code,
            };
            n.set(n.get() + 1);
        }
        self.inner.compile(job)
    }
}

/// The proof compares gfx1030's front ends first: a fix that leaves
/// gfx1030's IR as it was compiles nothing of gfx1030 to code (the same
/// IR, options and target give the same code); one that changes it is
/// compiled to code, before and after, and refused when the code differs.
#[test]
fn the_proof_compiles_to_code_only_where_gfx1030_front_ends_differ() {
    use rdna1_patch::embedded;
    use rdna1_patch::verdict::{self, RDNA1};
    let comgr =
        rdna1_patch::comgr::Comgr::open(std::path::Path::new(crate::diagnosis::DEBIAN_COMGR))
            .expect("apt-get install libamd-comgr2 libclang-common-15-dev");
    let counting = || Counting {
        inner: &comgr,
        code: std::cell::Cell::new(0),
        front: std::cell::Cell::new(0),
    };
    let dir = tempfile::tempdir().unwrap();
    let lib = two_kernels(dir.path(), |t| t.to_vec());
    let fixed = match embedded::fix(&lib).unwrap() {
        embedded::Fix::Fixed { bytes, .. } => bytes,
        embedded::Fix::Refused(r) => panic!("{r}"),
    };
    let c = counting();
    verdict::prove(&c, &lib, &fixed, &RDNA1).unwrap().unwrap();
    assert_eq!(
        (c.front.get(), c.code.get()),
        (4, 0),
        "two kernels, one case"
    );
    // Another constant in the twin: its gfx1030 IR differs, so it is
    // compiled to code, before and after, and the change refused.
    let twin = twin_range(&fixed);
    let mut spoilt = fixed.clone();
    let text = edited(&spoilt[twin.clone()], "eps + 1.0f", "eps + 2.0f");
    spoilt[twin].copy_from_slice(&text);
    let c = counting();
    let refused = verdict::prove(&c, &lib, &spoilt, &RDNA1)
        .unwrap()
        .unwrap_err();
    assert!(
        refused.to_string().starts_with(&format!(
            "the fix changes the code {TWIN} compiles to for gfx1030"
        )),
        "{refused}"
    );
    assert_eq!(
        (c.front.get(), c.code.get()),
        (4, 2),
        "the twin's case, before and after"
    );
}
