//! `verify --smoke`: the battery against the fake torch, whose GPU ops hang,
//! crash or compute wrong values on demand (FAKE_TORCH_SMOKE, see its
//! cuda.py), with GPUs read from recorded sysfs trees.

use crate::support::{HIP, Run, Sandbox, TorchKind, check_row, gpus, line_matches};

/// `verify --smoke` of the sandbox's install with `extra` arguments and
/// `env`, and none of the developer's ROCm or MIOpen variables.
pub(crate) fn smoke(sb: &Sandbox, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let state = sb.state();
    let mut c = sb.cmd();
    c.args([
        "verify",
        "--detail",
        "--smoke",
        "--prefix",
        sb.prefix.to_str().unwrap(),
    ])
    .args(["--state-dir", &state])
    .args(extra);
    for (k, _) in std::env::vars() {
        if k == "HSA_OVERRIDE_GFX_VERSION"
            || k.starts_with("MIOPEN_")
            || k.ends_with("_VISIBLE_DEVICES")
        {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    Run::from(c.output().unwrap())
}

pub(crate) fn installed_on_rdna1() -> Sandbox {
    let sb = Sandbox::built();
    sb.torch(TorchKind::Rocm, HIP);
    sb.install(&[]).ok();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    sb
}

/// A case row of the battery: its names are padded to the longest's, 24.
pub(crate) fn row(status: &str, name: &str, detail: &str) -> String {
    format!("{status:<4}  {name:<24}  {detail}")
}

/// The case rows and the lines around them, each against a pattern
/// whose `[..]` matches any text.
pub(crate) fn assert_lines(out: &str, want: &[&str]) {
    for w in want {
        assert!(
            out.lines().any(|l| line_matches(w, l)),
            "no line like\n{w}\nin:\n{out}"
        );
    }
}

const MISBEHAVE: &str =
    "conv3x3-fp32-nchw=hang,conv1x1-fp16-nhwc=crash,bn-train-16x16-fp32-nchw=wrong,nonzero=crash";

#[test]
fn a_hang_a_crash_and_wrong_numbers_fail_their_cases_and_the_rest_are_ok() {
    let sb = installed_on_rdna1();
    let env = [
        ("FAKE_TORCH_SMOKE", MISBEHAVE),
        ("HSA_OVERRIDE_GFX_VERSION", "10.3.0"),
        ("FAKE_TORCH_ARCH", "gfx1030"),
    ];
    let run = smoke(&sb, &["--timeout", "5"], &env).check_fails();
    let out = &run.stdout;
    assert_eq!(
        out.lines().next(),
        Some("verdict: 1 problem to fix: smoke"),
        "{out}"
    );
    assert_eq!(
        check_row(out, "smoke"),
        "FAIL  smoke     3 of 35 MIOpen cases failed on AMD Radeon RX 5600 XT (gfx1010): conv3x3-fp32-nchw (hang), conv1x1-fp16-nhwc (crash), bn-train-16x16-fp32-nchw (wrong); outside MIOpen, not MIOpen's: nonzero (crash)"
    );
    let torch_lib = sb.root.join("site/torch/lib");
    assert_lines(
        out,
        &[
            "smoke battery 2: 47 cases, each in a child process of its own; limit 5 s a case, 50 s in all",
            "driver: amdgpu in the kernel's tree (mtype_local=-1 noretry=-1 vm_fragment_size=4294967295)",
            &format!(
                "ran: torch 2.5.1+rocm6.2 (HIP {HIP}) on AMD Radeon RX 5600 XT: HIP reports gfx1030, the KFD topology gfx1010 (node 1, 0000:03:00.0)"
            ),
            "environment: HSA_OVERRIDE_GFX_VERSION=10.3.0",
            &format!(
                "libMIOpen: {}/libMIOpen.so[..] (SHA-256 [..]): the fixed one, installed by transaction 1",
                torch_lib.display()
            ),
            "tolerance: the largest error over the largest |value| of the float64 CPU result: fp32 1e-3, fp16 1e-2, int64 exact",
            &row(
                "FAIL",
                "conv3x3-fp32-nchw",
                "hang: stopped after 5.[..] s (limit 5 s); MIOpen: fwd ConvBinWinograd3x3U, bwd ConvBinWinograd3x3U, wrw ConvBinWinogradRxSf2x3",
            ),
            &row(
                "FAIL",
                "conv1x1-fp16-nhwc",
                "crash (signal 6 SIGABRT): Memory access fault by GPU node-1 (Agent handle: 0x55d1c2e0a3c0) on address 0x7f3a1c000000. Reason: Page not present or supervisor privilege.; MIOpen: fwd ConvOclDirectFwd1x1, bwd ConvOclDirectFwd1x1, wrw ConvOclBwdWrW1x1",
            ),
            &row(
                "FAIL",
                "bn-train-16x16-fp32-nchw",
                "wrong: max rel 5.0e-1, abs 5.0e-1 (grad_input), over the tolerance 1e-3; MIOpen: BnFwdTrainingSpatialSingle, BnBwdTrainingSpatialSingle; first run [..] s, second [..] s",
            ),
            &row(
                "ok",
                "bn-train-16x16-fp32-nhwc",
                "max rel 0.0e0, abs 0.0e0 (y), within 1e-3; MIOpen: BnFwdTrainingSpatialSingle, BnBwdTrainingSpatialSingle; first run [..] s, second [..] s",
            ),
            &row(
                "ok",
                "bn-eval-40x40-fp16-nhwc",
                "max rel 0.0e0, abs 0.0e0 (y), within 1e-2; MIOpen: BnFwdInference; first run [..] s, second [..] s",
            ),
            &row(
                "ok",
                "convdw3x3-fp16-nchw",
                "max rel 0.0e0, abs 0.0e0 (y), within 1e-2; MIOpen: fwd ConvOclDirectFwd, bwd ConvOclDirectFwd, wrw ConvOclBwdWrW2<1>; first run [..] s, second [..] s",
            ),
            "outside MIOpen (reported, never blamed on MIOpen):",
            &row(
                "ok",
                "matmul-fp16",
                "rocBLAS: max rel 0.0e0, abs 0.0e0 (y), within 1e-2; first run [..] s, second [..] s",
            ),
            &row(
                "FAIL",
                "nonzero",
                "hipcub: crash (signal 6 SIGABRT): Memory access fault by GPU node-1 (Agent handle: 0x55d1c2e0a3c0) on address 0x7f3a1c000000. Reason: Page not present or supervisor privilege.",
            ),
        ],
    );
    let rows = |status: &str| out.lines().filter(|l| l.starts_with(status)).count();
    // The three failed MIOpen cases, nonzero, and the smoke check.
    assert_eq!(rows("FAIL"), 5, "{out}");
    // 32 MIOpen cases, the 11 others, and verify's 7 checks of the install.
    assert_eq!(rows("ok "), 32 + 11 + 7, "{out}");
}

#[test]
fn the_json_report_validates_against_its_schema_and_writes_home_as_tilde() {
    let sb = installed_on_rdna1();
    let root = sb.root.display().to_string();
    let env = [("FAKE_TORCH_SMOKE", MISBEHAVE), ("HOME", root.as_str())];
    // A python named relative to the directory verify runs in, as a user
    // types `--python venv/bin/python`; the battery's children run in `/`.
    std::fs::create_dir_all(sb.root.join("venv/bin")).unwrap();
    let py = sb.root.join("venv/bin/python");
    std::fs::write(&py, "#!/bin/sh\nexec python3 \"$@\"\n").unwrap();
    std::fs::set_permissions(&py, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args = ["--timeout", "5", "--json", "--python", "venv/bin/python"];
    let run = smoke(&sb, &args, &env).check_fails();
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let schema_file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/inspect/verify/verify.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_file).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema is a JSON Schema");
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{}", run.stdout);
    // The schema is strict enough to catch a wrong document.
    let mut bad = doc.clone();
    bad["smoke"]["cases"][0]["outcome"] = "hung".into();
    assert!(!validator.is_valid(&bad));

    assert!(
        !run.stdout.contains(&root),
        "the sandbox (home) is named:\n{}",
        run.stdout
    );
    let smoke = &doc["smoke"];
    assert_eq!(
        smoke["where"]["miopen"]["path"],
        "~/site/torch/lib/libMIOpen.so"
    );
    assert_eq!(smoke["where"]["miopen"]["fixed"], true);
    let case = |name: &str| {
        smoke["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no case {name}"))
            .clone()
    };
    let outcomes: Vec<(&str, &str)> = [
        ("conv3x3-fp32-nchw", "hang"),
        ("conv1x1-fp16-nhwc", "crash"),
        ("bn-train-16x16-fp32-nchw", "wrong"),
        ("bn-train-40x40-fp16-nhwc", "ok"),
        ("nonzero", "crash"),
    ]
    .to_vec();
    for (name, outcome) in outcomes {
        assert_eq!(case(name)["outcome"], outcome, "{name}");
    }
    let wrong = case("bn-train-16x16-fp32-nchw");
    assert_eq!(wrong["max_rel"], 0.5);
    assert_eq!(wrong["tolerance"], 1e-3);
    assert_eq!(wrong["outputs"].as_array().unwrap().len(), 6, "{wrong}");
    let ok = case("conv3x3s2-fp16-nhwc");
    assert_eq!(ok["max_abs"], 0.0);
    assert_eq!(
        ok["commands"][0],
        "MIOpenDriver conv -n 2 -c 8 -H 32 -W 32 -k 16 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -g 1 -F 0 -t 1"
    );
    assert_eq!(case("matmul-fp32")["solvers"], serde_json::json!([]));
}

#[test]
fn the_battery_needs_a_torch_that_sees_the_gpu_and_stops_at_its_limit() {
    // With no GPU at all, nothing is checked: battery.rs's tests.
    let sb = installed_on_rdna1();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let run = smoke(&sb, &[], &[("FAKE_TORCH_CUDA", "0")]).check_fails();
    assert_eq!(
        check_row(&run.stdout, "smoke"),
        "FAIL  smoke     the battery could not start: import torch failed (exit status: 1): torch.cuda.is_available() is False: torch sees no GPU"
    );

    // Every convolution hangs: past 10 limits the rest are not run.
    let run = smoke(
        &sb,
        &["--timeout", "2"],
        &[("FAKE_TORCH_SMOKE", "conv*=hang")],
    )
    .check_fails();
    let out = &run.stdout;
    assert!(
        line_matches(
            "FAIL  smoke     [..] of 35 MIOpen cases failed on AMD Radeon RX 5600 XT (gfx1010): conv3x3-fp32-nchw (hang), [..], [..] not run (the battery's limit of 20 s); outside MIOpen 0 of 12 ok",
            check_row(out, "smoke")
        ),
        "{out}"
    );
    assert_lines(
        out,
        &[
            "smoke battery 2: 47 cases, each in a child process of its own; limit 2 s a case, 20 s in all",
            &row(
                "skip",
                "sdpa-causal",
                "not run: the battery's limit of 20 s was reached",
            ),
            &row(
                "skip",
                "bn-eval-40x40-fp16-nhwc",
                "not run: the battery's limit of 20 s was reached",
            ),
        ],
    );
}

/// Issue 61: a CUDA torch on an AMD card imports, then sees no GPU; the
/// battery names the torch as CUDA's and the torch for the card as the
/// fix, not the render and video groups.
#[test]
fn a_cuda_torch_on_an_amd_card_is_named_as_cudas() {
    let sb = Sandbox::new();
    let t = sb.cuda_torch();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let state = sb.state();
    let run = Run::from(
        sb.cmd()
            .args([
                "verify",
                "--detail",
                "--smoke",
                "--state-dir",
                &state,
                "--torch-dir",
            ])
            .arg(&t.dir)
            .output()
            .unwrap(),
    )
    .check_fails();
    let cuda = format!(
        "torch 2.15.0+cu132 at {} is a CUDA 13.2 build, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so",
        t.dir.display()
    );
    // --torch-dir: which python's pip is torch's is not known here.
    let fix = "fix: install the torch built for gfx1010 (the card in this machine) in place of this one (pip keeps a torch it has, whatever the index), with the pip of torch's environment: `pip uninstall --yes torch && pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`, then run this again";
    assert_eq!(
        run.stdout,
        format!(
            "verdict: problems to fix: torch, smoke
skip  prefix    no rdna1-patch install in {state} to check; --smoke judges the torch as it is
FAIL  torch     {cuda}
                {fix}
FAIL  smoke     the battery could not start: {cuda}
                {fix}
"
        )
    );
    assert_eq!(run.stderr, "");
}
