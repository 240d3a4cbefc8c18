//! The diagnosis's cache under issue 55's rules: run as root, the tool
//! trusts and writes only a cache root alone can write, never follows a
//! symlink in it, and leaves nothing root-owned in a user's home; a file
//! rewritten in place with its mtime put back is not taken for the one it
//! was. Each test here failed on the code before (d772f85).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::diagnosis::variant;
use crate::in_place::{HIP64, torch_of};
use crate::other_user::{NOBODY, chown, root_for};
use crate::support::{Run, Sandbox, check_row};

/// Every path below `dir` (not following symlinks) owned by someone else
/// than `uid`.
fn not_owned_by(dir: &Path, uid: u32) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() != uid))
        .map(|e| e.path().to_owned())
        .collect()
}

/// `args` as root under `sudo -E` for uid 65534: sudo's variables set, the
/// user's HOME and XDG_CACHE_HOME kept.
fn sudo_e(sb: &Sandbox, home: &Path, args: &[&str]) -> Run {
    let mut c = sb.cmd();
    c.env("SUDO_UID", NOBODY.to_string())
        .env("SUDO_GID", NOBODY.to_string())
        .env("SUDO_USER", "nobody")
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .args(args);
    Run::from(c.output().unwrap())
}

/// Finding 3: the user planted a SHA-256 memo line for the stamp of a
/// root-owned torch's library, pointing at a library of theirs that was
/// fixed and proven. `sudo -E` install must judge root's library itself
/// (not fixable here: refused, as plain sudo refuses it), write nothing
/// into that torch, and create nothing in the user's cache.
#[test]
fn root_under_sudo_e_believes_no_memo_the_user_planted() {
    if !root_for("root and a diagnosis cache the user can write") {
        return;
    }
    let Some(python) =
        crate::other_user::python_for_sudo("root and a diagnosis cache the user can write")
    else {
        return;
    };
    let sb = Sandbox::new();
    let home = sb.root.join("user-home");
    std::fs::create_dir(&home).unwrap();
    // The user's own torch, fixable: its diagnosis and proof fill the
    // user's cache (made by root here, handed to the user below).
    let mine = Sandbox::new();
    let their_torch = torch_of(&mine, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let mut c = mine.cmd();
    c.env("XDG_CACHE_HOME", home.join(".cache")).args([
        "install",
        "--into-torch",
        "--profile",
        "rocm-6.4.3",
        "--dry-run",
        "--state-dir",
        &mine.state(),
    ]);
    Run::from(c.output().unwrap()).ok().says("Proven");
    let theirs = std::fs::metadata(their_torch.miopen()).unwrap();
    // Root's torch: a library not fixable here.
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    std::fs::remove_file(torch.miopen()).unwrap();
    std::fs::copy(variant("other-failure"), torch.miopen()).unwrap();
    let before = std::fs::read(torch.miopen()).unwrap();
    let m = std::fs::metadata(torch.miopen()).unwrap();
    // The memo of their library's stamp, planted under root's library's
    // stamp (in this version's layout and in the one before).
    let cache = home.join(".cache/rdna1-patch/diagnosis");
    let plant = |theirs: String, ours: String| {
        if let Ok(hex) = std::fs::read_to_string(cache.join(&theirs)) {
            std::fs::create_dir_all(cache.join(&ours).parent().unwrap()).unwrap();
            std::fs::write(cache.join(&ours), hex).unwrap();
            true
        } else {
            false
        }
    };
    let old = |m: &std::fs::Metadata| {
        format!(
            "sha256/{}-{}-{}-{}.{}",
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec()
        )
    };
    let new = |m: &std::fs::Metadata| {
        format!(
            "sha256-{}-{}-{}-{}.{}-{}.{}",
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        )
    };
    // This version remembers the digest of the library's kernel texts.
    let texts = |m: &std::fs::Metadata| {
        new(m).replacen(
            "sha256-",
            &format!("texts{}-", rdna1_patch::verdict::RULES),
            1,
        )
    };
    let planted = plant(old(&theirs), old(&m))
        | plant(new(&theirs), new(&m))
        | plant(texts(&theirs), texts(&m));
    assert!(planted, "the user's cache holds their library's memo");
    chown(&home, NOBODY);
    let run = sudo_e(
        &sb,
        &home,
        &[
            "install",
            "--into-torch",
            "--python",
            python,
            "--profile",
            "rocm-6.4.3",
            "--prefix",
            &sb.prefix.display().to_string(),
            "--state-dir",
            &sb.state(),
        ],
    );
    assert!(!run.stderr.contains("proven before"), "{}", run.stderr);
    run.fails_with(&format!(
        "error: batch norm of {} is not fixable here: MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL fails (fp32 NCHW: [..]) for gfx1010, and not at the DPP reduction the fix removes; nothing was changed
help: this needs more than the in-place fix: build the profile from source (`sudo rdna1-patch build miopen[..]`), and report the kernel and its error",
        torch.miopen().display()
    ));
    assert_eq!(std::fs::read(torch.miopen()).unwrap(), before);
    assert_eq!(not_owned_by(&home, NOBODY), Vec::<PathBuf>::new());
}

/// Findings 4 and 5: under `sudo -E`, root creates nothing in the user's
/// home (no root-owned `~/.cache/rdna1-patch` the user's own runs could
/// not write), and follows no symlink the user put there into a directory
/// of root's.
#[test]
fn root_under_sudo_e_writes_nothing_in_the_users_home_nor_through_their_symlink() {
    if !root_for("root and a user's home under sudo -E") {
        return;
    }
    let Some(python) = crate::other_user::python_for_sudo("root and a user's home under sudo -E")
    else {
        return;
    };
    let sb = Sandbox::new();
    torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let doctor = ["doctor", "--profile", "rocm-6.4.3", "--python", python];
    // A home with no cache yet.
    let home = sb.root.join("user-home");
    std::fs::create_dir(&home).unwrap();
    chown(&home, NOBODY);
    let run = sudo_e(&sb, &home, &doctor);
    assert!(
        check_row(&run.stdout, "kernels").contains("of 2"),
        "{}",
        run.stdout
    );
    assert_eq!(not_owned_by(&home, NOBODY), Vec::<PathBuf>::new());
    // The user's cache dir a symlink to a directory of root's.
    let roots = sb.root.join("roots-dir");
    std::fs::create_dir(&roots).unwrap();
    let cache = home.join(".cache/rdna1-patch");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::symlink(&roots, cache.join("diagnosis")).unwrap();
    chown(&home, NOBODY);
    sudo_e(&sb, &home, &doctor);
    let made: Vec<_> = std::fs::read_dir(&roots).unwrap().flatten().collect();
    assert!(made.is_empty(), "{made:?}");
    assert_eq!(not_owned_by(&home, NOBODY), Vec::<PathBuf>::new());
}

/// Finding 6: a library rewritten in place at the same size with its mtime
/// put back is judged anew (its change time moved), not taken for the one
/// it was.
#[test]
fn a_library_rewritten_in_place_with_its_mtime_put_back_is_judged_anew() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    std::fs::remove_file(torch.miopen()).unwrap();
    std::fs::copy(variant("names-gfx1010"), torch.miopen()).unwrap();
    let doctor = || {
        let run = sb.run(&["doctor", "--profile", "rocm-6.4.3", "--python", "python3"]);
        check_row(&run.stdout, "kernels").to_owned()
    };
    let first = doctor();
    assert!(first.contains(" 2 of 2 batch-norm kernels"), "{first}");
    let other = std::fs::read(variant("other-failure")).unwrap();
    assert_eq!(
        other.len() as u64,
        std::fs::metadata(torch.miopen()).unwrap().len()
    );
    let mtime = std::fs::metadata(torch.miopen())
        .unwrap()
        .modified()
        .unwrap();
    let ino = std::fs::metadata(torch.miopen()).unwrap().ino();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(torch.miopen())
        .unwrap();
    use std::io::Write;
    (&f).write_all(&other).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    let m = std::fs::metadata(torch.miopen()).unwrap();
    assert_eq!((m.ino(), m.modified().unwrap()), (ino, mtime));
    let second = doctor();
    assert!(
        !second.contains("known from an earlier diagnosis"),
        "{second}"
    );
    assert_ne!(first, second);
}
