//! MIOpen's kernel and performance databases for the card
//! (`share/miopen/db/gfx1010_40.kdb`, `gfx1010_40.HIP.fdb.txt`, ...):
//! information only, since MIOpen compiles the kernels it lacks (the
//! first run of a shape is slower).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Finding, named_target};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MiopenDb {
    pub dir: PathBuf,
    /// The database files named for the card.
    pub for_card: Vec<String>,
    /// Every database file there.
    pub files: usize,
}

impl MiopenDb {
    /// The database directory of the MIOpen at `lib`: `share/miopen/db`
    /// above its lib directory (a wheel's, the rocm-sdk's, `/opt/rocm`'s),
    /// or above the multiarch directory (Debian's /usr/share). None when
    /// there is none.
    pub fn beside(lib: &Path, card: &str) -> Option<MiopenDb> {
        let libdir = lib.parent()?;
        let dir = libdir
            .ancestors()
            .skip(1)
            .take(2)
            .map(|a| a.join("share/miopen/db"))
            .find(|d| d.is_dir())?;
        let mut files = 0;
        let mut for_card = Vec::new();
        for e in std::fs::read_dir(&dir).ok()?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            files += 1;
            if named_target(&name).as_deref() == Some(card) {
                for_card.push(name);
            }
        }
        for_card.sort();
        Some(MiopenDb {
            dir,
            for_card,
            files,
        })
    }

    pub(super) fn finding(&self, card: &str) -> Finding {
        Finding {
            kind: "miopen-db",
            name: "MIOpen".to_owned(),
            path: self.dir.clone(),
            targets: Vec::new(),
            card: card.to_owned(),
            card_covered: None,
            notes: vec![if self.for_card.is_empty() {
                format!(
                    "none of its {} database file(s) is for {card}: MIOpen compiles each kernel at its first use and tunes nothing ahead (the first run of each shape is slower)",
                    self.files
                )
            } else {
                format!(
                    "{} of its {} database file(s) for {card}: {}",
                    self.for_card.len(),
                    self.files,
                    self.for_card.join(", ")
                )
            }],
        }
    }
}
