//! The tool's own caches (the diagnosis's verdicts and proofs, the memo of
//! a file's SHA-256 by its stamp), under one rule (SECURITY.md): an entry
//! is believed only when no one but the user running the tool could have
//! written it. Run as root, that means a cache only root can write: the
//! invoking user's `XDG_CACHE_HOME` under `sudo -E` is never read nor
//! written, and nothing root-owned is left in a user's home. Nothing in a
//! cache is ever followed through a symlink. A cache that cannot be used
//! costs the next run its work, no more: every failure here is silent.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One named cache (a directory below the user's cache dir).
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// The cache `name` of the user running the tool; None when no cache
    /// dir can be had under the rule.
    pub fn open(name: &str) -> Option<Cache> {
        let base = base_dir()?;
        Some(Cache {
            dir: base.join(name),
        })
    }

    /// A cache in `dir` exactly: for tests of the rule, and of what is
    /// kept in it (the compile cache's).
    pub fn at(dir: PathBuf) -> Cache {
        Cache { dir }
    }

    #[cfg(test)]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The text kept under `key`, when it was written by the user running
    /// the tool, is a regular file (a symlink is not followed) and is no
    /// longer than `limit`.
    pub fn get(&self, key: &str, limit: u64) -> Option<String> {
        if !plain_key(key) || !self.trusted_dir() {
            return None;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(self.dir.join(key))
            .ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file()
            || meta.uid() != crate::owner::euid()
            || meta.mode() & 0o022 != 0
            || meta.len() > limit
        {
            return None;
        }
        let mut text = String::new();
        file.take(limit + 1).read_to_string(&mut text).ok()?;
        (text.len() as u64 <= limit).then_some(text)
    }

    /// Keep `text` under `key`: written whole to a temp file of its own in
    /// the cache dir, then renamed over the key.
    pub fn put(&self, key: &str, text: &str) {
        if !plain_key(key) || self.make_dir().is_none() {
            return;
        }
        let Ok(mut tmp) = tempfile::Builder::new()
            .prefix(".tmp-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(&self.dir)
        else {
            return;
        };
        if tmp.write_all(text.as_bytes()).is_ok() {
            let _ = tmp.persist(self.dir.join(key));
        }
    }

    /// Drop what is kept under `key`, if anything is.
    pub fn forget(&self, key: &str) {
        if plain_key(key) && self.trusted_dir() {
            let _ = std::fs::remove_file(self.dir.join(key));
        }
    }

    /// Make the cache dir; as root only where no one else could have
    /// put a symlink on the way (checked before and after).
    fn make_dir(&self) -> Option<()> {
        if crate::owner::is_root() && !only_self_writes(&self.dir) {
            return None;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.dir)
            .ok()?;
        self.trusted_dir().then_some(())
    }

    /// Run as root: no one but root could have put or replaced anything in
    /// the cache dir, through it or any directory above it, and no symlink
    /// is on the way. Otherwise: the dir itself is the user's own, not a
    /// symlink, and not writable by everyone.
    fn trusted_dir(&self) -> bool {
        if crate::owner::is_root() {
            return only_self_writes(&self.dir);
        }
        std::fs::symlink_metadata(&self.dir)
            .is_ok_and(|m| m.is_dir() && m.uid() == crate::owner::euid() && m.mode() & 0o002 == 0)
    }
}

/// A key is a plain file name of our own making: never a path.
fn plain_key(key: &str) -> bool {
    !key.is_empty()
        && key != "."
        && key != ".."
        && !key.starts_with(".tmp-")
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether `path` (made absolute, not resolved) and every directory above
/// it can be changed by no one but root, with no symlink among them.
fn only_self_writes(path: &Path) -> bool {
    let has_link = std::path::absolute(path).is_ok_and(|p| {
        p.ancestors()
            .any(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()))
    });
    !has_link && crate::owner::Writers::of(path).is_ok_and(|w| w.set.is_empty())
}

/// The user's cache dir for rdna1-patch. Run as root, the first of
/// `XDG_CACHE_HOME` (or `HOME`'s `.cache`) and root's own home's `.cache`
/// that only root can write: under `sudo -E` the caller's variables name
/// the user's home, which root neither trusts nor writes into.
pub(crate) fn base_dir() -> Option<PathBuf> {
    let from_env = crate::fsutil::project_dirs().map(|d| d.cache_dir().to_owned());
    if !crate::owner::is_root() {
        return from_env;
    }
    from_env
        .into_iter()
        .chain(root_home().map(|h| h.join(".cache/rdna1-patch")))
        .find(|d| only_self_writes(d))
}

/// Root's home directory, from the password database, not the environment.
fn root_home() -> Option<PathBuf> {
    crate::owner::passwd(0)
        .map(|(_, home)| home)
        .filter(|h| h.is_absolute())
}

/// The stamp a file is remembered by: device, inode, size, and both its
/// modification and change times, so that a file rewritten in place at the
/// same size with its mtime put back is not taken for the one it was (the
/// change time cannot be set back).
pub fn stamp_key(m: &std::fs::Metadata) -> String {
    format!(
        "{}-{}-{}-{}.{}-{}.{}",
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_plain_names() {
        for bad in [
            "", ".", "..", "../x", "/abs", "a/b", "a\0b", ".tmp-x", "a b",
        ] {
            assert!(!plain_key(bad), "{bad:?}");
        }
        assert!(plain_key("0123abcdef.json"));
        assert!(plain_key("sha256-1-2-3-4.5-6.7"));
    }

    #[test]
    fn keeps_and_reads_back_and_follows_no_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let c = Cache::at(tmp.path().join("cache/diagnosis"));
        assert_eq!(c.get("k", 100), None);
        c.put("k", "text");
        assert_eq!(c.get("k", 100).as_deref(), Some("text"));
        assert_eq!(c.get("k", 3), None, "over the limit");
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "planted").unwrap();
        std::os::unix::fs::symlink(&outside, c.dir().join("link")).unwrap();
        assert_eq!(c.get("link", 100), None);
        // A cache dir that is a symlink is neither read nor written through.
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("k"), "planted").unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("cache/linked")).unwrap();
        let linked = Cache::at(tmp.path().join("cache/linked"));
        assert_eq!(linked.get("k", 100), None);
        linked.put("new", "x");
        assert!(!real.join("new").exists());
    }

    #[test]
    fn an_entry_others_can_write_is_not_believed() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let c = Cache::at(tmp.path().join("c"));
        c.put("k", "text");
        let f = c.dir().join("k");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(c.get("k", 100), None);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(c.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(c.get("k", 100), None, "a dir anyone can write");
    }

    #[test]
    fn the_stamp_holds_the_change_time() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        std::fs::write(&f, "aaaa").unwrap();
        let m = std::fs::metadata(&f).unwrap();
        assert!(stamp_key(&m).ends_with(&format!("-{}.{}", m.ctime(), m.ctime_nsec())));
    }
}
