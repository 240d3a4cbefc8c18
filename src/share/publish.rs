//! `publish`: pack a checked prefix as a reproducible zstd tar, sign its
//! manifest, and push it, the tag last.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use sha2::{Digest as _, Sha256};

use super::oci::{self, Reference, Store};
use super::sign::{Signer, signature_key_id, signature_tag};
use super::{ANNOTATION, CONFIG_TYPE, ConfigBlob, EMPTY_TYPE, LAYER_TYPE, SIGNATURE_TYPE, scratch};
use crate::checksum::{self, Entry};
use crate::error::hint;
use crate::fsutil::At;
use crate::prefix::key::KeyInputs;
use crate::prefix::{self, Prefix, Provenance};
use crate::ui::Ui;

/// What `publish` did.
pub struct Published {
    pub key_id: String,
    pub reference: Reference,
    pub digest: String,
    pub key: String,
    pub layer_size: u64,
    pub files: usize,
    pub uploaded: bool,
}

/// Push the prefix as an artifact; without a tag, under the build key's.
pub fn publish(
    prefix_dir: &Path,
    reference: &Reference,
    signer: &Signer,
    net: oci::Net,
    ui: &Ui,
) -> Result<Published> {
    let (
        Prefix {
            provenance: prov,
            mut entries,
            ..
        },
        inputs,
    ) = read_prefix(prefix_dir)?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let (prov, replaced) = as_published(prov, &home, &mut entries)?;
    let key = inputs.key();
    let reference = match &reference.tag {
        Some(_) => reference.clone(),
        None => reference.with_tag(&inputs.tag()),
    };
    let tag = reference.tag.clone().expect("a tag was set");
    ui.stage(
        "Packing",
        format!("{} files of {}", entries.len(), prefix_dir.display()),
    );
    let layer = pack(prefix_dir, &entries, &replaced)?;
    let config = serde_json::to_vec_pretty(&ConfigBlob {
        key: key.clone(),
        inputs: inputs.clone(),
        provenance: prov.clone(),
        unpacked_size: Some(layer.unpacked),
    })?;
    let config_digest = oci::sha256_digest(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": oci::MANIFEST,
        "artifactType": CONFIG_TYPE,
        "config": { "mediaType": CONFIG_TYPE, "digest": config_digest, "size": config.len() },
        "layers": [ { "mediaType": LAYER_TYPE, "digest": layer.digest, "size": layer.size } ],
        "annotations": annotations(&key, &inputs, &prov),
    }))?;
    let digest = oci::sha256_digest(&manifest);
    // Signed before anything is pushed, and the tag pushed last: a publish
    // that fails or is killed on the way never leaves a tagged manifest
    // without its signature.
    let trusted = format!("rdna1-patch build {key} manifest {digest}");
    let signature = signer.sign(&manifest, &trusted)?;
    let store = Store::open(&reference, net)?;
    ui.stage(
        "Pushing",
        format!("{} ({})", reference, crate::fsutil::human_bytes(layer.size)),
    );
    let uploaded = store.put_blob(layer.file.path(), &layer.digest, layer.size, ui)?;
    store.put_small_blob(&config)?;
    let sig_digest = store.put_small_blob(signature.as_bytes())?;
    let empty = store.put_small_blob(b"{}")?;
    let sig_manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": oci::MANIFEST,
        "artifactType": SIGNATURE_TYPE,
        "config": { "mediaType": EMPTY_TYPE, "digest": empty, "size": 2 },
        "layers": [ { "mediaType": SIGNATURE_TYPE, "digest": sig_digest, "size": signature.len() } ],
        "subject": { "mediaType": oci::MANIFEST, "digest": digest, "size": manifest.len() },
        "annotations": { format!("{ANNOTATION}.key-id"): signature_key_id(&signature)? },
    }))?;
    store.put_manifest(&signature_tag(&digest), &sig_manifest)?;
    let pushed = store.put_manifest(&tag, &manifest)?;
    if pushed != digest {
        anyhow::bail!("the store names the manifest {pushed}, not its digest {digest}");
    }
    Ok(Published {
        key_id: signature_key_id(&signature)?,
        reference,
        digest,
        key,
        layer_size: layer.size,
        files: entries.len(),
        uploaded,
    })
}

/// Sorted, so the same prefix gives the same manifest bytes.
fn annotations(key: &str, inputs: &KeyInputs, prov: &Provenance) -> BTreeMap<String, String> {
    let a = |k: &str| format!("{ANNOTATION}.{k}");
    let mut m = BTreeMap::new();
    m.insert(
        "org.opencontainers.image.title".into(),
        format!("{} {}", prov.component, prov.profile),
    );
    m.insert("org.opencontainers.image.created".into(), prov.date.clone());
    m.insert(
        "org.opencontainers.image.source".into(),
        prov.source.url.clone(),
    );
    m.insert(
        "org.opencontainers.image.revision".into(),
        prov.source.commit.clone(),
    );
    m.insert(a("key"), key.to_owned());
    m.insert(a("profile"), prov.profile.clone());
    m.insert(a("pin"), prov.source.tag.clone());
    m.insert(a("gpu-targets"), inputs.gpu_targets.join(";"));
    m.insert(a("series-sha256"), series_sha256(&inputs.patches));
    m.insert(
        a("rocm"),
        inputs
            .toolchain
            .rocm_version
            .clone()
            .unwrap_or_else(|| "unknown".into()),
    );
    m.insert(
        a("compiler"),
        inputs
            .toolchain
            .compiler
            .clone()
            .unwrap_or_else(|| "unknown".into()),
    );
    m.insert(a("tool"), prov.tool.clone());
    m
}

/// A prefix fit to publish: its records, and every file checked.
fn read_prefix(dir: &Path) -> Result<(Prefix, KeyInputs)> {
    let prefix = Prefix::open(dir).map_err(|e| {
        hint(
            format!("{} holds no finished build: {e}", dir.display()),
            "build it first (`rdna1-patch build`), or name the prefix with --prefix",
        )
    })?;
    // An in-place fix is this machine's torch library with its texts
    // changed: others can use it only if their library is byte-identical,
    // and they get that same fix by running `install --into-torch` on it.
    if let Some(fix) = &prefix.provenance.in_place {
        return Err(hint(
            format!(
                "{} is an in-place fix of this machine's torch library ({}), not a build others can reuse",
                dir.display(),
                fix.source
            ),
            "to share a fix, build one (`rdna1-patch build --prefix DIR`) and publish that prefix; others with this torch get the same in-place fix from `rdna1-patch install --into-torch`",
        ));
    }
    let inputs = prefix::read_key(dir).map_err(|e| {
        hint(
            format!("{} has no build key: {e:#}", dir.display()),
            "it was built by an rdna1-patch before 0.2; build it again (only the install stage runs) and publish that",
        )
    })?;
    if let Err(problems) = prefix.check(checksum::default_jobs()) {
        return Err(hint(
            format!(
                "{} does not match its MD5SUMS, so it cannot be published:\n  {}",
                dir.display(),
                problems.join("\n  ")
            ),
            "build it again (`rdna1-patch build`), then publish; nothing was pushed",
        ));
    }
    Ok((prefix, inputs))
}

struct Layer {
    file: tempfile::NamedTempFile,
    digest: String,
    size: u64,
    /// The regular files' bytes, MD5SUMS included.
    unpacked: u64,
}

/// A writer that hashes and counts what passes through.
struct Hashing<W> {
    inner: W,
    sha: Sha256,
    size: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A file the layer carries in place of the prefix's: its path and bytes.
type Replaced = (&'static str, Vec<u8>);

/// The provenance as published (`Provenance::published`), and when it is
/// not the prefix's own, the files the layer carries in place of the
/// prefix's: that provenance, and MD5SUMS with its checksum.
fn as_published(
    prov: Provenance,
    home: &Path,
    entries: &mut [Entry],
) -> Result<(Provenance, Vec<Replaced>)> {
    let shown = prov.published(home);
    if shown == prov {
        return Ok((prov, Vec::new()));
    }
    let text = shown.text()?.into_bytes();
    let md5 = checksum::md5_bytes(&text)?;
    for e in entries.iter_mut().filter(|e| e.path == prefix::PROVENANCE) {
        e.md5.clone_from(&md5);
    }
    let sums = checksum::format_md5sums(entries).into_bytes();
    Ok((
        shown,
        vec![(prefix::PROVENANCE, text), (prefix::MD5SUMS, sums)],
    ))
}

/// The tar of MD5SUMS' files and MD5SUMS itself, in the listed order,
/// with owner root and time zero so the same prefix packs to the same
/// bytes; a symlink stays a symlink. A file in `replaced` is packed with
/// those bytes instead of the prefix's.
fn pack(dir: &Path, entries: &[Entry], replaced: &[(&str, Vec<u8>)]) -> Result<Layer> {
    let file = tempfile::Builder::new()
        .prefix(&format!("layer-{}-", std::process::id()))
        .suffix(".tar.zst")
        .tempfile_in(scratch()?)?;
    let out = Hashing {
        inner: std::io::BufWriter::with_capacity(1 << 20, file.reopen()?),
        sha: Sha256::new(),
        size: 0,
    };
    let mut enc = zstd::Encoder::new(out, 3)?;
    enc.multithread(checksum::default_jobs() as u32)?;
    let mut tar = tar::Builder::new(enc);
    tar.follow_symlinks(false);
    let paths = entries
        .iter()
        .map(|e| e.path.as_str())
        .chain([prefix::MD5SUMS]);
    let mut unpacked = 0;
    for rel in paths {
        let path = dir.join(rel);
        let meta = std::fs::symlink_metadata(&path).at("read", &path)?;
        let mut h = tar::Header::new_gnu();
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        if let Some((_, bytes)) = replaced.iter().find(|(r, _)| *r == rel) {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(0o644);
            h.set_size(bytes.len() as u64);
            unpacked += bytes.len() as u64;
            tar.append_data(&mut h, rel, bytes.as_slice())?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(0o777);
            h.set_size(0);
            tar.append_link(&mut h, rel, &target)?;
        } else {
            use std::os::unix::fs::PermissionsExt;
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(meta.permissions().mode() & 0o755);
            h.set_size(meta.len());
            unpacked += meta.len();
            let f = crate::fsutil::open_regular(&path)?;
            tar.append_data(&mut h, rel, f)?;
        }
    }
    let enc = tar.into_inner()?;
    let mut out = enc.finish()?;
    out.flush()?;
    Ok(Layer {
        digest: format!("sha256:{}", checksum::hex(&out.sha.finalize())),
        size: out.size,
        unpacked,
        file,
    })
}

/// One hash for the whole series: SHA-256 of its `<sha256>  <name>` lines.
fn series_sha256(patches: &[String]) -> String {
    let mut h = Sha256::new();
    for p in patches {
        h.update(p.as_bytes());
        h.update(b"\n");
    }
    checksum::hex(&h.finalize())
}
