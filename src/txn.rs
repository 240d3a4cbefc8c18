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

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::checksum;
use crate::error::hint;
use crate::fsutil;
use crate::torch::Torch;

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
    /// The temp file next to the target that the current step writes.
    pub temp: PathBuf,
    /// The transaction whose original this one kept (installing twice).
    pub inherits: Option<u32>,
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
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
            None => directories::ProjectDirs::from("", "", "rdna1-patch")
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

    /// Take the lock; a second run waits for nothing and says who holds it.
    pub fn lock(&self) -> Result<Locked<'_>> {
        for dir in [
            self.journal_dir(),
            self.root.join("backups"),
            self.staging(),
        ] {
            fsutil::create_dir_all(&dir)?;
        }
        let path = self.root.join("lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
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
        // Leftovers of a killed run; nothing refers to them.
        let staging = self.staging();
        if let Ok(rd) = std::fs::read_dir(&staging) {
            for e in rd.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        Ok(Locked {
            state: self,
            _file: file,
        })
    }

    /// All journals, oldest first. Reading needs no lock: journals are
    /// replaced atomically.
    pub fn journals(&self) -> Result<Vec<Journal>> {
        let dir = self.journal_dir();
        let mut out = Vec::new();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
        };
        for e in rd {
            let path = e?.path();
            if path.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            out.push(toml::from_str::<Journal>(&text).with_context(|| {
                format!("the transaction journal {} is damaged", path.display())
            })?);
        }
        out.sort_by_key(|j| j.id);
        Ok(out)
    }
}

/// The state dir with its lock held.
pub struct Locked<'a> {
    pub state: &'a StateDir,
    _file: File,
}

impl Locked<'_> {
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
    Other(String),
}

fn found(j: &Journal) -> Found {
    match checksum::md5_file(&j.torch.target) {
        Ok(m) if m == j.original.md5 => Found::Original,
        Ok(m) if m == j.new.md5 => Found::New,
        Ok(m) => Found::Other(format!("MD5 {m}")),
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

/// Settle transactions a killed run left open, from what is on disk. Returns
/// one line per transaction settled.
pub fn recover(locked: &Locked) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for mut j in locked.state.journals()? {
        if !j.state.unfinished() {
            continue;
        }
        let _ = std::fs::remove_file(&j.temp);
        let was = j.state;
        match (was, found(&j)) {
            (State::RollingBack, Found::Original) => {
                locked.set(&mut j, State::RolledBack)?;
                notes.push(format!(
                    "transaction {} was interrupted while rolling back; the original was already back, so it is now rolled back",
                    j.id
                ));
            }
            (State::RollingBack, Found::New) => {
                locked.set(&mut j, State::Installed)?;
                notes.push(format!(
                    "transaction {} was interrupted while rolling back, before the original went back; it is installed again",
                    j.id
                ));
            }
            (_, Found::New) => {
                locked.set(&mut j, State::Installed)?;
                supersede(locked, &j)?;
                notes.push(format!(
                    "transaction {} was interrupted after the swap; the new library is in place and checked, so it is now installed",
                    j.id
                ));
            }
            (_, Found::Original) => {
                locked.set(&mut j, State::Aborted)?;
                notes.push(format!(
                    "transaction {} was interrupted before the swap ({}); torch's original was never changed, so it is now aborted",
                    j.id,
                    was.name()
                ));
            }
            (_, Found::Other(what)) => return Err(changed_elsewhere(&j, &what)),
        }
    }
    Ok(notes)
}

/// Mark the transaction `j` inherited from as replaced by it.
fn supersede(locked: &Locked, j: &Journal) -> Result<()> {
    let Some(prev) = j.inherits else {
        return Ok(());
    };
    for mut p in locked.state.journals()? {
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
    /// Run on the new file in torch/lib before it takes the library's name
    /// (`ldd` there resolves $ORIGIN as it will be).
    pub check: &'a dyn Fn(&Path) -> Result<()>,
}

pub enum Outcome {
    Installed(Journal),
    /// The same library is already there, from this transaction.
    AlreadyInstalled(Journal),
}

pub fn install(locked: &Locked, swap: &Swap) -> Result<Outcome> {
    let torch = swap.torch;
    let target = &torch.target;
    let journals = locked.state.journals()?;
    let current = checksum::md5_file(target)?;
    let new_md5 = checksum::md5_file(swap.staged)?;
    let ours = journals
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == *target);
    if current == new_md5 {
        if let Some(j) = ours.filter(|j| j.new.md5 == new_md5) {
            return Ok(Outcome::AlreadyInstalled(j.clone()));
        }
        return Err(hint(
            format!(
                "{} is already this build (MD5 {new_md5}), but no transaction in {} put it there, so there is no original to go back to",
                target.display(),
                locked.state.root().display()
            ),
            "reinstall torch to get its own library back, then install again; or pass the --state-dir that the first install used",
        ));
    }
    ensure_writable(&torch.lib_dir)?;

    let id = journals.last().map_or(1, |j| j.id + 1);
    let (original, backup, inherits) = match ours.filter(|j| j.new.md5 == current) {
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
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let mut j = Journal {
        id,
        state: State::Begun,
        created: now(),
        updated: String::new(),
        torch: TorchRec {
            dir: torch.dir.clone(),
            version: torch.version.clone(),
            hip: torch.hip.clone(),
            target: target.clone(),
        },
        build: swap.build.clone(),
        original: original.clone(),
        backup: backup.clone(),
        new: FileRec {
            md5: new_md5.clone(),
            size: std::fs::metadata(swap.staged)?.len(),
            mode: original.mode,
        },
        temp: torch.lib_dir.join(format!(".{name}.rdna1-patch-{id}.tmp")),
        inherits,
    };
    locked.save(&mut j)?;
    crash_point!("install-begun");

    if inherits.is_none() {
        let fresh = checksum::md5_file(&backup).ok().as_ref() == Some(&original.md5);
        if !fresh {
            let tmp = backup.with_extension("so.tmp");
            fsutil::copy_synced(target, &tmp, 0o444)?;
            std::fs::rename(&tmp, &backup)
                .with_context(|| format!("cannot create {}", backup.display()))?;
            fsutil::sync_dir(backup.parent().unwrap_or(Path::new("/")))?;
        }
        crash_point!("install-backup-written");
        let copy = checksum::md5_file(&backup)?;
        if copy != original.md5 {
            locked.set(&mut j, State::Aborted)?;
            bail!(
                "the backup {} reads back as MD5 {copy}, not {}; torch was not changed",
                backup.display(),
                original.md5
            );
        }
    }
    locked.set(&mut j, State::BackedUp)?;
    crash_point!("install-backed-up");

    fsutil::copy_synced(swap.staged, &j.temp, original.mode)?;
    crash_point!("install-temp-written");
    if let Err(e) = (swap.check)(&j.temp) {
        let _ = std::fs::remove_file(&j.temp);
        locked.set(&mut j, State::Aborted)?;
        return Err(e.context("torch was not changed"));
    }
    locked.set(&mut j, State::Swapping)?;
    crash_point!("install-swapping");

    std::fs::rename(&j.temp, target)
        .with_context(|| format!("cannot rename {} to {}", j.temp.display(), target.display()))?;
    fsutil::sync_dir(&torch.lib_dir)?;
    crash_point!("install-renamed");

    let after = checksum::md5_file(target)?;
    if after != new_md5 {
        bail!(
            "{} reads back as MD5 {after} after the swap, not {new_md5}; run `rdna1-patch rollback` to restore the original",
            target.display()
        );
    }
    locked.set(&mut j, State::Installed)?;
    supersede(locked, &j)?;
    Ok(Outcome::Installed(j))
}

fn ensure_writable(dir: &Path) -> Result<()> {
    tempfile::Builder::new()
        .prefix(".rdna1-patch-probe")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| {
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
/// the newest down to `to`.
pub fn rollback(locked: &Locked, to: Option<u32>) -> Result<Rolled> {
    let journals = locked.state.journals()?;
    let live = |j: &&Journal| matches!(j.state, State::Installed | State::Replaced);
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
    // Check every backup before changing anything.
    for j in &chosen {
        if found(j) != Found::Original {
            check_backup(j)?;
        }
    }
    let mut done = Vec::new();
    for id in chosen.iter().map(|j| j.id) {
        // Re-read: undoing a later transaction may have settled this one.
        let Some(mut j) = locked.state.journals()?.into_iter().find(|j| j.id == id) else {
            continue;
        };
        if !live(&&j) {
            continue;
        }
        let already = undo(locked, &mut j)?;
        let inherited = j.inherits;
        done.push((j, already));
        // Its original is the one the transaction it replaced kept.
        if let Some(mut p) = inherited.and_then(|prev| {
            let all = locked.state.journals().ok()?;
            all.into_iter()
                .find(|p| p.id == prev && p.state == State::Replaced)
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
fn undo(locked: &Locked, j: &mut Journal) -> Result<bool> {
    match found(j) {
        Found::Original => {
            locked.set(j, State::RolledBack)?;
            return Ok(true);
        }
        Found::New => {}
        Found::Other(what) => return Err(changed_elsewhere(j, &what)),
    }
    // `rollback` checked the backup before changing anything; what is
    // checked here is the copy about to take the library's name.
    let name = j
        .torch
        .target
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    let dir = j.torch.target.parent().unwrap_or(Path::new("/")).to_owned();
    j.temp = dir.join(format!(".{name}.rdna1-patch-{}-rollback.tmp", j.id));
    locked.set(j, State::RollingBack)?;
    crash_point!("rollback-begun");
    fsutil::copy_synced(&j.backup, &j.temp, j.original.mode)?;
    let copy = checksum::md5_file(&j.temp)?;
    if copy != j.original.md5 {
        let _ = std::fs::remove_file(&j.temp);
        locked.set(j, State::Installed)?;
        bail!(
            "the copy of the backup {} reads back as MD5 {copy}, not {}; torch was not changed",
            j.backup.display(),
            j.original.md5
        );
    }
    crash_point!("rollback-temp-written");
    std::fs::rename(&j.temp, &j.torch.target).with_context(|| {
        format!(
            "cannot rename {} to {}",
            j.temp.display(),
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

/// Close a transaction whose target something else has replaced.
pub fn abandon(locked: &Locked, id: u32) -> Result<Journal> {
    let mut j = locked
        .state
        .journals()?
        .into_iter()
        .find(|j| j.id == id)
        .ok_or_else(|| {
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
    if found(&j) == Found::New {
        return Err(hint(
            format!(
                "the library transaction {id} installed is still in {}",
                j.torch.target.display()
            ),
            "use `rdna1-patch rollback` to put the original back",
        ));
    }
    let _ = std::fs::remove_file(&j.temp);
    locked.set(&mut j, State::Abandoned)?;
    Ok(j)
}
