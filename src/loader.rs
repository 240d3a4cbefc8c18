//! What the dynamic loader would load for a library, worked out the way
//! glibc's loader searches (elf/dl-load.c): RPATH up the chain of loaders,
//! LD_LIBRARY_PATH, RUNPATH, with `$ORIGIN`, then ld.so.cache and the
//! default directories, first match by SONAME or file. Only the files' ELF
//! headers are read: `ldd` runs the loader on the file, which loads the
//! library its DT_AUDIT names and runs that library's code (as root,
//! under sudo). The glibc-hwcaps subdirectories (glibc 2.33 on) are
//! searched as the loader searches them, by this CPU's x86-64 level
//! (`hwcaps`); GLIBC_TUNABLES' masks are assumed unset. `$PLATFORM` is
//! glibc's (`platform`); `$LIB` is assumed to be the
//! directory this process's libc came from. Not modelled, and said rather
//! than guessed: the legacy HWCAP subdirectories glibc before 2.37 still
//! searches (`haswell`, `tls`, ...): a library found in one is an error
//! naming it, never the baseline copy. LD_LIBRARY_PATH is this process's:
//! under sudo, which clears it, that of root's environment, not the user's.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::elf::Loadable;
use crate::fsutil::At;

pub(crate) mod ld_cache;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    /// None: "not found".
    pub path: Option<PathBuf>,
}

/// glibc's trusted directories: Debian's and Ubuntu's multiarch pair, the
/// lib64 pair of Fedora and openSUSE, and the plain pair every build has.
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// More objects than any program loads: a loop of names ends here.
const MAX_OBJECTS: usize = 4096;

/// What the loader looks at besides the files themselves.
pub(crate) struct System {
    pub ld_library_path: Option<OsString>,
    pub cache: ld_cache::Cache,
    pub default_dirs: Vec<PathBuf>,
}

impl System {
    /// This process's LD_LIBRARY_PATH, /etc/ld.so.cache and the default
    /// directories, as a program started from here would see them.
    pub fn here() -> Result<System> {
        Ok(System {
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH"),
            cache: ld_cache::read(Path::new("/etc/ld.so.cache"))
                .context("cannot read the dynamic loader's cache")?,
            default_dirs: DEFAULT_DIRS.iter().map(PathBuf::from).collect(),
        })
    }
}

/// Every library `path` would pull in, directly or not, in the loader's
/// (breadth-first) order; the loader itself left out.
/// `search` goes ahead of the loader's own path: the directories
/// whose libraries a preload (rocm_sdk's, RTLD_GLOBAL by absolute path) has
/// already put in the process, which satisfy a NEEDED entry by SONAME.
pub fn resolve(path: &Path, search: &[PathBuf]) -> Result<Vec<Dep>> {
    let dir = path.parent().unwrap_or(Path::new("."));
    resolve_in(path, dir, search, &System::here()?)
}

/// [`resolve`] for `file` as if it lay in `dir` (its `$ORIGIN`): a library
/// before it is put there.
pub fn resolve_as_in(file: &Path, dir: &Path, search: &[PathBuf]) -> Result<Vec<Dep>> {
    resolve_in(file, dir, search, &System::here()?)
}

pub(crate) fn resolve_in(
    file: &Path,
    dir: &Path,
    search: &[PathBuf],
    sys: &System,
) -> Result<Vec<Dep>> {
    let (elf, id) =
        open(file).with_context(|| format!("cannot tell what {} loads", file.display()))?;
    let origin = if dir.is_absolute() {
        dir.to_owned()
    } else {
        std::env::current_dir()?.join(dir)
    };
    let main = Object {
        path: file.to_owned(),
        origin,
        id,
        names: Vec::new(),
        elf,
        loader: None,
    };
    Walk {
        objects: vec![main],
        missing: Vec::new(),
        deps: Vec::new(),
        search,
        sys,
    }
    .run()
}

/// One file the loader has mapped.
struct Object {
    path: PathBuf,
    origin: PathBuf,
    /// (device, inode): one file found by two names is mapped once.
    id: (u64, u64),
    /// The names it was asked for by.
    names: Vec<String>,
    elf: Loadable,
    /// The object whose NEEDED entry brought it in.
    loader: Option<usize>,
}

impl Object {
    fn answers_to(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name) || self.elf.soname.as_deref() == Some(name)
    }
}

fn open(path: &Path) -> Result<(Loadable, (u64, u64))> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let file = crate::fsutil::open_regular(path)?;
    let meta = file.metadata().at("read", path)?;
    let elf = crate::elf::dynamic_from(&|b, o| file.read_exact_at(b, o), meta.len())
        .with_context(|| format!("{} is not a loadable ELF file", path.display()))?;
    Ok((elf, (meta.dev(), meta.ino())))
}

/// The dynamic loader itself, which every process already has: ldd names
/// it apart, not as a dependency.
fn is_the_loader(name: &str) -> bool {
    name.starts_with("ld-linux") || name.starts_with("ld64.so")
}

struct Walk<'a> {
    objects: Vec<Object>,
    missing: Vec<String>,
    deps: Vec<Dep>,
    search: &'a [PathBuf],
    sys: &'a System,
}

impl Walk<'_> {
    fn run(mut self) -> Result<Vec<Dep>> {
        let mut next = 0;
        while next < self.objects.len() {
            for name in self.objects[next].elf.needed.clone() {
                if is_the_loader(&name)
                    || self.objects.iter().any(|o| o.answers_to(&name))
                    || self.missing.contains(&name)
                {
                    continue;
                }
                self.load(name, next)?;
            }
            next += 1;
        }
        Ok(self.deps)
    }

    fn load(&mut self, name: String, loader: usize) -> Result<()> {
        let kind = self.objects[0].elf.kind;
        let mut found = None;
        for path in self.candidates(&name, loader) {
            if let Some(dir) = path.parent()
                && let Some(legacy) = legacy_copy(dir, &name)
            {
                bail!(
                    "cannot tell which {name} the loader takes: {} lies in a legacy HWCAP subdirectory of {}, which glibc before 2.37 may prefer to {} and rdna1-patch does not model",
                    legacy.display(),
                    dir.display(),
                    path.display()
                );
            }
            if let Ok((elf, id)) = open(&path)
                && elf.kind == kind
            {
                found = Some((path, elf, id));
                break;
            }
        }
        let Some((path, elf, id)) = found else {
            self.deps.push(Dep {
                name: name.clone(),
                path: None,
            });
            self.missing.push(name);
            return Ok(());
        };
        if let Some(same) = self.objects.iter_mut().find(|o| o.id == id) {
            same.names.push(name);
            return Ok(());
        }
        if self.objects.len() >= MAX_OBJECTS {
            bail!(
                "{} would load more than {MAX_OBJECTS} libraries",
                self.objects[0].path.display()
            );
        }
        self.deps.push(Dep {
            name: name.clone(),
            path: Some(path.clone()),
        });
        self.objects.push(Object {
            origin: path.parent().unwrap_or(Path::new("")).to_owned(),
            path,
            id,
            names: vec![name],
            elf,
            loader: Some(loader),
        });
        Ok(())
    }

    /// Where the loader looks for `name`, NEEDED by object `loader`, in
    /// its order.
    fn candidates(&self, name: &str, loader: usize) -> Vec<PathBuf> {
        let by = &self.objects[loader];
        if name.contains('/') {
            return expand(name.as_bytes(), &by.origin)
                .map(PathBuf::from)
                .into_iter()
                .collect();
        }
        let mut dirs: Vec<PathBuf> = self.search.to_vec();
        // RPATH, when the one asking has no RUNPATH: its own, then its
        // loader's, up to the main object.
        if by.elf.runpath.is_none() {
            let mut at = Some(loader);
            while let Some(i) = at {
                let o = &self.objects[i];
                if let Some(rpath) = &o.elf.rpath {
                    dirs.extend(path_list(rpath.as_bytes(), &o.origin));
                }
                at = o.loader;
            }
        }
        if let Some(env) = &self.sys.ld_library_path {
            dirs.extend(path_list(env.as_bytes(), &self.objects[0].origin));
        }
        if let Some(runpath) = &by.elf.runpath {
            dirs.extend(path_list(runpath.as_bytes(), &by.origin));
        }
        let mut out: Vec<PathBuf> = self.search.iter().map(|d| d.join(name)).collect();
        out.extend(
            dirs[self.search.len()..]
                .iter()
                .flat_map(|d| in_dir(d, name)),
        );
        if !by.elf.nodeflib {
            let mut cached: Vec<(usize, PathBuf)> = self
                .sys
                .cache
                .iter()
                .filter(|(key, _)| key == name)
                .filter_map(|(_, path)| Some((hwcaps_rank(path)?, path.clone())))
                .collect();
            cached.sort_by_key(|(rank, _)| *rank);
            out.extend(cached.into_iter().map(|(_, p)| p));
            out.extend(self.sys.default_dirs.iter().flat_map(|d| in_dir(d, name)));
        }
        out
    }
}

/// The glibc-hwcaps subdirectories the loader searches on this CPU, in its
/// order: the x86-64 levels it supports, highest first (glibc's
/// sysdeps/x86/dl-hwcaps-subdirs.c, by the same CPU features).
pub fn hwcaps() -> &'static [&'static str] {
    static LEVELS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    LEVELS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let v2 = has!("cmpxchg16b")
                && has!("popcnt")
                && has!("sse3")
                && has!("sse4.1")
                && has!("sse4.2")
                && has!("ssse3");
            let v3 = v2
                && has!("avx")
                && has!("avx2")
                && has!("bmi1")
                && has!("bmi2")
                && has!("f16c")
                && has!("fma")
                && has!("lzcnt")
                && has!("movbe")
                && has!("xsave");
            let v4 = v3
                && has!("avx512f")
                && has!("avx512bw")
                && has!("avx512cd")
                && has!("avx512dq")
                && has!("avx512vl");
            [("x86-64-v4", v4), ("x86-64-v3", v3), ("x86-64-v2", v2)]
                .into_iter()
                .filter(|(_, ok)| *ok)
                .map(|(n, _)| n)
                .collect()
        }
        #[cfg(not(target_arch = "x86_64"))]
        Vec::new()
    })
}

/// Where `path` (an ld.so.cache entry) stands among the copies of one
/// name: its glibc-hwcaps level's place, the baseline after them all;
/// None for a level this CPU's loader does not search.
fn hwcaps_rank(path: &Path) -> Option<usize> {
    let level = path.parent()?;
    match level.parent()?.file_name() {
        Some(n) if n == "glibc-hwcaps" => {
            let sub = level.file_name()?.to_str()?;
            hwcaps().iter().position(|h| *h == sub)
        }
        _ => Some(hwcaps().len()),
    }
}

/// Whether this system's glibc is older than 2.37, which stopped searching
/// the legacy HWCAP subdirectories.
fn legacy_searched() -> bool {
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let mut parts = v
        .to_str()
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) < (2, 37)
}

/// The legacy HWCAP subdirectories glibc 2.36 still searches on x86-64.
const LEGACY_HWCAPS: &[&str] = &["haswell", "xeon_phi", "tls", "avx512_1", "x86_64"];

/// The files the loader tries for `name` in search directory `dir`: its
/// glibc-hwcaps subdirectories, then `dir` itself.
fn in_dir(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = hwcaps()
        .iter()
        .map(|h| dir.join("glibc-hwcaps").join(h).join(name))
        .collect();
    out.push(dir.join(name));
    out
}

/// A copy of `name` in a legacy HWCAP subdirectory of `dir` (up to three
/// deep, as `haswell/avx512_1/x86_64`), if any, where this system's glibc
/// still searches them (before 2.37).
fn legacy_copy(dir: &Path, name: &str) -> Option<PathBuf> {
    if !legacy_searched() {
        return None;
    }
    let mut todo: Vec<(PathBuf, usize)> = LEGACY_HWCAPS.iter().map(|l| (dir.join(l), 1)).collect();
    while let Some((d, depth)) = todo.pop() {
        if !d.is_dir() {
            continue;
        }
        if d.join(name).exists() {
            return Some(d.join(name));
        }
        if depth < 3 {
            todo.extend(LEGACY_HWCAPS.iter().map(|l| (d.join(l), depth + 1)));
        }
    }
    None
}

/// The directories of a colon (or semicolon) separated list, `$ORIGIN`
/// expanded; an empty entry is the current directory, as for the loader.
fn path_list(list: &[u8], origin: &Path) -> Vec<PathBuf> {
    list.split(|b| *b == b':' || *b == b';')
        .filter_map(|entry| expand(entry, origin))
        .map(PathBuf::from)
        .collect()
}

/// `entry` with `$ORIGIN` replaced by `origin`, `$PLATFORM` by the
/// loader's AT_PLATFORM and `$LIB` by its library dir (each also braced);
/// None when one of the loader's own cannot be told. Any other `$` stays,
/// as for the loader.
fn expand(entry: &[u8], origin: &Path) -> Option<OsString> {
    let token = |rest: &[u8], name: &[u8]| -> Option<usize> {
        let braced = [b"{".as_slice(), name, b"}"].concat();
        if rest.starts_with(&braced) {
            return Some(braced.len());
        }
        let ends = |b: &u8| !(b.is_ascii_alphanumeric() || *b == b'_');
        (rest.starts_with(name) && rest.get(name.len()).is_none_or(ends)).then_some(name.len())
    };
    let mut out = Vec::with_capacity(entry.len());
    let mut rest = entry;
    while let Some(at) = rest.iter().position(|b| *b == b'$') {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(len) = token(after, b"ORIGIN") {
            out.extend_from_slice(origin.as_os_str().as_bytes());
            rest = &after[len..];
        } else if let Some(len) = token(after, b"PLATFORM") {
            out.extend_from_slice(platform()?.as_bytes());
            rest = &after[len..];
        } else if let Some(len) = token(after, b"LIB") {
            out.extend_from_slice(lib_token()?.as_bytes());
            rest = &after[len..];
        } else {
            out.push(b'$');
            rest = after;
        }
    }
    out.extend_from_slice(rest);
    Some(OsString::from_vec(out))
}

/// `$PLATFORM`: on an Intel x86-64 CPU, glibc's own name for its level
/// (`haswell`, sysdeps/x86/cpu-features.c, by the same CPU features; the
/// Xeon Phi's `xeon_phi` is not told apart); otherwise the kernel's
/// AT_PLATFORM, which this process has too (getauxval).
fn platform() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        // CPUID leaf 0 (the vendor) exists on every x86-64 CPU.
        let id = std::arch::x86_64::__cpuid(0);
        let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        if vendor == b"GenuineIntel"
            && has!("avx2")
            && has!("fma")
            && has!("bmi1")
            && has!("bmi2")
            && has!("lzcnt")
            && has!("movbe")
            && has!("popcnt")
        {
            return Some("haswell".to_owned());
        }
    }
    auxv_platform()
}

fn auxv_platform() -> Option<String> {
    // SAFETY: getauxval returns 0 or a pointer to a static NUL-terminated
    // string the kernel put in this process's auxiliary vector.
    let p = unsafe { libc::getauxval(libc::AT_PLATFORM) } as *const libc::c_char;
    if p.is_null() {
        return None;
    }
    // SAFETY: as above.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_str().ok().map(str::to_owned)
}

/// `$LIB`: the directory the loader was built to find libc in, relative to
/// `/` (Debian's `lib/x86_64-linux-gnu`, Fedora's `lib64`), assumed to be
/// the one this process's own libc was loaded from.
fn lib_token() -> Option<String> {
    static LIB: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let libc = maps.lines().find_map(|l| {
            let path = l.split_whitespace().nth(5)?;
            Path::new(path)
                .file_name()
                .is_some_and(|n| n == "libc.so.6")
                .then(|| path.to_owned())
        })?;
        let dir = Path::new(&libc).parent()?.strip_prefix("/").ok()?;
        // /usr/lib64 and /lib64 are one directory merged: the loader's own
        // name for it is the one without /usr.
        let dir = dir.strip_prefix("usr").unwrap_or(dir);
        dir.to_str().map(str::to_owned)
    })
    .clone()
}

/// Names the loader could not find.
pub fn missing(deps: &[Dep]) -> Vec<&str> {
    deps.iter()
        .filter(|d| d.path.is_none())
        .map(|d| d.name.as_str())
        .collect()
}

/// Libraries that `lib_dir` bundles and the dependencies load from somewhere
/// else too: each (bundled file, the other copy). Compared by name stem and
/// path, since a wheel renames its copies (libamdhip64.so.6 -> libamdhip64.so).
pub fn second_copies(deps: &[Dep], lib_dirs: &[PathBuf]) -> Result<Vec<(String, PathBuf)>> {
    let mut bundled = Vec::new();
    for d in lib_dirs {
        bundled.extend(bundled_names(d)?);
    }
    let lib_dirs: Vec<PathBuf> = lib_dirs
        .iter()
        .map(|d| d.canonicalize().unwrap_or(d.to_owned()))
        .collect();
    let mut out = Vec::new();
    for dep in deps {
        let Some(path) = &dep.path else { continue };
        let dir = path
            .parent()
            .map(|d| d.canonicalize().unwrap_or(d.to_owned()));
        if dir.as_ref().is_some_and(|d| lib_dirs.contains(d)) {
            continue;
        }
        let stem = crate::elf::stem(&dep.name);
        if let Some(b) = bundled.iter().find(|b| crate::elf::stem(b) == stem) {
            out.push((b.clone(), path.clone()));
        }
    }
    Ok(out)
}

/// File names of the shared libraries in `lib_dir`.
pub fn bundled_names(lib_dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(lib_dir).at("read", lib_dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.contains(".so") && !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Every library `lib` loads, as the loader would find them from its own
/// directory with no LD_LIBRARY_PATH (how the compile child loads a
/// compiler); None when one cannot be found or read.
pub fn loaded_by(lib: &Path) -> Option<Vec<PathBuf>> {
    let mut sys = System::here().ok()?;
    sys.ld_library_path = None;
    let real = lib.canonicalize().ok()?;
    let dir = real.parent().unwrap_or(Path::new("/")).to_owned();
    resolve_in(&real, &dir, &[], &sys)
        .ok()?
        .into_iter()
        .map(|d| d.path)
        .collect()
}

#[cfg(test)]
mod tests;
