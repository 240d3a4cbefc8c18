//! Issue 54: what the user's stack is, established once per command and
//! handed down. The binary counts, at run time, how often it located
//! torch, made the diagnosis (judged or read back) and read each file
//! whole (src/tally.rs; a test build writes the counts to the file
//! RDNA1_PATCH_TALLY names), and each verb is held to them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::in_place::{HIP64, torch_of};
use crate::support::{Run, Sandbox};

/// What one command counted.
#[derive(Debug)]
struct Tally {
    located: usize,
    diagnoses: usize,
    reads: BTreeMap<PathBuf, usize>,
}

impl Tally {
    /// Whole reads of `file`.
    fn reads_of(&self, file: &Path) -> usize {
        let file = file.canonicalize().unwrap();
        self.reads.get(&file).copied().unwrap_or(0)
    }
}

/// `args` (with this sandbox's state dir for a verb that takes one), and
/// what the binary counted.
fn tallied(sb: &Sandbox, args: &[&str]) -> (Run, Tally) {
    let file = sb.root.join("tally");
    let _ = std::fs::remove_file(&file);
    let state = sb.state();
    let mut cmd = sb.cmd();
    cmd.args(args).env("RDNA1_PATCH_TALLY", &file);
    if args[0] != "doctor" {
        cmd.args(["--state-dir", &state]);
    }
    let run = Run::from(cmd.output().unwrap());
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{args:?} wrote no tally ({e}); exit {:?}\nstdout:\n{}\nstderr:\n{}",
            run.code, run.stdout, run.stderr
        )
    });
    let mut t = Tally {
        located: 0,
        diagnoses: 0,
        reads: BTreeMap::new(),
    };
    for line in text.lines() {
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("torch-located"), Some(n), None) => t.located = n.parse().unwrap(),
            (Some("diagnoses"), Some(n), None) => t.diagnoses = n.parse().unwrap(),
            (Some("read"), Some(n), Some(p)) => {
                t.reads.insert(PathBuf::from(p), n.parse().unwrap());
            }
            _ => panic!("a tally line the test does not know: {line:?}"),
        }
    }
    (run, t)
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --features failpoints (cargo xtask ci does)"
)]
fn each_verb_locates_torch_and_diagnoses_once_and_reads_the_library_as_little_as_it_can() {
    let sb = Sandbox::new();
    sb.set_gpus(crate::support::gpus("rx5600xt-gfx1010"));
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let lib = torch.miopen();
    let prefix = sb.prefix.display().to_string();
    let install = [
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--prefix",
        &prefix,
    ];

    // A cold diagnosis: torch found once, the library read once for its
    // kernel texts, the verdicts made once.
    let (run, t) = tallied(&sb, &["doctor", "--profile", "rocm-6.4.3"]);
    run.prints("kernels");
    assert_eq!(
        (t.located, t.diagnoses, t.reads_of(&lib)),
        (1, 1, 1),
        "doctor, cold: {t:?}"
    );

    // The dry run reads the verdicts back, and the fix needs the bytes.
    let mut dry = install.to_vec();
    dry.push("--dry-run");
    let (run, t) = tallied(&sb, &dry);
    run.ok().prints("would fix");
    assert_eq!((t.located, t.diagnoses), (1, 1), "install --dry-run: {t:?}");
    assert_eq!(t.reads_of(&lib), 1, "install --dry-run: {t:?}");

    let (run, t) = tallied(&sb, &install);
    run.ok().says("Installed");
    assert_eq!((t.located, t.diagnoses), (1, 1), "install: {t:?}");
    // The fix reads torch's library once; the swap links the prefix's in
    // without reading it back (this run wrote it, its stamp holds).
    assert_eq!(t.reads_of(&lib), 1, "install: {t:?}");
    assert_eq!(
        t.reads_of(&sb.prefix.join("lib/libMIOpen.so")),
        0,
        "install: {t:?}"
    );

    let (run, t) = tallied(
        &sb,
        &["verify", "--prefix", &prefix, "--profile", "rocm-6.4.3"],
    );
    run.ok();
    assert_eq!(t.located, 1, "verify: {t:?}");
    assert!(t.diagnoses <= 1, "verify: {t:?}");

    // status sees the installed library by its stamp: a second status
    // reads no byte of it. A stamp is trusted only for a file changed over
    // two seconds ago (as git's index does: one clock tick may hide a
    // change), so the install must be that old first.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    tallied(&sb, &["status", "--prefix", &prefix]).0.ok();
    let (_, t) = tallied(&sb, &["status", "--prefix", &prefix]);
    assert!(t.located <= 1, "status: {t:?}");
    assert_eq!(t.diagnoses, 0, "status: {t:?}");
    assert_eq!(t.reads_of(&lib), 0, "status, library unchanged: {t:?}");
}
