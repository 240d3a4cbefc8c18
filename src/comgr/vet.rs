//! What the compile child loads, vetted whole before any of it runs: the
//! comgr, the hipRTC, every library the loader would resolve for them
//! (their DT_NEEDED closure, worked out by `crate::loader`), each file and
//! every directory above it up to `/`, under one rule: writable only by
//! root or by whoever runs the tool (under sudo, also the user it acts
//! for). A file is held open once checked, and what is loaded is that
//! open file (`/proc/self/fd/N`), dependencies first, each found by the
//! loader under its SONAME among those already loaded: nothing is looked
//! up by name between the check and the load, so a directory swapped in
//! between them is never what runs.

use std::ffi::{CString, c_void};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use crate::error::hint;
use crate::fsutil::At;

/// One library held open since it was checked.
struct Lib {
    /// Where it was found, as a message names it.
    path: PathBuf,
    /// Its real path (symlinks resolved).
    real: PathBuf,
    file: File,
    id: (u64, u64),
    soname: Option<String>,
    needed: Vec<String>,
}

/// The compilers asked for and every library they need, checked and open.
pub struct Vetted {
    libs: Vec<Lib>,
    /// Index into `libs` of each compiler, in the order asked.
    compilers: Vec<usize>,
}

/// Whom the rule trusts besides root: this process's user, and under sudo
/// the user it acts for.
#[derive(Clone, Copy)]
struct Rule {
    euid: u32,
    user: Option<u32>,
}

/// What a path is to the compiler being vetted, for a message.
enum Role<'a> {
    /// The compiler itself.
    It,
    /// The directory holding it, or holding the name it was asked by.
    Dir,
    /// A directory further up.
    Above,
    /// A library it needs.
    Needed,
    /// A directory holding, or above, a library it needs.
    NeededDir(&'a Path),
}

/// Check `compilers` (the comgr, the hipRTC) and everything they load, and
/// hold each file open. `user`: the user root acts for under sudo, trusted
/// with their own files as the privilege rule says.
pub fn vet(compilers: &[&Path], user: Option<u32>) -> Result<Vetted> {
    let rule = Rule {
        euid: crate::owner::euid(),
        user,
    };
    let mut v = Vetted {
        libs: Vec::new(),
        compilers: Vec::new(),
    };
    for &compiler in compilers {
        let at = v.add(compiler, compiler, Role::It, rule)?;
        v.compilers.push(at);
        // The child's loader has no LD_LIBRARY_PATH (its environment is
        // the tool's own); what it would find, it finds here.
        let mut sys = crate::loader::System::here()?;
        sys.ld_library_path = None;
        let real = v.libs[at].real.clone();
        let dir = real.parent().unwrap_or(Path::new("/")).to_owned();
        let deps = crate::loader::resolve_in(&real, &dir, &[], &sys)?;
        for dep in deps {
            let Some(path) = dep.path else {
                return Err(hint(
                    format!(
                        "cannot load {} {}: it needs {}, which is nowhere the loader looks",
                        super::kind(compiler),
                        compiler.display(),
                        dep.name
                    ),
                    "install what provides it (torch bundles its compiler's libraries), then run this again",
                ));
            };
            v.add(compiler, &path, Role::Needed, rule)?;
        }
    }
    v.order(compilers)?;
    Ok(v)
}

impl Vetted {
    /// Open and check `path` (the compiler itself, or a library it needs),
    /// unless it is already held; its index in `libs`.
    fn add(&mut self, compiler: &Path, path: &Path, role: Role, rule: Rule) -> Result<usize> {
        let file = crate::fsutil::open_regular(path)?;
        let meta = file.metadata().at("read", path)?;
        let id = (meta.dev(), meta.ino());
        if let Some(at) = self.libs.iter().position(|l| l.id == id) {
            return Ok(at);
        }
        let needed_dir = |p| match role {
            Role::Needed => Role::NeededDir(path),
            _ => p,
        };
        rule.check(compiler, path, &meta, &role)?;
        let real = path
            .canonicalize()
            .with_context(|| format!("cannot find {}", path.display()))?;
        let now = std::fs::metadata(&real).at("read", &real)?;
        if (now.dev(), now.ino()) != id {
            bail!(
                "{} changed while rdna1-patch checked it; nothing was loaded",
                path.display()
            );
        }
        let absolute = std::path::absolute(path)?;
        let mut seen: Vec<PathBuf> = Vec::new();
        for chain in [&absolute, &real] {
            for (i, dir) in chain.ancestors().skip(1).enumerate() {
                if seen.iter().any(|s| s == dir) {
                    continue;
                }
                seen.push(dir.to_owned());
                let m = std::fs::metadata(dir).at("read", dir)?;
                let role = needed_dir(if i == 0 { Role::Dir } else { Role::Above });
                rule.check_dir(compiler, dir, &m, &role, i == 0)?;
            }
        }
        let elf = crate::elf::dynamic_from(&|b, o| file.read_exact_at(b, o), meta.len())
            .with_context(|| format!("{} is not a loadable ELF file", path.display()))?;
        self.libs.push(Lib {
            path: path.to_owned(),
            real,
            file,
            id,
            soname: elf.soname,
            needed: elf
                .needed
                .into_iter()
                .filter(|n| !n.starts_with("ld-linux") && !n.starts_with("ld64.so"))
                .collect(),
        });
        Ok(self.libs.len() - 1)
    }

    /// Put `libs` in an order the loader takes without a search: each
    /// library after every one it needs, found by its SONAME.
    fn order(&mut self, compilers: &[&Path]) -> Result<()> {
        let answers =
            |libs: &[Lib], name: &str| libs.iter().position(|l| l.soname.as_deref() == Some(name));
        for (i, lib) in self.libs.iter().enumerate() {
            for name in &lib.needed {
                if answers(&self.libs, name).is_none() {
                    let compiler = compilers[self.owner_of(i)];
                    return Err(hint(
                        format!(
                            "cannot load {} {} as it was checked: {} needs {name}, and no library found for it names itself so (SONAME)",
                            super::kind(compiler),
                            compiler.display(),
                            lib.path.display()
                        ),
                        "reinstall torch (it bundles its compiler's libraries), then run this again",
                    ));
                }
            }
        }
        let mut order: Vec<usize> = Vec::new();
        while order.len() < self.libs.len() {
            let ready = (0..self.libs.len()).find(|i| {
                !order.contains(i)
                    && self.libs[*i].needed.iter().all(|n| {
                        answers(&self.libs, n).is_some_and(|a| a == *i || order.contains(&a))
                    })
            });
            let Some(next) = ready else {
                let stuck = (0..self.libs.len()).find(|i| !order.contains(i));
                bail!(
                    "cannot load {} as it was checked: its libraries need each other in a loop",
                    stuck.map_or(String::new(), |i| self.libs[i].path.display().to_string())
                );
            };
            order.push(next);
        }
        let mut libs: Vec<Option<Lib>> = self.libs.drain(..).map(Some).collect();
        self.libs = order
            .iter()
            .map(|&i| libs[i].take().expect("once"))
            .collect();
        for c in &mut self.compilers {
            *c = order.iter().position(|&i| i == *c).expect("ordered");
        }
        Ok(())
    }

    /// The compiler whose closure brought library `i` in (the first).
    fn owner_of(&self, i: usize) -> usize {
        self.compilers.iter().rposition(|&c| c <= i).unwrap_or(0)
    }

    /// The real path of compiler `n` (in the order asked).
    pub fn real(&self, n: usize) -> &Path {
        &self.libs[self.compilers[n]].real
    }

    /// Load every library through its open file, in order, for good (a
    /// compiler stays loaded for the child's life); the compilers' handles,
    /// in the order asked.
    pub fn load(&self) -> Result<Vec<*mut c_void>> {
        // The loader knows a library by the name it was opened by before
        // it looks at the file: a second load whose `/proc/self/fd/N` had
        // been another library's name in an earlier load got that other
        // library. So a file once loaded is known here by its identity and
        // never opened again, and the descriptor it was loaded through
        // stays open, its number never reused.
        static LOADED: std::sync::Mutex<Vec<((u64, u64), usize)>> =
            std::sync::Mutex::new(Vec::new());
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        let mut handles = Vec::with_capacity(self.libs.len());
        for lib in &self.libs {
            if let Some(&(_, h)) = loaded.iter().find(|(id, _)| *id == lib.id) {
                handles.push(h as *mut c_void);
                continue;
            }
            let kept = lib
                .file
                .try_clone()
                .with_context(|| format!("cannot load {}", lib.path.display()))?;
            let by_fd = format!("/proc/self/fd/{}", kept.as_raw_fd());
            let c = CString::new(by_fd).expect("no NUL");
            // SAFETY: loading a shared library runs its constructors: each
            // was checked by the rule above, and is loaded from the very
            // file that was checked, in the compile child.
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                return Err(anyhow!(
                    "cannot load {}: {}",
                    lib.path.display(),
                    super::dlerror()
                ));
            }
            // Kept open for the process's life: see above.
            std::mem::forget(kept);
            loaded.push((lib.id, handle as usize));
            handles.push(handle);
        }
        Ok(self.compilers.iter().map(|&c| handles[c]).collect())
    }
}

impl Rule {
    fn trusts(&self, owner: u32) -> bool {
        owner == self.euid || owner == 0 || Some(owner) == self.user
    }

    /// A file: owned by a trusted user, writable by no group or other.
    fn check(
        &self,
        compiler: &Path,
        path: &Path,
        meta: &std::fs::Metadata,
        role: &Role,
    ) -> Result<()> {
        self.check_dir(compiler, path, meta, role, true)
    }

    /// `strict`: a file, or a directory that holds one (which anyone who
    /// can write it can add a library to, found by name). A directory
    /// further up may let others write it if it is sticky (/tmp): they can
    /// then add entries, never replace the one on the path, whose owner is
    /// checked in turn.
    fn check_dir(
        &self,
        compiler: &Path,
        path: &Path,
        meta: &std::fs::Metadata,
        role: &Role,
        strict: bool,
    ) -> Result<()> {
        let what = match role {
            Role::It => "it".to_owned(),
            Role::Dir => format!("its directory {}", path.display()),
            Role::Above => format!("the directory {} above it", path.display()),
            Role::Needed => format!("{}, a library it needs,", path.display()),
            Role::NeededDir(lib) => format!(
                "the directory {} of {}, a library it needs,",
                path.display(),
                lib.display()
            ),
        };
        let refuse = |why: String, help: String| {
            hint(
                format!(
                    "will not load {} {}: {what} {why}",
                    super::kind(compiler),
                    compiler.display()
                ),
                help,
            )
        };
        let mode = meta.mode();
        let sticky = meta.is_dir() && mode & 0o1000 != 0;
        if mode & 0o022 != 0 && (strict || !sticky) {
            let who = if mode & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            };
            return Err(refuse(
                format!(
                    "can be written by {who} (mode {:o}), and loading it runs its code",
                    mode & 0o7777
                ),
                format!(
                    "let only its owner write it (`{}`), then run this again",
                    crate::shell::line([Path::new("chmod"), Path::new("go-w"), path])
                ),
            ));
        }
        let owner = meta.uid();
        if self.trusts(owner) {
            return Ok(());
        }
        Err(if self.euid == 0 {
            refuse(
                format!(
                    "belongs to uid {owner}, and rdna1-patch runs as root: loading it would run that user's code as root"
                ),
                "run rdna1-patch as the user who owns torch, without sudo".to_owned(),
            )
        } else {
            refuse(
                format!(
                    "belongs to uid {owner}, neither you (uid {}) nor root",
                    self.euid
                ),
                "run rdna1-patch as the user who owns torch".to_owned(),
            )
        })
    }
}
