//! The provenance record: what was built, from what, with what. Every
//! prefix carries one; `publish` writes it with the maintainer's paths
//! folded to `~/`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::PROVENANCE;
use crate::checksum;
use crate::fsutil;

/// What was built, from what, with what: written to the prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub tool: String,
    pub date: String,
    pub profile: String,
    pub component: String,
    pub rocm: ProvRocm,
    pub source: ProvSource,
    /// The sources the build read besides its own (rocBLAS's Tensile).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub with: BTreeMap<String, ProvSource>,
    pub patches: Vec<ProvPatch>,
    pub cmake: ProvCmake,
    pub library: ProvLibrary,
    /// Every file the build installed (CMake's install manifest), relative
    /// to the prefix: MD5SUMS must list each of them and nothing else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Files of the checkout that differed from the commit plus the series
    /// when it was built (`build --keep-local`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_edits: Vec<String>,
    /// A prefix made from the user's own library, fixed in place, not built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place: Option<ProvInPlace>,
}

/// Where a library fixed in place came from, and every text changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvInPlace {
    pub source: String,
    pub source_sha256: String,
    /// How the texts were found: "dynamic symbols" or a search.
    pub found_by: String,
    pub texts: Vec<ProvText>,
    /// How the fix was proven: the compiles that showed every batch-norm
    /// kernel compiling for gfx101x and gfx1030's code unchanged; or that
    /// it was not, on the user's word (`--unproven`). Absent in prefixes
    /// made before fixes were proven.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvText {
    pub name: String,
    /// The batch-norm decisions changed in it.
    pub decisions: usize,
    pub sha256_before: String,
    pub sha256_after: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvRocm {
    pub path: String,
    /// The version the profile targets.
    pub version: String,
    /// The version found in the ROCm install the build used.
    pub found: Option<String>,
    pub torch_hip: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvSource {
    pub url: String,
    /// The tag, or `commit <id>` for a profile that pins a commit alone.
    pub tag: String,
    pub commit: String,
    /// The monorepo project built, e.g. "projects/miopen".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
    /// A tarball's SHA-256 (`commit` is then the commit its unpacked tree
    /// was made into).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvPatch {
    pub name: String,
    /// The series it came from (the profile's, or an extra one).
    #[serde(default)]
    pub series: String,
    pub sha256: String,
    pub marker: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvCmake {
    pub generator: String,
    pub defines: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvLibrary {
    pub soname: String,
    /// Relative to the prefix; empty when the install had no file by that name.
    pub path: String,
}

impl Provenance {
    /// The file's text, as `commit` writes it.
    pub fn text(&self) -> Result<String> {
        Ok(format!(
            "# What rdna1-patch built and installed here.\n{}",
            toml::to_string(self)?
        ))
    }

    /// As published: every path inside the publisher's `home` written
    /// `~/...`, so a shared build does not carry its maintainer's user
    /// name and directories (`/home/alice/...`).
    pub fn published(&self, home: &Path) -> Provenance {
        let home = home.to_string_lossy();
        let home = home.trim_end_matches('/');
        if home.is_empty() {
            return self.clone();
        }
        let inside = format!("{home}/");
        let strip = |s: &mut String| {
            if *s == home {
                *s = "~".to_owned();
            } else if s.contains(&inside) {
                *s = s.replace(&inside, "~/");
            }
        };
        let mut p = self.clone();
        strip(&mut p.rocm.path);
        strip(&mut p.source.url);
        p.with.values_mut().for_each(|w| strip(&mut w.url));
        p.patches.iter_mut().for_each(|x| strip(&mut x.series));
        p.cmake.defines.values_mut().for_each(strip);
        if let Some(i) = &mut p.in_place {
            strip(&mut i.source);
        }
        p
    }

    /// Identity of the build, leaving out when it was installed.
    pub(super) fn key(&self) -> String {
        let mut p = self.clone();
        p.date.clear();
        p.library.path.clear();
        p.files.clear();
        let text = toml::to_string(&p).unwrap_or_default();
        checksum::hex(&Sha256::digest(text.as_bytes()))
    }

    pub fn read(prefix: &Path) -> Result<Provenance> {
        let path = prefix.join(PROVENANCE);
        // The common cases in words, not as "(os error 2)"; still NotFound
        // errors, which `status` tells from a damaged record.
        let absent = |p: &Path| {
            p.symlink_metadata()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        };
        let not_found =
            |msg: String| Err(std::io::Error::new(std::io::ErrorKind::NotFound, msg).into());
        if absent(prefix) {
            return not_found(format!("{} does not exist", prefix.display()));
        }
        if absent(&path) {
            return not_found(format!(
                "{} holds no build: it has no {PROVENANCE}",
                prefix.display()
            ));
        }
        let text = fsutil::read_small(&path, 16 << 20)?;
        toml::from_str(&text).with_context(|| format!("{} is damaged", path.display()))
    }
}
