//! The swap itself: back up torch's original, put the new library in, one
//! journaled step at a time.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::checksum;
use crate::error::hint;
use crate::fsutil;
use crate::kernel_text::MARKER_PREFIX;
use crate::owner;
use crate::torch::Torch;

use super::journal::{BuildRec, FileRec, Journal, Journals, State, TorchRec, now};
use super::recover::supersede;
use super::state::Locked;
use crate::fsutil::At;

/// Everything a swap needs, checked by the caller.
pub struct Swap<'a> {
    pub torch: &'a Torch,
    pub build: BuildRec,
    /// The new library, ready to go in: relinked in the staging dir, or the
    /// prefix's own file when it goes in as it is.
    pub staged: &'a Path,
    /// Its MD5 when already known (the prefix's checked MD5SUMS); the copy
    /// in torch is proven against it before it takes the library's name.
    pub staged_md5: Option<&'a str>,
    /// Its stamp when this run wrote it and took that MD5 of the bytes
    /// written (the in-place route): a link to it is not read back while
    /// the stamp holds.
    pub staged_written: Option<&'a fsutil::Stamp>,
    /// Run on the new file where it lands (next to the target), before it
    /// takes the library's name.
    pub check: &'a dyn Fn(&Path) -> Result<()>,
    /// What this run already read of the target (the in-place route reads
    /// it whole): used while its stamp still matches, instead of a read.
    pub target_known: Option<&'a checksum::Known>,
    /// For a library fixed in place: the SHA-256 of the original it was
    /// made from, which must be the original this swap keeps (a pip
    /// upgrade in between would get a fix of the old library).
    pub derived_from: Option<&'a str>,
}

pub enum SwapOutcome {
    Installed(Journal),
    /// The same library is already there, from this transaction.
    AlreadyInstalled(Journal),
}

/// The file holding torch's original library for `target`: the backup when
/// an installed transaction's file is in place, else the target itself.
pub fn original_of(journals: &Journals, target: &Path) -> PathBuf {
    let ours = journals
        .list
        .iter()
        .rev()
        .find(|j| j.state == State::Installed && j.torch.target == target);
    if let Some(j) = ours
        && checksum::md5_file(target).ok().as_ref() == Some(&j.new.md5)
    {
        return j.backup.clone();
    }
    target.to_owned()
}

/// Whether a file carries our markers: an rdna1-patch build.
pub fn is_patched(path: &Path) -> bool {
    checksum::scan_file(path, MARKER_PREFIX.as_bytes()).is_ok_and(|k| k.holds)
}

/// The swap as a transaction: journal, back up the original (unless an
/// earlier install of ours kept it), write and check the new file next to
/// the target, rename it over the target, read it back.
pub fn swap(locked: &Locked, swap: &Swap) -> Result<SwapOutcome> {
    let torch = swap.torch;
    let target = &torch.target;
    let journals = locked.journals()?;
    let known = match swap.target_known.filter(|k| k.stamp.matches(target)) {
        Some(k) => k.clone(),
        None => checksum::scan_file(target, MARKER_PREFIX.as_bytes())?,
    };
    let (current, patched) = (known.md5.clone(), known.holds);
    let new_md5 = match swap.staged_md5 {
        Some(m) => m.to_owned(),
        None => checksum::md5_file(swap.staged)?,
    };
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
    ensure_root_may_change(target)?;
    ensure_writable(dir)?;
    // Unchanged since the fix read it, by its stamp, needs no second read.
    let read_unchanged =
        inherits.is_none() && swap.target_known.is_some_and(|k| k.stamp == known.stamp);
    if let Some(want) = swap.derived_from.filter(|_| !read_unchanged) {
        let original = inherits.map_or(target.as_path(), |p| p.backup.as_path());
        ensure_derived_from(original, want, torch)?;
    }

    let mut j = new_journal(locked, swap, &journals, current, new_md5, inherits)?;
    locked.save(&mut j)?;
    crash_point!("install-begun");

    // The backup and the new file's copy next to the target are two files
    // on two cores; a killed run's copy is a temp that recovery removes
    // whatever the state. Nothing takes torch's name before both are proven.
    let temp = j.temp(false);
    let (staged, staged_written) = (swap.staged, swap.staged_written);
    let (backed, written) = std::thread::scope(|s| {
        let copy = s.spawn(|| write_temp(staged, staged_written, &temp, &j));
        let backed = match j.inherits {
            None => write_backup(target, &j.backup, &j.original, &known.stamp),
            Some(_) => Ok(()),
        };
        (backed, copy.join().expect("the copy's thread panicked"))
    });
    if let Err(e) = backed {
        let _ = fsutil::remove_own_file(&temp);
        locked.abort(&mut j)?;
        return Err(out_of_space(
            e,
            locked.state.root(),
            "torch was not changed",
        ));
    }
    locked.set(&mut j, State::BackedUp)?;
    crash_point!("install-backed-up");
    if let Err(e) = written.and_then(|()| (swap.check)(&temp)) {
        let _ = fsutil::remove_own_file(&temp);
        locked.abort(&mut j)?;
        return Err(library_out_of_space(e, dir, "torch was not changed"));
    }
    swap_in(locked, &mut j)?;
    locked.set(&mut j, State::Installed)?;
    crash_point!("install-installed");
    supersede(locked, &j)?;
    Ok(SwapOutcome::Installed(j))
}

/// The original this swap keeps must be the file the fix was made from.
fn ensure_derived_from(original: &Path, sha256: &str, torch: &Torch) -> Result<()> {
    let bytes = crate::elf::read_file(original)?;
    let now = crate::prefix::sha256_hex(&bytes);
    if now == sha256 {
        return Ok(());
    }
    Err(hint(
        format!(
            "torch's library changed while it was being fixed (a pip install or upgrade?): the fix was made from SHA-256 {sha256}, {} is now {now}; nothing was changed",
            original.display()
        ),
        format!(
            "run `rdna1-patch install --into-torch` again: it fixes the library torch {} has now",
            torch.version
        ),
    ))
}

/// The journal of a new install. Over our own earlier install, the
/// original (and its backup) is that transaction's.
pub(super) fn new_journal(
    locked: &Locked,
    swap: &Swap,
    journals: &Journals,
    current: String,
    new_md5: String,
    inherits: Option<&Journal>,
) -> Result<Journal> {
    let torch = swap.torch;
    let target = &torch.target;
    let id = next_id(locked, journals)?;
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
        torch: TorchRec::of(torch, target),
        build: swap.build.clone(),
        original: original.clone(),
        backup,
        new: FileRec {
            md5: new_md5,
            size: std::fs::metadata(swap.staged)?.len(),
            mode: owner::plain_mode(original.mode),
        },
        inherits,
        system: None,
        set: None,
    })
}

/// Put the new file next to the target. On one filesystem it is a hard
/// link to the file whose MD5 this run established (the prefix's, checked
/// or just written; or the relinked copy), when the link gives the file
/// the mode the target needs and no one else could write it
/// (`fsutil::link_own`). Else a copy. Either is read back before the
/// rename, so a file that is not the new library never takes torch's
/// name; the rename does not change bytes.
pub(super) fn write_temp(
    staged: &Path,
    written: Option<&fsutil::Stamp>,
    temp: &Path,
    j: &Journal,
) -> Result<()> {
    let linked = fsutil::link_own(staged, temp, Some(j.new.mode))?;
    if !linked {
        fsutil::copy_synced(staged, temp, j.new.mode)?;
    }
    crash_point!("install-temp-written");
    // A link is read back too: the prefix it shares an inode with may have
    // been rewritten since its MD5 was taken. Unless this run wrote that
    // inode and took the MD5 of the bytes it wrote, and the link is still
    // that inode with that size and mtime: a prefix is only ever replaced
    // whole (a new inode, staged and exchanged), never written into, and
    // this run holds the state lock from the write to here.
    if linked && written.is_some_and(|w| w.matches(temp)) {
        return Ok(());
    }
    let copy = checksum::md5_file(temp)?;
    if copy != j.new.md5 {
        bail!(
            "the new library copied to {} reads back as MD5 {copy}, not {}; was {} changed meanwhile?",
            temp.display(),
            j.new.md5,
            staged.display()
        );
    }
    Ok(())
}

/// Rename the checked copy over the target; the journal says which step
/// it got to.
pub(super) fn swap_in(locked: &Locked, j: &mut Journal) -> Result<()> {
    let target = j.torch.target.clone();
    let temp = j.temp(false);
    locked.set(j, State::Swapping)?;
    crash_point!("install-swapping");

    // The temp file is in the target's own directory, so this rename never
    // crosses a filesystem.
    fsutil::rename_in_dir(&temp, &target)
        .with_context(|| format!("cannot rename {} to {}", temp.display(), target.display()))?;
    crash_point!("install-renamed");
    Ok(())
}

/// Keep the original as its backup (unless an identical backup is there).
/// On the target's filesystem the backup is a hard link to torch's file,
/// which the swap then only renames away from: the very bytes whose MD5
/// was taken, while the stamp taken with it still matches, so there is
/// nothing to read back. Elsewhere it is a copy, read back before it takes
/// the backup's name. A partial copy never stays behind.
pub(super) fn write_backup(
    target: &Path,
    backup: &Path,
    original: &FileRec,
    stamp: &fsutil::Stamp,
) -> Result<()> {
    if checksum::md5_file(backup).ok().as_ref() == Some(&original.md5) {
        return Ok(());
    }
    let tmp = backup.with_extension("so.tmp");
    let made = (|| {
        let linked = stamp.matches(target) && fsutil::link_own(target, &tmp, None)?;
        if !linked {
            fsutil::copy_synced(target, &tmp, 0o444)?;
            let copy = checksum::md5_file(&tmp)?;
            if copy != original.md5 {
                bail!(
                    "the backup {} reads back as MD5 {copy}, not {}; was {} changed meanwhile?",
                    tmp.display(),
                    original.md5,
                    target.display()
                );
            }
        }
        crash_point!("install-backup-written");
        fsutil::rename_in_dir(&tmp, backup)
    })();
    if let Err(e) = made {
        let _ = fsutil::remove_own_file(&tmp);
        return Err(e);
    }
    fsutil::sync_dir(backup.parent().unwrap_or(Path::new("/")))
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

/// [`out_of_space`] where the disk that is full is the library's own (the
/// new one is written beside the one it replaces): a --state-dir
/// elsewhere would not help, so the help names only that disk.
pub fn library_out_of_space(e: anyhow::Error, dir: &Path, unchanged: &str) -> anyhow::Error {
    if fsutil::is_disk_full(&e) {
        hint(
            format!("{e:#}; {unchanged} and the partial copy was removed"),
            format!(
                "free space on the disk holding {} (the new library is written beside the one it replaces), then run this again",
                dir.display()
            ),
        )
    } else {
        e.context(unchanged.to_owned())
    }
}

/// Run as root, change only a torch no one but root and the user root acts
/// for (sudo's) can change: another user's torch is theirs to change, and
/// a directory they control can be swapped under root's feet.
pub fn ensure_root_may_change(target: &Path) -> Result<()> {
    if !owner::is_root() {
        return Ok(());
    }
    let writers = owner::Writers::of(target).at("inspect", target)?;
    let others = writers.others_than(owner::invoking_user());
    if others.is_empty() {
        return Ok(());
    }
    Err(hint(
        format!(
            "{} can be changed by {}{}; run as root, rdna1-patch does not change a torch that another user controls; nothing was changed",
            target.display(),
            owner::describe(&others),
            writers.through(target)
        ),
        "run rdna1-patch as the user who owns that torch, without sudo (a torch in a venv is its owner's to change)",
    ))
}

pub(crate) fn ensure_writable(dir: &Path) -> Result<()> {
    fsutil::probe_writable(dir).map_err(|e| {
        let help = fsutil::fitted_help(dir, &e, "write", "a torch in a virtualenv you own").unwrap_or_else(|| {
            "run as the user that installed torch (or with sudo for a system-wide torch), or install into a virtualenv you own".to_owned()
        });
        hint(
            format!("cannot write to {}: {}; nothing was changed", dir.display(), crate::error::words(&e.to_string())),
            help,
        )
    })
}

/// The next transaction's number. A set-aside journal numbered u32::MAX
/// must not wrap it to 0, which would sort before every other transaction.
pub(super) fn next_id(locked: &Locked, journals: &Journals) -> Result<u32> {
    let last = journals
        .last_id
        .max(journals.list.last().map_or(0, |j| j.id));
    last.checked_add(1).ok_or_else(|| {
        hint(
            format!(
                "the journals in {} already use transaction number {last}, the highest there is; nothing was changed",
                locked.state.root().display()
            ),
            format!(
                "move the journal numbered {last} out of {} (it was set aside or edited by hand), then run this again",
                locked.state.root().join("transactions").display()
            ),
        )
    })
}
