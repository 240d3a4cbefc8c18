//! A transaction's journal: its state, the files and torch it names, and
//! how journals are read back (damaged ones apart).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::hint;
use crate::fsutil;
use crate::owner;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Journal written; torch untouched.
    Begun,
    /// The original is backed up and verified; torch untouched.
    BackedUp,
    /// About to rename the new file over the original: either may be there.
    Swapping,
    /// The new file is in place.
    Installed,
    /// A later install went over this one and kept its original.
    Replaced,
    /// Putting the original back: either may be there.
    RollingBack,
    RolledBack,
    /// Stopped before the swap; torch was never changed.
    Aborted,
    /// Closed by the user without touching torch (e.g. torch was reinstalled).
    Abandoned,
}

impl State {
    pub fn unfinished(self) -> bool {
        matches!(
            self,
            State::Begun | State::BackedUp | State::Swapping | State::RollingBack
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Begun => "begun",
            State::BackedUp => "backed-up",
            State::Swapping => "swapping",
            State::Installed => "installed",
            State::Replaced => "replaced",
            State::RollingBack => "rolling-back",
            State::RolledBack => "rolled-back",
            State::Aborted => "aborted",
            State::Abandoned => "abandoned",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRec {
    pub md5: String,
    pub size: u64,
    pub mode: u32,
}

/// What went into torch: where from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildRec {
    pub prefix: PathBuf,
    pub library: PathBuf,
    pub profile: String,
    pub rocm: String,
    pub commit: String,
    pub build_id: Option<String>,
    /// The patchelf edits made, or "" when installed as built.
    pub relink: String,
}

/// Which torch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorchRec {
    pub dir: PathBuf,
    pub version: String,
    pub hip: String,
    /// torch/lib/libMIOpen.so, or the file it links to.
    pub target: PathBuf,
    /// Set when torch loads MIOpen from the rocm-sdk packages; absent in
    /// journals of the torch/lib layout (and in those written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<SdkRec>,
}

/// The rocm-sdk layout's MIOpen, as an install found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SdkRec {
    pub version: String,
    pub family: String,
    /// `site-packages/_rocm_sdk_libraries_<family>`, torch's sibling.
    pub package: PathBuf,
    /// The name the preload loads.
    pub library: PathBuf,
}

impl TorchRec {
    /// `torch`, whose library `target` a transaction changes or adds.
    pub fn of(torch: &crate::torch::Torch, target: &Path) -> TorchRec {
        let sdk = match &torch.layout {
            crate::torch::Layout::RocmSdk(sdk) => Some(SdkRec {
                version: sdk.version.clone(),
                family: sdk.family.clone(),
                package: sdk.package.clone(),
                library: sdk.library.clone(),
            }),
            crate::torch::Layout::Bundled | crate::torch::Layout::System(_) => None,
        };
        TorchRec {
            dir: torch.dir.clone(),
            version: torch.version.clone(),
            hip: torch.hip.clone(),
            target: target.to_owned(),
            sdk,
        }
    }

    pub fn layout(&self) -> &'static str {
        if self.sdk.is_some() {
            "rocm-sdk"
        } else {
            "torch/lib"
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub id: u32,
    pub state: State,
    pub created: String,
    pub updated: String,
    pub torch: TorchRec,
    pub build: BuildRec,
    pub original: FileRec,
    pub backup: PathBuf,
    pub new: FileRec,
    /// The transaction whose original this one kept (installing twice).
    pub inherits: Option<u32>,
    /// The system route (`txn::system`): the target is a copy added to
    /// torch/lib, `original` and `backup` are libtorch_hip.so's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemRec>,
    /// rocBLAS (`txn::set`): the target is its library, and its Tensile
    /// directory goes with it, the two one set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<SetRec>,
}

/// rocBLAS's Tensile directory, which a transaction replaces (or, on the
/// system route, adds) together with the library it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetRec {
    /// The name libtorch_hip.so loads the library by, in torch/lib.
    pub loads: String,
    /// torch/lib/rocblas/library.
    pub dir: PathBuf,
    /// The directory torch had there; None when it had none.
    pub original: Option<super::tree::TreeRec>,
    pub new: super::tree::TreeRec,
    /// Whether the transaction made torch/lib/rocblas (rollback takes it
    /// away again).
    #[serde(default)]
    pub made_parent: bool,
}

/// Where rocBLAS's Tensile directory lies, relative to the library: where
/// rocBLAS itself looks for it, beside the file it was loaded from.
pub const TENSILE_DIR: &str = "rocblas/library";

/// The library-name stem of rocBLAS.
pub const ROCBLAS: &str = "librocblas.so";

/// What the system route added to a torch that loads the system's MIOpen,
/// and what it changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemRec {
    /// The system's library the copy was made from, only ever read.
    pub library: PathBuf,
    /// Its SHA-256 when the copy was made.
    pub sha256: String,
    /// "dpkg libmiopen1", or "" when no package manager owns it.
    pub package: String,
    /// torch/lib/libtorch_hip.so.
    pub hip: PathBuf,
    /// The copy's run path: the system library's directory first.
    pub copy_run_path: String,
    /// libtorch_hip.so's run path edit, when torch/lib was not first.
    pub edit: Option<HipEdit>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HipEdit {
    pub before: String,
    pub after: String,
    /// libtorch_hip.so as edited.
    pub new: FileRec,
}

pub(super) fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl Journal {
    /// "system" for the system route, else torch's layout.
    pub fn layout(&self) -> &'static str {
        match self.system {
            Some(_) => "system",
            None => self.torch.layout(),
        }
    }

    /// One line for a transaction, as `status` and `rollback --list` show it.
    pub fn describe(&self) -> String {
        format!(
            "{:>4}  {}  {:<12}  {}  torch {} ({})  {}build {} ROCm {}",
            self.id,
            self.created,
            self.state.name(),
            self.torch.dir.display(),
            self.torch.version,
            match &self.torch.sdk {
                None => format!("hip {}", self.torch.hip),
                Some(s) => format!("rocm-sdk {} {}", s.version, s.family),
            },
            if self.set.is_some() { "rocBLAS " } else { "" },
            crate::builder::git::short(&self.build.commit),
            self.build.rocm
        )
    }

    /// The name torch loads the library by.
    pub(super) fn library(&self) -> PathBuf {
        if let Some(set) = &self.set {
            return self.torch.dir.join("lib").join(&set.loads);
        }
        match &self.torch.sdk {
            Some(sdk) => sdk.library.clone(),
            None => self.torch.dir.join("lib").join(crate::torch::LIBRARY),
        }
    }

    /// The temp file an install (or, with `rollback`, a rollback) writes
    /// next to the target; named here, never read from the journal.
    pub(super) fn temp(&self, rollback: bool) -> PathBuf {
        temp_path(&self.torch.target, self.id, rollback)
    }

    /// Remove what a killed install or rollback of this transaction left.
    pub(super) fn remove_temps(&self) {
        for rollback in [false, true] {
            let _ = fsutil::remove_own_file(&self.temp(rollback));
            if let Some(s) = &self.system {
                let _ = fsutil::remove_own_file(&temp_path(&s.hip, self.id, rollback));
            }
            if let Some(set) = &self.set {
                let _ = fsutil::remove_path(&temp_path(&set.dir, self.id, rollback));
            }
        }
    }

    /// Whether this transaction is rocBLAS's (`what` "rocBLAS") or MIOpen's.
    pub fn is(&self, what: &str) -> bool {
        (what == "rocBLAS") == self.set.is_some()
    }

    /// "rocBLAS" or "MIOpen": the library this transaction changed.
    pub fn what(&self) -> &'static str {
        if self.set.is_some() {
            "rocBLAS"
        } else {
            "MIOpen"
        }
    }

    /// The journal's paths are ones this tool could have written: the backup
    /// is `backup`, the state dir's copy of the original, and the target is
    /// a libMIOpen inside the torch the journal names.
    pub(super) fn check(&self, backup: &Path) -> std::result::Result<(), String> {
        if self.backup != backup {
            return Err(format!(
                "its backup {} is not {}",
                self.backup.display(),
                backup.display()
            ));
        }
        let t = &self.torch;
        // The rocm-sdk package must be torch's sibling and the preload's
        // name inside it: a journal cannot point us anywhere else.
        let root = match &t.sdk {
            None => t.dir.clone(),
            Some(sdk) => {
                let sibling = sdk.package.parent() == t.dir.parent()
                    && sdk
                        .package
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(crate::rocm_sdk::is_libraries_package)
                    && sdk.library.parent().and_then(Path::parent) == Some(sdk.package.as_path());
                if !sibling {
                    return Err(format!(
                        "its rocm-sdk package {} is not a libraries package beside {}",
                        sdk.package.display(),
                        t.dir.display()
                    ));
                }
                sdk.package.clone()
            }
        };
        let (stem, what) = match self.set {
            Some(_) => (ROCBLAS, "librocblas"),
            None => ("libMIOpen.so", "libMIOpen"),
        };
        let named_ok = t
            .target
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(stem));
        let dir = root.canonicalize().unwrap_or_else(|_| root.clone());
        let inside = t.target.is_absolute()
            && t.target
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir))
            && (t.target.starts_with(&dir) || t.target.starts_with(&root));
        if !named_ok || !inside {
            return Err(format!(
                "its target {} is not a {what} inside {}",
                t.target.display(),
                root.display()
            ));
        }
        // rocBLAS's set lies in torch/lib: its library (by the name torch
        // loads it) and torch/lib/rocblas/library, nothing else.
        if let Some(set) = &self.set {
            let lib = t.dir.join("lib");
            let plain = !set.loads.contains('/') && set.loads.starts_with(ROCBLAS);
            if !plain
                || t.sdk.is_some()
                || set.dir != lib.join(TENSILE_DIR)
                || t.target.parent() != Some(lib.as_path())
            {
                return Err(format!(
                    "its files {}, {} and {} are not rocBLAS's in {}",
                    set.loads,
                    t.target.display(),
                    set.dir.display(),
                    lib.display()
                ));
            }
        }
        // The system route writes torch/lib/libtorch_hip.so and a copy in
        // torch/lib, nothing else.
        if let Some(s) = &self.system {
            let lib = t.dir.join("lib");
            if s.hip != lib.join("libtorch_hip.so") || t.target.parent() != Some(lib.as_path()) {
                return Err(format!(
                    "its files {} and {} are not in {}",
                    s.hip.display(),
                    t.target.display(),
                    lib.display()
                ));
            }
        }
        Ok(())
    }

    /// Run as root, a journal is followed only where whoever could have
    /// written it (or the backup it names) could change its torch anyway:
    /// a user's state dir (`sudo -E`, or `--state-dir ~user/...`) must not
    /// steer root into replacing a library that user cannot write.
    pub(super) fn check_writers(&self, journal: &Path) -> std::result::Result<(), String> {
        if !owner::is_root() {
            return Ok(());
        }
        let torch = owner::Writers::of(&self.torch.target).map_err(|e| e.to_string())?;
        for (what, file) in [("it", journal), ("its backup", self.backup.as_path())] {
            let w = owner::Writers::of(file).map_err(|e| e.to_string())?;
            let beyond = w.beyond(&torch);
            if !beyond.is_empty() {
                return Err(format!(
                    "{what} can be changed by {}{}, who cannot change {}; run as root, rdna1-patch does not follow it",
                    owner::describe(&beyond),
                    w.through(file),
                    self.torch.target.display()
                ));
            }
        }
        Ok(())
    }
}

pub(super) fn temp_path(target: &Path, id: u32, rollback: bool) -> PathBuf {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let dir = target.parent().unwrap_or(Path::new("/"));
    if rollback {
        dir.join(format!(".{name}.rdna1-patch-{id}-rollback.tmp"))
    } else {
        dir.join(format!(".{name}.rdna1-patch-{id}.tmp"))
    }
}

/// A journal file that cannot be read as one.
#[derive(Debug, Clone, Serialize)]
pub struct Damaged {
    pub path: PathBuf,
    pub error: String,
    /// Readable, but written where someone root should not obey could
    /// have written it.
    #[serde(skip)]
    pub untrusted: bool,
}

impl Damaged {
    pub(super) fn error(damaged: &[Damaged]) -> anyhow::Error {
        let list: Vec<String> = damaged
            .iter()
            .map(|d| format!("{}: {}", d.path.display(), d.error))
            .collect();
        let first = &damaged[0].path;
        let help = match damaged.iter().any(|d| d.untrusted) {
            true => "run rdna1-patch as the user who owns that state dir, without sudo, or give root a state dir only root can write (the default, with sudo's own environment)".to_owned(),
            false => format!(
                "if you edited it, undo the edit; otherwise check that torch's libMIOpen.so is the one you want, then set the journal aside (`{}`) and run this again",
                crate::shell::as_run([
                    Path::new("mv"),
                    first,
                    Path::new(&format!("{}.damaged", first.display())),
                ])
            ),
        };
        hint(
            format!(
                "{} transaction journal(s) cannot be trusted, so rdna1-patch will not change torch:\n  {}",
                damaged.len(),
                list.join("\n  ")
            ),
            help,
        )
    }
}

/// Every journal of a state dir, the damaged ones apart.
#[derive(Debug, Default)]
pub struct Journals {
    pub list: Vec<Journal>,
    pub damaged: Vec<Damaged>,
    /// The highest id any journal file has, damaged or not.
    pub(super) last_id: u32,
}

/// After a rollback's rename: torch's file reads back as the original.
pub(super) fn read_back_original(j: &Journal) -> anyhow::Result<()> {
    let after = crate::checksum::md5_file(&j.torch.target)?;
    if after != j.original.md5 {
        anyhow::bail!(
            "{} reads back as MD5 {after} after restoring, not {}",
            j.torch.target.display(),
            j.original.md5
        );
    }
    Ok(())
}

/// The backup must be the original the transaction saved, before
/// anything is restored from it.
pub(super) fn check_backup(j: &Journal) -> anyhow::Result<()> {
    let actual = crate::checksum::md5_file(&j.backup);
    if actual.as_ref().ok() == Some(&j.original.md5) {
        return Ok(());
    }
    let what = match actual {
        Ok(m) => format!("its MD5 is {m}"),
        Err(e) => format!("{e:#}"),
    };
    Err(hint(
        format!(
            "the backup of the original {} is not the file transaction {} saved: {what}, the journal says {}; nothing was changed",
            j.torch.target.display(),
            j.id,
            j.original.md5
        ),
        format!(
            "rdna1-patch will not restore a damaged original. Reinstall torch {} to get a clean one (e.g. `pip install --force-reinstall torch=={}` with the index you installed it from)",
            j.torch.version, j.torch.version
        ),
    ))
}
