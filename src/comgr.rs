//! The Code Object Manager (comgr) that torch's own MIOpen compiles its
//! kernels with, loaded with dlopen, to compile an OpenCL kernel text the
//! way MIOpen's `comgr::BuildOcl` does: add the precompiled OpenCL header,
//! compile with the device libraries to bitcode, generate code. Nothing
//! runs on a GPU; what the assembler rejects (DPP row_bcast on gfx10) is
//! rejected here as it is at run time.
//!
//! comgr 3 renumbered its actions, so the numbers come from its version.

use std::ffi::{CString, c_char, c_void};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

const DATA_SOURCE: u32 = 1;
const DATA_LOG: u32 = 5;
const DATA_RELOCATABLE: u32 = 7;
/// The most of a code object or a log taken from comgr: a batch-norm
/// kernel's object is tens of KiB; a size past this is not believed.
const OUTPUT_LIMIT: usize = 64 << 20;
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

impl Comgr {
    /// Load the comgr at `path` (the user's own, as torch loads it).
    pub fn open(path: &Path) -> Result<Comgr> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| anyhow!("{} has a NUL in its name", path.display()))?;
        // SAFETY: loading a shared library runs its constructors: it is the
        // comgr torch itself loads.
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

    /// Compile OpenCL `text` for `arch` (e.g. "gfx1010") with MIOpen's
    /// options and `defines`, as BuildOcl does up to the code object.
    /// `Err`: the compiler's first errors, or what failed.
    pub fn compile_ocl(
        &self,
        name: &str,
        text: &[u8],
        arch: &str,
        defines: &[String],
    ) -> std::result::Result<(), String> {
        self.compile_object(name, text, arch, defines)
            .map(drop)
            .map_err(|log| summary(&log))
    }

    /// As [`Comgr::compile_ocl`], with the code object made; a failure
    /// gives comgr's whole log (bounded).
    pub fn compile_object(
        &self,
        name: &str,
        text: &[u8],
        arch: &str,
        defines: &[String],
    ) -> std::result::Result<Vec<u8>, String> {
        // One compile at a time in a process: the compile's stderr is
        // silenced by swapping descriptor 2 (process-wide), and comgr's
        // LLVM reports a failed inline asm through process-wide state too;
        // two threads compiling at once left stderr closed or aborted.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut owned = Owned {
            api: &self.api,
            data: Vec::new(),
            sets: Vec::new(),
            info: None,
        };
        owned.compile(self.actions, name, text, arch, defines)
    }
}

/// A failed compile's log in a line: its first three errors.
fn summary(log: &str) -> String {
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("error"))
        .take(3)
        .collect();
    match errors.is_empty() {
        true => log.trim().to_owned(),
        false => errors.join(" / "),
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
        defines: &[String],
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
        let options: Vec<CString> = MIOPEN_OPTIONS
            .iter()
            .map(|s| (*s).to_owned())
            .chain(defines.iter().cloned())
            .map(|s| CString::new(s).map_err(|e| e.to_string()))
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
        // comgr's assembler reports to the process's stderr as well as to
        // the log; the log is what is shown, once.
        let _quiet = Quiet::stderr();
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
                let log = self.log(out);
                return Err(if log.trim().is_empty() {
                    format!("comgr could not {what} (status {status})")
                } else {
                    log
                });
            }
            from = out;
        }
        self.first_of(from, DATA_RELOCATABLE)
            .ok_or_else(|| "comgr generated no code object".to_owned())
    }

    /// The bytes of the first datum of `kind` in `set`, at most
    /// [`OUTPUT_LIMIT`] of them.
    fn first_of(&mut self, set: Handle, kind: u32) -> Option<Vec<u8>> {
        let api = self.api;
        let mut d = 0;
        let mut size = 0;
        // SAFETY: handles made here; the buffer is sized from comgr's answer,
        // which is refused past the limit before anything is allocated.
        unsafe {
            if (api.get_data_at)(set, kind, 0, &raw mut d) != 0 {
                return None;
            }
            self.data.push(d);
            if (api.get_data)(d, &raw mut size, std::ptr::null_mut()) != 0 || size > OUTPUT_LIMIT {
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

    /// The compile log an action left in `set`.
    fn log(&mut self, set: Handle) -> String {
        let api = self.api;
        let mut n = 0;
        let mut text = String::new();
        // SAFETY: handles made here; buffers sized from comgr's answer.
        unsafe {
            if (api.data_count)(set, DATA_LOG, &raw mut n) != 0 {
                return text;
            }
            for i in 0..n {
                let mut d = 0;
                if (api.get_data_at)(set, DATA_LOG, i, &raw mut d) != 0 {
                    continue;
                }
                self.data.push(d);
                let mut size = 0;
                if (api.get_data)(d, &raw mut size, std::ptr::null_mut()) != 0
                    || size > OUTPUT_LIMIT
                {
                    continue;
                }
                let mut buf = vec![0u8; size];
                if (api.get_data)(d, &raw mut size, buf.as_mut_ptr().cast()) == 0 {
                    text.push_str(&String::from_utf8_lossy(&buf[..size.min(buf.len())]));
                }
            }
        }
        text
    }
}

/// stderr sent to /dev/null while it lives, then put back.
struct Quiet {
    saved: i32,
}

impl Quiet {
    fn stderr() -> Option<Quiet> {
        // SAFETY: plain descriptor calls; on any failure nothing changes.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if null < 0 {
                return None;
            }
            let saved = libc::dup(2);
            let ok = saved >= 0 && libc::dup2(null, 2) >= 0;
            libc::close(null);
            if !ok {
                if saved >= 0 {
                    libc::close(saved);
                }
                return None;
            }
            Some(Quiet { saved })
        }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        // SAFETY: restores the descriptor saved above, once.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
    }
}

impl crate::verdict::Compiler for Comgr {
    fn describe(&self) -> String {
        format!(
            "comgr {}.{} ({})",
            self.version.0,
            self.version.1,
            self.path.display()
        )
    }

    fn compile(&self, job: &crate::verdict::Job) -> crate::verdict::Compiled {
        match self.compile_object(job.name, job.text, job.arch, job.defines) {
            Ok(object) => crate::verdict::Compiled::Object(object),
            Err(log) => crate::verdict::Compiled::Failed(log),
        }
    }
}
