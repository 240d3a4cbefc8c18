//! The answer's one rule, row by row (docs/rows.md): every row that says
//! something fails is FAIL, every check the answer needs that could not
//! run is "not checked", and either makes the answer no; a `warn` is
//! information and never says a failure. Each test names what it read
//! before (on 345998d).

use crate::answer::{doctor, lines_are};
use crate::in_place::{install, torch_with_code};
use crate::support::{HIP, Run, Sandbox, TorchKind, check_row, gpus};

/// doctor at a glance with HSA_OVERRIDE_GFX_VERSION set to `value`.
fn doctor_under(sb: &Sandbox, value: &str, extra: &[&str]) -> Run {
    let state = sb.state();
    let mut c = sb.cmd();
    c.args(["doctor", "--profile", "rocm-6.4.3", "--python", "python3"])
        .args(["--state-dir", &state])
        .args(extra)
        .env("HSA_OVERRIDE_GFX_VERSION", value);
    Run::from(c.output().unwrap())
}

/// A pytorch.org-style wheel (gfx1030 code, none for gfx101x) on an RX
/// 5600 XT under HSA_OVERRIDE_GFX_VERSION=10.3.0: torch runs as gfx1030,
/// MIOpen compiles for gfx1030 where batch norm works, and no fix of this
/// tool acts: yes (exit 0), with the plan's one way for the fix to act,
/// the torch for the card (issue 70), as the override row's fix; no step
/// that changes nothing.
#[test]
fn the_inert_route_is_nothing_to_do_and_no_problem() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    torch_with_code(&sb, &["gfx1030"]);
    let run = doctor_under(&sb, "10.3.0", &[]).ok();
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1010: no problem found; 1 warning; 2 steps, first the torch for gfx1010 (see route)",
            "ok    torch     [..]",
            "skip  route     the torch for gfx1010 first: torch has no code for gfx1010 itself, so it runs only under HSA_OVERRIDE_GFX_VERSION=10.3.0, where MIOpen sees …",
            "                step 1 of 2: the torch for gfx1010: `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"` …",
            "                step 2 of 2: after the torch for gfx1010, run doctor again: MIOpen's batch-norm fix for gfx1010: `rdna1-patch install --into-torch[..]` …",
            "ok    torch-gpu torch/lib/libtorch_hip.so has code for gfx1030 (no gfx101x)",
            "ok    gpu       [..]",
            "ok    amdgpu    [..]",
            "warn  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 (ROCm reports gfx1030, the card is gfx1010): torch has no code for gfx1010 itself, so it runs only under …",
            "                fix: install the torch built for gfx1010:",
            "                `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`, then run this",
            "                again (then run torch without HSA_OVERRIDE_GFX_VERSION)",
        ],
    );
    let json = doctor_under(&sb, "10.3.0", &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!((json.code, &v["ok"]), (Some(0), &serde_json::json!(true)));
}

/// The same wheel with no GPU visible and no override: on an RDNA1 card
/// (every one is judged) its operators will not load, so the override row
/// is a failure of its own, with the two ways out as its fix. On 345998d:
/// `warn override ... will not load` under "no problem found; 3
/// warnings", exit 0.
#[test]
fn no_gfx101x_code_and_no_override_is_a_failure_with_no_gpu_visible() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    torch_with_code(&sb, &["gfx1030"]);
    let run = doctor(&sb, &[]).check_fails();
    let first: Vec<&str> = run.stdout.lines().take(2).collect();
    lines_are(
        &first.join("\n"),
        &[
            "verdict: torch 2.6.0+rocm6.4, no GPU visible: 1 problem to fix: everything on an RDNA1 card: torch has no gfx101x code and HSA_OVERRIDE_GFX_VERSION is not set",
            "         (see override); 1 warning",
        ],
    );
    let at = run
        .stdout
        .find("FAIL  override")
        .unwrap_or_else(|| panic!("{}", run.stdout));
    lines_are(
        &run.stdout[at..],
        &[
            "FAIL  override  HSA_OVERRIDE_GFX_VERSION is not set, and torch has no gfx101x code: on an RDNA1 card its GPU operators will not load",
            "                fix: export HSA_OVERRIDE_GFX_VERSION=10.3.0 (MIOpen then sees gfx1030: the batch-norm patch (0004) changes nothing, while the fast-find patch",
            "                (0003) still acts, since its detection reads the real chip from the KFD topology); or install a torch built for gfx101x, which needs no",
            "                override: `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`",
        ],
    );
}

/// A torch with gfx1010 code alone under HSA_OVERRIDE_GFX_VERSION=10.3.0:
/// ROCm looks for gfx1030 code, which torch has not, so nothing runs; the
/// one next step is to unset the override, not a torch it already is. On
/// 345998d: `has code for gfx1010 and none for gfx1010`, and the fix was
/// to install the torch built for gfx1010.
#[test]
fn an_override_that_hides_torchs_own_code_is_the_failure_to_unset() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let torch = torch_with_code(&sb, &["gfx1010"]);
    let run = doctor_under(&sb, "10.3.0", &["--detail"]).check_fails();
    let lib = torch.lib.join("libtorch_hip.so");
    lines_are(
        &run.stdout,
        &[
            "verdict: torch 2.6.0+rocm6.4 on gfx1010: 1 problem to fix: everything: torch has no code for gfx1030 (what HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report for gfx1010); `unset HSA_OVERRIDE_GFX_VERSION` (see torch-gpu) (1 more check(s) fail because of it, shown under it); 1 warning; 2 steps, first unset HSA_OVERRIDE_GFX_VERSION (see route)",
            "ok    torch     [..]",
            "warn  route     unset HSA_OVERRIDE_GFX_VERSION first: MIOpen seeing gfx1030 instead of gfx1010: torch has their own code",
            "                step 1 of 2: unset HSA_OVERRIDE_GFX_VERSION: `unset HSA_OVERRIDE_GFX_VERSION`, while it is 10.3.0, ROCm loads gfx1030 code (nothing; fixes MIOpen seeing gfx1030 instead of gfx1010: torch has their own code)",
            "                step 2 of 2: after unsetting HSA_OVERRIDE_GFX_VERSION, run doctor again: MIOpen's batch-norm fix for gfx1010: `rdna1-patch install --into-torch[..]` (seconds, in place, proven by compiling before anything is written; fixes batch-norm training on gfx1010)",
            &format!(
                "FAIL  torch-gpu {} has code for gfx1010 and none for gfx1030 (what HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report for gfx1010): torch runs nothing on that card",
                lib.display()
            ),
            "                fix: `unset HSA_OVERRIDE_GFX_VERSION`: torch has code for gfx1010 of its own, and while it is 10.3.0 ROCm looks for gfx1030 code instead; then run this again",
            "FAIL  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report gfx1030 and load code built for that chip, but torch carries gfx101x code of its own (because of torch-gpu above)",
            "ok    gpu       [..]",
            "ok    amdgpu    [..]",
        ],
    );
    let prefix = sb.prefix.display().to_string();
    let state = sb.state();
    let mut c = sb.cmd();
    c.args([
        "install",
        "--into-torch",
        "--dry-run",
        "--profile",
        "rocm-6.4.3",
    ])
    .args(["--prefix", &prefix, "--state-dir", &state])
    .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
    Run::from(c.output().unwrap()).fails_with(
        "error: torch 2.6.0+rocm6.4 has no GPU code for gfx1030 (what HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report for gfx1010) (libtorch_hip.so has code for gfx1010): nothing runs on that card, whatever MIOpen does, so no fix is proven or installed; nothing was changed
help: `unset HSA_OVERRIDE_GFX_VERSION`: torch has code for gfx1010 of its own, and while it is 10.3.0 ROCm looks for gfx1030 code instead; then run this again",
    );
    // Followed: the override unset, the answer is batch norm's.
    install(&sb, &["--dry-run"])
        .ok()
        .says("Proven 2 batch-norm kernels");
}

/// A bundled torch whose libtorch_hip.so carries no GPU code the reader
/// can read: whether torch runs on the card is not known, which is no
/// pass. On 345998d: `skip torch-gpu` and a build offered, exit by the
/// build's rows alone.
#[test]
fn torch_code_that_cannot_be_read_is_not_checked() {
    let sb = Sandbox::new();
    sb.at_a_glance();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    sb.torch(TorchKind::Rocm, HIP);
    let run = sb.run(&["doctor", "--python", "python3", "--rocm", "/nonexistent"]);
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    lines_are(
        &run.stdout.lines().take(5).collect::<Vec<_>>().join("\n"),
        &[
            "verdict: torch 2.5.1+rocm6.2 on gfx1010: 1 problem to fix: rocm (2 more check(s) fail because of it, shown under it); not checked: whether torch has code for",
            "         the card: its libtorch_hip.so's GPU code could not be read (see torch-gpu)",
            "ok    torch     [..]",
            "ok    route     libtorch_hip.so carries no readable GPU code, so what MIOpen sees is not known; profile rocm-6.2.4 would be built (`rdna1-patch build miopen[..]`)",
            "----  torch-gpu not checked: torch/lib/libtorch_hip.so carries no GPU code objects (.hip_fatbin), so whether torch runs on the card is not known",
        ],
    );
}

/// A librocblas.so whose GPU code cannot be read (its `.hip_fatbin`
/// section header lies about its size, which the dynamic loader never
/// reads): whether every matmul runs on the card is not known, no pass.
/// On 345998d: `skip library ... cannot be told`, exit 0.
#[test]
fn a_library_whose_code_cannot_be_read_is_not_checked() {
    let (sb, lib) = crate::libraries::torch_with("gfx1010", "rx5600xt-gfx1010");
    let rocblas = lib.join("librocblas.so");
    let bytes = std::fs::read(&rocblas).unwrap();
    std::fs::write(
        &rocblas,
        crate::hostile::with_section_size(&bytes, ".hip_fatbin", u64::MAX),
    )
    .unwrap();
    let (out, code) = crate::libraries::doctor(&sb);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines().next().unwrap().contains(
            "not checked: librocblas.so: whether it has code for the card cannot be told (see library); 2 steps, first TheRock's torch for gfx1010"
        ),
        "{out}"
    );
    let row = check_row(&out, "library");
    assert!(
        row.starts_with(&format!(
            "----  library   not checked: librocblas.so at {} has code for no target it names; whether gfx1010 (the card's) is among them cannot be told; ",
            lib.display()
        )),
        "{out}"
    );
}
