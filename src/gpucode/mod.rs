//! Which GPUs the libraries torch loads carry code for, read from their
//! bytes: each library's `.hip_fatbin` offload bundles and the ELF header
//! of every code object in them (the target a code object declares, not
//! the name it is filed under), rocBLAS's and hipBLASLt's Tensile
//! directories (`tensile`), and MIOpen's databases for the card (`db`).
//! Only headers are read; what a file holds is remembered by its stamp in
//! the cache `gpucode`. Torch's own libtorch_hip.so is read as every
//! other library is ([`read_library`]). Read by doctor, the swap's
//! override advice and the battery's report; the findings are plain data
//! (`Serialize`) for them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cache::{Cache, stamp_key};
use crate::fatbin;

pub mod catalogue;
mod db;
mod tensile;
mod tensile_scan;
pub mod therock;

pub use db::MiopenDb;
pub use tensile::{CATALOGUES_READ, Tensile, TensileFile};

/// What one file's code objects declare.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Code {
    /// The targets the code objects declare in their ELF headers, sorted:
    /// "gfx1010", "gfx10-1-generic", "mach 0x99" for one not known here.
    pub targets: Vec<String>,
    /// Code objects read.
    pub code_objects: usize,
    /// Bundle entries named for one target whose code object declares
    /// another (or is no code object): "gfx1010 holds gfx1030".
    pub mislabelled: Vec<String>,
    /// Compressed bundles.
    pub compressed: usize,
    /// The targets compressed bundles' entry IDs name, sorted (their code
    /// objects are not decompressed: these are as named, not as declared).
    pub compressed_targets: Vec<String>,
}

impl Code {
    fn from_walk(w: &fatbin::Walked) -> Code {
        let mut targets = BTreeSet::new();
        let mut mislabelled = BTreeSet::new();
        for e in &w.entries {
            match &e.declared {
                Some(t) => {
                    targets.insert(t.clone());
                    if *t != e.named {
                        mislabelled.insert(format!("{} holds {t}", e.named));
                    }
                }
                None => {
                    mislabelled.insert(format!("{} holds no code object", e.named));
                }
            }
        }
        Code {
            targets: targets.into_iter().collect(),
            code_objects: w.entries.len(),
            mislabelled: mislabelled.into_iter().collect(),
            compressed: w.compressed,
            compressed_targets: w.compressed_named.iter().cloned().collect(),
        }
    }

    /// Whether code for `card` is among the declared targets (or those
    /// compressed bundles name).
    pub fn covers(&self, card: &str) -> bool {
        self.targets
            .iter()
            .chain(&self.compressed_targets)
            .any(|t| runs_on(t, card))
    }

    /// Whether there is code for an RDNA1 card (gfx1010, gfx1011, gfx1012,
    /// or gfx10-1-generic), declared or named by a compressed bundle: a
    /// torch without it needs HSA_OVERRIDE_GFX_VERSION on such a card.
    pub fn has_gfx101x(&self) -> bool {
        ["gfx1010", "gfx1011", "gfx1012"]
            .into_iter()
            .any(|card| self.covers(card))
    }

    /// Every target, declared or named by a compressed bundle, sorted.
    pub fn all_targets(&self) -> Vec<String> {
        let all: BTreeSet<&String> = self
            .targets
            .iter()
            .chain(&self.compressed_targets)
            .collect();
        all.into_iter().cloned().collect()
    }
}

/// Whether code built for `target` runs on `card`: the same target, or the
/// generic target of its family (gfx10-1-generic runs on gfx1010-gfx1013).
/// Feature flags (xnack, sramecc) are not told apart.
pub fn runs_on(target: &str, card: &str) -> bool {
    let family: &[&str] = match target {
        "gfx10-1-generic" => &["gfx1010", "gfx1011", "gfx1012", "gfx1013"],
        "gfx10-3-generic" => &[
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
        ],
        "gfx11-generic" => &[
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ],
        "gfx12-generic" => &["gfx1200", "gfx1201"],
        _ => &[],
    };
    target == card || family.contains(&card)
}

/// The GPU code of a shared library: torch's lib/libtorch_hip.so
/// (`Torch::gpu_code`) or any library it loads, all read alike. It walks
/// the offload bundles of the file's `.hip_fatbin` section
/// (`fatbin::walk_library`), compressed bundles included, and says in one
/// [`Code`] which targets its code objects declare in their ELF headers
/// (`targets`), which targets compressed bundles' entry IDs name
/// (`compressed_targets`; [`Code::all_targets`] is both), how many code
/// objects and compressed bundles it read, and which entries hold code for
/// another target than their name; [`Code::covers`] judges it for a card.
/// None when the file has no `.hip_fatbin` section (no GPU code).
/// Remembered by the file's stamp in the cache `gpucode`.
pub fn read_library(path: &Path) -> Result<Option<Code>> {
    cached("lib", path, |file, len| {
        let read_at = |buf: &mut [u8], at: u64| {
            use std::os::unix::fs::FileExt;
            file.read_exact_at(buf, at)
        };
        Ok(fatbin::walk_library(&read_at, len)?.map(|w| Code::from_walk(&w)))
    })
    .with_context(|| format!("{} is not a usable ELF file", path.display()))
}

/// The code of a file that is itself code: one code object (an ELF for
/// EM_AMDGPU) or an offload bundle, as Tensile's `.co` and `.hsaco` files
/// are. None when it is neither.
pub fn read_code_file(path: &Path) -> Result<Option<Code>> {
    let file = crate::fsutil::open_regular(path)?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    code_file_of(&file, len).with_context(|| format!("cannot read {}", path.display()))
}

fn code_file_of(file: &std::fs::File, len: u64) -> Result<Option<Code>> {
    use std::os::unix::fs::FileExt;
    let read_at = |buf: &mut [u8], at: u64| file.read_exact_at(buf, at);
    let mut head = [0u8; 64];
    let n = usize::try_from(len.min(64))?;
    read_at(&mut head[..n], 0)?;
    if let Some(t) = fatbin::code_object_target(&head[..n]) {
        return Ok(Some(Code {
            targets: vec![t],
            code_objects: 1,
            ..Code::default()
        }));
    }
    if fatbin::starts_bundle(&head[..n]) {
        return Ok(Some(Code::from_walk(&fatbin::walk(&read_at, 0, len)?)));
    }
    Ok(None)
}

/// `read` of `path` as its stamp remembers it, else read and remembered.
fn cached(
    kind: &str,
    path: &Path,
    read: impl FnOnce(&std::fs::File, u64) -> Result<Option<Code>>,
) -> Result<Option<Code>> {
    let file = crate::fsutil::open_regular(path)?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?;
    let key = format!("{kind}-v2-{}", stamp_key(&meta));
    let cache = Cache::open("gpucode");
    if let Some(text) = cache.as_ref().and_then(|c| c.get(&key, 1 << 20))
        && let Ok(code) = serde_json::from_str::<Option<Code>>(&text)
    {
        return Ok(code);
    }
    let code = read(&file, meta.len())?;
    if let (Some(c), Ok(text)) = (cache, serde_json::to_string(&code)) {
        c.put(&key, &text);
    }
    Ok(code)
}

/// One finding for the card: a library, a Tensile directory or MIOpen's
/// databases, with plain fields for doctor's rows and JSON and the
/// battery's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// "library", "tensile" or "miopen-db": the row it makes.
    pub kind: &'static str,
    /// The library's file name (`librocblas.so.4`), or for a directory the
    /// library it belongs to (`rocBLAS`).
    pub name: String,
    pub path: PathBuf,
    /// The targets its code objects declare, sorted (none for miopen-db).
    pub targets: Vec<String>,
    /// The target judged: the card's (or the one HSA_OVERRIDE_GFX_VERSION
    /// makes ROCm report).
    pub card: String,
    /// Whether code for the card is there; None when it cannot be told
    /// (compressed bundles; MIOpen's databases, which are information).
    pub card_covered: Option<bool>,
    /// What else the reading found: mislabelled code objects, files named
    /// for the card, a read error.
    pub notes: Vec<String>,
}

/// What `library` (torch's libtorch_hip.so) loads, as the loader would
/// resolve it (`search`: the directories a preload put in the process, for
/// the rocm-sdk layout), in the loader's order: the input of [`survey`].
/// Nothing is run; every file is only read.
pub fn closure(library: &Path, search: &[PathBuf]) -> Result<Vec<PathBuf>> {
    Ok(crate::loader::resolve(library, search)?
        .into_iter()
        .filter_map(|d| d.path)
        .collect())
}

/// The GPU libraries of torch's load closure (`libs`, in the loader's
/// order) read for `card`: one `library` finding per library that carries
/// code, one `tensile` per Tensile directory beside rocBLAS or hipBLASLt,
/// one `miopen-db` for MIOpen's databases.
pub fn survey(libs: &[PathBuf], card: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut dbs = BTreeSet::new();
    for lib in libs {
        let name = lib
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match read_library(lib) {
            Ok(Some(code)) => out.push(Finding {
                kind: "library",
                name: name.clone(),
                path: lib.clone(),
                card: card.to_owned(),
                card_covered: (code.compressed == 0 || !code.all_targets().is_empty())
                    .then(|| code.covers(card)),
                notes: library_notes(&code),
                targets: code.all_targets(),
            }),
            Ok(None) => {}
            Err(e) => out.push(Finding {
                kind: "library",
                name: name.clone(),
                path: lib.clone(),
                targets: Vec::new(),
                card: card.to_owned(),
                card_covered: None,
                notes: vec![format!("{e:#}")],
            }),
        }
        if let Some(project) = tensile::project_of(&name) {
            let dirs = tensile::dirs_beside(lib, project);
            if dirs.is_empty() {
                out.push(tensile::no_dir(lib, project, card));
            }
            out.extend(
                dirs.into_iter()
                    .map(|dir| tensile::Summary::read(&dir).finding(project, card)),
            );
        }
        if name.starts_with("libMIOpen.so")
            && let Some(db) = MiopenDb::beside(lib, card)
            && dbs.insert(db.dir.clone())
        {
            out.push(db.finding(card));
        }
    }
    out
}

/// What a library row says beside its targets: mislabelled code
/// objects, compressed bundles.
pub fn library_notes(code: &Code) -> Vec<String> {
    let mut notes = Vec::new();
    if !code.mislabelled.is_empty() {
        notes.push(format!(
            "bundle entries named for one target hold another: {}",
            code.mislabelled.join(", ")
        ));
    }
    if code.compressed > 0 {
        notes.push(format!(
            "{} compressed offload bundle(s): their targets as their entry IDs name them ({}), their code objects not decompressed",
            code.compressed,
            if code.compressed_targets.is_empty() {
                "none read".to_owned()
            } else {
                code.compressed_targets.join(", ")
            }
        ));
    }
    notes
}

/// The gfx target a file name is for: `Kernels.so-000-gfx1010.hsaco` and
/// `TensileLibrary_Type_HH_gfx1010.co` are for gfx1010.
pub fn named_target(name: &str) -> Option<String> {
    let at = name.find("gfx")?;
    let rest = &name[at + 3..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    (!digits.is_empty()).then(|| format!("gfx{digits}"))
}

/// A name read from a file or a directory, shown with its control
/// characters escaped (`\u{1b}`), as compiler logs are: a file named with
/// an escape sequence must not drive the terminal it is shown on.
pub fn shown(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_targets_run_on_their_family_only() {
        assert!(runs_on("gfx1012", "gfx1012"));
        assert!(runs_on("gfx10-1-generic", "gfx1012"));
        assert!(!runs_on("gfx10-3-generic", "gfx1012"));
        assert!(!runs_on("gfx1010", "gfx1012"));
    }

    #[test]
    fn names_say_a_target() {
        assert_eq!(
            named_target("Kernels.so-000-gfx1010.hsaco").as_deref(),
            Some("gfx1010")
        );
        assert_eq!(
            named_target("TensileLibrary_Type_HH_gfx90a.co").as_deref(),
            Some("gfx90a")
        );
        assert_eq!(named_target("TensileLibrary.dat"), None);
    }
}
