//! A source pinned by a tarball and its SHA-256 (Debian's
//! `rocblas_6.4.4.orig.tar.gz`: rocBLAS's 6.4 tags cannot be reached).
//! The tarball is checked before a byte of it is unpacked, then unpacked
//! (its one top directory stripped) and committed into a local git
//! repository with a fixed identity and date, so that the patch stage, the
//! local-edit check and `--keep-local` work on it as on a git source, and
//! the same tarball always makes the same commit.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use sha2::{Digest, Sha256};

use super::{Checkout, FetchRequest, PIN_REF, check_owner, checkout, lock, resolve};
use crate::builder::git::Git;
use crate::error::hint;
use crate::fsutil;
use crate::ui::Ui;

/// A tarball larger than this is not a source tree (rocBLAS's is 59 MB).
const TARBALL_LIMIT: u64 = 4 << 30;

pub(super) fn fetch(req: &FetchRequest, sha: &str, ui: &Ui) -> Result<Checkout> {
    crate::builder::git::check_version()?;
    let message = format!("{} sha256 {sha}", req.source.file_name());
    if req.src.join(".git").exists() {
        check_owner(req.src)?;
        let git = Git::new(req.src);
        if let Some(commit) = resolve(&git, PIN_REF)?
            && git
                .query(&["log", "-1", "--format=%B", PIN_REF])?
                .as_deref()
                == Some(&message)
        {
            // Files a previous patch run changed go back to the tarball's.
            checkout(&git, &commit, req.net_timeout, ui)?;
            return Ok(made(req, commit, false));
        }
    }
    let base = req.src.parent().unwrap_or(Path::new("."));
    fsutil::create_dir_all(base)?;
    let part = base.join(format!("{}.part", req.source.file_name()));
    ui.stage(
        "Fetching",
        format!("{} ({})", req.source.url, req.source.pin()),
    );
    let got = download(req, &part)?;
    if got != sha {
        let _ = fsutil::remove_path(&part);
        return Err(hint(
            format!(
                "{} has SHA-256 {got}, but the profile pins {sha}",
                req.source.url
            ),
            "the tarball changed where it is served, or the profile is wrong: check it against its origin's published checksum before changing the pin; nothing was unpacked",
        ));
    }
    let unpacked = base.join("src.unpacking");
    if std::fs::symlink_metadata(&unpacked).is_ok() {
        fsutil::remove_path(&unpacked)?;
    }
    unpack(&part, &unpacked).with_context(|| format!("cannot unpack {}", req.source.url))?;
    fsutil::remove_path(&part)?;
    if std::fs::symlink_metadata(req.src).is_ok() {
        fsutil::remove_path(req.src)?;
    }
    std::fs::rename(&unpacked, req.src).with_context(|| {
        format!(
            "cannot move {} to {}",
            unpacked.display(),
            req.src.display()
        )
    })?;
    let git = Git::new(req.src);
    git.run(&["init", "-q"])?;
    git.protect()?;
    let commit = git.commit_all_fixed(&message)?;
    git.run(&["update-ref", PIN_REF, &commit])?;
    git.run(&["update-ref", "--no-deref", "HEAD", &commit])?;
    lock::record(
        req,
        &lock::lock_pin(req.source).unwrap_or_default(),
        &commit,
    )?;
    ui.note(format!(
        "unpacked; its tree is commit {}",
        crate::builder::git::short(&commit)
    ));
    Ok(made(req, commit, true))
}

fn made(req: &FetchRequest, commit: String, fetched: bool) -> Checkout {
    Checkout {
        path: req.src.to_owned(),
        commit,
        fetched,
        root: req.src.to_owned(),
        prefix: String::new(),
    }
}

/// Copy the tarball at the URL to `to`, returning its SHA-256.
fn download(req: &FetchRequest, to: &Path) -> Result<String> {
    let url = &req.source.url;
    let mut reader: Box<dyn Read> = match url.strip_prefix("file://") {
        Some(path) => Box::new(std::fs::File::open(path).map_err(|e| {
            hint(
                format!("cannot read {url}: {}", crate::error::words(&e.to_string())),
                "check the profile's `url`: a file:// URL names a tarball on this machine",
            )
        })?),
        None => {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(req.net_timeout))
                .timeout_recv_response(Some(req.net_timeout))
                .timeout_per_read(Some(req.net_timeout))
                .user_agent(format!("rdna1-patch/{}", env!("CARGO_PKG_VERSION")))
                .build()
                .into();
            let resp = agent.get(url).call().map_err(|e| {
                hint(
                    format!("cannot fetch {url}: {e}"),
                    "check the network, the URL and any proxy; --net-timeout SECS waits longer for a slow server",
                )
            })?;
            if !resp.status().is_success() {
                return Err(hint(
                    format!("{url} answered {}", resp.status()),
                    "check the profile's `url`; a copy of the tarball on this machine can be given as file:///PATH",
                ));
            }
            Box::new(resp.into_body().into_reader())
        }
    };
    if std::fs::symlink_metadata(to).is_ok() {
        fsutil::remove_path(to)?;
    }
    let mut file = fsutil::create_new(to, 0o644)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("cannot read {url}"))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > TARBALL_LIMIT {
            return Err(anyhow!(
                "{url} is over {} bytes: not a source tarball",
                TARBALL_LIMIT
            ));
        }
        hash.update(&buf[..n]);
        file.write_all(&buf[..n])
            .with_context(|| format!("cannot write {}", to.display()))?;
    }
    file.sync_all().ok();
    Ok(crate::checksum::hex(&hash.finalize()))
}

/// Unpack a .tar.gz whose members all sit in one top directory into `dest`,
/// without it. A member outside that directory, with `..`, or reached
/// through a symlink the tarball made is refused.
fn unpack(tarball: &Path, dest: &Path) -> Result<()> {
    let file = std::fs::File::open(tarball)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive.set_preserve_permissions(false);
    archive.set_overwrite(false);
    fsutil::create_dir_all(dest)?;
    let mut top: Option<std::ffi::OsString> = None;
    for entry in archive.entries()? {
        let mut entry = entry?;
        // `git archive` (GitHub's tarballs, and Debian's orig tarballs made
        // from them) opens with a pax global header holding the commit id:
        // metadata, not a member.
        if entry.header().entry_type() == tar::EntryType::XGlobalHeader {
            continue;
        }
        let path = entry.path()?.into_owned();
        let mut parts = path.components().filter(|c| *c != Component::CurDir);
        let first = match parts.next() {
            Some(Component::Normal(n)) => n.to_owned(),
            _ => {
                return Err(anyhow!(
                    "member {} is not inside a directory",
                    path.display()
                ));
            }
        };
        match &top {
            None => top = Some(first),
            Some(t) if *t == first => {}
            Some(t) => {
                return Err(anyhow!(
                    "members in two top directories, {} and {}",
                    t.to_string_lossy(),
                    first.to_string_lossy()
                ));
            }
        }
        let rel: PathBuf = parts.map(|c| c.as_os_str()).collect();
        if rel.as_os_str().is_empty() {
            continue;
        }
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(anyhow!("member {} leaves the tree", path.display()));
        }
        if let Some(link) = fsutil::first_symlink(dest, rel.parent().unwrap_or(Path::new(""))) {
            return Err(anyhow!(
                "member {} would be written through the symlink {}",
                path.display(),
                link.display()
            ));
        }
        let target = dest.join(&rel);
        if let Some(parent) = target.parent() {
            fsutil::create_dir_all(parent)?;
        }
        if entry.header().entry_type() == tar::EntryType::Link {
            return Err(anyhow!("member {} is a hard link", path.display()));
        }
        entry
            .unpack(&target)
            .with_context(|| format!("cannot unpack {}", path.display()))?;
    }
    if top.is_none() {
        return Err(anyhow!("the tarball is empty"));
    }
    Ok(())
}
