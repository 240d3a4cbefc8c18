//! The real-MIOpen rows, built in the ROCm chroot by bench-miopen.sh.

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::measure::*;

const MIOPEN_SCRIPT: &str = include_str!("bench-miopen.sh");

/// Real MIOpen in the rocm-env chroot (opt-in: root, the chroot, and the
/// checkout `cargo xtask fidelity --profile rocm-6.3.1` leaves): the build's
/// step count with and without the driver and tests, four translation units
/// for one arch against three, and their ccache-warm rebuild.
fn real_miopen(root: &Path) -> Result<Vec<Row>> {
    let profile = "rocm-6.3.1";
    let chroot = root.join("target/rocm-env/chroot");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !chroot.join(format!("fid/{profile}/cfg")).is_dir() {
        bail!(
            "needs root and the chroot's {profile} checkout: run `sudo cargo xtask fidelity --miopen-src DIR --profile {profile}` first, then this as root"
        );
    }
    let env = crate::rocm_env::ensure(root)?;
    std::fs::write(chroot.join("fid/bench-miopen.sh"), MIOPEN_SCRIPT)?;
    let out = chroot.join("fid/bench-miopen.out");
    eprintln!("bench: real MIOpen in the chroot (about 10 minutes)");
    env.run(
        root,
        None,
        &format!("bash /fid/bench-miopen.sh {profile} > /fid/bench-miopen.out 2>&1"),
    )?;
    let text = std::fs::read_to_string(&out)?;
    let value = |name: &str| -> Result<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("bench-miopen.sh gave no {name}:\n{text}"))
    };
    let one = |s: f64| Stats::of(vec![s]);
    let (lib, driver, tests) = (
        value("steps_lib")?,
        value("steps_driver")?,
        value("steps_tests")?,
    );
    let (one_arch, three) = (value("one")?, value("three")?);
    let (cold, warm) = (value("ccache_cold")?, value("ccache_warm")?);
    Ok(vec![
        Row {
            name: "Real MIOpen 3.3.0: build steps, the library only",
            why: "".into(),
            met: lib < driver,
            note: format!(
                "{lib:.0} steps for the library; {driver:.0} with MIOpenDriver, {tests:.0} with the driver and BUILD_TESTING=ON (MIOpen's tests are not in its default build, but their configure needs GoogleTest)"
            ),
            ours: Stats::count(lib),
            reference: Stats::count(driver),
            reference_name: "the same with MIOPEN_BUILD_DRIVER=ON".into(),
            target: "fewer steps than with the driver".into(),
        },
        Row {
            name: "Real MIOpen 3.3.0: 4 translation units, GPU_TARGETS one arch against three",
            why: "".into(),
            met: one_arch < three,
            note: format!(
                "{:.2}x faster with gfx1010 alone (convolution_api.cpp, forward_spatial_single.cpp, convolutionocl.cpp, handlehip.cpp; 2 jobs, clang 21, one run each)",
                three / one_arch
            ),
            ours: one(one_arch),
            reference: one(three),
            reference_name: "GPU_TARGETS=gfx1010;gfx1011;gfx1012".into(),
            target: "faster than three arches".into(),
        },
        Row {
            name: "Real MIOpen 3.3.0: the same 4 units rebuilt with ccache warm",
            why: "".into(),
            met: warm * 2.0 < cold,
            note: format!("{:.1}x faster than the cold build", cold / warm),
            ours: one(warm),
            reference: one(cold),
            reference_name: "the cold ccache build".into(),
            target: ">= 2x faster than cold".into(),
        },
    ])
}

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    // Without the chroot or a source tree, the other rows still stand.
    Ok(real_miopen(cx.root).unwrap_or_else(|e| {
        eprintln!("bench: no real-MIOpen rows: {e:#}");
        Vec::new()
    }))
}
