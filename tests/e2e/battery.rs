//! The battery's classes, one per misbehaviour of the fake torch's ops;
//! Ctrl-C in the middle of it; what verify says it checked; the Markdown
//! report (docs/rows.md, docs/verify.md).

use std::path::Path;

use crate::smoke::{assert_lines, installed_on_rdna1, row, smoke};
use crate::support::{HIP, Run, Sandbox, TorchKind, gpus, line_matches};

/// The check rows of a report (the lines before the battery's block), each
/// against its pattern, and no other line.
fn assert_checks(out: &str, want: &[&str]) {
    let got: Vec<&str> = out.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(got.len(), want.len(), "the checks:\n{out}");
    for (w, g) in want.iter().zip(&got) {
        assert!(
            line_matches(w, g),
            "no line like\n{w}\nbut\n{g}\nin:\n{out}"
        );
    }
}

fn validate(doc: &serde_json::Value) {
    let schema_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/inspect/verify/verify.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_file).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema is a JSON Schema");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
}

fn case<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["smoke"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

/// A case's object with what varies from run to run (times) taken out.
fn steady(c: &serde_json::Value) -> serde_json::Value {
    let mut c = c.clone();
    let o = c.as_object_mut().unwrap();
    o.remove("elapsed");
    if o["seconds"].is_array() {
        o.insert("seconds".into(), "[..]".into());
    }
    if let Some(d) = o["detail"].as_str() {
        let cut = d.find("; first run").unwrap_or(d.len());
        let d = d[..cut].to_owned();
        o.insert("detail".into(), d.into());
    }
    c
}

const PER_OP: &str = "lstm-fp32=nocode,masked-select=nocode,scatter-add=crash,gru-fp32=hang,sort-topk=times=1.0011,sdpa=times=1.0009,repr=wrong";

#[test]
fn each_misbehaviour_of_an_op_is_its_own_class() {
    let sb = installed_on_rdna1();
    let run = smoke(&sb, &["--timeout", "4"], &[("FAKE_TORCH_SMOKE", PER_OP)]).check_fails();
    let out = &run.stdout;
    let lib = sb.root.join("site/torch/lib");
    let lib = lib.display();
    assert_lines(
        out,
        &[
            "FAIL  smoke     2 of 35 MIOpen cases failed on AMD Radeon RX 5600 XT (gfx1010): lstm-fp32 (no-code), gru-fp32 (hang); outside MIOpen, not MIOpen's: masked-select (no-code), sort-topk (wrong), scatter-add (crash), repr (wrong)",
            &row(
                "FAIL",
                "lstm-fp32",
                &format!(
                    "no code for the chip: HIP error: invalid device function (in MIOpen, mapped from {lib}/libMIOpen.so: the case's library); MIOpen: not called"
                ),
            ),
            &row(
                "FAIL",
                "gru-fp32",
                "hang: stopped after 4.[..] s (limit 4 s); MIOpen: not called",
            ),
            &row(
                "FAIL",
                "masked-select",
                &format!(
                    "hipcub: no code for the chip: HIP error: invalid device function (in torch's own kernels, mapped from {lib}/libtorch_hip.so: the case's library)"
                ),
            ),
            &row(
                "FAIL",
                "scatter-add",
                "torch: crash (signal 6 SIGABRT): Memory access fault by GPU node-1 (Agent handle: 0x55d1c2e0a3c0) on address 0x7f3a1c000000. Reason: Page not present or supervisor privilege.",
            ),
            // Just over fp32's 1e-3, and just under it.
            &row(
                "FAIL",
                "sort-topk",
                "hipcub: wrong: max rel 1.1e-3, abs 1.1e-3 (sorted), over the tolerance 1e-3; first run [..] s, second [..] s",
            ),
            &row(
                "ok",
                "sdpa",
                "torch: max rel 9.0e-4, abs 9.0e-4 (y), within 1e-3; first run [..] s, second [..] s",
            ),
            &row(
                "FAIL",
                "repr",
                "torch: wrong: the text 'tensor(1.5, size=[4, 5])', the CPU's 'tensor(1.0, size=[4, 5])' in repr; first run [..] s, second [..] s",
            ),
            &row(
                "ok",
                "unique",
                "hipcub: max rel 0.0e0, abs 0.0e0 (values), exact; first run [..] s, second [..] s",
            ),
        ],
    );
    let rows = |status: &str| out.lines().filter(|l| l.starts_with(status)).count();
    // Six cases and the smoke check; 41 cases and verify's 7 checks ok.
    assert_eq!((rows("FAIL"), rows("ok ")), (7, 41 + 7), "{out}");

    let run = smoke(
        &sb,
        &["--timeout", "4", "--json"],
        &[("FAKE_TORCH_SMOKE", PER_OP)],
    )
    .check_fails();
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    validate(&doc);
    assert_eq!(doc["smoke"]["status"], "complete");
    let base = |name: &str, library: &str, op: &str, shape: serde_json::Value| {
        serde_json::json!({
            "name": name, "library": library, "op": op, "dtype": "fp32", "layout": "nchw",
            "shape": shape, "tolerance": 1e-3, "raised_by": null, "max_abs": null,
            "max_rel": null, "outputs": [], "seconds": null, "solvers": [], "commands": [],
        })
    };
    let with = |mut v: serde_json::Value, more: serde_json::Value| {
        v.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        v
    };
    let lib = sb.root.join("site/torch/lib").display().to_string();
    let want = [
        with(
            base(
                "lstm-fp32",
                "MIOpen",
                "lstm",
                serde_json::json!([4, 12, 16, 32]),
            ),
            serde_json::json!({
                "status": "fail", "outcome": "no-code",
                "detail": format!("no code for the chip: HIP error: invalid device function (in MIOpen, mapped from {lib}/libMIOpen.so: the case's library); MIOpen: not called"),
                "raised_by": {"library": "MIOpen", "path": format!("{lib}/libMIOpen.so"), "from": "maps"},
            }),
        ),
        with(
            base(
                "scatter-add",
                "torch",
                "scatter-add",
                serde_json::json!([4096, 64]),
            ),
            serde_json::json!({
                "status": "fail", "outcome": "crash",
                "detail": "torch: crash (signal 6 SIGABRT): Memory access fault by GPU node-1 (Agent handle: 0x55d1c2e0a3c0) on address 0x7f3a1c000000. Reason: Page not present or supervisor privilege.",
            }),
        ),
        with(
            base(
                "gru-fp32",
                "MIOpen",
                "gru",
                serde_json::json!([4, 12, 16, 32]),
            ),
            serde_json::json!({"status": "fail", "outcome": "hang"}),
        ),
    ];
    for w in want {
        let mut got = steady(case(&doc, w["name"].as_str().unwrap()));
        if w["outcome"] == "hang" {
            assert!(
                line_matches(
                    "hang: stopped after 4.[..] s (limit 4 s); MIOpen: not called",
                    got["detail"].as_str().unwrap()
                ),
                "{got}"
            );
            got.as_object_mut().unwrap().remove("detail");
        }
        assert_eq!(got, w);
    }
    let over = case(&doc, "sort-topk");
    let rel = over["max_rel"].as_f64().unwrap();
    assert!((rel - 1.1e-3).abs() < 1e-9, "{over}");
    assert_eq!(
        (
            &over["outcome"],
            &over["outputs"][0]["name"],
            &over["outputs"][0]["exact"]
        ),
        (&"wrong".into(), &"sorted".into(), &false.into())
    );
    // The indices are compared exactly: off by 0.1 %, they are wrong too.
    assert_eq!(over["outputs"][1]["exact"], true, "{over}");
    let under = case(&doc, "sdpa");
    assert_eq!(
        (&under["outcome"], &under["status"]),
        (&"ok".into(), &"ok".into())
    );
    assert!(
        (under["max_rel"].as_f64().unwrap() - 9e-4).abs() < 1e-9,
        "{under}"
    );
}

/// Start `verify --smoke` with `extra` in a process group of its own, wait
/// until its second case hangs, then Ctrl-C the group as a terminal would.
fn ctrl_c_in_the_second_case(sb: &Sandbox, extra: &[&str]) -> Run {
    // A token only this run's processes carry, to find its hanging case.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let token = format!("marker-{}-{nanos}", std::process::id());
    let misbehave = format!("conv3x3-fp32-nhwc=hang,{token}=hang");
    let state = sb.state();
    let mut c = sb.cmd();
    c.args(["verify", "--detail", "--smoke", "--timeout", "60"])
        .args([
            "--prefix",
            sb.prefix.to_str().unwrap(),
            "--state-dir",
            &state,
        ])
        .args(extra)
        .env("FAKE_TORCH_SMOKE", &misbehave)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    let child = c.spawn().unwrap();
    let pgid = child.id();
    let started = std::time::Instant::now();
    while !hanging(&token, "conv3x3-fp32-nhwc") {
        assert!(
            started.elapsed().as_secs() < 50,
            "the second case never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let sent = std::process::Command::new("kill")
        .args(["-INT", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(sent.success());
    let run = Run::from(child.wait_with_output().unwrap());
    assert_eq!(run.code, Some(130), "{}\n{}", run.stdout, run.stderr);
    assert!(started.elapsed().as_secs() < 50, "the hang was not stopped");
    assert_eq!(
        run.stderr,
        "error: Ctrl-C stopped rdna1-patch; the report says how far it got\nhelp: run the same command again to finish\n"
    );
    run
}

#[test]
fn ctrl_c_ends_the_battery_with_one_json_report_that_says_so() {
    let sb = installed_on_rdna1();
    let run = ctrl_c_in_the_second_case(&sb, &["--json"]);
    // One document: serde_json refuses trailing data ("Extra data").
    let doc: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: not one JSON document:\n{}", run.stdout));
    validate(&doc);
    assert_eq!(doc["ok"], false);
    assert_eq!(
        doc["verdict"],
        "the battery was interrupted (Ctrl-C) after 1 of 47 cases; 1 warning"
    );
    let smoke_row = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "smoke")
        .unwrap();
    assert_eq!(
        smoke_row["detail"],
        "1 of 35 MIOpen cases within tolerance on AMD Radeon RX 5600 XT (gfx1010), 34 not run (Ctrl-C stopped the battery); outside MIOpen 0 of 12 ok"
    );
    assert_eq!(doc["smoke"]["status"], "interrupted");
    let cases = doc["smoke"]["cases"].as_array().unwrap();
    let outcomes: Vec<&str> = cases
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes[..2], ["ok", "interrupted"]);
    assert!(
        outcomes[2..].iter().all(|o| *o == "not-run"),
        "{outcomes:?}"
    );
    assert_eq!(
        cases[1]["detail"],
        "interrupted: Ctrl-C stopped the battery while this case ran"
    );
    assert_eq!(
        cases[46]["detail"],
        "not run: the battery was interrupted (Ctrl-C) before it"
    );
}

#[test]
fn ctrl_c_ends_the_text_report_saying_so() {
    let sb = installed_on_rdna1();
    let run = ctrl_c_in_the_second_case(&sb, &[]);
    let out = &run.stdout;
    assert_eq!(
        out.lines().next(),
        Some("verdict: the battery was interrupted (Ctrl-C) after 1 of 47 cases; 1 warning"),
        "{out}"
    );
    assert_lines(
        out,
        &[
            "warn  smoke     1 of 35 MIOpen cases within tolerance on AMD Radeon RX 5600 XT (gfx1010), 34 not run (Ctrl-C stopped the battery); outside MIOpen 0 of 12 ok",
            &row(
                "skip",
                "conv3x3-fp32-nhwc",
                "interrupted: Ctrl-C stopped the battery while this case ran",
            ),
            &row(
                "skip",
                "conv3x3-fp16-nchw",
                "not run: the battery was interrupted (Ctrl-C) before it",
            ),
            &row(
                "skip",
                "sdpa-causal",
                "not run: the battery was interrupted (Ctrl-C) before it",
            ),
        ],
    );
    let skipped = out.lines().filter(|l| l.starts_with("skip ")).count();
    assert_eq!(skipped, 46, "{out}");
}

/// Whether a process of this test (its environment holds `token`) is
/// running the battery's case `name`.
fn hanging(token: &str, name: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|p| {
        let read = |f: &str| std::fs::read(p.path().join(f)).unwrap_or_default();
        let has = |bytes: Vec<u8>, s: &str| String::from_utf8_lossy(&bytes).contains(s);
        has(read("cmdline"), name) && has(read("environ"), token)
    })
}

/// A sandbox with a ROCm torch in `site/torch`, no prefix and no install,
/// and an RX 5600 XT.
pub(crate) fn torch_not_fixed() -> Sandbox {
    let sb = Sandbox::new();
    sb.torch(TorchKind::Rocm, HIP);
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    sb
}

/// `verify` with `args`, the sandbox's torch dir, state dir and prefix
/// (which does not exist).
pub(crate) fn verify_torch(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Run {
    let torch = sb.root.join("site/torch");
    let mut all = vec!["--torch-dir", torch.to_str().unwrap()];
    all.extend(args);
    smoke(sb, &all, env)
}

#[test]
fn smoke_without_a_prefix_judges_the_torch_as_it_is() {
    let sb = torch_not_fixed();
    let run = verify_torch(&sb, &[], &[]).ok();
    assert_checks(
        &run.stdout,
        &[
            "verdict: no problem found",
            "skip  prefix    [..]/prefix does not exist: no prefix of rdna1-patch to check; --smoke judges the torch as it is",
            "ok    layout    torch/lib: torch loads [..]/site/torch/lib/libMIOpen.so",
            "ok    smoke     35 of 35 MIOpen cases within tolerance on AMD Radeon RX 5600 XT (gfx1010); outside MIOpen 12 of 12 ok",
        ],
    );
}

#[test]
fn a_battery_that_ran_nothing_checked_nothing_and_exits_3() {
    let sb = torch_not_fixed();
    sb.set_gpus(gpus("no-gpu"));
    let run = verify_torch(&sb, &[], &[]);
    assert_eq!(run.code, Some(3), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.stderr, "");
    assert_checks(
        &run.stdout,
        &[
            "verdict: nothing was checked: none of the battery's 47 cases ran",
            "skip  prefix    [..]/prefix does not exist: no prefix of rdna1-patch to check; --smoke judges the torch as it is",
            "ok    layout    torch/lib: torch loads [..]/site/torch/lib/libMIOpen.so",
            "skip  smoke     nothing was checked: no AMD GPU in the KFD topology ([..]/no-gpu/class/kfd/kfd/topology/nodes), so no case of the battery ran",
            "                fix: the battery runs on an AMD GPU the kernel's amdgpu driver shows in /sys/class/kfd; in a container, pass it /dev/kfd and /dev/dri",
        ],
    );

    // With a GPU and no torch named and none installed: python3's torch,
    // as --smoke's help says (issue 64; it was `skip torch no
    // --python/--torch-dir given`, and nothing checked).
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let run = smoke(&sb, &[], &[]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let head: Vec<&str> = run.stdout.lines().take(4).collect();
    assert_checks(
        &head.join("\n"),
        &[
            "verdict: no problem found",
            "skip  prefix    [..]/prefix does not exist: no prefix of rdna1-patch to check; --smoke judges the torch as it is",
            "ok    layout    torch/lib: torch loads [..]/site/torch/lib/libMIOpen.so",
            "ok    smoke     35 of 35 MIOpen cases within tolerance on [..]",
        ],
    );
    sb.set_gpus(gpus("no-gpu"));

    let run = verify_torch(&sb, &["--json"], &[]);
    assert_eq!(run.code, Some(3));
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    validate(&doc);
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["smoke"]["status"], "nothing-run");
    let cases = doc["smoke"]["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 47);
    assert!(cases.iter().all(|c| c["outcome"] == "not-run"
        && c["status"] == "skip"
        && line_matches(
            "not run: no AMD GPU in the KFD topology ([..]), so no case of the battery ran",
            c["detail"].as_str().unwrap()
        )));
}

#[test]
fn a_torch_dir_that_is_not_a_torch_is_an_error() {
    let sb = torch_not_fixed();
    let missing = sb.root.join("nowhere/torch");
    smoke(&sb, &["--torch-dir", missing.to_str().unwrap()], &[]).fails_with(
        "error: --torch-dir [..]/nowhere/torch does not exist
help: pass the torch package directory, the one `python -c 'import torch; print(torch.__path__[0])'` prints, or the python with --python",
    );
    let site = sb.root.join("site");
    sb.run(&["verify", "--torch-dir", site.to_str().unwrap()])
        .fails_with(
            "error: [..]/site is not a torch package: it has no version.py
help: pass the directory that `python -c 'import torch; print(torch.__path__[0])'` prints",
        );
}

/// A real venv (no pip) whose site-packages holds a fake CUDA torch.
fn cuda_venv(sb: &Sandbox) -> std::path::PathBuf {
    let venv = sb.root.join("cuda-venv");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages");
    let torch = rdna1_testkit::FakeTorch::create(
        &site,
        crate::support::runtime(),
        TorchKind::Cpu,
        "2.5.1+cu124",
        HIP,
    );
    let version = torch.dir.join("version.py");
    let text = std::fs::read_to_string(&version).unwrap();
    std::fs::write(
        &version,
        text.replace("cuda: Optional[str] = None", "cuda: Optional[str] = '12.4'"),
    )
    .unwrap();
    venv.join("bin/python")
}

#[test]
fn runtime_names_the_torch_it_was_given_without_a_prefix() {
    let sb = Sandbox::new();
    let python = cuda_venv(&sb);
    let prefix = sb.prefix.display().to_string();
    let run = sb
        .run(&[
            "verify",
            "--runtime",
            "--prefix",
            &prefix,
            "--python",
            python.to_str().unwrap(),
        ])
        .check_fails();
    assert_checks(
        &run.stdout,
        &[
            "verdict: problems to fix: prefix, torch",
            "FAIL  prefix    [..]/prefix does not exist",
            "                fix: run `rdna1-patch build miopen[..]`, or point --prefix at the prefix it installed to",
            "FAIL  torch     torch 2.5.1+cu124 at [..]/cuda-venv/lib/python3.[..]/site-packages/torch is a CUDA 12.4 build, not a ROCm one: torch.version.hip is None and torch/lib has no libMIOpen.so",
            "                fix: [..]",
        ],
    );
}
