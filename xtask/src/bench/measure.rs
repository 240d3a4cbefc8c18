//! How the bench measures: rows, timing statistics, and the fixtures
//! several groups share (random libraries, keys, rehashed prefixes).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use rdna1_testkit::Fixture;

/// One benchmark: what we measured against what, and whether the target holds.
pub(crate) struct Row {
    pub(crate) name: &'static str,
    pub(crate) ours: Stats,
    pub(crate) reference: Stats,
    pub(crate) reference_name: String,
    pub(crate) target: String,
    pub(crate) met: bool,
    pub(crate) note: String,
    /// Why the target can be missed here, and what would close it.
    pub(crate) why: String,
}

#[derive(Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) median: f64,
    min: f64,
    max: f64,
    runs: usize,
    /// A count (build steps), not seconds.
    count: bool,
}

impl Stats {
    pub(crate) fn count(n: f64) -> Stats {
        Stats {
            count: true,
            ..Stats::of(vec![n])
        }
    }

    pub(crate) fn of(mut secs: Vec<f64>) -> Stats {
        secs.sort_by(f64::total_cmp);
        let n = secs.len();
        let median = if n % 2 == 1 {
            secs[n / 2]
        } else {
            (secs[n / 2 - 1] + secs[n / 2]) / 2.0
        };
        Stats {
            median,
            min: secs[0],
            max: secs[n - 1],
            runs: n,
            count: false,
        }
    }

    pub(crate) fn show(&self) -> String {
        if self.count {
            return format!("{:.0} steps", self.median);
        }
        let f = |s: f64| {
            if s < 1.0 {
                format!("{:.1} ms", s * 1000.0)
            } else {
                format!("{s:.2} s")
            }
        };
        format!(
            "{} ({}–{}, {} runs)",
            f(self.median),
            f(self.min),
            f(self.max),
            self.runs
        )
    }
}

/// Time `f` `runs` times, after one warm-up run.
pub(crate) fn time(runs: usize, f: impl FnMut() -> Result<()>) -> Result<Stats> {
    time_after(runs, || Ok(()), f)
}

/// [`time`], with `setup` run untimed before each run of `f`.
pub(crate) fn time_after(
    runs: usize,
    mut setup: impl FnMut() -> Result<()>,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Stats> {
    setup()?;
    f()?;
    let mut secs = Vec::new();
    for _ in 0..runs {
        setup()?;
        let t = Instant::now();
        f()?;
        secs.push(t.elapsed().as_secs_f64());
    }
    Ok(Stats::of(secs))
}

/// Write a prefix's MD5SUMS again for the files it lists (the library's
/// symlinks are listed too), after a bench made its library larger.
pub(crate) fn rehash(prefix: &Path) -> Result<()> {
    let sums = prefix.join("share/rdna1-patch/MD5SUMS");
    let listed: Vec<String> = std::fs::read_to_string(&sums)?
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(_, p)| p.to_owned()))
        .collect();
    let fresh = quiet(Command::new("md5sum").args(&listed).current_dir(prefix))?;
    Ok(std::fs::write(&sums, fresh)?)
}

/// A minisign key pair without a password; the public key's text.
pub(crate) fn keypair(public: &Path, secret: &Path) -> Result<String> {
    quiet(
        Command::new("minisign")
            .args(["-G", "-W", "-p"])
            .arg(public)
            .arg("-s")
            .arg(secret),
    )?;
    Ok(std::fs::read_to_string(public)?
        .lines()
        .nth(1)
        .context("minisign wrote no public key")?
        .to_owned())
}

/// Run a command, quietly, and fail loudly.
pub(crate) fn quiet(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout))
}

/// Pseudo-random bytes (xorshift), so nothing compresses or dedups.
pub(crate) fn write_random(path: &Path, len: usize, seed: u64) -> Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut x = seed | 1;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        for chunk in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        let n = left.min(buf.len());
        f.write_all(&buf[..n])?;
        left -= n;
    }
    f.flush()?;
    Ok(())
}

/// A library of `len` bytes that zstd packs about as well as a real
/// libMIOpen.so (Debian's 6.4.3, 28 MB: 4.5:1 at level 3): one 4 KiB page
/// in five random, the others one page of code with a few bytes changed.
pub(crate) fn write_library_like(path: &Path, len: usize) -> Result<()> {
    use std::io::Write;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let template: Vec<u8> = (0..4096).map(|_| next() as u8).collect();
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut page = vec![0u8; 4096];
    for _ in 0..len / 4096 {
        if next() % 100 < 21 {
            page.iter_mut().for_each(|b| *b = next() as u8);
        } else {
            page.copy_from_slice(&template);
            for _ in 0..8 {
                let at = (next() % 4096) as usize;
                page[at] = next() as u8;
            }
        }
        f.write_all(&page)?;
    }
    f.flush()?;
    Ok(())
}

/// The size of the largest file below `dir` (the layer, in a registry).
pub(crate) fn largest_file(dir: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                n = n.max(largest_file(&p));
            } else if let Ok(m) = p.metadata() {
                n = n.max(m.len());
            }
        }
    }
    n
}

/// A temp dir in memory when the machine has /dev/shm: disk writes on this
/// VM vary several-fold from one run to the next.
pub(crate) fn mem_or_tmp() -> Result<tempfile::TempDir> {
    let mem = Path::new("/dev/shm");
    Ok(if mem.is_dir() {
        tempfile::Builder::new()
            .prefix("rdna1-bench-")
            .tempdir_in(mem)?
    } else {
        tempfile::Builder::new().prefix("rdna1-bench-").tempdir()?
    })
}

pub(crate) const GIB: usize = 1 << 30;

/// A fixture sandbox, built once through rdna1-patch.
pub(crate) fn sandbox(bin: &Path, root: &Path, runtime: &Path, extra: &[&str]) -> Result<Fixture> {
    std::fs::create_dir_all(root)?;
    let fx = Fixture::create(root, runtime);
    quiet(
        fx.command(bin)
            .args(fx.build_args())
            .args(extra)
            .env("CCACHE_DIR", root.join("ccache")),
    )?;
    Ok(fx)
}

pub(crate) fn build_dir(fx: &Fixture) -> PathBuf {
    fx.work.join("mini/miopen/build")
}

/// The fixture built cold and with a warm ccache, for scale: a real MIOpen
/// build with a warm ccache is not run here (the real-MIOpen rows time four
/// of its units).
pub(crate) fn fixture_cold_and_warm(
    bin: &Path,
    dir: &Path,
    runtime: &Path,
    runs: usize,
    pull: Stats,
) -> Result<Row> {
    let fx = sandbox(
        bin,
        &dir.join("ccache-fixture"),
        runtime,
        &["--launcher", "ccache"],
    )?;
    let build = |clean: bool, cache: &Path| -> Result<()> {
        let mut c = fx.command(bin);
        c.args(fx.build_args())
            .args(["--launcher", "ccache", "--clean"])
            .env("CCACHE_DIR", cache);
        if clean {
            let _ = std::fs::remove_dir_all(cache);
        }
        quiet(&mut c).map(|_| ())
    };
    let cache = dir.join("ccache-fixture/ccache");
    let cold = time(runs, || build(true, &cache))?;
    let warm = time(runs, || build(false, &cache))?;
    Ok(Row {
        name: "For scale: the fixture's own build, warm ccache against cold (not the 400 MB prefix)",
        ours: warm,
        reference: cold,
        reference_name: "the cold build (`--clean`, empty ccache)".into(),
        target: "reported, no target".into(),
        met: true,
        note: format!(
            "the fixture compiles 5 units; the 400 MB install above took {:.2} s",
            pull.median
        ),
        why: "".into(),
    })
}
