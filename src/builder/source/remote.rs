//! What is asked of the remote: its URL as git is given it, the remote
//! configured (a promisor for a monorepo's blobless clone), the fetch of
//! the pinned tag or commit, and a fetch that failed said with what to do.

use std::time::Duration;

use anyhow::{Result, anyhow};

use super::{PIN_REF, UPLOAD_PACK, is_local, is_path, resolve, tag_commit};
use crate::builder::git::{self, Git, short};
use crate::builder::profile::Source;
use crate::error::hint;
use crate::ui::Ui;

/// A relative path means one from where rdna1-patch runs; git runs in the
/// checkout, so it is given the absolute path.
pub(super) fn git_url(url: &str) -> String {
    if is_path(url)
        && let Ok(abs) = std::path::absolute(url)
    {
        return abs.display().to_string();
    }
    url.to_owned()
}

/// The remote is named so that a partial clone can fetch the blobs a
/// checkout needs from it later (git's promisor remote).
pub(super) fn configure_remote(git: &Git, c: &Source) -> Result<()> {
    let url = git_url(&c.url);
    let current = git.query(&["config", "--get", "remote.origin.url"])?;
    if current.as_deref() != Some(url.as_str()) {
        git.run(&["config", "remote.origin.url", &url])?;
    }
    if c.subdir.is_some() {
        let promisor = git.query(&["config", "--get", "remote.origin.partialclonefilter"])?;
        if promisor.as_deref() != Some("blob:none") {
            git.run(&["config", "remote.origin.promisor", "true"])?;
            git.run(&["config", "remote.origin.partialclonefilter", "blob:none"])?;
        }
    }
    Ok(())
}

pub(super) fn remote_fetch(
    git: &Git,
    c: &Source,
    net_timeout: Duration,
    ui: &Ui,
) -> Result<String> {
    let local = is_local(&c.url);
    let mut how = Vec::new();
    if !local {
        how.push("shallow");
    }
    if c.subdir.is_some() {
        how.push("blobless");
    }
    let how = if how.is_empty() {
        String::new()
    } else {
        format!(" ({})", how.join(", "))
    };
    ui.stage("Fetching", format!("{} {}{how}", c.url, c.pin()));
    let (what, refspec) = match (&c.tag, &c.commit) {
        (Some(tag), _) => (tag.clone(), format!("+refs/tags/{tag}:refs/tags/{tag}")),
        (None, Some(commit)) => (format!("commit {commit}"), commit.clone()),
        (None, None) => unreachable!("the profile check requires a tag or a commit"),
    };
    let secs = net_timeout.as_secs().max(1).to_string();
    let before = pack_stats(git)?;
    let low_speed = format!("http.lowSpeedTime={secs}");
    let mut args = vec![
        "-c",
        "http.lowSpeedLimit=1",
        "-c",
        &low_speed,
        "fetch",
        UPLOAD_PACK,
        "--progress",
        "--no-tags",
        "--no-write-fetch-head",
    ];
    if !local {
        args.push("--depth=1");
    }
    if c.subdir.is_some() {
        args.push("--filter=blob:none");
    }
    args.extend(["origin", &refspec]);
    let progress = ui.progress(0);
    progress.set_prefix("Fetching");
    let run = git.stream(&args, net_timeout, |label, done, total| {
        progress.update(done, total, label);
    })?;
    progress.finish();
    if run.success != Some(true) {
        return Err(fetch_error(c, &what, &run, net_timeout));
    }
    let commit = match &c.tag {
        Some(tag) => tag_commit(git, tag)?,
        None => {
            let commit = c.commit.as_deref().unwrap_or_default();
            // A ref keeps the fetched commit from git's garbage collection.
            git.run(&["update-ref", PIN_REF, commit])?;
            resolve(git, &format!("{commit}^{{commit}}"))?
        }
    }
    .ok_or_else(|| anyhow!("git fetched {what} from {} but does not have it", c.url))?;
    let after = pack_stats(git)?;
    let received = format!(
        "received {} objects, {}",
        after.0.saturating_sub(before.0),
        crate::fsutil::human_bytes(after.1.saturating_sub(before.1) * 1024),
    );
    ui.note(match &c.tag {
        Some(tag) => format!("{received}; {tag} is {}", short(&commit)),
        None => received,
    });
    Ok(commit)
}

/// Why git could not fetch, from what it said, with what to do.
fn fetch_error(
    c: &Source,
    what: &str,
    run: &git::Streamed,
    net_timeout: Duration,
) -> anyhow::Error {
    let message = git::last_message(run.messages.iter().map(String::as_str));
    let silent = run.success.is_none()
        || message.contains("Operation too slow")
        || message.contains("timed out");
    if silent {
        return hint(
            format!(
                "cannot fetch {what} from {}: the server sent nothing for {} s ({message})",
                c.url,
                net_timeout.as_secs()
            ),
            "check the network, the URL and any proxy; --net-timeout SECS waits longer for a slow server",
        );
    }
    if message.contains("couldn't find remote ref") {
        return hint(
            format!("{} has no tag {what}", c.url),
            "check the profile's `tag` against the repository's tags",
        );
    }
    if message.contains("not our ref") || message.contains("unadvertised object") {
        return hint(
            format!("{} has no {what}", c.url),
            "check the profile's `commit`: it must be a commit of that repository, given in full",
        );
    }
    hint(
        format!("cannot fetch {what} from {}: {message}", c.url),
        "check the network and the URL; a cached checkout is reused without the network once it exists",
    )
}

/// Objects in packs, and their size in KiB (`git count-objects -v`).
fn pack_stats(git: &Git) -> Result<(u64, u64)> {
    let text = git.run(&["count-objects", "-v"])?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((
        field("in-pack:") + field("count:"),
        field("size-pack:") + field("size:"),
    ))
}
