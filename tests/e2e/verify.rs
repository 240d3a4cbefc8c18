//! `verify` against the fixture build and fake torch packages, and `doctor`
//! against recorded sysfs trees.

use crate::support::{HIP, Run, Sandbox, TorchKind, check_row, fat_library, gpus};

/// doctor's report (stdout) on `python3`'s torch, with
/// HSA_OVERRIDE_GFX_VERSION=10.3.0 or with it unset.
fn doctor_report(sb: &Sandbox, with_override: bool) -> String {
    let mut c = sb.cmd();
    c.args([
        "doctor",
        "--detail",
        "--need-space",
        "0",
        "--python",
        "python3",
    ]);
    if with_override {
        c.env("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
    } else {
        c.env_remove("HSA_OVERRIDE_GFX_VERSION");
    }
    String::from_utf8(c.output().unwrap().stdout).unwrap()
}

/// The line of check `name`, e.g. "ok    prefix    ...".
fn line<'a>(run: &'a Run, name: &str) -> &'a str {
    check_row(&run.stdout, name)
}

#[test]
fn verify_on_an_untouched_install_is_all_ok() {
    let sb = Sandbox::built();
    let run = sb.verify(&[]).ok();
    assert!(line(&run, "prefix").starts_with("ok "), "{}", run.stdout);
    assert!(line(&run, "prefix").contains("match MD5SUMS"));
    assert!(line(&run, "patches").starts_with("ok "), "{}", run.stdout);
    assert!(
        line(&run, "patches").contains("all 3 markers"),
        "{}",
        run.stdout
    );
    assert!(line(&run, "torch").starts_with("skip"), "{}", run.stdout);
    assert!(line(&run, "links").starts_with("ok "), "{}", run.stdout);
    let json = sb.verify(&["--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["checks"][0]["name"], "prefix");
    assert_eq!(v["checks"][0]["status"], "ok");
}

/// Issue 46, 2: with no build at --prefix, install's dry run and verify's
/// prefix row say so in words, never "(os error 2)".
#[test]
fn no_build_at_the_prefix_is_said_in_words() {
    let sb = Sandbox::new();
    sb.torch(TorchKind::Rocm, HIP);
    let help = "help: run `rdna1-patch build miopen[..]` first, or point --prefix at the prefix it installed to";
    let absent = format!("{} does not exist", sb.prefix.display());
    sb.install(&["--dry-run"])
        .fails_with(&format!("error: no usable build: {absent}\n{help}"));
    let run = sb.verify(&[]).check_fails();
    assert_eq!(
        line(&run, "prefix"),
        format!("FAIL  prefix    {absent}"),
        "{}",
        run.stdout
    );
    std::fs::create_dir_all(&sb.prefix).unwrap();
    let empty = format!(
        "{} holds no build: it has no share/rdna1-patch/provenance.toml",
        sb.prefix.display()
    );
    sb.install(&["--dry-run"])
        .fails_with(&format!("error: no usable build: {empty}\n{help}"));
    let run = sb.verify(&[]).check_fails();
    assert_eq!(line(&run, "prefix"), format!("FAIL  prefix    {empty}"));
    assert!(!run.stdout.contains("os error"), "{}", run.stdout);
}

#[test]
fn verify_proves_the_patched_library_is_loaded_after_install() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    // Before the install: torch's own library is found, and named.
    let run = sb.verify(&["--python", "python3"]).check_fails();
    assert!(line(&run, "torch").starts_with("FAIL"), "{}", run.stdout);
    assert!(
        line(&run, "torch").contains("is torch's own"),
        "{}",
        run.stdout
    );
    sb.install(&[]).ok();
    // After: the transaction's torch is checked without being named.
    let run = sb.verify(&["--runtime"]).ok();
    for name in ["prefix", "patches", "versions", "torch", "links", "runtime"] {
        assert!(
            line(&run, name).starts_with("ok "),
            "{name}: {}",
            run.stdout
        );
    }
    assert!(line(&run, "torch").contains("build-id"), "{}", run.stdout);
    assert!(
        line(&run, "runtime").contains(&format!(
            "one HIP runtime, {}/libamdhip64.so",
            torch.lib.display()
        )),
        "{}",
        run.stdout
    );
}

#[test]
fn a_changed_file_in_the_prefix_is_named() {
    let sb = Sandbox::built();
    std::fs::write(sb.prefix.join("include/miopen/miopen.h"), "/* edited */\n").unwrap();
    std::fs::remove_file(sb.prefix.join("lib/libMIOpen.so")).unwrap();
    let run = sb.verify(&[]).check_fails();
    let l = line(&run, "prefix");
    assert!(l.starts_with("FAIL"), "{}", run.stdout);
    assert!(l.contains("include/miopen/miopen.h: MD5"), "{l}");
    assert!(l.contains("lib/libMIOpen.so: missing"), "{l}");
}

#[test]
fn a_missing_marker_fails_by_name() {
    let sb = Sandbox::new();
    // The patch declares a marker its code does not carry.
    sb.edit_patch(
        "0003-find-fast-mode.patch",
        "Marker: [RDNA1 PATCH] convolution_api: fast find",
        "Marker: [RDNA1 PATCH] convolution_api: faster find",
    );
    sb.build(&[]).ok();
    let run = sb.verify(&[]).check_fails();
    let l = line(&run, "patches");
    assert!(l.starts_with("FAIL"), "{}", run.stdout);
    assert!(
        l.contains(
            "lacks \"[RDNA1 PATCH] convolution_api: faster find\" (0003-find-fast-mode.patch)"
        ),
        "{l}"
    );
}

#[test]
fn a_second_hip_runtime_is_caught_in_links_and_at_runtime() {
    let sb = Sandbox::built();
    sb.torch(TorchKind::Rocm, HIP);
    let run = sb.install(&["--no-relink"]).ok();
    run.says("second copy");
    let run = sb.verify(&["--runtime"]).check_fails();
    let links = line(&run, "links");
    assert!(links.starts_with("FAIL"), "{}", run.stdout);
    assert!(
        links.contains("rocm/lib/libamdhip64.so.6 besides torch's libamdhip64.so"),
        "{links}"
    );
    let rt = line(&run, "runtime");
    assert!(
        rt.starts_with("FAIL") && rt.contains("2 HIP runtimes are mapped"),
        "{rt}"
    );
}

#[test]
fn doctor_says_plainly_what_blocks_a_build() {
    let sb = Sandbox::new();
    // A ROCm torch with code for the card, so that what blocks is the
    // build's alone (one whose GPU code cannot be read is not checked).
    crate::in_place::torch_of(
        &sb,
        "2.5.1+rocm6.2",
        crate::support::HIP,
        &["gfx1010", "gfx1030"],
    );
    let run = sb
        .run(&["doctor", "--rocm", "/nonexistent/rocm", "--need-space", "0"])
        .check_fails();
    for needle in [
        "FAIL  rocm      no ROCm at /nonexistent/rocm",
        "FAIL  hipcc",
        "warn  gpu       no GPU visible: the KFD topology (",
        "ok    cmake",
        "ok    git       git 2.",
    ] {
        assert!(run.stdout.contains(needle), "{needle}:\n{}", run.stdout);
    }
    let fails: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .collect();
    // One cause, one fix: the missing compiler and hipcc are shown under
    // the missing ROCm, without fixes of their own, and the verdict leads.
    assert_eq!(
        fails,
        [
            "FAIL  rocm      no ROCm at /nonexistent/rocm (profile rocm-6.2.4 wants ROCm 6.2.4)",
            "FAIL  compiler  /nonexistent/rocm/llvm/bin/amdclang++ is not there, and no hipconfig names HIP's clang (because of rocm above)",
            "FAIL  hipcc     no hipcc or amdclang++ in /nonexistent/rocm or on PATH (because of rocm above)",
        ],
        "only ROCm blocks a build here"
    );
    assert!(
        run.stdout.starts_with(
            "verdict: torch 2.5.1+rocm6.2, no GPU visible: 1 problem to fix: rocm (2 more check(s) fail because of it, shown under it)"
        ),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("fix: install ROCm's compiler"),
        "{}",
        run.stdout
    );

    // A ROCm with hipcc and, as a distribution lays it out, a hipconfig that
    // names clang elsewhere; and a recorded RX 5600 XT: nothing blocks.
    std::fs::create_dir_all(sb.rocm.join("bin")).unwrap();
    std::fs::write(sb.rocm.join("bin/hipcc"), "#!/bin/sh\n").unwrap();
    let llvm = sb.root.join("llvm-bin");
    std::fs::create_dir_all(&llvm).unwrap();
    std::os::unix::fs::symlink(which::which("c++").unwrap(), llvm.join("clang++")).unwrap();
    std::fs::write(
        sb.rocm.join("bin/hipconfig"),
        format!("#!/bin/sh\necho {}\n", llvm.display()),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(sb.rocm.join("bin/hipconfig"))
        .status()
        .unwrap();
    let rocm = sb.rocm.display().to_string();
    // doctor with this ROCm, a sysfs tree and a space need.
    let doctor = |tree: &str, need: &str| -> Vec<String> {
        sb.set_gpus(gpus(tree));
        ["doctor", "--detail", "--rocm", &rocm, "--need-space", need]
            .map(String::from)
            .to_vec()
    };
    let base = doctor("rx5600xt-gfx1010", "0");
    let base: Vec<&str> = base.iter().map(String::as_str).collect();
    let run = sb.run(&base).ok();
    for needle in [
        "ok    rocm      6.2.4 at",
        &format!(
            "ok    compiler  {}/clang++ ({}/llvm/bin/amdclang++ is not there; hipconfig --hipclangpath names this one, and build will use it)",
            llvm.display(),
            sb.rocm.display()
        ),
        "ok    gpu       gfx1010 Navi 10 (RX 5600/5700 series) at 0000:03:00.0 (node 1, gfx_target_version 100100): RDNA1",
        "ok    amdgpu    noretry=-1 mtype_local=-1",
        "ok    override  HSA_OVERRIDE_GFX_VERSION is not set",
    ] {
        assert!(run.stdout.contains(needle), "{needle}:\n{}", run.stdout);
    }

    // The override spoofs gfx1030; the topology still names the real chip.
    let out = sb
        .cmd()
        .args(&base)
        .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("warn  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report gfx1030 and load code built for that chip, but torch carries gfx101x code of its own"),
        "{stdout}"
    );
    assert!(stdout.contains("ok    gpu       gfx1010"), "{stdout}");

    let mut args = doctor("rx6800-gfx1030", "0");
    args.push("--json".into());
    let run = sb
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .ok();
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "gpu")
        .unwrap();
    assert_eq!(check["status"], "warn");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("gfx1030 Navi 21"),
        "{check}"
    );

    // Too little disk blocks a build.
    let args = doctor("rx5600xt-gfx1010", "100000000");
    let run = sb
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .check_fails();
    run.prints("FAIL  disk");
}

/// Issue 46, 4: under HSA_OVERRIDE_GFX_VERSION, with the torch named by
/// --python (TheRock's gfx101X package, whose libtorch_hip.so holds no
/// readable code), the route and override rows agree: MIOpen sees the
/// override's chip until it is unset; neither asks for --python again.
#[test]
fn doctors_route_and_override_rows_agree_under_the_override() {
    let sb = Sandbox::new();
    crate::rocm_sdk::sdk(&sb, &["gfx101X-dgpu"]);
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let out = doctor_report(&sb, true);
    let route = check_row(&out, "route");
    assert!(route.starts_with("warn  route     "), "{out}");
    // The plan's first step is the override's (issue 70), the MIOpen fix
    // after it; the kernels row promises nothing before.
    assert!(
        route.starts_with(
            "warn  route     unset HSA_OVERRIDE_GFX_VERSION first: MIOpen seeing gfx1030 instead of gfx1010: torch has their own code"
        ),
        "{out}"
    );
    assert!(
        out.contains("step 2 of 2: after unsetting HSA_OVERRIDE_GFX_VERSION, run doctor again: MIOpen's batch-norm fix for gfx1010"),
        "{out}"
    );
    assert!(
        check_row(&out, "kernels").starts_with("warn  kernels   "),
        "{out}"
    );
    assert!(
        check_row(&out, "override").starts_with(
            "warn  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report gfx1030 and load code built for that chip, but torch carries gfx101x code of its own"
        ),
        "{out}"
    );
    assert!(out.contains("fix: unset HSA_OVERRIDE_GFX_VERSION"), "{out}");
    assert!(
        !out.contains("--python PATH"),
        "asks for what was given:\n{out}"
    );
}

#[test]
fn doctors_override_advice_follows_the_code_objects_in_torch() {
    let sb = Sandbox::new();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let doctor = |with_override: bool| doctor_report(&sb, with_override);
    let line = |out: &str, name: &str| check_row(out, name).to_owned();
    // A pytorch.org-style wheel: code for gfx900 and gfx1030, none for gfx101x.
    let lib = torch.lib.join("libtorch_hip.so");
    std::fs::copy(fat_library(&sb.root, &["gfx900", "gfx1030"]), &lib).unwrap();
    let out = doctor(true);
    assert!(
        line(&out, "torch-gpu").ends_with("has code for gfx1030, gfx900 (no gfx101x)"),
        "{out}"
    );
    let o = line(&out, "override");
    // It runs only under the override, where no fix acts: the torch for
    // the card is the plan's step (issue 70), never "unset" alone.
    assert!(o.starts_with("warn  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 (ROCm reports gfx1030, the card is gfx1010): torch has no code for gfx1010 itself, so it runs only under HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{o}");
    assert!(!out.contains("fix: unset"), "{out}");
    // Without the override it runs nothing on the card: a failure, the
    // override's under torch-gpu's (one cause, one fix: the torch for it).
    let out = doctor(false);
    assert_eq!(
        line(&out, "torch-gpu"),
        format!(
            "FAIL  torch-gpu {} has code for gfx1030, gfx900 and none for gfx1010: torch runs nothing on that card",
            lib.display()
        ),
        "{out}"
    );
    assert_eq!(
        line(&out, "override"),
        "FAIL  override  HSA_OVERRIDE_GFX_VERSION is not set, and torch has no gfx101x code: on an RDNA1 card its GPU operators will not load (because of torch-gpu above)",
        "{out}"
    );
    assert!(
        out.contains("fix: install the torch built for gfx1010: `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`, then run this again"),
        "{out}"
    );
    assert!(
        !out.contains("fix: export HSA_OVERRIDE_GFX_VERSION"),
        "{out}"
    );

    // A torch built for gfx101x (as TheRock's): the override must go.
    std::fs::copy(fat_library(&sb.root, &["gfx1010", "gfx1030"]), &lib).unwrap();
    let out = doctor(true);
    assert!(
        line(&out, "torch-gpu").ends_with("has code for gfx1010, gfx1030"),
        "{out}"
    );
    let o = line(&out, "override");
    assert!(
        o.starts_with("warn  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report gfx1030"),
        "{o}"
    );
    assert!(out.contains("fix: unset HSA_OVERRIDE_GFX_VERSION"), "{out}");
    let out = doctor(false);
    assert_eq!(
        line(&out, "override"),
        "ok    override  HSA_OVERRIDE_GFX_VERSION is not set"
    );
}

/// torch's own GPU code is read as every library's (issue 60): a
/// libtorch_hip.so whose `.hip_fatbin` holds one compressed bundle (clang
/// --offload-compress's format, made here from clang 14's own bundle) is judged by the targets its entry IDs name, not skipped.
#[test]
fn doctor_reads_torchs_compressed_gpu_code_as_every_librarys() {
    let sb = Sandbox::new();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let lib = torch.lib.join("libtorch_hip.so");
    std::fs::copy(fat_library(&sb.root, &["gfx1010", "gfx1030"]), &lib).unwrap();
    compress_fatbin(&lib);
    let out = doctor_report(&sb, true);
    assert_eq!(
        check_row(&out, "torch-gpu"),
        format!(
            "ok    torch-gpu {} has code for gfx1010, gfx1030; 1 compressed offload bundle(s): their targets as their entry IDs name them (gfx1010, gfx1030), their code objects not decompressed",
            lib.display()
        ),
        "{out}"
    );
    assert!(
        check_row(&out, "override").starts_with(
            "warn  override  HSA_OVERRIDE_GFX_VERSION=10.3.0 makes ROCm report gfx1030 and load code built for that chip, but torch carries gfx101x code of its own"
        ),
        "{out}"
    );
}

/// Rewrite `lib`'s `.hip_fatbin` bundle as one compressed bundle (clang
/// --offload-compress's format, CCOB version 3), in place.
pub(crate) fn compress_fatbin(lib: &std::path::Path) {
    rdna1_testkit::ccob::compress_fatbin_as(lib, 3);
}
