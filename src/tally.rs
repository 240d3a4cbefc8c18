//! Counts of the things a command must do once: locate torch, make the
//! diagnosis (judged or read back), read a library whole. The tests hold
//! each verb to them: a test build (feature `failpoints`) writes them at
//! exit to the file `RDNA1_PATCH_TALLY` names; a released binary never
//! turns that variable into a path it writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What is counted, besides the reads.
#[derive(Debug, Clone, Copy)]
pub enum What {
    TorchLocated,
    Diagnosis,
}

static COUNTS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Whole reads by file (every byte of it: a parse, a hash, a copy).
static READS: Mutex<BTreeMap<PathBuf, usize>> = Mutex::new(BTreeMap::new());

pub fn count(what: What) {
    if !cfg!(feature = "failpoints") {
        return;
    }
    COUNTS[what as usize].fetch_add(1, Ordering::Relaxed);
}

/// `path` is being read whole.
pub fn read(path: &Path) {
    if !cfg!(feature = "failpoints") {
        return;
    }
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    if let Ok(mut r) = READS.lock() {
        *r.entry(path).or_default() += 1;
    }
}

/// The counts (counted in a test build only), a line each: `torch-located 1`, `diagnoses 1`, then
/// `read N PATH` for each file read whole.
#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
pub fn lines() -> String {
    let n = |w: What| COUNTS[w as usize].load(Ordering::Relaxed);
    let mut out = format!(
        "torch-located {}\ndiagnoses {}\n",
        n(What::TorchLocated),
        n(What::Diagnosis)
    );
    if let Ok(r) = READS.lock() {
        for (p, n) in r.iter() {
            out.push_str(&format!("read {n} {}\n", p.display()));
        }
    }
    out
}

/// Write the counts where the test asked, in a test build only.
pub fn write() {
    #[cfg(feature = "failpoints")]
    if let Some(path) = std::env::var_os("RDNA1_PATCH_TALLY") {
        let _ = std::fs::write(path, lines());
    }
}
