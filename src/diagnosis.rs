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
use crate::ui::Ui;
use crate::verdict::{self, Compiler, Judgement, Outcome};

/// The longest one compile may take: a batch-norm kernel compiles in
/// well under a second; one that has not in this long is hung.
const COMPILE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

pub struct Diagnosis {
    /// The library judged.
    pub library: PathBuf,
    /// The target judged for, and why that one.
    pub target: String,
    pub target_from: String,
    /// Whether that is the card in this machine: a fix is then proven for
    /// it alone, else for every RDNA1 target.
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
    /// The verdicts; None without a compiler.
    pub judgement: Option<Judgement>,
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

/// The target to judge for: the RDNA1 card of this machine, else gfx1010.
pub fn target(sysfs: &Path) -> (String, String) {
    match card(sysfs) {
        Some(t) => (t, "the card in this machine".into()),
        None => (
            "gfx1010".into(),
            "no RDNA1 card in the KFD topology: judged for gfx1010".into(),
        ),
    }
}

/// The RDNA1 card in this machine's KFD topology, if there is one.
pub fn card(sysfs: &Path) -> Option<String> {
    crate::gpu::rdna1_targets(sysfs).into_iter().next()
}

/// Judge `library` (torch's original MIOpen) for this machine's card,
/// through the comgr beside torch's MIOpen.
pub fn diagnose(torch: &Torch, library: &Path, sysfs: &Path) -> Result<Diagnosis> {
    let (target, target_from) = target(sysfs);
    let looked_in = torch.runtime_dirs();
    let mut d = Diagnosis {
        library: library.to_owned(),
        card: card(sysfs).is_some(),
        target,
        target_from,
        compiler_path: crate::comgr::find(&looked_in),
        hiprtc_path: crate::comgr::hiprtc::find(&looked_in),
        loaded: std::cell::OnceCell::new(),
        looked_in,
        judgement: None,
        took: std::time::Duration::ZERO,
        cache: None,
        compilers: None,
        bytes: std::cell::RefCell::new(None),
    };
    if d.compiler_path.is_some() {
        let start = std::time::Instant::now();
        d.cache = d.cache_key();
        d.judgement = Some(d.judged()?);
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
    /// the SHA-256 of each compiler, the target, this version and its
    /// rules. A library that differs only outside its kernel texts reuses
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
        let texts = self.texts_digest(&cache).ok()?;
        let key = crate::prefix::sha256_hex(
            format!(
                "{texts} {comgr} {hiprtc} {} {} {}",
                self.target,
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

    /// The verdicts: from the cache when these very files were judged
    /// before, else by compiling.
    fn judged(&self) -> Result<Judgement> {
        crate::tally::count(crate::tally::What::Diagnosis);
        if let Some(text) = self.cached("json", 4 << 20)
            && let Ok(mut j) = serde_json::from_str::<Judgement>(&text)
        {
            j.cached = true;
            return Ok(j);
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
        let judged = verdict::judge(c, &bytes, &self.target)?;
        self.keep("json", &serde_json::to_string(&judged)?);
        Ok(judged)
    }

    /// The targets a fix is proven for: the card in this machine, else
    /// every RDNA1 target.
    pub fn proven_for(&self) -> Vec<String> {
        match self.card {
            true => vec![self.target.clone()],
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
            return Ok(format!("{line} (proven before for these very texts)"));
        }
        let c = self.compiler()?.expect("a proof with a compiler");
        let child = self.loaded.get().expect("loaded by compiler()");
        let ran = child.ran.get();
        let names: Vec<&str> = targets.iter().map(String::as_str).collect();
        let line = match verdict::prove(c, original, fixed, &names)? {
            Ok(p) => {
                let now = match p.control_now_compiles {
                    0 => String::new(),
                    n => format!(
                        " ({} that failed before the fix {} after it)",
                        crate::output::count(
                            n,
                            &format!("{} case", verdict::CONTROL),
                            &format!("{} cases", verdict::CONTROL)
                        ),
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
                    true => "the card in this machine",
                    false => "no RDNA1 card in the KFD topology: every RDNA1 target",
                };
                format!(
                    "{} batch-norm kernels compile for {} ({which}) in every case and compile to unchanged {} code{now}, through {} ({} compiles, {} of them run){not}",
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
        self.keep(&ext, &line);
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

impl Diagnosis {
    /// One line per kernel: "MIOPEN_KERNEL_X: fails at the DPP reduction
    /// (fp32 NCHW: ...)".
    pub fn lines(&self) -> Vec<String> {
        let Some(j) = &self.judgement else {
            return Vec::new();
        };
        j.kernels
            .iter()
            .map(|k| {
                let failing = match (k.failing, &k.verdict) {
                    (_, verdict::Verdict::NotJudged { .. }) => "; never edited".to_owned(),
                    (0, _) => String::new(),
                    (n, _) => format!(
                        "; fails in {n} of {} for {}{}",
                        crate::output::count(k.cases, "case", "cases"),
                        self.target,
                        match k.control_too {
                            0 => String::new(),
                            t => format!(", {t} of them for {} too", verdict::CONTROL),
                        }
                    ),
                };
                format!("{}: {}{failing}", k.name, k.verdict.describe())
            })
            .collect()
    }

    /// The stack's verdict in a line, for the target judged.
    pub fn summary(&self) -> String {
        let Some(j) = &self.judgement else {
            return "not compiled: no compiler library beside torch's MIOpen".into();
        };
        let failing = j.failing().count();
        let how = match (j.cached, self.loaded.get()) {
            (true, _) => "known from an earlier diagnosis of these very texts".to_owned(),
            (false, Some(c)) => format!("{} compiles, {} of them run", j.compiles, c.ran.get()),
            (false, None) => format!("{} compiles", j.compiles),
        };
        let how = format!("{how}, {:.2} s", self.took.as_secs_f64());
        format!(
            "{failing} of {} batch-norm kernels of {} fail for {} ({}), through {} ({how})",
            j.kernels.len(),
            self.library.display(),
            self.target,
            self.target_from,
            j.compiler
        )
    }

    /// What the diagnosis says of the stack, decided here once: doctor's
    /// kernels row and install's fix both take it.
    pub fn standing(&self) -> Standing {
        if self.compiler_path.is_none() {
            return Standing::NoCompiler;
        }
        if let Some(e) = self.refusal() {
            return Standing::Refused(e);
        }
        match self.judgement.as_ref().map(|j| j.outcome()) {
            Some(Outcome::NothingToFix) => Standing::NothingToFix(self.nothing_to_fix_line()),
            _ => Standing::Fixable,
        }
    }

    /// The error for a stack the fix cannot help, or none.
    fn refusal(&self) -> Option<anyhow::Error> {
        let j = self.judgement.as_ref()?;
        match j.outcome() {
            Outcome::NotFixable { kernel, error } => Some(hint(
                format!(
                    "batch norm of {} is not fixable here: {kernel} {error} for {}, and not at the DPP reduction the fix removes; nothing was changed",
                    self.library.display(),
                    self.target
                ),
                match crate::compile::missing_std_header(&error) {
                    Some(h) => format!(
                        "hipRTC compiles MIOpen's HIP kernels with this machine's C++ standard library headers and finds no `{h}`: install them (Debian, Ubuntu: `sudo apt install g++`; Fedora: `sudo dnf install libstdc++-devel`), then run this again"
                    ),
                    None => "this needs more than the in-place fix: build the profile from source (`rdna1-patch build miopen`), and report the kernel and its error".into(),
                },
            )),
            Outcome::NoKernels => Some(hint(
                format!(
                    "{} embeds no batch-norm kernel text; nothing was changed",
                    self.library.display()
                ),
                "it is not a MIOpen whose batch norm this fix knows",
            )),
            Outcome::NothingCompiles { kernel, error } => Some(hint(
                format!(
                    "the batch-norm kernels of {} cannot be judged: not one compiles, even for {}, through {} ({kernel}: {error}); nothing was changed",
                    self.library.display(),
                    verdict::CONTROL,
                    j.compiler
                ),
                "this compiler builds nothing of MIOpen's here: reinstall torch (it bundles its comgr), and report the error if it stays",
            )),
            Outcome::Fixable | Outcome::NothingToFix => None,
        }
    }

    /// Say the diagnosis, and make the fix it calls for in memory, proven
    /// by compiling: None when there is nothing to fix (said, exit 0).
    pub fn plan_fix(&self, unproven: bool, ui: &Ui) -> Result<Option<crate::inplace::Planned>> {
        for line in self.lines() {
            ui.stage("Kernel", line);
        }
        ui.stage("Diagnosis", self.summary());
        match self.standing() {
            Standing::NoCompiler if !unproven => return Err(self.no_compiler()),
            Standing::Refused(e) => return Err(e),
            Standing::NothingToFix(line) => {
                ui.stage("Nothing", format!("{line}; torch was left as it is"));
                return Ok(None);
            }
            Standing::NoCompiler | Standing::Fixable => {}
        }
        let prove = |a: &[u8], b: &[u8]| self.proof(a, b);
        let prover: Option<crate::inplace::Prover> = match self.compiler_path {
            Some(_) => Some(&prove),
            None => None,
        };
        // The bytes the diagnosis read are not read twice.
        let planned =
            crate::inplace::plan(&self.library, prover, self.take_bytes(), &self.not_judged())?;
        ui.stage("Proven", &planned.proof);
        if self.compiler_path.is_none() {
            ui.warn("--unproven: the fix is installed without a compile to prove it");
        }
        Ok(Some(planned))
    }

    /// The kernels not judged: compiled for no card in any case, the DPP
    /// reduction aside, or needing a name no compiler is handed. Named,
    /// never edited.
    pub fn not_judged(&self) -> Vec<String> {
        self.judgement
            .iter()
            .flat_map(|j| &j.kernels)
            .filter(|k| {
                matches!(
                    k.verdict,
                    verdict::Verdict::NotJudged { .. } | verdict::Verdict::Refused { .. }
                )
            })
            .map(|k| k.name.clone())
            .collect()
    }

    /// "to fix: ..." as the diagnosis found it: every case of every kernel
    /// judged compiles; those that could not be judged are said, never
    /// counted as compiling.
    fn nothing_to_fix_line(&self) -> String {
        let lib = self.library.display();
        let kernels = || self.judgement.iter().flat_map(|j| &j.kernels);
        let names = |v: &[&verdict::Kernel]| {
            v.iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let not: Vec<_> = kernels()
            .filter(|k| matches!(k.verdict, verdict::Verdict::NotJudged { .. }))
            .collect();
        let refused: Vec<_> = kernels()
            .filter(|k| matches!(k.verdict, verdict::Verdict::Refused { .. }))
            .collect();
        let mut line = match not.len() + refused.len() {
            0 => format!(
                "to fix: every batch-norm kernel of {lib} compiles for {} in every case",
                self.target
            ),
            _ => format!(
                "to fix in the kernels that could be judged: every other batch-norm kernel of {lib} compiles for {} in every case",
                self.target
            ),
        };
        if !not.is_empty() {
            line.push_str(&format!(
                "; {} not judged, no case of it compiling even for {} ({}), and left as it is",
                crate::output::count(not.len(), "kernel was", "kernels were"),
                verdict::CONTROL,
                names(&not)
            ));
        }
        if !refused.is_empty() {
            line.push_str(&format!(
                "; {} not judged, each needing a name no compiler is handed ({})",
                crate::output::count(refused.len(), "kernel was", "kernels were"),
                names(&refused)
            ));
        }
        line
    }

    /// The error for no compiler, unless an unproven fix was asked for.
    pub fn no_compiler(&self) -> anyhow::Error {
        let dirs: Vec<String> = self
            .looked_in
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        hint(
            format!(
                "no compiler library (libamd_comgr.so*) beside torch's MIOpen ({}), so whether its batch norm fails, and whether a fix works, cannot be proven; nothing was changed",
                dirs.join(", ")
            ),
            "torch bundles comgr with its MIOpen (reinstall torch if it is missing), a system ROCm has one (its lib dir on LD_LIBRARY_PATH); or pass --unproven to install the fix uncompiled, which the provenance and `status` then say",
        )
    }
}
