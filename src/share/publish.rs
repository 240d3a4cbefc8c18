//! A finished prefix as an OCI artifact, so one build serves everyone with
//! the same build key.
//!
//! - the layer: the files MD5SUMS lists, and MD5SUMS, as a tar compressed
//!   with zstd (`application/vnd.oci.image.layer.v1.tar+zstd`);
//! - the config: the build key, its inputs and the provenance, as JSON;
//! - annotations a person can read in any registry UI;
//! - a minisign signature of the manifest's bytes, stored the way cosign
//!   stores its signatures: an artifact tagged `sha256-<manifest hex>.sig`.
//!
//! Pulling trusts nothing it has not checked: the manifest's signature
//! against the user's trusted keys; every blob against its digest and
//! size before any of it is used (the layer is downloaded whole and proven
//! before it is decompressed); what it unpacks to against the size the
//! signed config declares; every file against MD5SUMS while it is written;
//! and the prefix's records against the signed config. Only then does
//! anything move into the prefix, the way the install stage does it.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::builder::key::KeyInputs;
use crate::builder::prefix::{self, Provenance};
use crate::checksum::{self, Entry};
use crate::error::hint;
use crate::oci::{self, Reference, Store};
use crate::ui::Ui;

pub const CONFIG_TYPE: &str = "application/vnd.rdna1-patch.build.v1+json";
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const SIGNATURE_TYPE: &str = "application/vnd.rdna1-patch.minisign.v1";
const EMPTY_TYPE: &str = "application/vnd.oci.empty.v1+json";
const ANNOTATION: &str = "dev.rdna1-patch";

/// The config blob: the build key, what it was made from, and the prefix's
/// provenance.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub key: String,
    pub inputs: KeyInputs,
    pub provenance: Provenance,
    /// The bytes of the layer's regular files: a pull writes no more.
    /// Absent from artifacts published before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpacked_size: Option<u64>,
}

/// Signs with the maintainer's own minisign, as `minisign -S` would: the
/// key file stays the one `minisign -G` wrote (its password asked for by
/// minisign itself on the terminal), and the signature is what `minisign
/// -V` checks. Signatures are verified here with the minisign crate, so
/// users need no minisign.
pub struct Signer {
    key: PathBuf,
    minisign: PathBuf,
    /// What the user should know about the key file (who else can read it).
    pub warning: Option<String>,
}

impl Signer {
    pub fn load(path: &Path) -> Result<Signer> {
        let minisign = crate::builder::tools::find("minisign").ok_or_else(|| {
            hint(
                "publish signs with minisign, which is not installed",
                "apt-get install minisign (or see https://jedisct1.github.io/minisign/); nothing was pushed",
            )
        })?;
        let text = crate::fsutil::read_small(path, 64 << 10).map_err(|e| {
            hint(
                format!("cannot read the signing key {}: {e:#}", path.display()),
                "make one with `minisign -G` (it writes ~/.minisign/minisign.key), or name yours with --sign-key FILE",
            )
        })?;
        // A secret key file: a comment line, then the key, base64 of
        // "Ed" and a KDF name; a public key's line is shorter.
        let key_line = text.lines().nth(1).unwrap_or_default();
        if !text.starts_with("untrusted comment:")
            || !key_line.starts_with("RW")
            || key_line.len() < 100
        {
            return Err(hint(
                format!("{} is not a minisign secret key", path.display()),
                "give the secret key file `minisign -G` wrote (not the .pub file)",
            ));
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        let warning = (mode & 0o077 != 0).then(|| {
            format!(
                "the signing key {} can be read by others (mode {:o}); `chmod 600 {}` keeps it yours",
                path.display(),
                mode & 0o777,
                path.display()
            )
        });
        Ok(Signer {
            key: path.to_owned(),
            minisign,
            warning,
        })
    }

    /// A detached signature of `data` whose trusted comment is `trusted`.
    fn sign(&self, data: &[u8], trusted: &str) -> Result<String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sign-{}-", std::process::id()))
            .tempdir_in(scratch()?)?;
        let (file, sig) = (
            dir.path().join("manifest.json"),
            dir.path().join("manifest.minisig"),
        );
        std::fs::write(&file, data)?;
        let mut cmd = std::process::Command::new(&self.minisign);
        cmd.arg("-S")
            .arg("-s")
            .arg(&self.key)
            .arg("-m")
            .arg(&file)
            .arg("-x")
            .arg(&sig)
            .args(["-t", trusted]);
        let ok = crate::proc::interactive(cmd)?;
        if !ok {
            return Err(hint(
                format!("minisign could not sign with {}", self.key.display()),
                "check the key and its password (minisign says what went wrong above); nothing was signed",
            ));
        }
        Ok(std::fs::read_to_string(&sig)?)
    }
}

/// minisign prints key ids as 16 hex digits of the little-endian number.
fn key_id(keynum: &[u8]) -> String {
    keynum.iter().rev().map(|b| format!("{b:02X}")).collect()
}

fn signature_key_id(signature: &str) -> Result<String> {
    let b = minisign::SignatureBox::from_string(signature)
        .map_err(|e| anyhow::anyhow!("minisign wrote a signature that does not parse: {e}"))?;
    Ok(key_id(b.keynum()))
}

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
    let (prov, inputs, mut entries) = read_prefix(prefix_dir)?;
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
    let config = serde_json::to_vec_pretty(&Config {
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

/// One hash for the whole series: SHA-256 of its `<sha256>  <name>` lines.
fn series_sha256(patches: &[String]) -> String {
    let mut h = Sha256::new();
    for p in patches {
        h.update(p.as_bytes());
        h.update(b"\n");
    }
    checksum::hex(&h.finalize())
}

pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replace(':', "-"))
}

/// A prefix fit to publish: its records, and every file checked.
fn read_prefix(dir: &Path) -> Result<(Provenance, KeyInputs, Vec<Entry>)> {
    let not_built = |e: anyhow::Error| {
        hint(
            format!("{} holds no finished build: {e:#}", dir.display()),
            "build it first (`rdna1-patch build`), or name the prefix with --prefix",
        )
    };
    let prov = Provenance::read(dir).map_err(not_built)?;
    let entries = prefix::read_md5sums(dir).map_err(not_built)?;
    let inputs = prefix::read_key(dir).map_err(|e| {
        hint(
            format!("{} has no build key: {e:#}", dir.display()),
            "it was built by an rdna1-patch before 0.2; build it again (only the install stage runs) and publish that",
        )
    })?;
    let mut problems = prefix::incomplete(&prov, &entries);
    problems.extend(
        checksum::verify(dir, &entries, checksum::default_jobs())
            .iter()
            .map(ToString::to_string),
    );
    if !problems.is_empty() {
        return Err(hint(
            format!(
                "{} does not match its MD5SUMS, so it cannot be published:\n  {}",
                dir.display(),
                problems.join("\n  ")
            ),
            "build it again (`rdna1-patch build`), then publish; nothing was pushed",
        ));
    }
    Ok((prov, inputs, entries))
}

struct Layer {
    file: tempfile::NamedTempFile,
    digest: String,
    size: u64,
    /// The regular files' bytes, MD5SUMS included.
    unpacked: u64,
}

/// Where publish packs its layer: the user's cache, not $TMPDIR (a layer
/// is as large as the prefix). A publish killed on the way leaves its
/// layer here, named by its pid; the next publish removes those whose
/// process is gone.
fn scratch() -> Result<PathBuf> {
    let dir = crate::fsutil::project_dirs()
        .map(|d| d.cache_dir().join("publish"))
        .context("no cache dir for this user (HOME is not set)")?;
    crate::fsutil::create_dir_all(&dir)?;
    for e in std::fs::read_dir(&dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("layer-")
            .or_else(|| name.strip_prefix("sign-"))
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok());
        // SAFETY: kill with signal 0 only asks whether the process exists.
        let gone = pid.is_some_and(|p| unsafe { libc::kill(p, 0) } != 0);
        if gone && name.starts_with("sign-") {
            let _ = std::fs::remove_dir_all(e.path());
        } else if gone {
            let _ = crate::fsutil::remove_own_file(&e.path());
        }
    }
    Ok(dir)
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
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
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

/// An artifact whose signature and config were checked, not yet pulled.
pub struct Candidate {
    pub reference: Reference,
    pub digest: String,
    pub config: Config,
    pub key_id: String,
    layer: (String, u64),
    unpacked_size: u64,
}

/// Why an artifact was not taken: said, and then the build goes on.
#[derive(Debug)]
pub struct Declined(pub String);

/// Read a manifest and its signature, and the config it vouches for.
/// `Ok(Err(..))`: no artifact there, or one not signed by a trusted key.
/// `Err`: something is wrong that a person must look at (a signature by a
/// trusted key that does not verify, a blob that is not what the signed
/// manifest says, a registry that is down).
pub fn examine(
    store: &Store,
    reference: &Reference,
    trusted: &[minisign::PublicKey],
) -> Result<std::result::Result<Candidate, Declined>> {
    let name = reference
        .digest
        .clone()
        .or_else(|| reference.tag.clone())
        .context("the reference names no tag or digest")?;
    let Some((manifest, digest)) = store.manifest(&name)? else {
        return Ok(Err(Declined(format!("{reference} does not exist"))));
    };
    let Some((sig_manifest, _)) = store.manifest(&signature_tag(&digest))? else {
        return Ok(Err(Declined(format!("{reference} is not signed"))));
    };
    let signature = read_signature(store, &sig_manifest)?;
    let sig_box = minisign::SignatureBox::from_string(&signature)
        .map_err(|e| tampered(reference, &format!("its signature is not minisign's: {e}")))?;
    let id = key_id(sig_box.keynum());
    let Some(pk) = trusted.iter().find(|k| key_id(&k.to_bytes()[2..10]) == id) else {
        return Ok(Err(Declined(format!(
            "{reference} is signed by key {id}, which is not in your trusted-keys"
        ))));
    };
    minisign::verify(
        pk,
        &sig_box,
        std::io::Cursor::new(&manifest),
        true,
        false,
        false,
    )
    .map_err(|e| {
        tampered(
            reference,
            &format!("its signature by trusted key {id} does not verify: {e}"),
        )
    })?;
    let m: serde_json::Value = serde_json::from_slice(&manifest)
        .map_err(|e| tampered(reference, &format!("its manifest is not JSON: {e}")))?;
    let config_desc = descriptor(&m["config"], CONFIG_TYPE)
        .ok_or_else(|| tampered(reference, "its manifest has no rdna1-patch config"))?;
    let layer = match m["layers"].as_array().map(Vec::as_slice) {
        Some([l]) => descriptor(l, LAYER_TYPE),
        _ => None,
    }
    .ok_or_else(|| {
        tampered(
            reference,
            "its manifest does not have exactly one zstd tar layer",
        )
    })?;
    let config_bytes = store.small_blob(&config_desc.0, config_desc.1)?;
    let config: Config = serde_json::from_slice(&config_bytes).map_err(|e| {
        tampered(
            reference,
            &format!("its config is not an rdna1-patch build config: {e}"),
        )
    })?;
    if config.inputs.key() != config.key {
        return Err(tampered(
            reference,
            "its config's key is not the hash of its inputs",
        ));
    }
    let Some(unpacked_size) = config.unpacked_size else {
        return Ok(Err(Declined(format!(
            "{reference} was published by an older rdna1-patch, whose config does not declare how much it unpacks to (ask its publisher to publish it again)"
        ))));
    };
    Ok(Ok(Candidate {
        reference: reference.clone(),
        digest,
        config,
        key_id: id,
        layer,
        unpacked_size,
    }))
}

fn descriptor(v: &serde_json::Value, media_type: &str) -> Option<(String, u64)> {
    let digest = v["digest"].as_str()?;
    let ok = v["mediaType"] == media_type
        && digest
            .strip_prefix("sha256:")
            .is_some_and(oci::is_sha256_hex);
    ok.then(|| Some((digest.to_owned(), v["size"].as_u64()?)))
        .flatten()
}

fn read_signature(store: &Store, sig_manifest: &[u8]) -> Result<String> {
    let m: serde_json::Value =
        serde_json::from_slice(sig_manifest).context("the signature's manifest is not JSON")?;
    let (digest, size) = match m["layers"].as_array().map(Vec::as_slice) {
        Some([l]) => descriptor(l, SIGNATURE_TYPE),
        _ => None,
    }
    .context("the signature's manifest holds no minisign signature")?;
    let bytes = store.small_blob(&digest, size)?;
    String::from_utf8(bytes).context("the signature is not text")
}

fn tampered(reference: &Reference, what: &str) -> anyhow::Error {
    hint(
        format!("{reference} cannot be trusted: {what}"),
        "it may have been tampered with or damaged on the way; ask its publisher, or build without it (leave out --from); nothing was installed",
    )
}

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
struct Written {
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
    let layer =
        std::fs::File::open(&file).with_context(|| format!("cannot read {}", file.display()))?;
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
    std::fs::remove_file(&file).with_context(|| format!("cannot remove {}", file.display()))?;
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
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .with_context(|| format!("cannot write {}", to.display()))?;
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
fn unpack_tar(
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
                std::os::unix::fs::symlink(&target, &to)
                    .with_context(|| format!("cannot write {}", to.display()))?;
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
    use std::os::unix::fs::OpenOptionsExt;
    let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode | 0o600)
        .open(to)
        .with_context(|| format!("cannot write {}", to.display()))?;
    let mut md5 = checksum::Md5::new()?;
    loop {
        let n = entry.read(buf).map_err(|e| tampered_or_io(reference, e))?;
        if n == 0 {
            break;
        }
        md5.update(&buf[..n])?;
        out.write_all(&buf[..n])
            .with_context(|| format!("cannot write {}", to.display()))?;
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
fn check_staged(c: &Candidate, staging: &Path, written: &Written) -> Result<Vec<Entry>> {
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

/// The pull's readers of what a registry or layout dir sends, for the
/// fuzz target (fuzz/fuzz_targets/pull.rs): the first byte picks one.
#[cfg(fuzzing)]
pub fn fuzz_pull(data: &[u8]) {
    let Some((which, rest)) = data.split_first() else {
        return;
    };
    match which % 3 {
        // A manifest: its descriptors, as examine reads them.
        0 => {
            if let Ok(m) = serde_json::from_slice::<serde_json::Value>(rest) {
                let _ = descriptor(&m["config"], CONFIG_TYPE);
                if let Some([l]) = m["layers"].as_array().map(Vec::as_slice) {
                    let _ = descriptor(l, LAYER_TYPE);
                }
            }
        }
        // A config blob.
        1 => {
            if let Ok(c) = serde_json::from_slice::<Config>(rest) {
                let _ = c.inputs.key();
            }
        }
        // A layer, verified already: zstd, then tar into a staging dir,
        // bounded by a declared size, then checked against MD5SUMS.
        _ => {
            let Ok(dir) = tempfile::tempdir() else {
                return;
            };
            let reference = Reference::parse(&dir.path().display().to_string()).expect("a dir");
            let c = Candidate {
                reference,
                digest: String::new(),
                config: Config {
                    key: String::new(),
                    inputs: fuzz_inputs(),
                    provenance: fuzz_provenance(),
                    unpacked_size: Some(8 << 20),
                },
                key_id: String::new(),
                layer: (String::new(), rest.len() as u64),
                unpacked_size: 8 << 20,
            };
            let Ok(dec) = zstd::Decoder::new(rest) else {
                return;
            };
            let progress = crate::ui::Ui::silent().progress(0);
            if let Ok(written) = unpack_tar(dec, dir.path(), &c, &*progress) {
                let _ = check_staged(&c, dir.path(), &written);
            }
        }
    }
}

#[cfg(fuzzing)]
fn fuzz_inputs() -> KeyInputs {
    serde_json::from_str(
        r#"{"schema":1,"profile":"fuzz","component":"miopen","url":"file:///fuzz","pin":"fuzz",
            "commit":null,"patches":[],"defines":{},"gpu_targets":[],
            "toolchain":{"rocm_version":null,"compiler":null,"compat":[],"defines":{}}}"#,
    )
    .expect("key inputs")
}

#[cfg(fuzzing)]
fn fuzz_provenance() -> Provenance {
    toml::from_str(FUZZ_PROVENANCE).expect("a provenance")
}

#[cfg(fuzzing)]
const FUZZ_PROVENANCE: &str = r#"
tool = "rdna1-patch"
date = "2026-01-01T00:00:00Z"
profile = "fuzz"
component = "miopen"
patches = []
[rocm]
path = ""
version = "6.4.3"
torch_hip = "6.4"
[source]
url = "file:///fuzz"
tag = "fuzz"
commit = "0"
[cmake]
generator = "none"
defines = {}
[library]
soname = "libMIOpen.so.1"
path = "lib/libMIOpen.so.1"
"#;

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
        assert_eq!(key_id(&[0x01, 0x02]), "0201");
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
