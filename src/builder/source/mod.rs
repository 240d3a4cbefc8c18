//! The fetch stage: the pinned source of a component, checked out in the work dir.
//!
//! A cached checkout at the right commit is reused without touching the
//! network. The commit a tag resolves to is pinned by the profile or recorded
//! in a lock file on first fetch; a tag that later resolves elsewhere is a
//! supply-chain event and stops the build unless `--update` says otherwise.
//! A monorepo project (`subdir`) is fetched blobless and checked out sparse:
//! only its directory, and those its CMake reads, are ever downloaded.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use crate::builder::git::short;
use crate::builder::git::{self, Git};
use crate::builder::profile::Source;
use crate::error::hint;
use crate::fsutil;
use crate::ui::Ui;

mod lock;
mod remote;
mod tarball;

use lock::check_lock;
pub use lock::planned_commit;
use remote::{configure_remote, git_url, remote_fetch};

pub struct FetchRequest<'a> {
    pub name: &'a str,
    pub source: &'a Source,
    /// The git checkout's root (a monorepo's, with `subdir` below it).
    pub src: &'a Path,
    pub lock_file: &'a Path,
    /// Fetch even when cached, and accept a tag that moved.
    pub update: bool,
    /// How long a server may send nothing before the fetch gives up.
    pub net_timeout: Duration,
}

/// A checked-out source tree at a known commit.
pub struct Checkout {
    /// The project's directory: the checkout's root, or `subdir` below it.
    /// Patches and CMake see it as the root.
    pub path: PathBuf,
    pub commit: String,
    /// Whether this run talked to the remote.
    pub fetched: bool,
    root: PathBuf,
    /// `subdir/`, or empty: what makes a project path a repository path.
    prefix: String,
}

impl Checkout {
    /// A file as the commit has it, before any patch: `None` if it does not
    /// exist. `rel` is relative to [`Checkout::path`].
    pub fn pristine(&self, rel: &str) -> Result<Option<String>> {
        let git = Git::new(&self.root);
        let full = format!("{}{rel}", self.prefix);
        // ls-tree names the entry from the trees alone, so a path that is
        // not there costs no object fetch in a partial clone.
        let listing = git.run(&["ls-tree", "-z", &self.commit, "--", &full])?;
        let Some(entry) = listing.split('\0').find(|e| !e.is_empty()) else {
            return Ok(None);
        };
        let (meta, _) = entry
            .split_once('\t')
            .ok_or_else(|| anyhow!("cannot read git ls-tree's `{entry}`"))?;
        let fields: Vec<&str> = meta.split(' ').collect();
        let [_, "blob", oid] = fields[..] else {
            return Err(anyhow!("{rel} is not a file at {}", short(&self.commit)));
        };
        let blob = git
            .run_text(&["cat-file", "blob", oid])?
            .ok_or_else(|| anyhow!("{rel} at {} is not UTF-8 text", short(&self.commit)))?;
        Ok(Some(blob))
    }
}

/// The git checkout holding `path` at its HEAD commit (for `patches
/// refresh`); `path` may be a monorepo project's directory inside it.
pub fn open(path: &Path) -> Result<Checkout> {
    let not_a_checkout = |why: String| {
        hint(
            format!("{} is not a git checkout: {why}", path.display()),
            "refresh needs the tree's git history to know the unpatched files; use the checkout `build --stop-after patch` made, or a git clone",
        )
    };
    if !path.is_dir() {
        return Err(not_a_checkout("no such directory".into()));
    }
    let git = Git::new(path);
    let top = git
        .query(&["rev-parse", "--show-toplevel", "--show-prefix"])?
        .ok_or_else(|| not_a_checkout("git finds no repository there".into()))?;
    let mut lines = top.lines();
    let root = PathBuf::from(lines.next().unwrap_or_default());
    let prefix = lines.next().unwrap_or_default().to_owned();
    let commit = git
        .query(&["rev-parse", "--verify", "-q", "HEAD^{commit}"])?
        .ok_or_else(|| {
            hint(
                format!("{} has no HEAD commit", path.display()),
                "give a git checkout of the profile's source, e.g. the one `rdna1-patch build --stop-after patch` fetches",
            )
        })?;
    Ok(Checkout {
        path: path.to_owned(),
        commit,
        fetched: false,
        root,
        prefix,
    })
}

/// Files of the project that differ from its commit (changed, added,
/// deleted or untracked and not ignored), relative to the project's
/// directory. Empty for a directory that is not a checkout yet.
pub fn changed_files(src: &Path, subdir: Option<&str>) -> Result<Vec<String>> {
    if !src.join(".git").exists() {
        return Ok(Vec::new());
    }
    check_owner(src)?;
    let git = Git::new(src);
    if resolve(&git, "HEAD")?.is_none() {
        return Ok(Vec::new());
    }
    let scope = subdir.unwrap_or(".");
    let status = git
        .run(&[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=all",
            "--no-renames",
            "--",
            scope,
        ])
        .with_context(|| format!("cannot compare {} with its commit", src.display()))?;
    let prefix = repo_prefix(subdir);
    let mut files: Vec<String> = status
        .split('\0')
        .filter(|e| e.len() > 3)
        .map(|e| &e[3..])
        .map(|p| p.strip_prefix(&prefix).unwrap_or(p).to_owned())
        .collect();
    files.sort_unstable();
    Ok(files)
}

/// A path or file:// URL: fetched in full (a local transfer costs no
/// network, and a shallow one would only add work).
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

/// A local URL given as a path, not as file://.
fn is_path(url: &str) -> bool {
    is_local(url) && !url.starts_with("file://")
}

/// The commit tag `tag` names here, if it is here.
fn tag_commit(git: &Git, tag: &str) -> Result<Option<String>> {
    resolve(git, &format!("refs/tags/{tag}^{{commit}}"))
}

/// `subdir/`, or empty: what makes a project path a repository path.
fn repo_prefix(subdir: Option<&str>) -> String {
    subdir.map(|s| format!("{s}/")).unwrap_or_default()
}

/// A local fetch runs upload-pack on this machine, and the user's config
/// may name another program for it (`remote.origin.uploadpack`, which `-c`
/// cannot override: git takes its first value). The option wins. A
/// monorepo checkout's lazy blob fetches read the remote's config and are
/// not covered by this.
const UPLOAD_PACK: &str = "--upload-pack=git-upload-pack";

/// The commit a profile pins without a tag, once fetched.
const PIN_REF: &str = "refs/rdna1-patch/pin";

pub fn fetch(req: &FetchRequest, ui: &Ui) -> Result<Checkout> {
    let c = req.source;
    if let Some(sha) = &c.sha256 {
        return tarball::fetch(req, sha, ui);
    }
    git::check_version()?;
    let git = open_or_init(req.src, c)?;
    git.protect()?;
    configure_remote(&git, c)?;
    let local = match (&c.tag, &c.commit) {
        (Some(tag), _) => tag_commit(&git, tag)?,
        // Asked of our ref, not of the object: in a partial clone, asking
        // for a missing object fetches it.
        (None, Some(commit)) => {
            resolve(&git, PIN_REF)?.filter(|have| have.eq_ignore_ascii_case(commit))
        }
        (None, None) => None,
    };
    // A commit cannot move, so --update has nothing to ask of the remote
    // once it is here.
    let refetch = req.update && c.tag.is_some();
    let (commit, fetched) = match local {
        Some(commit) if !refetch => (commit, false),
        _ => (remote_fetch(&git, c, req.net_timeout, ui)?, true),
    };

    if let (Some(tag), Some(pinned)) = (&c.tag, &c.commit)
        && !commit.starts_with(&pinned.to_ascii_lowercase())
    {
        return Err(hint(
            format!(
                "{} tag {tag} resolved to {commit}, but the profile pins commit {pinned}",
                c.url
            ),
            "the tag was moved or the profile is wrong; check upstream before changing the pin",
        ));
    }
    if let Some(tag) = &c.tag {
        check_lock(req, tag, &commit, ui)?;
    }
    sparse(&git, c)?;
    checkout(&git, &commit, req.net_timeout, ui)?;
    Ok(Checkout {
        path: req.src.join(c.subdir.as_deref().unwrap_or("")),
        commit,
        fetched,
        root: req.src.to_owned(),
        prefix: repo_prefix(c.subdir.as_deref()),
    })
}

/// git refuses a repository another user owns (its safe.directory rule);
/// say so before git does, with what to do.
fn check_owner(src: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(src.join(".git")).map(|m| m.uid()).ok();
    let me = crate::owner::euid();
    match owner {
        Some(uid) if uid != me => Err(not_yours(src, uid, me)),
        _ => Ok(()),
    }
}

fn not_yours(src: &Path, owner: u32, me: u32) -> anyhow::Error {
    hint(
        format!(
            "the cached checkout {} belongs to uid {owner}, not to the user running this (uid {me}); git will not use another user's repository",
            src.display(),
        ),
        "run rdna1-patch as the user who built it (the default prefix is one that user can write), or give this run its own --work-dir; the checkout is fine, do not delete it",
    )
}

fn open_or_init(src: &Path, c: &Source) -> Result<Git> {
    let git = Git::new(src);
    if src.join(".git").exists() {
        check_owner(src)?;
        if git.query(&["rev-parse", "--git-dir"])?.is_none() {
            return Err(hint(
                format!(
                    "the cached checkout {} is damaged: git does not see a repository there",
                    src.display()
                ),
                format!("remove {} and run again to fetch it anew", src.display()),
            ));
        }
        return Ok(git);
    }
    let empty = std::fs::read_dir(src).map_or(true, |mut d| d.next().is_none());
    if empty && is_path(&c.url) && c.subdir.is_none() {
        // What `git clone` of a path does: hardlink the objects instead of
        // packing and sending them (20k files: 3x faster). The tag fetch
        // that follows then finds everything here.
        let parent = src.parent().unwrap_or(Path::new("."));
        fsutil::create_dir_all(parent)?;
        let target = src.display().to_string();
        Git::new(parent)
            .run(&[
                "clone",
                UPLOAD_PACK,
                "-q",
                "--local",
                "--no-checkout",
                "--no-tags",
                &git_url(&c.url),
                &target,
            ])
            .with_context(|| format!("cannot clone {} into {}", c.url, src.display()))?;
        // Leave no branch checked out, as after `git init`: until our
        // checkout, HEAD is unborn and there is nothing to call an edit.
        if let Some(branch) = git.query(&["symbolic-ref", "-q", "HEAD"])? {
            git.run(&["update-ref", "-d", &branch])?;
        }
        return Ok(git);
    }
    fsutil::create_dir_all(src)?;
    git.run(&["init", "-q"])
        .with_context(|| format!("cannot create a git repository in {}", src.display()))?;
    Ok(git)
}

/// The commit id `rev` names, if it names one.
fn resolve(git: &Git, rev: &str) -> Result<Option<String>> {
    git.query(&["rev-parse", "--verify", "-q", rev])
}

/// Only the project's directory, and those its CMake reads, in the work
/// tree; a profile without `subdir` gets the whole tree.
fn sparse(git: &Git, c: &Source) -> Result<()> {
    let enabled = git
        .query(&["config", "--bool", "core.sparseCheckout"])?
        .as_deref()
        == Some("true");
    let Some(subdir) = &c.subdir else {
        if enabled {
            git.run(&["sparse-checkout", "disable"])?;
        }
        return Ok(());
    };
    let mut wanted: Vec<&str> = std::iter::once(subdir.as_str())
        .chain(c.sparse.iter().map(String::as_str))
        .collect();
    wanted.sort_unstable();
    if enabled {
        let list = git.run(&["sparse-checkout", "list"])?;
        let mut have: Vec<&str> = list.lines().collect();
        have.sort_unstable();
        if have == wanted {
            return Ok(());
        }
    }
    let mut args = vec!["sparse-checkout", "set", "--cone"];
    args.extend(wanted);
    git.run(&args)?;
    Ok(())
}

fn checkout(git: &Git, commit: &str, net_timeout: Duration, ui: &Ui) -> Result<()> {
    let detached = git.query(&["symbolic-ref", "-q", "HEAD"])?.is_none();
    let head = resolve(git, "HEAD")?;
    if detached && head.as_deref() == Some(commit) {
        return Ok(());
    }
    let progress = ui.progress(0);
    progress.set_prefix("Checkout");
    // Force: files a previous patch run changed go back to the commit's
    // content; the patch stage then re-applies the series. In a partial
    // clone this also fetches the blobs of the sparse directories.
    let run = git.stream(
        &["checkout", "--progress", "--force", "--detach", commit],
        net_timeout,
        |label, done, total| progress.update(done, total, label),
    )?;
    progress.finish();
    if run.success != Some(true) {
        let message = git::last_message(run.messages.iter().map(String::as_str));
        return Err(hint(
            format!("cannot check out {commit}: {message}"),
            "a partial clone fetches the checked-out files here, so check the network too; run again to retry",
        ));
    }
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

    #[test]
    fn pristine_reads_the_commit_not_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .arg("-C")
                .arg(dir.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.cpp"), "int a;\n").unwrap();
        std::fs::write(dir.path().join("latin1.txt"), b"caf\xe9\n").unwrap();
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "one"]);
        std::fs::write(dir.path().join("src/a.cpp"), "int b;\n").unwrap();

        let c = super::open(dir.path()).unwrap();
        assert_eq!(
            c.pristine("src/a.cpp").unwrap().as_deref(),
            Some("int a;\n")
        );
        assert_eq!(c.pristine("src/none.cpp").unwrap(), None);
        let err = |rel: &str| c.pristine(rel).unwrap_err().to_string();
        assert!(
            err("latin1.txt").contains("is not UTF-8 text"),
            "{}",
            err("latin1.txt")
        );
        assert!(err("src").contains("src is not a file"), "{}", err("src"));
        // From a subdirectory, paths are relative to it.
        let sub = super::open(&dir.path().join("src")).unwrap();
        assert_eq!(sub.pristine("a.cpp").unwrap().as_deref(), Some("int a;\n"));
    }
}
