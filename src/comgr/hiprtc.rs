//! hipRTC, which MIOpen compiles its HIP kernels with (7.x's batch norm
//! among them), loaded with dlopen to compile a HIP kernel text the way
//! MIOpen's `hiprtc::BuildHip` does: every header the text includes handed
//! over by name, MIOpen's own options, one program per target. Nothing runs
//! on a GPU. As with comgr, only a library no one else could have written
//! is loaded, and only in the compile child.
//!
//! Before ROCm 5.3 hipRTC was part of the HIP runtime (`libamdhip64.so.5`
//! exports `hiprtc*`); since, it is `libhiprtc.so.N` beside it.

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};

/// hipRTC's status codes are C enums: 0 is success.
type Status = c_int;
type Program = *mut c_void;

struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    code_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    code: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
    /// hiprtcGetBitcodeSize and hiprtcGetBitcode, which hipRTC has since
    /// ROCm 5.3: what a `-fgpu-rdc` compile stops at (the preprocessed
    /// text, with `-E`).
    bitcode: Option<(
        unsafe extern "C" fn(Program, *mut usize) -> Status,
        unsafe extern "C" fn(Program, *mut c_char) -> Status,
    )>,
}

pub struct Hiprtc {
    pub path: PathBuf,
    pub version: (usize, usize),
    api: Api,
}

/// The hipRTC beside a library, as MIOpen loads it: the newest
/// `libhiprtc.so*` in one of `dirs`; else a HIP runtime of before ROCm 5.3,
/// which carries hipRTC itself.
pub fn find(dirs: &[PathBuf]) -> Option<PathBuf> {
    let named = |prefix: &'static str| {
        dirs.iter().find_map(move |dir| {
            crate::fsutil::entries_named(dir, |n| {
                n.starts_with(prefix) && !n.starts_with("libhiprtc-builtins")
            })
            .pop()
        })
    };
    named("libhiprtc.so").or_else(|| {
        named("libamdhip64.so").filter(|p| {
            crate::elf::read_file(p)
                .ok()
                .and_then(|b| crate::elf::exports(&b, "hiprtcCompileProgram").ok())
                .unwrap_or(false)
        })
    })
}

/// MIOpen's own options for a HIP compile through hipRTC (BuildHip), as
/// its builds for ROCm 6 and 7 pass them; `version` is hipRTC's, which
/// MIOpen's `HIP_PACKAGE_VERSION_FLAT` matches.
pub fn miopen_options(arch: &str, version: (usize, usize)) -> Vec<String> {
    let flat = version.0 as u64 * 1_000_000_000 + version.1 as u64 * 1_000_000;
    let mut o: Vec<String> = vec![
        format!("--offload-arch={arch}"),
        "-D__HIP_PLATFORM_AMD__=1".into(),
        format!("-DHIP_PACKAGE_VERSION_FLAT={flat}"),
        "-DMIOPEN_DONT_USE_HIP_RUNTIME_HEADERS".into(),
    ];
    if version.0 < 6 {
        o.push("-D__HIP_PLATFORM_HCC__=1".into());
        o.push("-DWORKAROUND_DONT_USE_CUSTOM_LIMITS=1".into());
    }
    if arch.starts_with("gfx10") || arch.starts_with("gfx11") {
        o.push("-DWORKAROUND_ISSUE_1431=1".into());
    }
    for w in [
        "-Wno-newline-eof",
        "-Wno-reserved-identifier",
        "-Wno-old-style-cast",
        "-Wno-extra-semi-stmt",
        "-Wno-gnu-line-marker",
        "-Wno-pass-failed",
        "-Wno-cuda-compat",
        "-fno-gpu-rdc",
        "-O3",
        "-std=c++17",
    ] {
        o.push(w.into());
    }
    // The clang of ROCm 6 on has it (MIOpen's WORKAROUND_SWDEV_413293);
    // 5.x's rejects it.
    if version.0 >= 6 {
        o.push("-fno-offload-uniform-block".into());
    }
    o
}

/// How an answer begins when hipRTC cannot stop at its preprocessor: the
/// proof then compiles the case to code.
pub const NO_FRONT_END: &str = "hipRTC cannot stop after its preprocessor";

/// Preprocessed text with comgr's temp directory (`$TMPDIR/comgr-1a2b3c/`,
/// another each compile, and the compile child's TMPDIR another each
/// child) made one name, `*/`, in its line markers.
fn without_temp_dirs(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for line in text.split_inclusive(|&b| b == b'\n') {
        let quoted = line
            .starts_with(b"# ")
            .then(|| memchr::memchr(b'"', line))
            .flatten();
        let dir = quoted.and_then(|q| {
            let at = memchr::memmem::rfind(&line[q..], b"/comgr-")? + q;
            let end = at + "/comgr-".len();
            let id = line[end..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric())
                .count();
            Some((q + 1, end + id))
        });
        match dir {
            Some((start, end)) => {
                out.extend_from_slice(&line[..start]);
                out.push(b'*');
                out.extend_from_slice(&line[end..]);
            }
            None => out.extend_from_slice(line),
        }
    }
    out
}

/// (major, minor) from a versioned file name: `libhiprtc.so.6.4.43484`.
fn file_version(real: &Path) -> Option<(usize, usize)> {
    let name = real.file_name()?.to_str()?;
    let rest = &name[name.find(".so.")? + 4..];
    let mut parts = rest.split('.').map(|p| p.parse::<usize>().ok());
    Some((parts.next()??, parts.next()??))
}

/// HIP's own version for the hipRTC whose real file is `real`, which
/// MIOpen's options follow (`HIP_PACKAGE_VERSION_FLAT`): the real file's
/// name where it carries it (libhiprtc.so.6.4.43484); else, for a file
/// named by its soname alone as wheels ship it (libhiprtc.so.7), the HIP
/// runtime beside it, by its file name or its ELF version definitions
/// (`hip_5.2`), then the file's own definitions; hipRTC's own answer
/// (`asked`) only where its major is the soname's, as 5.2's, which
/// answers 9.0, is not. With none of these, the soname's major, minor 0.
fn version(real: &Path, asked: impl Fn() -> Option<(usize, usize)>) -> Option<(usize, usize)> {
    if let Some(v) = file_version(real) {
        return Some(v);
    }
    let major = soname_major(real);
    let same = |v: &(usize, usize)| major.is_none_or(|m| v.0 == m);
    let beside: Vec<PathBuf> = real
        .parent()
        .map(|dir| crate::fsutil::entries_named(dir, |n| n.starts_with("libamdhip64.so")))
        .unwrap_or_default();
    let by_name = beside.iter().find_map(|p| {
        let real = std::fs::canonicalize(p).ok()?;
        file_version(&real).filter(same)
    });
    let defined = || {
        beside
            .iter()
            .map(PathBuf::as_path)
            .chain(std::iter::once(real))
            .find_map(|p| defined_version(p).filter(same))
    };
    by_name
        .or_else(defined)
        .or_else(|| asked().filter(|v| major.is_some_and(|m| v.0 == m)))
        .or_else(|| major.map(|m| (m, 0)))
        .or_else(asked)
}

/// N of a file named `lib<name>.so.N`.
fn soname_major(real: &Path) -> Option<usize> {
    let name = real.file_name()?.to_str()?;
    name[name.find(".so.")? + 4..]
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// The newest `hip_M.N` (or `hiprtc_M.N`) version a HIP library's ELF
/// defines for its symbols: each release that added to its interface
/// defines its own, so the newest is its release, or a little before.
fn defined_version(file: &Path) -> Option<(usize, usize)> {
    let bytes = crate::elf::read_file(file).ok()?;
    let elf = goblin::elf::Elf::parse(&bytes).ok()?;
    let verdef = elf.verdef.as_ref()?;
    verdef
        .iter()
        .flat_map(|d| d.iter().collect::<Vec<_>>())
        .filter_map(|aux| {
            let name = elf.dynstrtab.get_at(aux.vda_name)?;
            let rest = name
                .strip_prefix("hiprtc_")
                .or_else(|| name.strip_prefix("hip_"))?;
            let (a, b) = rest.split_once('.')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .max()
}

/// One program, destroyed when it goes.
struct Owned<'a> {
    api: &'a Api,
    prog: Program,
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: a program this compile created, destroyed once.
        unsafe { (self.api.destroy)(&raw mut self.prog) };
    }
}

impl Hiprtc {
    /// Load the hipRTC at `path` in this process, once `vet` has passed it
    /// and all it needs.
    pub fn open(path: &Path) -> Result<Hiprtc> {
        let v = super::vet::vet(&[path], crate::owner::invoking_user())?;
        super::swap_point();
        Hiprtc::from_handle(path, v.real(0), v.load()?[0])
    }

    /// The hipRTC loaded as `lib` (a dlopen handle), named `path`, its
    /// real file `real`.
    pub(crate) fn from_handle(path: &Path, real: &Path, lib: *mut c_void) -> Result<Hiprtc> {
        let api = (|| -> Result<Api> {
            Ok(Api {
                version: super::sym(lib, "hiprtcVersion")?,
                create: super::sym(lib, "hiprtcCreateProgram")?,
                compile: super::sym(lib, "hiprtcCompileProgram")?,
                log_size: super::sym(lib, "hiprtcGetProgramLogSize")?,
                log: super::sym(lib, "hiprtcGetProgramLog")?,
                code_size: super::sym(lib, "hiprtcGetCodeSize")?,
                code: super::sym(lib, "hiprtcGetCode")?,
                destroy: super::sym(lib, "hiprtcDestroyProgram")?,
                bitcode: super::sym(lib, "hiprtcGetBitcodeSize")
                    .and_then(|size| Ok((size, super::sym(lib, "hiprtcGetBitcode")?)))
                    .ok(),
            })
        })()
        .map_err(|e| anyhow!("{} is not a hipRTC: {e}", path.display()))?;
        let asked = || {
            let (mut major, mut minor) = (0, 0);
            // SAFETY: two out-pointers to int, as declared.
            let status = unsafe { (api.version)(&raw mut major, &raw mut minor) };
            (status == 0).then_some((major as usize, minor as usize))
        };
        let version = version(real, asked)
            .ok_or_else(|| anyhow!("{} does not say its version", path.display()))?;
        Ok(Hiprtc {
            path: path.to_owned(),
            version,
            api,
        })
    }

    /// Compile HIP `text` (named `name`, with `headers` by their include
    /// names) with `options`; the code object, or the compiler's log.
    pub fn compile_hip(
        &self,
        name: &str,
        text: &[u8],
        headers: &[(String, Vec<u8>)],
        options: &[String],
    ) -> std::result::Result<Vec<u8>, String> {
        let owned = self.program(name, text, headers, options)?;
        self.take(&owned, self.api.code_size, self.api.code, "code")
    }

    /// HIP `text` as [`compile_hip`] would compile it, preprocessed by
    /// hipRTC itself (its own headers and macros, `-fgpu-rdc -E`, which
    /// stops before any code): the same text and options preprocess to
    /// the same tokens and lines exactly when the compile's input is the
    /// same, which decides its code. comgr's temp directory, another each
    /// compile, is taken out of the line markers. A hipRTC before ROCm
    /// 5.3 has no such stop: an error that says so.
    ///
    /// [`compile_hip`]: Hiprtc::compile_hip
    pub fn front_end_hip(
        &self,
        name: &str,
        text: &[u8],
        headers: &[(String, Vec<u8>)],
        options: &[String],
    ) -> std::result::Result<Vec<u8>, String> {
        let Some((size, get)) = self.api.bitcode else {
            return Err(format!(
                "{NO_FRONT_END} (hipRTC {}.{} has no hiprtcGetBitcode)",
                self.version.0, self.version.1
            ));
        };
        let mut options: Vec<String> = options
            .iter()
            .filter(|o| *o != "-fno-gpu-rdc")
            .cloned()
            .collect();
        // -fgpu-rdc predefines __CLANG_RDC__, which the compile to code
        // (-fno-gpu-rdc) does not: undefined again, the macros are its.
        options.extend(["-fgpu-rdc", "-U__CLANG_RDC__", "-E"].map(str::to_owned));
        let owned = self.program(name, text, headers, &options)?;
        let text = self.take(&owned, size, get, "preprocessed text")?;
        Ok(without_temp_dirs(&text))
    }

    /// A program of `text` with `headers`, compiled with `options`.
    fn program(
        &self,
        name: &str,
        text: &[u8],
        headers: &[(String, Vec<u8>)],
        options: &[String],
    ) -> std::result::Result<Owned<'_>, String> {
        let c = |b: &[u8]| CString::new(b).map_err(|_| "a text with a NUL in it".to_owned());
        let text = c(text)?;
        let name = c(name.as_bytes())?;
        let names: Vec<CString> = headers
            .iter()
            .map(|(n, _)| c(n.as_bytes()))
            .collect::<std::result::Result<_, _>>()?;
        let texts: Vec<CString> = headers
            .iter()
            .map(|(_, t)| c(t))
            .collect::<std::result::Result<_, _>>()?;
        let name_ptrs: Vec<*const c_char> = names.iter().map(|s| s.as_ptr()).collect();
        let text_ptrs: Vec<*const c_char> = texts.iter().map(|s| s.as_ptr()).collect();
        let opts: Vec<CString> = options
            .iter()
            .map(|o| c(o.as_bytes()))
            .collect::<std::result::Result<_, _>>()?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();
        let count = c_int::try_from(headers.len()).map_err(|_| "too many headers".to_owned())?;
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: every pointer is to a live NUL-terminated string, the
        // arrays hold `count` of them, as hiprtcCreateProgram declares.
        let status = unsafe {
            (self.api.create)(
                &raw mut prog,
                text.as_ptr(),
                name.as_ptr(),
                count,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        };
        if status != 0 || prog.is_null() {
            return Err(format!("hipRTC could not make a program (status {status})"));
        }
        let owned = Owned {
            api: &self.api,
            prog,
        };
        let n = c_int::try_from(opt_ptrs.len()).map_err(|_| "too many options".to_owned())?;
        // SAFETY: a program hipRTC made; `n` option strings, as declared.
        let status = unsafe { (self.api.compile)(owned.prog, n, opt_ptrs.as_ptr()) };
        if status != 0 {
            return Err(self.log(&owned).unwrap_or_else(|| {
                format!("hipRTC could not compile {name:?} (status {status})")
            }));
        }
        Ok(owned)
    }

    /// What a compiled program holds (`what`: its code, its bitcode),
    /// through hipRTC's pair of size and copy calls.
    fn take(
        &self,
        owned: &Owned,
        size_of: unsafe extern "C" fn(Program, *mut usize) -> Status,
        copy: unsafe extern "C" fn(Program, *mut c_char) -> Status,
        what: &str,
    ) -> std::result::Result<Vec<u8>, String> {
        let mut size = 0usize;
        // SAFETY: an out-pointer to size_t, as declared.
        if unsafe { size_of(owned.prog, &raw mut size) } != 0 || size == 0 {
            return Err(format!("hipRTC compiled, and gave no {what}"));
        }
        if size > super::LOG_CAP * 4 {
            return Err(format!("hipRTC claims {size} bytes of {what}"));
        }
        let mut out = vec![0u8; size];
        // SAFETY: a buffer of the size hipRTC gave.
        if unsafe { copy(owned.prog, out.as_mut_ptr().cast()) } != 0 {
            return Err(format!(
                "hipRTC compiled, and would not hand over its {what}"
            ));
        }
        Ok(out)
    }

    fn log(&self, owned: &Owned) -> Option<String> {
        let mut size = 0usize;
        // SAFETY: an out-pointer to size_t, as declared.
        if unsafe { (self.api.log_size)(owned.prog, &raw mut size) } != 0 || size < 2 {
            return None;
        }
        if size > super::LOG_CAP {
            return Some(format!("hipRTC failed, and claims a log of {size} bytes"));
        }
        let mut log = vec![0u8; size];
        // SAFETY: a buffer of the size hipRTC gave.
        if unsafe { (self.api.log)(owned.prog, log.as_mut_ptr().cast()) } != 0 {
            return None;
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        Some(String::from_utf8_lossy(&log[..end]).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiles_temp_dirs_are_one_name_in_line_markers_only() {
        let text = b"# 1 \"/tmp/rdna1-patch-compile-Xy12/comgr-d5ccc7/input/k.cpp\"\n# 7 \"/tmp/comgr-d5ccc7/include/h.hpp\" 2\n# 1 \"<built-in>\" 3\nint comgr_x = 1; // /tmp/comgr-abc/\n";
        assert_eq!(
            String::from_utf8_lossy(&without_temp_dirs(text)),
            "# 1 \"*/input/k.cpp\"\n# 7 \"*/include/h.hpp\" 2\n# 1 \"<built-in>\" 3\nint comgr_x = 1; // /tmp/comgr-abc/\n"
        );
    }

    #[test]
    fn the_version_is_read_from_the_real_file_name() {
        let v = |n: &str| file_version(Path::new(n));
        assert_eq!(v("/usr/lib/libhiprtc.so.6.4.43484"), Some((6, 4)));
        assert_eq!(v("/usr/lib/libamdhip64.so.5.2.21153"), Some((5, 2)));
        assert_eq!(v("/opt/rocm/lib/libhiprtc.so.7"), None);
    }

    #[test]
    fn miopens_options_follow_the_hip_version() {
        let five = miopen_options("gfx1010", (5, 2));
        assert!(five.contains(&"-D__HIP_PLATFORM_HCC__=1".to_owned()));
        assert!(!five.contains(&"-fno-offload-uniform-block".to_owned()));
        let seven = miopen_options("gfx1030", (7, 2));
        assert!(seven.contains(&"-DHIP_PACKAGE_VERSION_FLAT=7002000000".to_owned()));
        assert!(seven.contains(&"-fno-offload-uniform-block".to_owned()));
        assert!(seven.contains(&"-DWORKAROUND_ISSUE_1431=1".to_owned()));
        assert!(
            !miopen_options("gfx906", (7, 2)).contains(&"-DWORKAROUND_ISSUE_1431=1".to_owned())
        );
    }
}
