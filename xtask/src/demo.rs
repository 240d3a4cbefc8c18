use std::path::Path;

use anyhow::Result;

pub fn run(_root: &Path) -> Result<()> {
    anyhow::bail!("demo: not written yet")
}
