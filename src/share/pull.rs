//! Pulling a candidate into the prefix: the layer downloaded and proven
//! before a byte is decompressed, unpacked into staging within the signed
//! size, checked against MD5SUMS and the signed config, then committed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest as _, Sha256};

use super::examine::{Candidate, tampered};
use super::oci::{Reference, Store};
use crate::checksum::{self, Entry};
use crate::fsutil::At;
use crate::prefix::{self, Provenance};
use crate::ui::Ui;

/// Pull the layer into `prefix_dir`: download and prove it, unpack it into
/// a staging dir, hashing every file as it is written; check all of it
/// against the signed config and MD5SUMS; then move the files in.
pub fn install(store: &Store, c: &Candidate, prefix_dir: &Path, ui: &Ui) -> Result<usize> {
    prefix::preflight(prefix_dir)?;
    let staging = prefix::begin(prefix_dir)?;
    let result = unpack(store, c, &staging, ui).and_then(|written| {
        let entries = check_staged(c, &staging, &written)?;
        prefix::commit_verified(prefix_dir, &staging, &entries)?;
        Ok(entries.len())
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// What was written: each regular file's MD5, each symlink's target.
pub(super) struct Written {
    md5: HashMap<String, String>,
    links: HashMap<String, PathBuf>,
}

/// Where the layer is downloaded: inside the staging dir, under a name no
/// layer path may have (`layer_path` refuses `.rdna1-patch*` at the top),
/// so a killed pull leaves it where the next pull removes it.
const DOWNLOAD: &str = ".rdna1-patch-layer.tar.zst";

/// Verify before use, as containerd does: the whole layer is downloaded
/// and proven to be the signed digest and size before a byte of it is
/// decompressed; then what it unpacks to is bounded by the signed config.
fn unpack(store: &Store, c: &Candidate, staging: &Path, ui: &Ui) -> Result<Written> {
    let file = staging.join(DOWNLOAD);
    download(store, c, &file, ui)?;
    let layer = std::fs::File::open(&file).at("read", &file)?;
    let progress = ui.progress(c.unpacked_size);
    progress.set_prefix("Unpacking");
    // One thread decompresses, this one writes and hashes each file: the
    // two halves take about as long.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
    let reference = c.reference.clone();
    let producer = std::thread::spawn(move || -> Result<()> {
        let mut dec = zstd::Decoder::new(layer)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = read_full(&mut dec, &mut buf).map_err(|e| tampered_or_io(&reference, e))?;
            // The unpacker stops at the tar's end; what follows was signed
            // with the rest, and is not read.
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return Ok(());
            }
        }
    });
    let reader = ChannelReader {
        rx,
        chunk: Vec::new(),
        pos: 0,
    };
    let unpacked = unpack_tar(reader, staging, c, &*progress);
    progress.finish();
    let produced = producer
        .join()
        .map_err(|_| anyhow::anyhow!("the decompressing thread failed"))?;
    std::fs::remove_file(&file).at("remove", &file)?;
    // The unpacker's own error says more than the producer's broken pipe.
    let written = unpacked?;
    produced?;
    Ok(written)
}

/// Download the layer to `to`, at most its signed size, hashing it; an
/// error unless it is exactly the signed digest and size.
fn download(store: &Store, c: &Candidate, to: &Path, ui: &Ui) -> Result<()> {
    let (digest, size) = &c.layer;
    let mut blob = store.blob(digest, *size)?;
    let mut out = crate::fsutil::create_new(to, 0o644)?;
    let progress = ui.progress(*size);
    progress.set_prefix("Pulling");
    let (mut sha, mut got) = (Sha256::new(), 0u64);
    let mut buf = vec![0u8; 1 << 20];
    let result = loop {
        let n = match blob.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                break Err(anyhow::Error::new(e).context(format!("pulling {} failed", c.reference)));
            }
        };
        got += n as u64;
        // The store reads one byte past the signed size, no more: enough
        // to tell a longer blob, never a flood.
        if got > *size {
            break Ok(());
        }
        sha.update(&buf[..n]);
        if let Err(e) = out.write_all(&buf[..n]) {
            break Err(anyhow::Error::new(e).context(format!("cannot write {}", to.display())));
        }
        progress.update(got, *size, "layer");
    };
    progress.finish();
    result?;
    let hash = format!("sha256:{}", checksum::hex(&sha.finalize()));
    if &hash != digest || got != *size {
        let what = if got > *size {
            format!("more than {size} bytes")
        } else {
            format!("{got} bytes with digest {hash}")
        };
        return Err(tampered(
            &c.reference,
            &format!(
                "its layer is not what the signed manifest says ({what}, expected {size} bytes with {digest})"
            ),
        ));
    }
    Ok(())
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn tampered_or_io(reference: &Reference, e: std::io::Error) -> anyhow::Error {
    if matches!(
        e.kind(),
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::Other
    ) {
        tampered(reference, &format!("its layer does not decompress: {e}"))
    } else {
        anyhow::Error::new(e).context(format!("pulling {reference} failed"))
    }
}

struct ChannelReader {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.chunk.len() {
            match self.rx.recv() {
                Ok(c) => {
                    self.chunk = c;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// A path in the layer: relative, plain components, UTF-8, not ours.
/// The top-level `.rdna1-patch*` names are this tool's own (the staging
/// dir, the download).
fn layer_path(p: &Path) -> Option<String> {
    let ours = p
        .components()
        .next()
        .and_then(|c| c.as_os_str().to_str())
        .is_some_and(|n| n.starts_with(".rdna1-patch"));
    let ok = !p.as_os_str().is_empty()
        && !ours
        && p.components().all(|c| match c {
            Component::Normal(n) => !crate::fsutil::is_git_dir_name(n),
            _ => false,
        });
    ok.then(|| p.to_str().map(str::to_owned)).flatten()
}

/// Unpack the verified layer; its regular files may add up to no more
/// than the signed config declares.
pub(super) fn unpack_tar(
    reader: impl Read,
    staging: &Path,
    c: &Candidate,
    progress: &dyn crate::ui::Progress,
) -> Result<Written> {
    let (reference, limit) = (&c.reference, c.unpacked_size);
    let mut archive = tar::Archive::new(reader);
    let mut written = Written {
        md5: HashMap::new(),
        links: HashMap::new(),
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for entry in archive
        .entries()
        .map_err(|e| tampered(reference, &format!("its layer is not a tar: {e}")))?
    {
        let mut entry = entry.map_err(|e| tampered_or_io(reference, e))?;
        let raw = entry
            .path()
            .map_err(|e| tampered_or_io(reference, e))?
            .into_owned();
        let rel = layer_path(&raw).ok_or_else(|| {
            tampered(
                reference,
                &format!("its layer has the path {}", raw.display()),
            )
        })?;
        if written.md5.contains_key(&rel) || written.links.contains_key(&rel) {
            return Err(tampered(reference, &format!("its layer has {rel} twice")));
        }
        if let Some(link) = crate::fsutil::first_symlink(staging, Path::new(&rel)) {
            return Err(tampered(
                reference,
                &format!(
                    "its layer writes {rel} through the symlink {}",
                    link.display()
                ),
            ));
        }
        let to = staging.join(&rel);
        if let Some(dir) = to.parent() {
            crate::fsutil::create_dir_all(dir)?;
        }
        match entry.header().entry_type() {
            tar::EntryType::Regular => {
                fits(c, &rel, entry.header().size().unwrap_or(u64::MAX), total)?;
                let md5 = write_file(&mut entry, &to, &mut buf, reference, &mut |n| {
                    total += n;
                    progress.update(total.min(limit), limit, &rel);
                })?;
                written.md5.insert(rel, md5);
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| tampered_or_io(reference, e))?
                    .context("a symlink without a target")?
                    .into_owned();
                if !link_stays_inside(&rel, &target) {
                    return Err(tampered(
                        reference,
                        &format!(
                            "its layer links {rel} to {}, outside the prefix",
                            target.display()
                        ),
                    ));
                }
                crate::fsutil::symlink(&target, &to)?;
                written.links.insert(rel, target);
            }
            other => {
                return Err(tampered(
                    reference,
                    &format!("its layer has {rel} as a {other:?}, not a file or symlink"),
                ));
            }
        }
    }
    Ok(written)
}

/// Whether a file of `size` bytes fits in what the signed config declares,
/// after `total` bytes of files before it.
fn fits(c: &Candidate, rel: &str, size: u64, total: u64) -> Result<()> {
    let limit = c.unpacked_size;
    if size > limit.saturating_sub(total) {
        return Err(tampered(
            &c.reference,
            &format!(
                "its layer unpacks to more than the {limit} bytes its signed config declares ({rel} alone is {size})"
            ),
        ));
    }
    Ok(())
}

/// Write one regular file of the layer, hashing it as it goes; its MD5.
fn write_file(
    entry: &mut tar::Entry<impl Read>,
    to: &Path,
    buf: &mut [u8],
    reference: &Reference,
    moved: &mut dyn FnMut(u64),
) -> Result<String> {
    let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
    let mut out = crate::fsutil::create_new(to, mode | 0o600)?;
    let mut md5 = checksum::Md5::new()?;
    loop {
        let n = entry.read(buf).map_err(|e| tampered_or_io(reference, e))?;
        if n == 0 {
            break;
        }
        md5.update(&buf[..n])?;
        out.write_all(&buf[..n]).at("write", to)?;
        moved(n as u64);
    }
    md5.finish()
}

/// A relative target that, resolved from the link's dir, stays below the
/// prefix at every step; its `..` come first (`x/../lib` would go through
/// `x`, which may be a link or a file, and verify would then read
/// something else than what was checked here).
fn link_stays_inside(rel: &str, target: &Path) -> bool {
    let mut depth = Path::new(rel).components().count() as i64 - 1;
    let mut descended = false;
    for c in target.components() {
        match c {
            Component::Normal(_) => {
                depth += 1;
                descended = true;
            }
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 || descended {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// The regular file of the layer that the symlink `rel` leads to, through
/// other links of the layer; `None` when it leads elsewhere.
fn link_target_in_layer(rel: &str, written: &Written) -> Option<String> {
    let mut at = rel.to_owned();
    for _ in 0..40 {
        if written.md5.contains_key(&at) {
            return Some(at);
        }
        let target = written.links.get(&at)?;
        let mut parts: Vec<&str> = at.split('/').collect();
        parts.pop();
        for c in target.components() {
            match c {
                Component::Normal(n) => parts.push(n.to_str()?),
                Component::ParentDir => {
                    parts.pop()?;
                }
                Component::CurDir => {}
                _ => return None,
            }
        }
        at = parts.join("/");
    }
    None
}

/// The staged prefix against the signed config: MD5SUMS lists exactly the
/// files written, each with the MD5 it had as it was written; the records
/// are the config's.
pub(super) fn check_staged(c: &Candidate, staging: &Path, written: &Written) -> Result<Vec<Entry>> {
    let r = &c.reference;
    let md5sums = written
        .md5
        .contains_key(prefix::MD5SUMS)
        .then(|| prefix::read_md5sums(staging))
        .ok_or_else(|| tampered(r, "its layer has no MD5SUMS"))?
        .map_err(|e| tampered(r, &format!("its MD5SUMS: {e:#}")))?;
    let mut problems = Vec::new();
    for e in &md5sums {
        let got = match (written.md5.get(&e.path), written.links.get(&e.path)) {
            (Some(m), _) => Some(m.clone()),
            (None, Some(_)) => match link_target_in_layer(&e.path, written) {
                // md5sum follows the link: the MD5 of the file it leads to,
                // already taken as it was written.
                Some(file) => written.md5.get(&file).cloned(),
                None => checksum::md5_file(&staging.join(&e.path)).ok(),
            },
            (None, None) => None,
        };
        match got {
            Some(m) if m == e.md5 => {}
            Some(m) => problems.push(format!("{}: MD5 {m}, MD5SUMS says {}", e.path, e.md5)),
            None => problems.push(format!("{}: listed in MD5SUMS, not in the layer", e.path)),
        }
    }
    for f in written.md5.keys().chain(written.links.keys()) {
        if f != prefix::MD5SUMS && !md5sums.iter().any(|e| &e.path == f) {
            problems.push(format!("{f}: in the layer, not in MD5SUMS"));
        }
    }
    let prov = Provenance::read(staging).map_err(|e| tampered(r, &format!("{e:#}")))?;
    if prov != c.config.provenance {
        problems.push("its provenance is not the signed config's".to_owned());
    }
    match prefix::read_key(staging) {
        Ok(k) if k == c.config.inputs => {}
        _ => problems.push("its build key is not the signed config's".to_owned()),
    }
    problems.extend(prefix::incomplete(&prov, &md5sums));
    if !problems.is_empty() {
        return Err(tampered(r, &problems.join("; ")));
    }
    Ok(md5sums)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_stay_inside() {
        assert!(link_stays_inside(
            "lib/libMIOpen.so",
            Path::new("libMIOpen.so.1")
        ));
        assert!(link_stays_inside("lib/a/b", Path::new("../c")));
        assert!(!link_stays_inside("lib/a", Path::new("../../etc/passwd")));
        assert!(!link_stays_inside("a", Path::new("/etc/passwd")));
        assert!(!link_stays_inside("m", Path::new("x/../lib/libMIOpen.so")));
        assert!(link_stays_inside("lib/m", Path::new("../lib/libMIOpen.so")));
        assert!(layer_path(Path::new("lib/x")).is_some());
        for bad in ["../x", "/x", "a/../b", "a/.git/x", ""] {
            assert!(layer_path(Path::new(bad)).is_none(), "{bad}");
        }
        let written = Written {
            md5: [("lib/libMIOpen.so.1.0.0".to_owned(), "m".to_owned())].into(),
            links: [
                (
                    "lib/libMIOpen.so".to_owned(),
                    PathBuf::from("libMIOpen.so.1"),
                ),
                (
                    "lib/libMIOpen.so.1".to_owned(),
                    PathBuf::from("./libMIOpen.so.1.0.0"),
                ),
                ("lib/up".to_owned(), PathBuf::from("../lib/libMIOpen.so")),
                ("lib/loop".to_owned(), PathBuf::from("loop")),
            ]
            .into(),
        };
        for l in ["lib/libMIOpen.so", "lib/up"] {
            assert_eq!(
                link_target_in_layer(l, &written).as_deref(),
                Some("lib/libMIOpen.so.1.0.0")
            );
        }
        assert_eq!(link_target_in_layer("lib/loop", &written), None);
    }
}
