//! The Code Object Manager (comgr) that torch's own MIOpen compiles its
//! kernels with, loaded with dlopen, to compile an OpenCL kernel text the
//! way MIOpen's `comgr::BuildOcl` does: add the precompiled OpenCL header,
//! compile with the device libraries to bitcode, generate code. Nothing
//! runs on a GPU; what the assembler rejects (DPP row_bcast on gfx10) is
//! rejected here as it is at run time.
//!
//! comgr 3 renumbered its actions, so the numbers come from its version.
//!
//! Loading a comgr runs its code: only one no one else could have written,
//! needing only libraries no one else could have written, is loaded
//! ([`vet`]), from the very files checked, and the check runs it in a
//! child process ([`child`]) under a time limit, its answers bounded, as
//! the user root acts for under sudo.

pub mod child;
pub mod hiprtc;
pub mod vet;

use std::ffi::{CString, c_char, c_void};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

const DATA_SOURCE: u32 = 1;
const DATA_LOG: u32 = 5;
const DATA_BC: u32 = 6;
const DATA_RELOCATABLE: u32 = 7;
const LANGUAGE_OPENCL_2_0: u32 = 2;

/// The actions BuildOcl takes, as numbered by one comgr major version.
#[derive(Debug, Clone, Copy)]
struct Actions {
    add_pch: u32,
    compile_with_device_libs: u32,
    codegen: u32,
    /// COMPILE_SOURCE_TO_BC: the front end alone, no device libraries.
    compile_to_bc: u32,
}

fn actions(major: usize) -> Option<Actions> {
    match major {
        2 => Some(Actions {
            add_pch: 0x1,
            compile_with_device_libs: 0xF,
            codegen: 0x6,
            compile_to_bc: 0x2,
        }),
        3 => Some(Actions {
            add_pch: 0x1,
            compile_with_device_libs: 0xC,
            codegen: 0x4,
            compile_to_bc: 0x2,
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

/// Refuse a comgr (or hipRTC) that someone else could have written, or
/// that needs a library someone else could have written ([`vet`]):
/// loading it runs its code as this process's user. Returns the file's
/// real path. The compile child vets again what it loads, and loads what
/// it vetted.
pub fn check_trusted(path: &Path) -> Result<PathBuf> {
    let v = vet::vet(&[path], crate::owner::invoking_user())?;
    Ok(v.real(0).to_owned())
}

/// A test's race between the check of a compiler and its load (cargo
/// feature `failpoints`): `FAILPOINTS=compiler-vetted=return(A,B)`
/// exchanges the directories A and B there, as someone who could write
/// them would between the check and the load.
pub(crate) fn swap_point() {
    #[cfg(feature = "failpoints")]
    fail::eval("compiler-vetted", |arg: Option<String>| {
        let arg = arg.unwrap_or_default();
        let Some((a, b)) = arg.split_once(',') else {
            return;
        };
        crate::fsutil::exchange(Path::new(a), Path::new(b))
            .unwrap_or_else(|e| panic!("the failpoint could not exchange {arg}: {e}"));
    });
}

/// Which compiler a path names, for a message.
fn kind(path: &Path) -> &'static str {
    match path.file_name().and_then(|n| n.to_str()) {
        Some(n) if n.starts_with("libamd_comgr") => "comgr",
        _ => "hipRTC",
    }
}

/// What dlopen said last.
fn dlerror() -> String {
    // SAFETY: dlerror returns a C string or null.
    let why = unsafe { libc::dlerror() };
    if why.is_null() {
        return "unknown".to_owned();
    }
    // SAFETY: non-null C string from dlerror.
    unsafe { std::ffi::CStr::from_ptr(why) }
        .to_string_lossy()
        .into_owned()
}

impl Comgr {
    /// Load the comgr at `path` (the user's own, as torch loads it) in
    /// this process, once [`vet`] has passed it and all it needs.
    pub fn open(path: &Path) -> Result<Comgr> {
        let v = vet::vet(&[path], crate::owner::invoking_user())?;
        swap_point();
        Comgr::from_handle(path, v.load()?[0])
    }

    /// The comgr loaded as `lib` (a dlopen handle), named `path`.
    pub(crate) fn from_handle(path: &Path, lib: *mut c_void) -> Result<Comgr> {
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

    /// The one lock every comgr action of this process takes, with a
    /// fresh set of handles to free: one compile or front end at a time,
    /// as comgr's LLVM reports a failed inline asm through process-wide
    /// state (two threads compiling at once aborted).
    fn owned(&self) -> (std::sync::MutexGuard<'static, ()>, Owned<'_>) {
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let owned = Owned {
            api: &self.api,
            data: Vec::new(),
            sets: Vec::new(),
            info: None,
        };
        (one, owned)
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
        let (_one, mut owned) = self.owned();
        let a = self.actions;
        let steps = [
            (a.add_pch, "add the OpenCL header"),
            (a.compile_with_device_libs, "compile"),
            (a.codegen, "generate code"),
        ];
        owned.compile(&steps, DATA_RELOCATABLE, name, text, arch, options)
    }

    /// What the front end makes of OpenCL `text` for `arch` with
    /// `options`: its LLVM IR before any pass (COMPILE_SOURCE_TO_BC with
    /// `-S -Xclang -disable-llvm-passes`), without the lines that name
    /// comgr's temp file. Two compiles whose IR, options and target are
    /// the same give the same code: the device libraries, the passes and
    /// the code generator are the same.
    pub fn front_end_ocl(
        &self,
        name: &str,
        text: &[u8],
        arch: &str,
        options: &[String],
    ) -> std::result::Result<Vec<u8>, String> {
        let (_one, mut owned) = self.owned();
        let a = self.actions;
        let steps = [
            (a.add_pch, "add the OpenCL header"),
            (a.compile_to_bc, "compile to IR"),
        ];
        let mut options = options.to_vec();
        options.extend(["-S", "-Xclang", "-disable-llvm-passes"].map(str::to_owned));
        let ir = owned.compile(&steps, DATA_BC, name, text, arch, &options)?;
        Ok(ir_without_names(&ir))
    }
}

/// LLVM IR without the lines that name the file it was compiled from
/// (comgr's temp file, another each compile).
fn ir_without_names(ir: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ir.len());
    for line in ir.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b"; ModuleID") || line.starts_with(b"source_filename") {
            continue;
        }
        out.extend_from_slice(line);
    }
    out
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

    /// `steps` from the source to the first datum of `kind`.
    fn compile(
        &mut self,
        steps: &[(u32, &str)],
        kind: u32,
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
        for &(step, what) in steps {
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
        self.first_of(from, kind).ok_or_else(|| match kind {
            DATA_RELOCATABLE => "comgr generated no code object".to_owned(),
            _ => "comgr gave no output".to_owned(),
        })
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
/// (the diagnosis through the child process is what the verbs use).
impl crate::compile::Compiler for Comgr {
    fn describe(&self) -> String {
        format!(
            "comgr {}.{} ({})",
            self.version.0,
            self.version.1,
            self.path.display()
        )
    }

    fn compile(&self, job: &crate::compile::Job) -> anyhow::Result<crate::compile::Compiled> {
        let options: Vec<String> = MIOPEN_OPTIONS
            .iter()
            .map(|o| (*o).to_owned())
            .chain(job.defines.iter().cloned())
            .collect();
        if job.front_end {
            return Ok(
                match self.front_end_ocl(job.name, job.text, job.arch, &options) {
                    Ok(ir) => crate::compile::Compiled::Object(ir_digest(&ir).into_bytes()),
                    Err(log) => crate::compile::Compiled::Failed(log),
                },
            );
        }
        Ok(
            match self.compile_ocl(job.name, job.text, job.arch, &options) {
                Ok(object) => {
                    crate::compile::Compiled::Object(crate::elf::code_digest(&object).into_bytes())
                }
                Err(log) => crate::compile::Compiled::Failed(log),
            },
        )
    }
}

/// The SHA-256 of a front end's IR, as hex: what a front-end compile
/// answers in place of a code object's digest.
pub fn ir_digest(ir: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    crate::checksum::hex(&Sha256::digest(ir))
}
