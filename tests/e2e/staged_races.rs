//! Root never walks by name into a directory another user controls
//! (issue 69): under sudo, the user swaps a directory the tool stages in
//! their place (the Tensile directory of `install rocblas --into-torch`
//! and of `rollback`, the state dir's `transactions/`, the prefix's
//! `.rdna1-patch-staging`, `man --install`'s `man1/`) for a symlink to a
//! directory only root may write, at every
//! step the tool took by name (after each mkdir, after each file, before
//! each chmod, at each depth). The failpoints (`fsutil::race_point`) make
//! the swap at that instant, as the user would: nothing of root's is
//! created or changed there, and the error names the swap. On main
//! (84ed257) root wrote the user's files into that directory and
//! chmodded it.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::other_user::{NOBODY, as_sudo_for, chown, root_and_python_for_sudo, root_for};
use crate::rocblas_swap::{bytes_of, same_tree, sandbox};
use crate::support::{FakeTorch, Run, Sandbox};

/// A directory only root may write, holding one file of root's.
fn roots_only(sb: &Sandbox) -> PathBuf {
    let dir = sb.root.join("roots-only");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), "root's\n").unwrap();
    std::fs::set_permissions(dir.join("keep"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// What a directory holds, its mode and owner: all must stay.
fn look(dir: &Path) -> (BTreeMap<PathBuf, Option<Vec<u8>>>, u32, u32) {
    let m = std::fs::metadata(dir).unwrap();
    (bytes_of(dir), m.mode() & 0o7777, m.uid())
}

#[track_caller]
fn untouched(what: &str, victim: &Path, before: &(BTreeMap<PathBuf, Option<Vec<u8>>>, u32, u32)) {
    let now = look(victim);
    same_tree(what, &before.0, &now.0);
    assert_eq!(
        (now.1, now.2),
        (before.1, before.2),
        "{what}: its mode and owner"
    );
}

/// Run every step, each to its end or its first failed check, then fail
/// naming every step that failed (so a run on main shows them all).
fn each_step<T: Copy + std::fmt::Debug>(steps: &[T], mut step: impl FnMut(T)) {
    let failed: Vec<String> = steps
        .iter()
        .filter(|s| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(**s))).is_err())
        .map(|s| format!("{s:?}"))
        .collect();
    assert!(failed.is_empty(), "these steps failed: {failed:#?}");
}

/// A torch of nobody's bundling rocBLAS, a prefix to install from, and
/// their state dir; both Tensile directories (torch's and the prefix's)
/// hold a subdirectory (`sub/deep.dat`), for a race one level down.
fn users_torch(python: &str) -> (Sandbox, FakeTorch, PathBuf) {
    let _ = python;
    let (sb, torch, prefix) = sandbox("2.6.0+rocm6.4");
    let sub = torch.lib.join("rocblas/library/sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("deep.dat"), "torch's own, one level down\n").unwrap();
    add_to_prefix(
        &prefix,
        "lib/rocblas/library/sub/deep.dat",
        "the build's, one level down\n",
    );
    chown_tree(&sb.root.join("site"));
    let state = PathBuf::from(sb.state());
    std::fs::create_dir_all(&state).unwrap();
    chown(&state, NOBODY);
    (sb, torch, prefix)
}

/// A file `rel` in the prefix, listed in its records as the build's own.
fn add_to_prefix(prefix: &Path, rel: &str, text: &str) {
    use rdna1_patch::checksum::{Entry, format_md5sums, parse_md5sums};
    let file = prefix.join(rel);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, text).unwrap();
    let prov = prefix.join("share/rdna1-patch/provenance.toml");
    let t = std::fs::read_to_string(&prov).unwrap();
    std::fs::write(
        &prov,
        t.replacen("files = [", &format!("files = [\"{rel}\", "), 1),
    )
    .unwrap();
    let sums = prefix.join("share/rdna1-patch/MD5SUMS");
    let mut entries = parse_md5sums(&std::fs::read_to_string(&sums).unwrap()).unwrap();
    entries.push(Entry {
        md5: rdna1_patch::checksum::md5_file(&file).unwrap(),
        path: rel.to_owned(),
    });
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    for e in &mut entries {
        e.md5 = rdna1_patch::checksum::md5_file(&prefix.join(&e.path)).unwrap();
    }
    std::fs::write(&sums, format_md5sums(&entries)).unwrap();
}

fn chown_tree(dir: &Path) {
    for e in walkdir::WalkDir::new(dir) {
        chown(e.unwrap().path(), NOBODY);
    }
}

/// `args` as sudo runs them for nobody, with `failpoints` armed.
fn as_sudo(sb: &Sandbox, python: &str, args: &[&str], failpoints: &str) -> Run {
    let mut c = sb.cmd();
    c.args(args)
        .args(["--state-dir", &sb.state(), "--python", python])
        .env("FAILPOINTS", failpoints);
    Run::from(as_sudo_for(&mut c, NOBODY).output().unwrap())
}

/// `point` armed to swap `dir` for a symlink to `to` the `nth` time it is
/// passed while `dir` is a directory.
fn swap_at(point: &str, nth: usize, dir: &Path, to: &Path) -> String {
    format!("{point}=return({},{},{nth})", dir.display(), to.display())
}

/// The steps of a staged Tensile directory taken by name on main, and the
/// directory swapped at each (the top one, or `sub` one level down):
/// after each mkdir, after a file at each depth, before each chmod.
const STEPS: &[(&str, usize, &str)] = &[
    ("tree-mkdir", 0, ""),
    ("tree-mkdir", 0, "sub"),
    ("tree-file", 0, ""),
    ("tree-file", 3, ""),
    ("tree-file", 0, "sub"),
    ("tree-chmod", 0, "sub"),
    ("tree-chmod", 1, ""),
];

fn at(staged: &Path, rel: &str) -> PathBuf {
    match rel {
        "" => staged.to_owned(),
        r => staged.join(r),
    }
}

/// The error of a staged directory swapped.
fn swap_named(staged: &Path) -> String {
    format!(
        "error: torch was not changed: {} is not the directory rdna1-patch staged: another program replaced it (a symlink or another directory stands there) while rdna1-patch filled it; nothing was written through it
help: stop whatever else writes in {} (under sudo, a directory another user owns is written as that user), then run this again",
        staged.display(),
        staged.parent().unwrap().display()
    )
}

/// torch's files now, our staged leftovers aside.
fn torch_now(torch: &FakeTorch, id: &str) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut now = bytes_of(&torch.dir);
    now.retain(|k, _| !k.to_string_lossy().contains(id));
    now
}

/// `install rocblas --into-torch` under sudo (or, after one, `rollback`,
/// which stages from the backup), its staged Tensile directory swapped at
/// each step: root's directory is not written or chmodded, torch is as it
/// was (the install stays whole), and the error names the swap.
fn staged_dir_swapped(rollback: bool) {
    let Some(python) = root_and_python_for_sudo("the staged directories raced under sudo") else {
        return;
    };
    each_step(STEPS, |(point, nth, rel)| {
        let (sb, torch, prefix) = users_torch(python);
        let p = prefix.display().to_string();
        let install = ["install", "rocblas", "--into-torch", "--prefix", &p];
        let (args, staged, ours): (&[&str], _, _) = match rollback {
            false => (&install, ".library.rdna1-patch-1.tmp", ".rdna1-patch-1."),
            true => {
                as_sudo(&sb, python, &install, "").ok();
                let staged = ".library.rdna1-patch-1-rollback.tmp";
                (&["rollback"], staged, "-rollback.tmp")
            }
        };
        let dir = at(&torch.lib.join("rocblas").join(staged), rel);
        let victim = roots_only(&sb);
        let (before, torch_before) = (look(&victim), bytes_of(&torch.dir));
        let run = as_sudo(&sb, python, args, &swap_at(point, nth, &dir, &victim));
        let what = format!("{}, {point} #{nth} at {}", args[0], dir.display());
        untouched(&what, &victim, &before);
        assert_eq!(run.code, Some(2), "{what}: {}", run.stderr);
        run.fails().error_is(&swap_named(&dir));
        same_tree(
            &format!("{what}: torch"),
            &torch_before,
            &torch_now(&torch, ours),
        );
    });
}

#[test]
fn a_staged_tensile_dir_swapped_under_sudo_install_changes_nothing_of_roots() {
    staged_dir_swapped(false);
}

#[test]
fn a_staged_tensile_dir_swapped_under_sudo_rollback_changes_nothing_of_roots() {
    staged_dir_swapped(true);
}

/// The run failed, its error (as --detail prints it: at a glance it
/// wraps) naming `dir` as the symlink the walk refused.
#[track_caller]
fn fails_naming_the_symlink(what: &str, run: Run, dir: &Path) {
    let error = crate::support_run::unwrapped_error(&run.stderr).join("\n");
    assert!(
        error.contains(&format!(
            "{} is a symlink in a directory nobody (uid 65534) can change",
            dir.display()
        )),
        "{what}: the error names the swap: {}",
        run.stderr
    );
    run.fails();
}

/// The state dir's subdirectories, swapped for a symlink once the lock
/// took them as real (root checks them, then writes by name): the
/// journal, the library's backup and the Tensile backup go nowhere of
/// root's. Once with openat2, once walking with openat alone, as under a
/// seccomp profile that refuses openat2.
#[test]
fn a_state_subdir_swapped_after_the_lock_changes_nothing_of_roots() {
    let Some(python) = root_and_python_for_sudo("the state dir raced under sudo") else {
        return;
    };
    let cases: Vec<(&str, &str)> = ["transactions", "backups", "staging"]
        .into_iter()
        .flat_map(|sub| [(sub, ""), (sub, ";no-openat2=return")])
        .collect();
    each_step(&cases, |(sub, walk)| {
        let (sb, torch, prefix) = users_torch(python);
        let victim = roots_only(&sb);
        let (before, torch_before) = (look(&victim), bytes_of(&torch.dir));
        let dir = Path::new(&sb.state()).join(sub);
        let p = prefix.display().to_string();
        let run = as_sudo(
            &sb,
            python,
            &["install", "rocblas", "--into-torch", "--prefix", &p],
            &format!("{}{walk}", swap_at("state-locked", 0, &dir, &victim)),
        );
        let what = format!("state dir's {sub}{walk}");
        untouched(&what, &victim, &before);
        fails_naming_the_symlink(&what, run, &dir);
        same_tree(
            &format!("{what}: torch"),
            &torch_before,
            &torch_now(&torch, ".rdna1-patch-"),
        );
    });
}

/// `man --install DIR` under sudo, DIR the user's, `man1/` swapped for a
/// symlink after the first page: the other pages go nowhere of root's.
#[test]
fn a_man_dir_swapped_after_the_first_page_changes_nothing_of_roots() {
    if !root_for("man --install raced under sudo") {
        return;
    }
    let sb = Sandbox::new();
    let victim = roots_only(&sb);
    let before = look(&victim);
    let theirs = sb.root.join("their-man");
    std::fs::create_dir(&theirs).unwrap();
    chown(&theirs, NOBODY);
    let man1 = theirs.join("man1");
    let mut c = sb.cmd();
    c.args(["man", "--install"])
        .arg(&theirs)
        .env("FAILPOINTS", swap_at("man-page-written", 0, &man1, &victim));
    let run = Run::from(as_sudo_for(&mut c, NOBODY).output().unwrap());
    untouched("man1", &victim, &before);
    run.fails_with(&format!(
        "error: {} is not the directory rdna1-patch made: another program replaced it (a symlink or another directory stands there) while the pages went in; nothing was written through it
help: stop whatever else writes in {} (under sudo, a directory another user owns is written as that user), then run this again",
        man1.display(),
        theirs.display()
    ));
}

/// `trust KEY` under sudo, the config in a directory of the user's
/// (`RDNA1_PATCH_CONFIG`), that directory swapped for a symlink once root
/// holds it open (`fsutil::write_atomic`, as the prefix's records and a
/// `--report` are written): the config goes into the directory held, as
/// its owner, nothing into root's.
#[test]
fn a_config_dir_swapped_under_sudo_trust_changes_nothing_of_roots() {
    if !root_for("trust's config raced under sudo") {
        return;
    }
    let sb = Sandbox::new();
    let victim = roots_only(&sb);
    let before = look(&victim);
    let theirs = sb.root.join("their-config");
    let conf = theirs.join("rdna1-patch");
    std::fs::create_dir_all(&conf).unwrap();
    chown(&theirs, NOBODY);
    let mut c = sb.cmd();
    c.args(["trust", &crate::trust::key(7)])
        .env("RDNA1_PATCH_CONFIG", conf.join("config.toml"))
        .env(
            "FAILPOINTS",
            swap_at("atomic-dir-opened", 0, &conf, &victim),
        );
    let run = Run::from(as_sudo_for(&mut c, NOBODY).output().unwrap());
    untouched("the config's directory", &victim, &before);
    let written = theirs.join("rdna1-patch.aside/config.toml");
    let m = std::fs::symlink_metadata(&written)
        .unwrap_or_else(|e| panic!("{}: {e}; {}", written.display(), run.stderr));
    assert_eq!((m.uid(), m.gid()), (NOBODY, NOBODY), "written as its owner");
    assert!(
        std::fs::read_to_string(&written)
            .unwrap()
            .contains(&crate::trust::key(7)),
        "{}",
        run.stderr
    );
}

/// The steps of the prefix's staging (`.rdna1-patch-staging`) and the
/// directory swapped at each, below the staging dir: after it is made,
/// after the library's directory is held, after the provenance's (then
/// the staged files are hashed, and moved into the prefix).
const PREFIX_STEPS: &[(&str, usize, &str)] = &[
    ("prefix-staging-made", 0, ""),
    ("atomic-dir-opened", 0, ""),
    ("atomic-dir-opened", 1, ""),
    ("atomic-dir-opened", 0, "share/rdna1-patch"),
];

/// `install --into-torch --in-place --prefix DIR` under sudo, DIR the
/// user's: the prefix's staging dir (or one below it) swapped for a
/// symlink to root's directory at each step: nothing of root's is created
/// or changed, torch is as it was, and the error names the swap.
#[test]
fn a_prefix_staging_dir_swapped_under_sudo_install_changes_nothing_of_roots() {
    let Some(python) = root_and_python_for_sudo("the prefix's staging raced under sudo") else {
        return;
    };
    each_step(PREFIX_STEPS, |(point, nth, rel)| {
        let sb = Sandbox::new();
        let torch =
            crate::in_place::torch_of(&sb, "2.6.0+rocm6.4", crate::in_place::HIP64, &["gfx1010"]);
        chown_tree(&sb.root.join("site"));
        std::fs::create_dir_all(&sb.prefix).unwrap();
        chown(&sb.prefix, NOBODY);
        let staging = sb.prefix.join(".rdna1-patch-staging");
        let dir = match rel {
            "" => staging.clone(),
            r => staging.join(sb.prefix.strip_prefix("/").unwrap()).join(r),
        };
        let victim = roots_only(&sb);
        let (before, torch_before) = (look(&victim), bytes_of(&torch.dir));
        let p = sb.prefix.display().to_string();
        let args = [
            "install",
            "--into-torch",
            "--in-place",
            "--profile",
            "rocm-6.4.3",
        ];
        let run = as_sudo(
            &sb,
            python,
            &[&args[..], &["--prefix", &p, "--detail"]].concat(),
            &swap_at(point, nth, &dir, &victim),
        );
        let what = format!("{point} #{nth} at {}", dir.display());
        untouched(&what, &victim, &before);
        same_tree(
            &format!("{what}: torch"),
            &torch_before,
            &bytes_of(&torch.dir),
        );
        fails_naming_the_symlink(&what, run, &dir);
    });
}

/// SECURITY.md's table of the places root writes in a user's place names,
/// for each, the test that races it (`module::test`, or a module whose
/// tests all do): every one it names exists; a row that names none says
/// it is not raced.
#[test]
fn securitys_table_names_an_existing_race_test_for_each_place() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("SECURITY.md")).unwrap();
    let rows: Vec<&str> = text
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("| where root writes in a user's place"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(rows.len() >= 10, "the table is gone: {rows:?}");
    for row in rows {
        let last = row.trim_end_matches('|').rsplit(" | ").next().unwrap();
        let named: Vec<&str> = last
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| {
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == ':')
            })
            .filter(|n| {
                std::fs::exists(
                    root.join("tests/e2e")
                        .join(format!("{}.rs", n.split("::").next().unwrap())),
                )
                .unwrap()
            })
            .collect();
        assert!(
            !named.is_empty() || last.starts_with("not raced"),
            "a row names no test that races it: {row}"
        );
        for n in named {
            let (module, test) = n.split_once("::").unwrap_or((n, ""));
            let file =
                std::fs::read_to_string(root.join(format!("tests/e2e/{module}.rs"))).unwrap();
            assert!(
                test.is_empty() || file.contains(&format!("fn {test}(")),
                "SECURITY.md names {n}, which is no test: {row}"
            );
        }
    }
}
