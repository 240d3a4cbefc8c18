//! An OCI image layout directory: `oci-layout`, `index.json` naming each
//! tagged manifest, and `blobs/sha256/<hex>`. What `skopeo copy` and
//! `oras copy --from-oci-layout` read and write.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::fsutil;
use crate::fsutil::At;

const REF_NAME: &str = "org.opencontainers.image.ref.name";

pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_owned(),
        }
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| super::is_sha256_hex(h))
            .with_context(|| format!("`{digest}` is not a sha256 digest"))?;
        Ok(self.dir.join("blobs/sha256").join(hex))
    }

    /// Make the layout's skeleton, once. Its blob dirs are real dirs: a
    /// link would put the blobs somewhere else.
    fn init(&self) -> Result<()> {
        if let Some(link) = fsutil::first_symlink(&self.dir, Path::new("blobs/sha256")) {
            return Err(crate::error::hint(
                format!(
                    "{} is a symlink, so the layout's blobs would be written elsewhere",
                    link.display()
                ),
                "use a layout dir whose blobs/sha256 is a directory of its own; nothing was written",
            ));
        }
        fsutil::create_dir_all(&self.dir.join("blobs/sha256"))?;
        let marker = self.dir.join("oci-layout");
        if !marker.exists() {
            fsutil::write_atomic(&marker, br#"{"imageLayoutVersion":"1.0.0"}"#, Some(0o644))?;
        }
        Ok(())
    }

    /// Copy a blob in under its digest (through a temp file and a rename,
    /// so a blob file is always whole). The caller vouches for the digest.
    pub fn put_blob(&self, file: &Path, digest: &str) -> Result<bool> {
        self.init()?;
        let to = self.blob_path(digest)?;
        // A blob already there is taken only when it is what its name
        // says; anything else (planted, or cut short) is written again.
        if holds(&to, digest) {
            return Ok(false);
        }
        let dir = to.parent().expect("a blob has a dir");
        let tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::fs::File::open(file)
            .and_then(|mut f| std::io::copy(&mut f, &mut tmp.as_file()))
            .at("write", tmp.path())?;
        tmp.as_file().sync_all()?;
        tmp.persist(&to).map_err(|e| e.error).at("write", &to)?;
        Ok(true)
    }

    pub fn put_manifest(&self, tag: &str, bytes: &[u8]) -> Result<String> {
        self.init()?;
        let digest = super::sha256_digest(bytes);
        let blob = self.blob_path(&digest)?;
        if !holds(&blob, &digest) {
            fsutil::write_atomic(&blob, bytes, Some(0o644))?;
        }
        // One writer at a time rewrites index.json.
        let Some(_lock) = fsutil::try_lock_dir(&self.dir)? else {
            anyhow::bail!(
                "another rdna1-patch run is writing {} right now; run again when it is done",
                self.dir.display()
            );
        };
        let mut index = self.index()?;
        let manifests = index["manifests"]
            .as_array_mut()
            .context("index.json has no manifests list")?;
        manifests.retain(|m| m["annotations"][REF_NAME] != tag);
        manifests.push(json!({
            "mediaType": super::MANIFEST,
            "digest": digest,
            "size": bytes.len(),
            "annotations": { REF_NAME: tag },
        }));
        fsutil::write_atomic(
            &self.dir.join("index.json"),
            serde_json::to_string_pretty(&index)?.as_bytes(),
            Some(0o644),
        )?;
        Ok(digest)
    }

    fn index(&self) -> Result<Value> {
        let path = self.dir.join("index.json");
        if !path.exists() {
            return Ok(json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [],
            }));
        }
        let text = fsutil::read_small(&path, super::SMALL_LIMIT)?;
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
    }

    pub fn manifest(&self, reference: &str) -> Result<Option<Vec<u8>>> {
        if !self.dir.join("oci-layout").is_file() {
            anyhow::bail!(
                "{} is not an OCI image layout (it has no oci-layout file)",
                self.dir.display()
            );
        }
        let digest = if reference.starts_with("sha256:") {
            reference.to_owned()
        } else {
            let index = self.index()?;
            let found = index["manifests"].as_array().and_then(|ms| {
                ms.iter()
                    .find(|m| m["annotations"][REF_NAME] == reference)
                    .and_then(|m| m["digest"].as_str())
            });
            match found {
                Some(d) => d.to_owned(),
                None => return Ok(None),
            }
        };
        let path = self.blob_path(&digest)?;
        if !path.exists() {
            return Ok(None);
        }
        let mut data = Vec::new();
        fsutil::open_regular(&path)?
            .take(super::SMALL_LIMIT)
            .read_to_end(&mut data)?;
        Ok(Some(data))
    }

    pub fn blob(&self, digest: &str) -> Result<Box<dyn Read + Send>> {
        let path = self.blob_path(digest)?;
        let file = fsutil::open_regular(&path)
            .with_context(|| format!("{} has no blob {digest}", self.dir.display()))?;
        Ok(Box::new(file))
    }

    pub fn tags(&self) -> Result<Vec<String>> {
        if !self.dir.join("oci-layout").is_file() {
            return Ok(Vec::new());
        }
        let index = self.index()?;
        Ok(index["manifests"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .filter_map(|m| m["annotations"][REF_NAME].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// Whether `path` is a regular file whose SHA-256 is `digest`.
fn holds(path: &Path, digest: &str) -> bool {
    use sha2::{Digest as _, Sha256};
    let Ok(mut file) = fsutil::open_regular(path) else {
        return false;
    };
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => sha.update(&buf[..n]),
            Err(_) => return false,
        }
    }
    format!("sha256:{}", crate::checksum::hex(&sha.finalize())) == digest
}
