//! What a library hands the compile child, whom the child runs as, and
//! what it loads (issue 55's findings, each here failing on the code
//! before the fix): a header name from a library is data, never a path; the
//! child runs as sudo's user in a directory and environment of its own;
//! the comgr and every library it needs, and every directory above them,
//! are vetted, and the file checked is the file loaded. Run as root, as CI
//! does; uid 65534 plays sudo's user.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::comgr::{fake_comgr, fake_comgr_with, installed, kernels_failed, verify_compile};
use crate::in_place::{HIP64, torch_of};
use crate::support::{Run, Sandbox};

use crate::other_user::{NOBODY, root_for};

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A HIP batch-norm kernel that includes `header`.
fn hip_kernel(name: &str, header: &str) -> Vec<u8> {
    let mut text = format!("#include \"{header}\"\n").into_bytes();
    text.extend_from_slice(
        format!("extern \"C\" __global__ void {name}(float* p) {{ p[0] = RDNA1_ONE; }}\n")
            .as_bytes(),
    );
    text
}

/// Issue 55, 1: a HIP text whose header names lead out of the compiler's
/// directory (`../..`), are absolute, or hold a NUL is not judged, said
/// with the name, and nothing is compiled for it; the root-owned file the
/// first name leads to is never written. A plain name is compiled.
#[test]
fn a_header_name_from_the_library_never_leads_a_compiler_out_of_its_directory() {
    if !root_for("a header name aimed at a root-owned file") {
        return;
    }
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    std::os::unix::fs::symlink(
        crate::diagnosis::DEBIAN_HIPRTC,
        torch.lib.join("libamdhip64.so.5"),
    )
    .expect("apt-get install libamdhip64-5");
    let victim = sb.root.join("victim.hpp");
    std::fs::write(&victim, "precious\n").unwrap();
    let up = format!(
        "{}{}",
        "../".repeat(24),
        victim.display().to_string().trim_start_matches('/')
    );
    let abs = sb.root.join("abs/x.hpp").display().to_string();
    let nul = "x\0.hpp";
    let header = b"#define RDNA1_ONE 1\n".to_vec();
    crate::texts::miopen_embedding(
        &sb.root,
        &torch.miopen(),
        &[
            ("MIOPEN_KERNEL_BATCHNORMUP", hip_kernel("BatchNormUp", &up)),
            (
                "MIOPEN_KERNEL_BATCHNORMABS",
                hip_kernel("BatchNormAbs", &abs),
            ),
            (
                "MIOPEN_KERNEL_BATCHNORMNUL",
                hip_kernel("BatchNormNul", nul),
            ),
            (
                "MIOPEN_KERNEL_BATCHNORMPLAIN",
                hip_kernel("BatchNormPlain", "sub/good.hpp"),
            ),
            ("MIOPEN_KERNEL_VICTIM_INCLUDE", header.clone()),
            ("MIOPEN_KERNEL_X_INCLUDE", header.clone()),
            ("MIOPEN_KERNEL_X__INCLUDE", header.clone()),
            ("MIOPEN_KERNEL_GOOD_INCLUDE", header),
        ],
    );
    let refused = |kernel: &str, name: &str, why: &str| {
        format!(
            "Kernel {kernel}: not judged: it includes {name:?}, {why}, and a compiler is handed only plain relative names; nothing was compiled for it"
        )
    };
    for dry in [true, false] {
        let mut args = vec!["--profile", "rocm-6.4.3"];
        if dry {
            args.push("--dry-run");
        }
        let run = sb.install(&args);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious\n",
            "a header was written outside the compiler's directory:\n{}",
            run.stderr
        );
        assert!(!sb.root.join("abs").exists());
        run.ok()
            .says(&refused(
                "MIOPEN_KERNEL_BATCHNORMUP",
                &up,
                "a name with a \"..\" component",
            ))
            .says(&refused("MIOPEN_KERNEL_BATCHNORMABS", &abs, "an absolute name"))
            .says(&refused(
                "MIOPEN_KERNEL_BATCHNORMNUL",
                nul,
                "a name with a NUL in it",
            ))
            .says("Kernel MIOPEN_KERNEL_BATCHNORMPLAIN: compiles")
            .says(&format!(
                "Nothing to fix in the kernels that could be judged: every other batch-norm kernel of {} compiles for gfx1010 in every case; 3 kernels were not judged, each needing a name no compiler is handed (MIOPEN_KERNEL_BATCHNORMABS, MIOPEN_KERNEL_BATCHNORMNUL, MIOPEN_KERNEL_BATCHNORMUP); torch was left as it is",
                torch.miopen().display()
            ));
    }
}

/// `verify --compile` as sudo runs it (`SUDO_UID`, `SUDO_GID`, `SUDO_USER`,
/// HOME kept as `sudo -E` keeps it, and AMD_COMGR_* variables that would
/// have comgr write where they say), through a comgr that reports, when
/// loaded, who it runs as, where, and with what environment.
fn report_as(sb: &Sandbox, sudo: Option<u32>, report: &Path) -> String {
    let _ = std::fs::remove_file(report);
    // Under sudo python runs as sudo's user too, who cannot reach the
    // tools dir.
    let python = match sudo {
        Some(_) => crate::other_user::python_for_sudo("the compile child under sudo")
            .expect("checked by the test"),
        None => "python3",
    };
    let mut c = crate::comgr::verify_compile_cmd_with(sb, python);
    if let Some(uid) = sudo {
        c.env("SUDO_UID", uid.to_string())
            .env("SUDO_GID", uid.to_string())
            .env("SUDO_USER", "nobody");
    }
    c.env("AMD_COMGR_SAVE_TEMPS", "1")
        .env("AMD_COMGR_REDIRECT_LOGS", sb.root.join("comgr-log"))
        .env("AMD_COMGR_EMIT_VERBOSE_LOGS", "1");
    let run = Run::from(c.output().unwrap()).check_fails();
    std::fs::read_to_string(report).unwrap_or_else(|e| {
        panic!(
            "the comgr was not loaded ({e}):\n{}\n{}",
            run.stdout, run.stderr
        )
    })
}

/// Issue 55, 2: under sudo the compile child drops to the invoking user
/// (no supplementary groups) before it loads the comgr; as plain root it
/// stays root. Either way it starts in an empty directory of its own, its
/// cwd, TMPDIR and HOME, removed afterwards, with only the environment
/// the tool builds: no AMD_COMGR_* of the caller's reaches comgr.
#[test]
fn the_compile_child_runs_as_sudos_user_in_a_directory_and_environment_of_its_own() {
    if !root_for("the compile child under sudo") {
        return;
    }
    if crate::other_user::python_for_sudo("the compile child under sudo").is_none() {
        return;
    }
    let sb = Sandbox::new();
    let torch = installed(&sb);
    // Where uid 65534 can write its report.
    let out = tempfile::tempdir().unwrap();
    chmod(out.path(), 0o777);
    let report = out.path().join("report");
    fake_comgr_with(
        &torch.lib.join("libamd_comgr.so.2"),
        "FAIL",
        &[format!("-DREPORT=\"{}\"", report.display())],
    );
    for (sudo, id) in [(Some(NOBODY), NOBODY), (None, 0)] {
        let said = report_as(&sb, sudo, &report);
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(lines[0], format!("uid {id} {id} {id}"), "{said}");
        assert_eq!(lines[1], format!("gid {id} {id} {id}"), "{said}");
        if sudo.is_some() {
            assert_eq!(lines[2], "groups 0", "no supplementary group: {said}");
        }
        let cwd = lines[3].strip_prefix("cwd ").unwrap();
        // Under sudo in /tmp, which the user can enter wherever torch lies.
        let temp = match sudo {
            Some(_) => PathBuf::from("/tmp"),
            None => std::env::temp_dir(),
        };
        assert!(
            cwd.starts_with(&format!("{}/rdna1-patch-compile-", temp.display())),
            "a directory of its own: {said}"
        );
        assert_eq!(lines[4], "entries 0", "empty: {said}");
        assert!(!Path::new(cwd).exists(), "removed afterwards: {cwd}");
        let mut env: Vec<&str> = lines[5..]
            .iter()
            .map(|l| l.strip_prefix("env ").unwrap())
            .collect();
        env.sort_unstable();
        assert_eq!(
            env,
            [
                format!("HOME={cwd}"),
                "PATH=/usr/bin:/bin".to_owned(),
                "RDNA1_PATCH_COMGR_CHILD=1".to_owned(),
                format!("TMPDIR={cwd}"),
            ],
            "{said}"
        );
        assert!(!sb.root.join("comgr-log").exists());
    }
}

/// A shared library at `to` (SONAME its file name) that leaves `marker`
/// when loaded.
fn library_leaving(to: &Path, marker: &Path) {
    let src = to.with_extension("c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void loaded(void) {{ FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f); }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let soname = to.file_name().unwrap().to_str().unwrap();
    rdna1_testkit::run(
        Command::new("cc")
            .args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}"), "-o"])
            .arg(to)
            .arg(&src),
    );
    std::fs::remove_file(src).unwrap();
}

/// Issue 55, 3: a library the comgr needs (DT_NEEDED, found through its
/// RUNPATH) that anyone can write, or a directory above the comgr that
/// anyone can write, is refused before anything loads: neither the comgr
/// nor that library runs. Vetted, both load, the library through what
/// was checked.
#[test]
fn a_library_the_comgr_needs_that_anyone_can_write_is_refused_before_anything_loads() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    let dep = torch.lib.join("librdna1dep.so.1");
    let (comgr_ran, dep_ran) = (sb.root.join("comgr-loaded"), sb.root.join("dep-loaded"));
    library_leaving(&dep, &dep_ran);
    fake_comgr_with(
        &comgr,
        "FAIL",
        &[
            format!("-DMARKER=\"{}\"", comgr_ran.display()),
            format!("-L{}", torch.lib.display()),
            // Needed though no symbol of it is used.
            "-Wl,--no-as-needed".to_owned(),
            "-l:librdna1dep.so.1".to_owned(),
            "-Wl,-rpath,$ORIGIN".to_owned(),
        ],
    );
    let refused = |why: &str, fix: &str| {
        kernels_failed(
            verify_compile(&sb, &[]),
            &format!("will not load comgr {}: {why}", comgr.display()),
            fix,
        );
        assert!(!comgr_ran.exists(), "the comgr was loaded: {why}");
        assert!(!dep_ran.exists(), "the library it needs was loaded: {why}");
    };
    chmod(&dep, 0o666);
    refused(
        &format!(
            "{}, a library it needs, can be written by anyone (mode 666), and loading it runs its code",
            dep.display()
        ),
        &format!(
            "let only its owner write it (`chmod go-w {}`), then run this again",
            dep.display()
        ),
    );
    chmod(&dep, 0o755);
    let site = sb.root.join("site");
    chmod(&site, 0o777);
    refused(
        &format!(
            "the directory {} above it can be written by anyone (mode 777), and loading it runs its code",
            site.display()
        ),
        &format!(
            "let only its owner write it (`chmod go-w {}`), then run this again",
            site.display()
        ),
    );
    chmod(&site, 0o755);
    verify_compile(&sb, &[]).check_fails();
    assert!(comgr_ran.exists() && dep_ran.exists(), "vetted, both load");
}

/// Issue 55, 3: the directory of the comgr exchanged for another between
/// the check and the load (the failpoint `compiler-vetted`, as a racer
/// would): what loads is the file that was checked, never the one swapped
/// in, and the next check refuses the directory swapped in.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --features failpoints (cargo xtask ci does)"
)]
fn a_directory_swapped_between_the_check_and_the_load_is_not_what_loads() {
    let sb = Sandbox::new();
    let torch = installed(&sb);
    let comgr = torch.lib.join("libamd_comgr.so.2");
    fake_comgr(&comgr, "FAIL", None);
    // The racer's copy of torch's lib dir, its comgr one that leaves a
    // marker when loaded.
    let evil: PathBuf = sb.root.join("site/evil");
    std::fs::create_dir(&evil).unwrap();
    for e in std::fs::read_dir(&torch.lib).unwrap().flatten() {
        let to = evil.join(e.file_name());
        match e.file_type().unwrap().is_symlink() {
            true => std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), to),
            false => std::fs::copy(e.path(), to).map(|_| ()),
        }
        .unwrap();
    }
    let marker = sb.root.join("swapped-in-loaded");
    fake_comgr(&evil.join("libamd_comgr.so.2"), "FAIL", Some(&marker));
    chmod(&evil, 0o777);
    // On one core: one compile child for the run, which swaps once.
    let mut c = crate::comgr::verify_compile_cmd(&sb);
    c.env(
        "FAILPOINTS",
        format!(
            "compiler-vetted=return({},{})",
            torch.lib.display(),
            evil.display()
        ),
    );
    rdna1_testkit::on_one_core(&mut c);
    let run = Run::from(c.output().unwrap());
    assert!(
        !marker.exists(),
        "the comgr swapped in after the check was loaded:\n{}",
        run.stdout
    );
    // The child loaded what it checked; the next run checks the
    // directory swapped in, and refuses it.
    let run = Run::from(crate::comgr::verify_compile_cmd(&sb).output().unwrap());
    let lib = torch.lib.display();
    kernels_failed(
        run,
        &format!(
            "will not load comgr {}: its directory {lib} can be written by anyone (mode 777), and loading it runs its code",
            comgr.display()
        ),
        &format!("let only its owner write it (`chmod go-w {lib}`), then run this again"),
    );
}
