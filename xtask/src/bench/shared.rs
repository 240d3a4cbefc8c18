//! The shared-build row: installing a 400 MB prefix from a local registry.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::measure::*;

/// The fixture's prefix with its library replaced by a 400 MB one (MD5SUMS
/// written again), published signed to a docker-registry on 127.0.0.1;
/// then `build --from` into an empty prefix with no ROCm, against `cp -a`
/// of the same prefix plus `md5sum -c`, and against building the fixture
/// cold and with a warm ccache.
fn shared_pull(
    bin: &Path,
    dir: &tempfile::TempDir,
    runtime: &Path,
    runs: usize,
) -> Result<Vec<Row>> {
    let dir = dir.path();
    let fx = sandbox(
        bin,
        &dir.join("publisher"),
        runtime,
        &["--launcher", "none"],
    )?;
    let lib = fx.prefix.join("lib/libMIOpen.so.1.0.0");
    write_library_like(&lib, 400_000_000)?;
    rehash(&fx.prefix)?;
    let public = keypair(&dir.join("k.pub"), &dir.join("k.key"))?;
    let registry = rdna1_testkit::registry::Registry::start(None);
    let reference = format!("oci://{}/rdna1/miopen", registry.addr);
    let publish_started = Instant::now();
    quiet(
        Command::new(bin)
            .args(["publish", "--prefix"])
            .arg(&fx.prefix)
            .arg("--sign-key")
            .arg(dir.join("k.key"))
            .arg(&reference),
    )?;
    let publish_secs = publish_started.elapsed().as_secs_f64();
    let layer: u64 = largest_file(&registry.storage.join("docker/registry/v2/blobs"));
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("trusted-keys = [{public:?}]\n"))?;

    let user = dir.join("user");
    std::fs::create_dir_all(&user)?;
    let prefix = user.join("prefix");
    let mut args = fx.build_args();
    let at = args.iter().position(|a| a == "--rocm").context("--rocm")?;
    args[at + 1] = user.join("no-rocm").display().to_string();
    let at = args
        .iter()
        .position(|a| a == "--work-dir")
        .context("--work-dir")?;
    args[at + 1] = user.join("work").display().to_string();
    let pull = time(runs, || {
        let _ = std::fs::remove_dir_all(&prefix);
        let out = quiet(
            fx.command(bin)
                .args(&args)
                .args(["--prefix"])
                .arg(&prefix)
                .args(["--from", &reference])
                .env("RDNA1_PATCH_CONFIG", &config),
        )?;
        if !out.contains("pulled, nothing compiled") {
            bail!("the pull did not happen: {out}");
        }
        Ok(())
    })?;
    let copy = user.join("copy");
    let cp = time(runs, || {
        let _ = std::fs::remove_dir_all(&copy);
        quiet(Command::new("cp").arg("-a").arg(&fx.prefix).arg(&copy))?;
        quiet(
            Command::new("md5sum")
                .args(["-c", "--quiet", "share/rdna1-patch/MD5SUMS"])
                .current_dir(&copy),
        )?;
        Ok(())
    })?;
    let real_build = 38.0 * 60.0 + 21.0;
    let ratio = pull.median / cp.median;
    let share = pull.median / real_build * 100.0;
    let mut rows = vec![
        Row {
            name: "Install a 400 MB prefix from a local registry (`build --from`, no ROCm)",
            ours: pull,
            reference: cp,
            reference_name: "`cp -a` of the same prefix + `md5sum -c`".into(),
            target: "<= 2x cp + md5sum -c".into(),
            met: ratio <= 2.0,
            note: format!(
                "{ratio:.2}x; pull, digest, signature, zstd, MD5 of every file and the move, in one process (layer {:.0} MB, zstd -3 with 2 threads; publishing took {publish_secs:.1} s)",
                layer as f64 / 1e6
            ),
            why: "".into(),
        },
        Row {
            name: "The same install against building MIOpen 3.3.0 here",
            ours: pull,
            reference: Stats::of(vec![real_build]),
            reference_name:
                "a full build of MIOpen 3.3.0 on this 2-core machine (FIDELITY.md, measured once)"
                    .into(),
            target: "< 1% of the build".into(),
            met: share < 1.0,
            note: format!("{share:.3}% of the build's 38 min 21 s"),
            why: "".into(),
        },
    ];
    rows.push(fixture_cold_and_warm(bin, dir, runtime, runs, pull)?);
    Ok(rows)
}

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    eprintln!("bench: installing a 400 MB prefix from a local registry");
    shared_pull(cx.bin, &mem_or_tmp()?, cx.runtime, cx.runs)
}
