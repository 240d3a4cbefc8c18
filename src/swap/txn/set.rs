//! rocBLAS's set as one transaction, over a torch that bundles it: its
//! library and its Tensile directory torch/lib/rocblas/library, which work
//! only together (the architecture-free catalogues are shared by every
//! target, so files of two builds do not mix). Both originals are backed
//! up before either is touched; the new directory is staged whole beside
//! the old one and exchanged with it in one step (renameat2), then the
//! library is renamed over its own. A run stopped between the two finds,
//! on its next run, the new directory with the old library and the new
//! library staged beside it, read back: it finishes the swap (a rollback
//! likewise). Every run thus ends with torch holding one whole set.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::checksum;
use crate::error::hint;
use crate::fsutil;
use crate::torch::Torch;

use super::install::{
    SwapOutcome, ensure_root_may_change, ensure_writable, library_out_of_space, next_id,
    write_backup, write_temp,
};
use super::journal::{
    BuildRec, FileRec, Journal, Journals, SetRec, State, TENSILE_DIR, TorchRec, now, temp_path,
};
use super::recover::{changed_elsewhere, supersede};
use super::state::Locked;
use super::tree::{self, Entry, TreeRec};

/// Everything the swap of a set needs, checked by the caller.
pub struct SetSwap<'a> {
    pub torch: &'a Torch,
    /// torch's librocblas file, by its real path, in torch/lib.
    pub target: &'a Path,
    /// The name libtorch_hip.so loads it by.
    pub loads: &'a str,
    pub build: BuildRec,
    /// The new library, ready to go in (relinked in the staging dir, or
    /// the prefix's own), and its MD5 when known (the prefix's checked
    /// MD5SUMS).
    pub staged: &'a Path,
    pub staged_md5: Option<&'a str>,
    /// Run on the new library where it lands, before it takes the name.
    pub check: &'a dyn Fn(&Path) -> Result<()>,
    /// The prefix's Tensile directory, and its entries with the MD5s the
    /// prefix's MD5SUMS has (checked).
    pub tensile: &'a Path,
    pub entries: &'a [Entry],
}

/// What is in torch now, for a set's journal.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    Original,
    New,
    /// Another transaction's set, whole: the one this went over.
    Earlier(u32),
    /// The new directory with another library: an install stopped
    /// between its two renames.
    HalfIn,
    /// The original directory with the new library: a rollback stopped
    /// between its two renames.
    HalfOut,
    Gone,
    Other(String),
}

fn jobs() -> usize {
    checksum::default_jobs()
}

fn set_of(j: &Journal) -> &SetRec {
    j.set.as_ref().expect("a set's journal")
}

pub(super) fn found(j: &Journal, all: &[Journal]) -> Found {
    let set = set_of(j);
    if !j.torch.dir.join("version.py").is_file() || !j.torch.target.exists() {
        return Found::Gone;
    }
    let lib = match checksum::md5_file(&j.torch.target) {
        Ok(m) => m,
        Err(e) => return Found::Other(format!("{e:#}")),
    };
    let earlier: Vec<&Journal> = all
        .iter()
        .filter(|p| p.id != j.id && p.torch.target == j.torch.target && p.set.is_some())
        .collect();
    let known: Vec<&TreeRec> = set
        .original
        .iter()
        .chain([&set.new])
        .chain(earlier.iter().map(|p| &set_of(p).new))
        .collect();
    let dir = match tree::found(&set.dir, &known, jobs()) {
        Ok(d) => d,
        Err(e) => return Found::Other(format!("{e:#}")),
    };
    let (dir_original, dir_new) = (dir == set.original, dir.as_ref() == Some(&set.new));
    let (lib_original, lib_new) = (lib == j.original.md5, lib == j.new.md5);
    // A whole set first: the new, the original, an earlier one (whose
    // directory may be the new one's, installed over with another library).
    if lib_new && dir_new {
        return Found::New;
    }
    if lib_original && dir_original {
        return Found::Original;
    }
    if let Some(p) = earlier
        .iter()
        .find(|p| p.new.md5 == lib && dir.as_ref() == Some(&set_of(p).new))
    {
        return Found::Earlier(p.id);
    }
    match (dir_new, dir_original) {
        (true, _) => Found::HalfIn,
        (_, true) if lib_new => Found::HalfOut,
        _ => Found::Other(format!(
            "librocblas MD5 {lib}, {}",
            match &dir {
                None => format!("no {TENSILE_DIR}"),
                Some(d) => format!("{TENSILE_DIR} of {} file(s), {} bytes", d.files, d.bytes),
            }
        )),
    }
}

/// What the swap found before it began: torch's set now, and the
/// transaction of ours it goes over, if any.
struct Found0<'a> {
    dir: PathBuf,
    stamp: fsutil::Stamp,
    current: String,
    new_md5: String,
    new_tree: TreeRec,
    inherits: Option<&'a Journal>,
    /// torch's own directory, read whole (not over an install of ours).
    original: Option<Vec<Entry>>,
}

/// torch's set as it is; `Err`: the set is installed already, by that
/// transaction.
fn look<'a>(
    s: &SetSwap,
    journals: &'a Journals,
) -> Result<std::result::Result<Found0<'a>, Journal>> {
    let target = s.target;
    let dir = target.with_file_name(TENSILE_DIR);
    let new_tree = tree::record(s.entries);
    let new_md5 = match s.staged_md5 {
        Some(m) => m.to_owned(),
        None => checksum::md5_file(s.staged)?,
    };
    if let Ok(m) = std::fs::symlink_metadata(&dir)
        && !m.is_dir()
    {
        return Err(hint(
            format!(
                "{} is not a directory of torch's own (a symlink or a file stands there); rdna1-patch replaces only a directory; nothing was changed",
                dir.display()
            ),
            format!(
                "give torch a {TENSILE_DIR} of its own (reinstall torch {}), then run this again",
                s.torch.version
            ),
        ));
    }
    let stamp = fsutil::Stamp::read(target)?;
    let current = checksum::md5_file(target)?;
    let ours = journals
        .list
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.set.is_some() && j.torch.target == target);
    let mut inherits = None;
    if let Some(o) = ours.filter(|o| o.new.md5 == current) {
        let now = tree::found(&dir, &[&set_of(o).new], jobs())?;
        if now.as_ref() != Some(&set_of(o).new) {
            return Err(changed_elsewhere(
                o,
                "its Tensile directory is not the one installed",
            ));
        }
        if current == new_md5 && set_of(o).new == new_tree {
            return Ok(Err(o.clone()));
        }
        inherits = Some(o);
    }
    let original = match (inherits, dir.exists()) {
        (None, true) => Some(tree::read(&dir, jobs())?),
        _ => None,
    };
    Ok(Ok(Found0 {
        dir,
        stamp,
        current,
        new_md5,
        new_tree,
        inherits,
        original,
    }))
}

/// The journal of the swap: over our own install, the originals (and
/// their backups) are that transaction's.
fn new_journal(locked: &Locked, s: &SetSwap, journals: &Journals, f: &Found0) -> Result<Journal> {
    let parent = f.dir.parent().unwrap_or(Path::new("/"));
    let (original, backup, set_original, made_parent) = match f.inherits {
        Some(p) => (
            p.original.clone(),
            p.backup.clone(),
            set_of(p).original.clone(),
            set_of(p).made_parent,
        ),
        None => (
            FileRec {
                md5: f.current.clone(),
                size: std::fs::metadata(s.target)?.len(),
                mode: fsutil::mode(s.target)?,
            },
            locked.state.backup_path(&f.current),
            f.original.as_deref().map(tree::record),
            !parent.exists(),
        ),
    };
    Ok(Journal {
        id: next_id(locked, journals)?,
        state: State::Begun,
        created: now(),
        updated: String::new(),
        torch: TorchRec::of(s.torch, s.target),
        build: s.build.clone(),
        new: FileRec {
            md5: f.new_md5.clone(),
            size: std::fs::metadata(s.staged)?.len(),
            mode: crate::owner::plain_mode(original.mode),
        },
        original,
        backup,
        inherits: f.inherits.map(|p| p.id),
        system: None,
        set: Some(SetRec {
            loads: s.loads.to_owned(),
            dir: f.dir.clone(),
            original: set_original,
            new: f.new_tree.clone(),
            made_parent,
        }),
    })
}

/// Both originals into the state dir's backups (unless an earlier
/// install of ours kept them): the library as MIOpen's is, the directory
/// whole, each file a hard link where it may be.
fn back_up(locked: &Locked, j: &Journal, f: &Found0) -> Result<()> {
    if f.inherits.is_some() {
        return Ok(());
    }
    write_backup(&j.torch.target, &j.backup, &j.original, &f.stamp)?;
    if let (Some(rec), Some(entries)) = (&set_of(j).original, &f.original) {
        let to = locked.state.tree_backup_path(&rec.digest);
        tree::copy_to(&f.dir, Some(entries), &to, rec, jobs())?;
    }
    Ok(())
}

/// The swap of a set as a transaction: journal, back up both originals,
/// stage and check both new ones beside them, exchange the directory,
/// rename the library.
pub fn swap(locked: &Locked, s: &SetSwap) -> Result<SwapOutcome> {
    let journals = locked.journals()?;
    let f = match look(s, &journals)? {
        Ok(f) => f,
        Err(done) => return Ok(SwapOutcome::AlreadyInstalled(done)),
    };
    let (target, dir) = (s.target, &f.dir);
    let lib_dir = target.parent().unwrap_or(Path::new("/"));
    let parent = dir.parent().unwrap_or(lib_dir);
    ensure_root_may_change(target)?;
    ensure_writable(lib_dir)?;
    if parent.exists() {
        ensure_root_may_change(parent)?;
        ensure_writable(parent)?;
    }
    let mut j = new_journal(locked, s, &journals, &f)?;
    locked.save(&mut j)?;
    crash_point!("set-begun");
    if let Err(e) = back_up(locked, &j, &f) {
        locked.abort(&mut j)?;
        return Err(super::install::out_of_space(
            e,
            locked.state.root(),
            "torch was not changed",
        ));
    }
    locked.set(&mut j, State::BackedUp)?;
    crash_point!("set-backed-up");
    let (lib_temp, dir_temp) = (j.temp(false), temp_path(dir, j.id, false));
    let written = (|| -> Result<tree::Staged> {
        fsutil::create_dir_all(parent)?;
        write_temp(s.staged, None, &lib_temp, &j)?;
        let staged = tree::stage(s.tensile, s.entries, &dir_temp, jobs())?;
        (s.check)(&lib_temp)?;
        Ok(staged)
    })();
    let staged = match written {
        Ok(staged) => staged,
        Err(e) => {
            j.remove_temps();
            locked.abort(&mut j)?;
            remove_made_parent(&j);
            return Err(library_out_of_space(e, lib_dir, "torch was not changed"));
        }
    };
    locked.set(&mut j, State::Swapping)?;
    crash_point!("set-swapping");
    tree::swap_in(&dir_temp, dir, staged)?;
    crash_point!("set-dir-swapped");
    rename(&lib_temp, target)?;
    crash_point!("set-renamed");
    locked.set(&mut j, State::Installed)?;
    crash_point!("set-installed");
    supersede(locked, &j)?;
    // The directory that was there is now at the temp name, kept in the
    // backup: it goes.
    let _ = fsutil::remove_path(&dir_temp);
    Ok(SwapOutcome::Installed(j))
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fsutil::rename_in_dir(from, to)
        .with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))
}

/// torch/lib/rocblas, when this transaction made it and it is empty again.
fn remove_made_parent(j: &Journal) {
    let set = set_of(j);
    if set.made_parent
        && let Some(p) = set.dir.parent()
        && let Ok((dir, name)) = fsutil::fd::parent_of(p)
    {
        let _ = dir.remove_dir(name);
    }
}

/// The backups a rollback restores from must be the originals the
/// transaction saved: the library's, and the directory's.
pub(super) fn check_backups(locked: &Locked, j: &Journal) -> Result<Option<Vec<Entry>>> {
    super::journal::check_backup(j)?;
    let Some(rec) = &set_of(j).original else {
        return Ok(None);
    };
    let backup = locked.state.tree_backup_path(&rec.digest);
    let (got, entries) = tree::found_read(&backup, &[rec], jobs())?.unzip();
    if got.as_ref() == Some(rec) {
        return Ok(entries.flatten());
    }
    Err(hint(
        format!(
            "the backup {} of torch's original {} is not the one transaction {} saved ({}); nothing was changed",
            backup.display(),
            set_of(j).dir.display(),
            j.id,
            match got {
                None => "it is not there".to_owned(),
                Some(t) => format!(
                    "{} file(s), {} bytes, digest {}",
                    t.files, t.bytes, t.digest
                ),
            }
        ),
        format!(
            "rdna1-patch will not restore a damaged original. Reinstall torch {} to get a clean one (e.g. `pip install --force-reinstall torch=={}` with the index you installed it from)",
            j.torch.version, j.torch.version
        ),
    ))
}

/// Put the set's originals back, once `rollback::undo` found torch holds
/// the set `j` installed and its library is still what torch loads.
/// `checked`: the backup's entries as [`check_backups`] read them in this
/// run, under the same lock; staging reads every file back against them,
/// so the backup is not read a third time.
pub(super) fn undo(locked: &Locked, j: &mut Journal, checked: Option<Vec<Entry>>) -> Result<bool> {
    let set = set_of(j).clone();
    let lib_dir = j.torch.target.parent().unwrap_or(Path::new("/")).to_owned();
    let (lib_temp, dir_temp) = (j.temp(true), temp_path(&set.dir, j.id, true));
    locked.set(j, State::RollingBack)?;
    crash_point!("set-rollback-begun");
    let staged = (|| -> Result<Option<tree::Staged>> {
        fsutil::copy_synced(&j.backup, &lib_temp, j.original.mode)?;
        let copy = checksum::md5_file(&lib_temp)?;
        if copy != j.original.md5 {
            bail!(
                "the copy of the backup {} reads back as MD5 {copy}, not {}",
                j.backup.display(),
                j.original.md5
            );
        }
        if let Some(rec) = &set.original {
            let backup = locked.state.tree_backup_path(&rec.digest);
            let entries = match checked {
                Some(entries) => entries,
                None => tree::read(&backup, jobs())?,
            };
            if tree::record(&entries) != *rec {
                bail!(
                    "the backup {} changed since it was checked",
                    backup.display()
                );
            }
            return Ok(Some(tree::stage(&backup, &entries, &dir_temp, jobs())?));
        }
        Ok(None)
    })();
    let staged = match staged {
        Ok(staged) => staged,
        Err(e) => {
            j.remove_temps();
            locked.set(j, State::Installed)?;
            return Err(library_out_of_space(e, &lib_dir, "torch was not changed"));
        }
    };
    match staged {
        Some(staged) => tree::swap_in(&dir_temp, &set.dir, staged)?,
        // torch had no directory there: ours goes, to the temp name.
        None => rename(&set.dir, &dir_temp)?,
    }
    crash_point!("set-rollback-dir");
    rename(&lib_temp, &j.torch.target)?;
    crash_point!("set-rollback-renamed");
    super::journal::read_back_original(j)?;
    locked.set(j, State::RolledBack)?;
    let _ = fsutil::remove_path(&dir_temp);
    remove_made_parent(j);
    Ok(false)
}

/// Settle a set's journal a killed run left open; the note, or None when
/// it is left for the user (something else changed torch).
pub(super) fn recover_one(
    locked: &Locked,
    j: &mut Journal,
    all: &[Journal],
) -> Result<Option<String>> {
    let was = j.state;
    let mut f = found(j, all);
    // Stopped between the two renames: the library staged beside it,
    // read back, finishes what was begun.
    let finish = match (was, &f) {
        (State::Swapping, Found::HalfIn) => Some((j.temp(false), j.new.md5.clone(), Found::New)),
        (State::RollingBack, Found::HalfOut) => {
            Some((j.temp(true), j.original.md5.clone(), Found::Original))
        }
        _ => None,
    };
    let mut finished = false;
    if let Some((temp, md5, then)) = finish
        && checksum::md5_file(&temp).ok().as_ref() == Some(&md5)
    {
        rename(&temp, &j.torch.target)?;
        f = then;
        finished = true;
    }
    j.remove_temps();
    let how = match finished {
        true => {
            ", stopped between its two renames: the library staged beside it was read back and renamed into place"
        }
        false => "",
    };
    let note = match f {
        Found::Gone => {
            locked.set(j, State::Abandoned)?;
            format!(
                "transaction {} was interrupted ({}) and torch at {} is gone now, so it is closed; the originals stay in {}",
                j.id,
                was.name(),
                j.torch.dir.display(),
                j.backup.display()
            )
        }
        Found::New if was == State::RollingBack => {
            locked.set(j, State::Installed)?;
            format!(
                "transaction {} was interrupted while rolling back, before the originals went back; its rocBLAS is installed again",
                j.id
            )
        }
        Found::New => {
            locked.set(j, State::Installed)?;
            supersede(locked, j)?;
            format!(
                "transaction {} was interrupted ({}){how}; the new rocBLAS library and its Tensile directory are both in place, so it is now installed",
                j.id,
                was.name()
            )
        }
        Found::Original => {
            let rolled = was == State::RollingBack;
            locked.set(
                j,
                if rolled {
                    State::RolledBack
                } else {
                    State::Aborted
                },
            )?;
            remove_made_parent(j);
            format!(
                "transaction {} was interrupted ({}){how}; torch's own rocBLAS library and Tensile directory are in place, so it is now {}",
                j.id,
                was.name(),
                if rolled { "rolled back" } else { "aborted" }
            )
        }
        Found::Earlier(p) if was != State::RollingBack => {
            locked.set(j, State::Aborted)?;
            format!(
                "transaction {} was interrupted before the swap ({}); torch still holds the rocBLAS of transaction {p}, so it is now aborted",
                j.id,
                was.name()
            )
        }
        _ => return Ok(None),
    };
    Ok(Some(note))
}
