//! rocBLAS for other torches and from elsewhere (issue 63): a user's
//! torch under sudo, doctor's offer of the build to a torch its user
//! built, a published build pulled byte for byte, and a ROCm SDK torch,
//! which gets none of ours. The swap itself and its rollback are
//! rocblas_swap.rs's.

use std::path::{Path, PathBuf};

use crate::rocblas_swap::{built, bytes_of, install, same_tree, sandbox};
use crate::support::{Run, Sandbox, copy_dir, gpus};

/// Everything under `dir` not owned by `uid`.
fn not_owned_by(dir: &Path, uid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.path().symlink_metadata().unwrap().uid() != uid)
        .map(|e| e.path().display().to_string())
        .collect()
}

/// Run as root, a torch another user controls is refused whole; under
/// sudo for that user it is theirs to change, and what goes into it (the
/// set, the staged directory) and into their state dir (the backups) is
/// made as them: nothing root's is left in their places, before or after
/// the rollback.
#[test]
fn under_sudo_rocblas_goes_into_its_users_torch_as_theirs() {
    use crate::other_user::{NOBODY, as_sudo_for, chown, root_and_python_for_sudo};
    let Some(python) = root_and_python_for_sudo("rocBLAS into a user's torch under sudo") else {
        return;
    };
    let (sb, torch, prefix) = sandbox("2.6.0+rocm6.4");
    let before = bytes_of(&torch.dir);
    chown(&sb.root.join("site"), NOBODY);
    let state = PathBuf::from(sb.state());
    std::fs::create_dir_all(&state).unwrap();
    chown(&state, NOBODY);
    let run = |args: &[&str], sudo: bool| {
        let mut c = sb.cmd();
        c.args(args)
            .args(["--state-dir", &sb.state(), "--python", python]);
        if sudo {
            as_sudo_for(&mut c, NOBODY);
        }
        Run::from(c.output().unwrap())
    };
    let p = prefix.display().to_string();
    let install = ["install", "rocblas", "--into-torch", "--prefix", &p];
    run(&install, false)
        .fails()
        .error_is(&format!(
            "error: {} can be changed by [..]; run as root, rdna1-patch does not change a torch that another user controls; nothing was changed
help: run rdna1-patch as the user who owns that torch, without sudo (a torch in a venv is its owner's to change)",
            torch.lib.join("[..]").display()
        ));
    same_tree("after the refusal", &before, &bytes_of(&torch.dir));
    run(&install, true).ok().says(" Installed ");
    assert_eq!(not_owned_by(&torch.dir, NOBODY), Vec::<String>::new());
    assert_eq!(not_owned_by(&state, NOBODY), Vec::<String>::new());
    run(&["rollback"], true)
        .ok()
        .says("  Restored transaction 1: ");
    same_tree("after rollback", &before, &bytes_of(&torch.dir));
    assert_eq!(not_owned_by(&torch.dir, NOBODY), Vec::<String>::new());
    assert_eq!(not_owned_by(&state, NOBODY), Vec::<String>::new());
}

/// Who is offered the build: a torch built from a checkout (its version
/// `2.6.0a0+git...`) that bundles Debian's rocBLAS is, with its time, and
/// its rows are ok after the install, naming the transaction; a
/// pytorch.org wheel's rows keep TheRock's torch as their fix; a CUDA
/// torch (a newcomer) is sent to the torch for the card, with no rocBLAS
/// row and no build named.
#[test]
fn doctor_offers_the_rocblas_build_to_a_torch_its_user_built_only() {
    use crate::rocblas_system::{BUILD_ROUTE, rocblas_rows, rows_are};
    let (sb, torch, prefix) = sandbox("2.6.0a0+git1eba9b3");
    let l = torch.lib.display().to_string();
    let before = sb.run_with_state(&["doctor"], &[]).check_fails();
    let therock = "                TheRock builds rocBLAS for gfx1010, gfx1011 and gfx1012 (TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce)";
    rows_are(
        &rocblas_rows(&before.stdout),
        &[
            format!("FAIL  library   librocblas.so at {l} has code for 10 targets, none for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail"),
            therock.to_owned(),
            BUILD_ROUTE.to_owned(),
            format!("FAIL  tensile   rocBLAS's Tensile directory {l}/rocblas/library has no kernels for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail"),
            "                54 catalogue(s), 10 code-object file(s); for gfx1012: 0 code-object file(s), 54 generic catalogue(s)".to_owned(),
            therock.to_owned(),
            BUILD_ROUTE.to_owned(),
        ],
    );
    install(&sb, &prefix, &[]).ok();
    let after = sb.run_with_state(&["doctor"], &[]).check_fails();
    rows_are(
        &rocblas_rows(&after.stdout),
        &[
            format!("ok    library   librocblas.so at {l} has code for gfx1012: gfx1012 (the card's) among them, fixed by transaction 1 of [..]"),
            format!("ok    tensile   rocBLAS's Tensile directory {l}/rocblas/library has kernels for gfx1012 (the card's), fixed by transaction 1 of [..]"),
            "                3 catalogue(s), 3 code-object file(s); for gfx1012: 3 code-object file(s), 2 catalogue(s) named for it and 1 generic".to_owned(),
        ],
    );

    let (wheel, _, _) = sandbox("2.6.0+rocm6.4");
    let rows = rocblas_rows(&wheel.run_with_state(&["doctor"], &[]).check_fails().stdout);
    let fixes: Vec<&String> = rows
        .iter()
        .filter(|l| l.trim_start().starts_with("fix: "))
        .collect();
    assert_eq!(fixes.len(), 2, "{rows:#?}");
    // The install carries this run's --state-dir (shell.rs).
    for f in fixes {
        assert!(
            crate::support_run::line_matches(
                "                fix: build rocBLAS for gfx1012 with its Tensile kernels, about 25 minutes on 2 cores for one card (more for each further card), and put it under this torch as one reversible transaction: `rdna1-patch build rocblas --profile rocm-6.4.3`, then `rdna1-patch install rocblas --into-torch --state-dir [..]`; or, in place of this torch, TheRock's torch for gfx1012 (a download of about 4 GB, no build): `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1012]\" \"torchvision[device-gfx1012]\"`, then run this again",
                f
            ),
            "{f}"
        );
    }

    let newcomer = Sandbox::new();
    newcomer.set_gpus(gpus("rx5500xt-gfx1012"));
    newcomer.torch(crate::support::TorchKind::Cuda, "");
    let d = newcomer.run_with_state(&["doctor"], &[]).check_fails();
    assert!(rocblas_rows(&d.stdout).is_empty(), "{}", d.stdout);
    assert!(!d.stdout.contains("build rocblas"), "{}", d.stdout);
    assert!(d.stdout.contains("torch[device-gfx1012]"), "{}", d.stdout);
}

/// A rocBLAS build published (signed by a key minisign made, to an OCI
/// layout directory) and pulled by a user with no ROCm: the same bytes,
/// nothing compiled, and it goes into their torch, and back out, as a
/// build made there does.
#[test]
fn a_published_rocblas_build_is_pulled_byte_for_byte_and_installed() {
    let (sb, torch, prefix) = sandbox("2.6.0a0+git1eba9b3");
    let before = bytes_of(&torch.dir);
    let keys = crate::shared::keys(&sb.root, "maintainer");
    let layout = sb.root.join("layout");
    let p = prefix.display().to_string();
    let publish = sb
        .run(&[
            "publish",
            "--prefix",
            &p,
            "--sign-key",
            keys.secret.to_str().unwrap(),
            layout.to_str().unwrap(),
        ])
        .ok();
    publish.says(" Published 12 files (");
    assert!(
        publish
            .stdout
            .starts_with(&format!("{}:rocblas-mini-", layout.display())),
        "{}",
        publish.stdout
    );
    let config = sb.root.join("config.toml");
    std::fs::write(&config, format!("trusted-keys = [{:?}]\n", keys.public)).unwrap();
    let pulled = sb.root.join("pulled");
    let profile = built().parent().unwrap().join("rocblas-mini.toml");
    let out = sb
        .cmd()
        .env("RDNA1_PATCH_CONFIG", &config)
        .args(["build", "rocblas", "--profile"])
        .arg(&profile)
        .arg("--work-dir")
        .arg(sb.root.join("user-work"))
        .arg("--rocm")
        .arg(sb.root.join("no-rocm"))
        .arg("--prefix")
        .arg(&pulled)
        .arg("--from")
        .arg(&layout)
        .output()
        .unwrap();
    let pull = Run::from(out).ok();
    pull.says("digest, signature and checksums verified")
        .says("(pulled, nothing compiled)");
    assert!(pull.compiled().is_empty(), "{}", pull.stderr);
    same_tree(
        "the pulled prefix and the publisher's",
        &bytes_of(&prefix),
        &bytes_of(&pulled),
    );
    install(&sb, &pulled, &[])
        .ok()
        .says(&format!(
            "     Build {}/lib/librocblas.so.4 (",
            pulled.display()
        ))
        .says("(transaction 1)");
    same_tree(
        "torch's Tensile directory and the pulled build's",
        &bytes_of(&pulled.join("lib/rocblas/library")),
        &bytes_of(&torch.lib.join("rocblas/library")),
    );
    sb.rollback(&[]).ok();
    same_tree("after rollback", &before, &bytes_of(&torch.dir));
}

/// TheRock's torch loads rocBLAS from its rocm-sdk packages, which TheRock
/// builds for gfx101x: nothing is put under it, and nothing is written.
#[test]
fn a_rocm_sdk_torch_gets_no_rocblas_of_ours() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5500xt-gfx1012"));
    let sdk = crate::rocm_sdk::sdk(&sb, &["gfx101X-dgpu"]);
    let prefix = sb.root.join("rocblas");
    copy_dir(built(), &prefix);
    let before = bytes_of(&sdk.site);
    install(&sb, &prefix, &["--python", "python3"]).fails_with(&format!(
        "error: torch [..] loads its ROCm libraries from the rocm-sdk packages ({}/_rocm_sdk_libraries_gfx101X_dgpu), whose rocBLAS TheRock builds for gfx1010, gfx1011 and gfx1012; rdna1-patch puts no rocBLAS under it; nothing was changed
help: `rdna1-patch doctor[..]` says whether its rocBLAS has code for your card",
        sdk.site.display()
    ));
    same_tree("the site after the refusal", &before, &bytes_of(&sdk.site));
    assert!(!Path::new(&sb.state()).exists());
}
