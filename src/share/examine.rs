//! Whether an artifact may be pulled: its manifest signed by a trusted key,
//! its config the blob the manifest names.

use anyhow::{Context, Result};

use super::oci::{self, Reference, Store};
use super::sign::{key_id, public_key_id, signature_tag};
use super::{CONFIG_TYPE, ConfigBlob, LAYER_TYPE, SIGNATURE_TYPE};
use crate::error::hint;

/// An artifact whose signature and config were checked, not yet pulled.
pub struct Candidate {
    pub reference: Reference,
    pub digest: String,
    pub config: ConfigBlob,
    pub key_id: String,
    pub(super) layer: (String, u64),
    pub(super) unpacked_size: u64,
}

impl Candidate {
    /// What a pull downloads (the layer's signed size) and what it unpacks
    /// to, in bytes.
    pub fn sizes(&self) -> (u64, u64) {
        (self.layer.1, self.unpacked_size)
    }
}

/// What a look for an artifact found: one to pull, or why there is none to
/// take (said, and then the build goes on).
pub enum Found {
    Candidate(Box<Candidate>),
    Declined(Declined),
}

/// Why an artifact is not taken, and what would let it be.
pub struct Declined {
    pub why: String,
    pub fix: Fix,
}

/// What the user can do about a declined artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    /// Nothing by that name, or no build of the profile there.
    NameAnother,
    /// Signed by a key the user does not trust.
    Trust,
    /// No signature, or a config this version cannot check: only its
    /// publisher can mend it.
    AskPublisher,
    /// Another build than this one (profile, patches, targets, toolchain).
    Differs,
}

impl Declined {
    pub fn found(fix: Fix, why: String) -> Found {
        Found::Declined(Declined { why, fix })
    }

    /// The help line for a `--from` that names this artifact.
    pub fn help(&self) -> &'static str {
        match self.fix {
            Fix::NameAnother => {
                "name a tag that exists, or give the repository alone (oci://HOST/REPO) to find this build's own; without --from, rdna1-patch compiles it"
            }
            Fix::Trust => {
                "if you trust its publisher, trust their public key: `rdna1-patch trust KEY` (KEY: the second line of their minisign.pub), then run this again"
            }
            Fix::AskPublisher => {
                "ask its publisher to publish it again with this rdna1-patch (publish signs before it pushes); without --from, rdna1-patch compiles it"
            }
            Fix::Differs => {
                "pull a build of this same profile, patch series and GPU targets (`--dry-run` shows this build's key), or leave out --from to compile it"
            }
        }
    }
}

/// Read a manifest and its signature, and the config it vouches for.
/// `Found::Declined`: no artifact there, or one not signed by a trusted
/// key. `Err`: something is wrong that a person must look at (a signature
/// by a trusted key that does not verify, a blob that is not what the
/// signed manifest says, a registry that is down).
pub fn examine(
    store: &Store,
    reference: &Reference,
    trusted: &[minisign::PublicKey],
) -> Result<Found> {
    let name = reference
        .digest
        .clone()
        .or_else(|| reference.tag.clone())
        .context("the reference names no tag or digest")?;
    let Some((manifest, digest)) = store.manifest(&name)? else {
        return Ok(Declined::found(
            Fix::NameAnother,
            format!("{reference} does not exist"),
        ));
    };
    let Some((sig_manifest, _)) = store.manifest(&signature_tag(&digest))? else {
        return Ok(Declined::found(
            Fix::AskPublisher,
            format!("{reference} is not signed"),
        ));
    };
    let signature = read_signature(store, &sig_manifest)?;
    let sig_box = minisign::SignatureBox::from_string(&signature)
        .map_err(|e| tampered(reference, &format!("its signature is not minisign's: {e}")))?;
    let id = key_id(sig_box.keynum());
    let Some(pk) = trusted.iter().find(|k| public_key_id(k) == id) else {
        return Ok(Declined::found(
            Fix::Trust,
            format!("{reference} is signed by key {id}, which is not in your trusted-keys"),
        ));
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
    read_vouched(store, reference, &manifest, digest, id)
}

/// What a manifest that a trusted key's signature verified vouches for:
/// its config, checked against its own key, and its one layer.
fn read_vouched(
    store: &Store,
    reference: &Reference,
    manifest: &[u8],
    digest: String,
    id: String,
) -> Result<Found> {
    let m: serde_json::Value = serde_json::from_slice(manifest)
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
    let config: ConfigBlob = serde_json::from_slice(&config_bytes).map_err(|e| {
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
        return Ok(Declined::found(
            Fix::AskPublisher,
            format!(
                "{reference} was published by an older rdna1-patch, whose config does not declare how much it unpacks to"
            ),
        ));
    };
    Ok(Found::Candidate(Box::new(Candidate {
        reference: reference.clone(),
        digest,
        config,
        key_id: id,
        layer,
        unpacked_size,
    })))
}

pub(super) fn descriptor(v: &serde_json::Value, media_type: &str) -> Option<(String, u64)> {
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

pub(super) fn tampered(reference: &Reference, what: &str) -> anyhow::Error {
    hint(
        format!("{reference} cannot be trusted: {what}"),
        "it may have been tampered with or damaged on the way; ask its publisher, or build without it (leave out --from); nothing was installed",
    )
}
