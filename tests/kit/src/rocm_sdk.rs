//! A fake rocm-sdk install in the shape of TheRock's wheels, with the
//! torch that preloads its libraries; re-exported from the crate root.

use std::path::{Path, PathBuf};

use crate::{FakeTorch, TorchKind, copy_dir, fixtures};

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
