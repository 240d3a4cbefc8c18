//! rocBLAS into torch (issue 63): the fixture's build (tests/fixtures/
//! rocblas-mini, real amdgcn code for gfx1012) swapped into a torch that
//! bundles a rocBLAS laid out as Debian's, the library and its Tensile
//! directory as one journaled set, and rolled back byte for byte; a
//! prefix changed since its build is refused before anything is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::rocblas::stderr_is;
use crate::support::{FakeTorch, Run, Sandbox, copy_dir, gpus};
use rdna1_testkit::RocblasFixture;

/// The fixture's rocBLAS for an RX 5500 XT (gfx1012), built once per run.
pub(crate) fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rocblas-built");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let sb = Sandbox::new();
        sb.set_gpus(gpus("rx5500xt-gfx1012"));
        let rb = RocblasFixture::create(&root);
        Run::from(sb.cmd().args(rb.build_args()).output().unwrap()).ok();
        rb.prefix
    })
}

/// A sandbox with an RX 5500 XT, the fixture's rocBLAS build in
/// `<root>/rocblas`, and a torch `version` bundling Debian's shape.
pub(crate) fn sandbox(version: &str) -> (Sandbox, FakeTorch, PathBuf) {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5500xt-gfx1012"));
    let prefix = sb.root.join("rocblas");
    copy_dir(built(), &prefix);
    let torch = crate::glance::debian_torch_in(&sb, version);
    (sb, torch, prefix)
}

pub(crate) fn install(sb: &Sandbox, prefix: &Path, extra: &[&str]) -> Run {
    let p = prefix.display().to_string();
    let mut args = vec!["install", "rocblas", "--into-torch", "--prefix", &p];
    args.extend(extra);
    sb.run_with_state(&args, &[])
}

/// Every file under `dir` with its bytes, and every directory.
pub(crate) fn bytes_of(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(dir).min_depth(1) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(dir).unwrap().to_owned();
        let bytes = e
            .file_type()
            .is_file()
            .then(|| std::fs::read(e.path()).unwrap());
        out.insert(rel, bytes);
    }
    out
}

/// What differs between two trees, by path.
#[track_caller]
pub(crate) fn same_tree(
    what: &str,
    a: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    b: &BTreeMap<PathBuf, Option<Vec<u8>>>,
) {
    let differ: Vec<&PathBuf> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .collect();
    assert!(differ.is_empty(), "{what}: these differ: {differ:?}");
}

fn md5(path: &Path) -> String {
    rdna1_patch::checksum::md5_file(path).unwrap()
}

#[test]
fn rocblas_goes_into_a_bundling_torch_as_one_set_and_rolls_back_byte_for_byte() {
    let (sb, torch, prefix) = sandbox("2.6.0+rocm6.4");
    let before = bytes_of(&torch.dir);
    let lib = torch.lib.join("librocblas.so");
    let tensile = torch.lib.join("rocblas/library");
    let (t, p, s) = (
        torch.dir.display().to_string(),
        prefix.display().to_string(),
        sb.state(),
    );

    // The dry run says what goes where, and changes nothing.
    let dry = install(&sb, &prefix, &["--dry-run"]).ok();
    assert_eq!(
        dry.stdout.trim_end(),
        format!(
            "     Route would install the rocBLAS build in {p} (profile rocblas-mini, ROCm 6.4.4, for gfx1012) into torch 2.6.0+rocm6.4 at {t}: in place of the set torch bundles, {t}/lib/librocblas.so and {t}/lib/rocblas/library (64 file(s)), as one transaction; `rdna1-patch rollback --state-dir {s}` puts every file back (dry run: nothing was changed)"
        )
    );
    assert!(!Path::new(&s).exists(), "the dry run made the state dir");
    same_tree("after the dry run", &before, &bytes_of(&torch.dir));

    let original = md5(&lib);
    let run = install(&sb, &prefix, &[]).ok();
    stderr_is(
        &run,
        &format!(
            "     Build {p}/lib/librocblas.so.4 (rocblas_6.4.4.orig.tar.gz sha256 [..] at rocblas-mini, ROCm 6.4.4), MD5SUMS ok
   Checked lib/librocblas.so.4: code for gfx1012; lib/rocblas/library: 3 code-object file(s), all for gfx1012; TensileLibrary_lazy_gfx1012.dat and the 4 file(s) it names
     Torch {t} 2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128), rocBLAS: its own {t}/lib/librocblas.so
    Relink RUNPATH -> $ORIGIN
 Installed {t}/lib/librocblas.so and {t}/lib/rocblas/library (transaction 1): MD5 {original} -> [..], Tensile files 64 -> 6
           the originals are kept in {s}/backups; `rdna1-patch rollback[..]` puts every file back"
        ),
    );
    // torch's Tensile directory is the build's, file for file; the library
    // is the build's, fitted to torch/lib, and what `import torch` maps.
    same_tree(
        "torch's Tensile directory and the build's",
        &bytes_of(&prefix.join("lib/rocblas/library")),
        &bytes_of(&tensile),
    );
    let dynamic = rdna1_patch::elf::read(&lib).unwrap();
    assert_eq!(dynamic.runpath, ["$ORIGIN"]);
    assert!(sb.maps_after_import().contains(&lib.display().to_string()));
    let entries: Vec<String> = std::fs::read_dir(torch.lib.join("rocblas"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        entries,
        ["library"],
        "nothing of the swap is left beside it"
    );

    // status and verify say what is installed, by which transaction,
    // checked against the prefix's MD5SUMS.
    let status = sb.run_with_state(&["status"], &[]).ok();
    let installed: Vec<&str> = status
        .stdout
        .lines()
        .filter(|l| l.starts_with("installed:") || l.starts_with("            from"))
        .collect();
    assert_eq!(installed.len(), 2, "{}", status.stdout);
    assert!(
        crate::support::line_matches(
            &format!(
                "installed:  {t}/lib/librocblas.so and {t}/lib/rocblas/library (6 files), rocBLAS (transaction 1, [..]), MD5 [..], layout torch/lib"
            ),
            installed[0]
        ),
        "{}",
        status.stdout
    );
    assert!(
        crate::support::line_matches(
            &format!(
                "            from {p}: rocblas rocblas_6.4.4.orig.tar.gz sha256 [..] ([..]), profile rocblas-mini, ROCm 6.4.4: its 12 files match its MD5SUMS, the 6 Tensile files torch holds among them"
            ),
            installed[1]
        ),
        "{}",
        status.stdout
    );
    let json: serde_json::Value =
        serde_json::from_str(&sb.run_with_state(&["status", "--json"], &[]).ok().stdout).unwrap();
    let t1 = &json["installed"][0];
    assert_eq!(
        (
            &t1["component"],
            &t1["tensile"]["installed"]["files"],
            &t1["tensile"]["original"]["files"],
            &json["rocblas"][0]["prefix_ok"]
        ),
        (
            &serde_json::json!("rocblas"),
            &serde_json::json!(6),
            &serde_json::json!(64),
            &serde_json::json!(true)
        ),
        "{json:#}"
    );
    let verify = sb.run_with_state(&["verify", "--prefix", &p], &[]).ok();
    let row = crate::support::check_row(&verify.stdout, "rocblas");
    assert!(
        crate::support::line_matches(
            &format!(
                "ok    rocblas   {t}/lib/librocblas.so (MD5 [..]) and {t}/lib/rocblas/library (6 files) are what transaction 1 of [..] installed, from {p}: rocblas [..]: its 12 files match its MD5SUMS, the 6 Tensile files torch holds among them"
            ),
            row
        ),
        "{}",
        verify.stdout
    );

    // Over its own install (as built, not relinked), then back: the
    // original set, as it was, byte for byte.
    let over = install(&sb, &prefix, &["--no-relink"]).ok();
    over.says(" Installed ").says("(transaction 2)");
    let back = sb.rollback(&[]).ok();
    stderr_is(
        &back,
        &format!(
            "  Restored transaction 2: {t}/lib/librocblas.so is the original again (MD5 {original}) and {t}/lib/rocblas/library holds torch's own 64 file(s) again, copied back from the backups
  Restored transaction 1: {t}/lib/librocblas.so is the original again (MD5 {original}) and {t}/lib/rocblas/library holds torch's own 64 file(s) again, the original was already in place"
        ),
    );
    same_tree("after rollback", &before, &bytes_of(&torch.dir));
    sb.rollback(&[])
        .ok()
        .says("nothing to roll back: no transaction is installed");
}

/// Make the prefix's records agree with its files as they are now, `gone`
/// left out of them: what someone who edits a prefix by hand (or a broken
/// copy) leaves, which only the check of the set itself can catch.
fn rehash(prefix: &Path, gone: &[&str]) {
    use rdna1_patch::checksum::{format_md5sums, parse_md5sums};
    let prov = prefix.join("share/rdna1-patch/provenance.toml");
    let mut text = std::fs::read_to_string(&prov).unwrap();
    for g in gone {
        text = text.replace(&format!(", \"{g}\""), "");
    }
    std::fs::write(&prov, text).unwrap();
    let sums = prefix.join("share/rdna1-patch/MD5SUMS");
    let mut entries = parse_md5sums(&std::fs::read_to_string(&sums).unwrap()).unwrap();
    entries.retain(|e| !gone.contains(&e.path.as_str()));
    for e in &mut entries {
        e.md5 = md5(&prefix.join(&e.path));
    }
    std::fs::write(&sums, format_md5sums(&entries)).unwrap();
}

/// A code object built for `arch`, as Tensile would write one.
fn code_object(dir: &Path, arch: &str) -> PathBuf {
    let src = dir.join("k.cl");
    std::fs::write(&src, "kernel void k(global int* p) { *p = 1; }\n").unwrap();
    let out = dir.join(format!("{arch}.co"));
    rdna1_testkit::run(
        std::process::Command::new("clang")
            .args(["-target", "amdgcn-amd-amdhsa", "-nogpulib", "-x", "cl"])
            .arg(format!("-mcpu={arch}"))
            .arg(&src)
            .arg("-o")
            .arg(&out),
    );
    out
}

const LIBRARY: &str = "lib/rocblas/library";
const CO: &str = "TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1012.co";
const HSACO: &str =
    "TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback_gfx1012.hsaco";
const CATALOGUE: &str = "TensileLibrary_lazy_gfx1012.dat";

/// A prefix whose files no longer match its MD5SUMS, and one changed with
/// its records made to agree (a code object for another target, a
/// catalogue naming a file that is gone, no catalogue at all), are each
/// refused before anything is written: torch and the state dir as they
/// were.
#[test]
fn a_tampered_or_incomplete_rocblas_prefix_is_refused_before_install() {
    let (sb, torch, prefix) = sandbox("2.6.0+rocm6.4");
    let before = bytes_of(&torch.dir);
    let p = prefix.display().to_string();
    let refused = |sb: &Sandbox, expected: &str| {
        install(sb, &prefix, &[]).fails_with(expected);
        install(sb, &prefix, &["--dry-run"]).fails_with(expected);
        same_tree("after a refusal", &before, &bytes_of(&torch.dir));
        assert!(
            !Path::new(&sb.state()).exists(),
            "a refusal made the state dir"
        );
    };
    let good = bytes_of(&prefix);
    let restore = || {
        std::fs::remove_dir_all(&prefix).unwrap();
        copy_dir(built(), &prefix);
        same_tree("the prefix restored", &good, &bytes_of(&prefix));
    };

    // Tampered: a Tensile file that is not what MD5SUMS says.
    std::fs::write(prefix.join(LIBRARY).join(CATALOGUE), b"\x80").unwrap();
    refused(
        &sb,
        &format!(
            "error: the build in {p} does not match its MD5SUMS:
  {LIBRARY}/{CATALOGUE}: MD5 [..], expected [..]
help: rebuild and reinstall it with `rdna1-patch build rocblas[..]` (a no-op build reinstalls the prefix from the build dir)"
        ),
    );
    restore();

    let check_says = |problem: &str| {
        format!(
            "error: the rocBLAS build in {p} does not pass the check its build makes before install: {problem}; nothing was changed
help: build it again (`rdna1-patch build rocblas --profile rocblas-mini[..]`): a build installs only a set that passes, so this prefix was changed since"
        )
    };
    // A code object for another target, its MD5 recorded.
    let gfx1030 = code_object(&sb.root, "gfx1030");
    std::fs::copy(&gfx1030, prefix.join(LIBRARY).join(CO)).unwrap();
    rehash(&prefix, &[]);
    refused(
        &sb,
        &check_says(&format!(
            "{LIBRARY}: code for another target than this build's (gfx1012): {CO} holds gfx1030"
        )),
    );
    restore();

    // The catalogue names a file that is gone from the prefix and its records.
    std::fs::remove_file(prefix.join(LIBRARY).join(HSACO)).unwrap();
    rehash(&prefix, &[&format!("{LIBRARY}/{HSACO}")]);
    refused(
        &sb,
        &check_says(&format!(
            "{LIBRARY}/{CATALOGUE} names 1 file(s) that are not there: {HSACO} (named by TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat)"
        )),
    );
    restore();

    // No catalogue for the card at all.
    std::fs::remove_file(prefix.join(LIBRARY).join(CATALOGUE)).unwrap();
    rehash(&prefix, &[&format!("{LIBRARY}/{CATALOGUE}")]);
    refused(
        &sb,
        &check_says(&format!(
            "{LIBRARY} has no catalogue for gfx1012 (TensileLibrary_lazy_gfx1012.dat, TensileLibrary_gfx1012.dat nor TensileLibrary.dat): Tensile wrote none, whatever its exit status"
        )),
    );
    restore();

    // A build for another card than this machine's.
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    refused(
        &sb,
        &format!(
            "error: the rocBLAS build in {p} has code for gfx1012, none for gfx1010, the card(s) in this machine; nothing was changed
help: build it for this machine: `rdna1-patch build rocblas --profile rocblas-mini --gpu-targets gfx1012,gfx1010[..]`"
        ),
    );
    sb.set_gpus(gpus("rx5500xt-gfx1012"));

    // A MIOpen prefix is not rocBLAS's.
    let miopen = Sandbox::built();
    let m = miopen.prefix.display().to_string();
    let run = sb.run_with_state(&["install", "rocblas", "--into-torch", "--prefix", &m], &[]);
    run.fails_with(&format!(
        "error: the prefix {m} holds a miopen build (profile mini), not rocBLAS's; nothing was changed
help: `rdna1-patch install miopen --into-torch[..]` installs that one; for rocBLAS, name the prefix `rdna1-patch build rocblas[..]` installed to (its last line says)"
    ));
    same_tree("after all refusals", &before, &bytes_of(&torch.dir));
}

/// Run `args` with the sandbox's state dir, killed (abort, as kill -9) at
/// the crash point `point`.
fn crash(sb: &Sandbox, args: &[&str], point: &str) {
    let state = sb.state();
    let out = sb
        .cmd()
        .args(args)
        .args(["--state-dir", &state])
        .env("FAILPOINTS", format!("{point}=return"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None, "{point}: expected an abort");
}

/// Killed between the directory's exchange and the library's rename (the
/// one instant the two are of two sets), on install and on rollback: the
/// next run, whichever it is, finishes what was begun from the file
/// staged beside the library, and torch holds one whole set.
#[test]
fn a_kill_between_the_two_renames_is_finished_by_the_next_run() {
    let (sb, torch, prefix) = sandbox("2.6.0+rocm6.4");
    let before = bytes_of(&torch.dir);
    let lib = torch.lib.join("librocblas.so");
    let original = md5(&lib);
    let p = prefix.display().to_string();
    let install_args = ["install", "rocblas", "--into-torch", "--prefix", &p];
    crash(&sb, &install_args, "set-dir-swapped");
    // Half of each: the new directory, the original library.
    same_tree(
        "the directory, exchanged",
        &bytes_of(&prefix.join("lib/rocblas/library")),
        &bytes_of(&torch.lib.join("rocblas/library")),
    );
    assert_eq!(md5(&lib), original);
    sb.run_with_state(&["status"], &[])
        .check_fails()
        .prints("unfinished: transaction 1 stopped while swapping");
    let back = sb.rollback(&[]).ok();
    stderr_is(
        &back,
        &format!(
            " Recovered transaction 1 was interrupted (swapping), stopped between its two renames: the library staged beside it was read back and renamed into place; the new rocBLAS library and its Tensile directory are both in place, so it is now installed
  Restored transaction 1: {l} is the original again (MD5 {original}) and {t} holds torch's own 64 file(s) again, copied back from the backups",
            l = lib.display(),
            t = torch.lib.join("rocblas/library").display()
        ),
    );
    same_tree(
        "after the recovered install's rollback",
        &before,
        &bytes_of(&torch.dir),
    );

    install(&sb, &prefix, &[]).ok();
    crash(&sb, &["rollback"], "set-rollback-dir");
    assert_ne!(md5(&lib), original, "the library is still the new one");
    let again = install(&sb, &prefix, &[]).ok();
    again
        .says(" Recovered transaction 2 was interrupted (rolling-back), stopped between its two renames: the library staged beside it was read back and renamed into place; torch's own rocBLAS library and Tensile directory are in place, so it is now rolled back")
        .says("(transaction 3)");
    sb.rollback(&[]).ok();
    same_tree("at the end", &before, &bytes_of(&torch.dir));
    let leftovers: Vec<String> = std::fs::read_dir(torch.lib.join("rocblas"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, ["library"]);
}

/// What pip's RECORD of the torch in `site` says is wrong: each file it
/// lists whose SHA-256 or size differs, or that is gone, and each file of
/// the package it does not list (bytecode aside).
fn record_problems(python: &Path) -> Vec<String> {
    const CHECK: &str = r#"
import base64, hashlib, importlib.metadata as md, os
dist = md.distribution("torch")
root = str(dist.locate_file(""))
listed, bad = set(), []
for f in dist.files:
    p = os.path.normpath(os.path.join(root, str(f)))
    listed.add(p)
    if not f.hash:
        continue
    if not os.path.isfile(p):
        bad.append("gone: " + str(f))
        continue
    data = open(p, "rb").read()
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if h != f.hash.value or len(data) != f.size:
        bad.append("differs: " + str(f))
for d, _, names in os.walk(os.path.join(root, "torch")):
    for n in names:
        p = os.path.join(d, n)
        if p not in listed and "__pycache__" not in p:
            bad.append("not in RECORD: " + os.path.relpath(p, root))
print("\n".join(sorted(bad)))
"#;
    let out = rdna1_testkit::run(std::process::Command::new(python).args(["-c", CHECK]));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A torch pip installed from a wheel: after the set goes in, pip's RECORD
/// no longer verifies (the library and every Tensile file torch had);
/// after rollback every file it lists has its hash again, and nothing it
/// does not list is left.
#[test]
fn pips_record_of_torch_verifies_again_after_rollback() {
    let (sb, torch, prefix) = sandbox("2.6.0+rocm6.4");
    std::fs::remove_file(torch.lib.join("libamd_comgr.so.2")).unwrap();
    let wheels = sb.root.join("wheels");
    rdna1_testkit::torch_wheel(&torch.site, "2.6.0+rocm6.4", &[], &wheels);
    std::fs::remove_dir_all(&torch.site).unwrap();
    let venv = sb.root.join("venv");
    rdna1_testkit::run(
        std::process::Command::new(crate::support::tools().join("python3"))
            .args(["-m", "venv"])
            .arg(&venv),
    );
    let python = venv.join("bin/python");
    rdna1_testkit::run(
        std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--no-index",
                "--quiet",
                "--find-links",
            ])
            .arg(&wheels)
            .arg("torch"),
    );
    assert_eq!(record_problems(&python), Vec::<String>::new());
    let py = python.display().to_string();
    install(&sb, &prefix, &["--python", &py]).ok();
    let after = record_problems(&python);
    assert_eq!(
        after.iter().filter(|l| l.starts_with("differs: ")).count(),
        1,
        "{after:#?}"
    );
    assert_eq!(
        after.iter().filter(|l| l.starts_with("gone: ")).count(),
        64,
        "{after:#?}"
    );
    assert!(
        after.contains(&"differs: torch/lib/librocblas.so".to_owned()),
        "{after:#?}"
    );
    sb.rollback(&["--python", &py]).ok();
    assert_eq!(record_problems(&python), Vec::<String>::new());
}
