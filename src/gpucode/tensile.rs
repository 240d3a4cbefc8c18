//! rocBLAS's and hipBLASLt's kernels in data files: a Tensile directory
//! (`rocblas/library/`, `hipblaslt/library/` beside the library) holds
//! catalogues (`TensileLibrary*.dat`, `.yaml`) and code objects (`*.co`,
//! `Kernels.so-000-gfxNNNN.hsaco`). A file is judged by the target its
//! code objects declare; its name only says what it claims to be.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::tensile_scan::scan;
use super::{Finding, named_target, runs_on};
use crate::cache::stamp_key;

/// How the note listing every catalogue read for the card starts: said
/// under the tensile row, not in it.
pub const CATALOGUES_READ: &str = "catalogues read for ";

/// One code-object file of a Tensile directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensileFile {
    pub name: String,
    /// The target its name is for, if it names one.
    pub named: Option<String>,
    /// The targets its code objects declare (none: no code object in it).
    pub declared: Vec<String>,
}

/// What a Tensile directory holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tensile {
    pub dir: PathBuf,
    /// The catalogues' file names.
    pub catalogues: Vec<String>,
    pub files: Vec<TensileFile>,
    /// Why the directory could not be read, if it could not.
    pub error: Option<String>,
}

/// The project a library's file name belongs to, when it keeps kernels
/// in a Tensile directory.
pub(super) fn project_of(file_name: &str) -> Option<&'static str> {
    if file_name.starts_with("librocblas.so") {
        Some("rocBLAS")
    } else if file_name.starts_with("libhipblaslt.so") {
        Some("hipBLASLt")
    } else {
        None
    }
}

/// The Tensile directories beside `lib`: `rocblas/library` or
/// `rocblas/VERSION/library` (Debian's layout) in its directory.
pub(super) fn dirs_beside(lib: &Path, project: &str) -> Vec<PathBuf> {
    let Some(base) = lib.parent().map(|d| d.join(project.to_lowercase())) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if base.join("library").is_dir() {
        out.push(base.join("library"));
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("library"))
        .filter(|p| p.is_dir())
        .collect();
    versions.sort();
    out.extend(versions);
    out
}

/// The finding for a library with no Tensile directory beside it: rocBLAS
/// then aborts at its first GEMM ("Cannot read .../TensileLibrary.dat").
pub(super) fn no_dir(lib: &Path, project: &str, card: &str) -> Finding {
    let dir = lib
        .parent()
        .unwrap_or(Path::new(""))
        .join(project.to_lowercase())
        .join("library");
    Finding {
        kind: "tensile",
        name: project.to_owned(),
        path: dir,
        targets: Vec::new(),
        card: card.to_owned(),
        card_covered: Some(false),
        notes: vec![format!(
            "not there (no {}/library nor {0}/VERSION/library beside {})",
            project.to_lowercase(),
            lib.display()
        )],
    }
}

impl Tensile {
    /// Read `dir`: every catalogue's name and every code file's ELF or
    /// bundle headers, a file whose stamp the cache knows not read again.
    pub fn read(dir: &Path) -> Tensile {
        let mut files = Vec::new();
        let scan = scan(dir, |name, declared| {
            files.push(TensileFile {
                name: name.to_owned(),
                named: named_target(name),
                declared: declared.to_vec(),
            });
        });
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Tensile {
            dir: dir.to_owned(),
            catalogues: scan.catalogues,
            files,
            error: scan.error,
        }
    }

    /// The code files whose code objects run on `card`.
    pub fn files_for<'a>(&'a self, card: &'a str) -> impl Iterator<Item = &'a TensileFile> {
        self.files
            .iter()
            .filter(move |f| f.declared.iter().any(|t| runs_on(t, card)))
    }
}

/// What doctor's row needs of a Tensile directory, kept as counts: a
/// directory of a million code files costs a count per set of targets,
/// not a million names.
#[derive(Debug, Default)]
pub(super) struct Summary {
    dir: PathBuf,
    catalogues: Vec<String>,
    /// Each set of targets the code files declare, with how many do.
    sets: BTreeMap<Vec<String>, usize>,
    /// Files whose name names a target their code does not run on.
    misnamed: Vec<TensileFile>,
    error: Option<String>,
}

impl Summary {
    /// The summary of `dir`, read once a process while the directory
    /// itself is unchanged (its device, inode, size and times: a name
    /// added, removed or renamed in it, or another directory swapped in,
    /// changes them): doctor surveys torch's libraries for its rows and
    /// again for its plan, and a directory of a million files costs a
    /// pass over it each time.
    pub(super) fn read(dir: &Path) -> Arc<Summary> {
        static READ: Mutex<Vec<(PathBuf, String, Arc<Summary>)>> = Mutex::new(Vec::new());
        let Ok(stamp) = std::fs::metadata(dir).map(|m| stamp_key(&m)) else {
            return Arc::new(Summary::read_now(dir));
        };
        if let Some(known) = READ.lock().ok().and_then(|read| {
            read.iter()
                .find(|(d, s, _)| d == dir && *s == stamp)
                .map(|(_, _, summary)| Arc::clone(summary))
        }) {
            return known;
        }
        let summary = Arc::new(Summary::read_now(dir));
        if let Ok(mut read) = READ.lock() {
            read.retain(|(d, _, _)| d != dir);
            read.push((dir.to_owned(), stamp, Arc::clone(&summary)));
        }
        summary
    }

    fn read_now(dir: &Path) -> Summary {
        let mut sets: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        let mut misnamed = Vec::new();
        let scan = scan(dir, |name, declared| {
            match sets.get_mut(declared) {
                Some(n) => *n += 1,
                None => {
                    sets.insert(declared.to_vec(), 1);
                }
            }
            if let Some(named) = named_target(name)
                && !declared.iter().any(|t| runs_on(t, &named))
            {
                misnamed.push(TensileFile {
                    name: name.to_owned(),
                    named: Some(named),
                    declared: declared.to_vec(),
                });
            }
        });
        misnamed.sort_by(|a, b| a.name.cmp(&b.name));
        Summary {
            dir: dir.to_owned(),
            catalogues: scan.catalogues,
            sets,
            misnamed,
            error: scan.error,
        }
    }

    /// The catalogues rocBLAS reads for `card`: those named for it, and
    /// those named for no target (`TensileLibrary.dat`, for all).
    fn catalogues_for<'a>(&'a self, card: &'a str) -> impl Iterator<Item = &'a String> {
        self.catalogues.iter().filter(move |c| {
            let named = named_target(c);
            named.is_none() || named.as_deref() == Some(card)
        })
    }

    pub(super) fn finding(&self, project: &str, card: &str) -> Finding {
        let targets: BTreeSet<&String> = self.sets.keys().flatten().collect();
        let code: usize = self
            .sets
            .iter()
            .filter(|(set, _)| set.iter().any(|t| runs_on(t, card)))
            .map(|(_, n)| n)
            .sum();
        let catalogues: Vec<&str> = self.catalogues_for(card).map(String::as_str).collect();
        // Counts, not lists: Debian's librocblas has 50 generic
        // `*_fallback.dat` catalogues, each one rocBLAS reads for any card.
        let named = catalogues
            .iter()
            .filter(|c| named_target(c).is_some())
            .count();
        let mut notes = vec![format!(
            "{} catalogue(s), {} code-object file(s); for {card}: {code} code-object file(s), {}",
            self.catalogues.len(),
            self.sets.values().sum::<usize>(),
            match (catalogues.len(), named) {
                (0, _) => "no catalogue".to_owned(),
                (n, 0) => format!("{n} generic catalogue(s)"),
                (n, k) if n == k => format!("{n} catalogue(s) named for it"),
                (n, k) => format!("{k} catalogue(s) named for it and {} generic", n - k),
            }
        )];
        let misnamed: Vec<String> = self
            .misnamed
            .iter()
            .filter(|f| f.named.as_deref() == Some(card))
            .map(|f| match f.declared.as_slice() {
                [] => format!("{} holds no code object", f.name),
                d => format!("{} holds {}", f.name, d.join(", ")),
            })
            .collect();
        if !misnamed.is_empty() {
            notes.push(format!(
                "named for {card} but holding other code: {}",
                misnamed.join("; ")
            ));
        }
        notes.extend(self.error.clone());
        // The whole list, last: the row a person reads is cut before it.
        if !catalogues.is_empty() {
            notes.push(format!(
                "{CATALOGUES_READ}{card}: {}",
                catalogues.join(", ")
            ));
        }
        Finding {
            kind: "tensile",
            name: project.to_owned(),
            path: self.dir.clone(),
            targets: targets.into_iter().cloned().collect(),
            card: card.to_owned(),
            card_covered: Some(self.error.is_none() && code > 0 && !catalogues.is_empty()),
            // The names in them are the directory's: escaped.
            notes: notes.iter().map(|n| super::shown(n)).collect(),
        }
    }
}
