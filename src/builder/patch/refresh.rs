//! Writing a patch back from an edited tree (`patches refresh`).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};

use super::apply::check_no_symlink;
use super::series::check_path_syntax;
use super::{PatchFile, Series, Workspace, disk_base};
use crate::error::hint;

/// Render one file's change as a git-style diff with three lines of context.
pub fn render_diff(path: &str, before: Option<&str>, after: Option<&str>) -> String {
    let mut out = format!("diff --git a/{path} b/{path}\n");
    let (old_name, new_name) = match (before, after) {
        (None, _) => {
            out.push_str("new file mode 100644\n");
            ("/dev/null".to_owned(), format!("b/{path}"))
        }
        (_, None) => {
            out.push_str("deleted file mode 100644\n");
            (format!("a/{path}"), "/dev/null".to_owned())
        }
        _ => (format!("a/{path}"), format!("b/{path}")),
    };
    let diff = similar::TextDiff::from_lines(before.unwrap_or(""), after.unwrap_or(""));
    out.push_str(
        &diff
            .unified_diff()
            .context_radius(3)
            .header(&old_name, &new_name)
            .to_string(),
    );
    out
}

/// Rewrite patch `name` from the edited tree at `root`, like `quilt refresh`.
///
/// `base` gives the unpatched files; the patch's "before" is `base` with the
/// earlier patches applied, its "after" is the tree with the later patches
/// taken out again. `add` names files to bring into the patch.
pub fn refresh(
    series: &Series,
    name: &str,
    root: &Path,
    base: &dyn Fn(&str) -> Result<Option<String>>,
    add: &[String],
) -> Result<String> {
    let (index, patch) = series.get(name).ok_or_else(|| {
        hint(
            format!("{} has no patch named {name}", series.origin),
            format!(
                "patches in the series: {}",
                series
                    .patches
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    let mut files: BTreeSet<String> = patch.files.iter().cloned().collect();
    for a in add {
        check_path_syntax(name, a)?;
        files.insert(a.clone());
    }
    for f in &files {
        check_no_symlink(name, root, f)?;
    }

    let mut before = Workspace::new(base);
    for p in &series.patches[..index] {
        before.apply(p)?;
    }
    let disk = disk_base(root);
    let mut after = Workspace::new(&disk);
    for later in series.patches[index + 1..].iter().rev() {
        if later.files.iter().any(|f| files.contains(f)) {
            after.unapply(later, &files)?;
        }
    }

    let mut body = String::new();
    for f in &files {
        let (b, a) = (before.get(f)?, after.get(f)?);
        if b != a {
            body.push_str(&render_diff(f, b.as_deref(), a.as_deref()));
        }
    }
    if body.is_empty() {
        bail!("refreshing {name} would leave it empty: the tree has none of its changes");
    }
    let mut text = patch.header().to_owned();
    if !text.is_empty() && !text.ends_with("\n\n") {
        text.push('\n');
    }
    text.push_str(&body);
    // Parse what we made, so a refresh can never write a patch we cannot read.
    PatchFile::parse(name, text.clone())
        .context("internal error: refreshed patch does not parse")?;
    Ok(text)
}
