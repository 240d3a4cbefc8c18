//! `cargo xtask bench --only rocblas`: `install rocblas --into-torch` of
//! the fixture's rocBLAS build (tests/fixtures/rocblas-mini, built for an
//! RX 5500 XT by the tool itself) into a torch bundling rocBLAS as Debian
//! lays it out, its Tensile directory grown to 1 GB as Debian's is (1.05
//! GB in 970 code objects and 379 catalogues): 1,000 code objects for
//! gfx1030 of 1 MB each, random bytes after their sections, beside
//! Debian's generic catalogues; and the `rollback` that puts it back.
//! Each against `cp -a` of that directory and `md5sum` of every file in
//! the copy. Both read the 1 GB twice: the install hashes torch's originals for the journal, then
//! reads back the backup it linked from them; the rollback checks the
//! backup against the journal before changing anything, then reads back
//! the directory it staged from it.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Result, bail};

use super::measure::{Row, Stats, quiet, time_after, write_random};

/// The Tensile directory's size, in code objects of `PAD` bytes each.
const FILES: usize = 1_000;
const PAD: usize = 1_000_000;

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    eprintln!("bench: install rocblas --into-torch with a 1 GB Tensile directory");
    let dir = cx.dir.join("rocblas");
    std::fs::create_dir_all(&dir)?;
    let home = dir.join("home");
    let sysfs = rdna1_testkit::gpus("rx5500xt-gfx1012");
    let env = |c: &mut Command| {
        c.env("HOME", &home)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("XDG_STATE_HOME")
            .env("RDNA1_PATCH_SYSFS", &sysfs);
    };

    // The fixture's rocBLAS, built for gfx1012 by the tool.
    let fx = rdna1_testkit::RocblasFixture::create(&dir.join("build"));
    let mut build = Command::new(cx.bin);
    build.args(fx.build_args());
    env(&mut build);
    quiet(&mut build)?;
    let prefix = fx.prefix;

    let torch = rdna1_testkit::FakeTorch::native(
        &dir.join("site"),
        cx.runtime,
        &dir,
        "2.6.0+rocm6.4",
        "6.4.43484-123eb5128",
        &["gfx1010", "gfx1012"],
    );
    let code = rdna1_testkit::debian_code(&dir.join("code"), &torch.lib);
    rdna1_testkit::bundle_debian_rocblas(&torch.lib, &code);
    let tensile = torch.lib.join("rocblas/library");
    grow(&dir, &code.join("co/gfx1030.co"), &tensile)?;
    let size = du(&tensile)?;
    let names = |dir: &Path| -> Result<std::collections::BTreeSet<std::ffi::OsString>> {
        Ok(std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()?)
    };
    let originals = names(&tensile)?;
    let built = names(&prefix.join("lib/rocblas/library"))?.len();
    let original = rdna1_patch::checksum::md5_file(&torch.lib.join("librocblas.so"))?;

    let state = dir.join("state");
    let (t, p, s) = (
        torch.dir.display().to_string(),
        prefix.display().to_string(),
        state.display().to_string(),
    );
    let tool = |args: &[&str]| -> Result<String> {
        let mut c = Command::new(cx.bin);
        c.args(args).args(["--state-dir", &s]);
        env(&mut c);
        quiet(&mut c)
    };
    // Each command timed alone, what it left checked after.
    let install = || -> Result<f64> {
        let at = Instant::now();
        let out = tool(&[
            "install",
            "rocblas",
            "--into-torch",
            "--prefix",
            &p,
            "--torch-dir",
            &t,
        ])?;
        let secs = at.elapsed().as_secs_f64();
        if !out.contains("Installed") {
            bail!("install rocblas did not install: {out}");
        }
        Ok(secs)
    };
    // Each rollback must leave torch as it was: the library's bytes and
    // the Tensile directory's every name.
    let rollback = || -> Result<f64> {
        let at = Instant::now();
        tool(&["rollback"])?;
        let secs = at.elapsed().as_secs_f64();
        let now = names(&tensile)?;
        if now != originals
            || rdna1_patch::checksum::md5_file(&torch.lib.join("librocblas.so"))? != original
        {
            bail!(
                "rollback left torch's rocBLAS changed ({} Tensile files, {} before)",
                now.len(),
                originals.len()
            );
        }
        Ok(secs)
    };
    // One warm-up pair, then each install and each rollback timed.
    install()?;
    rollback()?;
    let (mut installs, mut rollbacks) = (Vec::new(), Vec::new());
    for _ in 0..cx.runs {
        installs.push(install()?);
        rollbacks.push(rollback()?);
    }
    let (installs, rollbacks) = (Stats::of(installs), Stats::of(rollbacks));

    let copy = dir.join("copy");
    let remove = || {
        let _ = std::fs::remove_dir_all(&copy);
        Ok(())
    };
    let cp = time_after(cx.runs, remove, || {
        quiet(Command::new("cp").arg("-a").arg(&tensile).arg(&copy))?;
        quiet(
            Command::new("find")
                .arg(&copy)
                .args(["-type", "f", "-exec", "md5sum", "{}", "+"]),
        )?;
        Ok(())
    })?;
    remove()?;
    let what = format!(
        "torch's Tensile directory {:.2} GB in {} files, the build's {built} files in its place, and librocblas.so beside it",
        size as f64 / 1e9,
        originals.len()
    );
    let reference_name = "`cp -a` of torch's Tensile directory + `md5sum` of every file".to_owned();
    Ok(vec![
        Row {
            name: "`install rocblas --into-torch` with a 1 GB Tensile directory",
            ours: installs,
            reference: cp,
            reference_name: reference_name.clone(),
            target: "<= 2x cp -a + md5sum".into(),
            met: installs.median <= 2.0 * cp.median,
            note: format!(
                "{:.2}x; {what}; the originals kept in the state dir's backups",
                installs.median / cp.median
            ),
            why: "the install reads the 1 GB twice (torch's originals hashed for the journal, then the backup linked from them read back before anything is swapped), on as many threads as cores; cp -a + md5sum copies it and reads the copy once".into(),
        },
        Row {
            name: "`rollback` of it",
            ours: rollbacks,
            reference: cp,
            reference_name,
            target: "<= 2x cp -a + md5sum".into(),
            met: rollbacks.median <= 2.0 * cp.median,
            note: format!(
                "{:.2}x; the backup checked against the journal before anything changes, then the directory staged from it (hard links) read back before it takes torch's name",
                rollbacks.median / cp.median
            ),
            why: "the rollback reads the 1 GB twice (the backup checked against the journal, then what was staged from it read back); cp -a + md5sum copies it and reads the copy once".into(),
        },
    ])
}

/// `tensile` grown to about 1 GB: `FILES` code objects for gfx1030, each
/// `co` followed by `PAD` random bytes of its own (an ELF is read from its
/// headers, so what follows its sections is only more bytes to hash).
fn grow(dir: &Path, co: &Path, tensile: &Path) -> Result<()> {
    let code = std::fs::read(co)?;
    let pad = dir.join("pad");
    for i in 0..FILES {
        write_random(&pad, PAD, i as u64 + 1)?;
        let mut bytes = code.clone();
        bytes.extend(std::fs::read(&pad)?);
        std::fs::write(
            tensile.join(format!(
                "TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_{i:04}_gfx1030.co"
            )),
            bytes,
        )?;
    }
    std::fs::remove_file(&pad)?;
    Ok(())
}

/// Bytes in the files under `dir` (`du -sb`).
fn du(dir: &Path) -> Result<u64> {
    let out = quiet(Command::new("du").arg("-sb").arg(dir))?;
    Ok(out.split_whitespace().next().unwrap_or("0").parse()?)
}
