//! The answer (issue 64): doctor's first line, its exit status and `ok`
//! say whether this torch works on this card, and they agree, by the one
//! rule of src/inspect/checks.rs (docs/rows.md).

use crate::in_place::{install, torch_with_code};
use crate::support::Sandbox;
use crate::support_run::{Run, line_matches};

pub(crate) fn doctor(sb: &Sandbox, extra: &[&str]) -> Run {
    let mut args = vec!["doctor", "--profile", "rocm-6.4.3", "--python", "python3"];
    args.extend(extra);
    sb.run_with_state(&args, &[])
}

/// The whole of `text`, line by line, against `expected` (`[..]` matches
/// any text within a line).
#[track_caller]
pub(crate) fn lines_are(text: &str, expected: &[&str]) {
    let got: Vec<&str> = text.lines().collect();
    let same =
        got.len() == expected.len() && got.iter().zip(expected).all(|(g, e)| line_matches(e, g));
    assert!(same, "expected:\n{}\ngot:\n{text}", expected.join("\n"));
}

/// doctor's rows after the torch row, at a glance, for a native gfx1010
/// torch whose batch norm fails on an RX 5600 XT.
pub(crate) const NATIVE_GFX1010_FAILS: [&str; 10] = [
    "ok    route     in place, no build: `rdna1-patch install --into-torch[..]` (MIOpen sees the real chip: …",
    "FAIL  kernels   2 of 2 batch-norm kernels of torch/lib/libMIOpen.so fail for gfx1010 (the card in this machine), through comgr 2.4 …",
    "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1010",
    "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for …",
    "                fix: MIOpen's batch-norm fix for gfx1010: `rdna1-patch install --into-torch[..]` (seconds, in",
    "                place, proven by compiling before anything is written; fixes batch-norm training on gfx1010)",
    "ok    torch-gpu torch/lib/libtorch_hip.so has code for gfx1010",
    "ok    gpu       gfx1010 Navi 10 (RX 5600/5700 series) at 0000:03:00.0 (node 1, gfx_target_version 100100): RDNA1, what this tool is for",
    "ok    amdgpu    noretry=-1 mtype_local=-1 vm_fragment_size=4294967295",
    "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
];

fn json_ok(sb: &Sandbox) -> (Option<i32>, serde_json::Value) {
    let run = doctor(sb, &["--json"]);
    (run.code, serde_json::from_str(&run.stdout).unwrap())
}

/// A native torch whose batch norm fails for gfx1010: the answer is no
/// (exit 1, `ok` false), its first line names batch norm and the fix;
/// once `install --into-torch` has fixed it, yes, and the kernels row
/// names the transaction. On ada2d43 it read `no problem found; 1
/// warning`, exit 0.
#[test]
fn a_failure_the_tool_can_fix_is_a_failure_until_it_is_fixed() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    torch_with_code(&sb, &["gfx1010"]);
    let before = doctor(&sb, &[]).check_fails();
    lines_are(
        &before.stdout,
        &[
            &[
                "verdict: torch 2.6.0+rocm6.4 on gfx1010: 1 problem to fix: batch-norm training: 2 kernels fail for gfx1010;",
                "         `rdna1-patch install --into-torch[..]` fixes them",
                // Past 160 where the clone's temp dir is long: the layout goes.
                "ok    torch     2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) at [..]/site/torch, found by python3 (--python); torch/lib: torch loads [..]",
            ][..],
            &NATIVE_GFX1010_FAILS,
        ]
        .concat(),
    );
    let (code, json) = json_ok(&sb);
    assert_eq!((code, &json["ok"]), (Some(1), &serde_json::json!(false)));
    // The verdict as printed, its wrapped lines joined again.
    let shown: Vec<&str> = before
        .stdout
        .lines()
        .take_while(|l| l.starts_with("verdict: ") || l.starts_with("         "))
        .map(|l| l.trim_start_matches("verdict: ").trim())
        .collect();
    assert_eq!(json["verdict"], shown.join(" "));

    install(&sb, &[]).ok();
    let after = doctor(&sb, &[]).ok();
    lines_are(
        &after.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1010: no problem found",
            "ok    torch     [..]",
            "ok    route     fixed in place by transaction 1 of [..]: MIOpen sees the real chip (libtorch_hip.so has code for gfx1010)",
            "ok    kernels   fixed by transaction 1 of [..]: 0 of 2 batch-norm kernels of torch/lib/libMIOpen.so fail for gfx1010 (the card in this …",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: compiles",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: compiles",
            "                nothing to fix: every batch-norm kernel of torch/lib/libMIOpen.so compiles for gfx1010 in every case",
            "ok    torch-gpu [..]",
            "ok    gpu       [..]",
            "ok    amdgpu    [..]",
            "ok    override  [..]",
        ],
    );
    let (code, json) = json_ok(&sb);
    assert_eq!((code, &json["ok"]), (Some(0), &serde_json::json!(true)));
}

/// A check the answer needs that could not run is "not checked", exit 1:
/// never "no problem found" (a torch with no comgr beside its MIOpen).
#[test]
fn a_check_that_could_not_run_is_no_pass() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let torch = torch_with_code(&sb, &["gfx1010"]);
    std::fs::remove_file(torch.lib.join("libamd_comgr.so.2")).unwrap();
    let run = doctor(&sb, &[]).check_fails();
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1010: not checked: batch norm: no comgr beside torch's MIOpen to judge its kernels",
            "ok    torch     [..]",
            "ok    route     [..]",
            "----  kernels   not checked: no compiler library (libamd_comgr.so*) beside torch's MIOpen, so whether its batch norm fails cannot be told",
            "                fix: torch bundles comgr with its MIOpen; reinstall torch if it is missing",
            "ok    torch-gpu [..]",
            "ok    gpu       [..]",
            "ok    amdgpu    [..]",
            "ok    override  [..]",
        ],
    );
    let (code, json) = json_ok(&sb);
    assert_eq!((code, &json["ok"]), (Some(1), &serde_json::json!(false)));
    assert_eq!(json["checks"][2]["status"], "not-checked");
}

/// An RX 5500 XT (gfx1012) and a torch whose libtorch_hip.so has code for
/// gfx1010 and gfx1030 only, plain and as a compressed bundle (PyTorch's
/// ROCm builds use --offload-compress): torch runs nothing on that card,
/// so torch-gpu fails with the torch for gfx1012 as its fix, the route is
/// torch first, and install proves nothing and changes nothing. On
/// ada2d43: `ok torch-gpu ... has code for gfx1010, gfx1030`, the
/// in-place route, and `Proven ... for gfx1012` (compressed: `skip`, and
/// a build of MIOpen offered).
#[test]
fn a_card_torch_has_no_code_for_is_torch_first() {
    // Plain, and compressed in each CCOB version clang writes (version 1,
    // with no total size, read since issue 70).
    for compressed in [None, Some(1), Some(2), Some(3)] {
        let sb = Sandbox::new();
        sb.at_a_glance();
        sb.set_gpus(rdna1_testkit::gpus("rx5500xt-gfx1012"));
        let torch = torch_with_code(&sb, &["gfx1010", "gfx1030"]);
        if let Some(version) = compressed {
            rdna1_testkit::ccob::compress_fatbin_as(&torch.lib.join("libtorch_hip.so"), version);
        }
        let notes = match compressed {
            Some(_) => "; 1 compressed offload …",
            None => "",
        };
        let (code, json) = json_ok(&sb);
        assert_eq!((code, &json["ok"]), (Some(1), &serde_json::json!(false)));
        let run = doctor(&sb, &[]).check_fails();
        lines_are(
            &run.stdout,
            &[
                "verdict: torch 2.6.0+rocm6.4 on gfx1012: 1 problem to fix: everything: torch has no code for gfx1012; the torch for gfx1012 first (see torch-gpu); 2 steps,",
                "         first the torch for gfx1012 (see route)",
                "ok    torch     [..]",
                "skip  route     torch first: libtorch_hip.so has code for gfx1010, gfx1030 and none for gfx1012, so nothing runs there; no MIOpen fix is offered for it",
                "                step 1 of 2: the torch for gfx1012: `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1012]\" \"torchvision[device-gfx1012]\"` …",
                "                step 2 of 2: after the torch for gfx1012, run doctor again: MIOpen's batch-norm fix for gfx1012: `rdna1-patch install --into-torch[..]` …",
                &format!(
                    "FAIL  torch-gpu torch/lib/libtorch_hip.so has code for gfx1010, gfx1030 and none for gfx1012: torch runs nothing on that card{notes}"
                ),
                "                fix: install the torch built for gfx1012:",
                "                `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1012]\" \"torchvision[device-gfx1012]\"`, then run this",
                "                again",
                "ok    gpu       gfx1012 Navi 14 (RX 5500 series) at 0000:0a:00.0 (node 1, gfx_target_version 100102): RDNA1, what this tool is for",
                "ok    amdgpu    [..]",
                "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
            ],
        );
        let before = std::fs::read(torch.miopen()).unwrap();
        let dry = install(&sb, &["--dry-run"]).fails_with(
            "error: torch 2.6.0+rocm6.4 has no GPU code for gfx1012 (libtorch_hip.so has code for gfx1010, gfx1030): nothing runs on that card, whatever MIOpen does, so no fix is proven or installed; nothing was changed
help: install the torch built for gfx1012: `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1012]\" \"torchvision[device-gfx1012]\"`, then run this again",
        );
        assert!(!dry.stderr.contains("Proven"), "{}", dry.stderr);
        install(&sb, &[]).fails();
        assert_eq!(std::fs::read(torch.miopen()).unwrap(), before);
    }
}

/// Nothing installed, with a torch and with none: verify and status say
/// so and point at doctor, by the rule doctor takes (nothing checked:
/// exit 3), never "no problem found", and name no build profile. On
/// ada2d43 verify said `verdict: no problem found` above `skip prefix
/// .../rocm-6.2.4 does not exist`, exit 0, and status spoke of a
/// rocm-6.2.4 build.
#[test]
fn verify_and_status_with_nothing_installed_point_at_doctor() {
    for with_torch in [true, false] {
        let sb = Sandbox::new();
        sb.at_a_glance();
        if with_torch {
            torch_with_code(&sb, &["gfx1010"]);
        }
        let v = sb.run_with_state(&["verify"], &[]);
        lines_are(
            &v.stdout,
            &[
                "verdict: nothing of rdna1-patch's is installed to verify: `rdna1-patch doctor[..]` says what this torch needs",
                "skip  prefix    no rdna1-patch install in [..]/state to check; `verify --compile` judges the torch's own kernels as they are",
            ],
        );
        assert_eq!(v.code, Some(3), "{}", v.stdout);
        let st = sb.run_with_state(&["status"], &[]);
        lines_are(
            &st.stdout,
            &[
                "verdict: nothing of rdna1-patch's is installed here: `rdna1-patch doctor[..]` says what this torch needs",
                "last:       no transactions in [..]/state",
            ],
        );
        assert_eq!(st.code, Some(3), "{}", st.stdout);
        let json: serde_json::Value =
            serde_json::from_str(&sb.run_with_state(&["status", "--json"], &[]).stdout).unwrap();
        assert_eq!(json["ok"], false);
        // --runtime finds python3's torch, as its help says.
        let rt = sb.run_with_state(&["verify", "--runtime"], &[]);
        assert!(!rt.stdout.contains("no problem found"), "{}", rt.stdout);
        assert_ne!(rt.code, Some(0), "{}", rt.stdout);
        let found = rt.stdout.lines().any(|l| l.starts_with("ok    layout"));
        assert_eq!(found, with_torch, "{}", rt.stdout);
    }
}

/// `verify --smoke` at a glance on a torch with gfx1010 code and no GPU
/// visible: the battery checked nothing.
pub(crate) const SMOKE_WITH_NO_GPU: [&str; 5] = [
    "verdict: nothing was checked: none of the battery's 47 cases ran",
    "skip  prefix    no rdna1-patch install in [..]/state to check; --smoke judges the torch as it is",
    "ok    layout    torch/lib: torch loads [..]/site/torch/lib/libMIOpen.so",
    // The sandbox's copy of the topology (support.rs, set_gpus): a path
    // of fixed length, its middle elided; what follows stays.
    "skip  smoke     nothing was checked: no AMD GPU in the KFD topology ([..]/topology/nodes), so no case of the battery ran",
    "                fix: the battery runs on an AMD GPU the kernel's amdgpu driver shows in /sys/class/kfd; in a container, pass it /dev/kfd and /dev/dri",
];

/// `verify --smoke` with no --python runs python3's torch, as its help
/// says (on ada2d43: `skip torch no --python/--torch-dir given and no
/// install recorded`, and the battery checked nothing).
#[test]
fn smoke_without_python_uses_python3s_torch() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    torch_with_code(&sb, &["gfx1010"]);
    let run = sb.run_with_state(&["verify", "--smoke"], &[]);
    lines_are(&run.stdout, &SMOKE_WITH_NO_GPU);
    assert_eq!(run.code, Some(3));

    // With an RX 5600 XT the battery runs, every case in the python3 the
    // PATH names first (a wrapper that counts its runs).
    sb.set_gpus(rdna1_testkit::gpus("rx5600xt-gfx1010"));
    let bin = sb.root.join("counted");
    std::fs::create_dir_all(&bin).unwrap();
    let count = sb.root.join("python3-runs");
    std::fs::write(
        bin.join("python3"),
        format!(
            "#!/bin/sh\necho run >> '{}'\nexec '{}' \"$@\"\n",
            count.display(),
            crate::support::tools().join("python3").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("python3"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = sb.state();
    let mut c = sb.cmd();
    c.args(["verify", "--smoke", "--state-dir", &state])
        .env("PATH", crate::support::path_with(&bin));
    let run = Run::from(c.output().unwrap()).ok();
    let head: Vec<&str> = run.stdout.lines().take(4).collect();
    lines_are(
        &head.join("\n"),
        &[
            "verdict: no problem found",
            "skip  prefix    no rdna1-patch install in [..]/state to check; --smoke judges the torch as it is",
            "ok    layout    torch/lib: torch loads [..]/site/torch/lib/libMIOpen.so",
            "ok    smoke     35 of 35 MIOpen cases within tolerance on AMD Radeon RX 5600 XT (gfx1010); outside MIOpen 12 of 12 ok",
        ],
    );
    run.prints("ran: torch 2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) on AMD Radeon RX 5600 XT");
    let runs = std::fs::read_to_string(&count).unwrap().lines().count();
    assert!(
        runs > 47,
        "python3 ran {runs} times, fewer than the 47 cases"
    );
}

/// An RX 6800 (gfx1030, not RDNA1) with a torch that has gfx1010 code:
/// nothing for this tool to fix, and nothing proposed (on ada2d43 the
/// in-place fix was recommended, "judged for gfx1010").
#[test]
fn a_machine_with_no_rdna1_card_is_told_there_is_nothing_to_fix() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx6800-gfx1030"));
    torch_with_code(&sb, &["gfx1010", "gfx1030"]);
    let run = doctor(&sb, &[]).ok();
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1030: no problem found; 1 warning",
            "ok    torch     [..]",
            "ok    route     nothing to do: no RDNA1 card in this machine (gfx1030), so nothing for this tool to fix on it (--target gfx1010 judges for one)",
            "ok    torch-gpu torch/lib/libtorch_hip.so has code for gfx1010, gfx1030",
            "warn  gpu       gfx1030 Navi 21 [..]: not RDNA1 (gfx1010/1011/1012); the patches only …",
            "[..]",
            "ok    override  HSA_OVERRIDE_GFX_VERSION is not set (no RDNA1 card here needs it)",
        ],
    );
    assert!(
        !run.stdout.contains("install --into-torch"),
        "{}",
        run.stdout
    );
}

/// Two RDNA1 cards (an RX 5600 XT, gfx1010, and an RX 5500 XT, gfx1012)
/// and a torch with code for both: the diagnosis judges both targets and
/// the fix is proven for both. On 847bb00 both were judged and proven
/// for gfx1010 alone.
#[test]
fn two_cards_are_both_judged_and_proven() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("two-cards-gfx1010-gfx1012"));
    torch_with_code(&sb, &["gfx1010", "gfx1012"]);
    // Whole, each row as long as it is (--detail).
    let run = doctor(&sb, &["--detail"]).check_fails();
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1010 + gfx1012: 1 problem to fix: batch-norm training: 2 kernels fail for gfx1010 and gfx1012; `rdna1-patch install --into-torch[..]` fixes them",
            "ok    torch     [..]",
            "ok    route     in place, no build: `rdna1-patch install --into-torch[..]` (MIOpen sees the real chip: libtorch_hip.so has code for gfx1010, gfx1012; every fix of rocm-6.4.3 is kernel text)",
            "FAIL  kernels   2 of 2 batch-norm kernels of [..]/site/torch/lib/libMIOpen.so fail for gfx1010 and gfx1012 (the cards in this machine), through comgr 2.4 ([..]) (8 compiles, [..])",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1010 and gfx1012",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1010 and gfx1012",
            "                fix: MIOpen's batch-norm fix for gfx1010 and gfx1012: `rdna1-patch install --into-torch[..]` (seconds, in place, proven by compiling before anything is written; fixes batch-norm training on gfx1010 and gfx1012)",
            "ok    torch-gpu [..]/site/torch/lib/libtorch_hip.so has code for gfx1010, gfx1012",
            "ok    gpu       gfx1010 Navi 10 (RX 5600/5700 series) at 0000:03:00.0 (node 1, gfx_target_version 100100): RDNA1, what this tool is for",
            "ok    gpu       gfx1012 Navi 14 (RX 5500 series) at 0000:0a:00.0 (node 2, gfx_target_version 100102): RDNA1, what this tool is for",
            "skip  amdgpu    module parameters not readable (amdgpu not loaded)",
            "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
        ],
    );
    // The plan and the stages whole too (--detail: at a glance they wrap).
    let dry = install(&sb, &["--dry-run", "--detail"]).ok();
    lines_are(
        &dry.stderr,
        &[
            "      Plan step 1 of 1: MIOpen's batch-norm fix for gfx1010 and gfx1012: `rdna1-patch install --into-torch[..]` (seconds: its kernels judged by compiling, and fixed where they fail; fixes batch-norm training on gfx1010 and gfx1012)",
            "     Route MIOpen sees the real chip (libtorch_hip.so has code for gfx1010, gfx1012) and every fix profile rocm-6.4.3 makes is kernel text: [..]",
            "    Kernel MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: [..]; fails in 1 of 1 case for gfx1010 and gfx1012",
            "    Kernel MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: [..]; fails in 1 of 1 case for gfx1010 and gfx1012",
            " Diagnosis 2 of 2 batch-norm kernels of [..] fail for gfx1010 and gfx1012 (the cards in this machine), [..]",
            "    Proven 2 batch-norm kernels compile for gfx1010, gfx1012 (the cards in this machine) in every case; for gfx1030: the same code as before wherever it compiled before; [..]",
        ],
    );
}

/// The same RX 6800 asking with --target: what a gfx1010 would need is
/// judged, and the fix proposed, for that target. On 847bb00 doctor had
/// no --target (`error: unexpected argument '--target' found`).
#[test]
fn a_target_asked_for_is_judged_on_a_machine_with_no_rdna1_card() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(rdna1_testkit::gpus("rx6800-gfx1030"));
    torch_with_code(&sb, &["gfx1010", "gfx1030"]);
    let run = doctor(&sb, &["--target", "gfx1010"]).check_fails();
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 for gfx1010 (--target): 1 problem to fix: batch-norm training: 2 kernels fail for gfx1010;",
            "         `rdna1-patch install --into-torch[..]` fixes them; 1 warning",
            "ok    torch     [..]",
            "ok    route     in place, no build: `rdna1-patch install --into-torch[..]` (MIOpen sees the real chip: …",
            "FAIL  kernels   2 of 2 batch-norm kernels of torch/lib/libMIOpen.so fail for gfx1010 (asked with --target), through comgr 2.4 (torch/lib/libamd_comgr.so.2) …",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for gfx1010",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: fails at the DPP reduction (fp32 NCHW: cannot compile inline asm); fails in 1 of 1 case for …",
            "                fix: MIOpen's batch-norm fix for gfx1010: `rdna1-patch install --into-torch[..]` (seconds, in",
            "                place, proven by compiling before anything is written; fixes batch-norm training on gfx1010)",
            "ok    torch-gpu torch/lib/libtorch_hip.so has code for gfx1010, gfx1030",
            "warn  gpu       gfx1030 Navi 21 [..]: not RDNA1 (gfx1010/1011/1012); the patches only …",
            "[..]",
            "ok    override  HSA_OVERRIDE_GFX_VERSION is not set (no RDNA1 card here needs it)",
        ],
    );
    doctor(&sb, &["--target", "gfx1030"]).fails_with(
        "error: invalid value 'gfx1030' for '--target <GFX>': `gfx1030` is not an RDNA1 target: gfx1010 (RX 5600/5700), gfx1011 (Radeon Pro 5000) or gfx1012 (RX 5500)
help: `rdna1-patch doctor --help[..]` lists its arguments",
    );
}

/// No GPU visible at all (the KFD topology shows none, as in a container
/// without /dev/kfd): said in its own words, not as a machine with no
/// RDNA1 card, and batch norm judged for every RDNA1 target. On 847bb00:
/// `no AMD GPU in the KFD topology (...): a build works, running needs
/// the card and the amdgpu driver` and `no RDNA1 card in the KFD
/// topology: judged for gfx1010`.
#[test]
fn no_gpu_visible_is_said_in_its_own_words() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    torch_with_code(&sb, &["gfx1010"]);
    let run = doctor(&sb, &[]).check_fails();
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4, no GPU visible: 1 problem to fix: batch-norm training: 2 kernels fail for gfx1010;",
            "         `rdna1-patch install --into-torch[..]` fixes them; 1 warning",
            "ok    torch     [..]",
            "ok    route     [..]",
            "FAIL  kernels   2 of 2 batch-norm kernels of torch/lib/libMIOpen.so fail for gfx1010 (no GPU visible: judged for gfx1010), through comgr 2.4 …",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL: [..]",
            "                MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL: [..]",
            "                fix: [..]",
            "                place, proven by compiling before anything is written; fixes batch-norm training on gfx1010)",
            "ok    torch-gpu [..]",
            // The sandbox's copy of the topology, its middle elided.
            "warn  gpu       no GPU visible: the KFD topology ([..]/topology/nodes) shows none, as in a container without /dev/kfd or with no amdgpu driver; [..]",
            "                fix: in a container, pass /dev/kfd and /dev/dri through; on the GPU machine, check `lsmod | grep amdgpu` and that your user is in the render and",
            "                video groups",
            "skip  amdgpu    module parameters not readable (amdgpu not loaded)",
            "ok    override  [..]",
        ],
    );
    install(&sb, &["--dry-run"])
        .ok()
        .says("Proven 2 batch-norm kernels compile for gfx1010, gfx1011, gfx1012 (no GPU visible: every RDNA1 target) in every case");
}
