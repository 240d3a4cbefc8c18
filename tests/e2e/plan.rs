//! One plan for the machine (issue 70): doctor's first line, its route
//! row, each failing row's fix line and `install --dry-run` give the same
//! ordered steps for every card, and never a step that loops or changes
//! nothing.

use rdna1_testkit::gpus;

use crate::answer::{doctor, lines_are};
use crate::in_place::{install, torch_with_code};
use crate::support::{Sandbox, line_matches, snapshot};

/// TheRock's torch for `devices`, as a fix line says it.
fn torch_line(devices: &[&str]) -> String {
    let extra: Vec<String> = devices.iter().map(|d| format!("device-{d}")).collect();
    let extra = extra.join(",");
    format!(
        "pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[{extra}]\" \"torchvision[{extra}]\""
    )
}

/// Two RDNA1 cards (gfx1010 + gfx1012): with a torch for one of them,
/// either one, the fix is one line naming both devices, and the plan's
/// first step is that torch, with MIOpen's fix after it; with a torch for
/// both, no torch step. On 84ed257 the gfx1010 torch was sent to
/// `torch[device-gfx1012]` and the gfx1012 one to `torch[device-gfx1010]`,
/// for ever.
#[test]
fn two_cards_get_one_torch_line_naming_both() {
    let both = torch_line(&["gfx1010", "gfx1012"]);
    for (has, lacks) in [("gfx1010", "gfx1012"), ("gfx1012", "gfx1010")] {
        let sb = Sandbox::new();
        sb.at_a_glance();
        sb.set_gpus(gpus("two-cards-gfx1010-gfx1012"));
        let torch = torch_with_code(&sb, &[has]);
        let run = doctor(&sb, &["--detail"]).check_fails();
        lines_are(
            &run.stdout,
            &[
                &format!(
                    "verdict: torch 2.6.0+rocm6.4 on gfx1010 + gfx1012: 1 problem to fix: everything: torch has no code for {lacks}; the torch for gfx1010 and gfx1012 first (see torch-gpu); 2 steps, first the torch for gfx1010 and gfx1012 (see route)"
                ),
                "ok    torch     [..]",
                &format!(
                    "skip  route     torch first: libtorch_hip.so has code for {has} and none for {lacks}, so nothing runs there; no MIOpen fix is offered for it"
                ),
                &format!(
                    "                step 1 of 2: the torch for gfx1010 and gfx1012: `{both}` (a download of about 4 GB, no build; fixes torch runs nothing on {lacks})"
                ),
                "                step 2 of 2: after the torch for gfx1010 and gfx1012, run doctor again: MIOpen's batch-norm fix for gfx1010 and gfx1012: `rdna1-patch install --into-torch[..]` (seconds, in place; fixes batch-norm training, where that torch's MIOpen fails it)",
                &format!(
                    "FAIL  torch-gpu [..]/site/torch/lib/libtorch_hip.so has code for {has} and none for {lacks}: torch runs nothing on that card"
                ),
                &format!(
                    "                fix: install the torch built for gfx1010 and gfx1012: `{both}`, then run this again"
                ),
                "ok    gpu       gfx1010 [..]",
                "ok    gpu       gfx1012 [..]",
                "skip  amdgpu    [..]",
                "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
            ],
        );
        // The JSON carries the same steps.
        let json: serde_json::Value =
            serde_json::from_str(&doctor(&sb, &["--json"]).stdout).unwrap();
        let steps = json["plan"]["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2, "{json}");
        assert_eq!(steps[0]["kind"], "torch");
        assert_eq!(steps[0]["cards"], serde_json::json!(["gfx1010", "gfx1012"]));
        assert_eq!(
            steps[0]["commands"][0]["args"].as_array().unwrap()[3..],
            [
                serde_json::json!("torch[device-gfx1010,device-gfx1012]"),
                serde_json::json!("torchvision[device-gfx1010,device-gfx1012]")
            ]
        );
        // install proves nothing for a torch the plan replaces.
        let before = snapshot(&torch.dir);
        let dry = install(&sb, &["--dry-run"]).fails_with(&format!(
            "error: torch 2.6.0+rocm6.4 has no GPU code for {lacks} (libtorch_hip.so has code for {has}): nothing runs on that card, whatever MIOpen does, so no fix is proven or installed; nothing was changed
help: install the torch built for gfx1010 and gfx1012: `{both}`, then run this again"
        ));
        assert!(!dry.stderr.contains("Proven"), "{}", dry.stderr);
        // install rocblas reads the same plan: the same refusal.
        let blas = sb.run_with_state(&["install", "rocblas", "--into-torch", "--dry-run"], &[]);
        assert_eq!((blas.code, &blas.stderr), (dry.code, &dry.stderr));
        assert_eq!(snapshot(&torch.dir), before);
    }
    // A torch for both: no torch step, the in-place fix proven for both.
    let sb = Sandbox::new();
    sb.set_gpus(gpus("two-cards-gfx1010-gfx1012"));
    torch_with_code(&sb, &["gfx1010", "gfx1012"]);
    let run = doctor(&sb, &["--detail"]).check_fails();
    assert!(!run.stdout.contains("torch[device"), "{}", run.stdout);
    let json: serde_json::Value = serde_json::from_str(&doctor(&sb, &["--json"]).stdout).unwrap();
    assert_eq!(json["plan"]["steps"][0]["kind"], "miopen", "{json}");
    assert_eq!(json["plan"]["steps"].as_array().unwrap().len(), 1);
    let dry = install(&sb, &["--dry-run"]).ok();
    dry.says("      Plan step 1 of 1: MIOpen's batch-norm fix for gfx1010 and gfx1012: `rdna1-patch install --into-torch[..]`");
    dry.says(
        "Proven 2 batch-norm kernels compile for gfx1010, gfx1012 (the cards in this machine)",
    );
}

/// Two cards and no torch: the torch for both, in one line, "the cards
/// in this machine", the same commands in the torch row's fix and the
/// plan's first step. On 84ed257: the torch for gfx1010 "(the card in
/// this machine)".
#[test]
fn two_cards_and_no_torch_get_the_torch_for_both() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("two-cards-gfx1010-gfx1012"));
    let run = sb.run(&["doctor", "--detail"]).check_fails();
    let cards = ["gfx1010", "gfx1012"];
    let fix = crate::help_lines::python3_help_for(
        &cards,
        "the cards in this machine",
        false,
        "; or pass the python torch is in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir",
    );
    let step = crate::help_lines::python3_step(&cards, false);
    lines_are(
        &run.stdout,
        &[
            "verdict: 1 problem to fix: torch; 2 steps, first the torch for gfx1010 and gfx1012 (see route)",
            "FAIL  torch     [..]/python3 ([..]) has no torch installed",
            &format!("                fix: {fix}"),
            "skip  route     a torch first: the route (the in-place fix, a build, or nothing to do) is chosen for the torch it is to fix",
            &format!(
                "                step 1 of 2: the torch for gfx1010 and gfx1012: {step} (a download of about 4 GB, no build; fixes no ROCm torch is there)"
            ),
            "                step 2 of 2: after the torch for gfx1010 and gfx1012, run doctor again: MIOpen's batch-norm fix for gfx1010 and gfx1012: `rdna1-patch install --into-torch` (seconds, in place; fixes batch-norm training, where that torch's MIOpen fails it)",
            "ok    gpu       gfx1010 [..]",
            "ok    gpu       gfx1012 [..]",
            "skip  amdgpu    [..]",
            "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
        ],
    );
    assert!(fix.contains(
        "\"torch[device-gfx1010,device-gfx1012]\" \"torchvision[device-gfx1010,device-gfx1012]\""
    ));
}

/// An RX 6800 alone (gfx1030): nothing for this tool. install and its dry
/// run refuse and change no byte of torch, unless a target is asked for;
/// `verify --compile` does not fail; with no torch, no gfx101x torch is
/// proposed. On 84ed257 the dry run said "Proven ... for gfx1010,
/// gfx1011, gfx1012" and install rewrote torch's libMIOpen.so.
#[test]
fn a_machine_with_no_rdna1_card_gets_no_step() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx6800-gfx1030"));
    let want = "error: no RDNA1 card in this machine (gfx1030), so nothing for this tool to fix on it (--target gfx1010 prepares for one); nothing was changed
help: to prepare this torch for an RDNA1 card that is not here, name it: `rdna1-patch install --into-torch --target gfx1010[..]`";
    // No torch: the torch row names no gfx101x torch.
    let run = sb.run(&["doctor"]).check_fails();
    lines_are(
        &run.stdout,
        &[
            "verdict: 1 problem to fix: torch; 1 warning",
            "FAIL  torch     [..]/python3 ([..]) has no torch installed",
            "                fix: this machine has no RDNA1 card (gfx1030), so nothing here is for rdna1-patch to fix: a ROCm torch for it is pytorch.org's (https://pytorch.org/get-started/locally/); to prepare a torch for an RDNA1 card that is not here, `rdna1-patch doctor --target gfx1010[..]`",
            "skip  route     a torch first: the route (the in-place fix, a build, or nothing to do) is chosen for the torch it is to fix",
            "warn  gpu       gfx1030 Navi 21 (RX 6800/6900 series) at 0000:0c:00.0 (node 1, gfx_target_version 100300): not RDNA1 (gfx1010/1011/1012); the patches only change behaviour on RDNA1",
            "skip  amdgpu    [..]",
            "ok    override  HSA_OVERRIDE_GFX_VERSION is not set (no RDNA1 card here needs it)",
        ],
    );
    assert!(!run.stdout.contains("device-gfx101"), "{}", run.stdout);

    let torch = torch_with_code(&sb, &["gfx1010", "gfx1030"]);
    let before = snapshot(&torch.dir);
    install(&sb, &["--dry-run"]).fails_with(want);
    install(&sb, &[]).fails_with(want);
    // install rocblas reads the same plan: nothing for it here either.
    sb.run_with_state(&["install", "rocblas", "--into-torch"], &[])
        .fails_with(&want.replace(
            "`rdna1-patch install --into-torch",
            "`rdna1-patch install rocblas --into-torch",
        ));
    assert_eq!(snapshot(&torch.dir), before, "torch was changed");
    assert!(!sb.prefix.exists(), "a prefix was written");
    let json: serde_json::Value = serde_json::from_str(&doctor(&sb, &["--json"]).stdout).unwrap();
    assert_eq!(json["plan"]["steps"], serde_json::json!([]), "{json}");
    assert!(
        json["plan"]["nothing"]
            .as_str()
            .unwrap()
            .starts_with("no RDNA1 card")
    );

    let v = sb.run_with_state(&["verify", "--compile"], &[]);
    assert!(!v.stdout.contains("FAIL"), "{}", v.stdout);
    v.prints("skip  kernels   not compiled: no RDNA1 card in this machine (gfx1030), so nothing for this tool to fix on it");

    // Asked for a target, it prepares torch for that card.
    install(&sb, &["--dry-run", "--target", "gfx1010"])
        .ok()
        .says(
            "Proven 2 batch-norm kernels compile for gfx1010 (asked with --target) in every case",
        );
    assert_eq!(snapshot(&torch.dir), before);
}

/// HSA_OVERRIDE_GFX_VERSION=10.3.0 on a Navi 12 (gfx1011) with a torch
/// of gfx1010 and gfx1030 code: unset, torch runs nothing on the card, so
/// the override row's fix is the torch for gfx1011, never "unset" alone,
/// and neither the first line nor the dry run promises `install
/// --into-torch`. On 84ed257: "unset HSA_OVERRIDE_GFX_VERSION: ... every
/// patch acts", a FAIL whose fix was `install --into-torch`, and a dry run
/// that refused with exit 2.
#[test]
fn the_override_on_a_card_torch_lacks_gets_the_torch_for_it() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(gpus("pro-v520-gfx1011"));
    let torch = torch_with_code(&sb, &["gfx1010", "gfx1030"]);
    let line = torch_line(&["gfx1011"]);
    let mut args = vec![
        "doctor",
        "--detail",
        "--profile",
        "rocm-6.4.3",
        "--python",
        "python3",
        "--state-dir",
    ];
    let state = sb.state();
    args.push(&state);
    let run = crate::support_run::Run::from(
        sb.cmd()
            .args(&args)
            .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
            .output()
            .unwrap(),
    );
    let fixes = "torch has no code for gfx1011 itself, so it runs only under HSA_OVERRIDE_GFX_VERSION=10.3.0, where MIOpen sees gfx1030 and no fix of this tool acts";
    let after = "after the torch for gfx1011, run doctor again: MIOpen's batch-norm fix for gfx1011: `rdna1-patch install --into-torch[..]` (seconds, in place; fixes batch-norm training, where that torch's MIOpen fails it)";
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1011: no problem found; 2 warnings; 2 steps, first the torch for gfx1011 (see route)",
            "ok    torch     [..]",
            &format!("skip  route     the torch for gfx1011 first: {fixes}"),
            &format!(
                "                step 1 of 2: the torch for gfx1011: `{line}`, then run torch without HSA_OVERRIDE_GFX_VERSION (a download of about 4 GB, no build; fixes {fixes})"
            ),
            &format!("                step 2 of 2: {after}"),
            "warn  kernels   2 of 2 batch-norm kernels of [..]/site/torch/lib/libMIOpen.so fail for gfx1011 (the card in this machine), through comgr 2.4 [..]",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1011",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1011",
            &format!("                fix: {after}"),
            "ok    torch-gpu [..]/site/torch/lib/libtorch_hip.so has code for gfx1010, gfx1030",
            "ok    gpu       gfx1011 Navi 12 (Radeon Pro 5600M/V520) at 0000:03:00.0 (node 1, gfx_target_version 100101): RDNA1, what this tool is for",
            "ok    amdgpu    noretry=-1 mtype_local=-1 vm_fragment_size=4294967295",
            &format!(
                "warn  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 (ROCm reports gfx1030, the card is gfx1011): {fixes}"
            ),
            &format!(
                "                fix: install the torch built for gfx1011: `{line}`, then run this again (then run torch without HSA_OVERRIDE_GFX_VERSION)"
            ),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stdout);
    let before = snapshot(&torch.dir);
    let mut c = sb.cmd();
    c.args([
        "install",
        "--into-torch",
        "--dry-run",
        "--profile",
        "rocm-6.4.3",
        "--state-dir",
        &state,
    ])
    .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
    let dry = crate::support_run::Run::from(c.output().unwrap()).fails_with(&format!(
        "error: torch 2.6.0+rocm6.4: torch has no code for gfx1011 itself, so it runs only under HSA_OVERRIDE_GFX_VERSION=10.3.0, where MIOpen sees gfx1030 and no fix of this tool acts, so no fix is proven or installed for it; nothing was changed
help: install the torch built for gfx1011: `{line}`, then run this again (then run torch without HSA_OVERRIDE_GFX_VERSION)"
    ));
    assert!(!dry.stderr.contains("Proven"), "{}", dry.stderr);
    assert_eq!(snapshot(&torch.dir), before);
}

/// What rocBLAS's step says, for an RX 5500 XT: its build, with its time.
const ROCBLAS_BUILD: &str = "build rocBLAS for gfx1012 with its Tensile kernels, about 25 minutes on 2 cores for one card (more for each further card), and put it under this torch as one reversible transaction: `rdna1-patch build rocblas --profile rocm-6.4.3[..]`, then `rdna1-patch install rocblas --into-torch[..]`";

/// A torch its user built (`2.6.0a0+git...`) with gfx1012 code, whose
/// bundled rocBLAS has none (ten other targets, gfx1010 among them), on
/// an RX 5500 XT: the first line names what breaks (every matmul), and the
/// route row and the dry run hold rocBLAS's step before MIOpen's, which
/// does not wait for it. On 84ed257 the first line said "library;
/// tensile", the route row "in place" alone and the dry run proved the
/// MIOpen fix with no word of rocBLAS.
#[test]
fn a_rocblas_without_the_cards_code_is_a_step_before_miopens() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5500xt-gfx1012"));
    let torch = crate::glance::debian_torch_in(&sb, "2.6.0a0+git1eba9b3");
    let run = doctor(&sb, &["--detail"]).check_fails();
    let rocblas_step = "step 1 of 2: rocBLAS for gfx1012: `rdna1-patch build rocblas --profile rocm-6.4.3[..]`, then `rdna1-patch install rocblas --into-torch[..]` (about 25 minutes on 2 cores for one card (more for each further card); fixes every matmul on gfx1012 (mm, bmm, linear, addmm, einsum, MIOpen's GEMM convolutions))";
    let miopen_step = "MIOpen's batch-norm fix for gfx1012: `rdna1-patch install --into-torch[..]`";
    assert!(
        line_matches(
            "verdict: torch 2.6.0a0+git1eba9b3 on gfx1012: problems to fix: batch-norm training: 2 kernels fail for gfx1012; `rdna1-patch install --into-torch[..]` fixes them; every matmul fails on gfx1012 (mm, bmm, linear, addmm, einsum, MIOpen's GEMM convolutions): rocBLAS has no code for gfx1012; rocBLAS for gfx1012 (see library); rocBLAS's Tensile kernels: none for gfx1012 (see tensile); 2 steps, first rocBLAS for gfx1012 (see route)",
            run.stdout.lines().next().unwrap_or_default()
        ),
        "{}",
        run.stdout
    );
    lines_are(
        &run.stdout
            .lines()
            .skip(2)
            .take(3)
            .collect::<Vec<_>>()
            .join("\n"),
        &[
            "ok    route     in place, no build: `rdna1-patch install --into-torch[..]` (MIOpen sees the real chip: libtorch_hip.so has code for gfx1010, gfx1012; every fix of rocm-6.4.3 is kernel text)",
            &format!("                {rocblas_step}"),
            &format!(
                "                step 2 of 2: {miopen_step} (seconds, in place, proven by compiling before anything is written; fixes batch-norm training on gfx1012)"
            ),
        ],
    );
    let fixes: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.contains("fix: build rocBLAS"))
        .collect();
    let build = format!("                fix: {ROCBLAS_BUILD}");
    assert_eq!(fixes.len(), 2, "{}", run.stdout);
    assert!(
        fixes.iter().all(|f| line_matches(&build, f)),
        "{}",
        run.stdout
    );
    // The dry run: the plan first, rocBLAS's step before MIOpen's, then
    // MIOpen's fix proven (it does not wait for rocBLAS).
    let before = snapshot(&torch.dir);
    let dry = install(&sb, &["--dry-run"]).ok();
    let plan: Vec<&str> = dry.stderr.lines().take(2).collect();
    lines_are(
        &plan.join("\n"),
        &[
            format!("      Plan {rocblas_step}").as_str(),
            &format!(
                "      Plan step 2 of 2: {miopen_step} (seconds: its kernels judged by compiling, and fixed where they fail; fixes batch-norm training on gfx1012)"
            ),
        ],
    );
    dry.says("Proven 2 batch-norm kernels compile for gfx1012 (the card in this machine)");
    // install rocblas's dry run says the plan's rocBLAS step alone (then
    // finds no build of it here).
    let blas = sb.run_with_state(&["install", "rocblas", "--into-torch", "--dry-run"], &[]);
    assert!(
        line_matches(
            &format!("      Plan {rocblas_step}"),
            blas.stderr.lines().next().unwrap_or_default()
        ),
        "{}",
        blas.stderr
    );
    assert!(!blas.stderr.contains("step 2 of 2"), "{}", blas.stderr);
    assert_eq!(snapshot(&torch.dir), before);
}

/// The same rocBLAS under a torch whose version reads as pytorch.org's
/// (`2.6.0+rocm6.4`): both ways are offered, each with its cost: this
/// tool's rocBLAS build to keep this torch, or TheRock's torch. On
/// 84ed257 only TheRock's torch was.
#[test]
fn a_pytorch_org_torch_gets_both_ways_for_rocblas() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5500xt-gfx1012"));
    crate::glance::debian_torch_in(&sb, "2.6.0+rocm6.4");
    let run = doctor(&sb, &["--detail"]).check_fails();
    // The first line, the route row and its steps, as text.
    let rocblas_step = format!(
        "step 1 of 2: rocBLAS for gfx1012: `rdna1-patch build rocblas --profile rocm-6.4.3[..]`, then `rdna1-patch install rocblas --into-torch[..]` (about 25 minutes on 2 cores for one card (more for each further card); fixes every matmul on gfx1012 (mm, bmm, linear, addmm, einsum, MIOpen's GEMM convolutions)); or the torch for gfx1012: `{}` (a download of about 4 GB, no build)",
        torch_line(&["gfx1012"])
    );
    let mut top: Vec<&str> = run.stdout.lines().take(5).collect();
    top.remove(1);
    lines_are(
        &top.join("\n"),
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1012: problems to fix: batch-norm training: 2 kernels fail for gfx1012; `rdna1-patch install --into-torch[..]` fixes them; every matmul fails on gfx1012 (mm, bmm, linear, addmm, einsum, MIOpen's GEMM convolutions): rocBLAS has no code for gfx1012; rocBLAS for gfx1012 (see library); rocBLAS's Tensile kernels: none for gfx1012 (see tensile); 2 steps, first rocBLAS for gfx1012 (see route)",
            "ok    route     in place, no build: `rdna1-patch install --into-torch[..]` (MIOpen sees the real chip: libtorch_hip.so has code for gfx1010, gfx1012; every fix of rocm-6.4.3 is kernel text)",
            &format!("                {rocblas_step}"),
            "                step 2 of 2: MIOpen's batch-norm fix for gfx1012: `rdna1-patch install --into-torch[..]` (seconds, in place, proven by compiling before anything is written; fixes batch-norm training on gfx1012)",
        ],
    );
    // The dry run's first step is the same step.
    let dry = install(&sb, &["--dry-run"]).ok();
    lines_are(
        dry.stderr.lines().next().unwrap_or_default(),
        &[&format!("      Plan {rocblas_step}")],
    );
    let both = format!(
        "                fix: {ROCBLAS_BUILD}; or, in place of this torch, TheRock's torch for gfx1012 (a download of about 4 GB, no build): `{}`, then run this again",
        torch_line(&["gfx1012"])
    );
    let fixes: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.contains("fix: build rocBLAS"))
        .collect();
    assert_eq!(fixes.len(), 2, "{}", run.stdout);
    assert!(
        fixes.iter().all(|f| line_matches(&both, f)),
        "{}",
        run.stdout
    );
    let json: serde_json::Value = serde_json::from_str(&doctor(&sb, &["--json"]).stdout).unwrap();
    let step = &json["plan"]["steps"][0];
    assert_eq!(step["kind"], "rocblas", "{json}");
    assert_eq!(step["or"]["kind"], "torch", "{json}");
    assert_eq!(
        step["or"]["cost"], "a download of about 4 GB, no build",
        "{json}"
    );
}

/// `verify --compile` on an RX 5500 XT (gfx1012) with a torch that has no
/// gfx1012 code: its kernels row names the torch for the card, never
/// `install --into-torch`, which refuses there. On 84ed257 it
/// recommended `install --into-torch`.
#[test]
fn verify_compile_on_a_card_torch_lacks_names_its_torch() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5500xt-gfx1012"));
    torch_with_code(&sb, &["gfx1010", "gfx1030"]);
    let v = sb
        .run_with_state(&["verify", "--compile", "--detail"], &[])
        .check_fails();
    v.prints("batch-norm training: 2 kernels fail for gfx1012, and torch has no code for gfx1012 at all: the torch for it first");
    v.prints(&format!(
        "                fix: install the torch built for gfx1012: `{}`, then run this again",
        torch_line(&["gfx1012"])
    ));
    assert!(!v.stdout.contains("install --into-torch"), "{}", v.stdout);
}
