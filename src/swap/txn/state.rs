//! The state dir: where journals and backups live, and the locks that keep
//! two runs from changing it at once.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::error::hint;
use crate::fsutil;

use super::journal::{Damaged, Journal, Journals, State, now};
use crate::fsutil::At;

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

    pub(super) fn journal_dir(&self) -> PathBuf {
        self.root.join("transactions")
    }

    pub(super) fn backup_path(&self, md5: &str) -> PathBuf {
        self.root.join("backups").join(format!("{md5}.so"))
    }

    /// The backup of a Tensile directory (`txn::tree`), by its digest.
    pub(super) fn tree_backup_path(&self, digest: &str) -> PathBuf {
        self.root.join("backups").join(format!("{digest}.tensile"))
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
        fsutil::create_dir_all(&self.root)?;
        for dir in [
            self.journal_dir(),
            self.root.join("backups"),
            self.staging(),
        ] {
            fsutil::create_own_dir(&dir)?;
        }
        let path = self.root.join("lock");
        // Never followed: a symlink planted at `lock` must not get its
        // target truncated by a run under sudo.
        let mut file = fsutil::fd::Dir::open(&self.root)
            .and_then(|d| d.open_or_create(std::ffi::OsStr::new("lock"), 0o644))
            .map_err(|e| {
                hint(
                    format!("cannot open the lock file {}: {e}", path.display()),
                    format!(
                        "it must be a plain file that rdna1-patch created; if it is a symlink or something else, remove it (`{}`) and run again",
                        crate::shell::as_run([std::ffi::OsStr::new("rm"), path.as_os_str()])
                    ),
                )
            })?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            bail!(
                "{} is not a regular file; remove it and run again",
                path.display()
            );
        }
        // A dry run's check holds the lock for an instant: wait that out.
        let mut tries = 0;
        let taken = loop {
            match file.try_lock() {
                Err(std::fs::TryLockError::WouldBlock) if tries < 4 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => break other,
            }
        };
        match taken {
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
                return Err(e).at("lock", &path);
            }
        }
        file.set_len(0)
            .and_then(|()| write!(file, "pid {}", std::process::id()))
            .at("write", &path)?;
        self.remove_leftovers();
        fsutil::race_point("state-locked");
        Ok(Locked {
            state: self,
            _file: file,
        })
    }

    /// A directory that holds files but none of a state dir's own
    /// (`transactions`, `backups`, `staging`, `lock`): not a state dir, most
    /// likely a wrong --state-dir.
    pub fn is_foreign(&self) -> bool {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return false;
        };
        let names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
        !names.is_empty()
            && !names.iter().any(|n| {
                ["transactions", "backups", "staging", "lock"]
                    .iter()
                    .any(|o| n == *o)
            })
    }

    /// What [`State::lock`] needs, checked without making or taking
    /// anything (a dry run's): the state dir can be made or written, and
    /// no other run holds its lock.
    pub fn can_lock(&self) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let existing = fsutil::existing_ancestor(&self.root);
        // The real run writes in the dir, in each of its own dirs a sudo
        // run may have left root's, and the lock file.
        let dirs = [
            self.journal_dir(),
            self.root.join("backups"),
            self.staging(),
        ];
        let shut = std::iter::once(existing.to_owned())
            .chain(dirs.into_iter().filter(|d| d.is_dir()))
            .find_map(|d| fsutil::probe_writable(&d).err().map(|e| (d, e)));
        if let Some((dir, e)) = shut {
            return Err(hint(
                format!(
                    "the state dir {} cannot be written: {} is not writable ({})",
                    self.root.display(),
                    dir.display(),
                    crate::error::words(&e.to_string())
                ),
                fsutil::fitted_help(&dir, &e, "write", "another --state-dir DIR").unwrap_or_else(
                    || {
                        "run as the user whose torch this is (their state dir is their own), or pass --state-dir DIR you can write".to_owned()
                    },
                ),
            ));
        }
        let path = self.root.join("lock");
        // Read only: a lock is taken on any open file, and this one only
        // asks whether another run holds it.
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(crate::fsutil::fs_error("open the lock file", &path, &e)),
        };
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) => Err(hint(
                format!(
                    "another rdna1-patch run is changing torch right now; its lock is {}",
                    path.display()
                ),
                "wait for it to finish and run this again (the lock is released when that process exits, even if it is killed)",
            )),
            _ => Ok(()),
        }
    }

    /// Partial files of a killed run: only names this tool gives its own
    /// temp files, so a user's files in a shared --state-dir stay.
    pub(super) fn remove_leftovers(&self) {
        let ours = |dir: PathBuf, pred: &dyn Fn(&str) -> bool| {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                return;
            };
            for e in rd.flatten() {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if pred(name) && e.file_type().is_ok_and(|t| t.is_file()) {
                    let _ = fsutil::remove_own_file(&e.path());
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
        // A Tensile directory's backup a kill left half-made.
        for e in std::fs::read_dir(self.root.join("backups"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name();
            let ours = name
                .to_str()
                .and_then(|n| n.strip_suffix(".tensile.tmp"))
                .is_some_and(|md5| md5.len() == 32 && md5.chars().all(|c| c.is_ascii_hexdigit()));
            if ours && e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = fsutil::remove_path(&e.path());
            }
        }
    }

    /// Every journal, oldest first, and those that cannot be read. Reading
    /// needs no lock: journals are replaced atomically.
    /// The prefix of the newest transaction whose library is in torch now,
    /// and its id: a `--prefix` given to `install` is remembered there, so
    /// `verify` and `status` read the build torch holds.
    /// After a rollback, with nothing installed, it is the prefix of the
    /// newest transaction that is still there: what was installed last,
    /// not a default profile's prefix nothing ever used.
    pub fn installed_prefix(&self) -> Option<(u32, PathBuf)> {
        let journals = self.read().ok()?;
        let newest = |pick: &dyn Fn(&Journal) -> bool| {
            journals
                .list
                .iter()
                .rev()
                .find(|j| pick(j))
                .map(|j| (j.id, j.build.prefix.clone()))
        };
        // MIOpen's: rocBLAS's prefix is asked for by its own name.
        newest(&|j| j.state == State::Installed && j.is("MIOpen")).or_else(|| {
            newest(&|j| j.is("MIOpen") && crate::prefix::Provenance::read(&j.build.prefix).is_ok())
        })
    }

    pub fn read(&self) -> Result<Journals> {
        let dir = self.journal_dir();
        let mut out = Journals::default();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e).at("read", &dir),
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
                    j.check(&self.backup_path(&j.original.md5))?;
                    Ok(j)
                });
            let untrusted = parsed
                .as_ref()
                .ok()
                .and_then(|j| j.check_writers(&path).err());
            match (parsed, untrusted) {
                (Ok(_), Some(error)) => out.damaged.push(Damaged {
                    path,
                    error,
                    untrusted: true,
                }),
                (Ok(j), None) => out.list.push(j),
                (Err(error), _) => out.damaged.push(Damaged {
                    path,
                    error: error.trim().replace('\n', " "),
                    untrusted: false,
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

    pub(super) fn save(&self, j: &mut Journal) -> Result<()> {
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

    pub(super) fn set(&self, j: &mut Journal, state: State) -> Result<()> {
        j.state = state;
        self.save(j)
    }

    /// Close `j`, which has not changed torch, as aborted; where its
    /// journal cannot be written (a full or read-only state dir), remove
    /// it: a transaction that never changed torch is then never opened,
    /// and status and rollback work on.
    pub(super) fn abort(&self, j: &mut Journal) -> Result<()> {
        let Err(e) = self.set(j, State::Aborted) else {
            return Ok(());
        };
        let path = self.state.journal_dir().join(format!("{:04}.toml", j.id));
        match fsutil::remove_own_file(&path) {
            Ok(_) => Ok(()),
            Err(_) => Err(e),
        }
    }
}
