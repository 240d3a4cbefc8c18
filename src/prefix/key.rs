//! The build key: what determines the bytes of a build, hashed. Two builds
//! with the same key are the same build, so one published artifact can
//! serve everyone whose profile, source, patches, defines, GPU targets and
//! toolchain say the same.
//!
//! The inputs are kept in two parts. The source part is what the user's
//! profile and flags ask for; the toolchain part is what the ROCm install
//! and its compiler add (their versions, compat fixes, the defines they
//! change). A machine with no ROCm toolchain (a pytorch.org wheel user)
//! cannot know the toolchain part, and takes the publisher's when its ROCm
//! release is the one the profile targets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped when the meaning of an input changes.
pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyInputs {
    pub schema: u32,
    pub profile: String,
    pub component: String,
    pub url: String,
    /// The tag, or `commit <id>`.
    pub pin: String,
    /// Unknown before the first fetch of a profile that pins a tag alone.
    pub commit: Option<String>,
    /// `<sha256>  <name>` of each patch of the profile's series and of
    /// `--extra-patches`, in order (where the series lives is no input).
    pub patches: Vec<String>,
    /// The profile's defines and `-D`, with the ROCm path written `{rocm}`;
    /// GPU_TARGETS is its own input.
    pub defines: BTreeMap<String, String>,
    pub gpu_targets: Vec<String>,
    /// The sources the build reads besides its own, by name: `url pin
    /// commit` (rocBLAS's Tensile).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub with: BTreeMap<String, String>,
    pub toolchain: Toolchain,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toolchain {
    /// Read from the ROCm install.
    pub rocm_version: Option<String>,
    /// The first line of the C++ compiler's `--version`.
    pub compiler: Option<String>,
    /// The compat patches applied (`<sha256>  <name>`).
    pub compat: Vec<String>,
    /// Defines the toolchain added or changed (compat, HIP's clang).
    pub defines: BTreeMap<String, String>,
}

impl Toolchain {
    /// "ROCm 6.2.4, clang version 17.0.0": what built it, for a person.
    pub fn describe(&self) -> String {
        format!(
            "ROCm {}, {}",
            self.rocm_version.as_deref().unwrap_or("(unknown)"),
            self.compiler.as_deref().unwrap_or("(unknown compiler)")
        )
    }
}

impl KeyInputs {
    /// The key: SHA-256 of the inputs as JSON (struct fields in a fixed
    /// order, maps sorted), in hex.
    pub fn key(&self) -> String {
        let json = serde_json::to_vec(self).expect("the inputs serialize");
        crate::checksum::hex(&Sha256::digest(json))
    }

    /// The tag an artifact of this build is published under.
    pub fn tag(&self) -> String {
        format!("{}-{}", self.profile, &self.key()[..16])
    }

    /// Whether an artifact built from `theirs` is this build: `Ok`, or the
    /// first difference, said for a person. GPU targets match when the
    /// artifact has code for every target wanted here. `toolchain` is
    /// false on a machine with no ROCm toolchain: then the artifact's is
    /// taken when its ROCm release is `rocm_release` (major.minor).
    pub fn accepts(
        &self,
        theirs: &KeyInputs,
        toolchain: bool,
        rocm_release: &str,
    ) -> Result<(), String> {
        let differ = |what: &str, ours: &dyn std::fmt::Debug, them: &dyn std::fmt::Debug| {
            Err(format!(
                "{what} differs: {ours:?} here, {them:?} in the artifact"
            ))
        };
        if theirs.schema != self.schema {
            return Err(format!(
                "the artifact's key has schema {}, this rdna1-patch writes {}",
                theirs.schema, self.schema
            ));
        }
        for (what, a, b) in [
            ("the profile", &self.profile, &theirs.profile),
            ("the component", &self.component, &theirs.component),
            ("the source URL", &self.url, &theirs.url),
            ("the pin", &self.pin, &theirs.pin),
        ] {
            if a != b {
                return differ(what, a, b);
            }
        }
        if let Some(c) = &self.commit
            && theirs.commit.as_ref() != Some(c)
        {
            return differ("the commit", c, &theirs.commit);
        }
        if self.with != theirs.with {
            return differ("the sources read besides", &self.with, &theirs.with);
        }
        if self.patches != theirs.patches {
            return Err(first_list_difference(
                "patch",
                &self.patches,
                &theirs.patches,
            ));
        }
        if self.defines != theirs.defines {
            return Err(first_map_difference(&self.defines, &theirs.defines));
        }
        let missing: Vec<&String> = self
            .gpu_targets
            .iter()
            .filter(|t| !theirs.gpu_targets.contains(t))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the artifact has no code for {} (it was built for {})",
                join(&missing),
                theirs.gpu_targets.join(", ")
            ));
        }
        if toolchain {
            self.accepts_toolchain(theirs)
        } else {
            let release = theirs
                .toolchain
                .rocm_version
                .as_deref()
                .map(crate::version::major_minor);
            if release.as_deref() == Some(rocm_release) {
                Ok(())
            } else {
                Err(format!(
                    "the artifact was built with ROCm {}, the profile targets {rocm_release}",
                    theirs
                        .toolchain
                        .rocm_version
                        .as_deref()
                        .unwrap_or("(unknown)")
                ))
            }
        }
    }

    fn accepts_toolchain(&self, theirs: &KeyInputs) -> Result<(), String> {
        let (a, b) = (&self.toolchain, &theirs.toolchain);
        if a.rocm_version != b.rocm_version {
            return Err(format!(
                "the ROCm version differs: {} here, {} in the artifact",
                a.rocm_version.as_deref().unwrap_or("(unknown)"),
                b.rocm_version.as_deref().unwrap_or("(unknown)")
            ));
        }
        if a.compiler != b.compiler {
            return Err(format!(
                "the compiler differs: {} here, {} in the artifact",
                a.compiler.as_deref().unwrap_or("(unknown)"),
                b.compiler.as_deref().unwrap_or("(unknown)")
            ));
        }
        if a.compat != b.compat {
            return Err(first_list_difference("compat patch", &a.compat, &b.compat));
        }
        if a.defines != b.defines {
            return Err(first_map_difference(&a.defines, &b.defines));
        }
        Ok(())
    }
}

/// Names as a list a person reads: "a, b, c".
pub(crate) fn join(items: &[&String]) -> String {
    items
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `<sha256>  <name>` lists: the first name whose hash or place differs.
fn first_list_difference(what: &str, ours: &[String], theirs: &[String]) -> String {
    let name = |l: &str| l.split_once("  ").map_or(l, |(_, n)| n).to_owned();
    for i in 0..ours.len().max(theirs.len()) {
        match (ours.get(i), theirs.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) if name(a) == name(b) => {
                return format!("{what} {} differs from the artifact's", name(a));
            }
            (Some(a), Some(b)) => {
                return format!("{what} {} here is {} in the artifact", name(a), name(b));
            }
            (Some(a), None) => return format!("the artifact lacks {what} {}", name(a)),
            (None, Some(b)) => return format!("the artifact has {what} {} too", name(b)),
            (None, None) => {}
        }
    }
    format!("the {what} lists differ")
}

fn first_map_difference(
    ours: &BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
) -> String {
    for (k, v) in ours {
        match theirs.get(k) {
            Some(t) if t == v => {}
            Some(t) => return format!("define {k} differs: {v:?} here, {t:?} in the artifact"),
            None => return format!("define {k}={v} is not in the artifact's"),
        }
    }
    match theirs.keys().find(|k| !ours.contains_key(*k)) {
        Some(k) => format!("the artifact has define {k}={} too", theirs[k]),
        None => "the defines differ".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> KeyInputs {
        KeyInputs {
            schema: SCHEMA,
            profile: "rocm-6.2.4".into(),
            component: "miopen".into(),
            url: "https://github.com/ROCm/MIOpen.git".into(),
            pin: "rocm-6.2.4".into(),
            commit: Some("ba89256497cc8e98eff8fa957116d0ca7611aec5".into()),
            patches: vec!["aa  miopen/rocm-6.2.4/0001-a.patch".into()],
            defines: [("MIOPEN_BACKEND".to_owned(), "HIP".to_owned())].into(),
            gpu_targets: vec!["gfx1010".into(), "gfx1011".into(), "gfx1012".into()],
            with: BTreeMap::new(),
            toolchain: Toolchain {
                rocm_version: Some("6.2.4".into()),
                compiler: Some("AMD clang version 18.0.0git".into()),
                compat: vec![],
                defines: BTreeMap::new(),
            },
        }
    }

    #[test]
    fn targets_covered_and_toolchain_rules() {
        let theirs = inputs();
        let mut ours = inputs();
        ours.gpu_targets = vec!["gfx1010".into()];
        assert_eq!(ours.accepts(&theirs, true, "6.2"), Ok(()));
        ours.gpu_targets = vec!["gfx1030".into()];
        assert!(
            ours.accepts(&theirs, true, "6.2")
                .unwrap_err()
                .contains("gfx1030")
        );
        let mut ours = inputs();
        ours.toolchain.compiler = None;
        ours.toolchain.rocm_version = None;
        assert!(ours.accepts(&theirs, true, "6.2").is_err());
        assert_eq!(ours.accepts(&theirs, false, "6.2"), Ok(()));
        assert!(
            ours.accepts(&theirs, false, "6.4")
                .unwrap_err()
                .contains("6.4")
        );
        let mut ours = inputs();
        ours.patches[0] = "bb  miopen/rocm-6.2.4/0001-a.patch".into();
        assert_eq!(
            ours.accepts(&theirs, true, "6.2").unwrap_err(),
            "patch miopen/rocm-6.2.4/0001-a.patch differs from the artifact's"
        );
        assert_ne!(ours.key(), theirs.key());
        assert!(theirs.tag().starts_with("rocm-6.2.4-"));
    }
}
