//! Fixture sandboxes shared by the e2e tests, `cargo xtask demo` and
//! `cargo xtask bench`: a real tagged git origin made from the miopen-mini
//! project, a fake ROCm dir whose HIP runtime is a real ELF library, the
//! fixture's patch series, a profile pointing at all of them, and fake torch
//! packages with real ELF libraries.

pub mod ccob;
mod debian;
pub mod figures;
pub mod registry;
mod rocblas;
mod rocm_sdk;
mod wheel;

pub use debian::{DEBIAN_ROCBLAS_TARGETS, bundle_debian_rocblas, debian_code, debian_tensile};
pub use rocblas::{RocblasFixture, TENSILE_TAG};
pub use rocm_sdk::{FakeRocmSdk, SdkShape, TORCH_PRELOADS, record_hash};
pub use wheel::{torch_wheel, vision_wheel};

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's tests/fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The variable the binary reads its sysfs root from instead of `/sys`.
pub const SYSFS_ENV: &str = "RDNA1_PATCH_SYSFS";

/// A recorded sysfs tree of tests/fixtures/sysfs, e.g. `rx5600xt-gfx1010`.
pub fn gpus(tree: &str) -> PathBuf {
    fixtures().join("sysfs").join(tree)
}

/// The binary at `bin`, reading the GPUs from `tests/fixtures/sysfs/TREE`
/// (`no-gpu`, `rx5600xt-gfx1010`, ...) whatever this machine has.
pub fn binary_with_gpus(bin: &Path, tree: &str) -> Command {
    let mut c = Command::new(bin);
    c.env(SYSFS_ENV, gpus(tree));
    c
}

/// Run git in `dir` with a fixed identity and no user or system config.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "fixture")
        .env("GIT_AUTHOR_EMAIL", "fixture@rdna1-patch.invalid")
        .env("GIT_COMMITTER_NAME", "fixture")
        .env("GIT_COMMITTER_EMAIL", "fixture@rdna1-patch.invalid")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Copy a tree, keeping symlinks as symlinks.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            copy_dir(&e.path(), &dest);
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Run a helper program the tests need (a compiler, minisign, python) and
/// insist it succeeds; the command and all it printed are shown if not.
pub fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Build tests/fixtures/fake-runtime in `dir` (incrementally, if it was
/// built there before) and install it to `dir/out`: `rocm/lib/libamdhip64.so*`
/// and `torch/lib/*.so`. Returns `dir/out`.
pub fn build_runtime(dir: &Path) -> PathBuf {
    let build = dir.join("build");
    run(Command::new("cmake")
        .arg("-S")
        .arg(fixtures().join("fake-runtime"))
        .arg("-B")
        .arg(&build));
    run(Command::new("cmake").arg("--build").arg(&build));
    run(Command::new("cmake")
        .arg("--install")
        .arg(&build)
        .arg("--prefix")
        .arg(dir.join("out")));
    dir.join("out")
}

/// `<dir>/libtorch_hip.so` with GPU code for `archs` that loads
/// librocblas.so from `rocblas` (and from its own directory, $ORIGIN) and
/// MIOpen and HIP from `torch_lib`: a torch whose rocBLAS rows are read.
pub fn torch_hip_with_rocblas(
    dir: &std::path::Path,
    archs: &[&str],
    rocblas: &std::path::Path,
    torch_lib: &std::path::Path,
) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let (rocblas, torch_lib) = (
        rocblas.display().to_string(),
        torch_lib.display().to_string(),
    );
    let built = fat_library_linking(
        dir,
        archs,
        &[
            "-L",
            &rocblas,
            "-L",
            &torch_lib,
            "-lrocblas",
            "-lMIOpen",
            "-lamdhip64",
            "-Wl,-rpath,$ORIGIN",
        ],
    );
    let lib = dir.join("libtorch_hip.so");
    std::fs::rename(built, &lib).unwrap();
    lib
}

/// Plain code objects, as Tensile's `.co` files are: a one-line OpenCL
/// kernel built by clang's amdgcn target for each of `archs`, written
/// `<dir>/<arch>.co`.
pub fn code_objects(dir: &std::path::Path, archs: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("k.cl");
    std::fs::write(&src, "kernel void k(global int* p) { *p = 1; }\n").unwrap();
    for arch in archs {
        run(std::process::Command::new("clang")
            .args(["-target", "amdgcn-amd-amdhsa", "-nogpulib", "-x", "cl"])
            .arg(format!("-mcpu={arch}"))
            .arg(&src)
            .arg("-o")
            .arg(dir.join(format!("{arch}.co"))));
    }
}

/// A library with real GPU code objects for `archs`, built by clang in HIP
/// mode as torch's libtorch_hip.so is (without HIP headers: the host side
/// only needs the launch entry point declared).
pub fn fat_library(dir: &std::path::Path, archs: &[&str]) -> std::path::PathBuf {
    fat_library_linking(dir, archs, &[])
}

/// [`fat_library`], linked with `link` (e.g. `-L DIR -lMIOpen`): a
/// libtorch_hip.so with GPU code that also loads torch's MIOpen.
pub fn fat_library_linking(
    dir: &std::path::Path,
    archs: &[&str],
    link: &[&str],
) -> std::path::PathBuf {
    let src = dir.join("k.hip");
    std::fs::write(
        &src,
        "typedef struct { unsigned x, y, z; } dim3_t;\n\
         extern \"C\" int hipLaunchKernel(const void*, dim3_t, dim3_t, void**, unsigned long, void*);\n\
         __attribute__((global)) void k(int* p) { *p = 1; }\n",
    )
    .unwrap();
    let out = dir.join(format!("libtorch_hip-{}.so", archs.join("-")));
    // clang 14's HIP driver leaves an empty `k-XXXXXX` dir in $TMPDIR per
    // compile: give it one inside `dir`, which goes with the test.
    let tmp = dir.join("clang-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut c = std::process::Command::new("clang++");
    c.env("TMPDIR", &tmp);
    c.args(["-x", "hip", "-nogpulib", "-nogpuinc", "-fPIC", "-shared"]);
    for a in archs {
        c.arg(format!("--offload-arch={a}"));
    }
    let run = c.arg(&src).args(link).arg("-o").arg(&out).output().expect(
        "this test needs clang with the AMDGPU target, lld and clang-offload-bundler (Debian: clang lld clang-tools-14)",
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// Everything `rdna1-patch build` needs, under one root.
pub struct Fixture {
    pub root: PathBuf,
    pub origin: PathBuf,
    pub rocm: PathBuf,
    pub series: PathBuf,
    pub profile: PathBuf,
    pub work: PathBuf,
    pub prefix: PathBuf,
}

impl Fixture {
    /// `runtime` is what [`build_runtime`] returned.
    pub fn create(root: &Path, runtime: &Path) -> Fixture {
        let origin = root.join("origin");
        copy_dir(&fixtures().join("miopen-mini"), &origin);
        git(&origin, &["init", "-q", "-b", "main"]);
        git(&origin, &["add", "-A"]);
        git(&origin, &["commit", "-q", "-m", "MIOpen mini"]);
        git(&origin, &["tag", "-a", "rocm-6.2.4", "-m", "rocm-6.2.4"]);
        let rocm = root.join("rocm");
        std::fs::create_dir_all(rocm.join(".info")).unwrap();
        std::fs::write(rocm.join(".info/version"), "6.2.4-120\n").unwrap();
        copy_dir(&runtime.join("rocm/lib"), &rocm.join("lib"));
        let series = root.join("series");
        copy_dir(&fixtures().join("series/miopen-mini"), &series);
        let fx = Fixture {
            root: root.to_owned(),
            profile: root.join("mini.toml"),
            work: root.join("work"),
            prefix: root.join("prefix"),
            origin,
            rocm,
            series,
        };
        fx.write_profile(|t| t);
        fx
    }

    /// A monorepo in the shape of ROCm/rocm-libraries, made beside the
    /// origin: the fixture project in `projects/miopen`, another project
    /// of `other_files` files, `shared/ctest` (which MIOpen's CMake reads)
    /// and top-level files; tag `rocm-6.2.4`. It serves partial clones
    /// (`uploadpack.allowFilter`), as GitHub does. Returns its file:// URL.
    pub fn make_monorepo(&self, other_files: usize) -> String {
        let mono = self.root.join("monorepo");
        copy_dir(
            &fixtures().join("miopen-mini"),
            &mono.join("projects/miopen"),
        );
        let other = mono.join("projects/rocblas/library");
        std::fs::create_dir_all(&other).unwrap();
        for i in 0..other_files {
            std::fs::write(
                other.join(format!("kernel{i}.cpp")),
                format!("// kernel {i}\nint k{i}();\n"),
            )
            .unwrap();
        }
        std::fs::create_dir_all(mono.join("shared/ctest")).unwrap();
        std::fs::write(
            mono.join("shared/ctest/TestCategories.cmake"),
            "# read by the projects' test CMake\n",
        )
        .unwrap();
        std::fs::write(mono.join("README.md"), "# a monorepo\n").unwrap();
        git(&mono, &["init", "-q", "-b", "develop"]);
        git(&mono, &["config", "uploadpack.allowFilter", "true"]);
        // No detached auto gc pruning objects under a running fetch.
        git(&mono, &["config", "gc.auto", "0"]);
        git(&mono, &["add", "-A"]);
        git(&mono, &["commit", "-q", "-m", "monorepo"]);
        git(&mono, &["tag", "-a", "rocm-6.2.4", "-m", "rocm-6.2.4"]);
        format!("file://{}", mono.display())
    }

    /// Write the profile, letting the caller edit the template text first.
    pub fn write_profile(&self, edit: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(fixtures().join("profiles/mini.toml"))
            .unwrap()
            .replace("@URL@", self.origin.to_str().unwrap())
            .replace("@PATCHES@", "series")
            .replace("@PREFIX@", self.prefix.to_str().unwrap());
        std::fs::write(&self.profile, edit(text)).unwrap();
    }

    /// The binary at `bin` as this fixture's builds run it: with no GPU,
    /// whatever this machine has, so GPU_TARGETS stays the profile's.
    pub fn command(&self, bin: &Path) -> Command {
        binary_with_gpus(bin, "no-gpu")
    }

    /// Arguments for `rdna1-patch build` on this fixture; run them with
    /// [`Fixture::command`].
    pub fn build_args(&self) -> Vec<String> {
        [
            "build",
            "--profile",
            self.profile.to_str().unwrap(),
            "--work-dir",
            self.work.to_str().unwrap(),
            "--rocm",
            self.rocm.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    }
}

/// What kind of torch a fake package pretends to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TorchKind {
    /// A ROCm wheel: version.py has `hip`, lib/ has libMIOpen.so.
    Rocm,
    /// A CPU wheel: no hip, no libMIOpen.so.
    Cpu,
    /// PyPI's default Linux wheel: a CUDA build (`cuda` set), no hip.
    Cuda,
}

/// A fake torch package in `site/torch`, importable with `PYTHONPATH=site`.
pub struct FakeTorch {
    pub site: PathBuf,
    pub dir: PathBuf,
    pub lib: PathBuf,
}

impl FakeTorch {
    /// `version` like "2.5.1+rocm6.2", `hip` like "6.2.41133-dd7f95766".
    pub fn create(
        site: &Path,
        runtime: &Path,
        kind: TorchKind,
        version: &str,
        hip: &str,
    ) -> FakeTorch {
        let dir = site.join("torch");
        copy_dir(&fixtures().join("fake-torch/torch"), &dir);
        let (hip, cuda) = match kind {
            TorchKind::Rocm => (format!("'{hip}'"), "None"),
            TorchKind::Cpu => ("None".to_owned(), "None"),
            TorchKind::Cuda => ("None".to_owned(), "'13.2'"),
        };
        // The shape of the version.py that torch's setup.py writes.
        std::fs::write(
            dir.join("version.py"),
            format!(
                "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n__version__ = '{version}'\ndebug = False\ncuda: Optional[str] = {cuda}\ngit_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\nhip: Optional[str] = {hip}\n"
            ),
        )
        .unwrap();
        let lib = dir.join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        if kind == TorchKind::Rocm {
            copy_dir(&runtime.join("torch/lib"), &lib);
        }
        FakeTorch {
            site: site.to_owned(),
            dir,
            lib,
        }
    }

    pub fn miopen(&self) -> PathBuf {
        self.lib.join("libMIOpen.so")
    }
}

/// Debian's comgr (libamd-comgr2): the compiler a fake torch bundles.
pub const DEBIAN_COMGR: &str = "/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2";

impl FakeTorch {
    /// A bundled ROCm torch in `site` whose libtorch_hip.so carries real
    /// GPU code for `archs` and loads torch/lib/libMIOpen.so, beside
    /// Debian's comgr as the comgr torch bundles (a link). `scratch`: where
    /// clang builds the library.
    pub fn native(
        site: &Path,
        runtime: &Path,
        scratch: &Path,
        version: &str,
        hip: &str,
        archs: &[&str],
    ) -> FakeTorch {
        let torch = FakeTorch::create(site, runtime, TorchKind::Rocm, version, hip);
        std::os::unix::fs::symlink(DEBIAN_COMGR, torch.lib.join("libamd_comgr.so.2")).unwrap();
        let lib = torch.lib.display().to_string();
        let built = fat_library_linking(
            scratch,
            archs,
            &["-L", &lib, "-lMIOpen", "-lamdhip64", "-Wl,-rpath,$ORIGIN"],
        );
        std::fs::copy(built, torch.lib.join("libtorch_hip.so")).unwrap();
        torch
    }
}

/// The characters of `line` outside its backquoted commands: what a
/// glance (160 characters) holds a row to, a command being copied whole
/// (`besides_commands` in src/inspect/glance.rs, the tool's own rule).
pub fn besides_commands(line: &str) -> usize {
    line.split('`').step_by(2).map(|p| p.chars().count()).sum()
}

/// Pin what `cmd` starts to the first CPU: the tool then sees one core
/// and runs one compile child (a one-core run's floor, one swap at a
/// time).
pub fn on_one_core(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: sched_setaffinity on the child itself, between fork and
    // exec, with a set made here.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            match libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
}
