//! `cargo xtask fuzz [--seconds N] [--jobs J] [--target elf|pull|kernels|catalogue]`:
//! libFuzzer on the ELF and offload-bundle readers (fuzz/fuzz_targets/
//! elf.rs), seeded with real libraries: clang's HIP fat binaries (one arch
//! and three) and the fake runtime's ELF files; on the pull's readers
//! (manifests, configs, zstd tar layers) and the in-place fix's readers of
//! embedded kernel texts (pull.rs), seeded with such inputs; and on the
//! diagnosis's readers of a libMIOpen's kernel texts (kernels.rs: the
//! batch-norm texts, the HIP include names and headers handed to a
//! compiler, cases, defines, the row_bcast blanking, the in-place edit,
//! each held to a property), seeded with the fake runtime's libMIOpen
//! variants and hand-made texts; and on the Tensile catalogue reader
//! (catalogue.rs, its peak allocation held to twice the input plus 1 MiB),
//! seeded with hand-made catalogues. Each target runs for N seconds. Not in CI: it runs for
//! minutes. It fails on any crash, abort, out-of-memory or slow input
//! (`-timeout=1` on inputs of at most 1 MiB), and then on any corpus input
//! that, repeated to 4 MiB, takes 1 s per MB.
//!
//! The fuzz crate is built with stable rustc and the flags cargo-fuzz
//! passes for libFuzzer's coverage (sancov), so no nightly is needed.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::run;

const MAX_LEN: usize = 1 << 20;

pub fn fuzz(root: &Path, args: &[String]) -> Result<()> {
    let mut seconds = 600u64;
    let mut jobs = 2usize;
    let mut only: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().context("a value is missing");
        match a.as_str() {
            "--seconds" => seconds = value()?.parse()?,
            "--jobs" => jobs = value()?.parse()?,
            "--target" => only = Some(value()?.clone()),
            other => {
                bail!(
                    "unknown argument {other}; usage: cargo xtask fuzz [--seconds N] [--jobs J] [--target elf|pull|kernels|catalogue]"
                )
            }
        }
    }
    let base = root.join("target/fuzz");
    let bins = build(root)?;
    if let Some(o) = &only
        && !bins.iter().any(|(name, _)| name == o)
    {
        bail!("no fuzz target {o}: elf, pull, kernels or catalogue");
    }
    for (name, bin) in bins {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let work = base.join(name);
        let seeds = match name {
            "elf" => seeds(&work.join("seeds"))?,
            "kernels" => kernel_seeds(&work.join("seeds"))?,
            "catalogue" => catalogue_seeds(&work.join("seeds"))?,
            _ => pull_seeds(&work.join("seeds"))?,
        };
        one(name, &bin, &work, &seeds, seconds, jobs)?;
    }
    Ok(())
}

/// Fuzz one target for `seconds`, then check its corpus scales.
fn one(name: &str, bin: &Path, work: &Path, seeds: &Path, seconds: u64, jobs: usize) -> Result<()> {
    let corpus = work.join("corpus");
    let artifacts = work.join("artifacts");
    for d in [&corpus, &artifacts] {
        std::fs::create_dir_all(d)?;
    }
    let log = work.join("fuzz.log");
    eprintln!(
        "xtask: fuzzing {name} for {seconds} s with {jobs} job(s); corpus {}, log {}",
        corpus.display(),
        log.display()
    );
    let out = Command::new(bin)
        .arg(format!("-fork={jobs}"))
        .args(["-ignore_crashes=1", "-ignore_timeouts=1", "-ignore_ooms=1"])
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-max_len={MAX_LEN}"))
        .args(["-timeout=1", "-rss_limit_mb=2048", "-print_final_stats=1"])
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg(&corpus)
        .arg(seeds)
        .output()
        .context("cannot run the fuzz target")?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    std::fs::write(&log, &text)?;
    let summary = Summary::read(&text)
        .with_context(|| format!("no libFuzzer statistics in {}", log.display()))?;
    let found: Vec<PathBuf> = std::fs::read_dir(&artifacts)?
        .flatten()
        .map(|e| e.path())
        .collect();
    println!(
        "fuzz {name}: {} inputs in {} s, corpus {} inputs, coverage {}; crashes {}, timeouts {}, ooms {}; {} artifact(s) in {}",
        summary.runs,
        seconds,
        std::fs::read_dir(&corpus)?.count(),
        summary.cov,
        summary.crashes,
        summary.timeouts,
        summary.ooms,
        found.len(),
        artifacts.display()
    );
    if summary.crashes + summary.timeouts + summary.ooms > 0 || !found.is_empty() {
        bail!("the readers failed on fuzzed input; see {}", log.display());
    }
    scale(bin, &corpus, &work.join("scaled"))
}

/// Fuzzed inputs are small; a reader that is not linear shows on large
/// ones. Each corpus input is repeated up to 4 MiB (a section of many
/// bundles, a file of many headers) and run once; none may take 1 s per MB.
fn scale(bin: &Path, corpus: &Path, dir: &Path) -> Result<()> {
    const SIZE: usize = 4 << 20;
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(corpus)?
        .flatten()
        .map(|e| e.path())
        .collect();
    inputs.sort();
    let mut worst = (0.0f64, PathBuf::new());
    let mut count = 0;
    // A batch at a time: the whole corpus repeated would be gigabytes.
    for batch in inputs.chunks(100) {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let mut big = Vec::new();
        for input in batch {
            let bytes = std::fs::read(input)?;
            if bytes.is_empty() {
                continue;
            }
            let mut repeated = bytes.repeat(SIZE.div_ceil(bytes.len()));
            repeated.truncate(SIZE);
            let path = dir.join(input.file_name().context("a corpus file")?);
            std::fs::write(&path, repeated)?;
            big.push(path);
        }
        count += big.len();
        let out = Command::new(bin)
            .arg("-timeout=4")
            .args(&big)
            .output()
            .context("cannot run the fuzz target")?;
        let text = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let slow = text
                .lines()
                .filter_map(|l| l.strip_prefix("Running: "))
                .next_back()
                .unwrap_or("?");
            bail!("a repeated input failed ({slow}, kept there):\n{text}");
        }
        for line in text.lines() {
            // "Executed /path in 12 ms"
            let Some(rest) = line.strip_prefix("Executed ") else {
                continue;
            };
            let Some((path, ms)) = rest.rsplit_once(" in ") else {
                continue;
            };
            let ms: f64 = ms.trim_end_matches(" ms").parse().unwrap_or(0.0);
            let per_mb = ms / 1000.0 / (SIZE as f64 / (1 << 20) as f64);
            if per_mb > worst.0 {
                worst = (per_mb, PathBuf::from(path));
            }
        }
    }
    println!(
        "fuzz: {} corpus inputs repeated to {} MiB: the slowest took {:.4} s per MB ({})",
        count,
        SIZE >> 20,
        worst.0,
        worst.1.display()
    );
    if worst.0 >= 1.0 {
        bail!("{} took {:.2} s per MB", worst.1.display(), worst.0);
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// The last statistics line of a fork-mode run:
/// `#N: cov: C ft: F corp: K exec/s: E oom/timeout/crash: O/T/X time: Ss ...`.
struct Summary {
    runs: u64,
    cov: u64,
    ooms: u64,
    timeouts: u64,
    crashes: u64,
}

impl Summary {
    fn read(log: &str) -> Option<Summary> {
        let line = log
            .lines()
            .rev()
            .find(|l| l.starts_with('#') && l.contains("oom/timeout/crash:"))?;
        let after = |key: &str| -> Option<&str> {
            let rest = &line[line.find(key)? + key.len()..];
            rest.split_whitespace().next()
        };
        let runs = line[1..].split(':').next()?.trim().parse().ok()?;
        let mut counts = after("oom/timeout/crash:")?.split('/');
        let mut next = || counts.next()?.parse().ok();
        Some(Summary {
            runs,
            cov: after("cov:")?.parse().ok()?,
            ooms: next()?,
            timeouts: next()?,
            crashes: next()?,
        })
    }
}

/// Build the fuzz target as cargo-fuzz does (sancov instrumentation, debug
/// assertions and overflow checks on), with the stable toolchain.
fn build(root: &Path) -> Result<Vec<(&'static str, PathBuf)>> {
    let flags = [
        "-Cpasses=sancov-module",
        "-Cllvm-args=-sanitizer-coverage-level=4",
        "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
        "-Cllvm-args=-sanitizer-coverage-pc-table",
        "-Cllvm-args=-sanitizer-coverage-trace-compares",
        "--cfg=fuzzing",
        "-Cdebug-assertions",
        "-Coverflow-checks",
    ];
    let target = root.join("target/fuzz/build");
    // With --target, RUSTFLAGS reach the target only, not build scripts
    // (which would then need libFuzzer's symbols too).
    let triple = host_triple()?;
    run(crate::cargo()
        .args(["build", "--release", "--target", &triple, "--manifest-path"])
        .arg(root.join("fuzz/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env("RUSTFLAGS", flags.join(" ")))?;
    let dir = target.join(triple).join("release");
    Ok(["elf", "pull", "kernels", "catalogue"]
        .into_iter()
        .map(|n| (n, dir.join(n)))
        .collect())
}

/// What a registry sends, to start from: manifests and configs (first
/// byte 0 and 1), zstd tar layers of files, links and MD5SUMS (2), and
/// the fake runtime's libMIOpen with its embedded kernel texts.
fn pull_seeds(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let manifest = br#"{"schemaVersion":2,"config":{"mediaType":"application/vnd.rdna1-patch.build.v1+json","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":2},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+zstd","digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","size":10}]}"#;
    std::fs::write(dir.join("manifest"), [&[0u8][..], manifest].concat())?;
    std::fs::write(
        dir.join("config"),
        [&[1u8][..], br#"{"key":"k","inputs":{},"provenance":{}}"#].concat(),
    )?;
    let mut tar = tar::Builder::new(Vec::new());
    let files: [(&str, &[u8]); 2] = [
        ("lib/libMIOpen.so.1", b"\x7fELF a library"),
        (
            "share/rdna1-patch/MD5SUMS",
            b"d41d8cd98f00b204e9800998ecf8427e  lib/libMIOpen.so.1\n",
        ),
    ];
    for (path, bytes) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        tar.append_data(&mut h, path, bytes)?;
    }
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    tar.append_link(&mut h, "lib/libMIOpen.so", "libMIOpen.so.1")?;
    let layer = zstd::encode_all(&tar.into_inner()?[..], 3)?;
    std::fs::write(dir.join("layer"), [&[2u8][..], &layer].concat())?;
    let scratch = tempfile::tempdir()?;
    let runtime = rdna1_testkit::build_runtime(&scratch.path().join("runtime"));
    let miopen = std::fs::read(runtime.join("torch/lib/libMIOpen.so"))?;
    std::fs::write(dir.join("libMIOpen.so"), miopen)?;
    Ok(dir.to_owned())
}

/// Texts as (name, bytes).
type Records = Vec<(&'static str, Vec<u8>)>;

/// What the kernels target starts from (fuzz/fuzz_targets/kernels.rs;
/// first byte even: a library file, odd: texts, `name 0x1f text`
/// separated by 0x1e): the fake runtime's libMIOpens (stock, symbols
/// hidden, and each variant of tests/fixtures/fake-runtime/variants), its
/// kernel texts as texts, and hand-made HIP texts whose includes lead out
/// (`../../x`, `/abs`, a NUL, `%:`, a continued `#inc\`-line, a `\r`
/// line), headers that include themselves and each other under several
/// names, and a huge line of row_bcast operands.
/// Hand-made Tensile catalogues (MessagePack): a lazy one naming a
/// placeholder, a library with source and assembly solutions, and a
/// bomb's start (an array of nils).
fn catalogue_seeds(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut lazy = vec![0x82, 0xa4];
    lazy.extend(b"type");
    lazy.push(0xab);
    lazy.extend(b"Placeholder");
    lazy.push(0xa5);
    lazy.extend(b"value");
    lazy.push(0xa8);
    lazy.extend(b"TL_gfx12");
    let mut lib = vec![0x81, 0xa9];
    lib.extend(b"solutions");
    lib.extend([0x92, 0x81, 0xac]);
    lib.extend(b"sourceKernel");
    lib.extend([0xc3, 0x81, 0xac]);
    lib.extend(b"sourceKernel");
    lib.push(0xc2);
    let mut nils = vec![0xdd, 0x00, 0x00, 0x04, 0x00];
    nils.resize(5 + 1024, 0xc0);
    for (name, bytes) in [("lazy.dat", lazy), ("lib.dat", lib), ("nils.dat", nils)] {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(dir.to_owned())
}

fn kernel_seeds(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let scratch = tempfile::tempdir()?;
    let runtime = rdna1_testkit::build_runtime(&scratch.path().join("runtime"));
    let mut libraries = vec![
        ("stock".to_owned(), runtime.join("torch/lib/libMIOpen.so")),
        (
            "hidden".to_owned(),
            runtime.join("torch-hidden/lib/libMIOpen.so"),
        ),
    ];
    for e in std::fs::read_dir(runtime.join("variants"))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        libraries.push((name, e.path().join("libMIOpen.so")));
    }
    for (name, path) in libraries {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if bytes.len() < MAX_LEN {
            std::fs::write(
                dir.join(format!("lib-{name}")),
                [&[0u8][..], &bytes].concat(),
            )?;
        }
    }
    let texts = |records: &[(&str, &[u8])]| -> Vec<u8> {
        let mut out = vec![1u8];
        for (i, (name, text)) in records.iter().enumerate() {
            if i > 0 {
                out.push(0x1e);
            }
            out.extend_from_slice(name.as_bytes());
            out.push(0x1f);
            out.extend_from_slice(text);
        }
        out
    };
    // The fixture's kernel texts, named as the build embeds them.
    let fixtures = rdna1_testkit::fixtures().join("fake-runtime");
    let mut files = Vec::new();
    for sub in ["kernels", "kernels-hip"] {
        for e in std::fs::read_dir(fixtures.join(sub))?.flatten() {
            let path = e.path();
            let stem = path
                .file_stem()
                .context("a stem")?
                .to_string_lossy()
                .to_uppercase();
            let header = path.extension().is_some_and(|x| x == "h" || x == "hpp");
            let suffix = if header { "_INCLUDE" } else { "" };
            files.push((
                format!("MIOPEN_KERNEL_{stem}{suffix}"),
                std::fs::read(&path)?,
            ));
        }
    }
    files.sort();
    let records: Vec<(&str, &[u8])> = files.iter().map(|(n, t)| (n.as_str(), &t[..])).collect();
    std::fs::write(dir.join("texts-fixture"), texts(&records))?;
    const K: &str = "MIOPEN_KERNEL_BATCHNORMHIP";
    const BODY: &str = "extern \"C\" __global__ void BatchNormFwd() {}\n";
    let hand: [(&str, Records); 8] = [
        ("dotdot", vec![(K, format!("#include \"../../x.hpp\"\n{BODY}").into()), ("MIOPEN_KERNEL_X_INCLUDE", b"int x;\n".to_vec())]),
        ("absolute", vec![(K, format!("#include \"/etc/x.hpp\"\n#include </abs/y>\n{BODY}").into())]),
        ("nul", vec![(K, format!("#include \"a\0/../b.hpp\"\n{BODY}").into()), ("MIOPEN_KERNEL_A_INCLUDE", b"#include \"a.hpp\"\n".to_vec())]),
        ("spellings", vec![(K, format!("%:include \"../d\"\n#inc\\\nlude \"../c\"\nx;\r# include \"/r\"\n# /**/ include_next <../n>\n{BODY}").into())]),
        ("self", vec![
            (K, format!("#include \"a.hpp\"\n{BODY}").into()),
            ("MIOPEN_KERNEL_A_INCLUDE", b"#include \"a.hpp\"\n#include \"./a.hpp\"\n#include \"sub/a.hpp\"\n#include \"b.hpp\"\n".to_vec()),
            ("MIOPEN_KERNEL_B_INCLUDE", b"#include \"a.hpp\"\n#include \"b.hpp\"\n#include \"../b.hpp\"\n".to_vec()),
        ]),
        ("many-names", vec![
            (K, format!("#include \"h.hpp\"\n{BODY}").into()),
            ("MIOPEN_KERNEL_H_INCLUDE", (0..2000).map(|i| format!("#include \"d{i}/h.hpp\"\n")).collect::<String>().into()),
        ]),
        ("huge-line", vec![(K, format!("{BODY}{}\n", " \"v_add row_bcast:15\" row_bcast:31".repeat(20_000)).into())]),
        ("variants", vec![(K, format!("{BODY}{}", (0..3000).map(|i| format!("#if MIO_BN_VARIANT == {i}\n")).collect::<String>()).into())]),
    ];
    for (name, records) in &hand {
        let records: Vec<(&str, &[u8])> = records.iter().map(|(n, t)| (*n, &t[..])).collect();
        std::fs::write(dir.join(format!("texts-{name}")), texts(&records))?;
    }
    Ok(dir.to_owned())
}

fn host_triple() -> Result<String> {
    let out = Command::new("rustc").arg("-vV").output()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .context("rustc -vV names no host")
}

/// Real libraries to start from: clang's HIP fat binaries (one arch, and
/// three) and the fake runtime's plain ELF libraries.
fn seeds(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let scratch = tempfile::tempdir()?;
    for archs in [&["gfx1030"][..], &["gfx1010", "gfx1012", "gfx900"]] {
        let lib = rdna1_testkit::fat_library(scratch.path(), archs);
        copy_small(&lib, dir)?;
    }
    let runtime = rdna1_testkit::build_runtime(&scratch.path().join("runtime"));
    for e in walk(&runtime) {
        copy_small(&e, dir)?;
    }
    Ok(dir.to_owned())
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.is_file() && !p.is_symlink() {
            out.push(p);
        }
    }
    out
}

fn copy_small(file: &Path, dir: &Path) -> Result<()> {
    let bytes = std::fs::read(file)?;
    if bytes.len() <= MAX_LEN && bytes.starts_with(b"\x7fELF") {
        std::fs::write(dir.join(file.file_name().context("a file name")?), bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_last_statistics_line() {
        let log = "#1024: cov: 10 ft: 20 corp: 3 exec/s: 5 oom/timeout/crash: 0/0/0 time: 1s\n\
                   #52311: cov: 1542 ft: 4033 corp: 611 exec/s: 87 oom/timeout/crash: 1/2/3 time: 600s job: 12 dft_time: 0\n\
                   INFO: exiting: 0 time: 601s\n";
        let s = Summary::read(log).unwrap();
        assert_eq!(
            (s.runs, s.cov, s.ooms, s.timeouts, s.crashes),
            (52311, 1542, 1, 2, 3)
        );
    }
}
