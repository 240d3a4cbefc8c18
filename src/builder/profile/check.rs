//! What a profile may not say: a component whose source is not pinned,
//! names that are not plain, paths that leave their tree, compat names
//! this version does not know.

use anyhow::Result;

use super::Component;
use crate::error::hint;

/// What is wrong with component `name`, as [`Profile::problem`] says it.
pub(super) fn component_problem(
    name: &str,
    c: &Component,
) -> Option<(String, Option<&'static str>)> {
    let at = format!("components.{name}");
    if let Some(p) = c.source().problem(&at) {
        return Some(p);
    }
    for (with, source) in &c.with {
        if !is_plain_name(with) || with == "rocm" {
            return Some((
                format!(
                    "{at}.with names `{}`, which is not a plain name other than rocm",
                    with.escape_debug()
                ),
                Some(
                    "use letters, digits, `.`, `_` and `-` only: it names a directory in the work dir and `{NAME}` in the defines",
                ),
            ));
        }
        if let Some(p) = source.problem(&format!("{at}.with.{with}")) {
            return Some(p);
        }
    }
    if let Some(dir) = &c.tensile
        && !is_inner_path(dir)
    {
        return Some((
            format!(
                "{at}.tensile `{}` is not a directory inside the prefix",
                dir.escape_debug()
            ),
            Some("give a relative path without `..`, e.g. tensile = \"lib/rocblas/library\""),
        ));
    }
    c.cmake
        .defines
        .contains_key("CMAKE_INSTALL_PREFIX")
        .then(|| {
            (
                "set the install prefix with the top-level `prefix` key, not CMAKE_INSTALL_PREFIX"
                    .into(),
                None,
            )
        })
}

/// A component's `compat` names only fixes this version knows.
pub(super) fn check_compat(label: &str, name: &str, c: &Component) -> Result<()> {
    match c
        .compat
        .iter()
        .find(|n| !crate::builder::compat::KNOWN.contains(&n.as_str()))
    {
        Some(bad) => Err(hint(
            format!("invalid profile {label}: components.{name}.compat names `{bad}`"),
            format!(
                "known compat names: {}",
                crate::builder::compat::KNOWN.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// A name that is one plain directory name: no `/`, no `..`, not hidden.
pub(super) fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `projects/miopen`: relative, `/`-separated plain names, no `..` (git
/// paths, and a directory of the checkout).
pub(super) fn is_inner_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && !crate::fsutil::is_git_dir_name(part.as_ref())
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
}
