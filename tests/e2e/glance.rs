//! Rows one glance long (issue 64 part 4): every line doctor, verify and
//! status print is at most 160 characters without `--detail`, over a
//! torch shaped like Debian's: a librocblas with code for ten targets and
//! none for the card (gfx1012), its Tensile directory with 54 generic
//! `*_fallback.dat` catalogues and code objects for the same ten targets,
//! and torch's MIOpen with its batch-norm kernels. `--detail` and the
//! JSON keep every row whole.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::answer::{doctor, lines_are};
use crate::in_place::{HIP64, install};
use crate::support::{FakeTorch, Sandbox};

/// The longest line a person reads (`GLANCE` in src/inspect/glance.rs).
const GLANCE: usize = 160;

/// The GPU code, built once per run ([`rdna1_testkit::debian_code`]).
pub(crate) fn debian_code(torch_lib: &Path) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        rdna1_testkit::debian_code(
            &Path::new(env!("CARGO_TARGET_TMPDIR")).join("glance"),
            torch_lib,
        )
    })
}

/// An RX 5500 XT (gfx1012) and a torch for gfx1010 and gfx1012 whose
/// rocBLAS is laid out as Debian's.
fn debian_torch() -> Sandbox {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx5500xt-gfx1012"));
    debian_torch_in(&sb, "2.6.0+rocm6.4");
    sb
}

/// In `sb`, a torch `version` (ROCm 6.4) for gfx1010 and gfx1012 that
/// bundles a rocBLAS laid out as Debian's: librocblas.so with code for ten
/// targets, none gfx1012, and torch/lib/rocblas/library with 54 generic
/// catalogues and a code object per target.
pub(crate) fn debian_torch_in(sb: &Sandbox, version: &str) -> FakeTorch {
    debian_torch_at(sb, "site", version)
}

/// As [`debian_torch_in`], in `<root>/<site>`.
pub(crate) fn debian_torch_at(sb: &Sandbox, site: &str, version: &str) -> FakeTorch {
    let torch = crate::in_place::torch_in(sb, site, version, HIP64, &["gfx1010", "gfx1012"]);
    rdna1_testkit::bundle_debian_rocblas(&torch.lib, debian_code(&torch.lib));
    torch
}

/// Every line of `out` fits in a glance.
#[track_caller]
fn one_glance(what: &str, out: &str) {
    // A whole command is the one thing a glance does not cut: a line is
    // long only by what it says besides its command.
    let long: Vec<&str> = out
        .lines()
        .filter(|l| rdna1_testkit::besides_commands(l) > GLANCE)
        .collect();
    assert!(
        long.is_empty(),
        "{what}: {} line(s) over {GLANCE} characters:\n{}\nwhole output:\n{out}",
        long.len(),
        long.join("\n")
    );
}

/// doctor, verify and status over Debian's shape, before and after the
/// fix: no line over 160 characters, the tensile row with counts, the fix
/// the exact command for gfx1012, detail lines indented under their row;
/// `--detail` and the JSON keep the catalogues by name. On 05ebd98 the
/// tensile row alone was 4.4 KB, listing all 54 catalogues.
#[test]
fn every_row_of_doctor_verify_and_status_fits_a_glance() {
    let sb = debian_torch();
    let before = doctor(&sb, &[]).check_fails();
    lines_are(
        &before.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1012: problems to fix: batch-norm training: 2 kernels fail for gfx1012;",
            "         `rdna1-patch install --into-torch --state-dir [..]/state --profile rocm-6.4.3` fixes them; every matmul fails on gfx1012 (mm, bmm, linear,",
            "         addmm, einsum, MIOpen's GEMM convolutions): rocBLAS has no code for gfx1012; rocBLAS for gfx1012 (see library); rocBLAS's Tensile kernels: none for",
            "         gfx1012 (see tensile); 2 steps, first rocBLAS for gfx1012 (see route)",
            "ok    torch     2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) at [..]/site/torch, found by python3 (--python); torch/lib: torch loads …",
            "ok    route     in place, no build: `rdna1-patch install --into-torch --state-dir [..]/state --profile rocm-6.4.3` (MIOpen sees the real chip: …",
            "                step 1 of 2: rocBLAS for gfx1012: `rdna1-patch build rocblas --profile rocm-6.4.3`, then `rdna1-patch install rocblas --into-torch --state-dir [..]/state --profile rocm-6.4.3` …",
            "                step 2 of 2: MIOpen's batch-norm fix for gfx1012: `rdna1-patch install --into-torch --state-dir [..]/state --profile rocm-6.4.3` …",
            "FAIL  kernels   2 of 2 batch-norm kernels of torch/lib/libMIOpen.so fail for gfx1012 (the card in this machine), through comgr 2.4 …",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1012",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for …",
            "                fix: MIOpen's batch-norm fix for gfx1012: `rdna1-patch install --into-torch --state-dir [..]/state --profile rocm-6.4.3` (seconds, in",
            "                place, proven by compiling before anything is written; fixes batch-norm training on gfx1012)",
            "ok    torch-gpu torch/lib/libtorch_hip.so has code for gfx1010, gfx1012",
            "ok    gpu       gfx1012 Navi 14 (RX 5500 series) at 0000:0a:00.0 (node 1, gfx_target_version 100102): RDNA1, what this tool is for",
            "ok    amdgpu    noretry=-1 mtype_local=-1 vm_fragment_size=4294967295",
            "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
            "FAIL  library   librocblas.so at torch/lib has code for 10 targets, none for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's …",
            "                targets: gfx1010, gfx1030, gfx1031, gfx1032, gfx1034, gfx803, gfx900, gfx906, gfx908, gfx90a",
            "                TheRock builds rocBLAS for gfx1010, gfx1011 and gfx1012 (TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce)",
            "                fix: build rocBLAS for gfx1012 with its Tensile kernels, about 25 minutes on 2 cores for one card (more for each further card), and put it under",
            "                this torch as one reversible transaction: `rdna1-patch build rocblas --profile rocm-6.4.3`, then",
            "                `rdna1-patch install rocblas --into-torch --state-dir [..]/state --profile rocm-6.4.3`; or, in place of this torch, TheRock's torch",
            "                for gfx1012 (a download of about 4 GB, no build):",
            "                `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1012]\" \"torchvision[device-gfx1012]\"`, then run this",
            "                again",
            "FAIL  tensile   rocBLAS's Tensile directory torch/lib/rocblas/library has no kernels for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) …",
            "                54 catalogue(s), 10 code-object file(s); for gfx1012: 0 code-object file(s), 54 generic catalogue(s)",
            "                catalogues read for gfx1012: TensileLibrary_Type_4xi8I_Contraction_l_Ailk_Bjlk_Cijk_Dijk_1_fallback.dat, …",
            "                TheRock builds rocBLAS for gfx1010, gfx1011 and gfx1012 (TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce)",
            "                fix: build rocBLAS for gfx1012 with its Tensile kernels, about 25 minutes on 2 cores for one card (more for each further card), and put it under",
            "                this torch as one reversible transaction: `rdna1-patch build rocblas --profile rocm-6.4.3`, then",
            "                `rdna1-patch install rocblas --into-torch --state-dir [..]/state --profile rocm-6.4.3`; or, in place of this torch, TheRock's torch",
            "                for gfx1012 (a download of about 4 GB, no build):",
            "                `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1012]\" \"torchvision[device-gfx1012]\"`, then run this",
            "                again",
        ],
    );
    one_glance("doctor", &before.stdout);
    let detail = doctor(&sb, &["--detail"]).check_fails();
    assert!(
        detail.stdout.contains(
            "TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_HPA_Cijk_Dijk_4_fallback.dat"
        ),
        "{}",
        detail.stdout
    );
    let json: serde_json::Value = serde_json::from_str(&doctor(&sb, &["--json"]).stdout).unwrap();
    let tensile = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "tensile")
        .unwrap();
    assert!(
        tensile["detail"].as_str().unwrap().contains(
            "TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_HPA_Cijk_Dijk_4_fallback.dat"
        ),
        "{tensile}"
    );
    one_glance("doctor --all", &doctor(&sb, &["--all"]).stdout);
    one_glance(
        "verify --compile",
        &sb.run_with_state(&["verify", "--compile"], &[]).stdout,
    );
    install(&sb, &[]).ok();
    let after = doctor(&sb, &[]);
    one_glance("doctor after the fix", &after.stdout);
    let route = after
        .stdout
        .lines()
        .find(|l| l.starts_with("ok    route"))
        .unwrap();
    assert!(
        crate::support_run::line_matches(
            "ok    route     fixed in place by transaction 1 of [..]: MIOpen sees the real chip (libtorch_hip.so has code for gfx1010, gfx1012)",
            route
        ),
        "{route}"
    );
    for args in [&["verify"][..], &["verify", "--compile"], &["status"]] {
        one_glance(&args.join(" "), &sb.run_with_state(args, &[]).stdout);
    }
}

/// A torch deep in an environment under home, as conda makes them
/// (`~/miniconda3/envs/NAME/lib/python3.X/site-packages/torch`), found by
/// that environment's python: at a glance the paths lose their middle
/// but keep the environment's name and the file's (issue 70:
/// `~/miniconda3/envs/NAME/…/torch`, the python in that environment then
/// `~/miniconda3/…/python`), and which python; `--detail` and the JSON
/// keep them whole. On 345998d the torch row was cut inside the torch's
/// own path.
#[test]
fn a_deep_torch_path_keeps_what_matters_at_a_glance() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let env = sb
        .root
        .join("home/miniconda3/envs/a-rather-long-environment-name");
    rdna1_testkit::run(
        Command::new(crate::support::tools().join("python3"))
            .args(["-m", "venv"])
            .arg(&env),
    );
    let python = env.join("bin/python");
    let purelib = rdna1_testkit::run(Command::new(&python).args([
        "-c",
        "import sysconfig; print(sysconfig.get_path('purelib'))",
    ]));
    let purelib = PathBuf::from(String::from_utf8(purelib.stdout).unwrap().trim());
    let torch = rdna1_testkit::FakeTorch::native(
        &purelib,
        crate::support::runtime(),
        &sb.root,
        "2.6.0+rocm6.4",
        crate::in_place::HIP64,
        &["gfx1010"],
    );
    let py = python.display().to_string();
    let state = sb.state();
    let doctor = |extra: &[&str]| {
        let mut args = vec!["doctor", "--profile", "rocm-6.4.3", "--python", &py];
        args.extend(["--state-dir", &state]);
        args.extend(extra);
        sb.run(&args)
    };
    let run = doctor(&[]).check_fails();
    // The command carries the --python given (src/shell.rs), whole: the
    // verdict and the fix put it on a line of its own.
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1010: 1 problem to fix: batch-norm training: 2 kernels fail for gfx1010;",
            "         `rdna1-patch install --into-torch --python [..]/home/miniconda3/envs/a-rather-long-environment-name/bin/python --state-dir [..]/state --profile rocm-6.4.3`",
            "         fixes them",
            "ok    torch     2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) at ~/miniconda3/envs/a-rather-long-environment-name/…/torch, found by ~/miniconda3/…/python …",
            "ok    route     in place, no build: `rdna1-patch install --into-torch --python [..]/bin/python --state-dir [..]/state --profile rocm-6.4.3` …",
            "FAIL  kernels   2 of 2 batch-norm kernels of torch/lib/libMIOpen.so fail for gfx1010 (the card in this machine), through comgr 2.4 …",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1010",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for …",
            "                fix: MIOpen's batch-norm fix for gfx1010:",
            "                `rdna1-patch install --into-torch --python ~/miniconda3/envs/a-rather-long-environment-name/bin/python --state-dir [..]/state --profile rocm-6.4.3`",
            "                (seconds, in place, proven by compiling before anything is written; fixes batch-norm training on gfx1010)",
            "ok    torch-gpu torch/lib/libtorch_hip.so has code for gfx1010",
            "ok    gpu       gfx1010 Navi 10 (RX 5600/5700 series) at 0000:03:00.0 (node 1, gfx_target_version 100100): RDNA1, what this tool is for",
            "ok    amdgpu    noretry=-1 mtype_local=-1 vm_fragment_size=4294967295",
            "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
        ],
    );
    let whole = format!(
        "at {}, found by {py} (--python); torch/lib: torch loads {}",
        torch.dir.display(),
        torch.miopen().display()
    );
    let detail = doctor(&["--detail"]);
    assert!(detail.stdout.contains(&whole), "{}", detail.stdout);
    let json: serde_json::Value = serde_json::from_str(&doctor(&["--json"]).stdout).unwrap();
    assert!(
        json["checks"][0]["detail"]
            .as_str()
            .unwrap()
            .contains(&whole),
        "{json}"
    );
    // verify and status name the same paths, each row in a glance.
    let verify = sb.run_with_state(&["verify", "--compile", "--python", &py], &[]);
    one_glance("verify --compile", &verify.stdout);
    lines_are(
        &verify.stdout,
        &[
            "verdict: 1 problem to fix: batch-norm training: 2 kernels fail for gfx1010;",
            "         `rdna1-patch install --into-torch --python [..]/miniconda3/envs/a-rather-long-environment-name/bin/python --state-dir [..]`",
            "         fixes them",
            "skip  prefix    [..]",
            "ok    layout    torch/lib: torch loads ~/miniconda3/envs/a-rather-long-environment-name/lib/python3.[..]/site-packages/torch/lib/libMIOpen.so",
            "FAIL  kernels   2 of 2 batch-norm kernels judged do not compile for gfx1010 through comgr 2.4 (~/miniconda3/…/libamd_comgr.so.2):",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm)",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm)",
            "                fix: MIOpen's batch-norm fix for gfx1010:",
            "                `rdna1-patch install --into-torch --python ~/miniconda3/envs/a-rather-long-environment-name/bin/python --state-dir [..]`",
            "                (seconds, in place, proven by compiling before anything is written; fixes batch-norm training on gfx1010)",
        ],
    );
    install(&sb, &["--python", &py]).ok();
    one_glance("doctor after the fix", &doctor(&[]).ok().stdout);
    for args in [&["verify"][..], &["status"]] {
        one_glance(&args.join(" "), &sb.run_with_state(args, &[]).stdout);
    }
}

/// A torch in a conda environment off PATH (`~/miniconda3/envs/rocm-torch`),
/// found by that environment's python: at a glance the torch row keeps
/// the environment's name, the one part a user needs, and the file's
/// name. On 84ed257 it read `~/miniconda3/…/site-packages/torch, found by
/// ~/miniconda3/…/bin/python`.
#[test]
fn a_conda_environments_name_is_kept_in_the_torch_row() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let env = "home/miniconda3/envs/rocm-torch";
    let site = format!("{env}/lib/python3.11/site-packages");
    crate::in_place::torch_in(&sb, &site, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let bin = sb.root.join(env).join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(crate::support::tools().join("python3"), bin.join("python"))
        .unwrap();
    let python = bin.join("python").display().to_string();
    let state = sb.state();
    let mut c = sb.cmd();
    c.args([
        "doctor",
        "--profile",
        "rocm-6.4.3",
        "--python",
        &python,
        "--state-dir",
        &state,
    ])
    .env("PYTHONPATH", sb.root.join(&site));
    let run = crate::support_run::Run::from(c.output().unwrap());
    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("ok    torch "))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert_eq!(
        row,
        "ok    torch     2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) at ~/miniconda3/envs/rocm-torch/…/torch, found by ~/miniconda3/…/python (--python); torch/lib: torch …",
        "{}",
        run.stdout
    );
    one_glance("doctor in a conda environment", &run.stdout);
}
