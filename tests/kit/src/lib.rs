//! Fixture sandboxes shared by the e2e tests, `cargo xtask demo` and
//! `cargo xtask bench`: a real tagged git origin made from the miopen-mini
//! project, a fake ROCm dir whose HIP runtime is a real ELF library, the
//! fixture's patch series, a profile pointing at all of them, and fake torch
//! packages with real ELF libraries.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's tests/fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
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

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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

/// A library with real GPU code objects for `archs`, built by clang in HIP
/// mode as torch's libtorch_hip.so is (without HIP headers: the host side
/// only needs the launch entry point declared).
pub fn fat_library(dir: &std::path::Path, archs: &[&str]) -> std::path::PathBuf {
    let src = dir.join("k.hip");
    std::fs::write(
        &src,
        "typedef struct { unsigned x, y, z; } dim3_t;\n\
         extern \"C\" int hipLaunchKernel(const void*, dim3_t, dim3_t, void**, unsigned long, void*);\n\
         __attribute__((global)) void k(int* p) { *p = 1; }\n",
    )
    .unwrap();
    let out = dir.join(format!("libtorch_hip-{}.so", archs.join("-")));
    let mut c = std::process::Command::new("clang++");
    c.args(["-x", "hip", "-nogpulib", "-nogpuinc", "-fPIC", "-shared"]);
    for a in archs {
        c.arg(format!("--offload-arch={a}"));
    }
    let run = c.arg(&src).arg("-o").arg(&out).output().expect(
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

    /// Arguments for `rdna1-patch build` on this fixture.
    pub fn build_args(&self) -> Vec<String> {
        let no_gpu = fixtures().join("sysfs/no-gpu");
        [
            "build",
            "--profile",
            self.profile.to_str().unwrap(),
            "--work-dir",
            self.work.to_str().unwrap(),
            "--rocm",
            self.rocm.to_str().unwrap(),
            // No GPU, whatever this machine has: GPU_TARGETS stays the profile's.
            "--sysfs-root",
            no_gpu.to_str().unwrap(),
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
        let hip = match kind {
            TorchKind::Rocm => format!("'{hip}'"),
            TorchKind::Cpu => "None".to_owned(),
        };
        // The shape of the version.py that torch's setup.py writes.
        std::fs::write(
            dir.join("version.py"),
            format!(
                "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n__version__ = '{version}'\ndebug = False\ncuda: Optional[str] = None\ngit_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\nhip: Optional[str] = {hip}\n"
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

/// A rocm-sdk install in `site`, as TheRock's wheels lay it out: the
/// `rocm_sdk` meta package (tests/fixtures/fake-rocm-sdk), `_rocm_sdk_core/lib`
/// with HIP 7, one `_rocm_sdk_libraries_<family>/lib` per family with the
/// stock libMIOpen.so.1, a devel tree whose libraries are relative symlinks
/// into core (as `rocm-sdk init` expands it), and a ROCm torch whose
/// `_rocm_init.py` preloads through `rocm_sdk`.
pub struct FakeRocmSdk {
    pub site: PathBuf,
    pub torch: FakeTorch,
    /// `_rocm_sdk_libraries_<first family>/lib/libMIOpen.so.1`.
    pub miopen: PathBuf,
    /// `_rocm_sdk_devel`: what `python -m rocm_sdk path --root` names.
    pub devel: PathBuf,
}

impl FakeRocmSdk {
    /// `version` like "7.14.0"; `families` like ["gfx101X-dgpu"].
    pub fn create(site: &Path, runtime: &Path, version: &str, families: &[&str]) -> FakeRocmSdk {
        let meta = site.join("rocm_sdk");
        copy_dir(&fixtures().join("fake-rocm-sdk/rocm_sdk"), &meta);
        let quoted: Vec<String> = families.iter().map(|f| format!("{f:?}")).collect();
        let info = meta.join("_dist_info.py");
        let text = std::fs::read_to_string(&info)
            .unwrap()
            .replace("@VERSION@", version)
            .replace("@FAMILIES@", &quoted.join(", "));
        std::fs::write(&info, text).unwrap();
        let dist = site.join(format!("rocm-{version}.dist-info"));
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::write(
            dist.join("METADATA"),
            format!("Metadata-Version: 2.1\nName: rocm\nVersion: {version}\n"),
        )
        .unwrap();
        let package = |name: &str| {
            let dir = site.join(name);
            std::fs::create_dir_all(dir.join("lib")).unwrap();
            std::fs::write(dir.join("__init__.py"), "").unwrap();
            dir
        };
        // Wheels hold no symlinks: each package has the file its SONAME names.
        let core = package("_rocm_sdk_core");
        std::fs::copy(
            runtime.join("sdk/core/lib/libamdhip64.so.7"),
            core.join("lib/libamdhip64.so.7"),
        )
        .unwrap();
        let mut miopen = None;
        for f in families {
            let lib = package(&format!("_rocm_sdk_libraries_{}", f.replace('-', "_"))).join("lib");
            std::fs::copy(
                runtime.join("sdk/libraries/lib/libMIOpen.so.1"),
                lib.join("libMIOpen.so.1"),
            )
            .unwrap();
            miopen.get_or_insert(lib.join("libMIOpen.so.1"));
        }
        let devel = package("_rocm_sdk_devel");
        std::fs::create_dir_all(devel.join(".info")).unwrap();
        for name in ["libamdhip64.so", "libamdhip64.so.7"] {
            std::os::unix::fs::symlink(
                "../../_rocm_sdk_core/lib/libamdhip64.so.7",
                devel.join("lib").join(name),
            )
            .unwrap();
        }
        let torch = FakeTorch::create(
            site,
            runtime,
            TorchKind::Rocm,
            &format!("2.11.0+rocm{version}"),
            &format!("{version}-therock"),
        );
        // This torch bundles nothing from ROCm.
        for e in std::fs::read_dir(&torch.lib).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        std::fs::copy(
            runtime.join("sdk/torch/lib/libtorch_hip.so"),
            torch.lib.join("libtorch_hip.so"),
        )
        .unwrap();
        std::fs::write(
            torch.dir.join("_rocm_init.py"),
            format!(
                "def initialize():\n    import rocm_sdk\n    rocm_sdk.initialize_process(preload_shortnames=[\"amdhip64\", \"miopen\"], check_version=\"{version}\")\n"
            ),
        )
        .unwrap();
        FakeRocmSdk {
            site: site.to_owned(),
            torch,
            miopen: miopen.expect("at least one family"),
            devel,
        }
    }
}
