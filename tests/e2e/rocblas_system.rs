//! rocBLAS's system route (issue 63): a torch built against a system ROCm
//! loads the system's librocblas (here dpkg's, laid out as Debian's, with
//! its Tensile files in rocblas/4.4.1/library) through libtorch_hip.so's
//! RUNPATH. install adds the build as a copy in torch/lib with its Tensile
//! directory beside it and `$ORIGIN` first in libtorch_hip.so's run path;
//! the system's files are only read, and rollback takes every file out.

use std::path::{Path, PathBuf};

use rdna1_testkit::fat_library_linking;

use crate::rocblas::stderr_is;
use crate::rocblas_swap::{bytes_of, same_tree};
use crate::support::{Run, Sandbox, copy_dir, gpus};
use crate::system_route::{SystemTorch, patchelf};

/// A torch for gfx1010 and gfx1012 on the system's MIOpen and rocBLAS,
/// the latter Debian's shape, dpkg's; the fixture's rocBLAS build in
/// `<root>/rocblas`.
pub(crate) struct BlasSystem {
    pub st: SystemTorch,
    /// The system's librocblas file.
    pub real: PathBuf,
    pub prefix: PathBuf,
}

impl BlasSystem {
    pub fn new(sb: &Sandbox) -> BlasSystem {
        sb.set_gpus(gpus("rx5500xt-gfx1012"));
        let st = SystemTorch::new(sb, false);
        let code = crate::glance::debian_code(&crate::support::runtime().join("torch/lib"));
        let real = st.sys.join("librocblas.so.4.4.1");
        std::fs::copy(code.join("rocblas/librocblas.so"), &real).unwrap();
        patchelf(&["--set-soname", "librocblas.so.4"], &real);
        std::os::unix::fs::symlink("librocblas.so.4.4.1", st.sys.join("librocblas.so.4")).unwrap();
        std::os::unix::fs::symlink("librocblas.so.4", st.sys.join("librocblas.so")).unwrap();
        let tensile = st.sys.join("rocblas/4.4.1/library");
        rdna1_testkit::debian_tensile(&tensile, code);
        let s = st.sys.display().to_string();
        let rpath = format!("-Wl,-rpath,{s}");
        let built = fat_library_linking(
            &sb.root,
            &["gfx1010", "gfx1012"],
            &["-L", &s, "-lrocblas", "-lMIOpen", "-lamdhip64", &rpath],
        );
        std::fs::copy(built, st.hip()).unwrap();
        let mut owned = vec![real.clone(), st.sys.join("librocblas.so.4")];
        owned.extend(
            std::fs::read_dir(&tensile)
                .unwrap()
                .map(|e| e.unwrap().path()),
        );
        let owned: Vec<&Path> = owned.iter().map(PathBuf::as_path).collect();
        st.own("librocblas4", &owned);
        let prefix = sb.root.join("rocblas");
        copy_dir(crate::rocblas_swap::built(), &prefix);
        BlasSystem { st, real, prefix }
    }

    pub fn install(&self, sb: &Sandbox, extra: &[&str]) -> Run {
        let (p, s) = (self.prefix.display().to_string(), sb.state());
        let mut args = vec![
            "install",
            "rocblas",
            "--into-torch",
            "--prefix",
            &p,
            "--state-dir",
            &s,
            "--python",
            "python3",
        ];
        args.extend(extra);
        self.st.run(sb, &args)
    }
}

#[test]
fn a_torch_on_the_systems_rocblas_gets_a_copy_beside_it_and_gives_it_back() {
    let sb = Sandbox::new();
    let b = BlasSystem::new(&sb);
    let lib = &b.st.torch.lib;
    let torch_before = bytes_of(&b.st.torch.dir);
    let system_before = bytes_of(&b.st.sys);
    let (l, s, p) = (
        lib.display().to_string(),
        b.st.sys.display().to_string(),
        b.prefix.display().to_string(),
    );
    assert!(
        sb.maps_after_import()
            .contains(&b.real.display().to_string())
    );

    let dry = b.install(&sb, &["--dry-run"]).ok();
    assert_eq!(
        dry.stdout.trim_end(),
        format!(
            "     Route would install the rocBLAS build in {p} (profile rocblas-mini, ROCm 6.4.4, for gfx1012) into torch 2.9.1+rocm6.4 at {t}: beside the system's {s}/librocblas.so.4.4.1 (the dpkg package librocblas4), which is only read: a copy as {l}/librocblas.so.4 with its Tensile directory {l}/rocblas/library; libtorch_hip.so's RUNPATH {s} does not search torch/lib first: the copy goes there and the RUNPATH gains $ORIGIN ahead (patchelf, journaled); `rdna1-patch rollback --state-dir {state}` puts every file back (dry run: nothing was changed)",
            t = b.st.torch.dir.display(),
            state = sb.state()
        )
    );
    same_tree(
        "torch after the dry run",
        &torch_before,
        &bytes_of(&b.st.torch.dir),
    );

    let run = b.install(&sb, &[]).ok();
    stderr_is(
        &run,
        &format!(
            "     Build {p}/lib/librocblas.so.4 (rocblas_6.4.4.orig.tar.gz sha256 [..] at rocblas-mini, ROCm 6.4.4), MD5SUMS ok
   Checked lib/librocblas.so.4: code for gfx1012; lib/rocblas/library: 3 code-object file(s), all for gfx1012; TensileLibrary_lazy_gfx1012.dat and the 4 file(s) it names
     Torch {t} 2.9.1+rocm6.4 (HIP 6.4.43484-123eb5128, the system's MIOpen), rocBLAS: the system's {s}/librocblas.so.4.4.1
     Route libtorch_hip.so's RUNPATH {s} does not search torch/lib first: the copy goes there and the RUNPATH gains $ORIGIN ahead (patchelf, journaled)
           the system's {s}/librocblas.so.4.4.1 (the dpkg package librocblas4) is only read; the copy's run path is {s}
 Installed {l}/librocblas.so.4 and {l}/rocblas/library (6 Tensile files) (transaction 1): added beside the system's {s}/librocblas.so.4.4.1, which is unchanged; libtorch_hip.so's run path {s} -> $ORIGIN:{s}
           nothing of torch's or the system's was replaced; `rdna1-patch rollback[..]` puts every file back",
            t = b.st.torch.dir.display()
        ),
    );
    // torch maps the copy, whose Tensile directory is the build's.
    let maps = sb.maps_after_import();
    assert!(maps.contains(&format!("{l}/librocblas.so.4")), "{maps}");
    assert!(!maps.contains(&b.real.display().to_string()), "{maps}");
    same_tree(
        "torch's new Tensile directory and the build's",
        &bytes_of(&b.prefix.join("lib/rocblas/library")),
        &bytes_of(&lib.join("rocblas/library")),
    );
    same_tree("the system's files", &system_before, &bytes_of(&b.st.sys));
    let status =
        b.st.run(&sb, &["status", "--detail", "--state-dir", &sb.state()])
            .ok();
    status.prints(&format!(
        "installed:  {l}/librocblas.so.4 and {l}/rocblas/library (6 files), rocBLAS (transaction 1, "
    ));
    status.prints(&format!(
        "            system route: a rocBLAS build beside {s}/librocblas.so.4.4.1 (dpkg librocblas4), which is only read; libtorch_hip.so run path {s} -> $ORIGIN:{s}"
    ));
    b.install(&sb, &[])
        .ok()
        .says("already holds this rocBLAS (transaction 1,");

    let back =
        b.st.run(&sb, &["rollback", "--state-dir", &sb.state()])
            .ok();
    stderr_is(
        &back,
        &format!(
            "  Restored transaction 1: took the rocBLAS copy {l}/librocblas.so.4 and {l}/rocblas/library out, {l}/libtorch_hip.so is the original again (MD5 [..]); torch loads the system's {s}/librocblas.so.4.4.1 again"
        ),
    );
    same_tree(
        "torch after rollback",
        &torch_before,
        &bytes_of(&b.st.torch.dir),
    );
    same_tree("the system's files", &system_before, &bytes_of(&b.st.sys));
    assert!(
        sb.maps_after_import()
            .contains(&b.real.display().to_string())
    );
}

/// The fix doctor gives a torch its user built, whose rocBLAS has no code
/// for the RX 5500 XT's gfx1012.
pub(crate) const BUILD_ROUTE: &str = "                fix: build rocBLAS for gfx1012 with its Tensile kernels, about 25 minutes on 2 cores for one card (more for each further card), and put it under this torch as one reversible transaction: `rdna1-patch build rocblas --profile rocm-6.4.3[..]`, then `rdna1-patch install rocblas --into-torch[..]`";

/// The `library`/`tensile` rows of rocBLAS in `doctor`'s whole report,
/// each with its detail lines.
pub(crate) fn rocblas_rows(report: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in report.lines() {
        let row = l
            .get(..6)
            .is_some_and(|h| h.trim_end().len() == h.trim().len() && !h.starts_with(' '));
        if row {
            let name = l.get(6..16).unwrap_or_default().trim();
            inside = (name == "library" && l.contains("librocblas"))
                || (name == "tensile" && l.contains("rocBLAS's"));
        }
        if inside
            && !l.starts_with("                catalogues read")
            && !l.starts_with("                targets:")
        {
            out.push(l.to_owned());
        }
    }
    out
}

/// Every line of `got` matches `want`'s, `[..]` any text.
#[track_caller]
pub(crate) fn rows_are(got: &[String], want: &[String]) {
    let same = got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| crate::support::line_matches(w, g));
    assert!(
        same,
        "rows differ\nexpected:\n{}\ngot:\n{}",
        want.join("\n"),
        got.join("\n")
    );
}

/// doctor over a torch its user built on Debian's rocBLAS (gfx1012 is not
/// among its ten targets): both rows FAIL with this route as their fix, its
/// time from the profile's cost; after the install, both are ok and say by
/// which transaction, and the verdict no longer names them.
#[test]
fn doctor_names_the_rocblas_build_for_a_self_built_torch_and_is_ok_after_it() {
    let sb = Sandbox::new();
    let b = BlasSystem::new(&sb);
    let s = b.st.sys.display().to_string();
    let state = sb.state();
    let doctor = || {
        b.st.run(
            &sb,
            &[
                "doctor",
                "--detail",
                "--state-dir",
                &state,
                "--python",
                "python3",
            ],
        )
    };
    let before = doctor().check_fails();
    assert!(
        // What breaks, said (every matmul), and the plan's count and first
        // step: rocBLAS's build, MIOpen's fix not waiting for it.
        crate::support_run::line_matches(
            "verdict: torch 2.9.1+rocm6.4 on gfx1012: problems to fix: batch-norm training: 2 kernels fail for gfx1012; `rdna1-patch install --into-torch[..]` fixes them; every matmul fails on gfx1012 (mm, bmm, linear, addmm, einsum, MIOpen's GEMM convolutions): rocBLAS has no code for gfx1012; rocBLAS for gfx1012 (see library); rocBLAS's Tensile kernels: none for gfx1012 (see tensile); 2 steps, first rocBLAS for gfx1012 (see route)",
            before.stdout.lines().next().unwrap_or_default()
        ),
        "{}",
        before.stdout
    );
    let therock = "                TheRock builds rocBLAS for gfx1010, gfx1011 and gfx1012 (TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce)";
    rows_are(
        &rocblas_rows(&before.stdout),
        &[
            format!("FAIL  library   librocblas.so.4 at {s} has code for 10 targets, none for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail"),
            therock.to_owned(),
            BUILD_ROUTE.to_owned(),
            format!("FAIL  tensile   rocBLAS's Tensile directory {s}/rocblas/4.4.1/library has no kernels for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail"),
            "                54 catalogue(s), 10 code-object file(s); for gfx1012: 0 code-object file(s), 54 generic catalogue(s)".to_owned(),
            therock.to_owned(),
            BUILD_ROUTE.to_owned(),
        ],
    );
    b.install(&sb, &[]).ok();
    let after = doctor().check_fails();
    assert!(
        crate::support_run::line_matches(
            "verdict: torch 2.9.1+rocm6.4 on gfx1012: 1 problem to fix: batch-norm training: 2 kernels fail for gfx1012; `rdna1-patch install --into-torch[..]` fixes them",
            after.stdout.lines().next().unwrap_or_default()
        ),
        "{}",
        after.stdout
    );
    let l = b.st.torch.lib.display().to_string();
    rows_are(
        &rocblas_rows(&after.stdout),
        &[
            format!("ok    library   librocblas.so.4 at {l} has code for gfx1012: gfx1012 (the card's) among them, fixed by transaction 1 of [..]"),
            format!("ok    tensile   rocBLAS's Tensile directory {l}/rocblas/library has kernels for gfx1012 (the card's), fixed by transaction 1 of [..]"),
            "                3 catalogue(s), 3 code-object file(s); for gfx1012: 3 code-object file(s), 2 catalogue(s) named for it and 1 generic".to_owned(),
        ],
    );
    // Rolled back, the rows fail again with the same route.
    b.st.run(&sb, &["rollback", "--state-dir", &state]).ok();
    let again = doctor().check_fails();
    assert_eq!(rocblas_rows(&again.stdout), rocblas_rows(&before.stdout));
}
