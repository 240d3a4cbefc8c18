//! `cargo xtask fidelity --hip-front-end`: the e2e test that proves a HIP
//! case by hipRTC's own preprocessor
//! (`diagnosis_compilers::a_hip_case_is_proven_by_hiprtcs_own_preprocessor_where_it_has_one`)
//! run in the ROCm chroot against its hipRTC 6.4 and comgr 3, which have
//! hiprtcGetBitcode: the half CI's hipRTC 5.2 cannot run. The compile
//! child is the debug binary of the same build, beside the test binary
//! (a release build takes no parent but itself).

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::rocm_env;

const TEST: &str =
    "diagnosis_compilers::a_hip_case_is_proven_by_hiprtcs_own_preprocessor_where_it_has_one";

pub fn hip_front_end(root: &Path) -> Result<()> {
    let env = rocm_env::ensure(root)?;
    let dir = root.join("target/hip-front-end");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    // The e2e binary, as cargo builds it for the suite.
    let out = crate::cargo()
        .args([
            "test",
            "--features",
            "rdna1-patch/failpoints",
            "--test",
            "e2e",
            "--no-run",
            "--message-format",
            "json",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot build the e2e tests")?;
    let exe = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"]["name"] == "e2e")
        .find_map(|v| v["executable"].as_str().map(str::to_owned))
        .context("cargo named no e2e test binary")?;
    std::fs::create_dir_all(dir.join("deps"))?;
    std::fs::copy(&exe, dir.join("deps/e2e"))?;
    let bin = Path::new(&exe)
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("rdna1-patch"))
        .context("no target dir above the e2e binary")?;
    std::fs::copy(&bin, dir.join("rdna1-patch"))?;
    env.run(
        root,
        Some(&dir),
        &format!(
            "cd /src && RDNA1_TEST_EXE=/src/rdna1-patch \
             RDNA1_TEST_HIPRTC=/usr/lib/x86_64-linux-gnu/libhiprtc.so.6 \
             RDNA1_TEST_COMGR=/usr/lib/x86_64-linux-gnu/libamd_comgr.so.3 \
             ./deps/e2e --exact {TEST} > /src/result 2>&1; echo $? > /src/rc"
        ),
    )?;
    let result = std::fs::read_to_string(dir.join("result"))?;
    let rc = std::fs::read_to_string(dir.join("rc"))?;
    eprint!("{result}");
    if rc.trim() != "0" || !result.contains("1 passed") {
        bail!("{TEST} did not pass in the chroot (exit {})", rc.trim());
    }
    eprintln!("xtask: {TEST} passed against the chroot's hipRTC 6.4 and comgr 3");
    Ok(())
}
