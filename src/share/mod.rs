//! Shared builds: a finished prefix as an OCI artifact, so one build serves everyone with
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

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::prefix::Provenance;
use crate::prefix::key::KeyInputs;

pub(crate) mod choose;
pub(crate) mod config;
mod examine;
#[cfg(fuzzing)]
mod fuzz;
pub(crate) mod oci;
mod publish;
mod pull;
mod sign;
pub(crate) mod trust;

#[cfg(fuzzing)]
pub use fuzz::fuzz_pull;
pub use publish::publish;
pub use pull::install;
pub use sign::Signer;

pub const CONFIG_TYPE: &str = "application/vnd.rdna1-patch.build.v1+json";
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const SIGNATURE_TYPE: &str = "application/vnd.rdna1-patch.minisign.v1";
const EMPTY_TYPE: &str = "application/vnd.oci.empty.v1+json";
const ANNOTATION: &str = "dev.rdna1-patch";

/// The config blob: the build key, what it was made from, and the prefix's
/// provenance.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigBlob {
    pub key: String,
    pub inputs: KeyInputs,
    pub provenance: Provenance,
    /// The bytes of the layer's regular files: a pull writes no more.
    /// Absent from artifacts published before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpacked_size: Option<u64>,
}

/// Where publish packs its layer: the user's cache, not $TMPDIR (a layer
/// is as large as the prefix). A publish killed on the way leaves its
/// layer here, named by its pid; the next publish removes those whose
/// process is gone.
pub(crate) fn scratch() -> Result<PathBuf> {
    // As root, a cache dir only root can write (`cache::base_dir`): the
    // scratch files are made and written by name inside it.
    let dir = crate::cache::base_dir()
        .map(|d| d.join("publish"))
        .context("no cache dir for this user (HOME is not set, or, as root, no cache dir that only root can write)")?;
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
