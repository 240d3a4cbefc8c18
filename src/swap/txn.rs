//! The swap into torch as a transaction, after rustup's
//! dist/component/transaction.rs, but persisted: each transaction has a
//! journal, written and fsynced before every step, so that a run killed at
//! any point leaves either the original or the new file in place, the next
//! run knows which, and `rollback` works from a later run.
//!
//! ```text
//! <state>/lock                       held while anything here changes
//! <state>/transactions/NNNN.toml     one journal per transaction
//! <state>/backups/<md5>.so           originals, named by their checksum
//! <state>/staging/                   the relinked library before the swap
//! ```
//!
//! Nothing in a journal is trusted to name a file to write or delete: temp
//! files are named from the transaction's id and target, the backup must be
//! `backups/<md5>.so` of this state dir, and the target must be inside the
//! torch the journal names, reached from torch's own library name.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::checksum;
use crate::error::hint;
use crate::fsutil;
use crate::swap::torch::Torch;

/// A crash point for the tests (cargo feature `failpoints`):
/// `FAILPOINTS=<name>=return` aborts the process there, as kill -9 would,
/// with no destructor or cleanup running.
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            let _ = fail::eval($name, |_| -> () { std::process::abort() });
        }
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Journal written; torch untouched.
    Begun,
    /// The original is backed up and verified; torch untouched.
    BackedUp,
    /// About to rename the new file over the original: either may be there.
    Swapping,
    /// The new file is in place.
    Installed,
    /// A later install went over this one and kept its original.
    Replaced,
    /// Putting the original back: either may be there.
    RollingBack,
    RolledBack,
    /// Stopped before the swap; torch was never changed.
    Aborted,
    /// Closed by the user without touching torch (e.g. torch was reinstalled).
    Abandoned,
}

impl State {
    pub fn unfinished(self) -> bool {
        matches!(
            self,
            State::Begun | State::BackedUp | State::Swapping | State::RollingBack
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Begun => "begun",
            State::BackedUp => "backed-up",
            State::Swapping => "swapping",
            State::Installed => "installed",
            State::Replaced => "replaced",
            State::RollingBack => "rolling-back",
            State::RolledBack => "rolled-back",
            State::Aborted => "aborted",
            State::Abandoned => "abandoned",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRec {
    pub md5: String,
    pub size: u64,
    pub mode: u32,
}

/// What went into torch: where from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildRec {
    pub prefix: PathBuf,
    pub library: PathBuf,
    pub profile: String,
    pub rocm: String,
    pub commit: String,
    pub build_id: Option<String>,
    /// The patchelf edits made, or "" when installed as built.
    pub relink: String,
}

/// Which torch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorchRec {
    pub dir: PathBuf,
    pub version: String,
    pub hip: String,
    /// torch/lib/libMIOpen.so, or the file it links to.
    pub target: PathBuf,
    /// Set when torch loads MIOpen from the rocm-sdk packages; absent in
    /// journals of the torch/lib layout (and in those written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<SdkRec>,
}

/// The rocm-sdk layout's MIOpen, as an install found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SdkRec {
    pub version: String,
    pub family: String,
    /// `site-packages/_rocm_sdk_libraries_<family>`, torch's sibling.
    pub package: PathBuf,
    /// The name the preload loads.
    pub library: PathBuf,
}

impl TorchRec {
    pub fn layout(&self) -> &'static str {
        if self.sdk.is_some() {
            "rocm-sdk"
        } else {
            "torch/lib"
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub id: u32,
    pub state: State,
    pub created: String,
    pub updated: String,
    pub torch: TorchRec,
    pub build: BuildRec,
    pub original: FileRec,
    pub backup: PathBuf,
    pub new: FileRec,
    /// The transaction whose original this one kept (installing twice).
    pub inherits: Option<u32>,
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// What a torch library carries when it is one of our builds: every patch
/// of the series declares a marker that starts so.
pub const MARKER_PREFIX: &str = "[RDNA1 PATCH]";

impl Journal {
    /// One line for a transaction, as `status` and `rollback --list` show it.
    pub fn describe(&self) -> String {
        format!(
            "{:>4}  {}  {:<12}  {}  torch {} ({})  build {} ROCm {}",
            self.id,
            self.created,
            self.state.name(),
            self.torch.dir.display(),
            self.torch.version,
            match &self.torch.sdk {
                None => format!("hip {}", self.torch.hip),
                Some(s) => format!("rocm-sdk {} {}", s.version, s.family),
            },
            crate::builder::git::short(&self.build.commit),
            self.build.rocm
        )
    }

    /// The name torch loads the library by.
    fn library(&self) -> PathBuf {
        match &self.torch.sdk {
            Some(sdk) => sdk.library.clone(),
            None => self.torch.dir.join("lib").join(crate::swap::torch::LIBRARY),
        }
    }

    /// The temp file an install (or, with `rollback`, a rollback) writes
    /// next to the target; named here, never read from the journal.
    fn temp(&self, rollback: bool) -> PathBuf {
        temp_path(&self.torch.target, self.id, rollback)
    }

    /// Remove what a killed install or rollback of this transaction left.
    fn remove_temps(&self) {
        for rollback in [false, true] {
            let _ = fsutil::remove_own_file(&self.temp(rollback));
        }
    }

    /// The journal's paths are ones this tool could have written: the backup
    /// is this state dir's copy of the original, and the target is a
    /// libMIOpen inside the torch the journal names.
    fn check(&self, state: &StateDir) -> std::result::Result<(), String> {
        if self.backup != state.backup_path(&self.original.md5) {
            return Err(format!(
                "its backup {} is not {}",
                self.backup.display(),
                state.backup_path(&self.original.md5).display()
            ));
        }
        let t = &self.torch;
        // The rocm-sdk package must be torch's sibling and the preload's
        // name inside it: a journal cannot point us anywhere else.
        let root = match &t.sdk {
            None => t.dir.clone(),
            Some(sdk) => {
                let sibling = sdk.package.parent() == t.dir.parent()
                    && sdk
                        .package
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(crate::rocm_sdk::is_libraries_package)
                    && sdk.library.parent().and_then(Path::parent) == Some(sdk.package.as_path());
                if !sibling {
                    return Err(format!(
                        "its rocm-sdk package {} is not a libraries package beside {}",
                        sdk.package.display(),
                        t.dir.display()
                    ));
                }
                sdk.package.clone()
            }
        };
        let named_ok = t
            .target
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libMIOpen.so"));
        let dir = root.canonicalize().unwrap_or_else(|_| root.clone());
        let inside = t.target.is_absolute()
            && t.target
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir))
            && (t.target.starts_with(&dir) || t.target.starts_with(&root));
        if !named_ok || !inside {
            return Err(format!(
                "its target {} is not a libMIOpen inside {}",
                t.target.display(),
                root.display()
            ));
        }
        Ok(())
    }
}

fn temp_path(target: &Path, id: u32, rollback: bool) -> PathBuf {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let dir = target.parent().unwrap_or(Path::new("/"));
    if rollback {
        dir.join(format!(".{name}.rdna1-patch-{id}-rollback.tmp"))
    } else {
        dir.join(format!(".{name}.rdna1-patch-{id}.tmp"))
    }
}

/// A journal file that cannot be read as one.
#[derive(Debug, Clone, Serialize)]
pub struct Damaged {
    pub path: PathBuf,
    pub error: String,
}

impl Damaged {
    fn error(damaged: &[Damaged]) -> anyhow::Error {
        let list: Vec<String> = damaged
            .iter()
            .map(|d| format!("{}: {}", d.path.display(), d.error))
            .collect();
        let first = &damaged[0].path;
        hint(
            format!(
                "{} transaction journal(s) cannot be trusted, so rdna1-patch will not change torch:\n  {}",
                damaged.len(),
                list.join("\n  ")
            ),
            format!(
                "if you edited it, undo the edit; otherwise check that torch's libMIOpen.so is the one you want, then set the journal aside (`mv {0} {0}.damaged`) and run this again",
                first.display()
            ),
        )
    }
}

/// Every journal of a state dir, the damaged ones apart.
#[derive(Debug, Default)]
pub struct Journals {
    pub list: Vec<Journal>,
    pub damaged: Vec<Damaged>,
    /// The highest id any journal file has, damaged or not.
    last_id: u32,
}

/// Where transactions and backups live.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// `explicit` is `--state-dir`; otherwise `$XDG_STATE_HOME/rdna1-patch`.
    pub fn new(explicit: Option<&Path>) -> Result<StateDir> {
        let root = match explicit {
            Some(p) => std::path::absolute(p)
                .with_context(|| format!("bad --state-dir {}", p.display()))?,
            None => crate::fsutil::project_dirs()
                .and_then(|d| d.state_dir().map(Path::to_owned))
                .context("cannot find a state directory ($HOME is not set); pass --state-dir")?,
        };
        Ok(StateDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn journal_dir(&self) -> PathBuf {
        self.root.join("transactions")
    }

    fn backup_path(&self, md5: &str) -> PathBuf {
        self.root.join("backups").join(format!("{md5}.so"))
    }

    pub fn staging(&self) -> PathBuf {
        self.root.join("staging")
    }

    /// A file name in the staging dir for this run; only names of this
    /// shape are ever removed from there.
    pub fn staged_path(&self, name: &str) -> PathBuf {
        self.staging()
            .join(format!("rdna1-patch-{}-{name}.tmp", std::process::id()))
    }

    /// Take the lock; a second run waits for nothing and says who holds it.
    pub fn lock(&self) -> Result<Locked<'_>> {
        use std::os::unix::fs::OpenOptionsExt;
        fsutil::create_dir_all(&self.root)?;
        for dir in [
            self.journal_dir(),
            self.root.join("backups"),
            self.staging(),
        ] {
            fsutil::create_own_dir(&dir)?;
        }
        let path = self.root.join("lock");
        // O_NOFOLLOW: a symlink planted at `lock` must not get its target
        // truncated by a run under sudo.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| {
                hint(
                    format!("cannot open the lock file {}: {e}", path.display()),
                    format!(
                        "it must be a plain file that rdna1-patch created; if it is a symlink or something else, remove it (`rm {}`) and run again",
                        path.display()
                    ),
                )
            })?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            bail!(
                "{} is not a regular file; remove it and run again",
                path.display()
            );
        }
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(hint(
                    format!(
                        "another rdna1-patch run ({}) is changing torch right now; its lock is {}",
                        holder.trim(),
                        path.display()
                    ),
                    "wait for it to finish and run this again (the lock is released when that process exits, even if it is killed)",
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        file.set_len(0)?;
        write!(file, "pid {}", std::process::id())?;
        self.remove_leftovers();
        Ok(Locked {
            state: self,
            _file: file,
        })
    }

    /// Partial files of a killed run: only names this tool gives its own
    /// temp files, so a user's files in a shared --state-dir stay.
    fn remove_leftovers(&self) {
        let ours = |dir: PathBuf, pred: &dyn Fn(&str) -> bool| {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                return;
            };
            for e in rd.flatten() {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if pred(name) && e.file_type().is_ok_and(|t| t.is_file()) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        };
        ours(self.staging(), &|n| {
            n.starts_with("rdna1-patch-") && n.ends_with(".tmp")
        });
        ours(self.root.join("backups"), &|n| {
            n.strip_suffix(".so.tmp")
                .is_some_and(|md5| md5.len() == 32 && md5.chars().all(|c| c.is_ascii_hexdigit()))
        });
    }

    /// Every journal, oldest first, and those that cannot be read. Reading
    /// needs no lock: journals are replaced atomically.
    pub fn read(&self) -> Result<Journals> {
        let dir = self.journal_dir();
        let mut out = Journals::default();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
        };
        for e in rd {
            let path = e?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // `0002.toml.damaged`, set aside by the user, keeps its number.
            let file_id = name
                .split_once(".toml")
                .and_then(|(stem, _)| stem.parse::<u32>().ok());
            out.last_id = out.last_id.max(file_id.unwrap_or(0));
            if path.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let parsed = fsutil::read_small(&path, 1 << 20)
                .and_then(|t| Ok(toml::from_str::<Journal>(&t)?))
                .map_err(|e| format!("{e:#}"))
                .and_then(|j| {
                    if Some(j.id) != file_id {
                        return Err(format!("it says it is transaction {}", j.id));
                    }
                    j.check(self)?;
                    Ok(j)
                });
            match parsed {
                Ok(j) => out.list.push(j),
                Err(error) => out.damaged.push(Damaged {
                    path,
                    error: error.trim().replace('\n', " "),
                }),
            }
        }
        out.list.sort_by_key(|j| j.id);
        out.damaged.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The readable journals, oldest first (for reports; damaged ones are
    /// in [`StateDir::read`]).
    pub fn journals(&self) -> Result<Vec<Journal>> {
        Ok(self.read()?.list)
    }
}

/// The state dir with its lock held.
pub struct Locked<'a> {
    pub state: &'a StateDir,
    _file: File,
}

/// A lock on the directory holding one torch's library: two runs with
/// different state dirs never change the same torch at once.
pub struct TargetLock(#[allow(dead_code)] File);

impl Locked<'_> {
    /// The journals, refusing to go on if any is damaged: a change to torch
    /// must know every transaction that may concern it.
    pub fn journals(&self) -> Result<Journals> {
        let j = self.state.read()?;
        if !j.damaged.is_empty() {
            return Err(Damaged::error(&j.damaged));
        }
        Ok(j)
    }

    pub fn lock_target(&self, target: &Path) -> Result<TargetLock> {
        let dir = target.parent().unwrap_or(Path::new("/"));
        match fsutil::try_lock_dir(dir)? {
            Some(f) => Ok(TargetLock(f)),
            None => Err(hint(
                format!(
                    "another rdna1-patch run is changing {} right now (perhaps with another --state-dir)",
                    dir.display()
                ),
                "wait for it to finish and run this again",
            )),
        }
    }

    fn save(&self, j: &mut Journal) -> Result<()> {
        j.updated = now();
        let text = format!(
            "# rdna1-patch transaction {}: do not edit; `rdna1-patch rollback --list` shows it.\n{}",
            j.id,
            toml::to_string(j)?
        );
        fsutil::write_atomic(
            &self.state.journal_dir().join(format!("{:04}.toml", j.id)),
            text.as_bytes(),
            Some(0o644),
        )
    }

    fn set(&self, j: &mut Journal, state: State) -> Result<()> {
        j.state = state;
        self.save(j)
    }
}

/// What is at a transaction's target now.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Original,
    New,
    /// Another transaction's library: the build this one was installing
    /// over, still in place.
    Earlier(u32),
    /// Torch, or its library, is no longer there.
    Gone,
    Other(String),
}

fn found(j: &Journal, all: &[Journal]) -> Found {
    if !j.torch.dir.join("version.py").is_file() || !j.torch.target.exists() {
        return Found::Gone;
    }
    match checksum::md5_file(&j.torch.target) {
        Ok(m) if m == j.original.md5 => Found::Original,
        Ok(m) if m == j.new.md5 => Found::New,
        Ok(m) => match all
            .iter()
            .find(|p| p.id != j.id && p.torch.target == j.torch.target && p.new.md5 == m)
        {
            Some(p) => Found::Earlier(p.id),
            None => Found::Other(format!("MD5 {m}")),
        },
        Err(e) => Found::Other(format!("{e:#}")),
    }
}

fn changed_elsewhere(j: &Journal, what: &str) -> anyhow::Error {
    hint(
        format!(
            "{} ({what}) is neither the original (MD5 {}) nor the library transaction {} installed (MD5 {}): something else changed it, perhaps a pip install",
            j.torch.target.display(),
            j.original.md5,
            j.id,
            j.new.md5
        ),
        format!(
            "rdna1-patch does not overwrite a file it did not put there. If torch was reinstalled, its own library is back and `rdna1-patch rollback --abandon {}` closes the transaction without touching torch; the original stays in {}",
            j.id,
            j.backup.display()
        ),
    )
}

/// What [`recover`] found.
#[derive(Default)]
pub struct Recovery {
    /// One line per transaction settled.
    pub notes: Vec<String>,
    /// Unfinished transactions whose target holds a file no transaction
    /// wrote: left open, for the user to decide (`--abandon`).
    pub unsettled: Vec<(Journal, String)>,
}

impl Recovery {
    /// Refuse to change `target` while a transaction on it is unsettled.
    pub fn check_target(&self, target: &Path) -> Result<()> {
        match self
            .unsettled
            .iter()
            .find(|(j, _)| j.torch.target == target)
        {
            Some((j, what)) => Err(changed_elsewhere(j, what)),
            None => Ok(()),
        }
    }
}

/// Settle transactions a killed run left open, from what is on disk.
pub fn recover(locked: &Locked) -> Result<Recovery> {
    let mut out = Recovery::default();
    repair_chains(locked, &mut out.notes)?;
    let all = locked.journals()?.list;
    for j in all.iter().filter(|j| j.state.unfinished()) {
        let mut j = j.clone();
        j.remove_temps();
        let was = j.state;
        let note = match (was, found(&j, &all)) {
            (_, Found::Gone) => {
                locked.set(&mut j, State::Abandoned)?;
                format!(
                    "transaction {} was interrupted ({}) and {} is gone now, so it is closed; the original stays in {}",
                    j.id,
                    was.name(),
                    j.torch.target.display(),
                    j.backup.display()
                )
            }
            (State::RollingBack, Found::Original) => {
                locked.set(&mut j, State::RolledBack)?;
                format!(
                    "transaction {} was interrupted while rolling back; the original was already back, so it is now rolled back",
                    j.id
                )
            }
            (State::RollingBack, Found::New) => {
                locked.set(&mut j, State::Installed)?;
                format!(
                    "transaction {} was interrupted while rolling back, before the original went back; it is installed again",
                    j.id
                )
            }
            (_, Found::New) => {
                locked.set(&mut j, State::Installed)?;
                supersede(locked, &j)?;
                format!(
                    "transaction {} was interrupted after the swap; the new library is in place and checked, so it is now installed",
                    j.id
                )
            }
            (_, Found::Original) => {
                locked.set(&mut j, State::Aborted)?;
                format!(
                    "transaction {} was interrupted before the swap ({}); torch's original was never changed, so it is now aborted",
                    j.id,
                    was.name()
                )
            }
            (State::Begun | State::BackedUp | State::Swapping, Found::Earlier(p)) => {
                locked.set(&mut j, State::Aborted)?;
                format!(
                    "transaction {} was interrupted before the swap ({}); torch still holds the build of transaction {p}, so it is now aborted",
                    j.id,
                    was.name()
                )
            }
            (_, Found::Earlier(p)) => {
                out.unsettled
                    .push((j.clone(), format!("the build of transaction {p}")));
                continue;
            }
            (_, Found::Other(what)) => {
                out.unsettled.push((j.clone(), what));
                continue;
            }
        };
        out.notes.push(note);
    }
    Ok(out)
}

/// Finish the bookkeeping between two transactions that a kill cut short.
fn repair_chains(locked: &Locked, notes: &mut Vec<String>) -> Result<()> {
    // A run killed between "installed" and marking the transaction it went
    // over as replaced: finish that step.
    let all = locked.journals()?.list;
    for j in all.iter().filter(|j| j.state == State::Installed) {
        if let Some(p) = j.inherits.and_then(|prev| {
            all.iter()
                .find(|p| p.id == prev && p.state == State::Installed)
        }) {
            supersede(locked, j)?;
            notes.push(format!(
                "transaction {} went over transaction {} before a run was stopped; {} is now replaced",
                j.id, p.id, p.id
            ));
        }
    }
    // And one killed between rolling back a transaction and marking the
    // one it had replaced: that one's original is back too.
    for j in all.iter().filter(|j| j.state == State::RolledBack) {
        if let Some(mut p) = j
            .inherits
            .and_then(|prev| {
                all.iter()
                    .find(|p| p.id == prev && p.state == State::Replaced)
            })
            .cloned()
        {
            locked.set(&mut p, State::RolledBack)?;
            notes.push(format!(
                "transaction {} was rolled back before a run was stopped; transaction {} it had replaced is rolled back too",
                j.id, p.id
            ));
        }
    }
    Ok(())
}

/// Mark the transaction `j` inherited from as replaced by it.
fn supersede(locked: &Locked, j: &Journal) -> Result<()> {
    let Some(prev) = j.inherits else {
        return Ok(());
    };
    for mut p in locked.journals()?.list {
        if p.id == prev && p.state == State::Installed {
            locked.set(&mut p, State::Replaced)?;
        }
    }
    Ok(())
}

/// Everything a swap needs, checked by the caller.
pub struct Swap<'a> {
    pub torch: &'a Torch,
    pub build: BuildRec,
    /// The new library, ready to go in (relinked if asked), in the staging dir.
    pub staged: &'a Path,
    /// Run on the new file where it lands (next to the target), before it
    /// takes the library's name.
    pub check: &'a dyn Fn(&Path) -> Result<()>,
}

pub enum SwapOutcome {
    Installed(Journal),
    /// The same library is already there, from this transaction.
    AlreadyInstalled(Journal),
}

/// The file holding torch's original library for `target`: the backup when
/// an installed transaction's file is in place, else the target itself.
pub fn original_of(locked: &Locked, target: &Path) -> Result<PathBuf> {
    let journals = locked.journals()?;
    let ours = journals
        .list
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == target);
    if let Some(j) = ours
        && checksum::md5_file(target).ok().as_ref() == Some(&j.new.md5)
    {
        return Ok(j.backup.clone());
    }
    Ok(target.to_owned())
}

/// Whether a file carries our markers: an rdna1-patch build.
pub fn is_patched(path: &Path) -> bool {
    checksum::md5_file_scanning(path, MARKER_PREFIX.as_bytes()).is_ok_and(|(_, found)| found)
}

/// The swap as a transaction: journal, back up the original (unless an
/// earlier install of ours kept it), write and check the new file next to
/// the target, rename it over the target, read it back.
pub fn swap(locked: &Locked, swap: &Swap) -> Result<SwapOutcome> {
    let torch = swap.torch;
    let target = &torch.target;
    let journals = locked.journals()?;
    let (current, patched) = checksum::md5_file_scanning(target, MARKER_PREFIX.as_bytes())?;
    let new_md5 = checksum::md5_file(swap.staged)?;
    let ours = journals
        .list
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == *target);
    if current == new_md5
        && let Some(j) = ours.filter(|j| j.new.md5 == new_md5)
    {
        return Ok(SwapOutcome::AlreadyInstalled(j.clone()));
    }
    let inherits = ours.filter(|j| j.new.md5 == current);
    if inherits.is_none() && patched {
        return Err(hint(
            format!(
                "{} is already an rdna1-patch build (it carries {MARKER_PREFIX} markers), but no transaction in {} put it there, so there is no original to go back to",
                target.display(),
                locked.state.root().display()
            ),
            format!(
                "if another --state-dir installed it, run this with that one. If that state is lost, reinstall torch to get its own library back (`pip install --force-reinstall torch=={}` from the index you installed it from), then install again",
                torch.version
            ),
        ));
    }
    let dir = target.parent().unwrap_or(Path::new("/"));
    ensure_writable(dir)?;

    let mut j = new_journal(locked, swap, &journals, current, new_md5, inherits)?;
    locked.save(&mut j)?;
    crash_point!("install-begun");

    if j.inherits.is_none()
        && let Err(e) = write_backup(target, &j.backup, &j.original)
    {
        locked.set(&mut j, State::Aborted)?;
        return Err(out_of_space(
            e,
            locked.state.root(),
            "torch was not changed",
        ));
    }
    locked.set(&mut j, State::BackedUp)?;
    crash_point!("install-backed-up");
    swap_in(locked, swap, &mut j)?;
    locked.set(&mut j, State::Installed)?;
    crash_point!("install-installed");
    supersede(locked, &j)?;
    Ok(SwapOutcome::Installed(j))
}

/// The journal of a new install. Over our own earlier install, the
/// original (and its backup) is that transaction's.
fn new_journal(
    locked: &Locked,
    swap: &Swap,
    journals: &Journals,
    current: String,
    new_md5: String,
    inherits: Option<&Journal>,
) -> Result<Journal> {
    let torch = swap.torch;
    let target = &torch.target;
    let id = journals
        .last_id
        .max(journals.list.last().map_or(0, |j| j.id))
        + 1;
    let (original, backup, inherits) = match inherits {
        Some(prev) => (prev.original.clone(), prev.backup.clone(), Some(prev.id)),
        None => {
            let meta = std::fs::metadata(target)?;
            let original = FileRec {
                md5: current.clone(),
                size: meta.len(),
                mode: fsutil::mode(target)?,
            };
            let backup = locked.state.backup_path(&current);
            (original, backup, None)
        }
    };
    Ok(Journal {
        id,
        state: State::Begun,
        created: now(),
        updated: String::new(),
        torch: TorchRec {
            dir: torch.dir.clone(),
            version: torch.version.clone(),
            hip: torch.hip.clone(),
            target: target.clone(),
            sdk: match &torch.layout {
                crate::swap::torch::Layout::Bundled => None,
                crate::swap::torch::Layout::RocmSdk(sdk) => Some(SdkRec {
                    version: sdk.version.clone(),
                    family: sdk.family.clone(),
                    package: sdk.package.clone(),
                    library: sdk.library.clone(),
                }),
            },
        },
        build: swap.build.clone(),
        original: original.clone(),
        backup,
        new: FileRec {
            md5: new_md5,
            size: std::fs::metadata(swap.staged)?.len(),
            mode: original.mode,
        },
        inherits,
    })
}

/// Write the new file next to the target, check it there, and rename it
/// over the target; the journal says which step it got to.
fn swap_in(locked: &Locked, swap: &Swap, j: &mut Journal) -> Result<()> {
    let target = &swap.torch.target;
    let dir = target.parent().unwrap_or(Path::new("/"));
    let temp = j.temp(false);
    let written = fsutil::copy_synced(swap.staged, &temp, j.original.mode).and_then(|()| {
        crash_point!("install-temp-written");
        (swap.check)(&temp)
    });
    if let Err(e) = written {
        let _ = fsutil::remove_own_file(&temp);
        locked.set(j, State::Aborted)?;
        return Err(out_of_space(e, dir, "torch was not changed"));
    }
    locked.set(j, State::Swapping)?;
    crash_point!("install-swapping");

    // The temp file is in the target's own directory, so this rename never
    // crosses a filesystem.
    std::fs::rename(&temp, target)
        .with_context(|| format!("cannot rename {} to {}", temp.display(), target.display()))?;
    fsutil::sync_dir(dir)?;
    crash_point!("install-renamed");

    let after = checksum::md5_file(target)?;
    if after != j.new.md5 {
        bail!(
            "{} reads back as MD5 {after} after the swap, not {}; run `rdna1-patch rollback` to restore the original",
            target.display(),
            j.new.md5
        );
    }
    Ok(())
}

/// Copy the original to its backup (unless an identical backup is there)
/// and read it back. A partial copy never stays behind.
fn write_backup(target: &Path, backup: &Path, original: &FileRec) -> Result<()> {
    let fresh = checksum::md5_file(backup).ok().as_ref() == Some(&original.md5);
    if !fresh {
        let tmp = backup.with_extension("so.tmp");
        let copied = fsutil::copy_synced(target, &tmp, 0o444).and_then(|()| {
            crash_point!("install-backup-written");
            std::fs::rename(&tmp, backup)
                .with_context(|| format!("cannot create {}", backup.display()))
        });
        if let Err(e) = copied {
            let _ = fsutil::remove_own_file(&tmp);
            return Err(e);
        }
        fsutil::sync_dir(backup.parent().unwrap_or(Path::new("/")))?;
    }
    let copy = checksum::md5_file(backup)?;
    if copy != original.md5 {
        bail!(
            "the backup {} reads back as MD5 {copy}, not {}",
            backup.display(),
            original.md5
        );
    }
    Ok(())
}

/// Add what was left as it was, and, when the disk was full, where.
pub fn out_of_space(e: anyhow::Error, place: &Path, unchanged: &str) -> anyhow::Error {
    if fsutil::is_disk_full(&e) {
        hint(
            format!("{e:#}; {unchanged} and the partial copy was removed"),
            format!(
                "free space on the disk holding {} (or pass a --state-dir on a disk with room), then run this again",
                place.display()
            ),
        )
    } else {
        e.context(unchanged.to_owned())
    }
}

fn ensure_writable(dir: &Path) -> Result<()> {
    fsutil::probe_writable(dir).map_err(|e| {
            hint(
                format!("cannot write to {}: {e}; nothing was changed", dir.display()),
                "run as the user that installed torch (or with sudo for a system-wide torch), or install into a virtualenv you own",
            )
        })
}

/// What a rollback did.
pub enum Rolled {
    /// Each transaction rolled back, newest first, and whether its original
    /// was already in place.
    Done(Vec<(Journal, bool)>),
    /// Nothing installed; the last transaction, if any.
    Nothing(Option<Box<Journal>>),
}

/// Roll back the newest installed transaction, or with `to`, every one from
/// the newest down to `to`. Transactions whose torch is gone are closed on
/// the way (their notes go to `notes`).
pub fn rollback(locked: &Locked, to: Option<u32>, notes: &mut Vec<String>) -> Result<Rolled> {
    let live = |j: &&Journal| matches!(j.state, State::Installed | State::Replaced);
    let all = locked.journals()?.list;
    for j in all.iter().filter(live) {
        if found(j, &all) == Found::Gone {
            let mut j = j.clone();
            locked.set(&mut j, State::Abandoned)?;
            notes.push(format!(
                "transaction {}: {} is gone, so it is closed; the original stays in {}",
                j.id,
                j.torch.target.display(),
                j.backup.display()
            ));
        }
    }
    let journals = locked.journals()?.list;
    let chosen: Vec<Journal> = match to {
        Some(id) => {
            let Some(j) = journals.iter().find(|j| j.id == id) else {
                return Err(hint(
                    format!("there is no transaction {id}"),
                    "`rdna1-patch rollback --list` shows them",
                ));
            };
            if !live(&j) {
                return Err(hint(
                    format!(
                        "transaction {id} is {} already; there is nothing of it to undo",
                        j.state.name()
                    ),
                    "`rdna1-patch rollback --list` shows every transaction and its state",
                ));
            }
            journals
                .iter()
                .rev()
                .filter(live)
                .filter(|j| j.id >= id)
                .cloned()
                .collect()
        }
        None => match journals.iter().rev().find(|j| j.state == State::Installed) {
            Some(j) => vec![j.clone()],
            None => return Ok(Rolled::Nothing(journals.last().cloned().map(Box::new))),
        },
    };
    // Lock every torch concerned, and check every backup, before changing anything.
    let mut held = Vec::new();
    for j in &chosen {
        // One lock per directory: a second flock on it from this process
        // would conflict with the first.
        let dir = j.torch.target.parent().map(Path::to_owned);
        if !held.iter().any(|(d, _)| *d == dir) {
            held.push((dir, locked.lock_target(&j.torch.target)?));
        }
        if found(j, &journals) != Found::Original {
            check_backup(j)?;
        }
    }
    let mut done = Vec::new();
    for id in chosen.iter().map(|j| j.id) {
        // Re-read: undoing a later transaction may have settled this one.
        let all = locked.journals()?.list;
        let Some(mut j) = all.iter().find(|j| j.id == id).cloned() else {
            continue;
        };
        if !live(&&j) {
            continue;
        }
        let already = undo(locked, &mut j, &all)?;
        let inherited = j.inherits;
        done.push((j, already));
        // Its original is the one the transaction it replaced kept.
        if let Some(mut p) = inherited.and_then(|prev| {
            all.iter()
                // Installed too: a run killed before it marked `prev`
                // replaced; either way `prev`'s original is back now.
                .find(|p| p.id == prev && matches!(p.state, State::Replaced | State::Installed))
                .cloned()
        }) {
            locked.set(&mut p, State::RolledBack)?;
            done.push((p, true));
        }
    }
    Ok(Rolled::Done(done))
}

fn check_backup(j: &Journal) -> Result<()> {
    let actual = checksum::md5_file(&j.backup);
    if actual.as_ref().ok() == Some(&j.original.md5) {
        return Ok(());
    }
    let what = match actual {
        Ok(m) => format!("its MD5 is {m}"),
        Err(e) => format!("{e:#}"),
    };
    Err(hint(
        format!(
            "the backup of the original {} is not the file transaction {} saved: {what}, the journal says {}; nothing was changed",
            j.torch.target.display(),
            j.id,
            j.original.md5
        ),
        format!(
            "rdna1-patch will not restore a damaged original. Reinstall torch {} to get a clean one (e.g. `pip install --force-reinstall torch=={}` with the index you installed it from)",
            j.torch.version, j.torch.version
        ),
    ))
}

/// Put `j`'s original back; true when it already was.
fn undo(locked: &Locked, j: &mut Journal, all: &[Journal]) -> Result<bool> {
    match found(j, all) {
        Found::Original => {
            locked.set(j, State::RolledBack)?;
            return Ok(true);
        }
        Found::New => {}
        Found::Earlier(p) => {
            return Err(changed_elsewhere(
                j,
                &format!("the build of transaction {p}"),
            ));
        }
        Found::Gone => return Err(changed_elsewhere(j, "gone")),
        Found::Other(what) => return Err(changed_elsewhere(j, &what)),
    }
    // The target must still be what torch loads: a journal edited to point
    // elsewhere is not followed.
    if j.library().canonicalize().ok().as_ref() != Some(&j.torch.target) {
        return Err(hint(
            format!(
                "{} no longer leads to {}, which transaction {} changed; nothing was changed",
                j.library().display(),
                j.torch.target.display(),
                j.id
            ),
            format!(
                "if torch was reinstalled, `rdna1-patch rollback --abandon {}` closes the transaction; the original stays in {}",
                j.id,
                j.backup.display()
            ),
        ));
    }
    // `rollback` checked the backup before changing anything; what is
    // checked here is the copy about to take the library's name.
    let dir = j.torch.target.parent().unwrap_or(Path::new("/")).to_owned();
    let temp = j.temp(true);
    locked.set(j, State::RollingBack)?;
    crash_point!("rollback-begun");
    let copied = fsutil::copy_synced(&j.backup, &temp, j.original.mode)
        .and_then(|()| checksum::md5_file(&temp));
    let copy = match copied {
        Ok(m) => m,
        Err(e) => {
            let _ = fsutil::remove_own_file(&temp);
            locked.set(j, State::Installed)?;
            return Err(out_of_space(e, &dir, "torch was not changed"));
        }
    };
    if copy != j.original.md5 {
        let _ = fsutil::remove_own_file(&temp);
        locked.set(j, State::Installed)?;
        bail!(
            "the copy of the backup {} reads back as MD5 {copy}, not {}; torch was not changed",
            j.backup.display(),
            j.original.md5
        );
    }
    crash_point!("rollback-temp-written");
    std::fs::rename(&temp, &j.torch.target).with_context(|| {
        format!(
            "cannot rename {} to {}",
            temp.display(),
            j.torch.target.display()
        )
    })?;
    fsutil::sync_dir(&dir)?;
    crash_point!("rollback-renamed");
    let after = checksum::md5_file(&j.torch.target)?;
    if after != j.original.md5 {
        bail!(
            "{} reads back as MD5 {after} after restoring, not {}",
            j.torch.target.display(),
            j.original.md5
        );
    }
    locked.set(j, State::RolledBack)?;
    Ok(false)
}

/// Close a transaction without touching torch: one whose library something
/// else replaced, or whose torch is gone. Works whatever state the
/// transaction was left in, unless our library is still in place.
pub fn abandon(locked: &Locked, id: u32) -> Result<Journal> {
    let all = locked.journals()?.list;
    let mut j = all.iter().find(|j| j.id == id).cloned().ok_or_else(|| {
        hint(
            format!("there is no transaction {id}"),
            "`rdna1-patch rollback --list` shows them",
        )
    })?;
    if matches!(
        j.state,
        State::RolledBack | State::Aborted | State::Abandoned
    ) {
        bail!("transaction {id} is {} already", j.state.name());
    }
    if found(&j, &all) == Found::New {
        return Err(hint(
            format!(
                "the library transaction {id} installed is still in {}",
                j.torch.target.display()
            ),
            "use `rdna1-patch rollback` to put the original back",
        ));
    }
    j.remove_temps();
    locked.set(&mut j, State::Abandoned)?;
    Ok(j)
}
