//! Fixture sandboxes shared by the e2e tests, `cargo xtask demo` and
//! `cargo xtask bench`: a real tagged git origin made from the miopen-mini
//! project, a fake ROCm dir whose HIP runtime is a real ELF library, the
//! fixture's patch series, a profile pointing at all of them, and fake torch
//! packages with real ELF libraries.

pub mod figures;
pub mod registry;

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

/// How TheRock lays out the ROCm libraries for torch.
#[derive(Clone, Copy, Debug)]
pub enum SdkShape<'a> {
    /// The multi-arch index (`torch[device-gfx1010]`, TheRock 7.14 on): one
    /// arch-neutral `_rocm_sdk_libraries` package, and a
    /// `rocm-sdk-device-<gfx>` wheel per target overlaying its device code
    /// into it. The gfx targets installed.
    MultiArch(&'a [&'a str]),
    /// The older per-family releases: `_rocm_sdk_libraries_<family>` with
    /// the device code inside. The families installed.
    PerFamily(&'a [&'a str]),
}

/// A rocm-sdk install in `site`, generated to the shape TheRock's
/// build_python_packages.py gives its wheels (read at tag therock-7.14):
/// the `rocm_sdk` meta package (tests/fixtures/fake-rocm-sdk, with the
/// build's lines appended to `_dist_info.py`), `_rocm_sdk_core` (HIP 7 and
/// nine more libraries, in `lib`, `lib/rocm_sysdeps/lib` and
/// `lib/host-math/lib`), the libraries package(s) (MIOpen and nine more,
/// each with DT_RPATH into core), device overlays, pip's dist-info with
/// RECORD for every wheel, the devel tree as `rocm-sdk init` expands it (the
/// runtime packages' files hard-linked, so its lib/libMIOpen.so.1 shares
/// the libraries package's inode), and a torch whose `_rocm_init.py`
/// preloads the 20 libraries torch's build names.
pub struct FakeRocmSdk {
    pub site: PathBuf,
    pub torch: FakeTorch,
    /// The libraries package torch's preload takes MIOpen from.
    pub libraries: PathBuf,
    /// `<libraries>/lib/libMIOpen.so.1`.
    pub miopen: PathBuf,
    /// `_rocm_sdk_devel`: what `python -m rocm_sdk path --root` names.
    pub devel: PathBuf,
}

/// The libraries torch's _rocm_init.py preloads (TheRock's
/// build_prod_wheels.py LINUX_LIBRARY_PRELOADS), in its order.
pub const TORCH_PRELOADS: [&str; 20] = [
    "amd_comgr",
    "amdhip64",
    "rocprofiler-sdk",
    "rocprofiler-sdk-roctx",
    "roctracer64",
    "roctx64",
    "hiprtc",
    "hipblas",
    "hipfft",
    "hiprand",
    "hipsparse",
    "hipsparselt",
    "hipsolver",
    "rccl",
    "hipblaslt",
    "miopen",
    "hipdnn",
    "rocm_sysdeps_liblzma",
    "rocm-openblas",
    "rocm_smi64",
];

/// pip's RECORD hash of `bytes`: `sha256=` and the urlsafe base64 digest
/// without padding.
pub fn record_hash(bytes: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    format!(
        "sha256={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(bytes))
    )
}

/// Every regular file below `dir`, sorted.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_below(&p));
        } else if t.is_file() {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Install one wheel's dist-info: METADATA, and RECORD naming `files`
/// (relative to `site`) with their hashes and sizes, and itself.
fn dist_info(site: &Path, name: &str, version: &str, files: &[PathBuf]) {
    let dir = site.join(format!("{}-{version}.dist-info", name.replace('-', "_")));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("METADATA"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"),
    )
    .unwrap();
    let mut record = String::new();
    for f in files.iter().chain([&dir.join("METADATA")]) {
        let bytes = std::fs::read(f).unwrap();
        let rel = f.strip_prefix(site).unwrap().display().to_string();
        record.push_str(&format!("{rel},{},{}\n", record_hash(&bytes), bytes.len()));
    }
    let own = dir.join("RECORD");
    record.push_str(&format!(
        "{},,\n",
        own.strip_prefix(site).unwrap().display()
    ));
    std::fs::write(own, record).unwrap();
}

impl FakeRocmSdk {
    /// `version` like "7.14.0".
    pub fn create(site: &Path, runtime: &Path, version: &str, shape: SdkShape) -> FakeRocmSdk {
        let (targets, multi) = match shape {
            SdkShape::MultiArch(t) => (t, true),
            SdkShape::PerFamily(f) => (f, false),
        };
        let mut sorted: Vec<&str> = targets.to_vec();
        sorted.sort();
        let meta = site.join("rocm_sdk");
        copy_dir(&fixtures().join("fake-rocm-sdk/rocm_sdk"), &meta);
        // What build_python_packages.py appends to the template, in order.
        let mut info = std::fs::read_to_string(meta.join("_dist_info.py")).unwrap();
        info.push_str(&format!(
            "__version__ = '{version}'\nPY_PACKAGE_SUFFIX_NONCE = ''\n"
        ));
        if multi {
            info.push_str(
                "ALL_PACKAGES[\"libraries\"].dist_package_template = \"rocm-sdk-libraries\"\n",
            );
        }
        info.push_str(&format!("DEFAULT_TARGET_FAMILY = '{}'\n", sorted[0]));
        for t in targets {
            info.push_str(&format!("AVAILABLE_TARGET_FAMILIES.append('{t}')\n"));
        }
        std::fs::write(meta.join("_dist_info.py"), info).unwrap();
        dist_info(site, "rocm", version, &files_below(&meta));

        let package = |name: &str| {
            let dir = site.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("__init__.py"), "").unwrap();
            dir
        };
        // Wheels hold no symlinks: each package has the file its SONAME names.
        let core = package("_rocm_sdk_core");
        copy_dir(&runtime.join("sdk/core/lib"), &core.join("lib"));
        for e in std::fs::read_dir(core.join("lib")).unwrap().flatten() {
            if e.file_type().unwrap().is_symlink() || e.file_name() == "libamdhip64.so.7.14.0" {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        std::fs::copy(
            runtime.join("sdk/core/lib/libamdhip64.so.7"),
            core.join("lib/libamdhip64.so.7"),
        )
        .unwrap();
        dist_info(site, "rocm-sdk-core", version, &files_below(&core));

        let names: Vec<String> = if multi {
            vec!["_rocm_sdk_libraries".to_owned()]
        } else {
            targets
                .iter()
                .map(|f| format!("_rocm_sdk_libraries_{}", f.replace('-', "_")))
                .collect()
        };
        for (name, family) in names.iter().zip(targets.iter()) {
            let lib = package(name);
            copy_dir(&runtime.join("sdk/libraries/lib"), &lib.join("lib"));
            let dist = if multi {
                "rocm-sdk-libraries".to_owned()
            } else {
                format!("rocm-sdk-libraries-{}", family.to_lowercase())
            };
            dist_info(site, &dist, version, &files_below(&lib));
        }
        let libraries = site.join(&names[0]);
        if multi {
            // Each device wheel overlays its code objects and kernel
            // databases into the libraries package.
            for t in targets {
                let files = [
                    libraries.join(format!("lib/.kpack/miopen_{t}.kpack")),
                    libraries.join(format!("share/miopen/db/{t}.kdb")),
                ];
                for f in &files {
                    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                    std::fs::write(f, format!("device code for {t}\n")).unwrap();
                }
                dist_info(site, &format!("rocm-sdk-device-{t}"), version, &files);
            }
        }
        let devel = Self::devel(site, version, &core, &libraries);
        let torch = FakeTorch::create(
            site,
            runtime,
            TorchKind::Rocm,
            &format!("2.11.0+rocm{version}"),
            &format!("{version}-therock"),
        );
        for e in std::fs::read_dir(&torch.lib).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        std::fs::copy(
            runtime.join("sdk/torch/lib/libtorch_hip.so"),
            torch.lib.join("libtorch_hip.so"),
        )
        .unwrap();
        let preloads: Vec<String> = TORCH_PRELOADS.iter().map(|p| format!("'{p}'")).collect();
        std::fs::write(
            torch.dir.join("_rocm_init.py"),
            format!(
                "\ndef initialize():\n    import rocm_sdk\n    rocm_sdk.initialize_process(\n        preload_shortnames=[{}],\n        check_version='{version}')\n",
                preloads.join(", ")
            ),
        )
        .unwrap();
        FakeRocmSdk {
            site: site.to_owned(),
            torch,
            miopen: libraries.join("lib/libMIOpen.so.1"),
            libraries,
            devel,
        }
    }

    /// The devel tree as `rocm-sdk init` leaves it: files of the runtime
    /// packages hard-linked (the tarball names them, and expansion links
    /// them to the sibling's file), the development names as symlinks, and
    /// the `rocm_sdk_devel` package that `python -m rocm_sdk path` imports.
    fn devel(site: &Path, version: &str, core: &Path, libraries: &Path) -> PathBuf {
        let pure = site.join("rocm_sdk_devel");
        std::fs::create_dir_all(&pure).unwrap();
        std::fs::write(pure.join("__init__.py"), "").unwrap();
        dist_info(site, "rocm-sdk-devel", version, &files_below(&pure));
        let devel = site.join("_rocm_sdk_devel");
        std::fs::create_dir_all(devel.join(".info")).unwrap();
        std::fs::write(devel.join("__init__.py"), "").unwrap();
        for package in [core, libraries] {
            for f in files_below(&package.join("lib")) {
                let rel = f.strip_prefix(package).unwrap();
                let to = devel.join(rel);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::hard_link(&f, &to).unwrap();
            }
        }
        for (link, target) in [
            ("lib/libamdhip64.so", "libamdhip64.so.7"),
            ("lib/libMIOpen.so", "libMIOpen.so.1"),
        ] {
            std::os::unix::fs::symlink(target, devel.join(link)).unwrap();
        }
        devel
    }

    /// Whether pip's RECORD still matches `file` (relative to site): the
    /// hash and size it recorded for it.
    pub fn record_matches(&self, file: &Path) -> bool {
        let rel = file.strip_prefix(&self.site).unwrap().display().to_string();
        let bytes = std::fs::read(file).unwrap();
        let want = format!("{rel},{},{}", record_hash(&bytes), bytes.len());
        std::fs::read_dir(&self.site).unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("RECORD"))
                .is_ok_and(|r| r.lines().any(|l| l == want))
        })
    }
}
