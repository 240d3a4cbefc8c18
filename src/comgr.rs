//! The Code Object Manager (comgr) that torch's own MIOpen compiles its
//! kernels with, loaded with dlopen, to compile an OpenCL kernel text the
//! way MIOpen's `comgr::BuildOcl` does: add the precompiled OpenCL header,
//! compile with the device libraries to bitcode, generate code. Nothing
//! runs on a GPU; what the assembler rejects (DPP row_bcast on gfx10) is
//! rejected here as it is at run time.
//!
//! comgr 3 renumbered its actions, so the numbers come from its version.
//!
//! Loading a comgr runs its code: only one no one else could have written
//! is loaded ([`check_trusted`]), and the check runs it in a child process
//! ([`child`]) under a time limit, its answers bounded.

pub mod child;
pub mod hiprtc;

use std::ffi::{CString, c_char, c_void};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use crate::error::hint;

const DATA_SOURCE: u32 = 1;
const DATA_LOG: u32 = 5;
const DATA_RELOCATABLE: u32 = 7;
const LANGUAGE_OPENCL_2_0: u32 = 2;

/// The actions BuildOcl takes, as numbered by one comgr major version.
#[derive(Debug, Clone, Copy)]
struct Actions {
    add_pch: u32,
    compile_with_device_libs: u32,
    codegen: u32,
}

fn actions(major: usize) -> Option<Actions> {
    match major {
        2 => Some(Actions {
            add_pch: 0x1,
            compile_with_device_libs: 0xF,
            codegen: 0x6,
        }),
        3 => Some(Actions {
            add_pch: 0x1,
            compile_with_device_libs: 0xC,
            codegen: 0x4,
        }),
        _ => None,
    }
}

/// The most log a compile may leave: a real one is a few KB; a comgr that
/// claims more is refused, and nothing is allocated for it.
pub const LOG_CAP: usize = 16 << 20;
/// The most log data sets one action may leave.
const LOGS_CAP: usize = 64;

/// MIOpen's own options for an OpenCL compile through comgr
/// (compiler::lc::ocl::AddCompilerOptions).
pub const MIOPEN_OPTIONS: &[&str] = &[
    "-cl-std=CL2.0",
    "-cl-kernel-arg-info",
    "-D__IMAGE_SUPPORT__=1",
    "-D__OPENCL_VERSION__=200",
    "-mllvm",
    "-amdgpu-early-inline-all",
    "-mllvm",
    "-amdgpu-prelink",
    "-mwavefrontsize64",
    "-mcumode",
    "-O3",
];

type Handle = u64;
type Status = u32;

struct Api {
    get_version: unsafe extern "C" fn(*mut usize, *mut usize),
    create_data: unsafe extern "C" fn(u32, *mut Handle) -> Status,
    release_data: unsafe extern "C" fn(Handle) -> Status,
    set_data: unsafe extern "C" fn(Handle, usize, *const c_char) -> Status,
    set_data_name: unsafe extern "C" fn(Handle, *const c_char) -> Status,
    get_data: unsafe extern "C" fn(Handle, *mut usize, *mut c_char) -> Status,
    create_data_set: unsafe extern "C" fn(*mut Handle) -> Status,
    destroy_data_set: unsafe extern "C" fn(Handle) -> Status,
    data_set_add: unsafe extern "C" fn(Handle, Handle) -> Status,
    data_count: unsafe extern "C" fn(Handle, u32, *mut usize) -> Status,
    get_data_at: unsafe extern "C" fn(Handle, u32, usize, *mut Handle) -> Status,
    create_action_info: unsafe extern "C" fn(*mut Handle) -> Status,
    destroy_action_info: unsafe extern "C" fn(Handle) -> Status,
    set_language: unsafe extern "C" fn(Handle, u32) -> Status,
    set_isa_name: unsafe extern "C" fn(Handle, *const c_char) -> Status,
    set_option_list: unsafe extern "C" fn(Handle, *const *const c_char, usize) -> Status,
    set_logging: unsafe extern "C" fn(Handle, bool) -> Status,
    do_action: unsafe extern "C" fn(u32, Handle, Handle, Handle) -> Status,
}

/// A loaded comgr.
pub struct Comgr {
    pub path: PathBuf,
    pub version: (usize, usize),
    api: Api,
    actions: Actions,
}

/// The comgr beside a library, as torch and MIOpen find it: the newest
/// `libamd_comgr.so*` in one of `dirs`.
pub fn find(dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().find_map(|dir| {
        crate::fsutil::entries_named(dir, |n| n.starts_with("libamd_comgr.so")).pop()
    })
}

fn sym<T: Copy>(lib: *mut c_void, name: &str) -> Result<T> {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: dlsym on a handle dlopen gave; the caller names the type the
    // comgr header declares for that symbol.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        bail!("it has no {name}");
    }
    // SAFETY: T is a function pointer type of the same size as a pointer.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// Refuse a comgr that someone else could have written: loading it runs
/// its code as this process's user. The file, its directory and, for a
/// symlink, the directory the name is in, must be owned by this user or
/// root and writable by no group or other; as root, by root alone.
/// Returns the file's real path, the one to load.
pub fn check_trusted(path: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let real = path
        .canonicalize()
        .with_context(|| format!("cannot find {}", path.display()))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let dir = |p: &Path| p.parent().unwrap_or(Path::new("/")).to_owned();
    let mut checked = vec![dir(path), real.clone(), dir(&real)];
    checked.dedup();
    for p in &checked {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        let what = if *p == real {
            "it".to_owned()
        } else {
            format!("its directory {}", p.display())
        };
        let refuse = |why: String, help: String| {
            hint(
                format!(
                    "will not load {} {}: {what} {why}",
                    kind(path),
                    path.display()
                ),
                help,
            )
        };
        if meta.mode() & 0o022 != 0 {
            let who = if meta.mode() & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            };
            return Err(refuse(
                format!(
                    "can be written by {who} (mode {:o}), and loading it runs its code",
                    meta.mode() & 0o7777
                ),
                format!(
                    "let only its owner write it (`chmod go-w {}`), then run this again",
                    p.display()
                ),
            ));
        }
        let owner = meta.uid();
        // Under sudo, the user it acts for is trusted with their own torch
        // (SECURITY.md's privilege rule); anyone else is not.
        if owner != euid && owner != 0 && Some(owner) != crate::owner::invoking_user() {
            return Err(if euid == 0 {
                refuse(
                    format!(
                        "belongs to uid {owner}, and rdna1-patch runs as root: loading it would run that user's code as root"
                    ),
                    "run rdna1-patch as the user who owns torch, without sudo".to_owned(),
                )
            } else {
                refuse(
                    format!("belongs to uid {owner}, neither you (uid {euid}) nor root"),
                    "run rdna1-patch as the user who owns torch".to_owned(),
                )
            });
        }
    }
    Ok(real)
}

/// Which compiler a path names, for a message.
fn kind(path: &Path) -> &'static str {
    match path.file_name().and_then(|n| n.to_str()) {
        Some(n) if n.starts_with("libamd_comgr") => "comgr",
        _ => "hipRTC",
    }
}

/// dlopen `real` (the checked path of `path`) for good: a compiler stays
/// loaded for the child's life.
fn dlopen(real: &Path, path: &Path) -> Result<*mut c_void> {
    let c = CString::new(real.as_os_str().as_encoded_bytes())
        .map_err(|_| anyhow!("{} has a NUL in its name", path.display()))?;
    // SAFETY: loading a shared library runs its constructors: it is the
    // compiler torch's MIOpen itself loads, from where only its owner or root can
    // write, and the compile check loads it in a child process.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        // SAFETY: dlerror returns a C string or null.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "unknown".to_owned()
        } else {
            // SAFETY: non-null C string from dlerror.
            unsafe { std::ffi::CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        bail!("cannot load {}: {why}", path.display());
    }
    Ok(lib)
}

impl Comgr {
    /// Load the comgr at `path` (the user's own, as torch loads it), once
    /// [`check_trusted`] has passed it.
    pub fn open(path: &Path) -> Result<Comgr> {
        let real = check_trusted(path)?;
        let lib = dlopen(&real, path)?;
        let api = (|| -> Result<Api> {
            Ok(Api {
                get_version: sym(lib, "amd_comgr_get_version")?,
                create_data: sym(lib, "amd_comgr_create_data")?,
                release_data: sym(lib, "amd_comgr_release_data")?,
                set_data: sym(lib, "amd_comgr_set_data")?,
                set_data_name: sym(lib, "amd_comgr_set_data_name")?,
                get_data: sym(lib, "amd_comgr_get_data")?,
                create_data_set: sym(lib, "amd_comgr_create_data_set")?,
                destroy_data_set: sym(lib, "amd_comgr_destroy_data_set")?,
                data_set_add: sym(lib, "amd_comgr_data_set_add")?,
                data_count: sym(lib, "amd_comgr_action_data_count")?,
                get_data_at: sym(lib, "amd_comgr_action_data_get_data")?,
                create_action_info: sym(lib, "amd_comgr_create_action_info")?,
                destroy_action_info: sym(lib, "amd_comgr_destroy_action_info")?,
                set_language: sym(lib, "amd_comgr_action_info_set_language")?,
                set_isa_name: sym(lib, "amd_comgr_action_info_set_isa_name")?,
                set_option_list: sym(lib, "amd_comgr_action_info_set_option_list")?,
                set_logging: sym(lib, "amd_comgr_action_info_set_logging")?,
                do_action: sym(lib, "amd_comgr_do_action")?,
            })
        })()
        .map_err(|e| anyhow!("{} is not a comgr: {e}", path.display()))?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two out-pointers to usize, as declared.
        unsafe { (api.get_version)(&raw mut major, &raw mut minor) };
        let actions = actions(major).ok_or_else(|| {
            anyhow!(
                "{} is comgr {major}.{minor}; rdna1-patch knows comgr 2 and 3",
                path.display()
            )
        })?;
        Ok(Comgr {
            path: path.to_owned(),
            version: (major, minor),
            api,
            actions,
        })
    }

    /// Compile OpenCL `text` for `arch` (e.g. "gfx1010") with `options`
    /// (MIOpen's are [`MIOPEN_OPTIONS`]), as BuildOcl does up to the code
    /// object, which it returns. `Err`: the compiler's first errors, or
    /// what failed.
    pub fn compile_ocl(
        &self,
        name: &str,
        text: &[u8],
        arch: &str,
        options: &[String],
    ) -> std::result::Result<Vec<u8>, String> {
        // One compile at a time in a process: comgr's LLVM reports a failed
        // inline asm through process-wide state; two threads compiling at
        // once aborted.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut owned = Owned {
            api: &self.api,
            data: Vec::new(),
            sets: Vec::new(),
            info: None,
        };
        owned.compile(self.actions, name, text, arch, options)
    }
}

/// Every handle made for one compile, released when it goes.
struct Owned<'a> {
    api: &'a Api,
    data: Vec<Handle>,
    sets: Vec<Handle>,
    info: Option<Handle>,
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: handles this compile created, each released once.
        unsafe {
            for d in &self.data {
                (self.api.release_data)(*d);
            }
            for s in &self.sets {
                (self.api.destroy_data_set)(*s);
            }
            if let Some(i) = self.info {
                (self.api.destroy_action_info)(i);
            }
        }
    }
}

impl Owned<'_> {
    fn ok(status: Status, what: &str) -> std::result::Result<(), String> {
        if status == 0 {
            Ok(())
        } else {
            Err(format!("comgr could not {what} (status {status})"))
        }
    }

    fn set(&mut self) -> std::result::Result<Handle, String> {
        let mut h = 0;
        // SAFETY: an out-pointer, as declared.
        Self::ok(
            unsafe { (self.api.create_data_set)(&raw mut h) },
            "make a data set",
        )?;
        self.sets.push(h);
        Ok(h)
    }

    fn compile(
        &mut self,
        actions: Actions,
        name: &str,
        text: &[u8],
        arch: &str,
        options: &[String],
    ) -> std::result::Result<Vec<u8>, String> {
        let api = self.api;
        let input = self.set()?;
        let mut data = 0;
        let cname = CString::new(name).map_err(|_| "a NUL in the name".to_owned())?;
        // SAFETY: each call gets handles made here and pointers that live
        // for the call; comgr copies what it keeps.
        unsafe {
            Self::ok((api.create_data)(DATA_SOURCE, &raw mut data), "make data")?;
            self.data.push(data);
            Self::ok(
                (api.set_data)(data, text.len(), text.as_ptr().cast()),
                "take the text",
            )?;
            Self::ok((api.set_data_name)(data, cname.as_ptr()), "name the text")?;
            Self::ok((api.data_set_add)(input, data), "add the text")?;
        }
        let mut info = 0;
        let isa = CString::new(format!("amdgcn-amd-amdhsa--{arch}")).map_err(|e| e.to_string())?;
        let options: Vec<CString> = options
            .iter()
            .map(|s| CString::new(s.as_str()).map_err(|e| e.to_string()))
            .collect::<std::result::Result<_, _>>()?;
        let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: as above.
        unsafe {
            Self::ok((api.create_action_info)(&raw mut info), "make an action")?;
            self.info = Some(info);
            Self::ok(
                (api.set_language)(info, LANGUAGE_OPENCL_2_0),
                "set OpenCL 2.0",
            )?;
            Self::ok(
                (api.set_isa_name)(info, isa.as_ptr()),
                &format!("take the target {arch}"),
            )?;
            Self::ok(
                (api.set_option_list)(info, pointers.as_ptr(), pointers.len()),
                "take the options",
            )?;
            Self::ok((api.set_logging)(info, true), "log")?;
        }
        let mut from = input;
        for (step, what) in [
            (actions.add_pch, "add the OpenCL header"),
            (actions.compile_with_device_libs, "compile"),
            (actions.codegen, "generate code"),
        ] {
            let out = self.set()?;
            // SAFETY: as above.
            let status = unsafe { (api.do_action)(step, info, from, out) };
            if status != 0 {
                let log = self.log(out)?;
                let errors: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("error"))
                    .take(3)
                    .collect();
                return Err(if errors.is_empty() {
                    format!("comgr could not {what} (status {status})")
                } else {
                    errors.join(" / ")
                });
            }
            from = out;
        }
        self.first_of(from, DATA_RELOCATABLE)
            .ok_or_else(|| "comgr generated no code object".to_owned())
    }

    /// The bytes of the first datum of `kind` in `set`, at most
    /// [`LOG_CAP`] of them: a batch-norm kernel's object is tens of KiB.
    fn first_of(&mut self, set: Handle, kind: u32) -> Option<Vec<u8>> {
        let api = self.api;
        let (mut d, mut size) = (0, 0);
        // SAFETY: handles made here; the buffer is sized from comgr's
        // answer, refused past the cap before anything is allocated.
        unsafe {
            if (api.get_data_at)(set, kind, 0, &raw mut d) != 0 {
                return None;
            }
            self.data.push(d);
            if (api.get_data)(d, &raw mut size, std::ptr::null_mut()) != 0 || size > LOG_CAP {
                return None;
            }
            let mut buf = vec![0u8; size];
            if (api.get_data)(d, &raw mut size, buf.as_mut_ptr().cast()) != 0 {
                return None;
            }
            buf.truncate(size);
            Some(buf)
        }
    }

    /// The compile log an action left in `set`; an error when comgr
    /// claims more than [`LOG_CAP`] of it.
    fn log(&mut self, set: Handle) -> std::result::Result<String, String> {
        let api = self.api;
        let mut n = 0;
        let mut text = String::new();
        // SAFETY: handles made here; buffers sized from comgr's answer,
        // once it is under the cap.
        unsafe {
            if (api.data_count)(set, DATA_LOG, &raw mut n) != 0 {
                return Ok(text);
            }
            for i in 0..n.min(LOGS_CAP) {
                let mut d = 0;
                if (api.get_data_at)(set, DATA_LOG, i, &raw mut d) != 0 {
                    continue;
                }
                self.data.push(d);
                let mut size = 0;
                if (api.get_data)(d, &raw mut size, std::ptr::null_mut()) != 0 {
                    continue;
                }
                if size.saturating_add(text.len()) > LOG_CAP {
                    return Err(format!(
                        "comgr's compile log is {size} bytes, over the {} MiB any compile leaves",
                        LOG_CAP >> 20
                    ));
                }
                let mut buf = vec![0u8; size];
                if (api.get_data)(d, &raw mut size, buf.as_mut_ptr().cast()) == 0 {
                    text.push_str(&String::from_utf8_lossy(&buf[..size.min(buf.len())]));
                }
            }
        }
        Ok(text)
    }
}

/// In this process, for tests and tools that load a comgr they trust
/// (`verdict` through the child process is what the verbs use).
impl crate::verdict::Compiler for Comgr {
    fn describe(&self) -> String {
        format!(
            "comgr {}.{} ({})",
            self.version.0,
            self.version.1,
            self.path.display()
        )
    }

    fn compile(&self, job: &crate::verdict::Job) -> anyhow::Result<crate::verdict::Compiled> {
        let options: Vec<String> = MIOPEN_OPTIONS
            .iter()
            .map(|o| (*o).to_owned())
            .chain(job.defines.iter().cloned())
            .collect();
        Ok(
            match self.compile_ocl(job.name, job.text, job.arch, &options) {
                Ok(object) => {
                    crate::verdict::Compiled::Object(crate::elf::code_digest(&object).into_bytes())
                }
                Err(log) => crate::verdict::Compiled::Failed(log),
            },
        )
    }
}
