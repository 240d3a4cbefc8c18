//! What a source is pinned to: a git tag and its commit (or a commit
//! alone), or a tarball and its SHA-256. A component's own source and each
//! source its build reads besides (`with`, e.g. rocBLAS's Tensile) are
//! pinned alike, checked alike and fetched by one stage.

use serde::{Deserialize, Serialize};

use super::is_inner_path;

/// One pinned source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// A git repository, or with `sha256` a `.tar.gz` (https://, http://
    /// or file://).
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The tarball's SHA-256: `url` is then a tarball, not a repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sparse: Vec<String>,
}

impl Source {
    /// What the source is pinned to, for messages: the tag, the commit, or
    /// the tarball's name and the start of its SHA-256.
    pub fn pin(&self) -> String {
        if let Some(sha) = &self.sha256 {
            return format!("{} sha256 {}", self.file_name(), &sha[..sha.len().min(12)]);
        }
        match (&self.tag, &self.commit) {
            (Some(tag), _) => tag.clone(),
            (None, Some(commit)) => format!("commit {}", crate::builder::git::short(commit)),
            (None, None) => "(no pin)".to_owned(),
        }
    }

    /// The last part of the URL: the tarball's file name.
    pub fn file_name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or(&self.url)
    }

    /// What is wrong with the pin, at `at` (`components.rocblas`), with
    /// the fix when there is more to say.
    pub fn problem(&self, at: &str) -> Option<(String, Option<&'static str>)> {
        let at = |key: &str, what: &str| format!("{at}{key} {what}");
        if self.url.trim().is_empty() {
            return Some((at("", "needs a `url`"), None));
        }
        if let Some(sha) = &self.sha256 {
            return self.tarball_problem(sha, &at);
        }
        match (&self.tag, &self.commit) {
            (Some(tag), _) if tag.trim().is_empty() => {
                return Some((at(".tag", "is empty"), None));
            }
            (None, None) => {
                return Some((
                    at("", "pins no source"),
                    Some(
                        "give a `tag`, a `commit` (the full 40-digit id), or both; or for a tarball its `sha256`",
                    ),
                ));
            }
            _ => {}
        }
        if let Some(commit) = &self.commit {
            let full = self.tag.is_some() || commit.len() == 40;
            if commit.len() < 7 || !commit.chars().all(|ch| ch.is_ascii_hexdigit()) || !full {
                let want = match self.tag {
                    Some(_) => "a hex commit id",
                    None => "a full 40-digit commit id",
                };
                return Some((
                    at(".commit", &format!("`{commit}` is not {want}")),
                    Some("without a tag the commit is fetched by its id, which git needs in full"),
                ));
            }
        }
        let paths = self.subdir.iter().map(|p| (".subdir", p));
        if let Some((key, path)) = paths
            .chain(self.sparse.iter().map(|p| (".sparse", p)))
            .find(|(_, p)| !is_inner_path(p))
        {
            return Some((
                at(
                    key,
                    &format!(
                        "`{}` is not a directory inside the repository",
                        path.escape_debug()
                    ),
                ),
                Some(
                    "give a relative path without `..` and outside `.git`, e.g. subdir = \"projects/miopen\"",
                ),
            ));
        }
        if !self.sparse.is_empty() && self.subdir.is_none() {
            return Some((
                at(
                    ".sparse",
                    "needs a `subdir` (without one, the whole repository is checked out)",
                ),
                None,
            ));
        }
        None
    }

    fn tarball_problem(
        &self,
        sha: &str,
        at: &dyn Fn(&str, &str) -> String,
    ) -> Option<(String, Option<&'static str>)> {
        if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some((
                at(
                    ".sha256",
                    &format!("`{sha}` is not a SHA-256 (64 hex digits)"),
                ),
                Some("write the output of `sha256sum FILE` for the tarball"),
            ));
        }
        if self.tag.is_some() || self.commit.is_some() || self.subdir.is_some() {
            return Some((
                at(
                    "",
                    "pins a tarball (`sha256`) and a git `tag`, `commit` or `subdir`",
                ),
                Some("a source is a git repository (tag, commit) or a tarball (sha256), not both"),
            ));
        }
        let name = self.file_name();
        if !(name.ends_with(".tar.gz") || name.ends_with(".tgz")) {
            return Some((
                at(".url", &format!("`{name}` is not a .tar.gz")),
                Some("a tarball source is a gzip'd tar (.tar.gz or .tgz)"),
            ));
        }
        let scheme = ["https://", "http://", "file://"];
        if !scheme.iter().any(|s| self.url.starts_with(s)) {
            return Some((
                at(
                    ".url",
                    &format!("`{}` is not an https://, http:// or file:// URL", self.url),
                ),
                None,
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    /// rocBLAS 6.4.4 is pinned by Debian's tarball and Tensile by a commit; a
    /// pin that is neither, or both, is refused with what to write.
    #[test]
    fn a_source_is_a_pinned_repository_or_a_pinned_tarball() {
        let p = super::super::Profile::load("rocm-6.4.3").unwrap();
        let c = p.component("rocblas").unwrap();
        assert_eq!(c.pin(), "rocblas_6.4.4.orig.tar.gz sha256 bc374b57579f");
        assert_eq!(c.with["tensile"].pin(), "commit be49885fce2a");
        let base = r#"name = "x"
    [rocm]
    path = "/r"
    version = "6.4.4"
    torch_hip = "6.4"
    [components.rocblas]
    soname = "librocblas.so.4"
    URL
    [components.rocblas.cmake]
    "#;
        let err = |source: &str| {
            let e = super::super::Profile::parse(
                &base.replace("URL", source),
                "t.toml",
                super::super::Origin::Embedded,
            )
            .unwrap_err();
            crate::error::render(&e)
        };
        assert_eq!(
            err("url = \"https://h/r.tar.gz\"\nsha256 = \"abc\""),
            "error: invalid profile t.toml: components.rocblas.sha256 `abc` is not a SHA-256 (64 hex digits)\nhelp: write the output of `sha256sum FILE` for the tarball"
        );
        let sha = "0".repeat(64);
        assert_eq!(
            err(&format!(
                "url = \"https://h/r.tar.gz\"\nsha256 = \"{sha}\"\ntag = \"t\""
            )),
            "error: invalid profile t.toml: components.rocblas pins a tarball (`sha256`) and a git `tag`, `commit` or `subdir`\nhelp: a source is a git repository (tag, commit) or a tarball (sha256), not both"
        );
        assert_eq!(
            err(&format!("url = \"https://h/r.zip\"\nsha256 = \"{sha}\"")),
            "error: invalid profile t.toml: components.rocblas.url `r.zip` is not a .tar.gz\nhelp: a tarball source is a gzip'd tar (.tar.gz or .tgz)"
        );
        assert_eq!(
            err(
                "url = \"file:///x\"\ntag = \"t\"\n[components.rocblas.with.tensile]\nurl = \"file:///t\""
            ),
            "error: invalid profile t.toml: components.rocblas.with.tensile pins no source\nhelp: give a `tag`, a `commit` (the full 40-digit id), or both; or for a tarball its `sha256`"
        );
    }
}
