//! The in-place route: torch's own libMIOpen, whose embedded batch-norm
//! kernel texts (the fake runtime embeds the tests' own texts the way
//! MIOpen's build does) are fixed where they lie, then swapped in,
//! verified and rolled back like any build. Compiling the fix through
//! torch's comgr is in `in_place_comgr`, MIOpen's kernel cache in
//! `in_place_cache`.

use std::path::{Path, PathBuf};

use rdna1_testkit::FakeTorch;

use crate::support::{Run, Sandbox, contains_bytes, md5sum_c, runtime};

const MARKER: &str = "[RDNA1 PATCH] batchnorm: gfx101x has no DPP row_bcast";
pub(crate) const HIP64: &str = "6.4.43484-123eb5128";

/// A torch for ROCm 6.4 whose libtorch_hip.so carries code for `archs`
/// and loads torch/lib/libMIOpen.so, as a build of torch for those
/// targets does.
pub(crate) fn torch_with_code(sb: &Sandbox, archs: &[&str]) -> FakeTorch {
    torch_of(sb, "2.6.0+rocm6.4", HIP64, archs)
}

/// A bundled torch `version` (torch.version.hip `hip`) whose
/// libtorch_hip.so carries code for `archs`.
pub(crate) fn torch_of(sb: &Sandbox, version: &str, hip: &str, archs: &[&str]) -> FakeTorch {
    torch_in(sb, "site", version, hip, archs)
}

/// As [`torch_of`], in `<root>/<site>`.
pub(crate) fn torch_in(
    sb: &Sandbox,
    site: &str,
    version: &str,
    hip: &str,
    archs: &[&str],
) -> FakeTorch {
    FakeTorch::native(
        &sb.root.join(site),
        runtime(),
        &sb.root,
        version,
        hip,
        archs,
    )
}

pub(crate) fn install(sb: &Sandbox, extra: &[&str]) -> Run {
    let mut args = vec!["--profile", "rocm-6.4.3"];
    args.extend(extra);
    sb.install(&args)
}

/// The pip RECORD line's hash of torch's library, as a reinstall checks it.
fn md5(path: &Path) -> String {
    let out = std::process::Command::new("md5sum")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..32].to_owned()
}

fn prefix_lib(sb: &Sandbox) -> PathBuf {
    sb.prefix.join("lib/libMIOpen.so")
}

#[test]
fn a_native_torch_gets_its_own_library_fixed_in_place_then_rolled_back() {
    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();

    let dry = install(&sb, &["--dry-run"]).ok();
    dry.says("MIOpen sees the real chip (libtorch_hip.so has code for gfx1010) and every fix profile rocm-6.4.3 makes is kernel text")
        ;
    dry.prints("would fix");
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    assert!(!sb.prefix.join("share/rdna1-patch/MD5SUMS").exists());

    let run = install(&sb, &[]).ok();
    run.says("Fixed MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL (2 batch-norm decisions)")
        .says("Fixed MIOPEN_KERNEL_BATCHNORM_FUNCTIONS_INCLUDE (1 batch-norm decision)")
        .says("Fixed MIOPEN_KERNEL_CONFIGURATION_INCLUDE (1 batch-norm decision)")
        .says("4 of 5 kernel texts fixed (found by dynamic symbols)")
        .says("no relink")
        .says("Installed");
    let fixed = std::fs::read(torch.miopen()).unwrap();
    assert_eq!(fixed.len(), original.len(), "the same length");
    assert!(contains_bytes(&fixed, MARKER));
    assert!(contains_bytes(
        &fixed,
        "|| __has_builtin(__builtin_amdgcn_permlanex16))"
    ));
    // 7.x's HIP switch, on its guard.
    assert!(contains_bytes(
        &fixed,
        "#if defined(__AMDGCN__) && !__has_builtin(__builtin_amdgcn_permlanex16)\n    static constexpr bool use_amdgcn ="
    ));
    // The prefix is a prefix like any other: md5sum agrees, provenance
    // names the source and every text changed.
    md5sum_c(&sb.prefix);
    let prov =
        std::fs::read_to_string(sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    assert!(
        prov.contains("[in_place]") && prov.contains("MIOPEN_KERNEL_MIOPENBATCHNORMBWDSPATIAL"),
        "{prov}"
    );
    assert_eq!(std::fs::read(prefix_lib(&sb)).unwrap(), fixed);
    // torch maps the fixed library.
    assert!(
        sb.maps_after_import()
            .contains(&torch.miopen().display().to_string())
    );
    sb.verify(&["--profile", "rocm-6.4.3", "--python", "python3"])
        .ok()
        .prints("no problem found");

    let before = md5(&torch.miopen());
    sb.rollback(&[]).ok().says("copied back from the backup");
    assert_eq!(
        std::fs::read(torch.miopen()).unwrap(),
        original,
        "byte for byte"
    );
    assert_ne!(md5(&torch.miopen()), before);
}

/// Issue 46, 3: an in-place prefix is this machine's torch library with
/// its texts changed, not a build: publish refuses it in words (not "no
/// build key ... before 0.2") and pushes nothing.
#[test]
fn publish_refuses_an_in_place_fix_and_says_to_build_one() {
    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1010"]);
    install(&sb, &[]).ok().says("Installed");
    let (public, secret) = (sb.root.join("k.pub"), sb.root.join("k.key"));
    let made = std::process::Command::new("minisign")
        .args(["-G", "-W", "-p"])
        .arg(&public)
        .arg("-s")
        .arg(&secret)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let layout = sb.root.join("builds");
    let prefix = sb.prefix.display().to_string();
    sb.run(&[
        "publish",
        "--prefix",
        &prefix,
        "--sign-key",
        secret.to_str().unwrap(),
        layout.to_str().unwrap(),
    ])
    .fails_with(&format!(
        "error: {prefix} is an in-place fix of this machine's torch library ({}), not a build others can reuse
help: to share a fix, build one (`rdna1-patch build --prefix DIR[..]`) and publish that prefix; others with this torch get the same in-place fix from `rdna1-patch install --into-torch[..]`",
        torch.miopen().display()
    ));
    assert!(!layout.exists(), "nothing pushed");
}

/// On one filesystem, with files this user owns and no one else can
/// write, nothing is copied: the backup is torch's original file itself,
/// and torch's new library is the prefix's file. A group-writable library
/// is copied both ways instead: a link would share its write bits.
#[test]
fn the_swap_links_files_on_one_filesystem_and_copies_what_others_could_write() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = |p: &Path| std::fs::metadata(p).unwrap();
    let backup = |sb: &Sandbox| {
        let dir = Path::new(&sb.state()).join("backups");
        let files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    };

    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    let ino = meta(&torch.miopen()).ino();
    install(&sb, &[]).ok().says("Installed");
    assert_eq!(
        meta(&backup(&sb)).ino(),
        ino,
        "the backup is torch's own file"
    );
    assert_eq!(meta(&torch.miopen()).ino(), meta(&prefix_lib(&sb)).ino());
    sb.rollback(&[]).ok();
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
    // The prefix keeps its own name for the fixed library.
    let fixed = std::fs::read(prefix_lib(&sb)).unwrap();
    assert!(contains_bytes(&fixed, MARKER));

    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1010"]);
    std::fs::set_permissions(torch.miopen(), std::fs::Permissions::from_mode(0o775)).unwrap();
    let ino = meta(&torch.miopen()).ino();
    install(&sb, &[]).ok().says("Installed");
    let kept = meta(&backup(&sb));
    assert_ne!(kept.ino(), ino);
    assert_eq!(kept.mode() & 0o7777, 0o444, "a copied backup is read-only");
    assert_ne!(meta(&torch.miopen()).ino(), meta(&prefix_lib(&sb)).ino());
    assert_eq!(
        meta(&torch.miopen()).mode() & 0o7777,
        0o775,
        "torch's mode is kept"
    );
    assert_eq!(
        std::fs::read(torch.miopen()).unwrap(),
        std::fs::read(prefix_lib(&sb)).unwrap()
    );
    sb.rollback(&[]).ok();
    assert_eq!(meta(&torch.miopen()).mode() & 0o7777, 0o775);
}

#[test]
fn the_texts_are_found_when_the_library_hides_their_symbols() {
    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1010"]);
    std::fs::copy(
        runtime().join("torch-hidden/lib/libMIOpen.so"),
        torch.miopen(),
    )
    .unwrap();
    install(&sb, &[])
        .ok()
        .says("4 of 4 kernel texts fixed (found by a search of the read-only data (the symbols are hidden))");
    assert!(contains_bytes(
        &std::fs::read(torch.miopen()).unwrap(),
        MARKER
    ));
}

#[test]
fn a_torch_without_gfx101x_code_is_never_offered_the_in_place_fix() {
    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1030"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    // Auto: neither route is offered.
    install(&sb, &[])
        .fails_with(
            r#"error: neither a build nor the in-place fix would change anything for torch 2.6.0+rocm6.4: libtorch_hip.so has code for gfx1030 and none for gfx101x, so it runs under HSA_OVERRIDE_GFX_VERSION=10.3.0 and MIOpen compiles its kernels for gfx1030, where batch norm already works
help: for the fix to act, use a torch with gfx101x code: TheRock's `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ "torch[device-gfx1010]" "torchvision[device-gfx1010]"` (RX 5700: gfx1010, Pro V520: gfx1011, Pro W5500: gfx1012), then run this again; nothing was changed"#,
        )
        .says("neither a build nor the in-place fix would change anything");
    install(&sb, &["--in-place"]).fails_with(
        r#"error: neither a build nor the in-place fix would change anything for torch 2.6.0+rocm6.4: libtorch_hip.so has code for gfx1030 and none for gfx101x, so it runs under HSA_OVERRIDE_GFX_VERSION=10.3.0 and MIOpen compiles its kernels for gfx1030, where batch norm already works
help: for the fix to act, use a torch with gfx101x code: TheRock's `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ "torch[device-gfx1010]" "torchvision[device-gfx1010]"` (RX 5700: gfx1010, Pro V520: gfx1011, Pro W5500: gfx1012), then run this again; nothing was changed"#,
    ).error_is(
        "error: neither a build nor the in-place fix would change anything for torch 2.6.0+rocm6.4: libtorch_hip.so has code for gfx1030 and none for gfx101x, so it runs under HSA_OVERRIDE_GFX_VERSION=10.3.0 and MIOpen compiles its kernels for gfx1030, where batch norm already works
help: for the fix to act, use a torch with gfx101x code: TheRock's `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"` (RX 5700: gfx1010, Pro V520: gfx1011, Pro W5500: gfx1012), then run this again; nothing was changed",
    );
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), original);
}

#[test]
fn a_fixed_unknown_or_truncated_library_is_refused_and_nothing_changes() {
    let sb = Sandbox::new();
    let torch = torch_with_code(&sb, &["gfx1010"]);
    let lib = torch.miopen();
    let original = std::fs::read(&lib).unwrap();

    // An unknown decision: HIP's switch guarded in another shape. (An
    // OpenCL decision of another shape that sets MIOpen's switch is no
    // refusal: the switch under it is made portable, issue 51.)
    let mut odd = original.clone();
    let at = odd
        .windows(17)
        .position(|w| w == b"#ifdef __AMDGCN__")
        .unwrap();
    odd[at..at + 17].copy_from_slice(b"#if __AMDGCN__==1");
    std::fs::write(&lib, &odd).unwrap();
    let run = install(&sb, &["--in-place"]).fails_with(
        r#"error: cannot fix [..]/site/torch/lib/libMIOpen.so in place: kernel text MIOPEN_KERNEL_CONFIGURATION_INCLUDE: line 22 decides on the batch-norm reduction as `#if __AMDGCN__==1`, not as `#ifdef __AMDGCN__ before `static constexpr bool use_amdgnc =``
help: this MIOpen's kernels are not of a shape rdna1-patch knows, so nothing was changed: build the profile from source instead (`rdna1-patch build miopen[..]`), and report the kernel named above"#,
    );
    run.error_is(&format!(
        "error: cannot fix {} in place: kernel text MIOPEN_KERNEL_CONFIGURATION_INCLUDE: line 22 decides on the batch-norm reduction as `#if __AMDGCN__==1`, not as `#ifdef __AMDGCN__ before `static constexpr bool use_amdgnc =``
help: this MIOpen's kernels are not of a shape rdna1-patch knows, so nothing was changed: build the profile from source instead (`rdna1-patch build miopen[..]`), and report the kernel named above",
        lib.display()
    ));
    assert_eq!(std::fs::read(&lib).unwrap(), odd);
    assert!(!sb.prefix.join("share/rdna1-patch/MD5SUMS").exists());

    // Truncated: the file ends inside a text.
    let cut = original.len() / 2;
    std::fs::write(&lib, &original[..cut]).unwrap();
    install(&sb, &["--in-place"])
        .fails_with("error: [..]/site/torch/lib/libMIOpen.so is not a library whose kernel texts can be read: not an ELF file: bad offset [..]
help: it is not a MIOpen the in-place fix knows; nothing was changed: reinstall torch if the file is damaged, or build the profile from source (`rdna1-patch build miopen[..]`)")
        .says("is not a library whose kernel texts can be read");
    assert_eq!(std::fs::read(&lib).unwrap().len(), cut);

    // Already fixed (a library fixed by hand, or by another tool).
    std::fs::write(&lib, &original).unwrap();
    install(&sb, &[]).ok();
    let fixed = std::fs::read(&lib).unwrap();
    sb.rollback(&[]).ok();
    std::fs::write(&lib, &fixed).unwrap();
    let other = Sandbox::new();
    let run = other.run(&[
        "install",
        "--into-torch",
        "--in-place",
        "--profile",
        "rocm-6.4.3",
        "--prefix",
        &other.prefix.display().to_string(),
        "--torch-dir",
        &torch.dir.display().to_string(),
        "--state-dir",
        &other.root.join("state").display().to_string(),
    ]);
    // Already fixed means already compiles: nothing to do, nothing written.
    run.ok().says(&format!(
        "Nothing to fix: every batch-norm kernel of {} compiles for gfx1010 in every case; torch was left as it is",
        lib.display()
    ));
    assert!(!other.root.join("state").exists());
    assert!(!other.prefix.exists());
    assert_eq!(std::fs::read(&lib).unwrap(), fixed);
}

/// The rocm-sdk layouts (TheRock's per-family and multi-arch packages):
/// the library the preload loads, fixed in place (forced: the HIP kernels
/// of 7.x are not fixed in place yet, so it is not chosen by itself there),
/// mapped by `import torch`, verified, and rolled back byte for byte, with
/// pip's RECORD hash matching again.
#[test]
fn the_rocm_sdk_layouts_are_fixed_in_place_and_rolled_back_byte_for_byte() {
    for multi in [false, true] {
        let sb = Sandbox::new();
        let sdk = if multi {
            crate::rocm_sdk::multi(&sb, &["gfx1010"])
        } else {
            crate::rocm_sdk::sdk(&sb, &["gfx101X-dgpu"])
        };
        let original = std::fs::read(&sdk.miopen).unwrap();
        assert!(sdk.record_matches(&sdk.miopen));
        sb.install(&[
            "--in-place",
            "--profile",
            "therock-7.14",
            "--python",
            "python3",
        ])
        .ok()
        .says("kernel texts fixed");
        let fixed = std::fs::read(&sdk.miopen).unwrap();
        assert_eq!(fixed.len(), original.len());
        assert!(contains_bytes(&fixed, MARKER), "multi-arch {multi}");
        assert!(!sdk.record_matches(&sdk.miopen));
        assert!(
            sb.maps_after_import()
                .contains(&sdk.miopen.display().to_string())
        );
        sb.verify(&["--profile", "therock-7.14", "--python", "python3"])
            .ok()
            .prints("no problem found");
        sb.rollback(&[]).ok().says("copied back from the backup");
        assert_eq!(
            std::fs::read(&sdk.miopen).unwrap(),
            original,
            "multi-arch {multi}"
        );
        assert!(
            sdk.record_matches(&sdk.miopen),
            "pip's RECORD matches again"
        );
    }
}
