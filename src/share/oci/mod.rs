//! OCI distribution, as much as sharing a build needs: content-addressed
//! blobs and tagged manifests, in a registry (the distribution API, as
//! ghcr.io, Docker Hub, Harbor and CNCF distribution serve it) or in an OCI
//! image layout directory (for a USB stick or a file share).
//!
//! Nothing here knows what the artifact holds: the `share` module above does.

mod auth;
mod layout;
mod registry;

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Result;
use sha2::{Digest as _, Sha256};

use crate::error::hint;
use crate::ui::Ui;

pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Manifests and configs are small; anything larger is not ours.
pub const SMALL_LIMIT: u64 = 4 << 20;

/// Where an artifact lives: `oci://host[:port]/repo[:tag|@sha256:...]`, or
/// a directory in OCI image layout, `DIR[:tag]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub location: Location,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Registry { host: String, repo: String },
    Layout(PathBuf),
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Location::Registry { host, repo } => write!(f, "oci://{host}/{repo}")?,
            Location::Layout(dir) => write!(f, "{}", dir.display())?,
        }
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

const REF_HELP: &str = "write oci://HOST[:PORT]/REPO[:TAG] for a registry (e.g. oci://ghcr.io/you/miopen-rdna1:rocm-6.2.4), or a directory, DIR[:TAG], for an OCI image layout";

impl Reference {
    pub fn parse(s: &str) -> Result<Reference> {
        if let Some(rest) = s.strip_prefix("oci://") {
            return Self::parse_registry(s, rest);
        }
        if s.contains("://") {
            return Err(hint(
                format!("`{s}` is not an OCI reference: only oci:// is understood"),
                REF_HELP,
            ));
        }
        if s.is_empty() {
            return Err(hint("an empty OCI reference", REF_HELP));
        }
        // DIR:TAG when what follows the last ':' could be a tag and not a
        // part of the path.
        let (dir, tag) = match s.rsplit_once(':') {
            Some((d, t)) if !d.is_empty() && !t.contains('/') => (d, Some(t)),
            _ => (s, None),
        };
        let tag = tag.map(|t| check_tag(s, t)).transpose()?;
        Ok(Reference {
            location: Location::Layout(std::path::absolute(dir)?),
            tag,
            digest: None,
        })
    }

    fn parse_registry(whole: &str, rest: &str) -> Result<Reference> {
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() || path.is_empty() {
            return Err(hint(format!("`{whole}` names no repository"), REF_HELP));
        }
        if !is_host(host) {
            // `127.0.0.1:1@evil` would be sent to evil, with `127.0.0.1:1`
            // as Basic credentials: a host is a name or an address, a port.
            return Err(hint(
                format!("`{host}` in `{whole}` is not a registry host"),
                "a host is a name (letters, digits, . and -) or an IP address, with :PORT if needed, e.g. ghcr.io or 127.0.0.1:5000",
            ));
        }
        let (path, digest) = match path.split_once('@') {
            Some((p, d)) => (p, Some(check_digest(whole, d)?)),
            None => (path, None),
        };
        let (repo, tag) = match path.rsplit_once(':') {
            Some((r, t)) => (r, Some(check_tag(whole, t)?)),
            None => (path, None),
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
                && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
                && c.ends_with(|ch: char| ch.is_ascii_alphanumeric())
        };
        if !repo.split('/').all(component_ok) {
            return Err(hint(
                format!("`{repo}` in `{whole}` is not a repository name"),
                "a repository name is lowercase letters, digits and . _ - between slashes, e.g. you/miopen-rdna1",
            ));
        }
        Ok(Reference {
            location: Location::Registry {
                host: host.to_owned(),
                repo: repo.to_owned(),
            },
            tag,
            digest,
        })
    }

    /// The same place with another tag.
    pub fn with_tag(&self, tag: &str) -> Reference {
        Reference {
            location: self.location.clone(),
            tag: Some(tag.to_owned()),
            digest: None,
        }
    }
}

/// NAME[:PORT] or [IPv6][:PORT]: nothing that a URL would read as
/// credentials, a path, a query or another host.
fn is_host(host: &str) -> bool {
    let port_ok = |p: &str| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(v6) = host.strip_prefix('[') {
        let Some((addr, rest)) = v6.split_once(']') else {
            return false;
        };
        return addr.parse::<std::net::Ipv6Addr>().is_ok()
            && (rest.is_empty() || rest.strip_prefix(':').is_some_and(port_ok));
    }
    let (name, port) = match host.split_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (host, None),
    };
    !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        && port.is_none_or(port_ok)
}

fn check_tag(whole: &str, t: &str) -> Result<String> {
    let ok = !t.is_empty()
        && t.len() <= 128
        && t.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(t.to_owned())
    } else {
        Err(hint(
            format!("`{t}` in `{whole}` is not a tag"),
            "a tag is up to 128 letters, digits, . _ and -, e.g. rocm-6.2.4",
        ))
    }
}

fn check_digest(whole: &str, d: &str) -> Result<String> {
    match d.strip_prefix("sha256:") {
        Some(h) if is_sha256_hex(h) => Ok(d.to_owned()),
        _ => Err(hint(
            format!("`{d}` in `{whole}` is not a sha256 digest"),
            "a digest is sha256: and 64 lowercase hex digits",
        )),
    }
}

pub fn is_sha256_hex(h: &str) -> bool {
    h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", crate::checksum::hex(&Sha256::digest(data)))
}

/// Network settings for a registry.
#[derive(Debug, Clone, Copy)]
pub struct Net {
    /// A registry that sends nothing for this long is given up on.
    pub timeout: std::time::Duration,
}

/// A registry or a layout directory, opened for one reference.
pub enum Store {
    Registry(registry::Registry),
    Layout(layout::Layout),
}

impl Store {
    pub fn open(r: &Reference, net: Net) -> Result<Store> {
        Ok(match &r.location {
            Location::Registry { host, repo } => {
                Store::Registry(registry::Registry::new(host, repo, net)?)
            }
            Location::Layout(dir) => Store::Layout(layout::Layout::new(dir)),
        })
    }

    /// Store a blob read from `file` (its digest and size known), unless
    /// the store has it.
    pub fn put_blob(&self, file: &Path, digest: &str, size: u64, ui: &Ui) -> Result<bool> {
        match self {
            Store::Registry(r) => r.put_blob(file, digest, size, ui),
            Store::Layout(l) => l.put_blob(file, digest),
        }
    }

    pub fn put_small_blob(&self, data: &[u8]) -> Result<String> {
        let digest = sha256_digest(data);
        // In publish's scratch dir, named by this process like its layer:
        // a publish killed here leaves nothing in $TMPDIR, and the next
        // publish removes what a gone process left there.
        let tmp = tempfile::Builder::new()
            .prefix(&format!("layer-{}-", std::process::id()))
            .tempfile_in(super::scratch()?)?;
        std::io::Write::write_all(&mut tmp.as_file(), data)?;
        match self {
            Store::Registry(r) => {
                r.put_blob(tmp.path(), &digest, data.len() as u64, &Ui::silent())?
            }
            Store::Layout(l) => l.put_blob(tmp.path(), &digest)?,
        };
        Ok(digest)
    }

    /// Store a manifest under `tag`; returns its digest.
    pub fn put_manifest(&self, tag: &str, bytes: &[u8]) -> Result<String> {
        match self {
            Store::Registry(r) => r.put_manifest(tag, bytes),
            Store::Layout(l) => l.put_manifest(tag, bytes),
        }
    }

    /// The manifest a tag or digest names: its bytes and their digest,
    /// checked against the digest when one was asked for. `None` when there
    /// is no such tag.
    pub fn manifest(&self, reference: &str) -> Result<Option<(Vec<u8>, String)>> {
        let found = match self {
            Store::Registry(r) => r.manifest(reference)?,
            Store::Layout(l) => l.manifest(reference)?,
        };
        let Some(bytes) = found else { return Ok(None) };
        let digest = sha256_digest(&bytes);
        if reference.starts_with("sha256:") && reference != digest {
            anyhow::bail!("the manifest served for {reference} has the digest {digest}");
        }
        Ok(Some((bytes, digest)))
    }

    /// A small blob, read whole and checked against its digest.
    pub fn small_blob(&self, digest: &str, size: u64) -> Result<Vec<u8>> {
        if size > SMALL_LIMIT {
            anyhow::bail!("blob {digest} claims {size} bytes, more than a config can be");
        }
        let mut data = Vec::new();
        self.blob(digest, size)?
            .take(size + 1)
            .read_to_end(&mut data)?;
        if data.len() as u64 != size || sha256_digest(&data) != digest {
            anyhow::bail!("blob {digest} does not match its digest or size");
        }
        Ok(data)
    }

    /// A blob as a stream; the reader checks nothing (the caller hashes).
    /// A blob's bytes, at most one past its `size`: enough to tell a blob
    /// that is longer than promised, never more.
    pub fn blob(&self, digest: &str, size: u64) -> Result<Box<dyn Read + Send>> {
        let inner = match self {
            Store::Registry(r) => r.blob(digest, size)?,
            Store::Layout(l) => l.blob(digest)?,
        };
        Ok(Box::new(inner.take(size.saturating_add(1))))
    }

    /// Every tag in the repository.
    pub fn tags(&self) -> Result<Vec<String>> {
        match self {
            Store::Registry(r) => r.tags(),
            Store::Layout(l) => l.tags(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_names_or_addresses_and_nothing_else() {
        for bad in [
            "oci://127.0.0.1:1@evil.example/r",
            "oci://user:pw@ghcr.io/r",
            "oci://ghcr.io?x=1/r",
            "oci://ghcr.io:99999999/r",
            "oci://[::1/r",
            "oci://ghcr..io/r",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
        for good in [
            "oci://ghcr.io/r",
            "oci://127.0.0.1:5000/r",
            "oci://[::1]:5000/r",
            "oci://localhost/r",
        ] {
            assert!(Reference::parse(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn references() {
        let r = Reference::parse("oci://127.0.0.1:5000/rdna1/miopen:rocm-6.2.4").unwrap();
        assert_eq!(
            r.location,
            Location::Registry {
                host: "127.0.0.1:5000".into(),
                repo: "rdna1/miopen".into()
            }
        );
        assert_eq!(r.tag.as_deref(), Some("rocm-6.2.4"));
        assert_eq!(
            r.to_string(),
            "oci://127.0.0.1:5000/rdna1/miopen:rocm-6.2.4"
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r = Reference::parse(&format!("oci://ghcr.io/x/y@{d}")).unwrap();
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        assert!(Reference::parse("oci://ghcr.io/X/y").is_err());
        assert!(Reference::parse("oci://ghcr.io").is_err());
        assert!(Reference::parse("oci://h/r:bad tag").is_err());
        assert!(Reference::parse("https://h/r").is_err());
        let r = Reference::parse("/mnt/usb/builds:rocm-6.2.4-abc").unwrap();
        assert_eq!(r.location, Location::Layout("/mnt/usb/builds".into()));
        assert_eq!(r.tag.as_deref(), Some("rocm-6.2.4-abc"));
        let r = Reference::parse("/mnt/a:b/builds").unwrap();
        assert_eq!(r.location, Location::Layout("/mnt/a:b/builds".into()));
        assert_eq!(r.tag, None);
    }
}
