//! `cargo xtask bench --only tensile`: doctor reading a Tensile directory
//! of 1,000,000 code files (issue 69) beside torch's librocblas.so, cold
//! (an empty cache: every file's ELF header read) and warm (the cache's
//! entry read back: a stat of each file), timed and with the process's
//! peak RSS (wait4's ru_maxrss), against `find DIR -type f | wc -l`. The
//! files are hard links to 40 clang-built code objects (gfx1010 and
//! gfx1030, each named for what it holds), so the directory costs inodes'
//! entries, not 1,000,000 copies; it is removed after.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::libraries::Torch;
use super::measure::{Row, Stats};

const FILES: usize = 1_000_000;
/// An inode takes at most 65,000 links on ext4.
const COPIES: usize = 20;
const TARGET_RSS_MB: f64 = 300.0;

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    eprintln!("bench: doctor with a Tensile directory of {FILES} files");
    let fx = Torch::new(cx, &cx.dir.join("tensile"))?;
    std::fs::copy(&fx.small_rocblas, fx.torch.lib.join("librocblas.so"))?;
    let dir = fx.torch.lib.join("rocblas/library");
    let made = Instant::now();
    make(&cx.dir.join("tensile/co"), &dir)?;
    eprintln!(
        "bench: made {} in {:.0} s",
        dir.display(),
        made.elapsed().as_secs_f64()
    );
    // A file changed in the last 50 ms is read but not remembered (each
    // link just made changed its inode): let them settle first, or the
    // cold run remembers nothing and the first warm one is cold.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let cache = fx.home.join(".cache/rdna1-patch/gpucode");
    let doctor = || -> Result<(f64, f64)> {
        let (secs, rss, out) = measured(fx.doctor(cx.bin).arg("--detail"))?;
        let files = format!("{FILES} code-object file(s)");
        if !out.contains(&files) {
            bail!("doctor did not read the {FILES} files: {out}");
        }
        Ok((secs, rss))
    };
    let _ = std::fs::remove_dir_all(&cache);
    let (cold, cold_rss) = doctor()?;
    let mut warm = Vec::new();
    let mut warm_rss = 0f64;
    for _ in 0..cx.runs {
        let (s, r) = doctor()?;
        warm.push(s);
        warm_rss = warm_rss.max(r);
    }
    let entry = std::fs::read_dir(&cache)?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("tensile-v2-"))
        .map(|e| e.metadata().map(|m| m.len()))
        .transpose()?
        .context("doctor kept no entry for the Tensile directory")?;
    let mut find = Vec::new();
    for _ in 0..cx.runs {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("find \"$1\" -type f | wc -l")
            .arg("sh")
            .arg(&dir);
        let (s, _, out) = measured(&mut c)?;
        if out.trim() != (FILES + 2).to_string() {
            bail!("find counted {out}");
        }
        find.push(s);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (ours, reference) = (Stats::of(warm), Stats::of(find));
    Ok(vec![Row {
        name: "warm `doctor` with a Tensile directory of 1,000,000 files",
        why: "find -type f reads the directory's d_type and stats nothing; doctor stats each of the 1,000,000 files for its stamp (a file rewritten in place must be read again), hashes its key and parses the 35 MB entry, on one thread; statting and hashing on more threads, or an entry keyed so that fewer bytes are parsed, would close it".into(),
        met: ours.median <= 2.0 * reference.median && warm_rss < TARGET_RSS_MB,
        note: format!(
            "warm: {:.2} s, {warm_rss:.0} MB peak RSS; cold (every ELF header read): {cold:.2} s, {cold_rss:.0} MB; the cache's entry {:.1} MB, read back",
            ours.median,
            entry as f64 / 1e6
        ),
        ours,
        reference,
        reference_name: "`find DIR -type f | wc -l`".into(),
        target: format!("<= 2x find, < {TARGET_RSS_MB:.0} MB"),
    }])
}

/// `dir` with `FILES` code files, hard links to `COPIES` copies each of
/// gfx1010's and gfx1030's code objects, and a catalogue for each.
fn make(co: &Path, dir: &Path) -> Result<()> {
    let archs = ["gfx1010", "gfx1030"];
    rdna1_testkit::code_objects(co, &archs);
    std::fs::create_dir_all(dir)?;
    let mut sources = Vec::new();
    for arch in archs {
        std::fs::write(dir.join(format!("TensileLibrary_lazy_{arch}.dat")), b"\x80")?;
        for i in 0..COPIES {
            let copy = co.join(format!("{arch}-{i}.co"));
            std::fs::copy(co.join(format!("{arch}.co")), &copy)?;
            sources.push((arch, copy));
        }
    }
    for i in 0..FILES {
        let (arch, from) = &sources[i % sources.len()];
        let name =
            format!("TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_{i:07}_{arch}.co");
        std::fs::hard_link(from, dir.join(name))?;
    }
    Ok(())
}

/// Run `cmd` to its end: its wall time in seconds, its peak RSS in MB
/// (wait4's ru_maxrss) and what it printed.
fn measured(cmd: &mut Command) -> Result<(f64, f64, String)> {
    let out = tempfile::tempfile()?;
    let started = Instant::now();
    let child = cmd
        .stdout(out.try_clone()?)
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the command measured")?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = i32::try_from(child.id())?;
    // SAFETY: pid is our own child, not yet waited for; both pointers are
    // to live locals.
    if unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) } != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let secs = started.elapsed().as_secs_f64();
    let status = std::process::ExitStatus::from_raw(status);
    let mut text = String::new();
    let mut out = out;
    out.seek(SeekFrom::Start(0))?;
    out.read_to_string(&mut text)?;
    if status.signal().is_some() {
        bail!("{cmd:?} was killed: {status}");
    }
    Ok((secs, usage.ru_maxrss as f64 / 1024.0, text))
}
