//! What fails in the user's stack, known before anything is decided: the
//! libMIOpen torch loads (its original, when a fix of ours is in place),
//! the compiler MIOpen loads beside it, the card's target from the KFD
//! topology, and each batch-norm kernel's verdict from compiling it
//! (`verdict`). Established once per command and handed to what decides.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Result;

use crate::cache::Cache;
use crate::compiler::Child;
use crate::error::hint;
use crate::torch::Torch;
use crate::verdict::{self, Compiler, Judgement};

mod words;

/// The longest one compile may take: a batch-norm kernel compiles in
/// well under a second; one that has not in this long is hung.
const COMPILE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

pub struct Diagnosis {
    /// The library judged.
    pub library: PathBuf,
    /// The targets judged for (each RDNA1 card of this machine, or the
    /// ones asked for), and why those ("the card in this machine", "no
    /// GPU visible").
    pub targets: Vec<String>,
    pub target_from: String,
    /// Whether those are this machine's cards or were asked for: a fix is
    /// then proven for them alone, else for every RDNA1 target.
    pub card: bool,
    /// The compiler MIOpen loads; None when torch has none beside it.
    pub compiler_path: Option<PathBuf>,
    /// The hipRTC it compiles its HIP kernels with, when there is one.
    pub hiprtc_path: Option<PathBuf>,
    /// It, in a child process under a time limit (`compiler::Child`):
    /// made only when something is to be compiled (a diagnosis from the
    /// cache starts nothing).
    loaded: std::cell::OnceCell<Child>,
    /// Where the compiler was looked for.
    pub looked_in: Vec<PathBuf>,
    /// The verdicts, one per target in `targets`' order; none without a
    /// compiler.
    pub judgements: Vec<Judgement>,
    /// How long the verdicts took: compiling, or reading them back.
    pub took: std::time::Duration,
    /// The cache of verdicts and proofs (`cache`), and the key the
    /// verdicts on these very texts and compilers are kept under (the
    /// proof beside it); None without a cache dir.
    cache: Option<(Cache, String)>,
    /// The compilers' identity (their SHA-256s), which compile outcomes
    /// are kept under; None without a cache dir.
    compilers: Option<String>,
    /// The library's bytes, with its stamp before they were read, when
    /// this run read them (a cold diagnosis): read once, judged, and
    /// handed to the fix.
    bytes: std::cell::RefCell<Option<(crate::fsutil::Stamp, Rc<Vec<u8>>)>>,
}

/// The targets to judge for: those `asked` (doctor's --target), else
/// every RDNA1 card of this machine, else gfx1010; why those; and whether
/// they are cards (asked, or here) rather than a stand-in.
pub fn targets(sysfs: &Path, asked: &[String]) -> (Vec<String>, String, bool) {
    if !asked.is_empty() {
        return (asked.to_vec(), "asked with --target".into(), true);
    }
    let scan = crate::gpu::scan_all(sysfs);
    match scan.rdna1_targets() {
        // A container without /dev/kfd sees no GPU at all: said so, not
        // as a machine with no RDNA1 card.
        _ if scan.gpus.is_empty() => (vec!["gfx1010".into()], "no GPU visible".into(), false),
        cards if cards.is_empty() => (
            vec!["gfx1010".into()],
            "no RDNA1 card in the KFD topology".into(),
            false,
        ),
        cards if cards.len() == 1 => (cards, "the card in this machine".into(), true),
        cards => (cards, "the cards in this machine".into(), true),
    }
}

/// The first target judged for: the RDNA1 card of this machine, else
/// gfx1010.
pub fn target(sysfs: &Path) -> String {
    targets(sysfs, &[]).0.remove(0)
}

/// Judge `library` (torch's original MIOpen) for this machine's cards (or
/// the targets `asked`), through the comgr beside torch's MIOpen.
pub fn diagnose(
    torch: &Torch,
    library: &Path,
    sysfs: &Path,
    asked: &[String],
) -> Result<Diagnosis> {
    let (targets, target_from, card) = targets(sysfs, asked);
    let looked_in = torch.runtime_dirs();
    let mut d = Diagnosis {
        library: library.to_owned(),
        card,
        targets,
        target_from,
        compiler_path: crate::comgr::find(&looked_in),
        hiprtc_path: crate::comgr::hiprtc::find(&looked_in),
        loaded: std::cell::OnceCell::new(),
        looked_in,
        judgements: Vec::new(),
        took: std::time::Duration::ZERO,
        cache: None,
        compilers: None,
        bytes: std::cell::RefCell::new(None),
    };
    if d.compiler_path.is_some() {
        let start = std::time::Instant::now();
        d.cache = d.cache_key();
        d.judgements = d.judged()?;
        d.took = start.elapsed();
    }
    Ok(d)
}

/// What a diagnosis says of the user's stack.
pub enum Standing {
    /// No compiler beside torch's MIOpen: whether it fails cannot be told.
    NoCompiler,
    /// Every case of every kernel judged compiles for the card (the line
    /// says so, with the kernels that could not be judged).
    NothingToFix(String),
    /// It fails at the DPP reduction the in-place fix removes.
    Fixable,
    /// The fix cannot help, and the error says why.
    Refused(anyhow::Error),
}

impl Diagnosis {
    /// The verdicts are kept keyed by all they depend on: the batch-norm
    /// kernel texts with the headers they include (`verdict::digest`),
    /// the SHA-256 of each compiler and the stamp of every library it
    /// loads (a libLLVM replaced beside an unchanged comgr compiles
    /// otherwise), the target, this version and its rules. A library that differs only outside its kernel texts reuses
    /// them; a change to a text or a compiler judges anew. The texts'
    /// digest is remembered under the library's stamp, as a compiler's
    /// SHA-256 is: a second diagnosis reads no byte of either.
    fn cache_key(&mut self) -> Option<(Cache, String)> {
        let comgr = self.compiler_path.as_deref()?;
        let cache = Cache::open("diagnosis")?;
        let comgr = file_sha256(&cache, comgr).ok()?;
        let hiprtc = match &self.hiprtc_path {
            Some(p) => file_sha256(&cache, p).ok()?,
            None => "-".into(),
        };
        self.compilers = Some(format!("{comgr}-{hiprtc}"));
        let loads = [self.compiler_path.as_deref(), self.hiprtc_path.as_deref()]
            .into_iter()
            .flatten()
            .map(loaded_stamps)
            .collect::<Option<Vec<_>>>()?
            .join(" ");
        let texts = self.texts_digest(&cache).ok()?;
        let key = crate::prefix::sha256_hex(
            format!(
                "{texts} {comgr} {hiprtc} [{loads}] {} {} {}",
                self.targets.join(","),
                crate::version::VERSION,
                verdict::RULES
            )
            .as_bytes(),
        );
        Some((cache, key))
    }

    /// The digest of the library's batch-norm texts: remembered under its
    /// stamp, else read from the library (whose bytes are kept for the
    /// verdicts and the fix).
    fn texts_digest(&self, cache: &Cache) -> Result<String> {
        let m = std::fs::metadata(&self.library)?;
        let memo = format!("texts{}-{}", verdict::RULES, crate::cache::stamp_key(&m));
        if let Some(hex) = cache
            .get(&memo, 128)
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Ok(hex);
        }
        let bytes = self.read()?;
        let hex = verdict::digest(&bytes)?;
        cache.put(&memo, &hex);
        Ok(hex)
    }

    /// The library's bytes: read once, then shared by the verdicts and
    /// the fix.
    fn read(&self) -> Result<Rc<Vec<u8>>> {
        if let Some((_, b)) = self.bytes.borrow().as_ref() {
            return Ok(b.clone());
        }
        let stamp = crate::fsutil::Stamp::of(&std::fs::metadata(&self.library)?);
        let bytes = Rc::new(crate::elf::read_file(&self.library)?);
        *self.bytes.borrow_mut() = Some((stamp, bytes.clone()));
        Ok(bytes)
    }

    /// The bytes this run read, for the fix, with their stamp; the fix
    /// reads the library itself when there are none or it changed since.
    fn take_bytes(&self) -> Option<(crate::fsutil::Stamp, Vec<u8>)> {
        let (stamp, bytes) = self.bytes.borrow_mut().take()?;
        Some((
            stamp,
            Rc::try_unwrap(bytes).unwrap_or_else(|b| (*b).clone()),
        ))
    }

    /// What is kept under the key with `ext`, if anything.
    fn cached(&self, ext: &str, limit: u64) -> Option<String> {
        let (cache, key) = self.cache.as_ref()?;
        cache.get(&format!("{key}.{ext}"), limit)
    }

    /// Keep `text` under the key with `ext`; one that cannot be written
    /// costs the next run its compiles, no more.
    fn keep(&self, ext: &str, text: &str) {
        if let Some((cache, key)) = &self.cache {
            cache.put(&format!("{key}.{ext}"), text);
        }
    }

    /// The verdicts, one per target: from the cache when these very files
    /// were judged before (named as this run's files), else by compiling.
    fn judged(&self) -> Result<Vec<Judgement>> {
        crate::tally::count(crate::tally::What::Diagnosis);
        if let Some(text) = self.cached("json", 4 << 20)
            && let Ok(mut js) = serde_json::from_str::<Vec<Judgement>>(&text)
            && js.len() == self.targets.len()
        {
            for j in &mut js {
                j.cached = true;
                j.compiler = self.this_run(&j.compiler);
            }
            return Ok(js);
        }
        let bytes = self.read()?;
        // A library that cannot be read is said as such, before any
        // compile; a compiler that gives no answer, as itself.
        verdict::kernels(&bytes).map_err(|e| {
            e.context(crate::error::Hint::new(
                format!(
                    "{} is not a library whose kernel texts can be read",
                    self.library.display()
                ),
                "it is not a MIOpen the in-place fix knows; nothing was changed: reinstall torch if the file is damaged, or build the profile from source (`rdna1-patch build miopen`)",
            ))
        })?;
        let c = self.compiler()?.expect("judged with a compiler");
        // Every target at once: every core has work to the end.
        let targets: Vec<&str> = self.targets.iter().map(String::as_str).collect();
        let judged = verdict::judge_all(c, &bytes, &targets)?;
        let mut kept = judged.clone();
        for j in &mut kept {
            j.compiler = self.any_run(&j.compiler);
        }
        self.keep("json", &serde_json::to_string(&kept)?);
        Ok(judged)
    }

    /// `text` with this run's compiler paths in place of the words
    /// [`any_run`] put there: a verdict kept by a run on the same files
    /// elsewhere names the files of this one.
    ///
    /// [`any_run`]: Diagnosis::any_run
    fn this_run(&self, text: &str) -> String {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let mut out = text.to_owned();
        if let Some(p) = path(&self.hiprtc_path) {
            out = out.replace("{hiprtc}", &p);
        }
        match path(&self.compiler_path) {
            Some(p) => out.replace("{comgr}", &p),
            None => out,
        }
    }

    /// `text` with this run's compiler paths as words, for the cache.
    fn any_run(&self, text: &str) -> String {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let mut out = text.to_owned();
        if let Some(p) = path(&self.compiler_path) {
            out = out.replace(&format!("({p})"), "({comgr})");
        }
        match path(&self.hiprtc_path) {
            Some(p) => out.replace(&format!("({p})"), "({hiprtc})"),
            None => out,
        }
    }

    /// The targets a fix is proven for: the card in this machine, else
    /// every RDNA1 target.
    pub fn proven_for(&self) -> Vec<String> {
        match self.card {
            true => self.targets.clone(),
            false => verdict::RDNA1.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    /// Prove the edit of this library by compiling it (`verdict::prove`),
    /// or know it proven by an earlier run on these very texts and
    /// compilers for these very targets: the edit is a function of the
    /// texts, so its proof is too. What the diagnosis compiled (the card's
    /// cases, the control's) is not compiled again.
    fn proof(&self, original: &[u8], fixed: &[u8]) -> Result<String> {
        let targets = self.proven_for();
        let ext = format!("proof-{}", targets.join("-"));
        if let Some(line) = self.cached(&ext, 4096) {
            let line = self.this_run(&line);
            return Ok(format!("{line} (proven before for these very texts)"));
        }
        let c = self.compiler()?.expect("a proof with a compiler");
        let child = self.loaded.get().expect("loaded by compiler()");
        let ran = child.ran.get();
        let names: Vec<&str> = targets.iter().map(String::as_str).collect();
        let line = match verdict::prove(c, original, fixed, &names)? {
            Ok(p) => {
                // What changed for the control and what did not.
                let now = match p.control_now_compiles {
                    0 => String::new(),
                    n => format!(
                        ", and {} that failed before the fix now {}",
                        crate::output::count(n, "case", "cases"),
                        if n == 1 { "compiles" } else { "compile" }
                    ),
                };
                let not = match p.not_judged.len() {
                    0 => String::new(),
                    n => format!(
                        "; {} not judged, compiling for no card before or after the fix, and left as it was ({})",
                        crate::output::count(n, "kernel", "kernels"),
                        p.not_judged.join(", ")
                    ),
                };
                let which = match self.card {
                    true => self.target_from.clone(),
                    false => format!("{}: every RDNA1 target", self.target_from),
                };
                format!(
                    "{} batch-norm kernels compile for {} ({which}) in every case; for {}: the same code as before wherever it compiled before{now}; through {} ({} compiles, {} of them run){not}",
                    p.kernels,
                    targets.join(", "),
                    verdict::CONTROL,
                    c.describe(),
                    p.compiles,
                    child.ran.get() - ran
                )
            }
            Err(why) => {
                return Err(hint(
                    format!(
                        "the fix of {} is not proven: {why}; nothing was changed",
                        self.library.display()
                    ),
                    "this MIOpen's batch norm needs more than the in-place fix knows: build the profile from source instead (`rdna1-patch build miopen`), and report the kernel named above",
                ));
            }
        };
        self.keep(&ext, &self.any_run(&line));
        Ok(line)
    }

    /// The compiler, on first use; None when there is none. A comgr that
    /// anyone but its owner or root could write is refused here, with why
    /// (`comgr::check_trusted`), before any child loads it.
    pub fn compiler(&self) -> Result<Option<&dyn Compiler>> {
        let Some(path) = &self.compiler_path else {
            return Ok(None);
        };
        if self.loaded.get().is_none() {
            let mut child = compiler(path, self.hiprtc_path.as_deref(), COMPILE_LIMIT)?;
            if let (Some(cache), Some(id)) = (Cache::open("compiles"), &self.compilers) {
                child.remember(cache, id.clone());
            }
            let _ = self.loaded.set(child);
        }
        Ok(self.loaded.get().map(|c| c as &dyn Compiler))
    }
}

/// The compilers MIOpen loads (`comgr`, and `hiprtc` for HIP texts), in a
/// child process, each compile within `limit`. One that anyone but its
/// owner or root could write is refused here, with why
/// (`comgr::check_trusted`), before any child loads it.
pub fn compiler(comgr: &Path, hiprtc: Option<&Path>, limit: std::time::Duration) -> Result<Child> {
    crate::comgr::check_trusted(comgr)?;
    let mut child = Child::new(comgr.to_owned(), limit)?;
    if let Some(rtc) = hiprtc {
        crate::comgr::check_trusted(rtc)?;
        child.hiprtc = Some(rtc.to_owned());
    }
    Ok(child)
}

/// Each library `compiler` loads, as the loader would find it from the
/// compiler's directory with no LD_LIBRARY_PATH (as the compile child
/// loads them), by its path and stamp (`cache::stamp_key`: a file replaced
/// or rewritten has another); None when one cannot be found or read.
fn loaded_stamps(compiler: &Path) -> Option<String> {
    let stamps = crate::loader::loaded_by(compiler)?
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some(format!("{}={}", p.display(), crate::cache::stamp_key(&m)))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(stamps.join(","))
}

/// A file's SHA-256, remembered under its stamp (`cache::stamp_key`), as
/// git's index remembers a file unchanged: a second diagnosis of the same
/// files reads no byte of them.
fn file_sha256(cache: &Cache, file: &Path) -> Result<String> {
    let m = std::fs::metadata(file)?;
    if let Some(hex) = memoised_sha256(cache, &m) {
        return Ok(hex);
    }
    let hex = crate::prefix::sha256_hex(&crate::elf::read_file(file)?);
    cache.put(&memo_key(&m), &hex);
    Ok(hex)
}

fn memo_key(m: &std::fs::Metadata) -> String {
    format!("sha256-{}", crate::cache::stamp_key(m))
}

/// The SHA-256 remembered for a file of this stamp, if any.
fn memoised_sha256(cache: &Cache, m: &std::fs::Metadata) -> Option<String> {
    cache
        .get(&memo_key(m), 128)
        .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}
