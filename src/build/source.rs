//! Stage 1, fetch: the pinned tag of a component, checked out in the work dir.
//!
//! A cached checkout at the right commit is reused without touching the
//! network. The commit a tag resolves to is pinned by the profile or recorded
//! in a lock file on first fetch; a tag that later resolves elsewhere is a
//! supply-chain event and stops the build unless `--update` says otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use git2::{AutotagOption, FetchOptions, Oid, RemoteCallbacks, Repository, build::CheckoutBuilder};
use serde::{Deserialize, Serialize};

use crate::build::profile::Component;
use crate::error::hint;
use crate::fsutil;
use crate::ui::{self, Ui};

pub struct FetchRequest<'a> {
    pub name: &'a str,
    pub component: &'a Component,
    pub src: &'a Path,
    pub lock_file: &'a Path,
    /// Fetch even when cached, and accept a tag that moved.
    pub update: bool,
    /// How long a server may send nothing before the fetch gives up.
    pub net_timeout: std::time::Duration,
}

/// A checked-out source tree at a known commit.
pub struct Checkout {
    pub path: PathBuf,
    pub commit: String,
    /// Whether this run talked to the remote.
    pub fetched: bool,
    repo: Repository,
}

impl Checkout {
    /// A file as the commit has it, before any patch: `None` if it does not exist.
    pub fn pristine(&self, rel: &str) -> Result<Option<String>> {
        let commit = self.repo.find_commit(Oid::from_str(&self.commit)?)?;
        let tree = commit.tree()?;
        let entry = match tree.get_path(Path::new(rel)) {
            Ok(e) => e,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let blob = entry
            .to_object(&self.repo)?
            .peel_to_blob()
            .map_err(|_| anyhow!("{rel} is not a file at {}", short(&self.commit)))?;
        let text = String::from_utf8(blob.content().to_vec())
            .map_err(|_| anyhow!("{rel} at {} is not UTF-8 text", short(&self.commit)))?;
        Ok(Some(text))
    }
}

/// An existing git checkout at its HEAD commit (for `patches refresh`).
pub fn open(path: &Path) -> Result<Checkout> {
    let repo = Repository::open(path).map_err(|e| {
        hint(
            format!("{} is not a git checkout: {}", path.display(), e.message()),
            "refresh needs the tree's git history to know the unpatched files; use the checkout `build --stop-after patch` made, or a git clone",
        )
    })?;
    let commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .with_context(|| format!("{} has no HEAD commit", path.display()))?
        .id()
        .to_string();
    Ok(Checkout {
        path: path.to_owned(),
        commit,
        fetched: false,
        repo,
    })
}

/// Files of a checkout that differ from its HEAD commit (changed, added,
/// deleted or untracked and not ignored), relative to the root. Empty for a
/// directory that is not a checkout yet.
pub fn changed_files(src: &Path) -> Result<Vec<String>> {
    if !src.join(".git").exists() {
        return Ok(Vec::new());
    }
    let repo = open_existing(src)?;
    if repo.head().is_err() {
        return Ok(Vec::new());
    }
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut opts))
        .with_context(|| format!("cannot compare {} with its commit", src.display()))?;
    Ok(statuses
        .iter()
        .filter(|e| e.status() != git2::Status::CURRENT)
        .filter_map(|e| e.path().ok().map(str::to_owned))
        .collect())
}

pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// Component name -> what its tag resolved to.
type LockFile = BTreeMap<String, LockEntry>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    pub url: String,
    pub tag: String,
    pub commit: String,
}

fn read_lock(path: &Path) -> Result<LockFile> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| {
            hint(
                format!("lock file {} is damaged: {e}", path.display()),
                "delete it to record the commits again on the next fetch",
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LockFile::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The commit a build will use, as far as it is known without the network.
pub fn planned_commit(req: &FetchRequest) -> Result<Option<String>> {
    if let Some(c) = &req.component.commit {
        return Ok(Some(c.clone()));
    }
    let lock = read_lock(req.lock_file)?;
    Ok(lock
        .get(req.name)
        .filter(|e| e.url == req.component.url && e.tag == req.component.tag)
        .map(|e| e.commit.clone()))
}

/// URLs libgit2 can only fetch in full (it cannot fetch shallow from a local path).
pub fn is_local(url: &str) -> bool {
    if url.starts_with("file://") {
        return true;
    }
    if url.contains("://") {
        return false;
    }
    // scp-like `user@host:path` is remote; anything else is a path.
    match (url.find(':'), url.find('/')) {
        (Some(colon), Some(slash)) => colon > slash,
        (Some(_), None) => false,
        _ => true,
    }
}

pub fn fetch(req: &FetchRequest, ui: &Ui) -> Result<Checkout> {
    let c = req.component;
    let repo = open_or_init(req.src)?;
    let local_tag = resolve_tag(&repo, &c.tag);
    let (oid, fetched) = match local_tag {
        Some(oid) if !req.update => (oid, false),
        _ => (remote_fetch(&repo, c, req.net_timeout, ui)?, true),
    };
    let commit = oid.to_string();

    if let Some(pinned) = &c.commit
        && !commit.starts_with(&pinned.to_ascii_lowercase())
    {
        return Err(hint(
            format!(
                "{} tag {} resolved to {}, but the profile pins commit {pinned}",
                c.url, c.tag, commit
            ),
            "the tag was moved or the profile is wrong; check upstream before changing the pin",
        ));
    }
    check_lock(req, &commit, ui)?;
    checkout(&repo, oid, ui)?;
    Ok(Checkout {
        path: req.src.to_owned(),
        commit,
        fetched,
        repo,
    })
}

fn open_existing(src: &Path) -> Result<Repository> {
    Repository::open(src).map_err(|e| {
        if e.code() == git2::ErrorCode::Owner {
            return not_yours(src);
        }
        hint(
            format!(
                "the cached checkout {} is damaged: {}",
                src.display(),
                e.message()
            ),
            format!("remove {} and run again to fetch it anew", src.display()),
        )
    })
}

/// libgit2 refuses a repository another user owns (git's safe.directory
/// rule). The checkout is fine; the user is not its owner.
fn not_yours(src: &Path) -> anyhow::Error {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(src).map(|m| m.uid()).ok();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    hint(
        format!(
            "the cached checkout {} belongs to {}, not to the user running this (uid {me}); git will not use another user's repository",
            src.display(),
            owner.map_or("another user".to_owned(), |u| format!("uid {u}")),
        ),
        "run rdna1-patch as the user who built it (the default prefix is one that user can write), or give this run its own --work-dir; the checkout is fine, do not delete it",
    )
}

fn open_or_init(src: &Path) -> Result<Repository> {
    if src.join(".git").exists() {
        return open_existing(src);
    }
    fsutil::create_dir_all(src)?;
    Repository::init(src)
        .with_context(|| format!("cannot create a git repository in {}", src.display()))
}

fn resolve_tag(repo: &Repository, tag: &str) -> Option<Oid> {
    repo.find_reference(&format!("refs/tags/{tag}"))
        .ok()?
        .peel_to_commit()
        .ok()
        .map(|c| c.id())
}

/// libgit2 waits forever for a server that accepts and never answers,
/// unless told otherwise; these are process-wide settings.
fn set_timeouts(limit: std::time::Duration) -> Result<()> {
    let ms = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: set once, before any fetch starts, from the only thread that fetches.
    unsafe {
        git2::opts::set_server_connect_timeout_in_milliseconds(ms)?;
        git2::opts::set_server_timeout_in_milliseconds(ms)?;
    }
    Ok(())
}

fn remote_fetch(
    repo: &Repository,
    c: &Component,
    net_timeout: std::time::Duration,
    ui: &Ui,
) -> Result<Oid> {
    let local = is_local(&c.url);
    ui.stage(
        "Fetching",
        format!(
            "{} {}{}",
            c.url,
            c.tag,
            if local { "" } else { " (shallow)" }
        ),
    );
    let progress = ui.progress(0, ui::Units::Bytes);
    progress.set_prefix("Fetching");
    let mut callbacks = RemoteCallbacks::new();
    callbacks.transfer_progress(|p| {
        progress.update(
            p.received_bytes() as u64,
            0,
            &format!("{}/{} objects", p.received_objects(), p.total_objects()),
        );
        true
    });
    let mut opts = FetchOptions::new();
    opts.remote_callbacks(callbacks)
        .download_tags(AutotagOption::None);
    if !local {
        opts.depth(1);
    }
    set_timeouts(net_timeout)?;
    let refspec = format!("+refs/tags/{0}:refs/tags/{0}", c.tag);
    let mut remote = repo
        .remote_anonymous(&c.url)
        .with_context(|| format!("bad git URL {}", c.url))?;
    let started = std::time::Instant::now();
    remote.fetch(&[&refspec], Some(&mut opts), None).map_err(|e| {
        // Over TLS the timeout surfaces as EAGAIN from the socket.
        let timed_out = e.message().contains("timed out")
            || e.message().contains("Resource temporarily unavailable")
            || started.elapsed() >= net_timeout;
        if timed_out {
            return hint(
                format!(
                    "cannot fetch {} from {}: the server sent nothing for {} s ({})",
                    c.tag,
                    c.url,
                    net_timeout.as_secs(),
                    e.message()
                ),
                "check the network, the URL and any proxy; --net-timeout SECS waits longer for a slow server",
            );
        }
        hint(
            format!("cannot fetch {} from {}: {}", c.tag, c.url, e.message()),
            "check the network and the URL; a cached checkout is reused without the network once it exists",
        )
    })?;
    let stats = remote.stats();
    progress.finish();
    let oid = resolve_tag(repo, &c.tag).ok_or_else(|| {
        hint(
            format!("{} has no tag {}", c.url, c.tag),
            "check the profile's `tag` against the repository's tags",
        )
    })?;
    ui.note(format!(
        "received {} objects, {} bytes; {} is {}",
        stats.received_objects(),
        stats.received_bytes(),
        c.tag,
        short(&oid.to_string())
    ));
    Ok(oid)
}

fn check_lock(req: &FetchRequest, commit: &str, ui: &Ui) -> Result<()> {
    let c = req.component;
    let mut lock = read_lock(req.lock_file)?;
    let wanted = LockEntry {
        url: c.url.clone(),
        tag: c.tag.clone(),
        commit: commit.to_owned(),
    };
    match lock.get(req.name) {
        Some(e) if *e == wanted => return Ok(()),
        Some(e) if e.url == c.url && e.tag == c.tag => {
            if !req.update {
                return Err(hint(
                    format!(
                        "tag {} of {} now resolves to {}, but {} recorded {} on the first fetch",
                        c.tag,
                        c.url,
                        commit,
                        req.lock_file.display(),
                        e.commit
                    ),
                    "a moved tag can mean a compromised or rewritten upstream; inspect it, then pass --update to accept the new commit",
                ));
            }
            ui.warn(format!(
                "accepting moved tag {}: {} -> {} (--update)",
                c.tag,
                short(&e.commit),
                short(commit)
            ));
        }
        _ => {}
    }
    lock.insert(req.name.to_owned(), wanted);
    let text = format!(
        "# Written by rdna1-patch: the commit each tag resolved to when first fetched.\n{}",
        toml::to_string(&lock)?
    );
    if let Some(dir) = req.lock_file.parent() {
        fsutil::create_dir_all(dir)?;
    }
    fsutil::write_atomic(req.lock_file, text.as_bytes(), None)
}

fn checkout(repo: &Repository, oid: Oid, ui: &Ui) -> Result<()> {
    let head_at = repo
        .head()
        .ok()
        .filter(|_| repo.head_detached().unwrap_or(false))
        .and_then(|h| h.target());
    if head_at == Some(oid) {
        return Ok(());
    }
    let progress = ui.progress(0, ui::Units::Steps);
    progress.set_prefix("Checkout");
    let commit = repo.find_commit(oid)?;
    let mut cb = CheckoutBuilder::new();
    // Force: files a previous patch run changed go back to the commit's
    // content; the patch stage then re-applies the series.
    cb.force().progress(|_, cur, total| {
        progress.update(cur as u64, total as u64, "");
    });
    repo.checkout_tree(commit.as_object(), Some(&mut cb))
        .with_context(|| format!("cannot check out {oid}"))?;
    repo.set_head_detached(oid)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_local;

    #[test]
    fn local_and_remote_urls() {
        assert!(is_local("/srv/git/MIOpen"));
        assert!(is_local("file:///srv/git/MIOpen"));
        assert!(is_local("../MIOpen"));
        assert!(!is_local("https://github.com/ROCm/MIOpen.git"));
        assert!(!is_local("git@github.com:ROCm/MIOpen.git"));
        assert!(!is_local("ssh://git@host/x"));
    }
}
