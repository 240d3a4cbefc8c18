//! The checksum rows: one 1 GiB file, and a 400-file prefix.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

use super::measure::*;

fn md5_single(dir: &Path, runs: usize) -> Result<Row> {
    let file = dir.join("one-gib.bin");
    write_random(&file, GIB, 1)?;
    let mut want = String::new();
    let ours = time(runs, || {
        want = rdna1_patch::checksum::md5_file(&file)?;
        Ok(())
    })?;
    let reference = time(runs, || {
        let out = quiet(Command::new("md5sum").arg(&file))?;
        if !out.starts_with(&want) {
            bail!("md5sum and rdna1-patch disagree: {out} vs {want}");
        }
        Ok(())
    })?;
    std::fs::remove_file(&file)?;
    let ratio = reference.median / ours.median;
    Ok(Row {
        name: "MD5 of one 1 GiB file (page cache warm), throughput",
        why: "single-file MD5 is bound by the compression function; the hashing is OpenSSL's assembly core, so a miss here is OpenSSL against coreutils on this CPU.".into(),
        met: ratio >= 1.0,
        note: format!(
            "throughput {ratio:.2}x md5sum's ({:.0} MB/s)",
            GIB as f64 / 1e6 / ours.median
        ),
        ours,
        reference,
        reference_name: "coreutils `md5sum FILE`".into(),
        target: ">= 1.0x md5sum's throughput".into(),
    })
}

fn md5_prefix(dir: &Path, runs: usize) -> Result<Row> {
    let root = dir.join("prefix-400");
    std::fs::create_dir_all(root.join("lib"))?;
    let mut entries = Vec::new();
    let each = GIB / 400;
    for i in 0..400 {
        let rel = format!("lib/file{i:03}.bin");
        write_random(&root.join(&rel), each, i as u64 + 7)?;
        entries.push(rdna1_patch::checksum::Entry {
            md5: rdna1_patch::checksum::md5_file(&root.join(&rel))?,
            path: rel,
        });
    }
    std::fs::write(
        root.join("MD5SUMS"),
        rdna1_patch::checksum::format_md5sums(&entries),
    )?;
    let jobs = rdna1_patch::checksum::default_jobs();
    let ours = time(runs, || {
        let bad = rdna1_patch::checksum::verify(&root, &entries, jobs);
        if !bad.is_empty() {
            bail!("verify found {} mismatches", bad.len());
        }
        Ok(())
    })?;
    let reference = time(runs, || {
        quiet(
            Command::new("md5sum")
                .args(["-c", "--quiet", "MD5SUMS"])
                .current_dir(&root),
        )?;
        Ok(())
    })?;
    std::fs::remove_dir_all(&root)?;
    let speedup = reference.median / ours.median;
    Ok(Row {
        name: "Checking a prefix of 400 files, 1 GiB in all",
        why: "".into(),
        met: speedup >= 1.6,
        note: format!("{speedup:.2}x faster than md5sum -c, hashing on {jobs} threads"),
        ours,
        reference,
        reference_name: "`md5sum -c MD5SUMS`".into(),
        target: ">= 1.6x faster than md5sum -c (2 cores)".into(),
    })
}

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    eprintln!("bench: MD5 of a 1 GiB file");
    let single = md5_single(cx.dir, cx.runs)?;
    eprintln!("bench: checking 400 files");
    Ok(vec![single, md5_prefix(cx.dir, cx.runs)?])
}
