//! The system route as a transaction: torch loads a system MIOpen it does
//! not own, so nothing is replaced. A fixed copy is added to torch/lib
//! under the name libtorch_hip.so needs, and, when torch/lib is not first
//! in libtorch_hip.so's run path, libtorch_hip.so gets `$ORIGIN` ahead
//! (its original kept as the backup). The order makes every instant safe:
//! the copy appears before libtorch_hip.so is edited, and on the way back
//! libtorch_hip.so is restored before the copy goes, so torch loads the
//! system library or the copy, never neither. The system file is only read.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::checksum;
use crate::error::hint;
use crate::fsutil;
use crate::owner;
use crate::swap::linker;
use crate::torch::{System, Torch};

use super::install::{SwapOutcome, ensure_root_may_change, ensure_writable, write_backup};
use super::journal::{
    BuildRec, FileRec, HipEdit, Journal, Journals, SetRec, State, SystemRec, TENSILE_DIR, TorchRec,
    check_backup, now, temp_path,
};
use super::state::Locked;
use super::tree::{self, Entry};

/// Everything the system route's swap needs, made and checked by the caller.
pub struct AddSystem<'a> {
    pub torch: &'a Torch,
    /// The system's library torch loads, and how (MIOpen's is the
    /// layout's, `Torch::system`; rocBLAS's its own).
    pub sys: &'a System,
    /// torch/lib/<the name libtorch_hip.so needs>: where the copy goes.
    pub copy_at: &'a Path,
    pub build: BuildRec,
    /// The fixed library with its run path set (`copy_run_path`), staged.
    pub copy: &'a Path,
    pub copy_run_path: String,
    /// libtorch_hip.so with `$ORIGIN` ahead, staged, when it needs that.
    pub hip_edited: Option<&'a Path>,
    /// The SHA-256 of the system library the fix was made from (or, for
    /// rocBLAS, that the copy goes beside).
    pub derived_from: &'a str,
    /// rocBLAS: its Tensile directory (the prefix's, with its checked
    /// entries), added as torch/lib/rocblas/library before the copy.
    pub tensile: Option<(&'a Path, &'a [Entry])>,
}

/// What is in torch now, for a system route journal.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// No copy; libtorch_hip.so as it was.
    Original,
    /// The copy, and libtorch_hip.so as edited (when it was).
    New,
    /// The copy, with libtorch_hip.so as it was: torch loads the system
    /// library; a run stopped between the two steps.
    Partial,
    Gone,
    Other(String),
}

pub(super) fn found(j: &Journal, s: &SystemRec) -> Found {
    if !j.torch.dir.join("version.py").is_file() || !s.hip.is_file() {
        return Found::Gone;
    }
    let copy = match std::fs::symlink_metadata(&j.torch.target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        _ => Some(checksum::md5_file(&j.torch.target).unwrap_or_else(|e| format!("{e:#}"))),
    };
    let copy_new = copy.as_ref() == Some(&j.new.md5);
    if let Some(c) = copy.as_ref().filter(|_| !copy_new) {
        return Found::Other(format!("{} is MD5 {c}", j.torch.target.display()));
    }
    // rocBLAS's Tensile directory: added before the copy, taken out after.
    let dir_there = match &j.set {
        None => copy_new,
        Some(set) => match tree::found(&set.dir, &[&set.new], checksum::default_jobs()) {
            Ok(None) => false,
            Ok(Some(t)) if t == set.new => true,
            Ok(Some(t)) => {
                return Found::Other(format!(
                    "{} holds {} file(s), {} bytes, not the directory transaction {} added",
                    set.dir.display(),
                    t.files,
                    t.bytes,
                    j.id
                ));
            }
            Err(e) => return Found::Other(format!("{e:#}")),
        },
    };
    if copy_new && !dir_there {
        return Found::Other(format!(
            "{} is there without its Tensile directory",
            j.torch.target.display()
        ));
    }
    let Some(edit) = &s.edit else {
        return match (copy_new, dir_there) {
            (true, _) => Found::New,
            (false, true) => Found::Partial,
            (false, false) => Found::Original,
        };
    };
    let hip = checksum::md5_file(&s.hip).unwrap_or_else(|e| format!("{e:#}"));
    match (copy_new, hip == j.original.md5, hip == edit.new.md5) {
        (false, true, _) if !dir_there => Found::Original,
        (false, true, _) => Found::Partial,
        (true, _, true) => Found::New,
        (true, true, _) => Found::Partial,
        _ => Found::Other(format!("{} is MD5 {hip}", s.hip.display())),
    }
}

/// Add the fixed copy to torch (and edit libtorch_hip.so when it needs
/// it), one journaled step at a time.
pub fn add(locked: &Locked, add: &AddSystem) -> Result<SwapOutcome> {
    let journals = locked.journals()?;
    let new_md5 = checksum::md5_file(add.copy)?;
    if let Some(done) = preflight(add, &journals, &new_md5)? {
        return Ok(done);
    }
    let lib_dir = add.copy_at.parent().unwrap_or(Path::new("/"));
    let mut j = new_journal(locked, add, &journals, new_md5)?;
    locked.save(&mut j)?;
    crash_point!("system-begun");
    let s = j.system.clone().expect("just made");
    let copy_temp = j.temp(false);
    let hip_temp = temp_path(&s.hip, j.id, false);
    let dir_temp = j.set.as_ref().map(|set| temp_path(&set.dir, j.id, false));
    let written = (|| -> Result<()> {
        if let (Some((from, entries)), Some(to)) = (add.tensile, &dir_temp) {
            fsutil::create_dir_all(to.parent().unwrap_or(lib_dir))?;
            tree::stage(from, entries, to, checksum::default_jobs())?;
        }
        if let Some(edited) = add.hip_edited {
            let stamp = fsutil::Stamp::read(&s.hip)?;
            write_backup(&s.hip, &j.backup, &j.original, &stamp)?;
            fsutil::copy_synced(edited, &hip_temp, j.original.mode)?;
            let edit = s.edit.as_ref().expect("an edit");
            read_back(&hip_temp, &edit.new.md5)?;
        }
        if !fsutil::link_own(add.copy, &copy_temp, Some(j.new.mode))? {
            fsutil::copy_synced(add.copy, &copy_temp, j.new.mode)?;
        }
        crash_point!("system-temps-written");
        read_back(&copy_temp, &j.new.md5)?;
        check_copy(&copy_temp, lib_dir)
    })();
    if let Err(e) = written {
        j.remove_temps();
        locked.abort(&mut j)?;
        remove_made_parent(&j);
        return Err(super::install::library_out_of_space(
            e,
            lib_dir,
            "torch was not changed",
        ));
    }
    locked.set(&mut j, State::BackedUp)?;
    locked.set(&mut j, State::Swapping)?;
    crash_point!("system-swapping");
    if let (Some(set), Some(from)) = (&j.set, &dir_temp) {
        rename(from, &set.dir)?;
        crash_point!("system-dir-added");
    }
    rename(&copy_temp, &j.torch.target)?;
    crash_point!("system-copy-added");
    if add.hip_edited.is_some() {
        rename(&hip_temp, &s.hip)?;
        crash_point!("system-hip-edited");
    }
    // What the loader does now: libtorch_hip.so must reach the copy.
    let reached = linker::resolve(&s.hip, &[])?
        .into_iter()
        .find(|d| Some(d.name.as_str()) == j.torch.target.file_name().and_then(|n| n.to_str()))
        .and_then(|d| d.path);
    if reached
        .as_ref()
        .and_then(|p| p.canonicalize().ok())
        .as_ref()
        != Some(&j.torch.target)
    {
        undo(locked, &mut j)?;
        bail!(
            "after the copy was added, libtorch_hip.so still loads {}, not {}; it was taken out again and torch is as it was",
            reached.map_or("nothing".into(), |p| p.display().to_string()),
            j.torch.target.display()
        );
    }
    locked.set(&mut j, State::Installed)?;
    crash_point!("system-installed");
    Ok(SwapOutcome::Installed(j))
}

/// What is checked before anything is written: an install of this fix
/// already there (the outcome), or why not to go on.
fn preflight(add: &AddSystem, journals: &Journals, new_md5: &str) -> Result<Option<SwapOutcome>> {
    let torch = add.torch;
    let sys = add.sys;
    let copy_path = add.copy_at;
    let lib_dir = copy_path.parent().unwrap_or(Path::new("/"));
    let rocblas = add.tensile.is_some();
    if let Some(prev) = installed(journals, torch, rocblas) {
        let s = prev.system.as_ref().expect("a system journal");
        if found(prev, s) == Found::New && prev.new.md5 == new_md5 {
            return Ok(Some(SwapOutcome::AlreadyInstalled(prev.clone())));
        }
        return Err(hint(
            format!(
                "transaction {} has another {} in {}; nothing was changed",
                prev.id,
                if rocblas { "rocBLAS" } else { "fixed copy" },
                prev.torch.target.display()
            ),
            "`rdna1-patch rollback` takes it out; then install again",
        ));
    }
    let dir = lib_dir.join(TENSILE_DIR);
    for there in [copy_path]
        .into_iter()
        .chain(rocblas.then_some(dir.as_path()))
    {
        if std::fs::symlink_metadata(there).is_ok() {
            return Err(hint(
                format!(
                    "{} is there already and no transaction of rdna1-patch put it there; nothing was changed",
                    there.display()
                ),
                "it is not what torch loads now; move it away if it is not yours, then run this again",
            ));
        }
    }
    ensure_root_may_change(&sys.hip)?;
    ensure_writable(lib_dir)?;
    shadowed(sys)?;
    let now_sha = crate::prefix::sha256_hex(&crate::elf::read_file(&sys.library)?);
    if now_sha != add.derived_from {
        return Err(hint(
            format!(
                "the system's {} changed while it was being fixed (a package upgrade?): the fix was made from SHA-256 {}, it is now {now_sha}; nothing was changed",
                sys.library.display(),
                add.derived_from
            ),
            "run `rdna1-patch install --into-torch` again: it fixes the library the system has now",
        ));
    }

    Ok(None)
}

/// Take out the copy an installed transaction of this torch added, when
/// it is not `keep_md5` (the fix about to go in): a fix of a system
/// library since upgraded. Its own transaction, rolled back.
pub fn take_out(locked: &Locked, torch: &Torch, keep_md5: &str) -> Result<Option<Journal>> {
    let journals = locked.journals()?;
    let Some(prev) = installed(&journals, torch, false).filter(|p| p.new.md5 != keep_md5) else {
        return Ok(None);
    };
    let mut prev = prev.clone();
    check_needs(&prev)?;
    undo(locked, &mut prev)?;
    Ok(Some(prev))
}

/// The installed system-route transaction of this torch, if any:
/// rocBLAS's, or MIOpen's.
fn installed<'a>(journals: &'a Journals, torch: &Torch, rocblas: bool) -> Option<&'a Journal> {
    journals.list.iter().rev().find(|j| {
        j.state == State::Installed
            && j.system.is_some()
            && j.set.is_some() == rocblas
            && j.torch.dir == torch.dir
    })
}

/// With a DT_RUNPATH, LD_LIBRARY_PATH is searched first: a directory on
/// it holding the name torch needs wins over anything in torch/lib.
fn shadowed(sys: &System) -> Result<()> {
    if sys.rpath {
        return Ok(());
    }
    let Some(path) = std::env::var_os("LD_LIBRARY_PATH") else {
        return Ok(());
    };
    let Some(dir) = std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .find(|d| d.join(&sys.needed).exists())
    else {
        return Ok(());
    };
    Err(hint(
        format!(
            "LD_LIBRARY_PATH names {}, whose {} the loader takes before anything libtorch_hip.so's RUNPATH names: a fixed copy in torch/lib would never be loaded; nothing was changed",
            dir.display(),
            sys.needed
        ),
        format!(
            "take {} out of LD_LIBRARY_PATH (the ROCm libraries torch needs are found through libtorch_hip.so's own run path and ld.so.conf), then run this again",
            dir.display()
        ),
    ))
}

fn read_back(file: &Path, md5: &str) -> Result<()> {
    let got = checksum::md5_file(file)?;
    if got != md5 {
        bail!(
            "{} reads back as MD5 {got}, not {md5}; was its source changed meanwhile?",
            file.display()
        );
    }
    Ok(())
}

/// Everything the copy needs resolves from where it lands.
fn check_copy(temp: &Path, lib_dir: &Path) -> Result<()> {
    let deps = linker::resolve_as_in(temp, lib_dir, &[])?;
    let missing = linker::missing(&deps);
    if missing.is_empty() {
        return Ok(());
    }
    Err(hint(
        format!(
            "the loader cannot find {} for the fixed copy in {}",
            missing.join(", "),
            lib_dir.display()
        ),
        "the system library's directory no longer holds what it needs: reinstall its package, then run this again",
    ))
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fsutil::rename_in_dir(from, to)
        .with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))
}

fn new_journal(
    locked: &Locked,
    add: &AddSystem,
    journals: &Journals,
    new_md5: String,
) -> Result<Journal> {
    let torch = add.torch;
    let sys = add.sys;
    let id = super::install::next_id(locked, journals)?;
    let hip_md5 = checksum::md5_file(&sys.hip)?;
    let original = FileRec {
        md5: hip_md5.clone(),
        size: std::fs::metadata(&sys.hip)?.len(),
        mode: fsutil::mode(&sys.hip)?,
    };
    let edit = match add.hip_edited {
        None => None,
        Some(edited) => Some(HipEdit {
            before: sys.run_path.clone().unwrap_or_default(),
            after: crate::swap::relink::edited_run_path(sys.run_path.as_deref()),
            new: FileRec {
                md5: checksum::md5_file(edited)?,
                size: std::fs::metadata(edited)?.len(),
                mode: original.mode,
            },
        }),
    };
    Ok(Journal {
        id,
        state: State::Begun,
        created: now(),
        updated: String::new(),
        torch: TorchRec::of(torch, add.copy_at),
        build: add.build.clone(),
        backup: locked.state.backup_path(&hip_md5),
        original,
        new: FileRec {
            md5: new_md5,
            size: std::fs::metadata(add.copy)?.len(),
            mode: owner::plain_mode(fsutil::mode(&sys.library)? | 0o444),
        },
        inherits: None,
        system: Some(SystemRec {
            library: sys.library.clone(),
            sha256: add.derived_from.to_owned(),
            package: sys
                .owner
                .package()
                .map(|(m, p)| format!("{} {p}", m.program()))
                .unwrap_or_default(),
            hip: sys.hip.clone(),
            copy_run_path: add.copy_run_path.clone(),
            edit,
        }),
        set: add.tensile.map(|(_, entries)| {
            let dir = add.copy_at.with_file_name(TENSILE_DIR);
            SetRec {
                loads: sys.needed.clone(),
                made_parent: !dir.parent().is_some_and(Path::exists),
                dir,
                original: None,
                new: tree::record(entries),
            }
        }),
    })
}

fn changed(j: &Journal, what: &str) -> anyhow::Error {
    hint(
        format!(
            "{what}: neither what transaction {} left nor torch as it was; something else changed torch (a pip install?), and rdna1-patch does not undo what it did not do",
            j.id
        ),
        format!(
            "if torch was reinstalled, `{}` closes the transaction without touching torch; libtorch_hip.so's original, if it was edited, stays in {}",
            crate::shell::tool(["rollback", "--abandon", &j.id.to_string()]),
            j.backup.display()
        ),
    )
}

/// The backup a rollback needs: libtorch_hip.so's, when it was edited.
pub(super) fn check_needs(j: &Journal) -> Result<()> {
    match j.system.as_ref().and_then(|s| s.edit.as_ref()) {
        Some(_) => check_backup(j),
        None => Ok(()),
    }
}

/// Take the copy out of torch, libtorch_hip.so back first; true when
/// nothing of it was there any more.
pub(super) fn undo(locked: &Locked, j: &mut Journal) -> Result<bool> {
    let s = j.system.clone().expect("a system journal");
    match found(j, &s) {
        Found::Original => {
            locked.set(j, State::RolledBack)?;
            return Ok(true);
        }
        Found::New | Found::Partial => {}
        Found::Gone => return Err(changed(j, "torch or its libtorch_hip.so is gone")),
        Found::Other(what) => return Err(changed(j, &what)),
    }
    locked.set(j, State::RollingBack)?;
    crash_point!("system-rollback-begun");
    if let Some(edit) = &s.edit
        && checksum::md5_file(&s.hip)? == edit.new.md5
    {
        let temp = temp_path(&s.hip, j.id, true);
        let copied = fsutil::copy_synced(&j.backup, &temp, j.original.mode)
            .and_then(|()| read_back(&temp, &j.original.md5));
        if let Err(e) = copied {
            let _ = fsutil::remove_own_file(&temp);
            locked.set(j, State::Installed)?;
            return Err(e.context("torch was not changed"));
        }
        rename(&temp, &s.hip)?;
        crash_point!("system-rollback-hip-restored");
    }
    fsutil::remove_own_file(&j.torch.target)?;
    fsutil::sync_dir(j.torch.target.parent().unwrap_or(Path::new("/")))?;
    crash_point!("system-rollback-copy-removed");
    remove_dir(j)?;
    locked.set(j, State::RolledBack)?;
    remove_made_parent(j);
    Ok(false)
}

/// Take rocBLAS's added Tensile directory out: renamed away in one step
/// (what is left at the temp name goes with the temps), then removed.
fn remove_dir(j: &Journal) -> Result<()> {
    let Some(set) = &j.set else {
        return Ok(());
    };
    if std::fs::symlink_metadata(&set.dir).is_err() {
        return Ok(());
    }
    let aside = temp_path(&set.dir, j.id, true);
    let _ = fsutil::remove_path(&aside);
    rename(&set.dir, &aside)?;
    crash_point!("system-rollback-dir-removed");
    fsutil::remove_path(&aside)
}

/// torch/lib/rocblas, when the transaction made it and it is empty again.
fn remove_made_parent(j: &Journal) {
    if let Some(set) = j.set.as_ref().filter(|s| s.made_parent)
        && let Some(p) = set.dir.parent()
        && let Ok((dir, name)) = fsutil::fd::parent_of(p)
    {
        let _ = dir.remove_dir(name);
    }
}

/// Settle a system-route journal a killed run left open; the note, or
/// None when it is left for the user (something else changed torch).
pub(super) fn recover_one(locked: &Locked, j: &mut Journal) -> Result<Option<String>> {
    let s = j.system.clone().expect("a system journal");
    j.remove_temps();
    let was = j.state;
    let undone = match was {
        State::RollingBack => State::RolledBack,
        _ => State::Aborted,
    };
    let note = match found(j, &s) {
        Found::Gone => {
            locked.set(j, State::Abandoned)?;
            format!(
                "transaction {} was interrupted ({}) and torch at {} is gone now, so it is closed",
                j.id,
                was.name(),
                j.torch.dir.display()
            )
        }
        Found::Original => {
            locked.set(j, undone)?;
            remove_made_parent(j);
            format!(
                "transaction {} was interrupted ({}); torch loads the system's {}, unchanged",
                j.id,
                was.name(),
                s.library.display()
            )
        }
        Found::New => {
            locked.set(j, State::Installed)?;
            format!(
                "transaction {} was interrupted ({}); the fixed copy {} is in place and libtorch_hip.so loads it, so it is installed",
                j.id,
                was.name(),
                j.torch.target.display()
            )
        }
        Found::Partial => {
            // libtorch_hip.so is as it was: the copy is not loaded yet (or
            // any more) and goes.
            fsutil::remove_own_file(&j.torch.target)?;
            fsutil::sync_dir(j.torch.target.parent().unwrap_or(Path::new("/")))?;
            remove_dir(j)?;
            j.remove_temps();
            locked.set(j, undone)?;
            remove_made_parent(j);
            format!(
                "transaction {} was interrupted ({}) before libtorch_hip.so took the fixed copy; the copy was taken out and torch loads the system's {}",
                j.id,
                was.name(),
                s.library.display()
            )
        }
        Found::Other(_) => return Ok(None),
    };
    Ok(Some(note))
}

/// The system library a journal's copy was made from, and whether it is
/// still that file (its SHA-256): a package upgrade after the install
/// leaves torch on a fix of the old library.
pub fn source_changed(j: &Journal) -> Option<(PathBuf, String)> {
    let s = j.system.as_ref()?;
    let now = match crate::elf::read_file(&s.library) {
        Ok(b) => crate::prefix::sha256_hex(&b),
        Err(e) => format!("unreadable ({e:#})"),
    };
    (now != s.sha256).then(|| (s.library.clone(), now))
}
