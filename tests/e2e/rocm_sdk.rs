//! The rocm-sdk layout (TheRock; pytorch.org ROCm wheels from 7.14): torch
//! bundles no MIOpen and preloads `_rocm_sdk_libraries_<family>/lib/libMIOpen.so.1`
//! through `rocm_sdk`. Fake installs with real ELF files and a real python3.

use std::path::Path;

use crate::support::{Sandbox, runtime};
use rdna1_testkit::{FakeRocmSdk, SdkShape};

pub const SDK: &str = "7.14.0";

/// TheRock's older per-family layout.
pub fn sdk(sb: &Sandbox, families: &[&str]) -> FakeRocmSdk {
    with_real_comgr(FakeRocmSdk::create(
        &sb.root.join("site"),
        runtime(),
        SDK,
        SdkShape::PerFamily(families),
    ))
}

/// TheRock's multi-arch layout, as `pip install "torch[device-gfx1010]"`
/// from its multi-arch index leaves it.
pub fn multi(sb: &Sandbox, targets: &[&str]) -> FakeRocmSdk {
    with_real_comgr(FakeRocmSdk::create(
        &sb.root.join("site"),
        runtime(),
        SDK,
        SdkShape::MultiArch(targets),
    ))
}

/// The core package's comgr is a real one (Debian 12's, under TheRock's
/// name), so the in-place fix is diagnosed and proven through it.
fn with_real_comgr(sdk: FakeRocmSdk) -> FakeRocmSdk {
    let comgr = sdk.site.join("_rocm_sdk_core/lib/libamd_comgr.so.3");
    std::fs::remove_file(&comgr).unwrap();
    std::os::unix::fs::symlink(crate::diagnosis::DEBIAN_COMGR, &comgr).unwrap();
    sdk
}

/// Build the fixture against the devel SDK, as a TheRock user would.
pub fn build_against(sb: &Sandbox, devel: &Path) {
    let devel = devel.display().to_string();
    let mut args = sb.build_args(&[]);
    let at = args.iter().position(|a| a == "--rocm").unwrap();
    args[at + 1] = devel;
    crate::support::Run::from(sb.cmd().args(&args).output().unwrap()).ok();
}

#[test]
fn install_verify_and_rollback_on_the_rocm_sdk_layout() {
    let sb = Sandbox::new();
    let sdk = sdk(&sb, &["gfx101X-dgpu"]);
    build_against(&sb, &sdk.devel);
    let built = rdna1_patch::elf::read(&sb.prefix.join("lib/libMIOpen.so.1")).unwrap();
    assert!(
        built.needed.contains(&"libamdhip64.so.7".to_owned()),
        "{:?}",
        built.needed
    );
    let original = std::fs::read(&sdk.miopen).unwrap();
    // Before: torch's preload maps the stock library from the package.
    assert!(
        sb.maps_after_import()
            .contains(&sdk.miopen.display().to_string())
    );

    let run = sb.install(&[]).ok();
    run.says(&format!("rocm-sdk {SDK} gfx101X-dgpu"))
        .says("installing the library as built (no relink)")
        .says(&format!("Installed {}", sdk.miopen.display()));
    let installed = std::fs::read(&sdk.miopen).unwrap();
    assert!(crate::support::contains_bytes(&installed, "[RDNA1 PATCH]"));
    // As built, never rewritten: byte for byte the prefix's library.
    assert_eq!(
        installed,
        std::fs::read(sb.prefix.join("lib/libMIOpen.so.1")).unwrap()
    );
    // torch/lib stays as it was: nothing was put there.
    assert!(!sdk.torch.lib.join("libMIOpen.so").exists());
    assert!(
        sb.maps_after_import()
            .contains(&sdk.miopen.display().to_string())
    );

    let verify = sb.verify(&["--python", "python3", "--runtime"]).ok();
    verify
        .prints("ok    layout")
        .prints(&format!(
            "rocm-sdk {SDK} (gfx101X-dgpu): torch's preload loads {}",
            sdk.miopen.display()
        ))
        .prints("found by rocm_sdk")
        .prints("ok    links")
        .prints("ok    runtime")
        .prints("ok    versions");
    let json = sb
        .run_with_state(
            &[
                "status",
                "--json",
                "--prefix",
                &sb.prefix.display().to_string(),
            ],
            &[],
        )
        .ok();
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let t = &v["installed"][0]["torch"];
    assert_eq!(t["layout"], "rocm-sdk");
    assert_eq!(t["rocm_sdk"]["version"], SDK);
    assert_eq!(t["rocm_sdk"]["family"], "gfx101X-dgpu");
    sb.status().prints("layout rocm-sdk");

    sb.rollback(&[]).ok().says("copied back from the backup");
    assert_eq!(std::fs::read(&sdk.miopen).unwrap(), original);
}

#[test]
fn a_build_for_another_rocm_is_refused_by_the_sdk_version() {
    let sb = Sandbox::built();
    let sdk = sdk(&sb, &["gfx101X-dgpu"]);
    let before = std::fs::read(&sdk.miopen).unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: the build is for ROCm 6.2.4 but torch 2.11.0+rocm7.14.0 is built for rocm-sdk 7.14.0 gfx101X-dgpu: a library built for another ROCm major.minor crashes with memory faults that look like GPU bugs
help: build with a profile for ROCm 7.14 (`rdna1-patch profiles list`), or install a torch for ROCm 6.2; --force installs anyway"#,
    );
    run.error_is(&format!(
        "error: the build is for ROCm 6.2.4 but torch 2.11.0+rocm{SDK} is built for rocm-sdk {SDK} gfx101X-dgpu: [..]
help: build with a profile for ROCm 7.14 (`rdna1-patch profiles list`), or install a torch for ROCm 6.2; --force installs anyway"
    ));
    assert_eq!(std::fs::read(&sdk.miopen).unwrap(), before);
}

#[test]
fn without_a_usable_rocm_sdk_module_the_files_are_read() {
    let sb = Sandbox::new();
    let sdk = sdk(&sb, &["gfx101X-dgpu"]);
    build_against(&sb, &sdk.devel);
    // A rocm_sdk that cannot be imported (a broken install, another version).
    std::fs::write(
        sdk.site.join("rocm_sdk/__init__.py"),
        "raise ImportError('broken')\n",
    )
    .unwrap();
    let original = std::fs::read(&sdk.miopen).unwrap();
    sb.install(&[])
        .ok()
        .says(&format!("Installed {}", sdk.miopen.display()));
    sb.verify(&["--python", "python3"])
        .prints("found by filesystem; python's rocm_sdk: ImportError: broken");
    sb.rollback(&[]).ok();
    assert_eq!(std::fs::read(&sdk.miopen).unwrap(), original);
}

#[test]
fn several_families_need_rocm_sdk_target_family() {
    let sb = Sandbox::new();
    let sdk = sdk(&sb, &["gfx101X-dgpu", "gfx110X-all"]);
    build_against(&sb, &sdk.devel);
    let run = sb.install(&[]).fails_with(
        r#"error: several rocm-sdk libraries packages are installed (gfx101X-dgpu, gfx110X-all), and ROCM_SDK_TARGET_FAMILY does not say which one torch loads
help: set ROCM_SDK_TARGET_FAMILY to your GPU's family (for an RX 5000 card: ROCM_SDK_TARGET_FAMILY=gfx101X-dgpu rdna1-patch ...), as torch itself does"#,
    );
    run.error_is(
        "error: several rocm-sdk libraries packages are installed (gfx101X-dgpu, gfx110X-all), and ROCM_SDK_TARGET_FAMILY does not say which one torch loads
help: set ROCM_SDK_TARGET_FAMILY to your GPU's family (for an RX 5000 card: ROCM_SDK_TARGET_FAMILY=gfx101X-dgpu rdna1-patch ...), as torch itself does",
    );
    let prefix = sb.prefix.display().to_string();
    let state = sb.state();
    let out = sb
        .cmd()
        .args([
            "install",
            "--into-torch",
            "--prefix",
            &prefix,
            "--state-dir",
            &state,
        ])
        .env("ROCM_SDK_TARGET_FAMILY", "gfx101X-dgpu")
        .output()
        .unwrap();
    crate::support::Run::from(out)
        .ok()
        .says(&format!("Installed {}", sdk.miopen.display()));
}

#[test]
fn doctor_names_the_layout_and_the_devel_sdk() {
    let sb = Sandbox::new();
    let sdk = sdk(&sb, &["gfx101X-dgpu"]);
    let doctor = |sb: &Sandbox| {
        let profile = sb.profile.display().to_string();
        sb.run(&[
            "doctor",
            "--profile",
            &profile,
            "--python",
            "python3",
            "--need-space",
            "0",
        ])
    };
    doctor(&sb)
        .prints(&format!(
            "rocm-sdk {SDK} (gfx101X-dgpu): torch's preload loads {}",
            sdk.miopen.display()
        ))
        .prints(&format!(
            "devel SDK at {}: build with --rocm {0}",
            sdk.devel.display()
        ));
    // rocm[devel] not installed: neither its package nor its tree.
    std::fs::remove_dir_all(&sdk.devel).unwrap();
    std::fs::remove_dir_all(sdk.site.join("rocm_sdk_devel")).unwrap();
    let run = doctor(&sb);
    run.prints("rocm_sdk path --root failed: ERROR: Could not load the `rocm[devel]` package")
        .prints("pip install \"rocm[devel]\"");
}

/// `pip install "torch[device-gfx1010]"` from TheRock's multi-arch index:
/// one `_rocm_sdk_libraries` package with device overlays, no family in
/// any name, and no ROCM_SDK_TARGET_FAMILY needed (torch's preload does not
/// ask for one).
#[test]
fn install_verify_and_rollback_on_the_multi_arch_layout() {
    let sb = Sandbox::new();
    let sdk = multi(&sb, &["gfx1010", "gfx1011", "gfx1012", "gfx1030"]);
    assert!(
        sdk.miopen
            .ends_with("_rocm_sdk_libraries/lib/libMIOpen.so.1")
    );
    build_against(&sb, &sdk.devel);
    let original = std::fs::read(&sdk.miopen).unwrap();
    let devel_copy = sdk.devel.join("lib/libMIOpen.so.1");
    assert!(
        same_inode(&devel_copy, &sdk.miopen),
        "the devel tree links the package's file"
    );
    assert!(sdk.record_matches(&sdk.miopen));
    let maps = sb.maps_after_import();
    assert!(maps.contains(&sdk.miopen.display().to_string()), "{maps}");
    let preloaded = rdna1_testkit::TORCH_PRELOADS.len();
    assert_eq!(preloaded, 20);

    let run = sb.install(&[]).ok();
    run.says(&format!(
        "rocm-sdk {SDK} multi-arch, device gfx1010, gfx1011, gfx1012, gfx1030"
    ))
    .says("installing the library as built (no relink)")
    .says(&format!("Installed {}", sdk.miopen.display()));
    assert_eq!(
        std::fs::read(&sdk.miopen).unwrap(),
        std::fs::read(sb.prefix.join("lib/libMIOpen.so.1")).unwrap()
    );
    // The swap renamed a new file into place: the devel tree's hard link
    // still holds the original, byte for byte.
    assert_eq!(std::fs::read(&devel_copy).unwrap(), original);
    assert!(!sdk.record_matches(&sdk.miopen));
    assert!(
        sb.maps_after_import()
            .contains(&sdk.miopen.display().to_string())
    );
    sb.verify(&["--python", "python3", "--runtime"])
        .ok()
        .prints(&format!(
            "ok    layout    rocm-sdk {SDK} (multi-arch, device gfx1010, gfx1011, gfx1012, gfx1030): torch's preload loads {} (found by rocm_sdk)",
            sdk.miopen.display()
        ))
        .prints("ok    runtime")
        .prints("ok    links");
    sb.status().prints("layout rocm-sdk");
    sb.run(&["doctor", "--all", "--python", "python3", "--need-space", "0"])
        .prints(&format!(
            "rocm-sdk {SDK} (multi-arch, device gfx1010, gfx1011, gfx1012, gfx1030): torch's preload loads {}",
            sdk.miopen.display()
        ))
        .prints(&format!("devel SDK at {}", sdk.devel.display()));

    sb.rollback(&[]).ok().says("copied back from the backup");
    assert_eq!(std::fs::read(&sdk.miopen).unwrap(), original);
    assert!(
        sdk.record_matches(&sdk.miopen),
        "pip's RECORD hash matches again"
    );
}

/// The same install found from the files alone (no python answer), and
/// the version from pip's metadata, not the template's `DEFAULT`.
#[test]
fn the_multi_arch_layout_is_read_from_the_files_too() {
    let sb = Sandbox::new();
    let sdk = multi(&sb, &["gfx1010"]);
    build_against(&sb, &sdk.devel);
    std::fs::remove_dir_all(sdk.site.join(format!("rocm-{SDK}.dist-info"))).unwrap();
    let dir = sdk.torch.dir.display().to_string();
    sb.install(&["--torch-dir", &dir])
        .ok()
        .says(&format!("rocm-sdk {SDK} multi-arch, device gfx1010"))
        .says("found by filesystem");
    sb.rollback(&[]).ok();
    assert!(sdk.record_matches(&sdk.miopen));
}

fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// Issue 33, HIGH 3: the libraries package beside torch is a symlink to
/// another environment's. Judged by its real path, it is outside torch's
/// site-packages: nothing of the other environment is written, and so
/// there is never a journal that rollback would refuse.
#[test]
fn a_libraries_package_that_links_into_another_environment_is_refused() {
    let sb = Sandbox::new();
    let ours = sdk(&sb, &["gfx101X-dgpu"]);
    build_against(&sb, &ours.devel);
    let other = FakeRocmSdk::create(
        &sb.root.join("other-venv/site"),
        runtime(),
        SDK,
        SdkShape::PerFamily(&["gfx101X-dgpu"]),
    );
    std::fs::remove_dir_all(&ours.libraries).unwrap();
    std::os::unix::fs::symlink(&other.libraries, &ours.libraries).unwrap();
    let before = std::fs::read(&other.miopen).unwrap();
    let run = sb.install(&[]).fails_with(
        r#"error: the rocm-sdk package [..]/site/_rocm_sdk_libraries_gfx101X_dgpu is [..]/other-venv/site/_rocm_sdk_libraries_gfx101X_dgpu, outside torch's site-packages [..]/site: rdna1-patch replaces only the MIOpen of torch's own environment
help: that package belongs to another environment (a symlink put it here); install torch's own libraries there (`pip install --force-reinstall "rocm[libraries]"`), or run rdna1-patch with the other environment's python. Nothing was changed"#,
    );
    run.error_is(&format!(
        "error: the rocm-sdk package {} is {}, outside torch's site-packages {}: rdna1-patch replaces only the MIOpen of torch's own environment
help: that package belongs to another environment (a symlink put it here); install torch's own libraries there (`pip install --force-reinstall \"rocm[libraries]\"`), or run rdna1-patch with the other environment's python. Nothing was changed",
        ours.libraries.display(),
        other.libraries.display(),
        ours.site.display(),
    ));
    assert_eq!(std::fs::read(&other.miopen).unwrap(), before);
    // No journal was written, so none can be refused later.
    sb.rollback(&["--list"]).ok().prints("no transactions in");
}
